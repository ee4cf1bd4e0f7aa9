"""How a boxed server reaches its proxy: the proxy variables, the bridge's command lines, the deny-all route.

The bridge is ``_netbridge.py``, a script run inside the box. With an
allowlist it forwards to the worker's proxy (:mod:`.netroute`). With the
network off (bwrap), :func:`route_closed` gives the box a deny-all proxy of
its own instead (``_denyall.py``, also run inside the box): it answers every
request with a 403 and writes its request line to a FIFO the worker reads
here, then tells the reporter the launch was made under (:mod:`.denials`);
nothing in that box can reach the worker's sockets. Each deny-all proxy
writes ``READY TOKEN`` once it listens; the launching task expects it
(:func:`.denials.expect`), and the session host holds calls until then.

Light on purpose: a box with the network off gets the deny-all proxy on
every start, so this module is on the path of every sandboxed start, while
the proxy itself (:mod:`.netproxy`, :mod:`.netrequest`: about 10 ms of
imports) loads only where a server has an allowlist, or when a deny-all
report arrives.

Lifecycle: one report FIFO per reporter (a session host), in a private
folder under ``/tmp``, made at its first box's start and used by every
later one; :func:`release` closes it and removes the folder when the host
closes, :func:`close_all` when the worker ends. A worker killed outright
leaves the folder (``/tmp/lovia-mcp-deny-*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from . import denials

logger = logging.getLogger("lovia_mcp.netproxy")

# The port the bridge listens on inside the sandbox. The sandbox has a fresh
# network namespace, so any port is free there; 3128 is the customary proxy
# port, which reads well in a server's logs.
BRIDGE_PORT: Final = 3128

# The bridge script, run inside the sandbox with the standard library only.
BRIDGE_SCRIPT: Final = str(Path(__file__).with_name("_netbridge.py"))
# The deny-all proxy's script, run inside a box with the network off (the same).
DENYALL_SCRIPT: Final = str(Path(__file__).with_name("_denyall.py"))


def proxy_env(port: int = BRIDGE_PORT) -> dict[str, str]:
    """The variables that point a sandboxed server at the bridge on ``127.0.0.1:port``.

    Both spellings, since tools differ in which they read. Loopback names
    bypass the proxy: inside the sandbox they are the server's own loopback.
    ``NODE_USE_ENV_PROXY=1`` makes Node (22.21+, 24+) honour the variables in
    ``fetch`` and ``http``; older Node ignores it.
    """
    url = f"http://127.0.0.1:{port}"
    no_proxy = "localhost,127.0.0.1,::1"
    env = {"NODE_USE_ENV_PROXY": "1"}
    for name, value in (("http_proxy", url), ("https_proxy", url), ("all_proxy", url), ("no_proxy", no_proxy)):
        env[name] = value
        env[name.upper()] = value
    return env


def bridge_argv(
    argv: Sequence[str],
    *,
    socket_path: str,
    port: int = BRIDGE_PORT,
    python: str = sys.executable,
    script: str = BRIDGE_SCRIPT,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The argv that runs ``argv`` behind the bridge: put it after bwrap's ``--``.

    ``socket_path`` and ``script`` are paths as seen inside the sandbox.
    ``-I -S``: the bridge needs the standard library only, so neither the
    environment nor site-packages (``.pth`` files run code) touch it. With
    ``seccomp_fd``, the bridge installs the seccomp program read from that
    descriptor just before it executes ``argv`` (its own forwarder stays
    outside the filter, since it needs AF_UNIX sockets).
    """
    filtered = [] if seccomp_fd is None else ["--seccomp-fd", str(seccomp_fd)]
    return [python, "-I", "-S", script, "--port", str(port), "--socket", socket_path, *filtered, "--", *argv]


# Bound on one request line from a deny-all proxy (it cuts longer ones to
# 1 KiB): a line past it is malformed and dropped, and the reader keeps its
# buffer small whatever the box writes.
REPORT_LINE_MAX: Final = 2048

# The report FIFO's name in its folder (the folder is bound into the box read-only).
REPORT_NAME: Final = "denied"

# The box's side of the deny-all route: the shell runs the deny-all proxy
# in the background (so the server's start does not wait for a second
# interpreter) and becomes the server. $0: the interpreter, $1: the
# script, $2: the report FIFO; the rest is the server's argv. {token} names
# this box's proxy in its readiness line.
_CLOSED_SCRIPT: Final = (
    '"$0" -I -S "$1" --port {port} --report "$2" --ready {token} --parent $$ </dev/null >/dev/null & shift 2; exec "$@"'
)
# The line a deny-all proxy writes once it listens, before its token.
READY: Final = b"READY "

# One report FIFO per reporter (a session host): every generation's box writes into it.
_fifos: dict[denials.Reporter | None, _Reports] = {}


