"""A stdio server's output as lines: pure (fed bytes, no I/O), tested without processes.

- :class:`LineFramer` cuts stdout into lines in linear time with the
  ``max_result_bytes`` cap. A line over the cap is never held: it is dropped
  as it streams past while an :class:`~lovia_mcp_worker.transport._jsonscan.IdScanner`
  looks for its top-level id, so the request it answers gets a clear error
  and the server lives on.
- :class:`StderrLines` keeps the last lines for error messages and forwards
  lines to the agent's logging at a bounded rate; stderr is always drained.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from ._jsonscan import MISSING, IdScanner

# Lines of server stderr kept for error messages.
STDERR_TAIL_LINES: Final = 20
# Longest stderr line kept or forwarded; the rest of a longer line is dropped.
STDERR_LINE_MAX: Final = 2000
# Stderr lines forwarded to the agent's logging per second; a chatty server
# must not flood the agent, and the pipe is drained either way.
STDERR_LOG_RATE: Final = 200
Oversize = Callable[[object, int, bool], None]


class LineFramer:
    """Stdout bytes in, whole lines (or over-long-line reports) out.

    ``on_oversize(rid, size, complete)`` is called once per line over
    ``cap``: with the line's top-level id as soon as it is found, with
    :data:`~lovia_mcp_worker.transport._jsonscan.MISSING` and ``complete=True`` when the
    line ended (or its object closed) without one, and with ``MISSING`` and
    ``complete=False`` as soon as the line cannot be JSON at all.
    """

    def __init__(self, cap: int, on_line: Callable[[bytes], None], on_oversize: Oversize) -> None:
        self._cap = cap
        self._on_line = on_line
        self._on_oversize = on_oversize
        self._buf = bytearray()
        self._scanner: IdScanner | None = None  # set while dropping an over-long line
        self._size = 0  # bytes of the over-long line so far
        self._reported = False

    def feed(self, chunk: bytes) -> None:
        start = 0
        view = memoryview(chunk)
        while True:
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl
            if self._scanner is not None:
                self._size += end - start
                if not self._reported:
                    self._scanner.feed(view[start:end])
                    self._report_if_known()
            elif len(self._buf) + end - start > self._cap:
                # Report the moment the cap is passed where the id allows: an
                # unterminated line may never end.
                self._scanner = IdScanner()
                self._scanner.feed(self._buf)
                self._scanner.feed(view[start:end])
                self._size = len(self._buf) + end - start
                self._buf = bytearray()
                self._reported = False
                self._report_if_known()
            elif nl < 0:
                self._buf += view[start:]
            elif self._buf:
                self._buf += view[start:nl]
                line, self._buf = bytes(self._buf), bytearray()
                self._deliver(line)
            else:
                self._deliver(chunk[start:nl])
            if nl < 0:
                return
            if self._scanner is not None:
                if not self._reported:
                    self._on_oversize(self._scanner.id if self._scanner.found else MISSING, self._size, True)
                self._scanner = None
            start = nl + 1

    def eof(self) -> None:
        """The stream ended: a last line without a newline still counts."""
        if self._scanner is None and self._buf:
            line, self._buf = bytes(self._buf), bytearray()
            self._deliver(line)

    def _deliver(self, line: bytes) -> None:
        if line.strip():
            self._on_line(line)

    def _report_if_known(self) -> None:
        scanner = self._scanner
        assert scanner is not None
        if scanner.found:
            self._reported = True
            self._on_oversize(scanner.id, self._size, False)
        elif scanner.hopeless:
            self._reported = True
            self._on_oversize(MISSING, self._size, scanner.ended)


class StderrLines:
    """The server's stderr: a bounded tail, and lines forwarded at a bounded rate."""

    def __init__(
        self,
        forward: Callable[[int, str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        later: Callable[[float, Callable[[], None]], Any] | None = None,
    ) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._forward = forward
        self._clock = clock
        self._later = later
        self._pending = b""
        self._cutting = False  # past STDERR_LINE_MAX of a line: drop the rest of it
        self._window = clock()
        self._sent = 0
        self._suppressed = 0
        self._note: Any = None

    def feed(self, chunk: bytes) -> None:
        now = self._clock()
        if now - self._window >= 1.0:
            self.flush_note()
            self._window, self._sent = now, 0
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not self._cutting:
                self._pending += piece
                if nl >= 0 or len(self._pending) > STDERR_LINE_MAX:
                    self._take(self._pending)
                    self._cutting = nl < 0
                    self._pending = b""
            if nl < 0:
                return
            self._cutting = False
            start = nl + 1

    def eof(self) -> None:
        if self._pending:
            self._take(self._pending)
            self._pending = b""
        self.flush_note()

    def flush_note(self) -> None:
        """Say how many lines were not forwarded (when the rate window ends)."""
        if self._note is not None:
            with contextlib.suppress(Exception):
                self._note.cancel()
            self._note = None
        if self._suppressed:
            self._forward(logging.WARNING, f"{self._suppressed} stderr lines not forwarded (over {STDERR_LOG_RATE}/s)")
            self._suppressed = 0

    def _take(self, raw: bytes) -> None:
        text = raw[:STDERR_LINE_MAX].decode("utf-8", "replace").rstrip("\r")
        self.tail.append(text)
        if self._sent < STDERR_LOG_RATE:
            self._sent += 1
            self._forward(logging.INFO, text)
            return
        self._suppressed += 1
        if self._note is None and self._later is not None:
            # Said when the window ends even if the server goes quiet.
            self._note = self._later(max(0.0, self._window + 1.0 - self._clock()), self.flush_note)


__all__ = ["STDERR_LINE_MAX", "STDERR_LOG_RATE", "STDERR_TAIL_LINES", "LineFramer", "Oversize", "StderrLines"]
