"""A worker as the agent sees it (:class:`WorkerProcess`), and its pid from the forkserver.

The worker is the forkserver's child, not the agent's: its pid and exit code
come over a *status* socket (:mod:`.forkserver` says when each is written).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from typing import Final

from lovia_mcp_worker.wire.messages import FORKSERVER_STATUS

# Bound on the first worker start: the forkserver imports the preload list
# (``mcp`` takes ~0.7 s on an idle machine) before it forks; a loaded CI box
# can be ten times slower. Past this something is wrong, not slow.
FORKSERVER_START_WAIT: Final = 60.0


class WorkerStartError(RuntimeError):
    """The forkserver could not start a worker."""


class WorkerProcess:
    """A worker as the agent sees it: ``pid``, ``join``, ``exitcode``, ``kill``.

    The worker is the forkserver's child, so its exit code comes over the
    status socket. If the forkserver dies first the exit code stays unknown
    (``None``) and ``join`` returns at once.
    """

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self.exitcode: int | None = None
        self._status: socket.socket | None = status
        self._got = b""
        self._lock = threading.Lock()  # join runs on threads, maybe two at once

    def join(self, timeout: float | None = None) -> None:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return
        try:
            self._read_status(timeout)
        finally:
            self._lock.release()

    def _read_status(self, timeout: float | None) -> None:
        status = self._status
        if status is None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._got) < FORKSERVER_STATUS.size:
            status.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
            try:
                chunk = status.recv(FORKSERVER_STATUS.size - len(self._got))
            except TimeoutError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # the forkserver is gone: the exit code is unknown
                break
            self._got += chunk
        else:
            (self.exitcode,) = FORKSERVER_STATUS.unpack(self._got)
        self._close()

    def kill(self) -> None:
        """SIGKILL the worker, unless it is known to have exited."""
        if self.exitcode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        status, self._status = self._status, None
        if status is not None:
            status.close()


async def read_pid(status: socket.socket) -> int:
    """The worker's pid from its status socket, without blocking the event loop."""
    loop = asyncio.get_running_loop()
    status.setblocking(False)
    got = b""
    try:
        async with asyncio.timeout(FORKSERVER_START_WAIT):
            while len(got) < FORKSERVER_STATUS.size:
                got += _chunk(await loop.sock_recv(status, FORKSERVER_STATUS.size - len(got)))
    except TimeoutError:
        raise _not_started() from None
    status.setblocking(True)  # WorkerProcess.join reads it on threads, with timeouts
    (pid,) = FORKSERVER_STATUS.unpack(got)
    return int(pid)


def _read_pid(status: socket.socket) -> int:
    """:func:`read_pid`, blocking (off any event loop)."""
    status.settimeout(FORKSERVER_START_WAIT)
    got = b""
    try:
        while len(got) < FORKSERVER_STATUS.size:
            got += _chunk(status.recv(FORKSERVER_STATUS.size - len(got)))
    except TimeoutError:
        raise _not_started() from None
    (pid,) = FORKSERVER_STATUS.unpack(got)
    return int(pid)


def _chunk(data: bytes) -> bytes:
    if not data:
        raise WorkerStartError("the worker forkserver exited before starting the worker")
    return data


def _not_started() -> WorkerStartError:
    return WorkerStartError(f"the worker forkserver did not start a worker within {FORKSERVER_START_WAIT:.0f} s")


__all__ = ["FORKSERVER_START_WAIT", "WorkerProcess", "WorkerStartError", "read_pid"]
