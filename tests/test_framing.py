"""The agent's frame reader, fed the way asyncio feeds a BufferedProtocol.

Pure logic, so driven directly: every frame must come out whole and in
order whatever the read boundaries, small frames parsed in place and large
ones through their own buffer.
"""

from __future__ import annotations

import random

import pytest

from lovia_mcp import _channel
from lovia_mcp_worker.protocol import HEADER, ContentBlock, Log, Result, WorkerMessage, encoder


def frames(messages: list[WorkerMessage]) -> bytes:
    enc = encoder()
    out = b""
    for m in messages:
        body = enc.encode(m)
        out += HEADER.pack(len(body)) + body
    return out


def feed(reader: _channel._Reader, data: bytes, sizes: random.Random) -> None:
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        n = min(len(buf), len(data) - pos, sizes.randint(1, 300_000))
        buf[:n] = data[pos : pos + n]
        reader.buffer_updated(n)
        pos += n


@pytest.mark.parametrize("seed", range(5))
def test_frames_come_out_whole_and_in_order_whatever_the_read_boundaries(seed: int) -> None:
    rng = random.Random(seed)
    sent: list[WorkerMessage] = []
    for i in range(60):
        size = rng.choice([0, 10, 1000, 60_000, 70_000, 1_500_000])
        if i % 3 == 0:
            sent.append(Log(level=20, message=f"line {i}"))
        else:
            sent.append(Result(id=i, content=[ContentBlock(type="text", text="x" * size)]))
    got: list[WorkerMessage] = []
    lost: list[str | None] = []
    reader = _channel._Reader(got.append, lost.append)
    feed(reader, frames(sent), rng)
    assert got == sent
    assert lost == []


def test_a_frame_over_the_cap_drops_the_worker_instead_of_allocating() -> None:
    lost: list[str | None] = []
    reader = _channel._Reader(lambda m: None, lost.append)
    buf = reader.get_buffer(-1)
    buf[:4] = HEADER.pack(_channel.MAX_FRAME_BYTES + 1)
    reader.buffer_updated(4)
    assert lost and "frame" in str(lost[0])


def test_an_undecodable_frame_drops_the_worker_with_a_clear_reason() -> None:
    lost: list[str | None] = []
    reader = _channel._Reader(lambda m: None, lost.append)
    data = HEADER.pack(3) + b"\xc1\xc1\xc1"
    buf = reader.get_buffer(-1)
    buf[: len(data)] = data
    reader.buffer_updated(len(data))
    assert lost and "undecodable" in str(lost[0])
