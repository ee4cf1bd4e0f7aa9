"""What the worker tells unasked goes with its next answer, in one write (issue 19).

An open's "started" log and its ``Started`` used to be three writes with the
``Opened``, three wake-ups of the agent. Asides (logs, ``Started``,
``Ended``, ``ToolsChanged``, progress) now wait for the next answer or the
end of the loop's iteration. These drive ``serve`` in-process on a socket
pair with a real server, recording each write of the worker's transport.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

import pytest
from helpers import PY, RAW_SERVER, frame, run
from lovia_mcp_worker.forkserver import channel, worker
from lovia_mcp_worker.wire.framing import FrameReader
from lovia_mcp_worker.wire.messages import (
    HEADER,
    Close,
    Log,
    Open,
    Opened,
    ServerSpec,
    Started,
    WorkerMessage,
    agent_decoder,
)

# Bound on each answer (a raw server's start on a loaded machine).
ANSWER_WAIT = 30.0


def _messages(data: bytes) -> list[WorkerMessage]:
    dec = agent_decoder()
    out = []
    while data:
        (n,) = HEADER.unpack_from(data)
        out.append(dec.decode(data[HEADER.size : HEADER.size + n]))
        data = data[HEADER.size + n :]
    return out


async def _serve(after_open: Any = None) -> tuple[list[list[WorkerMessage]], list[int], list[WorkerMessage]]:
    """Serve a raw server's open, run ``after_open(got, event)``, close; each write (its messages), its thread, and all read."""
    agent_end, worker_end = socket.socketpair()
    agent_end.setblocking(False)
    worker_end.setblocking(False)
    agent_end.sendall(frame(Open(id=1, spec=ServerSpec(name="raw", transport="stdio", command=PY, args=[RAW_SERVER]))))
    writes: list[list[WorkerMessage]] = []
    threads: list[int] = []
    got: list[WorkerMessage] = []
    arrived = asyncio.Event()
    ended = asyncio.Event()

    def received(msg: WorkerMessage) -> None:
        got.append(msg)
        arrived.set()

    loop = asyncio.get_running_loop()
    served = worker._Served()  # noqa: SLF001 - what an idle worker makes ahead
    connect = loop.create_connection

    async def recording(*args: Any, **kwargs: Any) -> Any:
        # Called by serve() only: every write of the worker's transport is recorded.
        loop.create_connection = connect  # type: ignore[method-assign]
        transport, protocol = await connect(*args, **kwargs)
        real = transport.writelines

        def writelines(parts: Any) -> None:
            parts = list(parts)
            writes.append(_messages(b"".join(parts)))
            threads.append(threading.get_ident())
            real(parts)

        transport.writelines = writelines  # type: ignore[method-assign,assignment]
        return transport, protocol

    loop.create_connection = recording  # type: ignore[method-assign]
    reader: FrameReader[WorkerMessage] = FrameReader(
        agent_decoder(), received, lambda why: ended.set(), cap=1 << 20, peer="the worker"
    )
    serving = asyncio.ensure_future(worker.serve(worker_end, served=served))
    transport, _ = await connect(lambda: reader, sock=agent_end)

    async def until(pred: Any) -> None:
        while not pred():
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), ANSWER_WAIT)

    try:
        await until(lambda: any(isinstance(m, Opened) for m in got))
        if after_open is not None:
            await after_open(until, got)
    finally:
        transport.write(frame(Close(id=2)))
        await asyncio.wait_for(serving, ANSWER_WAIT)
        transport.close()
        worker_end.close()
    return writes, threads, got


def test_an_opens_logs_and_started_go_in_one_write_with_its_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    # Held for the open's answer however long the server takes to start here
    # (on a loaded machine a raw server's start can pass the 50 ms bound).
    monkeypatch.setattr(channel, "OPEN_ASIDES_WAIT", ANSWER_WAIT)
    writes, _, got = run(_serve())
    kinds = [[type(m).__name__ for m in w] for w in writes]
    print(f"the worker's writes: {kinds}")
    with_opened = writes[0]  # the whole open, the asides emitted before the transport existed too
    assert any(isinstance(m, Started) for m in with_opened), kinds
    assert any(isinstance(m, Log) and "started" in m.message for m in with_opened), kinds
    assert isinstance(with_opened[-1], Opened), kinds  # the asides first, in the order emitted
    assert [type(m) for m in got].count(Opened) == 1


def test_an_opens_asides_wait_for_its_answer_no_longer_than_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # With no wait at all they go at the end of the loop iteration they
    # were emitted in: before the server has even started.
    monkeypatch.setattr(channel, "OPEN_ASIDES_WAIT", 0.0)
    writes, _, _ = run(_serve())
    kinds = [[type(m).__name__ for m in w] for w in writes]
    print(f"the worker's writes: {kinds}")
    assert kinds[0] and "Opened" not in kinds[0], kinds
    assert all(k in ("Log", "Started") for k in kinds[0]), kinds


def test_a_log_from_another_thread_reaches_the_agent_written_by_the_loops_thread() -> None:
    async def log_from_a_thread(until: Any, got: list[WorkerMessage]) -> None:
        t = threading.Thread(target=logging.getLogger("some.library").warning, args=("from a thread",))
        t.start()
        await asyncio.to_thread(t.join)
        await until(lambda: any(isinstance(m, Log) and "from a thread" in m.message for m in got))

    writes, threads, _ = run(_serve(log_from_a_thread))
    loops = {
        threads[i] for i, w in enumerate(writes) if any(isinstance(m, Log) and "from a thread" in m.message for m in w)
    }
    print(f"written by threads {loops}; the test's (the loop's) is {threading.get_ident()}")
    assert loops == {threading.get_ident()}
