"""A forked child of the forkserver becoming a worker: idle ahead of its request, or forked on it.

The child first drops what is the forkserver's (:func:`reset`: its signal
set-up, its sockets and descriptors). An idle worker (:func:`wait_for_request`)
then prepares what needs no socket (:class:`.main.Prepared`), copies the
pages its open would write, or notes its own to learn them (:mod:`.pages`),
and waits for a request's descriptors; a worker forked on request
(:func:`child`) serves at once. Either runs :func:`serve_worker` and never
returns into the forkserver's loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn, Protocol

from . import pages


class Closable(Protocol):
    def close(self) -> None: ...


def wait_for_request(sock: socket.socket, objects: list[Closable], fds: list[int], learned: bytes | None) -> NoReturn:
    """An idle worker: drop the forkserver's state now, then wait for a worker's fds (or EOF: exit).

    While it waits it copies the pages its open would write (``learned``),
    or, the forkserver having learned none yet, notes the pages it still
    shares, so as to report those its open copies (see :mod:`.pages`).
    """
    try:
        reset(objects, fds)
        from .main import Prepared

        prepared = Prepared(ahead=True)
        before = None
        with contextlib.suppress(Exception):  # only a head start: the open copies what it writes anyway
            if learned is not None:
                pages.populate(learned)
            else:
                before = pages.snapshot()
        msg, got, _, _ = socket.recv_fds(sock, 1, 2)
        if msg and got:
            sock.sendall(b"A")  # taken: the forkserver hands this request to no one else
    except BaseException:  # noqa: BLE001 - never back into the forkserver's loop
        os._exit(1)
    if not msg or not got:
        os._exit(0)  # the forkserver is gone: no request will come
    # Closed once the open has answered: the forkserver refills its pool
    # then, not while this open is on the CPU.
    serve_worker(got[0], got[1] if len(got) > 1 else None, prepared, PoolSocket(sock, before))


class PoolSocket:
    """An idle worker's socket to the forkserver, once it serves: closed when its open has answered.

    A worker that noted the pages it still shared (``before``) and whose
    open succeeded first sends the report of those it has copied since
    (:func:`.pages.written_since`): a failed open's path is no model.
    """

    def __init__(self, sock: socket.socket, before: pages.Snapshot | None) -> None:
        self._sock = sock
        self._before = before

    def done(self, opened: bool) -> None:
        before, self._before = self._before, None
        if opened and before is not None:
            # Never raises (this runs as the Opened is sent), never blocks: a
            # report is at most 64 KiB (pages.MAX_REPORT), and the forkserver
            # refuses one cut short in a pair (pages.checked).
            with contextlib.suppress(Exception):
                report = pages.written_since(before)
                if report:
                    self._sock.send(report, socket.MSG_DONTWAIT)
        self._sock.close()


def reset(objects: list[Closable], fds: list[int]) -> None:
    """In a freshly forked child: the forkserver's signal set-up and descriptors are not a worker's."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for obj in objects:
        obj.close()
    for fd in fds:
        os.close(fd)


def child(chan: int, cwd: int | None, objects: list[Closable], fds: list[int]) -> NoReturn:
    """A worker forked on request (no idle one was ready): drop the forkserver's state, then serve ``chan``."""
    try:
        reset(objects, fds)
    except BaseException:  # noqa: BLE001 - report, then exit: never back into the forkserver's loop
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    serve_worker(chan, cwd)


def serve_worker(chan: int, cwd: int | None, prepared: Any = None, answered: Any = None) -> NoReturn:
    """Be the worker of ``chan``, in the agent's working directory ``cwd`` (set up now unless ``prepared``).

    ``answered``: told once the open has answered (:meth:`.main.Prepared.run`).
    """
    code = 1
    try:
        if cwd is not None:
            with contextlib.suppress(OSError):
                os.fchdir(cwd)
            os.close(cwd)
        from .main import Prepared

        (prepared or Prepared()).run(socket.socket(fileno=chan), answered)
        code = 0
    except BaseException:  # noqa: BLE001 - report, then exit: never back into the forkserver's loop
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)


__all__ = ["Closable", "PoolSocket", "child", "reset", "serve_worker", "wait_for_request"]
