"""The link to a worker: the channel from a connection to its session host.

- :class:`ProcessChannel`: a worker process forked from lovia-mcp's own
  forkserver (:mod:`.forkserver`), which has the worker package
  preloaded (and the MCP SDK where HTTP servers are used, see
  :func:`.forkserver.warm_up`); frames over a socket pair, read without ever
  blocking the agent's event loop, decoded only as typed msgspec and never
  past the frame cap agreed for the connection (:mod:`lovia_mcp_worker.wire.framing`).
- :class:`LocalChannel`: the same :class:`~lovia_mcp_worker.session.host.Host` in
  the agent's own loop (``isolation="none"``); messages are passed as objects.

Both can be awaited for their loss (:meth:`wait_lost`), so that a close
never waits for a reply from a worker that is already gone.

Caveats: the forkserver is process-global (:data:`.forkserver.process_forkserver`,
started on first use). Process isolation needs POSIX (fork, descriptor passing).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import select
import signal
import socket
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

import msgspec
from lovia.exceptions import UserError
from lovia_mcp_worker.wire.framing import BATCH_BYTES, FrameReader, send_frame
from lovia_mcp_worker.wire.messages import HEADER, AgentMessage, Open, WorkerMessage, agent_decoder, encoder

from .forkserver import SUPPORTED, process_forkserver
from .workers import WorkerProcess, WorkerStartError, read_pid

# The largest Open written to a worker's socket before the agent's transport
# is made (it is empty then, so the write never blocks); a larger one goes
# through the transport.
EARLY_FRAME_MAX: Final = 64 * 1024
# How long a worker gets to exit after its pipe closed or Close was answered.
WORKER_EXIT_WAIT: Final = 5.0
# True in a task whose opens nobody waits for (a warm spare's): the
# forkserver then refills its pool of idle workers beside such an open
# instead of after it (an open a run waits for keeps the CPU to itself).
IN_BACKGROUND: ContextVar[bool] = ContextVar("lovia_mcp_in_background", default=False)

OnMessage = Callable[[WorkerMessage], None]
OnLost = Callable[[str], None]


class ProcessChannel:
    """A worker process reached over a socket pair.

    ``cap`` is the largest frame accepted from the worker
    (``frame_cap(max_result_bytes)``); a larger one drops the worker.
    """

    def __init__(self, cap: int) -> None:
        self._enc = encoder()
        self.cap = cap
        self._proc: WorkerProcess | None = None
        self._transport: asyncio.Transport | None = None
        self._losing = False
        self._gone = asyncio.Event()  # the pipe is lost or closed
        self._dead = asyncio.Event()  # the channel reads as dead: its loss reported, or closed or given up
        self.pid: int | None = None
        self._pid_task: asyncio.Task[None] | None = None
        self._fd = -1
        # Frames held in this loop iteration (see send): they go in one write
        # at its end, or once they reach BATCH_BYTES (None: none held).
        self._batch: list[bytes] | None = None
        self._batched = 0

    async def start(self, on_message: OnMessage, on_lost: OnLost, first: AgentMessage | None = None) -> None:
        """Get a worker and connect to it; ``first`` (the ``Open``) is sent before anything else."""
        if not SUPPORTED:
            raise UserError(
                "Process isolation needs a POSIX system (fork and descriptor passing).",
                hint="Use isolation='none' on this platform.",
            )
        frame: bytes | None = None
        if first is not None:
            body = self._enc.encode(self._for_worker(first))
            if len(body) <= EARLY_FRAME_MAX:
                frame = HEADER.pack(len(body)) + body
        # An idle worker the forkserver announced is taken straight away: the
        # request and the Open go to it in one sendmsg. Else the forkserver is
        # asked, which is one sendmsg once it runs: done here, without a
        # thread hop on the open's path. Starting it (or waiting for the
        # thread that does) blocks, so that runs on a thread.
        background = IN_BACKGROUND.get()
        taken = process_forkserver.take_idle(frame or b"", background=background)
        status: socket.socket | None = None
        if taken is not None:
            pid, sock, status = taken
            self._proc = WorkerProcess(pid, status)
            self.pid = pid
            status = None
        else:
            pair = process_forkserver.request_worker(wait=False, background=background) or await asyncio.to_thread(
                functools.partial(process_forkserver.request_worker, background=background)
            )
            assert pair is not None
            sock, status = pair
            if frame is not None:
                try:  # an empty socket: never blocks for a frame this size
                    sock.sendall(frame)
                except OSError:
                    frame = None  # the worker is gone: its loss is the reader's to report
        sock.setblocking(False)
        self._fd = sock.fileno()
        loop = asyncio.get_running_loop()

        def report(why: str) -> None:
            # The channel reads as dead only now, with the report: requests
            # sent meanwhile went to this channel, and the report fails them
            # with the rest. (Marked dead earlier, a new channel could take
            # over first, and this one's requests would never be answered.)
            if not self._dead.is_set():
                self._dead.set()
                on_lost(why)

        def lost(why: str | None) -> None:
            self._gone.set()
            if self._dead.is_set() or self._losing:
                return
            self._losing = True
            if why is not None:
                report(why)
                return
            # The exit status takes a join; never on the loop.
            task = loop.create_task(asyncio.to_thread(self._exit_description))
            # Cancelled: the loop is closing (asyncio.run's end), nobody is left to tell.
            task.add_done_callback(lambda t: None if t.cancelled() else report(t.result()))

        reader = FrameReader(agent_decoder(), on_message, lost, cap=self.cap, peer="the worker")
        try:
            self._transport, _ = await loop.create_connection(lambda: reader, sock=sock)
        except BaseException:
            sock.close()  # the worker sees EOF and exits
            if status is not None:
                status.close()
            if self._proc is not None:
                self._proc.close()
            raise
        if status is not None:
            # The worker's pid comes from the forkserver while Open is already on
            # its way (the socket buffers it): the hand-off is off the open's path.
            self._pid_task = loop.create_task(self._read_pid(status, lost))
        if first is not None and frame is None:
            self.send(first)

    async def _read_pid(self, status: socket.socket, lost: Callable[[str | None], None]) -> None:
        try:
            pid = await read_pid(status)
        except BaseException as exc:
            status.close()
            if self._transport is not None:
                self._transport.close()
            lost(str(exc) if isinstance(exc, WorkerStartError) else "the worker did not start")
            raise
        self._proc = WorkerProcess(pid, status)
        self.pid = pid

    async def started(self) -> None:
        """Wait for the worker's pid (it is known once the worker runs).

        A pid that never came was reported as the channel's loss (``on_lost``).
        """
        if self._pid_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._pid_task)

    def _exit_description(self) -> str:
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.join(0.5)
                code = proc.exitcode
        if code is None:
            return "the worker process closed its pipe"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the worker process was killed by {name}"
        return f"the worker process exited with code {code}"

    @property
    def alive(self) -> bool:
        return not self._dead.is_set()

    @property
    def reporting(self) -> bool:
        """The pipe is lost and its report is on its way (the worker's exit status is read on a thread).

        The channel still reads as alive until then, so that the report fails
        the requests sent meanwhile; a request not sent yet should wait for
        :meth:`dead` and go to the next worker instead.
        """
        return self._gone.is_set() and not self._dead.is_set()

    async def dead(self) -> None:
        """Return once the channel reads as dead (its loss reported, or it was closed or given up)."""
        await self._dead.wait()

    async def wait_lost(self) -> None:
        """Return once the pipe to the worker is lost (or the channel closed)."""
        await self._gone.wait()

    def unread(self, wait: float = 0.0) -> bool:
        """Whether the worker wrote what the loop has not read yet, or closed its end (or the pipe is gone).

        When False, everything the worker said has been handled: what the
        agent knows of the worker and its server is what the worker last told.
        ``wait``: block up to that many seconds for something to read (the
        loop does not run meanwhile).
        """
        if self._gone.is_set() or self._fd < 0:
            return True
        poll = select.poll()
        poll.register(self._fd, select.POLLIN)
        return bool(poll.poll(round(wait * 1000)))

    def send(self, msg: AgentMessage, *, hold: bool = False) -> None:
        """Write ``msg`` to the worker, at once or (``hold``) with the others of this loop iteration at its end.

        ``hold``: other requests are in flight (concurrent calls, which start
        in one iteration): a write each would wake the worker once per call.
        Held frames go in one write at the iteration's end, or as soon as
        they reach ``BATCH_BYTES``; a frame sent while some are held joins
        them, so frames keep their order. A lone call is written at once and
        costs no callback (an extra loop iteration on its path).
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        body = self._enc.encode(self._for_worker(msg))
        batch = self._batch
        if batch is None:
            if not hold:
                send_frame(transport, body)
                return
            batch = self._batch = []
            asyncio.get_running_loop().call_soon(self._flush)
        batch += (HEADER.pack(len(body)), body)
        self._batched += len(body)
        if self._batched >= BATCH_BYTES:
            self._write_batch()

    def _write_batch(self) -> None:
        batch, self._batch, self._batched = self._batch, [], 0
        transport = self._transport
        if batch and transport is not None and not transport.is_closing():
            transport.writelines(batch)

    def _flush(self) -> None:
        """Write the frames held in this loop iteration (see :meth:`send`)."""
        self._write_batch()
        self._batch = None

    @staticmethod
    def _for_worker(msg: AgentMessage) -> AgentMessage:
        if isinstance(msg, Open):
            # The agent's environment now, not the forkserver's copy from
            # when it started.
            return msgspec.structs.replace(msg, environ=dict(os.environ))
        return msg

    def abort(self) -> None:
        """Give the worker up at once (it stopped answering): SIGKILL; :meth:`aclose` still reaps it."""
        self._dead.set()
        if self._proc is not None:
            self._proc.kill()

    async def aclose(self) -> None:
        """Drop the pipe and make sure the worker is gone (bounded)."""
        self._dead.set()
        self._gone.set()
        if self._transport is not None:
            self._flush()  # a Cancel sent just before goes too
            self._transport.close()
        if self._pid_task is not None:
            with contextlib.suppress(BaseException):  # bounded by FORKSERVER_START_WAIT; its failure is reported
                await asyncio.shield(self._pid_task)
        proc = self._proc
        if proc is None:
            return
        await asyncio.to_thread(_reap, proc)


def _reap(proc: WorkerProcess) -> None:
    proc.join(WORKER_EXIT_WAIT)
    if proc.exitcode is None:
        proc.kill()
        proc.join(WORKER_EXIT_WAIT)
    proc.close()


class LocalChannel:
    """The host in the agent's own event loop (``isolation="none"``)."""

    def __init__(self) -> None:
        self._host: Any = None
        self.pid: int | None = os.getpid()
        self.alive = True
        self._gone = asyncio.Event()

    async def start(self, on_message: OnMessage, on_lost: OnLost, first: AgentMessage | None = None) -> None:
        from lovia_mcp_worker.session.host import Host

        self._host = Host(on_message, subreaper=False)
        if first is not None:
            self.send(first)

    async def started(self) -> None:
        """Nothing to wait for: the host runs in this process."""

    reporting = False  # a host in this process is never lost, only closed

    async def dead(self) -> None:
        """Return once the channel is closed."""
        await self._gone.wait()

    def send(self, msg: AgentMessage, *, hold: bool = False) -> None:
        """Hand ``msg`` to the host (``hold`` is for a worker's pipe: nothing is written here)."""
        self._host.handle(msg)

    async def wait_lost(self) -> None:
        """Return once the channel is closed (the host cannot be lost otherwise)."""
        await self._gone.wait()

    def unread(self, wait: float = 0.0) -> bool:
        """Never: the host tells the agent synchronously, in its own loop."""
        return False

    def abort(self) -> None:
        """Stop using this host (:meth:`aclose` stops its servers)."""
        self.alive = False

    async def aclose(self) -> None:
        self.alive = False
        self._gone.set()
        if self._host is not None:
            await self._host.aclose()


__all__ = [
    "IN_BACKGROUND",
    "LocalChannel",
    "ProcessChannel",
]
