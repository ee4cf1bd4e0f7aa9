"""The manual's examples run: every Python block of docs/*.md, and every console command whose output is shown.

What a block is, how a block that cannot run here is marked, and how
output is matched is in tests/project/docblocks.py. The README's blocks are
tests/project/test_readme.py's.

- **Python.** A page's blocks run in order in one fresh process
  (tests/project/docs_runner.py), in a folder of the page's own holding
  the files they name (``FIXTURES``); a model string is served by lovia's
  ``ScriptedProvider``. An ``output`` block must be what the block before
  it printed.
- **Console.** Each block is a session in a fresh folder: ``$ cat FILE``
  with lines after it writes FILE, and every other command shown with
  output runs in bash there (``lovia-mcp`` and ``python`` from this
  environment) and must print what is shown, stdout and stderr together.
  Package servers are locked offline, as in
  tests/lock/test_lock_thirdparty.py: pip and npm read
  ``.cache/thirdparty`` (a session that needs what is absent skips).
- **Synopses.** A block giving a subcommand's synopsis (``lovia-mcp serve
  --config FILE [--lock FILE] ...``) names every option its ``--help``
  lists (``-h`` and ``-v`` aside) and no other.
- **Marks.** A ``<!-- not run: reason -->`` block still has to parse (a
  fragment may use ``await``: it stands inside an async function).

Why not pytest-examples (the maintained tool for this): it reads only
Python blocks, runs them in the test's own process (these start workers
and register model providers, which a fresh process keeps apart, as a
reader's script is), marks blocks in the fence's info string rather than a
comment GitHub hides, and brings black. The extractor here is a page.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from docblocks import (
    NPM_CACHE,
    README,
    ROOT,
    WHEELS,
    Block,
    ReadmeLocked,
    Step,
    blocks,
    matches,
    offline_env,
    padded,
    readme_locked,
    steps,
)

# A page's blocks run in one process: a few servers' starts, a crash and a
# restart, and for the lock examples pip's install of mcp-server-time's
# wheels or npm's of server-everything's tree (tens of seconds on a loaded
# 2-core machine).
TIMEOUT = 300
# Bound on one page's process or one command: a hang fails that test, not the session.
COMMAND_TIMEOUT = 240.0

PAGES = sorted((ROOT / "docs").glob("*.md"))
RUNNER = Path(__file__).with_name("docs_runner.py")
# What a model named by a string answers in the pages' runs (none of them calls a tool through it).
TURNS = [["text", "A scripted answer."]]


def needs_what_is_absent(text: str) -> str | None:
    """Why a session that installs package servers cannot run here, or ``None``."""
    if "uvx" in text and not WHEELS.is_dir():
        return ".cache/thirdparty has no wheels: run `bash scripts/thirdparty.sh`"
    if "npx" in text and (shutil.which("npm") is None or not NPM_CACHE.is_dir()):
        return "no npm, or .cache/thirdparty has no npm-cache: run `bash scripts/thirdparty.sh`"
    return None


def readme_config(folder: Path, env: dict[str, str], locked: Callable[[], ReadmeLocked]) -> None:
    """The README's ``mcp.json`` and its lock (the session's, its cache included)."""
    done = locked()
    assert done.printed.returncode == 0, done.printed.stdout
    for name in (done.config, done.config.replace(".json", ".lock.json")):
        shutil.copy(done.folder / name, folder / name)
    env["LOVIA_MCP_CACHE_DIR"] = done.env["LOVIA_MCP_CACHE_DIR"]


def config_files(folder: Path, env: dict[str, str], locked: Callable[[], ReadmeLocked]) -> None:
    """The page's own ``mcp.json``, as ``.mcp.json`` and ``.vscode/mcp.json``, with the variable it names."""
    [config, *_] = [b for b in blocks(ROOT / "docs" / "config-files.md") if b.lang == "json"]
    (folder / ".vscode").mkdir()
    for path in (folder / ".mcp.json", folder / ".vscode" / "mcp.json"):
        path.write_text(config.text)
    env["API_TOKEN"] = "a-token"


# The files (and variables) a page's Python blocks name, made in the page's folder before they run.
FIXTURES: dict[str, Callable[[Path, dict[str, str], Callable[[], ReadmeLocked]], None]] = {
    "config-files.md": config_files,
    "without-a-model.md": readme_config,
}


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python" and b.not_run is None]


def sessions(page: Path) -> list[Block]:
    """The console blocks of ``page`` with at least one command whose output is shown."""
    return [
        b
        for b in blocks(page)
        if b.lang == "console" and b.not_run is None and any(s.shown and not is_cat(s) for s in steps(b))
    ]


def is_cat(step: Step) -> bool:
    return step.command.startswith("cat ") and len(step.command.split()) == 2


@pytest.mark.unit
@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_page_is_runnable_or_says_why_not(page: Path) -> None:
    found = blocks(page)
    for block in found:
        if block.not_run is not None:
            assert block.lang in ("python", "console"), f"{block.where}: only Python and console blocks run"
        if block.lang == "python":
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.not_run else 0
            compile(padded(block), str(page), "exec", flags=flags)  # a SyntaxError names the page's line
        elif block.lang == "console":
            steps(block)  # output before any `$ command` is an error
        elif block.lang == "output":
            before = [b for b in found if b.output is block]
            assert before and before[0].not_run is None, (
                f"{block.where}: an output block follows a Python block that runs"
            )


