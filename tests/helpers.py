"""The tests' shared functions and constants, each defined once.

``conftest.py`` holds the fixtures and hooks (the leak check, the
``enforcement`` parametrisation); everything a test module imports by name
lives here:

- paths: ``ROOT``, ``SERVERS``, ``RAW_SERVER``, ``ESCAPE_SERVER``, ``DOCTOR_PROBES``, ``SUP_SERVER``, ``PY``;
- servers: ``raw_args()``, ``raw()`` (the raw JSON-RPC test server as a
  config), ``RAW_TOOLS``, ``copy_raw_server()``; ``sup()`` (the supervision server); ``EscapePlace`` (what the hostile escape server
  aims at, and that server as a config);
- ``pid_of()``: the pid of the raw server answering a connection;
- a real lovia ``Agent`` offline: ``ISOLATIONS`` (run a test in both
  isolation modes), ``Model``, ``drive()``, ``results()``, ``outputs()``;
- test HTTP servers: ``serving()`` (an MCP server), ``LocalHTTP`` (a plain
  one on a loopback address, counting what reaches it); the allowlist proxy:
  ``exchange()``, ``bounded()``; the command: ``lovia_mcp()``,
  ``lovia_mcp_all()``, ``error_of()``;
- ``limit_hit()``: the error a call over a ``Limits`` bound ends with;
- processes: ``run()``, ``end_process()``, ``pid_alive()``, ``wait_gone()``, ``alive_after()``,
  ``live_descendants()``, ``register_shared()``, ``leftover_cgroups()``;
  descriptors: ``agent_fds()`` (the agent's own, the forkserver's idle
  workers' left out), ``settled()`` (a count once it is back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self, TypeVar

import psutil
import pytest
from lovia import Agent, Runner
from lovia.runtime.result import RunResult
from lovia.testing import ScriptedProvider, text
from lovia.transcript import ToolResultEntry
from lovia_mcp_worker.containment import cgroup_layout
from lovia_mcp_worker.wire.messages import HEADER, encoder

from lovia_mcp import MCP, MCPError, MCPServer, MCPServerStdio, Sandbox
from lovia_mcp.config._isolation import ISOLATIONS as ISOLATION_MODES

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "tests" / "servers"
RAW_SERVER = str(SERVERS / "raw_server.py")
ESCAPE_SERVER = str(SERVERS / "escape_server.py")
# What escape_server.py's probes load their helpers from (tests/servers/escape_probes.py).
DOCTOR_PROBES = str(ROOT / "lovia_mcp" / "doctor" / "probes.py")
SUP_SERVER = str(SERVERS / "sup_server.py")
PY = sys.executable

# Poll period while waiting, against a deadline, for processes to exit: an
# exit by another process's hand has no event this process can wait on.
POLL = 0.01
# Bound on waiting for one process to exit (wait_gone): a worker or server
# told to go is gone in well under a second; five covers a loaded machine.
GONE_WAIT = 5.0

# Importing the SDK and starting uvicorn takes about a second; on a loaded
# machine several. Past this a test HTTP server fails rather than hang the session.
SERVER_READY_WAIT = 30.0
# How long a test HTTP server gets to exit on SIGTERM before SIGKILL.
SERVER_EXIT_WAIT = 5.0

# Bound on one ``lovia-mcp`` command; a normal one takes about a second
# (interpreter, worker, server), a broken build must not hang the suite.
CLI_TIMEOUT = 25.0

# Run a test once per isolation mode.
ISOLATIONS = pytest.mark.parametrize("isolation", ISOLATION_MODES)

# Every tool tests/servers/raw_server.py lists (without its flags).
RAW_TOOLS = frozenset(
    {
        "echo",
        "add",
        "fail",
        "big",
        "mixed",
        "long",
        "hang",
        "exit",
        "signal",
        "stderr_then_exit",
        "garbage",
        "flood",
        "chatty",
        "alloc",
        "spawn",
        "burn",
        "spike",
        "pid",
        "cwd",
        "counter",
        "ping_client",
        "alloc_fast",
        "fork_storm",
        "kill_parent",
        "answer_if_exists",
        "escape",
    }
)

T = TypeVar("T")

_shared_pids: set[int] = set()


def run(coro: Awaitable[T]) -> T:
    """Run a coroutine on a fresh event loop (tests are plain functions)."""
    return asyncio.run(coro)  # type: ignore[arg-type]


# Bound on a test's asynchronous part when everything it does is on the
# loopback (the allowlist proxy's tests): well under a second each, with a
# margin for loaded shared machines.
LOOPBACK_TEST_WAIT = 20.0


def bounded(coro: Awaitable[T]) -> T:
    """:func:`run`, bounded by :data:`LOOPBACK_TEST_WAIT`."""
    return run(asyncio.wait_for(coro, LOOPBACK_TEST_WAIT))


class LoopbackServer:
    """A TCP server on a loopback address; its connections' handlers (:meth:`serve`) are cancelled at exit."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self.tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self.serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.tasks.discard(task)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class LocalHTTP(LoopbackServer):
    """An HTTP server on a loopback address that counts the connections it accepts.

    It keeps each request's head (``requests``: its lines) and answers
    ``answer(lines)`` (by default the request line it saw). A path starting
    with ``/hold`` is not answered: the server reports it on ``holding`` and
    keeps the connection until the other end closes it, then reports it on
    ``ended``.
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, answer: Callable[[list[str]], str] | None = None
    ) -> None:
        super().__init__(host, port)
        self.answer = answer or (lambda lines: f"upstream saw: {lines[0]}\n")
        self.accepted = 0
        self.requests: list[list[str]] = []
        self.holding: asyncio.Queue[str] = asyncio.Queue()
        self.ended: asyncio.Queue[str] = asyncio.Queue()

    @property
    def paths(self) -> list[str]:
        """The path of each request, in order."""
        return [lines[0].split(" ")[1] for lines in self.requests]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")[:-2]
        self.requests.append(lines)
        path = lines[0].split(" ")[1]
        if path.startswith("/hold"):
            await self.holding.put(path)
            while await reader.read(65536):
                pass
            await self.ended.put(path)
            return
        body = self.answer(lines).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()


class LocalUpstream(LoopbackServer):
    """A corporate proxy stand-in on a loopback address: it answers ``CONNECT name:port`` with a tunnel to ``target``.

    Whatever name is asked for (no resolver is involved), the tunnel leads
    to ``target``'s port on 127.0.0.1. It keeps each CONNECT's head
    (``requests``); ``answer`` is the status line it gives (a refusing proxy:
    ``"HTTP/1.1 403 Forbidden"``), and no tunnel follows a refusal.
    """

    def __init__(self, target: int, answer: str = "HTTP/1.1 200 Connection established") -> None:
        super().__init__()
        self.target = target
        self.answer = answer
        self.requests: list[list[str]] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head.decode("latin-1").split("\r\n")[:-2])
        writer.write(self.answer.encode() + b"\r\n\r\n")
        await writer.drain()
        if not self.answer.split(" ")[1].startswith("2"):
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)

        async def pump(a: asyncio.StreamReader, b: asyncio.StreamWriter) -> None:
            while data := await a.read(65536):
                b.write(data)
                await b.drain()
            if b.can_write_eof():
                b.write_eof()

        try:
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        finally:
            up_writer.close()


async def exchange(sock_path: str, request: bytes) -> bytes:
    """Send ``request`` to the proxy's unix socket, end the sending side, read everything until EOF."""
    reader, writer = await asyncio.open_unix_connection(sock_path)
    try:
        writer.write(request)
        await writer.drain()
        writer.write_eof()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def script_json(code: str, timeout: float = 50) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (it must exit 0); what it printed, as JSON (printed for the log too)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    seen: dict[str, Any] = json.loads(out.stdout)
    print(seen)
    return seen


