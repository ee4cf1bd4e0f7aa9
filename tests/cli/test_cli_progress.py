"""The status line of ``lovia-mcp``: shown on a terminal while it waits, never when piped.

The terminal is a real pseudo-terminal around a real ``python -m lovia_mcp``,
against a server that starts only when the test says so
(tests/servers/gated_server.py), so the wait is as long as the test needs,
with no timer in the server. MCP progress records (``lovia_mcp.progress``)
are checked on the handler itself.
"""

from __future__ import annotations

import io
import logging
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import PY, ROOT, SERVERS

from lovia_mcp.cli._progress import PROGRESS_LOGGER, Progress, describe, show_progress_records

pytestmark = pytest.mark.timeout(40)

GATED = str(SERVERS / "gated_server.py")
# Bound on each wait for the command; a normal run takes about a second.
RUN_TIMEOUT = 25.0
# Bound on reading what the command wrote to the terminal before it exited
# (already written: this only stops the read when nothing more comes).
DRAIN_TIMEOUT = 2.0


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A FIFO the server waits on, held open by the test (so no open blocks); write a line to release."""
    path = tmp_path / "gate"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)
    try:
        yield str(path), fd
    finally:
        os.close(fd)


def _command(fifo: str) -> list[str]:
    return [sys.executable, "-m", "lovia_mcp", "tools", "--name", "slow", "--", PY, GATED, fifo]


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "120", "TERM": "xterm"}


def _read_until(fd: int, wanted: bytes, deadline: float) -> bytes:
    """What the terminal got, up to and including ``wanted`` (or up to the deadline)."""
    seen = b""
    while wanted not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    return seen


class Terminal(NamedTuple):
    shown: bytes  # up to and including what was awaited, while the server waited on the gate
    waited: float  # seconds until it showed
    rest: bytes  # what the terminal got after the gate opened
    out: bytes  # stdout
    returncode: int


def _on_terminal(command: list[str], gate_fd: int, wanted: bytes) -> Terminal:
    """Run ``command`` with stderr on a terminal; once ``wanted`` shows there, open the gate and let it end."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=_env()
    )
    os.close(slave)
    try:
        start = time.monotonic()
        shown = _read_until(master, wanted, start + RUN_TIMEOUT)
        waited = time.monotonic() - start
        os.write(gate_fd, b"go\n")
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
        rest = _read_until(master, b"\x00never", time.monotonic() + DRAIN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return Terminal(shown, waited, rest, out, proc.returncode)


def test_on_a_terminal_the_command_shows_what_it_starts_and_the_seconds_in_place_then_erases_it(
    gate: tuple[str, int],
) -> None:
    fifo, gate_fd = gate
    # The status appears at once, then its seconds count up on the same line.
    seen = _on_terminal(_command(fifo), gate_fd, "starting slow… 1 s".encode())
    text = (seen.shown + seen.rest).decode(errors="replace")
    print(f"status line seen after {seen.waited:.2f} s: {seen.shown!r}")
    assert "starting slow… 0 s" in text and "starting slow… 1 s" in text, text
    # Updated in place: every redraw erases the line first; never a newline.
    assert "\r\x1b[Kstarting slow… 1 s" in text and "\n" not in text
    # Erased at the end: the last thing on the terminal is an empty line.
    assert text.endswith("\r\x1b[K"), text
    assert seen.returncode == 0 and "slow__echo" in seen.out.decode()


def test_piped_the_command_writes_no_progress_at_all(gate: tuple[str, int]) -> None:
    fifo, gate_fd = gate
    proc = subprocess.Popen(
        _command(fifo), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=_env()
    )
    try:
        # The server reads the gate only once it runs, i.e. once the open is
        # under way: releasing it after that means the wait was there to report.
        os.write(gate_fd, b"go\n")
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "slow__echo" in out.decode()
    assert err == b"", err


def _record(message: str, **attrs: object) -> logging.LogRecord:
    record = logging.LogRecord(PROGRESS_LOGGER, logging.INFO, __file__, 0, message, None, None)
    record.__dict__.update(attrs)
    return record


@pytest.mark.unit
def test_a_progress_record_reads_as_server_tool_percent_and_message() -> None:
    assert (
        describe(_record("downloading", server="npm", tool="install", progress=2, total=5))
        == "npm install: 40% downloading"
    )
    assert describe(_record("", server="npm", tool="install", progress=3.5, total=None)) == "npm install: 3.5"
    assert describe(_record("just text")) == "just text"


@pytest.mark.unit
def test_the_cli_handler_puts_progress_records_on_the_status_line_only_when_enabled() -> None:
    log = logging.getLogger(PROGRESS_LOGGER)
    level = log.level
    terminal, pipe = io.StringIO(), io.StringIO()
    handlers = [
        show_progress_records(Progress(terminal, enabled=True)),
        show_progress_records(Progress(pipe, enabled=False)),
    ]
    try:
        assert handlers[1] is None
        log.info("fetching", extra={"server": "git", "tool": "clone", "progress": 1.0, "total": 4.0})
    finally:
        for handler in handlers:
            if handler is not None:
                log.removeHandler(handler)
        log.setLevel(level)
    assert terminal.getvalue() == "\r\x1b[Kgit clone: 25% fetching"
    assert pipe.getvalue() == ""


PROGRESS_SERVER = str(SERVERS / "progress_server.py")


def test_on_a_terminal_a_running_call_shows_the_servers_own_progress_notifications(
    gate: tuple[str, int],
) -> None:
    # End to end: the server's notifications/progress travel through the
    # worker (coalesced), the agent's lovia_mcp.progress logger and the
    # CLI's handler onto the status line, while the call is still running.
    fifo, gate_fd = gate
    args = f'{{"steps": 2, "total": 4, "gate": "{fifo}"}}'
    command = [sys.executable, "-m", "lovia_mcp", "call", "report", args, "--name", "p", "--", PY, PROGRESS_SERVER]
    # The server blocks on the gate after its first notification: what
    # is on the terminal now was shown while the call ran.
    seen = _on_terminal(command, gate_fd, b"step 1")
    print(f"progress on the terminal after {seen.waited:.2f} s: {seen.shown!r}")
    assert b"p report: 25% step 1" in seen.shown, seen.shown
    assert (seen.shown + seen.rest).endswith(b"\r\x1b[K")  # erased when the call ended
    assert seen.returncode == 0 and "done" in seen.out.decode(), seen.out


def test_the_status_line_fits_the_width_of_stderrs_terminal_when_stdout_is_piped(gate: tuple[str, int]) -> None:
    import fcntl
    import struct
    import termios

    fifo, gate_fd = gate
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    # No --name: the label is the command line, longer than 40 columns.
    command = [sys.executable, "-m", "lovia_mcp", "tools", "--", PY, GATED, fifo]
    env = {k: v for k, v in _env().items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    try:
        # The label fills the 40 columns: the line is cut with "…" before its
        # seconds (waiting for "… 0 s" waited out RUN_TIMEOUT every run).
        shown = _read_until(master, "…".encode(), time.monotonic() + RUN_TIMEOUT)
        os.write(gate_fd, b"go\n")
        proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    drawn = [line for line in shown.decode(errors="replace").split("\r\x1b[K") if line]
    assert drawn, shown
    assert all(len(line) < 40 for line in drawn), drawn
