"""The worker reads the agent's ``Open`` ahead of its socket's transport (issue 19).

The agent writes its ``Open`` before the forkserver hands a worker the socket,
so ``serve`` finds it waiting: the open starts at once, the server is launched
before the transport is made (three loop iterations of a fresh worker), and
what is emitted before the transport exists is queued, then sent first and in
order. These drive ``serve`` in-process on a socket pair, as the forkserver's
worker does, with real servers.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from helpers import PY, RAW_SERVER, frame, run
from lovia_mcp_worker.forkserver import worker
from lovia_mcp_worker.wire.framing import FrameReader
from lovia_mcp_worker.wire.messages import (
    Close,
    Failure,
    Open,
    Opened,
    ServerSpec,
    WorkerMessage,
    agent_decoder,
)

# Bound on the answers (a raw server's start on a loaded machine).
ANSWER_WAIT = 30.0


async def _serve_with_written(
    spec: ServerSpec, *, then_close: bool, watch: list[bool] | None = None
) -> list[WorkerMessage]:
    """Write ``Open`` (and ``Close``) into the agent's end, then serve the worker's end; the worker's answers."""
    agent_end, worker_end = socket.socketpair()
    agent_end.setblocking(False)
    worker_end.setblocking(False)
    agent_end.sendall(frame(Open(id=1, spec=spec)) + (frame(Close(id=2)) if then_close else b""))
    got: list[WorkerMessage] = []
    done = asyncio.Event()
    last = 2 if then_close else 1

    def received(msg: WorkerMessage) -> None:
        got.append(msg)
        if getattr(msg, "id", None) == last:
            done.set()

    loop = asyncio.get_running_loop()
    served = worker._Served()  # noqa: SLF001 - what an idle worker makes ahead
    connect = loop.create_connection
    if watch is not None:

        async def recording(*args: Any, **kwargs: Any) -> Any:
            # Called by serve() only: whether the open had launched its server by then.
            watch.append(served.channel.host.launched.is_set())
            loop.create_connection = connect  # type: ignore[method-assign]
            return await connect(*args, **kwargs)

        loop.create_connection = recording  # type: ignore[method-assign]
    reader: FrameReader[WorkerMessage] = FrameReader(
        agent_decoder(), received, lambda why: done.set(), cap=1 << 20, peer="the worker"
    )
    serving = asyncio.ensure_future(worker.serve(worker_end, served=served))
    transport, _ = await connect(lambda: reader, sock=agent_end)
    try:
        await asyncio.wait_for(done.wait(), ANSWER_WAIT)
    finally:
        if not then_close and reader.transport is not None:
            reader.transport.write(frame(Close(id=3)))  # the worker's end
        await asyncio.wait_for(serving, ANSWER_WAIT)
        transport.close()
        worker_end.close()
    return got


def test_an_open_waiting_in_the_socket_launches_its_server_before_the_transport_is_made() -> None:
    watch: list[bool] = []
    spec = ServerSpec(name="raw", transport="stdio", command=PY, args=[RAW_SERVER])
    got = run(_serve_with_written(spec, then_close=False, watch=watch))
    opened = [m for m in got if isinstance(m, Opened)]
    print(f"launched when the transport was made: {watch}; answers: {[type(m).__name__ for m in got]}")
    assert opened and opened[0].tools, got
    assert watch == [True]


def test_an_open_that_fails_before_the_transport_exists_is_still_answered() -> None:
    # A missing command fails the open at once, before serve() has made the
    # transport: the Failure is queued, not dropped (the agent would wait
    # for it until its open timeout).
    spec = ServerSpec(name="missing", transport="stdio", command="/nonexistent/lovia-mcp-server")
    got = run(_serve_with_written(spec, then_close=False))
    failures = [m for m in got if isinstance(m, Failure) and m.id == 1]
    print(f"answers: {[(type(m).__name__, getattr(m, 'message', '')) for m in got]}")
    assert failures and "command not found" in failures[0].message


def test_a_close_read_with_the_open_is_served_too() -> None:
    # One read takes both frames: the Close after the Open is handled, not
    # left in the read's buffer (the worker would serve until its agent's
    # EOF). An open in flight at a close gets no answer of its own: the
    # agent fails it as closed.
    spec = ServerSpec(name="raw", transport="stdio", command=PY, args=[RAW_SERVER])
    got = run(_serve_with_written(spec, then_close=True))
    answered = [(type(m).__name__, getattr(m, "id")) for m in got if isinstance(getattr(m, "id", None), int)]
    print(f"answers: {answered}")
    assert answered[-1] == ("Closed", 2), answered
    assert [rid for _, rid in answered].count(2) == 1, answered
    assert all(isinstance(m, (Opened, Failure)) for m in got if getattr(m, "id", None) == 1)