@pytest.mark.unit
def test_no_page_counts_the_suites_tests() -> None:
    # A count of tests is stale at the next test and no script writes it; `pytest --collect-only -q` counts.
    counted = [
        f"{page.name}:{n}: {line.strip()}"
        for page in [README, *PAGES]
        for n, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1)
        if re.search(r"\b\d[\d,]* (?:[a-z-]+ )?tests\b", line)
    ]
    assert counted == []


@pytest.mark.unit
def test_the_block_reader_sees_marks_outputs_sessions_and_wildcards(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- not run: needs a GPU -->\n\n```python\nawait go()\n```\n\n"
        "```python\nprint(1)\n```\n\n```output\n1\n```\n\n"
        "```console\n$ cat a.json\n{}\n$ lovia-mcp check\nNAME  OPEN\nx     0.16 s\n$ true\n```\n"
    )
    marked, printing, shown, session = blocks(page)

    assert (marked.not_run, marked.line, marked.first_line) == ("needs a GPU", 5, 6)
    assert printing.output is shown and shown.text == "1" and printing.not_run is None
    assert [(s.command, s.shown) for s in steps(session)] == [
        ("cat a.json", ["{}"]),
        ("lovia-mcp check", ["NAME  OPEN", "x     0.16 s"]),
        ("true", []),
    ]
    assert padded(printing).split("\n")[printing.first_line - 1] == "print(1)"
    assert matches(["NAME  OPEN", "x     0.16 s"], ["NAME  OPEN", "x     12.07 s"])
    assert not matches(["NAME  OPEN", "x     0.16 s"], ["NAME  OPEN", "y     0.16 s"])
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"]) and matches(["a", "...", "z"], ["a", "z"])
    assert not matches(["a", "...", "z"], ["a", "b"])
    assert matches(["hint: fix PATH; ..."], ["hint: fix PATH; the PATH is /bin"])
    assert not matches(["1", "2"], ["1", "2", "3"])
    with pytest.raises(ValueError, match="before any"):
        steps(Block(page, 1, "console", "output first\n$ cmd"))


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=lambda p: p.name)
def test_the_python_blocks_of_the_page_run_and_print_what_it_shows(
    page: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    code = runnable(page)
    env = offline_env(tmp_path)
    if page.name in FIXTURES:
        FIXTURES[page.name](tmp_path, env, lambda: readme_locked(tmp_path_factory))
    spec, report = tmp_path / "spec.json", tmp_path / "report.json"
    spec.write_text(
        json.dumps(
            {
                "blocks": [{"page": str(page), "line": b.line, "source": padded(b)} for b in code],
                "turns": TURNS,
                "report": str(report),
            }
        )
    )

    ran = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )

    assert ran.returncode == 0, ran.stderr
    printed = json.loads(report.read_text())["outputs"]
    for block, output in zip(code, printed, strict=True):
        if block.output is not None:
            shown = block.output.text.split("\n")
            assert matches(shown, output.rstrip("\n").split("\n")), f"{block.where} printed:\n{output}"


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize(
    "session", [b for p in PAGES for b in sessions(p)], ids=lambda b: b.where if isinstance(b, Block) else None
)
def test_the_console_session_prints_what_it_shows(session: Block, tmp_path: Path) -> None:
    absent = needs_what_is_absent(session.text)
    if absent:
        pytest.skip(absent)
    env = offline_env(tmp_path)
    for step in steps(session):
        if is_cat(step):
            (tmp_path / step.command.split()[1]).write_text("\n".join(step.shown) + "\n")
            continue
        if not step.shown:
            continue
        ran = subprocess.run(
            ["bash", "-c", step.command],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        assert matches(step.shown, ran.stdout.rstrip("\n").split("\n")), (
            f"{session.page.name}:{step.line}: $ {step.command}\nprinted:\n{ran.stdout}"
        )


SYNOPSIS = re.compile(r"^(?:\$ )?lovia-mcp (?P<command>[a-z]+) (?=.*\[)", re.MULTILINE)
FLAG = re.compile(r"(?<![\w-])--?[a-z][a-z-]*")


def synopses() -> list[tuple[Block, str]]:
    """The blocks that give a subcommand's synopsis (``lovia-mcp serve --config FILE [--lock FILE] ...``)."""
    return [(b, m["command"]) for p in PAGES for b in blocks(p) if (m := SYNOPSIS.match(b.text))]


@pytest.mark.parametrize(("block", "command"), synopses(), ids=lambda x: x.where if isinstance(x, Block) else x)
def test_a_synopsis_names_every_option_the_commands_help_lists_and_no_other(block: Block, command: str) -> None:
    helped = subprocess.run(
        ["lovia-mcp", command, "--help"],
        env=offline_env(Path(".")),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert helped.returncode == 0, helped.stderr
    listed = set(FLAG.findall("\n".join(re.findall(r"^  (-.*?)(?:  |$)", helped.stdout, re.MULTILINE))))

    shown = set(FLAG.findall(block.text))

    assert shown <= listed, f"{block.where}: options that `{command} --help` does not list"
    assert listed - {"-h", "--help", "-v", "--verbose"} <= shown, f"{block.where}: options missing"
