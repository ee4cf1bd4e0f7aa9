"""What the ``lovia-mcp`` command is waiting for, shown on a terminal.

A first ``npx -y`` or ``uvx`` start downloads packages for minutes without a
word; on a terminal the command keeps one status line on stderr, rewritten
in place: what is being started or called, the seconds elapsed, and the
latest MCP progress notification of a running call (records of the
``lovia_mcp.progress`` logger). The line is erased once the wait ends, so
the terminal keeps only the results.

Non-goals: any of it when stderr is not a terminal (piped, redirected, a CI
log): then the command writes nothing but its results and errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, TextIO

from ._terminal import terminal_line

# How often the elapsed time is looked at. It is shown in whole seconds and
# redrawn only when the text changes, so this only bounds how late a new
# second appears.
TICK: Final = 0.25
# Where the worker side logs a running call's MCP progress notifications
# (attributes: server, tool, progress, total; the message is the notification's).
PROGRESS_LOGGER: Final = "lovia_mcp.progress"
# Erase the line: back to its start, then clear to its end.
_ERASE: Final = "\r\x1b[K"


class Progress:
    """One status line on ``stream``, or nothing at all when not ``enabled``."""

    def __init__(self, stream: TextIO, *, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self._waits: dict[int, tuple[str, float]] = {}
        self._next = 0
        self._detail = ""
        self._shown = ""
        self._ticker: asyncio.Task[None] | None = None

    @classmethod
    def on_stderr(cls) -> Progress:
        """Enabled when stderr is a terminal that can erase a line."""
        stream = sys.stderr
        return cls(stream, enabled=stream.isatty() and os.environ.get("TERM") != "dumb")

    @asynccontextmanager
    async def waiting(self, what: str) -> AsyncIterator[None]:
        """Show ``what… N s`` while the body runs (with others waited on at the same time)."""
        if not self.enabled:
            yield
            return
        token = self._next
        self._next += 1
        self._waits[token] = (what, time.monotonic())
        self._draw()
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())
        try:
            yield
        finally:
            del self._waits[token]
            if not self._waits:
                self._detail = ""
                if self._ticker is not None:
                    self._ticker.cancel()
                    self._ticker = None
            self._draw()

    def update(self, detail: str) -> None:
        """The latest news of the running work (an MCP progress notification), shown after the status."""
        if self.enabled:
            self._detail = " ".join(detail.split())
            self._draw()

    def clear(self) -> None:
        """Erase whatever is left on the line (a last progress notification)."""
        if self.enabled:
            self._detail = ""
            self._draw()

    def line(self) -> str:
        """The status line as it would be drawn now ("" when nothing is waited on)."""
        parts = []
        if self._waits:
            whats = list(dict.fromkeys(what for what, _ in self._waits.values()))
            since = min(start for _, start in self._waits.values())
            parts.append(f"{', '.join(whats)}… {int(time.monotonic() - since)} s")
        if self._detail:
            parts.append(self._detail)
        return " · ".join(parts)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self._draw()

    def _width(self) -> int:
        # The terminal the line is drawn on (stderr), not stdout's, which is
        # often piped; COLUMNS wins, as for shutil.get_terminal_size().
        try:
            columns = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            columns = 0
        if columns > 0:
            return columns
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):  # not a real terminal (a StringIO in tests)
            return 80

    def _draw(self) -> None:
        width = self._width()
        # A progress message is the server's words: escaped, never drawn raw.
        text = terminal_line(self.line())
        if len(text) >= width:
            text = text[: max(1, width - 2)] + "…"
        # No lock: every caller (the ticker, waiting(), the progress handler
        # for records logged by the agent) runs on the event loop's thread.
        if text == self._shown:
            return
        self._shown = text
        try:
            self.stream.write(_ERASE + text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing for
            self.enabled = False


def describe(record: logging.LogRecord) -> str:
    """A progress record as one line: ``server tool: 40% message``."""
    server, tool = getattr(record, "server", None), getattr(record, "tool", None)
    progress, total = getattr(record, "progress", None), getattr(record, "total", None)
    where = " ".join(str(x) for x in (server, tool) if x)
    if isinstance(progress, (int, float)) and isinstance(total, (int, float)) and total > 0:
        amount = f"{progress / total:.0%}"
    elif isinstance(progress, (int, float)):
        amount = f"{progress:g}"
    else:
        amount = ""
    # The server's own words when the record carries them (the agent's
    # records do); the formatted message repeats server, tool and amount.
    message = record.progress_message if hasattr(record, "progress_message") else record.getMessage()
    text = " ".join(x for x in (amount, message or "") if x)
    return f"{where}: {text}" if where else text


class ProgressHandler(logging.Handler):
    """Puts ``lovia_mcp.progress`` records on the status line."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress.update(describe(record))
        except Exception:  # noqa: BLE001 - logging's contract: a handler reports its own failures
            self.handleError(record)


def show_progress_records(progress: Progress) -> ProgressHandler | None:
    """Route ``lovia_mcp.progress`` to ``progress`` when it is enabled; returns the handler."""
    if not progress.enabled:
        return None
    handler = ProgressHandler(progress)
    log = logging.getLogger(PROGRESS_LOGGER)
    # One status line per process: a handler from an earlier main() goes.
    for old in [h for h in log.handlers if isinstance(h, ProgressHandler)]:
        log.removeHandler(old)
    log.addHandler(handler)
    # The records are INFO; the logger must let them through even when the
    # rest of lovia_mcp is quiet (no -v).
    log.setLevel(logging.INFO)
    return handler


__all__ = ["PROGRESS_LOGGER", "TICK", "Progress", "ProgressHandler", "describe", "show_progress_records"]
