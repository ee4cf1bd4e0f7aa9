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
import select
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn, Protocol

from . import pages


class Closable(Protocol):
    def close(self) -> None: ...


def wait_for_request(
    sock: socket.socket, chan: socket.socket, objects: list[Closable], fds: list[int], learned: bytes | None
) -> NoReturn:
    """An idle worker: drop the forkserver's state now, then wait for the agent to take it (or EOF: exit).

    The agent holds the other end of ``chan`` (the forkserver announced it)
    and takes this worker by writing one byte (the request's: ``W``, ``R``
    or ``B``) with its working directory's descriptor, then its ``Open``.
    ``sock`` is the pool socket to the forkserver: this worker tells it
    there that it was taken, and its end means the forkserver is gone.

    While it waits it copies the pages its open would write (``learned``),
    or, the forkserver having learned none yet, notes the pages it still
    shares, so as to report those its open copies (see :mod:`.pages`).
    """
    try:
        reset(objects, fds)
        from .worker import Prepared

        prepared = Prepared(ahead=True)
        before = None
        with contextlib.suppress(Exception):  # only a head start: the open copies what it writes anyway
            if learned is not None:
                pages.populate(learned)
            else:
                before = pages.snapshot()
        what: bytes = b""
        got: list[int] = []
        while True:
            ready, _, _ = select.select([chan, sock], [], [])
            if chan in ready:  # taken (or the agent is gone: EOF)
                what, got, _, _ = socket.recv_fds(chan, 1, 1)
                break
            if not sock.recv(1):  # the forkserver is gone (it writes nothing here)
                break
    except BaseException:  # noqa: BLE001 - never back into the forkserver's loop
        os._exit(1)
    if not what:
        with contextlib.suppress(Exception):
            from ..containment import cgroup

            cgroup.discard_premade()
        os._exit(0)  # no request will come
    chan_fd = chan.detach()
    # Told once the server is launched, then once the open has answered: the
    # forkserver refills its pool then, not while this open is on the CPU.
    serve_worker(chan_fd, got[0] if got else None, prepared, PoolSocket(sock, before, what))


class PoolSocket:
    """An idle worker's socket to the forkserver, once it is taken: closed when its open has answered.

    :meth:`taken` tells the forkserver (``T`` and the request's byte), once
    the server is launched. A worker that noted the pages it still shared
    (``before``) and whose open succeeded first sends the report of those
    it has copied since (:func:`.pages.written_since`): a failed open's
    path is no model.
    """

    def __init__(self, sock: socket.socket, before: pages.Snapshot | None, what: bytes = b"W") -> None:
        self._sock = sock
        self._before = before
        self._what = what

    def taken(self) -> None:
        what, self._what = self._what, b""
        if what:
            with contextlib.suppress(OSError):  # never blocks: two bytes in an empty socket
                self._sock.send(b"T" + what, socket.MSG_DONTWAIT)

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
        from .worker import Prepared

        (prepared or Prepared()).run(socket.socket(fileno=chan), answered)
        code = 0
    except BaseException:  # noqa: BLE001 - report, then exit: never back into the forkserver's loop
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)


__all__ = ["Closable", "PoolSocket", "child", "reset", "serve_worker", "wait_for_request"]
