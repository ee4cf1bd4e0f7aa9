"""Channels from a connection to its session host.

- :class:`ProcessChannel`: a worker process forked from a ``multiprocess``
  forkserver that has the worker package and ``mcp`` preloaded; frames over a
  socket pair, read without ever blocking the agent's event loop, decoded
  only as typed msgspec with a size cap.
- :class:`LocalChannel`: the same :class:`~lovia_mcp_worker.host.Host` in
  the agent's own loop (``isolation="none"``); messages are passed as objects.

Caveats: the forkserver is process-global (one per agent process, shared with
any other ``multiprocess`` forkserver user). Where it does not exist (not
POSIX) workers are spawned, which costs a fresh interpreter per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any, Final

import msgspec

from lovia_mcp_worker.protocol import (
    HEADER,
    MAX_FRAME_BYTES,
    AgentMessage,
    Open,
    WorkerMessage,
    agent_decoder,
    encoder,
)

# Modules the forkserver imports once so every worker starts with them loaded.
# A missing module (no ``mcp``) is skipped by the forkserver; the worker then
# reports it at open time with the install hint.
PRELOAD: Final = [
    "lovia_mcp_worker._preload_begin",
    "lovia_mcp_worker.process",
    "lovia_mcp_worker.main",
    "lovia_mcp_worker._warm",
]
# The reader's buffer for small frames; larger frames get their own.
READ_BUFFER: Final = 64 * 1024
# How long a worker gets to exit after its pipe closed or Close was answered.
WORKER_EXIT_WAIT: Final = 5.0

OnMessage = Callable[[WorkerMessage], None]
OnLost = Callable[[str], None]

_ctx_lock = threading.Lock()
_ctx: tuple[Any, Any] | None = None  # (multiprocess context, worker process class)


def _context() -> tuple[Any, Any]:
    global _ctx
    with _ctx_lock:
        if _ctx is None:
            import multiprocess

            if "forkserver" in multiprocess.get_all_start_methods():
                from lovia_mcp_worker.process import WorkerProcess

                ctx = multiprocess.get_context("forkserver")
                ctx.set_forkserver_preload(PRELOAD)
                _ctx = (ctx, WorkerProcess)
            else:  # pragma: no cover - non-POSIX
                ctx = multiprocess.get_context("spawn")
                _ctx = (ctx, ctx.Process)
        return _ctx


def warm_up() -> None:
    """Start the forkserver now (it imports ``mcp`` in the background)."""
    ctx, _ = _context()
    if ctx.get_start_method() == "forkserver":
        from multiprocess import forkserver

        forkserver.ensure_running()


def warm_up_soon() -> None:
    """:func:`warm_up` on a daemon thread, so building a plugin never blocks."""
    threading.Thread(target=_quiet_warm_up, name="lovia-mcp-warm-up", daemon=True).start()


def _quiet_warm_up() -> None:
    with contextlib.suppress(Exception):
        warm_up()


class _Reader(asyncio.BufferedProtocol):
    """Length-prefixed frames from the worker, read without stalling the loop.

    Small frames are parsed in place from one fixed buffer. A frame larger than
    that buffer gets a buffer of its exact size, which the socket reads fill
    directly: the copying (and the page faults of fresh memory) happen inside
    the ``recv_into`` system calls, spread over many loop iterations, instead
    of in one Python step that joins chunks at the end.
    """

    def __init__(self, on_message: OnMessage, on_lost: Callable[[str | None], None]) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self._dec = agent_decoder()
        self._buf = bytearray(READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first unparsed byte in _buf
        self._end = 0  # end of the data in _buf
        self._big: memoryview | None = None  # the body of a frame larger than _buf
        self._big_have = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big[self._big_have :]
        if self._end == len(self._buf):
            # Full: move the partial frame to the front (it fits: frames
            # larger than the buffer go to their own).
            rest = self._end - self._start
            self._buf[:rest] = self._view[self._start : self._end]
            self._start, self._end = 0, rest
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_have += nbytes
            if self._big_have == len(self._big):
                body, self._big = self._big, None
                self._deliver(body)
            return
        self._end += nbytes
        self._parse()

    def _parse(self) -> None:
        size = HEADER.size
        while self._end - self._start >= size:
            (need,) = HEADER.unpack_from(self._buf, self._start)
            if need > MAX_FRAME_BYTES:
                self._fail(f"the worker sent a {need:,}-byte frame (cap {MAX_FRAME_BYTES:,})")
                return
            body_start = self._start + size
            if self._end - body_start >= need:
                self._start = body_start + need
                if not self._deliver(self._view[body_start : self._start]):
                    return
                continue
            if size + need > len(self._buf):
                have = self._end - body_start
                big = memoryview(bytearray(need))
                big[:have] = self._view[body_start : self._end]
                self._big, self._big_have = big, have
                self._start = self._end = 0
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _deliver(self, body: memoryview) -> bool:
        try:
            msg = self._dec.decode(body)
        except msgspec.DecodeError as exc:
            self._fail(f"the worker sent an undecodable message: {exc}")
            return False
        self._on_message(msg)
        return True

    def _fail(self, why: str) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._on_lost(why)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(None)


class ProcessChannel:
    """A worker process reached over a socket pair."""

    def __init__(self) -> None:
        self._enc = encoder()
        self._proc: Any = None
        self._transport: asyncio.Transport | None = None
        self._lost = False
        self._losing = False
        self.pid: int | None = None

    async def start(self, on_message: OnMessage, on_lost: OnLost) -> None:
        # Blocking (a forkserver round trip; the first one waits for the
        # preload), so it runs on a thread, never on the agent's loop.
        proc, parent_conn = await asyncio.to_thread(_start_worker)
        self._proc = proc
        self.pid = proc.pid
        sock = socket.socket(fileno=os.dup(parent_conn.fileno()))
        parent_conn.close()
        sock.setblocking(False)
        loop = asyncio.get_running_loop()

        def report(why: str) -> None:
            # The channel reads as dead only now, with the report: requests
            # sent meanwhile went to this channel, and the report fails them
            # with the rest. (Marked dead earlier, a new channel could take
            # over first, and this one's requests would never be answered.)
            if not self._lost:
                self._lost = True
                on_lost(why)

        def lost(why: str | None) -> None:
            if self._lost or self._losing:
                return
            self._losing = True
            if why is not None:
                report(why)
                return
            # The exit status takes a join; never on the loop.
            task = loop.create_task(asyncio.to_thread(self._exit_description))
            task.add_done_callback(lambda t: report(t.result()))

        self._transport, _ = await loop.create_connection(lambda: _Reader(on_message, lost), sock=sock)

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
        return not self._lost

    def send(self, msg: AgentMessage) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if isinstance(msg, Open):
            # The agent's environment now, not the forkserver's copy from
            # when it started.
            msg = Open(id=msg.id, spec=msg.spec, environ=dict(os.environ))
        body = self._enc.encode(msg)
        transport.writelines((HEADER.pack(len(body)), body))

    async def aclose(self) -> None:
        """Drop the pipe and make sure the worker is gone (bounded)."""
        self._lost = True
        if self._transport is not None:
            self._transport.close()
        proc = self._proc
        if proc is None:
            return
        await asyncio.to_thread(_reap, proc)


def _start_worker() -> tuple[Any, Any]:
    """Start a worker (blocking); returns the process and the agent's pipe end."""
    from lovia_mcp_worker.main import run

    ctx, process_class = _context()
    parent_conn, child_conn = ctx.Pipe(duplex=True)
    proc = process_class(target=run, args=(child_conn,), name="lovia-mcp-worker", daemon=False)
    try:
        proc.start()
    finally:
        child_conn.close()
    _untrack(proc)
    return proc, parent_conn


def _untrack(proc: Any) -> None:
    """Keep multiprocess's exit handler from joining this worker.

    At interpreter exit multiprocess joins every non-daemon child it started;
    a worker ends only when its pipe closes, which happens only once the
    agent has exited, so a connection left open would hang the agent's exit
    for ever. Untracked, the worker sees the pipe close at exit, kills its
    server tree and exits, as when the agent dies. (A daemon worker would be
    sent SIGTERM instead, leaving its server's orphans behind.)
    """
    from multiprocess import process

    process._children.discard(proc)


def _reap(proc: Any) -> None:
    proc.join(WORKER_EXIT_WAIT)
    if proc.exitcode is None:
        with contextlib.suppress(Exception):
            proc.kill()
        proc.join(WORKER_EXIT_WAIT)


class LocalChannel:
    """The host in the agent's own event loop (``isolation="none"``)."""

    def __init__(self) -> None:
        self._host: Any = None
        self.pid: int | None = os.getpid()
        self.alive = True

    async def start(self, on_message: OnMessage, on_lost: OnLost) -> None:
        from lovia_mcp_worker.host import Host

        self._host = Host(on_message, subreaper=False)

    def send(self, msg: AgentMessage) -> None:
        self._host.handle(msg)

    async def aclose(self) -> None:
        self.alive = False
        if self._host is not None:
            await self._host.aclose()


__all__ = ["LocalChannel", "ProcessChannel", "warm_up", "warm_up_soon"]
