"""Frames on the agent <-> worker pipe: one reader, used by both sides.

A frame is a 4-byte little-endian body length (:data:`~.protocol.HEADER`)
followed by a msgpack body. :class:`FrameReader` is an
``asyncio.BufferedProtocol`` that cuts the stream into bodies and decodes
each with a typed decoder; what it does with a frame over its cap is the
one thing the two sides want differently:

- the agent reads a worker, which is on the untrusted side: a frame over the
  cap (``frame_cap(max_result_bytes)``, agreed at open) or an undecodable one
  fails the channel, and nothing over the cap is ever allocated;
- the worker reads the agent, which is trusted: such a frame is skipped (its
  body read into the fixed buffer and discarded), reported to ``on_skip``,
  and the worker carries on; the frame after it comes out whole.

Caveats: a skipped frame leaves the stream in step only because the header
was honest; the agent is trusted to send honest headers.

This module imports nothing but the standard library and msgspec: the agent
process imports it and must never pull in ``mcp``.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
from collections.abc import Callable
from typing import Final, Generic, TypeVar

import msgspec

from .messages import HEADER

# The largest frame the agent sends a worker: tool arguments, or an Open with
# the agent's environment. Far above any sane argument list, well below what
# hurts a worker to hold twice (the frame, then its decoded form).
MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
# What a worker's frame may carry on top of the server's result. The host
# refuses a server message over ``max_result_bytes``; re-encoded as msgpack a
# result stays about that size (string headers for JSON quotes), and the rest
# is the envelope: the message tag, field names, the id. 1 MiB covers that
# with room to spare, while a hostile worker still cannot make the agent
# allocate much past the limit the user set.
FRAME_OVERHEAD: Final = 1024 * 1024
# The reader's fixed buffer: small frames are parsed in place from it and a
# skipped frame's body passes through it; larger frames get a buffer of their own.
READ_BUFFER: Final = 64 * 1024
# Frames held for one write (while other requests are in flight, the
# channels hold frames until the end of the loop iteration; the stdio
# transport does so with its lines to the server) go out as soon as they
# reach this many bytes. Dozens of small frames a write already make the write's cost
# per frame small, and the other side starts on them while the rest are
# made: a pipeline, not three stages in turn. Measured on 300 concurrent
# small calls: 7.1 ms with 4 KiB batches, 7.7 with 2 KiB, 9.1 with 64 KiB.
BATCH_BYTES: Final = 4 * 1024
# A frame body this large gets a lazily faulted buffer of its own (see
# _body_buffer); below it, zero-filling a bytearray costs less than a mapping.
LAZY_BUFFER: Final = 1024 * 1024
# How much of a skipped frame's body ``on_skip`` gets: enough for the message
# tag and id (see :func:`peek_id`).
HEAD_BYTES: Final = 64

M = TypeVar("M")
# on_skip(body size, why, the body's first bytes)
OnSkip = Callable[[int, str, bytes], None]


def frame_cap(max_result_bytes: int) -> int:
    """The largest frame body a worker may send on a connection with this result limit."""
    return max(0, max_result_bytes) + FRAME_OVERHEAD


def send_frame(transport: asyncio.WriteTransport, body: bytes) -> None:
    transport.writelines((HEADER.pack(len(body)), body))


class FrameReader(asyncio.BufferedProtocol, Generic[M]):
    """Length-prefixed frames, decoded with ``decoder``, read without stalling the loop.

    Small frames are parsed in place from one fixed buffer. A frame larger than
    that buffer (and within ``cap``) gets a buffer of its exact size, which the
    socket reads fill directly: the copying (and the page faults of fresh
    memory) happen inside the ``recv_into`` system calls, spread over many loop
    iterations, instead of in one Python step that joins chunks at the end.

    ``peer`` names the other side in failure reasons ("the worker"). Without
    ``on_skip``, a frame over ``cap`` or one that does not decode calls
    ``on_lost`` with the reason and aborts the transport; with it, the frame is
    skipped and reported, and reading goes on. ``on_lost(None)`` means the
    pipe closed.
    """

    def __init__(
        self,
        decoder: msgspec.msgpack.Decoder[M],
        on_message: Callable[[M], None],
        on_lost: Callable[[str | None], None],
        *,
        cap: int,
        peer: str,
        on_skip: OnSkip | None = None,
    ) -> None:
        self._dec = decoder
        self._on_message = on_message
        self._on_lost = on_lost
        self._on_skip = on_skip
        self.cap = cap
        self._peer = peer
        self._buf = bytearray(READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first unparsed byte in _buf
        self._end = 0  # end of the data in _buf
        self._big: memoryview | None = None  # the body of a frame larger than _buf
        self._big_map: mmap.mmap | None = None  # its mapping, when it has one (unmapped off the loop)
        self._big_have = 0
        self._skip_left = 0  # body bytes of a skipped frame still to come
        self._skip_size = 0
        self._skip_head: bytearray | None = None  # None once reported
        self._failed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big[self._big_have :]
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buf):
            # Full: move the partial frame to the front (it fits: frames
            # larger than the buffer go to their own).
            rest = self._end - self._start
            self._buf[:rest] = self._view[self._start : self._end]
            self._start, self._end = 0, rest
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._failed:
            return
        if self._big is not None:
            self._big_have += nbytes
            if self._big_have == len(self._big):
                body, self._big = self._big, None
                self._deliver(body)
                body.release()
                _unmap_soon(self._big_map)
                self._big_map = None
            return
        self._end += nbytes
        self._parse()

    def _parse(self) -> None:
        size = HEADER.size
        while True:
            if self._skip_left:
                take = min(self._skip_left, self._end - self._start)
                self._skipped(self._view[self._start : self._start + take])
                self._start += take
                if self._skip_left:
                    break
                continue
            if self._end - self._start < size:
                break
            (need,) = HEADER.unpack_from(self._buf, self._start)
            body_start = self._start + size
            if need > self.cap:
                why = f"{self._peer} sent a {need:,}-byte frame (cap {self.cap:,})"
                if self._on_skip is None:
                    self._fail(why)
                    return
                self._start = body_start
                self._skip_left = self._skip_size = need
                self._skip_head = bytearray()
                continue
            if self._end - body_start >= need:
                self._start = body_start + need
                if not self._deliver(self._view[body_start : self._start]):
                    return
                continue
            if size + need > len(self._buf):
                have = self._end - body_start
                big, self._big_map = _body_buffer(need)
                big[:have] = self._view[body_start : self._end]
                self._big, self._big_have = big, have
                self._start = self._end = 0
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _skipped(self, chunk: memoryview) -> None:
        self._skip_left -= len(chunk)
        head = self._skip_head
        if head is None:
            return
        head += chunk[: HEAD_BYTES - len(head)]
        if len(head) >= min(HEAD_BYTES, self._skip_size):
            self._skip_head = None
            assert self._on_skip is not None
            why = f"{self._peer} sent a {self._skip_size:,}-byte frame (cap {self.cap:,})"
            self._on_skip(self._skip_size, why, bytes(head))

    def _deliver(self, body: memoryview) -> bool:
        try:
            msg = self._dec.decode(body)
        except msgspec.DecodeError as exc:
            why = f"{self._peer} sent an undecodable message: {exc}"
            if self._on_skip is None:
                self._fail(why)
                return False
            self._on_skip(len(body), why, bytes(body[:HEAD_BYTES]))
            return True
        self._on_message(msg)
        return True

    def _fail(self, why: str) -> None:
        self._failed = True
        if self.transport is not None:
            self.transport.abort()
        self._on_lost(why)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(None)


def _body_buffer(size: int) -> tuple[memoryview, mmap.mmap | None]:
    """A writable buffer of ``size`` bytes whose pages are not touched yet, and its mapping if it has one.

    ``bytearray(size)`` zero-fills its memory at once: for a 10 MB frame that
    is ~2,400 page faults (~4 ms here) in the one loop iteration that reads
    the header. An anonymous mapping is faulted in by the ``recv_into``
    calls that fill it, a socket buffer at a time; once the frame is
    decoded it is unmapped off the loop (:func:`_unmap_soon`; no decoded
    message keeps a view: the protocol has no ``msgspec.Raw`` fields).
    """
    if size < LAZY_BUFFER:
        return memoryview(bytearray(size)), None
    mapping = mmap.mmap(-1, size)
    return memoryview(mapping), mapping


def _unmap_soon(mapping: mmap.mmap | None) -> None:
    """Unmap a frame's mapping on the loop's executor, not on the loop.

    Unmapping 10 MB of faulted-in pages takes ~2 ms (measured here), and
    the read that completed the frame has just spent about as long decoding
    it. Next iteration: the transport's view of the buffer (the read's own)
    is gone by then; ``close`` releases the GIL while it unmaps. A mapping
    something still views is left to the garbage collector, as before.
    """
    if mapping is None:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # fed outside a loop: freed with its last view
        return
    loop.call_soon(_unmap_on_executor, loop, mapping)


def _unmap_on_executor(loop: asyncio.AbstractEventLoop, mapping: mmap.mmap) -> None:
    try:
        loop.run_in_executor(None, _close_mapping, mapping)
    except RuntimeError:  # the loop's executor is shut down: unmapped here
        _close_mapping(mapping)


def _close_mapping(mapping: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # still viewed: freed with its last view
        mapping.close()


def peek_id(head: bytes) -> int | None:
    """The ``id`` of a message from the first bytes of its msgpack body, if they hold it.

    Every message with an id is a tagged Struct whose first field is ``id``;
    msgspec encodes it as a map whose first entries are the tag (``type``)
    and ``id``. That is enough to answer a request whose body was skipped.
    """
    try:
        pos = _map_header(head)
        for _ in range(2):
            key, pos = _str(head, pos)
            if key == "id":
                return _int(head, pos)
            _, pos = _str(head, pos)
    except (IndexError, ValueError):
        return None
    return None


def _map_header(b: bytes) -> int:
    t = b[0]
    if 0x80 <= t <= 0x8F:
        return 1
    if t == 0xDE:
        return 3
    if t == 0xDF:
        return 5
    raise ValueError("not a map")


def _str(b: bytes, pos: int) -> tuple[str, int]:
    t = b[pos]
    if 0xA0 <= t <= 0xBF:
        n, pos = t & 0x1F, pos + 1
    elif t == 0xD9:
        n, pos = b[pos + 1], pos + 2
    else:
        raise ValueError("not a short string")
    if pos + n > len(b):
        raise ValueError("truncated")
    return b[pos : pos + n].decode(), pos + n


def _int(b: bytes, pos: int) -> int:
    t = b[pos]
    if t <= 0x7F:
        return t
    widths = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
    if t not in widths:
        raise ValueError("not an unsigned integer")
    n = widths[t]
    if pos + 1 + n > len(b):
        raise ValueError("truncated")
    return int.from_bytes(b[pos + 1 : pos + 1 + n], "big")


__all__ = [
    "BATCH_BYTES",
    "FRAME_OVERHEAD",
    "HEAD_BYTES",
    "LAZY_BUFFER",
    "MAX_REQUEST_BYTES",
    "READ_BUFFER",
    "FrameReader",
    "OnSkip",
    "frame_cap",
    "peek_id",
    "send_frame",
]
