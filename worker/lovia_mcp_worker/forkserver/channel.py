"""The worker's end of its socket to the agent: frames in to the host, frames back out.

Frames: requests over ``MAX_REQUEST_BYTES`` are skipped, not fatal (see
:mod:`.framing`); replies never pass the cap the agent reads with, which
arrives with ``Open``: an oversized reply becomes a ``too_large`` failure.
What the worker tells unasked (its asides: logs, ``Started``, ``Ended``,
``ToolsChanged``, progress) goes with its next answer, in one write; the
answers of concurrent calls go together at the end of the loop iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from typing import Any, Final, Protocol

from ..session.host import Host
from ..wire.framing import BATCH_BYTES, MAX_REQUEST_BYTES, FrameReader, frame_cap, peek_id, send_frame
from ..wire.messages import (
    HEADER,
    AgentMessage,
    Ended,
    Failure,
    Log,
    Open,
    Opened,
    Progress,
    Started,
    ToolsChanged,
    WorkerMessage,
    encoder,
    worker_decoder,
)

logger = logging.getLogger("lovia_mcp_worker")

# What the worker tells unasked: it waits for the next answer, or the end of
# the loop's iteration, to go in the same write (an open's "started" log and
# Started ride with its Opened: one wake-up of the agent, not three).
_ASIDES: Final = (Log, Started, Ended, ToolsChanged, Progress)
# During an open its asides wait for its answer, which comes some loop
# iterations after them, but no longer than this: a slow server's start-up
# messages still reach the agent's logs as it starts.
OPEN_ASIDES_WAIT: Final = 0.05


class Answered(Protocol):
    """Told once the worker is taken, then once the open has answered (the forkserver's pool socket, see :mod:`.start`)."""

    def taken(self) -> None:
        """The server's launch is under way (or the open is being read): the forkserver may count this worker taken."""

    def done(self, opened: bool) -> None:
        """The open has answered: with its server's tools (``opened``), or a failure."""


class Channel:
    """Length-framed msgpack in both directions over the worker's socket.

    Outgoing frames never pass the cap the agent reads with: until ``Open``
    says otherwise, the smallest one an agent can have (``frame_cap(0)``).
    Asides (:data:`_ASIDES`) go out with the next answer, or at the end of
    the loop iteration they were emitted in (an open's: its answer, or
    :data:`OPEN_ASIDES_WAIT`); an answer goes at once, unless other requests
    are in flight: then at the iteration's end, with theirs; all in the
    order emitted.
    """

    def __init__(self, host_factory: Any) -> None:
        self._enc = encoder()
        # Told once the open has answered (see main.Prepared.run; set by main.serve); the Open's id.
        self.answered: Answered | None = None
        self._open_id: int | None = None
        self.cap = frame_cap(0)
        # Frames emitted before the transport exists (see read_ahead); None: not reading ahead.
        self._early: list[bytes] | None = None
        # Frames held since the last write, in the order emitted: asides (see
        # _ASIDES), sent with the next answer or by send_held, and answers
        # held while other requests are in flight (see emit).
        self._held: list[bytes] = []
        self._holding = False  # answers are held for this loop iteration's end (_end_iteration is due)
        self._batched = 0  # bytes of the answers held since
        self._opening = False  # the Open is in, its answer not yet out
        self._early_answer = False  # an answer is among the early frames
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.reader: FrameReader[AgentMessage] = FrameReader(
            worker_decoder(),
            self._received,
            self._lost,
            cap=MAX_REQUEST_BYTES,
            peer="the agent",
            on_skip=self._skipped,
        )
        self.done = self._loop.create_future()
        self.host: Host = host_factory(self.emit)

    @property
    def transport(self) -> asyncio.Transport | None:
        return self.reader.transport

    def read_ahead(self, sock: socket.socket) -> bool:
        """Take what the agent sent before the hand-off (its ``Open``) from ``sock`` now; whether it was an ``Open``.

        The agent writes its ``Open`` before the forkserver hands a worker
        the socket, so it is waiting there: decoded at once, the open starts
        before the loop has made the socket's transport. What is emitted
        meanwhile is queued and goes first once the transport is there.
        Whatever else (a partial frame, an error, EOF) is the transport's to
        see next.
        """
        self._early = []
        with contextlib.suppress(OSError):  # BlockingIOError: nothing there yet
            n = sock.recv_into(self.reader.get_buffer(-1), 0, socket.MSG_DONTWAIT)
            if n:
                self.reader.buffer_updated(n)
        return self._open_id is not None

    @property
    def attached(self) -> bool:
        """Whether this channel has its agent (the socket is read, the transport may still be in the making)."""
        return self._early is not None or self.reader.transport is not None

    def flush(self) -> None:
        """Send what was emitted before the transport was made (one write), or hold it if only asides of an open."""
        early, self._early = self._early, None
        transport = self.reader.transport
        if not early or transport is None or transport.is_closing():
            return
        if self._opening and not self._early_answer:
            self._held = early + self._held  # they go with the open's answer
            self._loop.call_later(OPEN_ASIDES_WAIT, self.send_held)
            return
        _write(transport, early)

    def emit(self, msg: WorkerMessage) -> None:
        transport, early = self.reader.transport, self._early
        if transport is None:
            if early is None:
                return  # no agent yet
        elif transport.is_closing():
            return
        elif early:
            self.flush()
        body = self._enc.encode(msg)
        if len(body) > self.cap:
            rid = getattr(msg, "id", None)
            if not isinstance(rid, int):
                return  # a Log: dropped (the agent would drop the worker)
            body = self._enc.encode(
                Failure(
                    id=rid,
                    kind="too_large",
                    message=f"the reply was {len(body):,} bytes, over the frame cap of {self.cap:,} bytes",
                    hint="Raise Limits(max_result_bytes=...) or ask the tool for less.",
                )
            )
        if transport is None:
            assert early is not None
            early.append(body)
            self._early_answer = self._early_answer or not isinstance(msg, _ASIDES)
        elif isinstance(msg, _ASIDES):
            if not self._held and not self._holding:
                if self._opening:
                    self._loop.call_later(OPEN_ASIDES_WAIT, self.send_held)
                else:
                    self._loop.call_soon(self.send_held)
            self._held.append(body)
        elif self._holding or self.host.in_flight > 1:
            # Other requests are in flight (concurrent calls): their answers
            # may follow in this loop iteration and go with this one at its
            # end (or once they reach BATCH_BYTES), one write and one wake-up
            # of the agent for all of them. A lone answer goes at once and
            # costs no callback (an extra loop iteration on its path).
            if not self._holding:
                self._holding = True
                self._loop.call_soon(self._end_iteration)
            self._held.append(body)
            self._batched += len(body)
            if self._batched >= BATCH_BYTES:
                self.send_held()
        else:
            held, self._held = self._held, []  # the asides before it go with it
            if held:
                _write(transport, [*held, body])
            else:
                send_frame(transport, body)
        if self._opening and isinstance(msg, (Opened, Failure)) and msg.id == self._open_id:
            self._opening = False
            if self.answered is not None:
                self.answered.done(isinstance(msg, Opened))
                self.answered = None

    def emit_from_any_thread(self, msg: WorkerMessage) -> None:
        """:meth:`emit`, from a thread of the worker's too (a library logging in the loop's executor)."""
        if threading.get_ident() == self._thread:
            self.emit(msg)
        else:
            self._loop.call_soon_threadsafe(self.emit, msg)

    def _end_iteration(self) -> None:
        self._holding = False
        self.send_held()

    def send_held(self) -> None:
        """Send the frames still held (the end of the loop iteration they were emitted in, or the end)."""
        held, self._held, self._batched = self._held, [], 0
        transport = self.reader.transport
        if held and transport is not None and not transport.is_closing():
            _write(transport, held)

    def _received(self, msg: AgentMessage) -> None:
        if type(msg) is Open:
            self._open_id = msg.id
            self._opening = True
            self.cap = frame_cap(msg.spec.limits.max_result_bytes)
            if msg.environ is not None:
                # The agent's environment at open time (see Open.environ).
                adopt_environment(msg.environ)
        self.host.handle(msg)

    def _skipped(self, size: int, why: str, head: bytes) -> None:
        # The agent checks sizes before sending, so this is a bug or a
        # mismatch; answer the request if its id is readable, and carry on.
        logger.warning("skipped a request: %s", why)
        rid = peek_id(head)
        if rid is None:
            return
        if size > self.reader.cap:
            message = f"the request was {size:,} bytes, over the worker's cap of {self.reader.cap:,} bytes"
            failure = Failure(id=rid, kind="too_large", message=message, hint="Send smaller tool arguments.")
        else:
            failure = Failure(
                id=rid,
                kind="internal",
                message=f"the worker could not decode the request: {why}",
                hint="The agent and the worker disagree on the wire protocol: reinstall lovia-mcp.",
            )
        self.emit(failure)

    def _lost(self, why: str | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


def _write(transport: asyncio.Transport, bodies: list[bytes]) -> None:
    """Frames in one write."""
    transport.writelines([part for body in bodies for part in (HEADER.pack(len(body)), body)])


def adopt_environment(environ: dict[str, str]) -> None:
    """Make ``os.environ`` equal to ``environ``, touching only what differs.

    Usually nothing does (the forkserver's copy dates from the agent's
    start): clearing and refilling ``os.environ`` costs a call to
    ``unsetenv`` and ``putenv`` per variable, ~0.5 ms on an open's path.
    """
    current = os.environ
    for name in [n for n in current if n not in environ]:
        del current[name]
    for name, value in environ.items():
        if current.get(name) != value:
            current[name] = value


__all__ = ["OPEN_ASIDES_WAIT", "Answered", "Channel", "adopt_environment"]
