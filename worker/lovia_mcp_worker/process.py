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

Protocol: on the *control* socket, one byte with the worker's end of its
socket pair, the forkserver's end of a *status* socket pair, and the agent's
working directory (a directory fd). The forkserver forks; the child closes
everything of the forkserver's, changes to that directory and runs
:func:`lovia_mcp_worker.main.run`. The forkserver writes the child's pid to
the status socket and, once it has reaped the child, its exit code
(negative: the signal), each as :data:`~.protocol.FORKSERVER_STATUS`. When
the control socket reaches EOF (the agent exited or died) the forkserver
exits; the workers do not need it any more.

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
import sys
import traceback
from typing import Any, NoReturn, Protocol

from .protocol import FORKSERVER_STATUS


class _Closable(Protocol):
    def close(self) -> None: ...


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
    from .containment import cgroup, guard

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
    with selectors.DefaultSelector() as sel:
        sel.register(ctrl, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fd == wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(wake_r, 4096):
                            pass
                    _reap(status, dead, cgroup)
                    continue
                msg, fds, _, _ = socket.recv_fds(ctrl, 1, 3)
                if not msg:
                    os._exit(0)  # the agent is gone
                if len(fds) < 2:
                    for fd in fds:
                        os.close(fd)
                    continue
                chan, st, *rest = fds
                pid = os.fork()
                if pid == 0:
                    _child(chan, rest[0] if rest else None, [sel, ctrl, *status.values()], [wake_r, wake_w, st])
                status[pid] = sock = socket.socket(fileno=st)
                os.close(chan)
                for fd in rest:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    sock.sendall(FORKSERVER_STATUS.pack(pid))


def _child(chan: int, cwd: int | None, objects: list[_Closable], fds: list[int]) -> NoReturn:
    """A freshly forked worker: drop the forkserver's state, then serve ``chan``."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for obj in objects:
            obj.close()
        for fd in fds:
            os.close(fd)
        if cwd is not None:
            with contextlib.suppress(OSError):
                os.fchdir(cwd)
            os.close(cwd)
        from .main import run

        run(socket.socket(fileno=chan))
        code = 0
    except BaseException:  # noqa: BLE001 - report, then exit: never back into the forkserver's loop
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _reap(status: dict[int, socket.socket], dead: set[int], cgroup: Any) -> None:
    """Reap exited children: tell the agent of its workers' exits, kill what dead workers left."""
    while True:
        try:
            pid, sts = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        sock = status.pop(pid, None)
        if sock is None:
            continue  # an adopted orphan, killed below
        with contextlib.suppress(OSError):
            sock.sendall(FORKSERVER_STATUS.pack(os.waitstatus_to_exitcode(sts)))
        sock.close()
        dead.add(pid)
        with contextlib.suppress(Exception):
            cgroup.kill_leftovers(pid)
    adopted = [pid for pid in _children() if pid not in status]
    for pid in adopted:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if not adopted:
        # Every leftover is reaped: their cgroups are empty now.
        for pid in list(dead):
            with contextlib.suppress(Exception):
                if not cgroup.remove_leftovers(pid):
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