def frame(msg: Any) -> bytes:
    """``msg`` as a frame on the wire (its length, then its msgpack), as either side writes it."""
    body = encoder().encode(msg)
    return HEADER.pack(len(body)) + body


def raw_args(*flags: str) -> list[str]:
    return [RAW_SERVER, *flags]


def copy_raw_server(path: Path) -> None:
    """raw_server.py copied to ``path``, with the loop it imports (``servers/rawloop.py``) beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(RAW_SERVER, path)
    shutil.copy(SERVERS / "rawloop.py", path.parent / "rawloop.py")


def raw(isolation: str | None = None, *flags: str, **options: Any) -> MCPServerStdio:
    """The raw JSON-RPC test server (``tests/servers/raw_server.py``) as a config.

    Named ``raw`` unless ``name=`` says otherwise (``name=None``: no prefix);
    ``isolation=None`` takes the default.
    """
    options.setdefault("name", "raw")
    return MCPServerStdio(command=PY, args=raw_args(*flags), isolation=isolation, **options)  # type: ignore[arg-type]


def sup(isolation: str | None = None, **options: Any) -> MCPServerStdio:
    """The supervision test server (``tests/servers/sup_server.py``), named ``sup``, never reconnecting.

    Its greedy tools never answer, so a test sees the supervisor's verdict,
    not a reconnect hiding it.
    """
    options.setdefault("auto_reconnect", False)
    return MCPServerStdio(command=PY, args=[SUP_SERVER], name="sup", isolation=isolation, **options)  # type: ignore[arg-type]


class Model(ScriptedProvider):
    """A ScriptedProvider that also records the tool schemas offered on each turn."""

    def __init__(self, *script: Any) -> None:
        super().__init__(list(script))
        self.offered: list[dict[str, Any]] = []

    async def stream(self, entries: Any, *, tools: Any = None, **kw: Any) -> Any:
        self.offered.append({t["function"]["name"]: t["function"] for t in tools or []})
        async for delta in super().stream(entries, tools=tools, **kw):
            yield delta


async def drive(plugin: Any, *script: Any, **agent_options: Any) -> tuple[RunResult, Model]:
    """Run an agent through ``script`` then a final "done"; ``plugin`` may be a bare server."""
    if isinstance(plugin, MCPServer):
        plugin = MCP(plugin)
    model = Model(*script, text("done"))
    agent = Agent(name="tester", model=model, plugins=[plugin], **agent_options)
    result = await Runner.run(agent, "go")
    assert result.output == "done"
    return result, model


async def pid_of(conn: Any, timeout: float | None = None) -> int:
    """The pid of the raw test server answering ``conn`` (its ``pid`` tool)."""
    reply = await conn.call_tool("pid", timeout=timeout)
    return int(json.loads(str(reply))["pid"])


def results(result: RunResult) -> list[ToolResultEntry]:
    return [e for e in result.entries if isinstance(e, ToolResultEntry)]


def outputs(result: RunResult) -> list[str]:
    return [e.output for e in results(result)]


def lovia_mcp(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``lovia-mcp`` command as a user runs it (``python -m lovia_mcp``), bounded."""
    return subprocess.run(
        [sys.executable, "-m", "lovia_mcp", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
    )


def lovia_mcp_all(*invocations: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Independent invocations at once (each is mostly interpreter start-up)."""
    with ThreadPoolExecutor(len(invocations)) as pool:
        return list(pool.map(lambda args: lovia_mcp(*args), invocations))


def error_of(r: subprocess.CompletedProcess[str]) -> str:
    """The command's error message; asserts it is a message, not a traceback."""
    assert "Traceback" not in r.stderr, r.stderr
    assert "lovia-mcp" in r.stderr and "error: " in r.stderr, r.stderr
    return r.stderr


# --------------------------------------------------------------------------- #
# Processes
# --------------------------------------------------------------------------- #


def register_shared(pid: int) -> None:
    """Exempt a session-scoped process (and its descendants) from the leak check."""
    _shared_pids.add(pid)


def _shared_helper_pids() -> set[int]:
    """lovia-mcp's forkserver: one per agent process, shared by design."""
    from lovia_mcp.client.forkserver import helper_pids

    return helper_pids()


def exempt_pids() -> set[int]:
    """The processes the leak check leaves alone: shared ones and the forkserver."""
    out = set(_shared_pids)
    for pid in list(_shared_pids):
        try:
            out.update(p.pid for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    return out | _shared_helper_pids()


def reap_zombies() -> None:
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for p in children:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, OSError):
            pass


def live_descendants() -> list[psutil.Process]:
    reap_zombies()
    exempt = exempt_pids()
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid in exempt or p.status() == psutil.STATUS_ZOMBIE:
                continue
            out.append(p)
        except psutil.Error:
            continue
    return out


def is_alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {' '.join(p.cmdline())[:120]}"
    except psutil.Error:
        return str(p.pid)


def pid_alive(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.Error:
        return False


def wait_gone(pid: int) -> None:
    """Wait (at most ``GONE_WAIT``) for ``pid`` to exit; already gone is fine."""
    try:
        psutil.wait_procs([psutil.Process(pid)], timeout=GONE_WAIT)
    except psutil.NoSuchProcess:
        pass


async def alive_after(pids: list[int], within: float) -> tuple[list[int], float]:
    """Wait up to ``within`` seconds for ``pids`` to exit (zombies count as gone).

    Returns the pids still alive and the time taken. Async, so that a server
    hosted in this event loop (``isolation="none"``) is torn down meanwhile.
    """
    started = time.monotonic()
    deadline = started + within
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive, time.monotonic() - started
        await asyncio.sleep(POLL)


def alive_after_sync(pids: list[int], within: float) -> tuple[list[int], float]:
    """:func:`alive_after` outside an event loop."""
    return asyncio.run(alive_after(pids, within))


def agent_fd_links() -> dict[int, str]:
    """This process's open descriptors and what each is, less the idle workers' sockets.

    The forkserver keeps a pool of idle workers of varying size (two, up to
    five after bursts of opens), each with two sockets in the agent: shared
    by every connection, not any one's. What a descriptor is (its
    ``/proc/self/fd`` link) says what a count that changed is made of.
    """
    from lovia_mcp.client.forkserver import process_forkserver as fs

    fs.idle_pids()  # reads the pool's announcements
    idle = {s.fileno() for pair in fs._idle.values() if pair for s in pair}  # noqa: SLF001
    links = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in idle:
            continue
        try:
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since listed: the listing's own descriptor, or one closing on another thread
            continue
    return links


def agent_fds() -> int:
    """How many descriptors this process has open, less the idle workers' sockets (see :func:`agent_fd_links`)."""
    return len(agent_fd_links())


def fd_change(before: dict[int, str], after: dict[int, str]) -> str:
    """What differs between two :func:`agent_fd_links`: descriptors gone, and come."""
    gone = {fd: link for fd, link in before.items() if after.get(fd) != link}
    came = {fd: link for fd, link in after.items() if before.get(fd) != link}
    return f"gone {gone}, came {came}"


async def settled(count: Callable[[], int], before: int, within: float) -> int:
    """``count()`` once it is back to ``before``, or when ``within`` seconds have passed.

    Async, so that what closes in the background on this loop (a lost
    worker's descriptors) goes on meanwhile.
    """
    deadline = time.monotonic() + within
    while (now := count()) != before and time.monotonic() < deadline:
        await asyncio.sleep(POLL)
    return now


@contextlib.contextmanager
def serving(*command: str) -> Iterator[str]:
    """Run a test HTTP MCP server for a fixture's scope; yields its ``/mcp`` URL.

    The server prints ``PORT <n>`` once it serves; it is exempt from the leak
    check (it outlives single tests) and is terminated at the end.
    """
    proc = subprocess.Popen([PY, *command], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    register_shared(proc.pid)
    try:
        yield f"http://127.0.0.1:{_read_port(proc, os.path.basename(command[0]))}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(SERVER_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(SERVER_EXIT_WAIT)
        assert proc.stdout is not None
        proc.stdout.close()


def _read_port(proc: subprocess.Popen[bytes], name: str) -> int:
    """Wait, bounded, for the ``PORT <n>`` line the server prints once it serves."""
    assert proc.stdout is not None
    deadline = time.monotonic() + SERVER_READY_WAIT
    fd = proc.stdout.fileno()
    buf = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{name} did not report its port within {SERVER_READY_WAIT:g} s")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"{name} exited before serving (code {proc.wait()})")
        buf += chunk
        for line in buf.split(b"\n")[:-1]:
            if line.startswith(b"PORT "):
                return int(line.split()[1])


def end_process(proc: subprocess.Popen[Any]) -> None:
    """A test's ``finally`` for a process it started: killed if still running, reaped, its pipes closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(GONE_WAIT)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


async def limit_hit(conn: Any, tool: str, args: dict[str, Any]) -> tuple[MCPError, float]:
    """The error a call that passes a ``Limits`` bound ends with (kind ``limit``), and the seconds it took."""
    started = time.monotonic()
    with pytest.raises(MCPError) as info:
        await conn.call_tool(tool, args)
    elapsed = time.monotonic() - started
    assert info.value.kind == "limit", info.value
    return info.value, elapsed


class EscapePlace:
    """What escape_server.py aims at: a fake home with secret stores, a work dir (its cwd), a dir outside both.

    ``outside`` is a folder name under ``.cache``: outside /tmp on purpose (the
    sandbox's /tmp is private, so a dir under it would be missing rather than
    read-only). It holds ``notes.txt``; :meth:`close` removes it.
    """

    def __init__(self, tmp: Path, outside: str) -> None:
        self.home = tmp / "home"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_rsa").write_text("SECRET KEY\n")
        (self.home / ".netrc").write_text("machine x password SECRET\n")
        self.work = tmp / "work"
        self.work.mkdir()
        self.outside = ROOT / ".cache" / outside
        self.outside.mkdir(parents=True, exist_ok=True)
        (self.outside / "notes.txt").write_text("OUTSIDE\n")

    def server(self, box: Sandbox | None, env: dict[str, str] | None = None, **kw: Any) -> MCPServerStdio:
        return MCPServerStdio(
            command=PY,
            args=[ESCAPE_SERVER, DOCTOR_PROBES],  # the probes load the doctor's: named, so a box lets it be read
            name="escape",
            cwd=str(self.work),
            env={"HOME": str(self.home), **(env or {})},
            sandbox=box,
            **kw,
        )

    def close(self) -> None:
        shutil.rmtree(self.outside, ignore_errors=True)


def leftover_cgroups() -> list[str]:
    """lovia-mcp generation cgroups of this test session that exist now.

    A generation's cgroup is named ``lovia-mcp.<worker pid>.…`` under the
    parents this process may use; on a shared machine other sessions' workers
    make theirs there too. Those of a live process that is not one of ours
    are left out; those of a dead worker count (leaked, or ours gone).
    """
    where = cgroup_layout.layout()
    if where is None:
        return []
    # An idle worker makes its first generation's cgroup while it waits: the pool's, not a leak.
    idle = set(_shared_helper_pids())
    ours = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)} - idle
    found = []
    for parent in where.parents:
        for name in os.listdir(parent):
            if not name.startswith(cgroup_layout.PREFIX):
                continue
            pid = name[len(cgroup_layout.PREFIX) :].split(".", 1)[0]
            if pid.isdigit() and (int(pid) in idle or int(pid) not in ours and psutil.pid_exists(int(pid))):
                continue
            found.append(os.path.join(parent, name))
    return found


__all__ = [
    "CLI_TIMEOUT",
    "DOCTOR_PROBES",
    "ESCAPE_SERVER",
    "GONE_WAIT",
    "ISOLATIONS",
    "LOOPBACK_TEST_WAIT",
    "POLL",
    "PY",
    "RAW_SERVER",
    "RAW_TOOLS",
    "ROOT",
    "SERVERS",
    "SERVER_EXIT_WAIT",
    "SERVER_READY_WAIT",
    "SUP_SERVER",
    "EscapePlace",
    "LocalHTTP",
    "LocalUpstream",
    "Model",
    "alive_after",
    "agent_fd_links",
    "agent_fds",
    "fd_change",
    "alive_after_sync",
    "bounded",
    "copy_raw_server",
    "describe",
    "drive",
    "end_process",
    "error_of",
    "exchange",
    "exempt_pids",
    "frame",
    "is_alive",
    "leftover_cgroups",
    "limit_hit",
    "live_descendants",
    "lovia_mcp",
    "lovia_mcp_all",
    "outputs",
    "pid_alive",
    "pid_of",
    "raw",
    "raw_args",
    "reap_zombies",
    "register_shared",
    "results",
    "run",
    "script_json",
    "serving",
    "settled",
    "sup",
    "wait_gone",
]


# The ordinary user the sandbox tests become (setpriv), and the bound on such
# an agent's whole run (interpreter, worker, sandbox, a call or two).
NOBODY = 65534
NOBODY_WAIT = 60.0


def nobody_python() -> tuple[str, Path]:
    """An interpreter nobody can run (not /root's venv) and the site-packages it should use.

    Skips where the machine cannot run the project as nobody: not root, no
    setpriv, no system python3.11, or the checkout or site-packages not
    readable by an ordinary user.
    """
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to become nobody) and setpriv")
    python = shutil.which("python3.11", path="/usr/bin:/bin") or ""
    if not python or not os.access(python, os.X_OK) or sys.version_info[:2] != (3, 11):
        pytest.skip("no system python3.11 readable by an ordinary user (the venv's binary modules are 3.11)")
    site = next(Path(sys.prefix, "lib").glob("python3.*/site-packages"))
    for path in (ROOT, site):
        if not all(os.stat(p).st_mode & 0o005 == 0o005 for p in [path, *path.parents]):
            pytest.skip(f"{path} is not readable by an ordinary user")
    return python, site


def as_nobody(agent: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``agent`` (Python code) as nobody, with an interpreter nobody can read (not /root's).

    argv[1] is a folder of nobody's own (its cwd and HOME), removed afterwards;
    ``args`` follow. Skips where the machine cannot do this.
    """
    python, site = nobody_python()
    # Resolved: a checkout's .cache may be a link, which bwrap would not bind as the cwd.
    home = Path(os.path.realpath(ROOT / ".cache")) / f"nobody-{os.getpid()}"
    home.mkdir(parents=True)
    os.chown(home, NOBODY, NOBODY)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "worker"), str(site)]),
    }
    try:
        proc = subprocess.run(
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                python,
                "-c",
                agent,
                str(home),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=NOBODY_WAIT,
            env=env,
            cwd=home,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc
