"""The worker process: frames in from the agent, a Host, frames back out.

Lifecycle: the agent starts the worker (from the forkserver) with one end of a
socket pair. The worker becomes a child subreaper, then serves until it
receives ``Close`` or the pipe reaches EOF, which is how it learns the agent
died, even by SIGKILL; either way it kills the server tree before exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from typing import Any, Final

from . import guard
from .host import Host
from .protocol import HEADER, Closed, Log, Open, WorkerMessage, encoder, worker_decoder

# The largest frame the worker accepts from the agent (tool arguments).
MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
# How long the worker gives its own shutdown (server tree kill) before exiting
# anyway; the kill escalation inside is bounded well below this.
EXIT_WAIT: Final = 5.0


class _Channel(asyncio.Protocol):
    """Length-framed msgpack in both directions over the worker's socket."""

    def __init__(self, host_factory: Any) -> None:
        self._enc = encoder()
        self._dec = worker_decoder()
        self._chunks: list[bytes] = []
        self._have = 0
        self._need: int | None = None
        self.transport: asyncio.Transport | None = None
        self.done = asyncio.get_running_loop().create_future()
        self.host: Host = host_factory(self.emit)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def emit(self, msg: WorkerMessage) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        body = self._enc.encode(msg)
        self.transport.writelines((HEADER.pack(len(body)), body))

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._have += len(data)
        while True:
            if self._need is None:
                if self._have < HEADER.size:
                    return
                buf = b"".join(self._chunks)
                (self._need,) = HEADER.unpack_from(buf)
                if self._need > MAX_REQUEST_BYTES:
                    self._finish()
                    return
                buf = buf[HEADER.size :]
                self._chunks, self._have = ([buf] if buf else []), len(buf)
            if self._have < self._need:
                return
            buf = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
            body, rest = buf[: self._need], buf[self._need :]
            self._chunks, self._have, self._need = ([rest] if rest else []), len(rest), None
            msg = self._dec.decode(body)
            if isinstance(msg, Open) and msg.environ is not None:
                # The agent's environment at open time (see Open.environ).
                os.environ.clear()
                os.environ.update(msg.environ)
            self.host.handle(msg)

    def eof_received(self) -> bool | None:
        self._finish()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _ForwardLogs(logging.Handler):
    """Library warnings in the worker (SDK, asyncio) go to the agent's logging.

    Without it they would reach the worker's stderr, which is the agent's, by
    the last-resort handler: lovia-mcp never prints by itself.
    """

    def __init__(self, emit: Any) -> None:
        super().__init__(logging.WARNING)
        self._send = emit

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send(Log(level=record.levelno, message=f"{record.name}: {record.getMessage()}"))
        except Exception:  # noqa: BLE001 - logging must never take the worker down
            pass


async def serve(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    closed_by_agent = asyncio.Event()

    def make_host(emit: Any) -> Host:
        def tracking_emit(msg: WorkerMessage) -> None:
            emit(msg)
            if isinstance(msg, Closed):
                closed_by_agent.set()

        return Host(tracking_emit, subreaper=guard.become_subreaper())

    _, channel = await loop.create_connection(lambda: _Channel(make_host), sock=sock)
    logging.getLogger().addHandler(_ForwardLogs(channel.emit))
    stop = asyncio.ensure_future(closed_by_agent.wait())
    await asyncio.wait({channel.done, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    with contextlib.suppress(asyncio.TimeoutError, Exception):
        await asyncio.wait_for(channel.host.aclose(), EXIT_WAIT)
    if channel.transport is not None:
        channel.transport.close()


def run(conn: Any) -> None:
    """Process entry point; ``conn`` is the worker's end of a multiprocess Pipe.

    The environment inherited from the forkserver dates from when *it*
    started; the agent's current one arrives with ``Open``.
    """
    gc.enable()  # off in the forkserver during the preload (_preload_begin)
    # The agent's terminal signals are the agent's to handle; the worker ends
    # when its pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = os.dup(conn.fileno())
    conn.close()
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    try:
        asyncio.run(serve(sock))
    finally:
        sock.close()
    # Skip interpreter teardown: nothing is left to flush, and a forked
    # interpreter's atexit handlers belong to the forkserver.
    sys.stdout.flush()
    os._exit(0)


__all__ = ["run", "serve"]
