"""The worker process: frames in from the agent, a Host, frames back out.

Lifecycle: the agent starts the worker (from the forkserver) with one end of a
socket pair. The worker becomes a child subreaper, then serves until it
receives ``Close``, the pipe reaches EOF (which is how it learns the agent
died, even by SIGKILL) or it is sent SIGTERM; in every case it kills the
server tree before exiting. (An idle worker, with no agent yet, ends at once
on SIGTERM.)

The socket's two directions are the channel's (:mod:`.channel`).
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

from ..containment import guard
from ..session.host import Host
from ..wire.messages import Closed, Log, Open, Opened, WorkerMessage, encoder, worker_decoder
from .channel import Answered, Channel

# How long the worker gives its own shutdown (server tree kill) before exiting
# anyway; the kill escalation inside is bounded well below this.
EXIT_WAIT: Final = 5.0
# How long an open read ahead of the socket's transport may keep the agent's
# further messages waiting for its server's launch (see serve).
LAUNCH_WAIT: Final = 0.1


class _ForwardLogs(logging.Handler):
    """Library warnings in the worker (SDK, asyncio) go to the agent's logging.

    Without it they would reach the worker's stderr, which is the agent's, by
    the last-resort handler: lovia-mcp never prints by itself. Before the
    worker has its agent (an idle worker), they still go there.
    """

    def __init__(self, channel: Channel) -> None:
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
            self._channel.emit_from_any_thread(
                Log(level=record.levelno, message=f"{record.name}: {record.getMessage()}")
            )
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
                if type(msg) is Closed:
                    self.closed_by_agent.set()

            return Host(tracking_emit, subreaper=guard.become_subreaper())

        self.channel = Channel(make_host)
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
        if answered is not None:
            answered.taken()  # off the server's launch: the forkserver's work waits for it
        await served.loop.create_connection(lambda: channel.reader, sock=sock)
        channel.flush()
        await _serve(channel, served.closed_by_agent)
    finally:
        served.undo()


async def _serve(channel: Channel, closed_by_agent: asyncio.Event) -> None:
    stop = asyncio.ensure_future(closed_by_agent.wait())
    await asyncio.wait({channel.done, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    with contextlib.suppress(asyncio.TimeoutError, Exception):
        await asyncio.wait_for(channel.host.aclose(), EXIT_WAIT)
    route = sys.modules.get("lovia_mcp_worker.sandbox.egress.netroute")
    if route is not None:  # a sandbox with a network allowlist ran: stop its proxy
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(route.aclose_all(), EXIT_WAIT)
    bridge = sys.modules.get("lovia_mcp_worker.sandbox.egress.netbridge")
    if (
        bridge is not None
    ):  # boxes with the network off: their deny-all listeners (bwrap's end and the host's close did most)
        bridge.close_all()
    backends = sys.modules.get("lovia_mcp_worker.sandbox.registry")
    if backends is not None:  # what the backends keep for their servers (Landlock's temporary directories)
        backends.cleanup()
    if channel.transport is not None:
        channel.send_held()
        channel.transport.close()


class Prepared:
    """A worker's set-up that needs no socket: done by an idle worker while it waits for one.

    Collection back on (off in the forkserver during the preload), the
    agent's terminal signals ignored (the worker ends when its pipe closes),
    the event loop made (with a pidfd child watcher), the cgroup layout
    detected and, ``ahead`` of a request, the first generation's cgroup made
    (:func:`.containment.cgroup.premake`), the open's path rehearsed
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
        from ..containment import cgroup, cgroup_layout

        with contextlib.suppress(Exception):  # the open detects again, and reports what fails
            cgroup_layout.layout()
        self.served: _Served | None = None
        if ahead:  # an idle worker, waiting: never on a request's path
            with contextlib.suppress(Exception):  # only a head start: the open makes its cgroup anyway
                cgroup.premake()
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
            from ..containment import cgroup

            cgroup.discard_premade()  # made ahead and never taken (no contained server ran)
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
    from ..wire.messages import ServerSpec

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


__all__ = ["EXIT_WAIT", "Prepared", "run", "serve"]