def route_closed(
    argv: list[str], env: dict[str, str], *, port: int = BRIDGE_PORT, python: str = sys.executable
) -> tuple[list[str], str]:
    """The network off (bwrap): a deny-all proxy inside the box, seen by the worker; sets ``env``.

    Returns ``argv`` behind a shell that starts ``_denyall.py`` beside the
    server, and the report FIFO, whose folder the box must bind read-only.
    The deny-all proxy only answers 403 and writes each request line to the
    FIFO: it holds no route anywhere, so the box's only network is still
    its own loopback. The server holds no descriptor of it; the FIFO is
    write-only to its owner, so a server can write to it (what it could ask
    the proxy anyway) but never read another's reports. ``port``: where the
    proxy listens (a test outside a box picks a free one). Its readiness is
    expected by the launching task (:func:`.denials.expect`).
    """
    report = denials.current()
    reports = _fifos.get(report)
    if reports is None:
        reports = _fifos[report] = _Reports(report)
    token = reports.expect()
    env.update(proxy_env(port))
    sh = shutil.which("sh", path="/usr/bin:/bin") or "/bin/sh"
    script = _CLOSED_SCRIPT.format(port=port, token=token)
    return [sh, "-c", script, python, DENYALL_SCRIPT, reports.path, *argv], reports.path


def release(report: denials.Reporter) -> None:
    """Close the report FIFO made for ``report`` (its host has closed) and remove its folder."""
    reports = _fifos.pop(report, None)
    if reports is not None:
        reports.close()


def close_all() -> None:
    """Close every report FIFO and remove the folders (the worker ends)."""
    for reports in list(_fifos.values()):
        reports.close()
    _fifos.clear()


class _Reports:
    """A report FIFO in a private folder, read in the event loop until :meth:`close`.

    The worker holds a write end of its own as well, so the reader never
    sees an end of file between two boxes.
    """

    def __init__(self, report: denials.Reporter | None) -> None:
        self._report = report
        self._buffer = b""
        self._discarding = False
        # Bridges started and not yet listening, by token.
        self._starting: dict[bytes, asyncio.Future[None]] = {}
        self._tokens = 0
        self.folder = tempfile.mkdtemp(prefix="lovia-mcp-deny-", dir="/tmp")
        self.path = f"{self.folder}/{REPORT_NAME}"
        self._fds: list[int] = []
        try:
            os.mkfifo(self.path, 0o600)
            self._fds.append(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            self._fds.append(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            # Write-only from now on: the box (same uid, no capability) cannot read the reports.
            os.chmod(self.path, 0o200)
            asyncio.get_running_loop().add_reader(self._fds[0], self._readable)
        except BaseException:
            self.close()
            raise

    def expect(self) -> str:
        """A token for the next box's deny-all proxy; its readiness is expected by the launching task."""
        self._tokens += 1
        token = str(self._tokens)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._starting[token.encode()] = ready
        ready.add_done_callback(lambda _f: self._starting.pop(token.encode(), None))
        denials.expect(ready)
        return token

    def close(self) -> None:
        for ready in list(self._starting.values()):
            ready.cancel()
        if self._fds:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._fds[0])
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        shutil.rmtree(self.folder, ignore_errors=True)

    def _readable(self) -> None:
        try:
            data = os.read(self._fds[0], 65536)
        except (BlockingIOError, IndexError):
            return
        lines = (self._buffer + data).split(b"\n")
        self._buffer = lines.pop()
        for line in lines:
            if self._discarding:
                self._discarding = False  # the end of a line too long to read
            else:
                self._line(line)
        if len(self._buffer) > REPORT_LINE_MAX:
            self._buffer = b""
            self._discarding = True

    def _line(self, line: bytes) -> None:
        if line.startswith(READY):
            ready = self._starting.get(line[len(READY) :])
            if ready is not None and not ready.done():
                ready.set_result(None)
            return
        # The box wrote it: parsed as strictly as the proxy parses a request.
        if len(line) > REPORT_LINE_MAX:
            return
        # Imported here: only a box that asked for something pays the parser's import.
        from .netrequest import Refusal, parse_head

        try:
            request = parse_head([line])
        except Refusal:
            return
        reason = "the network is off for this server"
        refused = denials.Refused("network_off", request.host, request.port, reason)
        logger.warning("sandbox refused %s (%s)", refused.target, reason)
        if self._report is not None:
            self._report(refused)


__all__ = [
    "BRIDGE_PORT",
    "BRIDGE_SCRIPT",
    "DENYALL_SCRIPT",
    "REPORT_LINE_MAX",
    "REPORT_NAME",
    "bridge_argv",
    "close_all",
    "proxy_env",
    "release",
    "route_closed",
]
