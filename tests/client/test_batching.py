"""Concurrent calls share writes; a lone call is written at once.

Each of the three pipes a call crosses (agent -> worker frames, worker ->
server lines, worker -> agent answers) writes a message at once unless other
requests are in flight; then it is held, with the others of the loop
iteration, for one write at the iteration's end (or once they reach
``BATCH_BYTES``), in the order sent. Pure logic over recording transports:
no process is started.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lovia_mcp_worker.forkserver.channel import Channel
from lovia_mcp_worker.transport.stdio import StdioSession
from lovia_mcp_worker.wire.framing import BATCH_BYTES, frame_cap
from lovia_mcp_worker.wire.mcpjson import ContentBlock
from lovia_mcp_worker.wire.messages import (
    HEADER,
    AgentMessage,
    CallTool,
    Result,
    ServerSpec,
    agent_decoder,
    worker_decoder,
)

from lovia_mcp.client.worker_link import ProcessChannel

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


class Recorder(asyncio.Transport):
    """A transport that records each write (``write`` or ``writelines``) as the bytes it carried."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.writes.append(b"".join(list_of_data))


def frames_in(data: bytes, decode: Any) -> list[Any]:
    out = []
    while data:
        (n,) = HEADER.unpack_from(data)
        out.append(decode(data[HEADER.size : HEADER.size + n]))
        data = data[HEADER.size + n :]
    return out


def call(rid: int, size: int = 10) -> CallTool:
    return CallTool(id=rid, name="echo", arguments=b'{"text":"' + b"x" * size + b'"}')


def agent_channel() -> tuple[ProcessChannel, Recorder]:
    channel = ProcessChannel(frame_cap(0))
    recorder = Recorder()
    channel._transport = recorder  # the channel's writes are what is tested
    return channel, recorder


def test_the_agent_writes_a_lone_frame_at_once_and_held_ones_in_one_write_in_order() -> None:
    async def main() -> None:
        channel, recorder = agent_channel()
        channel.send(call(1))
        assert len(recorder.writes) == 1  # at once: no callback, no loop iteration
        for rid in range(2, 12):
            channel.send(call(rid), hold=True)
        channel.send(call(12))  # not held itself, but sent after held ones: it joins them
        assert len(recorder.writes) == 1
        await asyncio.sleep(0)  # the iteration's end
        assert len(recorder.writes) == 2
        decode = worker_decoder().decode
        assert [m.id for m in frames_in(recorder.writes[1], decode)] == list(range(2, 13))
        channel.send(call(13))  # the batch is over: at once again
        assert len(recorder.writes) == 3

    asyncio.run(main())


def test_held_frames_go_out_as_soon_as_they_reach_batch_bytes() -> None:
    async def main() -> None:
        channel, recorder = agent_channel()
        size = BATCH_BYTES // 4
        for rid in range(1, 6):
            channel.send(call(rid, size), hold=True)
        assert len(recorder.writes) == 1  # the first four reached BATCH_BYTES
        await asyncio.sleep(0)
        decode = worker_decoder().decode
        got = [[m.id for m in frames_in(w, decode)] for w in recorder.writes]
        assert got == [[1, 2, 3, 4], [5]]

    asyncio.run(main())


class FakeHost:
    """What the worker's channel asks of its host: how many requests are in flight."""

    def __init__(self) -> None:
        self.in_flight = 0

    def handle(self, msg: AgentMessage) -> None:
        pass


def result(rid: int) -> Result:
    return Result(id=rid, content=[ContentBlock(type="text", text=f"r{rid}")])


def test_the_worker_writes_a_lone_answer_at_once_and_concurrent_ones_together_in_order() -> None:
    async def main() -> None:
        host = FakeHost()
        channel = Channel(lambda emit: host)
        recorder = Recorder()
        channel.reader.connection_made(recorder)
        host.in_flight = 1  # the answer's own request only
        channel.emit(result(1))
        assert len(recorder.writes) == 1
        host.in_flight = 10  # nine more running: their answers may follow in this iteration
        for rid in range(2, 12):
            channel.emit(result(rid))
            host.in_flight -= 1
        assert len(recorder.writes) == 1
        await asyncio.sleep(0)
        decode = agent_decoder().decode
        assert len(recorder.writes) == 2
        assert [m.id for m in frames_in(recorder.writes[1], decode)] == list(range(2, 12))

    asyncio.run(main())


class Stdin(Recorder):
    """The server's stdin pipe; ``get_pipe_transport`` is the subprocess transport's."""

    def get_pipe_transport(self, fd: int) -> Recorder:
        assert fd == 0
        return self


def test_the_stdio_transport_writes_a_lone_request_at_once_and_concurrent_ones_together_in_order() -> None:
    async def main() -> None:
        session = StdioSession(
            ServerSpec(name="s", transport="stdio", command="-"),
            on_end=lambda reason: None,
            log=lambda level, text, stderr: None,
            on_garbage=lambda line: None,
        )
        stdin = Stdin()
        session.transport = stdin  # type: ignore[assignment]
        lone = asyncio.ensure_future(session.client.request("ping", None, what="ping"))
        await asyncio.sleep(0)
        assert len(stdin.writes) == 1  # at once
        session.client.feed(b'{"jsonrpc":"2.0","id":1,"result":{}}')
        await lone
        many = [asyncio.ensure_future(session.client.request("ping", None, what="ping")) for _ in range(10)]
        await asyncio.sleep(0)  # the requests are written, the first at once (none other in flight)
        assert len(stdin.writes) == 2
        await asyncio.sleep(0)  # the iteration's end
        assert len(stdin.writes) == 3
        assert [int(line.split(b'"id":')[1].split(b",")[0]) for line in stdin.writes[2].splitlines()] == list(
            range(3, 12)
        )
        for rid in range(2, 12):
            session.client.feed(b'{"jsonrpc":"2.0","id":%d,"result":{}}' % rid)
        await asyncio.gather(*many)

    asyncio.run(main())
