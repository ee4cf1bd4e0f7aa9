"""The agent's handle on its forkserver: :class:`ForkServer` and the workers it starts.

A fresh interpreter per worker would cost the ~0.7 s of importing the worker
package and ``mcp``; forking a process that already has them loaded costs
milliseconds. The forkserver itself runs the worker package's
:func:`lovia_mcp_worker.forkserver.server.serve` (its serving side lives there, with
the reasons for not using ``multiprocess``); this module is only what the
agent runs: starting it, asking it for a worker, joining a worker.

Lifecycle: :meth:`ForkServer.ensure_running` starts ``python -c`` with the
agent's ``sys.path`` and interpreter flags, stdin on ``/dev/null``; it
imports the preload list, then waits on a *control* socket pair. Whenever
it has nothing else to do it forks the next worker ahead of its request (an
*idle* worker, about 5.5 MB of unique memory; two, up to five after bursts
of opens, or as many as :meth:`ForkServer.keep_idle` asks), so a worker's start is off the open's path; it announces each one
joining that pool on the control socket, with the agent's ends of the
worker's socket pair and of its status socket, and each one leaving it
(:meth:`ForkServer.helper_pids`). An open takes an idle worker
(:meth:`ForkServer.take_idle`): it writes the request's byte, the agent's
working directory (a directory fd) and its ``Open`` to the worker itself,
so the open does not wait for the forkserver. With none to take, the agent
sends the byte on the control socket with the worker's end of a fresh
socket pair, the forkserver's end of a *status* socket pair and its
working directory; the forkserver forks a worker for it and writes the
child's pid to the status socket. Either way, once the forkserver has
reaped the worker it writes its exit code (negative: the signal) to the
status socket: the worker is the forkserver's child, not the agent's, so
that is how the agent joins it (:class:`WorkerProcess`).

Caveats: POSIX only (``fork``, descriptor passing); the agent refuses process
isolation elsewhere. A copy of the agent made by ``os.fork`` closes its copy
of the control socket at once (so it does not keep the forkserver alive) and
starts a forkserver of its own if it needs workers.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from lovia_mcp_worker.wire.messages import FORKSERVER_STATUS

from .workers import WorkerProcess, _read_pid

# Bound on waiting for an idle forkserver to exit once its control socket is
# closed (it exits at once; this only keeps the agent's exit bounded).
FORKSERVER_EXIT_WAIT: Final = 1.0
# Bound on waiting for the handle to tell the forkserver how many idle workers
# to keep: another thread holds it only for a send or a read of announcements.
KEEP_WAIT: Final = 5.0
# No MSG_NOSIGNAL (macOS): Python ignores SIGPIPE unless the program changed it.
_NOSIGNAL: Final = getattr(socket, "MSG_NOSIGNAL", 0)

SUPPORTED: Final = hasattr(os, "fork") and hasattr(socket, "send_fds")


class ForkServer:
    """The agent's handle on its forkserver: started on first use, one per process."""

    def __init__(self, preload: Sequence[str]) -> None:
        self._preload = list(preload)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._atexit = False
        # The idle workers the forkserver forked ahead of requests, oldest
        # first, as it told (on the control socket), each with the agent's
        # ends of its socket pair and of its status socket; and a partial record.
        self._idle: dict[int, tuple[socket.socket, socket.socket] | None] = {}
        self._idle_got = b""
        # Runs of MCP plugins in progress in this process (every loop): the
        # forkserver's refills wait for the last to end.
        self._runs = 0
        self._runs_lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None else proc.pid

    def running(self) -> bool:
        """Whether the forkserver process is up (no lock: a glance, for skipping a start)."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    def helper_pids(self) -> set[int]:
        """The forkserver's pid and its idle workers': processes of lovia-mcp's own, not of a connection."""
        with self._lock:
            self._drain_idle()
            return {p for p in (self.pid, *self._idle) if p is not None}

    def idle_pids(self) -> list[int]:
        """The idle workers, oldest (the next request's) first."""
        with self._lock:
            self._drain_idle()
            return list(self._idle)

    def idle_pid(self, wait: float = 0.0, *, count: int = 1) -> int | None:
        """The idle worker the next request gets; blocks up to ``wait`` seconds for ``count`` of them to be announced."""
        pids = self._idle_until(lambda n: n >= count, wait)
        return pids[0] if len(pids) >= count and pids else None

    def idle_pids_at_most(self, count: int, wait: float) -> list[int]:
        """The idle workers once at most ``count`` are left, or after ``wait`` seconds whatever their number."""
        return self._idle_until(lambda n: n <= count, wait)

    def _idle_until(self, enough: Callable[[int], bool], wait: float) -> list[int]:
        """The idle workers (oldest first) once their number is ``enough``, or after ``wait`` seconds; woken by
        what the forkserver announces (a worker joining or leaving the pool)."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                self._drain_idle()
                pids, ctrl = list(self._idle), self._ctrl
            left = deadline - time.monotonic()
            if enough(len(pids)) or ctrl is None or left <= 0:
                return pids
            select.select([ctrl], [], [], left)

    def _drain_idle(self) -> None:
        """Read what the forkserver announced: a pid joined the idle pool (with its sockets), ``-pid`` left it."""
        ctrl = self._ctrl
        if ctrl is None:
            return
        size = FORKSERVER_STATUS.size
        while True:
            try:
                # One record at a time: a joining worker's sockets come with its record.
                data, fds = _recv_fds_now(ctrl, size - len(self._idle_got), 2)
            except OSError:  # nothing more (BlockingIOError), or the forkserver is gone
                break
            if not data:
                for fd in fds:
                    os.close(fd)
                break
            self._idle_got += data
            if len(self._idle_got) < size:
                for fd in fds:  # a record cut short never carries sockets (they come with its first byte)
                    os.close(fd)
                continue
            (pid,) = FORKSERVER_STATUS.unpack(self._idle_got)
            self._idle_got = b""
            if pid > 0:
                socks = [socket.socket(fileno=fd) for fd in fds]
                if len(socks) == 2:
                    socks[0].setblocking(True)
                    self._idle[pid] = (socks[0], socks[1])
                else:
                    for sock in socks:
                        sock.close()
                    self._idle[pid] = None  # a helper all the same, but not one to take
            else:
                self._close_idle(self._idle.pop(-pid, None))

    @staticmethod
    def _close_idle(pair: tuple[socket.socket, socket.socket] | None) -> None:
        if pair is not None:
            for sock in pair:
                sock.close()

    def take_idle(self, first: bytes, *, background: bool = False) -> tuple[int, socket.socket, socket.socket] | None:
        """Take an idle worker: its pid and the agent's ends of its socket pair and status socket, or ``None``.

        Never blocks (``None`` when another thread holds the handle, or no
        idle worker is known): the request's byte (see :meth:`request_worker`)
        and the agent's working directory go to the worker itself, in one
        ``sendmsg`` with ``first`` (the ``Open``'s frame), so it finds its
        open waiting when it wakes. The forkserver hears of it from the
        worker. A worker that died meanwhile is skipped.
        """
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._proc is None or self._proc.poll() is not None:
                return None
            self._drain_idle()
            what = b"B" if background else b"R" if self._runs else b"W"
            while self._idle:
                pid = next(iter(self._idle))
                pair = self._idle.pop(pid)
                if pair is None:
                    continue
                chan, status = pair
                cwd = _open_cwd()
                try:
                    sent = socket.send_fds(chan, [what + first], [] if cwd is None else [cwd], _NOSIGNAL)
                except OSError:  # it died: its end is closed
                    sent = 0
                finally:
                    if cwd is not None:
                        os.close(cwd)
                # Checked once sent, while the worker wakes: one killed since the
                # forkserver announced it may have its end open still.
                if sent == 1 + len(first) and not _dying(pid):
                    return pid, chan, status
                chan.close()  # dying, or a partial write (a broken worker): never used
                status.close()
            return None
        finally:
            self._lock.release()

    def _forget(self) -> None:
        """In a forked copy of the agent: that forkserver is the parent's.

        Its control socket is closed here, so the copy does not keep it
        alive; the copy starts its own if it needs workers.
        """
        self._lock = threading.Lock()
        if self._ctrl is not None:
            with contextlib.suppress(OSError):
                self._ctrl.close()
        self._ctrl = self._proc = None
        for pair in self._idle.values():  # the parent's to take, not this copy's
            self._close_idle(pair)
        self._idle, self._idle_got = {}, b""
        self._runs, self._runs_lock = 0, threading.Lock()

    def run_began(self) -> None:
        """A run of an ``MCP`` plugin begins (before its opens): the pool's refills wait for its end."""
        with self._runs_lock:
            self._runs += 1

    def run_ended(self) -> None:
        """A run ended; after the last one, the forkserver is told (``E``) and refills its pool.

        Never blocks: with the handle busy on another thread, or the
        forkserver gone, nothing is sent, and the forkserver refills
        ``OPEN_WAIT`` after its last request, as it does for a run that lasts.
        """
        with self._runs_lock:
            self._runs = max(0, self._runs - 1)
            if self._runs:
                return
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._ctrl is not None:
                with contextlib.suppress(OSError):
                    self._ctrl.send(b"E", socket.MSG_DONTWAIT | _NOSIGNAL)
        finally:
            self._lock.release()

    def keep_idle(self, count: int) -> bool:
        """Have the forkserver keep ``count`` (0 to 9) idle workers from now on, ending those over it.

        Whether it was told: ``False`` when it does not run, or the handle
        stayed busy on another thread for :data:`KEEP_WAIT` (it is held only
        for a send or a read of what the forkserver announced).
        """
        if not 0 <= count <= 9:
            raise ValueError(f"keep_idle: {count} idle workers (0 to 9)")
        if not self._lock.acquire(timeout=KEEP_WAIT):
            return False
        try:
            if self._ctrl is None:
                return False
            try:
                return self._ctrl.send(str(count).encode(), socket.MSG_DONTWAIT | _NOSIGNAL) == 1
            except OSError:
                return False
        finally:
            self._lock.release()

    def ensure_running(self, preload: Sequence[str] | None = None) -> None:
        """Start the forkserver unless it runs (it preloads in the background).

        ``preload``, if given, replaces the preload list for this start and
        later ones; a forkserver already running keeps what it loaded.
        """
        with self._lock:
            if preload is not None:
                self._preload = list(preload)
            self._ensure_running()

    def start_worker(self) -> tuple[WorkerProcess, socket.socket]:
        """Fork a worker (blocking); returns it and the agent's end of its socket pair."""
        with self._lock:
            ours, status = self._request()
        try:
            pid = _read_pid(status)
        except BaseException:
            ours.close()
            status.close()
            raise
        return WorkerProcess(pid, status), ours

    def request_worker(
        self, *, wait: bool = True, background: bool = False
    ) -> tuple[socket.socket, socket.socket] | None:
        """Ask for a worker; the agent's ends of its socket pair and of its status socket.

        The worker's pid comes on the status socket (:func:`read_pid`).
        ``background``: nobody waits for this open (a spare's), so the
        forkserver may refill its pool beside it rather than after it.
        Without ``wait``, returns ``None`` instead of blocking: when the
        forkserver would have to be started, or another thread holds the
        handle (so an event loop can ask without a thread hop when, as
        nearly always, a request is one ``sendmsg``).
        """
        if not wait:
            if not self._lock.acquire(blocking=False):
                return None
            try:
                if self._proc is None or self._proc.poll() is not None:
                    return None
                return self._request(restart=False, background=background)
            except OSError:
                return None  # it died since the check: restarting it blocks, so on a thread
            finally:
                self._lock.release()
        with self._lock:
            return self._request(background=background)

    def _request(self, *, restart: bool = True, background: bool = False) -> tuple[socket.socket, socket.socket]:
        ours, theirs = socket.socketpair()
        status_ours, status_theirs = socket.socketpair()
        fds = [theirs.fileno(), status_theirs.fileno()]
        cwd = _open_cwd()
        if cwd is not None:
            fds.append(cwd)
        try:
            self._ensure_running()
            self._drain_idle()  # its announcements never pile up
            what = b"B" if background else b"R" if self._runs else b"W"
            try:
                self._send(fds, what)
            except OSError:
                if not restart:
                    raise
                # It died since the check: once more on a fresh one.
                self._stop()
                self._ensure_running()
                self._send(fds, what)
        except BaseException:
            ours.close()
            status_ours.close()
            raise
        finally:
            theirs.close()
            status_theirs.close()
            if cwd is not None:
                os.close(cwd)
        return ours, status_ours

    def _send(self, fds: list[int], what: bytes) -> None:
        assert self._ctrl is not None
        socket.send_fds(self._ctrl, [what], fds, _NOSIGNAL)

    def _ensure_running(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._stop()
        ours, theirs = socket.socketpair()
        sys_path = [p or os.getcwd() for p in sys.path]
        code = (
            f"import sys; sys.path[:] = {sys_path!r}; "
            f"from lovia_mcp_worker.forkserver.server import serve; serve({theirs.fileno()}, {self._preload!r})"
        )
        try:
            self._proc = subprocess.Popen(
                [sys.executable, *_interpreter_flags(), "-c", code],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._ctrl = ours
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True

    def stop(self) -> None:
        """Ask the forkserver to exit and reap it (bounded); workers live on."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        ctrl, proc = self._ctrl, self._proc
        self._ctrl = self._proc = None
        for pair in self._idle.values():  # EOF: the idle workers exit
            self._close_idle(pair)
        self._idle, self._idle_got = {}, b""
        if ctrl is not None:
            ctrl.close()  # EOF: the forkserver exits
        if proc is not None:
            try:
                proc.wait(FORKSERVER_EXIT_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(FORKSERVER_EXIT_WAIT)


# The signals that end an idle worker (SIGKILL; SIGTERM, which it re-raises
# by default until it serves), as bits of /proc/<pid>/stat's pending set.
_FATAL: Final = (1 << (signal.SIGKILL - 1)) | (1 << (signal.SIGTERM - 1))


_PF_EXITING: Final = 0x4  # set as the kernel begins its exit, before its memory and descriptors go


def _dying(pid: int) -> bool:
    """Whether ``pid`` is exiting or reaped, or has a fatal signal pending (Linux; elsewhere: never known).

    ``kill`` returns before its target has closed its descriptors (it
    unmaps its memory first), so a write to a just-killed worker's socket
    can still succeed, and the open would then fail as the worker dies. The
    kernel marks the signal pending at once, then the task exiting: ~20 µs
    to read.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return os.path.isdir("/proc/self")  # reaped (where /proc exists at all)
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:  # the state, the task's flags (PF_EXITING: it is tearing down), its pending signals
        return fields[0] in (b"Z", b"X", b"x") or bool(int(fields[6]) & _PF_EXITING) or bool(int(fields[28]) & _FATAL)
    except (IndexError, ValueError):
        return False


def _recv_fds_now(sock: socket.socket, size: int, maxfds: int) -> tuple[bytes, list[int]]:
    """``socket.recv_fds`` without blocking (Python 3.11's drops its ``flags``); raises BlockingIOError."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(size, socket.CMSG_LEN(maxfds * fds.itemsize), socket.MSG_DONTWAIT)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _open_cwd() -> int | None:
    """The agent's working directory as an fd (a worker starts where the agent is)."""
    try:
        return os.open(os.getcwd(), getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)
    except OSError:
        return None  # deleted or unreadable: the worker stays in the forkserver's


def _interpreter_flags() -> list[str]:
    """The agent's interpreter flags that change how the forkserver imports."""
    f = sys.flags
    out = ["-" + "O" * f.optimize] if f.optimize else []
    if f.dont_write_bytecode:
        out.append("-B")
    if f.isolated:
        out.append("-I")
    else:
        if f.ignore_environment:
            out.append("-E")
        if f.no_user_site:
            out.append("-s")
    if f.dev_mode:
        out += ["-X", "dev"]
    if f.utf8_mode:
        out += ["-X", "utf8"]
    return out


# Modules the forkserver imports once so every worker starts with them loaded.
# A missing module (no ``mcp``) is skipped by the forkserver; the worker then
# reports it at open time with the install hint.
PRELOAD: Final = [
    "lovia_mcp_worker.forkserver._preload_begin",
    "lovia_mcp_worker.forkserver.worker",
    "lovia_mcp_worker.forkserver._warm",
]
# Put before ``_warm`` (which freezes what is loaded) when HTTP servers are
# used: every HTTP worker then starts with the SDK loaded.
PRELOAD_HTTP: Final = [*PRELOAD[:-1], "lovia_mcp_worker.forkserver._warm_http", PRELOAD[-1]]
# The agent process's forkserver: one per process, started on first use
# (every connection's workers fork from it).
process_forkserver = ForkServer(PRELOAD)


def warm_up(*, http: bool = False) -> None:
    """Start the forkserver now (it preloads in the background).

    With ``http``, it preloads the MCP SDK too, if it is not running yet.
    """
    if SUPPORTED:
        process_forkserver.ensure_running(PRELOAD_HTTP if http else None)


def warm_up_soon(*, http: bool = False) -> None:
    """:func:`warm_up` on a daemon thread, so building a plugin never blocks.

    Nothing to do (no thread) when the forkserver runs and ``http`` would
    change nothing: a plugin built per run does not start a thread per run.
    """
    if not http and process_forkserver.running():
        return
    threading.Thread(target=_quiet_warm_up, args=(http,), name="lovia-mcp-warm-up", daemon=True).start()


def _quiet_warm_up(http: bool) -> None:
    with contextlib.suppress(Exception):
        warm_up(http=http)


def run_began() -> None:
    """A run of an ``MCP`` plugin begins: the forkserver's refills wait for the runs to end (see process.py)."""
    process_forkserver.run_began()


def run_ended() -> None:
    """A run of an ``MCP`` plugin ended (its closes handed off): with none left, the forkserver refills."""
    process_forkserver.run_ended()


def keep_idle(count: int) -> bool:
    """The forkserver keeps ``count`` idle workers from now on; whether it was told (see :meth:`ForkServer.keep_idle`)."""
    return process_forkserver.keep_idle(count)


def forkserver_pid() -> int | None:
    """The forkserver's pid, while it runs."""
    return process_forkserver.pid


def helper_pids() -> set[int]:
    """Pids of this process's long-lived helpers (the forkserver and its idle worker), shared by every connection."""
    return process_forkserver.helper_pids()


__all__ = [
    "PRELOAD",
    "PRELOAD_HTTP",
    "SUPPORTED",
    "ForkServer",
    "forkserver_pid",
    "helper_pids",
    "keep_idle",
    "process_forkserver",
    "run_began",
    "run_ended",
    "warm_up",
    "warm_up_soon",
]
