"""The worker process: frames in from the agent, a Host, frames back out.

Lifecycle: the agent starts the worker (from the forkserver) with one end of a
socket pair. The worker becomes a child subreaper, then serves until it
receives ``Close``, the pipe reaches EOF (which is how it learns the agent
died, even by SIGKILL) or it is sent SIGTERM; in every case it kills the
server tree before exiting. (An idle worker, with no agent yet, ends at once
on SIGTERM.)

Frames: requests over ``MAX_REQUEST_BYTES`` are skipped, not fatal (see
:mod:`.framing`); replies never pass the cap the agent reads with, which
arrives with ``Open``: an oversized reply becomes a ``too_large`` failure.
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
import threading
from typing import Any, Final, Protocol

from .containment import guard
from .framing import MAX_REQUEST_BYTES, FrameReader, frame_cap, peek_id, send_frame
from .session.host import Host
from .protocol import (
    HEADER, AgentMessage, Closed, Ended, Failure, Log, Open, Opened, Progress, Started, ToolsChanged, WorkerMessage,
    encoder, worker_decoder,
)

# How long the worker gives its own shutdown (server tree kill) before exiting
# anyway; the kill escalation inside is bounded well below this.
EXIT_WAIT: Final = 5.0
# How long an open read ahead of the socket's transport may keep the agent's
# further messages waiting for its server's launch (see serve).
LAUNCH_WAIT: Final = 0.1

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
    """Told once the open has answered (the forkserver's pool socket, see :meth:`Prepared.run`)."""

    def done(self, opened: bool) -> None:
        """The open has answered: with its server's tools (``opened``), or a failure."""


class _Channel:
    """Length-framed msgpack in both directions over the worker's socket.

    Outgoing frames never pass the cap the agent reads with: until ``Open``
    says otherwise, the smallest one an agent can have (``frame_cap(0)``).
    Asides (:data:`_ASIDES`) go out with the next answer, or at the end of
    the loop iteration they were emitted in (an open's: its answer, or
    :data:`OPEN_ASIDES_WAIT`), in the order emitted.
    """

    def __init__(self, host_factory: Any) -> None:
        self._enc = encoder()
        # Told once the open has answered (see Prepared.run; set by serve); the Open's id.
        self.answered: Answered | None = None
        self._open_id: int | None = None
        self.cap = frame_cap(0)
        # Frames emitted before the transport exists (see read_ahead); None: not reading ahead.
        self._early: list[bytes] | None = None
        # Asides emitted since the last write (see _ASIDES), sent with the next frame or by send_held.
        self._held: list[bytes] = []
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
            if not self._held:
                if self._opening:
                    self._loop.call_later(OPEN_ASIDES_WAIT, self.send_held)
                else:
                    self._loop.call_soon(self.send_held)
            self._held.append(body)
        elif self._held:
            held, self._held = self._held, []
            _write(transport, [*held, body])
        else:
            send_frame(transport, body)
        if isinstance(msg, (Opened, Failure)) and msg.id == self._open_id:
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

    def send_held(self) -> None:
        """Send the asides still held (the end of the loop iteration they were emitted in, or the end)."""
        held, self._held = self._held, []
        transport = self.reader.transport
        if held and transport is not None and not transport.is_closing():
            _write(transport, held)

    def _received(self, msg: AgentMessage) -> None:
        if isinstance(msg, Open):
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


class _ForwardLogs(logging.Handler):
    """Library warnings in the worker (SDK, asyncio) go to the agent's logging.

    Without it they would reach the worker's stderr, which is the agent's, by
    the last-resort handler: lovia-mcp never prints by itself. Before the
    worker has its agent (an idle worker), they still go there.
    """

    def __init__(self, channel: _Channel) -> None:
        super().__init__(logging.WARNING)
        self._channel = channel

    @property
    def connected(self) -> bool:
        """Whether records go to the agent yet (else to stderr)."""
        return self._channel.attached

    def emit(self, record: logging.LogRecord) -> None:
        if not self.connected:
            if logging.lastResort is not None:
                logging.lastResort.handle(record)
            return
        try:
            self._channel.emit_from_any_thread(Log(level=record.levelno, message=f"{record.name}: {record.getMessage()}"))
        except Exception:  # noqa: BLE001 - logging must never take the worker down
            pass


class _Served:
    """What serving a connection needs before its socket: the channel, its host, the handlers.

    Made by an idle worker while it waits (:class:`Prepared`), so the open
    finds them built; :func:`serve` makes them when there was no wait. The
    log handler and the SIGTERM handler are installed here too (asyncio's
    ``add_signal_handler`` alone took ~0.5 ms of a cold worker's open):
    both act as without them until the agent is connected.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.closed_by_agent = asyncio.Event()

        def make_host(emit: Any) -> Host:
            def tracking_emit(msg: WorkerMessage) -> None:
                emit(msg)
                if isinstance(msg, Closed):
                    self.closed_by_agent.set()

            return Host(tracking_emit, subreaper=guard.become_subreaper())

        self.channel = _Channel(make_host)
        self.forward = _ForwardLogs(self.channel)
        logging.getLogger().addHandler(self.forward)
        # Python warnings (a ResourceWarning under -X dev, a DeprecationWarning)
        # go to logging, and so to the agent, instead of the worker's stderr.
        logging.captureWarnings(True)
        self._sigterm: Any = None  # the handler before this one (restored by undo)
        with contextlib.suppress(ValueError):  # not the main thread: SIGTERM keeps its handler
            # Interrupting system calls (signal.signal's default; asyncio's
            # add_signal_handler restarts them): an idle worker blocked in
            # its recvmsg must get back to Python for this handler to run.
            self._sigterm = signal.signal(signal.SIGTERM, self._terminated)

    def _terminated(self, signum: int, frame: object) -> None:
        """SIGTERM (someone stopping the worker) ends it as the agent's exit does.

        The server tree is killed first, not left to its parent-death
        signal. A worker without its agent yet (an idle one) ends as by
        default.
        """
        if not self.forward.connected:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is exiting anyway
            self.loop.call_soon_threadsafe(self.closed_by_agent.set)

    def undo(self) -> None:
        """The handlers off again (the connection is over)."""
        if self._sigterm is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._sigterm)
        logging.captureWarnings(False)
        logging.getLogger().removeHandler(self.forward)


async def serve(sock: socket.socket, answered: Answered | None = None, served: _Served | None = None) -> None:
    """Serve the agent on ``sock`` until the end; ``served``: made ahead, else made here."""
    if served is None:
        served = _Served()
    channel = served.channel
    channel.answered = answered
    try:
        if channel.read_ahead(sock):
            # The server's launch goes first: the transport's making (three
            # loop iterations, ~1 ms of a fresh worker) then overlaps the
            # server's start. Bounded: the agent's next message (a Cancel,
            # a Close) waits in the socket meanwhile.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(channel.host.launched.wait(), LAUNCH_WAIT)
        await served.loop.create_connection(lambda: channel.reader, sock=sock)
        channel.flush()
        await _serve(channel, served.closed_by_agent)
    finally:
        served.undo()


async def _serve(channel: _Channel, closed_by_agent: asyncio.Event) -> None:
    stop = asyncio.ensure_future(closed_by_agent.wait())
    await asyncio.wait({channel.done, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    with contextlib.suppress(asyncio.TimeoutError, Exception):
        await asyncio.wait_for(channel.host.aclose(), EXIT_WAIT)
    route = sys.modules.get("lovia_mcp_worker.sandbox.netroute")
    if route is not None:  # a sandbox with a network allowlist ran: stop its proxy
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(route.aclose_all(), EXIT_WAIT)
    landlock = sys.modules.get("lovia_mcp_worker.sandbox.landlock")
    if landlock is not None:  # remove the Landlock servers' private temporary directories
        landlock.cleanup()
    if channel.transport is not None:
        channel.send_held()
        channel.transport.close()


class Prepared:
    """A worker's set-up that needs no socket: done by an idle worker while it waits for one.

    Collection back on (off in the forkserver during the preload), the
    agent's terminal signals ignored (the worker ends when its pipe closes),
    the event loop made (with a pidfd child watcher), the cgroup layout
    detected and, ``ahead`` of a request, the open's path rehearsed
    (:func:`_rehearse`) and the channel, host and handlers made (:class:`_Served`):
    a worker forked ahead of its request (:mod:`.process`) pays none of it
    on the open's path.
    """

    def __init__(self, *, ahead: bool = False) -> None:
        gc.enable()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.runner = asyncio.Runner()
        loop = self.runner.get_loop()
        if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):
            # Python 3.11's default child watcher starts a thread per server
            # (~1 ms of its spawn); a pidfd in the loop costs none (3.12
            # picks it by itself).
            with contextlib.suppress(OSError):
                os.close(os.pidfd_open(os.getpid()))  # the kernel has pidfds (Linux 5.3+)
                watcher = asyncio.PidfdChildWatcher()
                watcher.attach_loop(loop)
                asyncio.set_child_watcher(watcher)
        # Which cgroups this worker may make is detected once per process
        # (two /proc reads and a sweep): here, not on the first open's path.
        from .containment import cgroup

        with contextlib.suppress(Exception):  # the open detects again, and reports what fails
            cgroup.layout()
        self.served: _Served | None = None
        if ahead:  # an idle worker, waiting: never on a request's path
            with contextlib.suppress(Exception):  # only a head start: the open does it all anyway
                self.runner.run(_rehearse())
            with contextlib.suppress(Exception):  # made on the open's path instead
                self.served = self.runner.run(_made_ahead())

    def run(self, conn: Any, answered: Answered | None = None) -> None:
        """Serve ``conn`` (the worker's end of its socket pair) until the end; never returns.

        ``answered`` (a worker from the forkserver's pool): told once the
        open has answered, which tells the forkserver this open is off the
        CPU and its replacement may be forked.
        """
        fd = os.dup(conn.fileno())
        conn.close()
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        try:
            with self.runner:
                self.runner.run(serve(sock, answered, self.served))
        finally:
            sock.close()
        # Skip interpreter teardown: nothing is left to flush, and a forked
        # interpreter's atexit handlers belong to the forkserver.
        sys.stdout.flush()
        os._exit(0)


async def _rehearse() -> None:
    """Walk the open's own code once, off its path, and start the loop's thread.

    A forked worker copies each page of the forkserver's it writes to, and
    touching an object writes its reference count: ~800 page faults on an
    open's path (~6 ms of the worker's CPU, measured). Some are taken here,
    by an idle worker while it waits: the messages' code and the thread
    that moves the server into its cgroup (it stays, idle, in the loop's
    executor); ~300 fewer faults and ~1 ms less CPU per open.
    """
    from .protocol import ServerSpec

    enc = encoder()
    msg = worker_decoder().decode(enc.encode(Open(id=0, spec=ServerSpec(name="-", transport="stdio", command="-"))))
    host = Host(lambda m: None, subreaper=False)
    host.stats()
    enc.encode(Opened(id=0, server_pid=0, tools=[], generation=1, protocol_version="-", listing_ttl=None))
    del msg, host
    await asyncio.to_thread(int)


async def _made_ahead() -> _Served:
    return _Served()


def run(conn: Any) -> None:
    """Process entry point; ``conn`` is the worker's end of its socket pair.

    Anything with ``fileno()`` and ``close()`` will do (a ``socket``, as the
    forkserver passes, or a connected pipe-like object).

    The environment inherited from the forkserver dates from when *it*
    started; the agent's current one arrives with ``Open``.
    """
    Prepared().run(conn)


__all__ = ["EXIT_WAIT", "OPEN_ASIDES_WAIT", "Answered", "Prepared", "adopt_environment", "run", "serve"]
