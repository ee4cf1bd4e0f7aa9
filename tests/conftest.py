"""Shared fixtures and hooks (the functions tests import live in ``helpers.py``).

No process left behind: the pytest process makes itself a *child subreaper*
(Linux), so every process a test starts (workers, servers, grandchildren,
orphans whose parent already exited) stays a descendant of pytest. After each
test, the ``no_leaks`` fixture (autouse) waits a bounded time for the
descendants a test started to go, then fails the test and kills whatever is
left. The forkserver (shared by design) and processes registered as shared
session fixtures are exempt.

The ``enforcement`` fixture runs a test under each containment path: a
cgroup per generation, and the psutil watch.

Markers (registered in pyproject.toml): ``unit`` for tests that start no
process, ``timing`` for tests that assert a wall-clock bound (``-m "not
timing"`` deselects them on a loaded machine). A ``unit`` test that starts a
process (a subprocess, a fork, a worker from the forkserver) fails, so the
marker cannot drift from the truth.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# Re-exported: test modules written before helpers.py import these from here.
from helpers import (
    PY,
    RAW_SERVER,
    ROOT,
    SERVERS,
    EscapePlace,
    describe,
    exempt_pids,
    is_alive,
    live_descendants,
    pid_alive,
    raw_args,
    reap_zombies,
    register_shared,
    run,
)
from lovia_mcp_worker.containment import cgroup_layout
from lovia_mcp_worker.containment.guard import become_subreaper

from lovia_mcp.client.forkserver import ForkServer

# Bound on waiting, after a test, for its processes to finish exiting.
LEAK_WAIT = 5.0

# Audit events that start a process; recorded while a ``unit`` test runs.
_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system"}
)
_unit_starts: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _unit_starts is not None and event in _PROCESS_EVENTS:
        _unit_starts.append(event)


# Each failure is written here the moment it is reported, so a run that is
# stopped half-way (CI's time limit, ^C, a hung test killed) keeps its
# failures; the summary at the end names the file.
FAILURES_ENV = "LOVIA_MCP_TEST_FAILURES"
FAILURES_FILE = Path(os.environ.get(FAILURES_ENV) or ROOT / ".cache" / "test-failures.txt")


def pytest_configure(config: pytest.Config) -> None:
    become_subreaper()
    sys.addaudithook(_audit)  # never removed; a no-op unless a unit test runs
    FAILURES_FILE.parent.mkdir(parents=True, exist_ok=True)
    FAILURES_FILE.write_text("")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        with open(FAILURES_FILE, "a", encoding="utf-8") as f:
            f.write(f"FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
            f.flush()
            os.fsync(f.fileno())


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FAILURES_FILE.exists() and FAILURES_FILE.stat().st_size:
        terminalreporter.write_line(f"each failure's report, written as the run went: {FAILURES_FILE}")


@pytest.fixture(autouse=True)
def unit_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a ``unit`` test that started a process (the marker's promise)."""
    global _unit_starts
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    starts: list[str] = []
    original = ForkServer._request  # noqa: SLF001 - every worker request (start_worker, request_worker) goes through it

    def request(self: ForkServer, **kw: Any) -> Any:
        starts.append("a worker from the forkserver")
        return original(self, **kw)

    monkeypatch.setattr(ForkServer, "_request", request)
    _unit_starts = starts
    try:
        yield
    finally:
        _unit_starts = None
    if starts:
        pytest.fail(f"a test marked unit started processes: {sorted(set(starts))}; drop the marker")


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    before = {p.pid for p in live_descendants()}
    yield
    leftover = [p for p in live_descendants() if p.pid not in before]
    if leftover:
        # Not waited for: the forkserver (its first test) and idle workers
        # it forked during the test never exit by themselves.
        exempt = exempt_pids()
        leftover = [p for p in leftover if p.pid not in exempt]
    if leftover:
        # Exempt pids are asked again as the wait goes on: the forkserver
        # refills its pool once a run has ended, and announces each idle
        # worker just after forking it.
        deadline = time.monotonic() + LEAK_WAIT
        alive = leftover
        while alive and time.monotonic() < deadline:
            _, alive = psutil.wait_procs(alive, timeout=0.1)
            alive = [p for p in alive if p.pid not in exempt_pids()]
        alive = [p for p in alive if is_alive(p)]
        if alive:
            described = [describe(p) for p in alive]
            for p in alive:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(alive, timeout=LEAK_WAIT)
            reap_zombies()
            pytest.fail(f"test left processes behind: {described}")
    reap_zombies()


# threads_at_fork: while set, each child this process forks starts a thread,
# as an OpenTelemetry tracer provider makes a child do (its at-fork handler
# re-detects the process's resource on a short-lived thread pool).
_fork_starts_a_thread = False
_forever = threading.Event()


def _start_a_thread_in_the_child() -> None:
    if _fork_starts_a_thread:
        threading.Thread(target=_forever.wait, daemon=True).start()


os.register_at_fork(after_in_child=_start_a_thread_in_the_child)


@pytest.fixture
def threads_at_fork() -> Iterator[None]:
    """Forks of the test process come out with a thread (a process with threads cannot enter a user namespace)."""
    global _fork_starts_a_thread
    _fork_starts_a_thread = True
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(len(os.listdir("/proc/self/task")))
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) > 1, "the fork came out with one thread"
        yield
    finally:
        _fork_starts_a_thread = False


@pytest.fixture(params=["cgroup", "watch"])
def enforcement(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test under each enforcement path: a cgroup per generation, or the watch.

    "watch" turns cgroups off (``LOVIA_MCP_CGROUPS=0``, which reaches workers
    with ``Open``); "cgroup" is skipped where this process may make none.
    """
    if request.param == "watch":
        monkeypatch.setenv(cgroup_layout.ENV_SWITCH, "0")
    else:
        monkeypatch.delenv(cgroup_layout.ENV_SWITCH, raising=False)
        if cgroup_layout.layout() is None:
            pytest.skip("no cgroup can be made here (not root, or no writable memory and pids hierarchy)")
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    if not sys.platform.startswith("linux"):
        skip = pytest.mark.skip(reason="process supervision tests need Linux")
        for item in items:
            if "linux_only" in item.keywords:
                item.add_marker(skip)


__all__ = [
    "PY",
    "RAW_SERVER",
    "ROOT",
    "SERVERS",
    "enforcement",
    "live_descendants",
    "no_leaks",
    "pid_alive",
    "place",
    "raw_args",
    "register_shared",
    "run",
    "unit_starts_no_process",
]


@pytest.fixture
def place(tmp_path: Path) -> Iterator[EscapePlace]:
    """What the escape server aims at (test_sandbox, test_landlock), its outside dir removed after."""
    p = EscapePlace(tmp_path, f"escape-{os.getpid()}-{tmp_path.name}")
    yield p
    p.close()


@pytest.fixture
def sock_path() -> Iterator[str]:
    """A path for the allowlist proxy's unix socket (test_netproxy, test_egress)."""
    # Under /tmp: a unix socket path has at most 107 bytes, pytest's tmp_path can be longer.
    folder = tempfile.mkdtemp(prefix="lovia-np-", dir="/tmp")
    try:
        yield os.path.join(folder, "proxy.sock")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Host services a sandboxed server tries to reach (test_sandbox, test_landlock,
# test_sandbox_backend).
@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP server that greets every connection with 'hello'."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(5)
    srv.close()


@pytest.fixture
def web() -> Iterator[int]:
    """A loopback HTTP server answering every GET with 'hello from the host'."""
    import http.server

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()
    thread.join(5)
