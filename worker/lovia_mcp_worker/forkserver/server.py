"""The forkserver's serving side: preload once, then fork a worker per request.

A fresh interpreter per worker would cost the ~0.7 s of importing the worker
package and ``mcp``; forking a process that already has them loaded costs
milliseconds. :func:`serve` runs in that process; the agent's handle on it
(starting it, asking for a worker, joining one) is the agent's own
(``lovia_mcp.client.forkserver``), standard library only here too.

Why not ``multiprocess``'s forkserver: its child re-imports the agent's
``__main__`` (paying its import time on every worker start, and running an
unguarded script's top level again), and its exit handler joins every child
it started, so an agent leaving a connection open would hang at exit for
ever. Both can be worked around only through its private names. A daemon
worker would dodge the join, but then the agent's exit sends SIGTERM to
every worker, and it still re-imports ``__main__``. This forkserver does
only what a worker needs, so neither problem exists: nothing of the agent is
imported in a worker, and no exit handler knows the workers (each ends when
its own socket closes, agent alive or not).

Protocol: workers are forked ahead of their requests (a pool of *idle*
workers, :class:`_Pool`). Each is announced to the agent on the *control*
socket as it joins (its pid, with the agent's ends of the worker's socket
pair and of its *status* socket pair) and as it leaves (``-pid``). The agent
takes one by writing straight to it: one byte (``W``; ``R`` while a run of
an ``MCP`` plugin is on in the agent; ``B`` for an open nobody waits for, a
warm spare's) with its working directory (a directory fd), then its
``Open``; the forkserver is not on that path. The worker changes to that
directory and serves (:mod:`.start`); once its server is launched it tells
the forkserver, on its *pool* socket, that it was taken (``T`` and that
byte), and it closes that socket once its open has answered; the first
ones, forked before the forkserver has learned which of its pages an open
writes, send that first (:mod:`.pages`), and the idle workers forked after
copy those pages while they wait. With no idle worker to take, the agent
sends the byte on the control socket instead, with the worker's end of its
socket pair, the forkserver's end of a status socket pair and its working
directory, and the forkserver forks a worker for it; or it sends ``E``
alone, when its last run has ended; or a digit alone, the number of idle
workers to keep from now on (a gateway whose servers are all open keeps
fewer: :meth:`_Pool.keep`). The forkserver writes a worker's exit
code (negative: the signal) to its status socket once it has reaped it,
preceded by its pid for a worker forked on request, each as
:data:`~.protocol.FORKSERVER_STATUS`. When the control socket reaches EOF
(the agent exited or died) the forkserver exits; the workers do not need it
any more, and an idle worker exits when its pool socket or its socket to
the agent reaches EOF.

A dead worker's leftovers are the forkserver's to clean up (the worker side
owns the pids; the agent never kills a server): the forkserver is a child
subreaper (Linux), so the server trees of a worker that died (by SIGKILL,
say: the servers get their parent-death signal, their own children do not)
are reparented to it, and every child of it that is not a live worker is
SIGKILLed and reaped. The dead worker's generation cgroups, escapees
included, are killed and, once empty, removed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import selectors
import signal
import socket
import time
from typing import Any, Final

from ..wire.messages import FORKSERVER_STATUS
from . import pages
from .start import Closable, child, wait_for_request

# Idle workers kept ready (each about 5.5 MB of unique memory): two, so one is
# there while the other's replacement waits for a quiet moment; up to
# MAX_IDLE after bursts of opens found the pool empty (an agent that opens
# five servers per run gets five ready).
MIN_IDLE: Final = 2
MAX_IDLE: Final = 5
# How long the forkserver waits without a request before it forks a
# replacement while an idle worker is still left: longer than a burst of
# opens takes to arrive, short next to a run; the forks then do not compete
# for the CPU with the servers those opens start.
REFILL_QUIET: Final = 0.1
# An emptied pool is refilled once the opens it served have answered (their
# worker's CPU is off an open's path then), or this long after the last
# request at the latest (an open waiting for a slow server). While a run is
# on in the agent (requests ``R``), every refill waits for its end (``E``),
# this long after the last request at the latest (a long run then mostly
# waits for its model).
OPEN_WAIT: Final = 2.0


# --------------------------------------------------------------------------- #
# In the forkserver process
# --------------------------------------------------------------------------- #
def serve(ctrl_fd: int, preload: list[str]) -> None:
    """The forkserver's loop: preload, then fork a worker per request; never returns."""
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a worker that needs it reports the error itself
            pass
    from ..containment import cgroup_layout, guard

    # A dead worker's orphaned descendants come here, not to the agent.
    guard.become_subreaper()
    ctrl = socket.socket(fileno=ctrl_fd)
    ctrl.set_inheritable(False)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    # A handler, not SIG_IGN (which would reap children unseen): it only has
    # to exist for the wakeup fd to be written.
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's ^C is the agent's
    signal.set_wakeup_fd(wake_w)
    status: dict[int, socket.socket] = {}  # live workers' status sockets
    dead: set[int] = set()  # workers whose cgroups are still to be removed
    pool = _Pool(ctrl)
    with selectors.DefaultSelector() as sel:
        sel.register(ctrl, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        while True:
            # Nothing to do: fork the next worker ahead of its request.
            events = sel.select(pool.refill_in())
            if not events:
                pool.fork([sel, ctrl, *status.values(), *pool.socks()], [wake_r, wake_w], status, sel)
                continue
            for key, _ in events:
                if isinstance(key.data, _Idle):  # an idle worker was taken, or answered its open (or exited)
                    pool.heard(key.data, sel)
                    continue
                if key.fd == wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(wake_r, 4096):
                            pass
                    _reap(status, dead, cgroup_layout, pool)
                    continue
                try:
                    msg, fds, _, _ = socket.recv_fds(ctrl, 1, 3)
                except ConnectionResetError:  # closed with announcements unread: gone all the same
                    msg, fds = b"", []
                if not msg:
                    os._exit(0)  # the agent is gone (an idle worker sees its socket close and exits)
                if len(fds) < 2:
                    for fd in fds:
                        os.close(fd)
                    if msg == b"E":
                        pool.in_run = False
                    elif msg.isdigit():
                        pool.keep(int(msg))
                    continue
                chan, st, *rest = fds
                # The agent had no idle worker to take (see _Pool): one is forked for it.
                pool.requested(msg)
                pid = os.fork()
                if pid == 0:
                    child(
                        chan,
                        rest[0] if rest else None,
                        [sel, ctrl, *status.values(), *pool.socks()],
                        [wake_r, wake_w, st],
                    )
                status[pid] = sock = socket.socket(fileno=st)
                os.close(chan)
                for fd in rest:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    sock.sendall(FORKSERVER_STATUS.pack(pid))


class _Pool:
    """The idle workers forked ahead of their requests (the forkserver's view), oldest first.

    Each is announced to the agent with the agent's ends of its socket pair
    and of its status socket: the agent takes one by writing its request to
    it (see :mod:`.start`), without the forkserver. The worker tells the
    forkserver it was taken (``T`` and the request's byte) once its server
    is launched, keeps its socket until its open has answered, then closes
    it. A request on the control socket means the agent had none to take:
    a worker is forked for it.

    It keeps :data:`MIN_IDLE` of them, and one more for each request that
    found none (a burst of opens: an agent starting several servers at
    once), up to :data:`MAX_IDLE`. The forks wait so as not to compete for
    the CPU with the opens they follow: while one idle worker is left, until
    :data:`REFILL_QUIET` passed without a request (opens one after another
    never find the pool empty); an empty pool, until the workers taken
    have answered their opens, :data:`OPEN_WAIT` at the latest. While a run
    is on in the agent (``in_run``: its requests said ``R``), no refill
    starts before it ends (``E``), :data:`OPEN_WAIT` after the last request
    at the latest: the forks and the idle workers' preparation would compete
    for the CPU with the run (five servers per run: five of them right
    after its opens).
    """

    def __init__(self, ctrl: socket.socket) -> None:
        self._ctrl = ctrl
        self._sel: selectors.BaseSelector | None = None  # the forkserver's, which hears the idle workers
        self.idle: list[_Idle] = []
        # Workers taken whose open has not answered yet.
        self.opening: list[_Idle] = []
        self.target = MIN_IDLE
        self._failed = False  # the last fork failed (out of processes): requests fork as they arrive
        self._last_request = 0.0
        # Whether the pool was ever full: a request before that (the agent's
        # first, while the forkserver still starts) says nothing of bursts.
        self._filled = False
        # A run is on in the agent (its last request said R, and no E since).
        self.in_run = False
        # The pages an open writes, once a worker has reported them (see .pages;
        # b"": its report could not be used); None: not learned yet.
        self.learned: bytes | None = None

    def refill_in(self) -> float | None:
        """The select timeout: when the next idle worker is due (``None``: the pool is full)."""
        if len(self.idle) >= self.target or self._failed:
            return None
        if self.in_run:
            return max(0.0, self._last_request + OPEN_WAIT - time.monotonic())
        if not self.idle:
            # The next request would wait for a fork: forked at once, unless
            # an open the pool just served is still on the CPU.
            if not self.opening:
                return 0
            return max(0.0, self._last_request + OPEN_WAIT - time.monotonic())
        return max(0.0, self._last_request + REFILL_QUIET - time.monotonic())

    def keep(self, count: int) -> None:
        """Keep ``count`` idle workers from now on (the agent's ``0`` to ``9``: a gateway whose servers are all
        open asks for fewer), the newest over it ended; bursts of requests still grow the pool."""
        self.target = count
        while len(self.idle) > count:
            idle = self.idle.pop()
            _announce(self._ctrl, -idle.pid)
            self._drop(idle, self._sel)  # its pool socket closed: it exits, and is reaped as any worker

    def socks(self) -> list[socket.socket]:
        return [i.sock for i in (*self.idle, *self.opening)]

    def fork(
        self, objects: list[Closable], fds: list[int], status: dict[int, socket.socket], sel: selectors.BaseSelector
    ) -> None:
        """Fork an idle worker, hear it from now on, and announce it with the agent's ends of its sockets."""
        forked = _prefork(objects, fds, self.learned)
        if forked is None:
            self._failed = True
            return
        idle, chan, st = forked
        assert idle.status is not None
        status[idle.pid] = idle.status
        idle.sock.setblocking(False)
        self._sel = sel
        sel.register(idle.sock, selectors.EVENT_READ, idle)
        self.idle.append(idle)
        self._filled = self._filled or len(self.idle) >= self.target
        try:
            _announce(self._ctrl, idle.pid, [chan, st])
        finally:
            # Ours closed: if the agent did not get them, the worker's socket
            # reaches EOF and it exits (reaped as any worker).
            chan.close()
            st.close()

    def requested(self, what: bytes) -> None:
        """A request (``what``: its byte) came on the control socket: the agent found no idle worker.

        Those it took may not have said so yet (they do once their server is
        launched): the pool was empty all the same, so it grows.
        """
        if self._filled:
            self.target = min(MAX_IDLE, self.target + 1)
        self._note(what)

    def _note(self, what: bytes) -> None:
        """A request's byte: ``R`` and ``W`` say whether a run is on, ``B`` (a warm spare's) nothing."""
        if what != b"B":
            self.in_run = what == b"R"
        self._failed = False
        self._last_request = time.monotonic()

    def heard(self, idle: _Idle, sel: selectors.BaseSelector) -> None:
        """An idle worker said it was taken, or a taken one sent its report (see :mod:`.pages`), or its socket closed.

        A taken worker closes its socket once its open has answered (or it
        exited): that socket is done then, and its report, if it sent one
        and none came before, is what the next idle workers copy ahead. An
        idle worker's socket that closes untaken is a worker gone.
        """
        data = b""
        with contextlib.suppress(OSError):
            data = idle.sock.recv(pages.MAX_REPORT + 1)
        if idle in self.idle:
            self.idle.remove(idle)
            _announce(self._ctrl, -idle.pid)  # a connection's now, or gone: no helper any more
            if not data:
                self._drop(idle, sel)
                return
            what, data = data[1:2], data[2:]  # T, then the request's byte
            self._note(what)
            if what == b"B":  # nobody waits for that open: the refills need not wait for it
                self._drop(idle, sel)
                return
            self.opening.append(idle)
            if not data:
                return
        if data:
            if len(idle.report) <= pages.MAX_REPORT:
                idle.report += data
            return  # its end comes next
        self._drop(idle, sel)
        if idle in self.opening:
            self.opening.remove(idle)
            if self.learned is None and idle.report:
                # A report that cannot be used ends the learning too (b"": nothing
                # to copy), rather than every later worker noting its pages again.
                self.learned = pages.checked(bytes(idle.report)) or b""

    @staticmethod
    def _drop(idle: _Idle, sel: selectors.BaseSelector | None) -> None:
        if sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(idle.sock)
        idle.sock.close()

    def died(self, pid: int) -> bool:
        """Forget an idle worker that exited before its socket's end was heard; whether ``pid`` was one."""
        for idle in self.idle:
            if idle.pid == pid:
                self.idle.remove(idle)
                self._drop(idle, self._sel)
                _announce(self._ctrl, -pid)
                return True
        return False

    def pids(self) -> set[int]:
        return {i.pid for i in self.idle}


class _Idle:
    """A worker forked ahead of its request (the forkserver's view): its socket, and the status socket's end."""

    def __init__(self, pid: int, sock: socket.socket, status: socket.socket | None = None) -> None:
        self.pid = pid
        self.sock = sock
        self.status = status
        self.report = bytearray()  # what it sent once its open answered (see _Pool.heard)


def _prefork(
    objects: list[Closable], fds: list[int], learned: bytes | None
) -> tuple[_Idle, socket.socket, socket.socket] | None:
    """Fork an idle worker (``learned``: the pages it copies ahead); ``None`` if the system is out of processes.

    Also returns the agent's ends of the worker's socket pair and of its
    status socket, to announce.
    """
    made: list[socket.socket] = []
    try:
        ours, theirs = socket.socketpair()  # the pool socket
        made += (ours, theirs)
        chan, worker_chan = socket.socketpair()  # the connection's, once the agent takes it
        made += (chan, worker_chan)
        st, status = socket.socketpair()
        made += (st, status)
        pid = os.fork()
    except OSError:
        for sock in made:
            sock.close()
        return None  # out of processes or descriptors: the next request forks as it arrives
    if pid == 0:
        wait_for_request(theirs, worker_chan, [*objects, ours, chan, st, status], fds, learned)
    theirs.close()
    worker_chan.close()
    return _Idle(pid, ours, status), chan, st


def _announce(ctrl: socket.socket, pid: int, fds: list[socket.socket] | None = None) -> None:
    """Tell the agent a worker joined the idle pool (``pid``, with ``fds``) or left it (``-pid``)."""
    with contextlib.suppress(OSError):
        # Never blocks: an agent that does not read these any more only loses them.
        if fds:
            socket.send_fds(ctrl, [FORKSERVER_STATUS.pack(pid)], [s.fileno() for s in fds], socket.MSG_DONTWAIT)
        else:
            ctrl.send(FORKSERVER_STATUS.pack(pid), socket.MSG_DONTWAIT)


def _reap(status: dict[int, socket.socket], dead: set[int], cgroup_layout: Any, pool: _Pool) -> None:
    """Reap exited children: tell the agent of its workers' exits, kill what dead workers left."""
    while True:
        try:
            pid, sts = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        pool.died(pid)  # an idle worker (replaced when the loop is idle)
        sock = status.pop(pid, None)
        if sock is None:
            continue  # an adopted orphan, killed below
        code = os.waitstatus_to_exitcode(sts)
        with contextlib.suppress(OSError):
            sock.sendall(FORKSERVER_STATUS.pack(code))
        sock.close()
        if code != 0:
            # A worker that exited cleanly removed its own cgroups.
            dead.add(pid)
            with contextlib.suppress(Exception):
                cgroup_layout.kill_leftovers(pid)
    idle = pool.pids()
    adopted = [pid for pid in _children() if pid not in status and pid not in idle]
    for pid in adopted:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if not adopted:
        # Every leftover is reaped: their cgroups are empty now.
        for pid in list(dead):
            with contextlib.suppress(Exception):
                if not cgroup_layout.remove_leftovers(pid):
                    dead.discard(pid)


def _children() -> list[int]:
    """This process's children (Linux; elsewhere none are adopted)."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


__all__ = ["serve"]
