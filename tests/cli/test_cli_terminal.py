"""What a hostile server says reaches the user's terminal escaped, never as control sequences.

``lovia-mcp tools`` and ``call`` are how a user vets a server they do not
trust yet; tests/servers/ansi_server.py puts a title change, a screen clear,
a ``\\r`` and a fake prompt, a C1 CSI, backspaces, DEL, a reset and a
right-to-left override into every word it chooses. Run as a user runs the
command (``python -m lovia_mcp`` in a subprocess), nothing in stdout or
stderr may be a control character but ``\\n`` and ``\\t``, and the JSON
output must carry the server's words exactly.

Without the escaping (lovia_mcp/cli/_terminal.py's functions made the
identity), every test that runs the command fails: the table, the results,
the error messages with their stderr tail and ``-v``'s log lines all carried
the raw sequences, and ``--json`` carried U+009B, DEL and U+202E raw.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import CLI_TIMEOUT, PY, ROOT, SERVERS

from lovia_mcp.cli._progress import PROGRESS_LOGGER, Progress, describe
from lovia_mcp.cli._terminal import terminal_block, terminal_json, terminal_line

pytestmark = pytest.mark.timeout(60)

ANSI = str(SERVERS / "ansi_server.py")
SERVER = ["--", PY, ANSI]
# ansi_server.HOSTILE (the server is a script, not a module to import): the
# JSON assertions below fail if the two ever differ.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\r$ sudo true \x9b31mred\x9b0m\x08\x08\x7f\x1bc\u202eevil"
# What must never reach a terminal raw: C0 but newline and tab, DEL, C1, the
# bidirectional overrides and isolates.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# How HOSTILE's title change reads once escaped.
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J"


def run_all(*invocations: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """``python -m lovia_mcp ARGS`` for each, at once, each as :func:`run` runs it."""
    with ThreadPoolExecutor(len(invocations)) as pool:
        return list(pool.map(lambda args: run(*args), invocations))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, its output read as the terminal gets it.

    helpers.lovia_mcp reads text with universal newlines, which would turn a
    raw ``\r`` into ``\n`` before any check saw it: here the bytes are
    decoded as UTF-8 and nothing else.
    """
    done = subprocess.run(
        [sys.executable, "-m", "lovia_mcp", *args],
        capture_output=True,
        timeout=CLI_TIMEOUT,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120"},
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def assert_escaped(r: subprocess.CompletedProcess[str]) -> None:
    for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        raw = sorted(set(RAW_CONTROL.findall(text)))
        assert not raw, f"{r.args[3:5]}: raw {raw} on {name}: {text[:300]!r}"


def test_tools_shows_a_hostile_servers_names_descriptions_and_parameters_escaped() -> None:
    table, as_json = run_all(["tools", *SERVER], ["tools", "--json", *SERVER])
    for r in (table, as_json):
        assert r.returncode == 0, r.stderr
        assert_escaped(r)
    assert f"Lists {SHOWN}" in table.stdout and "\\u009b31mred" in table.stdout and "\\u202eevil" in table.stdout
    assert f"q{SHOWN}" in table.stdout  # the parameter's name
    assert "\nshow\n    Every kind of result, " in table.stdout  # one block per tool (the name is 60 wide)
    [vet] = [t for t in json.loads(as_json.stdout) if t["name"].startswith("vet")]
    assert vet["description"] == f"Lists {HOSTILE} only."
    prop = vet["parameters"]["properties"][f"q{HOSTILE}"]
    assert prop == {"type": f"string{HOSTILE}", "description": HOSTILE, "default": HOSTILE}
    assert vet["annotations"] == {"title": HOSTILE}


def test_call_shows_a_hostile_result_error_message_and_stderr_escaped(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "ok": {"command": PY, "args": [ANSI]},
                    "dead": {"command": PY, "args": [ANSI, "--die-at-start"]},
                }
            }
        )
    )
    shown, as_json, refused, crashed, chatty, dead, checked = run_all(
        ["call", "show", *SERVER],
        ["call", "show", "--json", *SERVER],
        ["call", "refuse", *SERVER],
        ["call", "crash", *SERVER],
        ["call", "chatty", "-v", *SERVER],
        ["tools", "--", PY, ANSI, "--die-at-start"],
        ["check", "--config", str(config)],
    )
    for r in (shown, as_json, refused, crashed, chatty, dead, checked):
        assert_escaped(r)
    assert shown.returncode == 0, shown.stderr
    # The result's own line break and tab are kept; everything else is shown.
    assert shown.stdout.startswith(f"text {SHOWN}")
    assert "\\r$ sudo true" in shown.stdout and "\n\tsecond line\n" in shown.stdout
    assert f"[image: image/png{SHOWN}" in shown.stdout and f"[resource link: file:///{SHOWN}" in shown.stdout
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
    assert result["content"][0]["text"] == f"text {HOSTILE}\n\tsecond line"
    assert result["content"][1]["mime_type"] == f"image/png{HOSTILE}"
    assert result["structured_content"] == {"k": HOSTILE}
    assert refused.returncode == 3 and f"refused {SHOWN}" in refused.stderr, refused.stderr
    # The stderr tail in the hint: one escaped line per server line.
    assert crashed.returncode == 3 and f"    first {SHOWN}" in crashed.stderr, crashed.stderr
    assert f"    second {SHOWN}" in crashed.stderr
    assert chatty.returncode == 0 and chatty.stdout == "done\n", chatty.stderr
    assert f"INFO: first {SHOWN}" in chatty.stderr
    assert dead.returncode == 3 and f"starting {SHOWN}" in dead.stderr, dead.stderr
    assert checked.returncode == 3 and f"starting {SHOWN}" in checked.stderr, checked.stderr
    [dead_row] = [line for line in checked.stdout.splitlines() if line.startswith("dead")]
    assert "failed" in dead_row


@pytest.mark.unit
def test_the_status_line_shows_a_hostile_progress_message_escaped() -> None:
    stream = io.StringIO()
    progress = Progress(stream, enabled=True)
    record = logging.LogRecord(PROGRESS_LOGGER, logging.INFO, __file__, 0, "progress", None, None)
    record.server, record.tool, record.progress, record.total = "ansi", "show", 1, 2
    record.progress_message = HOSTILE
    progress.update(describe(record))
    # The line's own erase ("\r" ESC "[K") is the one sequence it writes.
    drawn = stream.getvalue()
    assert drawn.startswith("\r\x1b[K")
    assert not RAW_CONTROL.findall(drawn.replace("\r\x1b[K", "")), repr(drawn)
    assert SHOWN in drawn


@pytest.mark.unit
def test_escapes_keep_lines_and_tabs_in_a_block_and_json_keeps_every_value() -> None:
    text = f"a\tb\nc{HOSTILE}\udc00"
    assert terminal_line(text).count("\n") == 0 and "a\\tb\\nc" in terminal_line(text)
    block = terminal_block(text)
    assert block.startswith("a\tb\nc\\x1b]0;") and block.endswith("\\udc00")
    assert not RAW_CONTROL.findall(block.replace("\n", "").replace("\t", ""))
    # Ordinary text is left alone: accents, CJK, emoji with a zero-width joiner, a no-break space.
    plain = "café 東京 👩\u200d💻 10\u00a0km"
    assert terminal_line(plain) == terminal_block(plain) == plain
    value = {"k\x9b": [text, "\x7f", "\u2066"], "n": 1}
    dumped = terminal_json(value)
    assert json.loads(dumped) == value
    assert not RAW_CONTROL.findall(dumped.replace("\n", ""))
    assert "\ud800" not in dumped and "\\udc00" in dumped
