"""Progress of a running call (issue 13, item 5): MCP ``notifications/progress`` reach logging.

Each ``tools/call`` carries a ``progressToken``; every progress notification
for it becomes a record on the ``lovia_mcp.progress`` logger (INFO, with
``server``, ``tool``, ``progress`` and ``total`` attributes, text
``<server>/<tool>: 3/10 <message>``) while the call runs, in both isolation
modes, from a raw JSON-RPC server, an SDK server over stdio and one over
streamable HTTP. A flood of progress is coalesced in the worker (at most one
update per ``PROGRESS_INTERVAL`` per call, the last one always delivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, SERVERS, run, serving
from lovia_mcp_worker.session.progress import PROGRESS_INTERVAL, ProgressForwarder
from lovia_mcp_worker.wire.messages import Progress

from lovia_mcp import MCPServerStdio, MCPServerStreamableHTTP

RAW = str(SERVERS / "progress_server.py")
SDK = str(SERVERS / "progress_sdk_server.py")
# Bound on waiting for the first progress record: an SDK server's start-up
# (~1 s) on a loaded machine, with margin.
FIRST_RECORD_WAIT = 30.0


class Records(logging.Handler):
    """Collects ``lovia_mcp.progress`` records; ``first`` is set by the first one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.first = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.first.set()


@contextlib.contextmanager
def capture() -> Iterator[Records]:
    """The ``lovia_mcp.progress`` records made inside the block."""
    handler = Records()
    log = logging.getLogger("lovia_mcp.progress")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        log.removeHandler(handler)


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """A FIFO a gated call waits on after its first progress notification."""
    path = tmp_path / "gate"
    os.mkfifo(path)
    return path


async def gated_call(conn: Any, tool: str, gate: Path, handler: Records, **args: Any) -> Any:
    """Start the call, see its first progress record while it runs, then let it finish."""
    task = asyncio.ensure_future(conn.call_tool(tool, {"steps": 3, "gate": str(gate), **args}))
    waiter = asyncio.ensure_future(handler.first.wait())
    done, _ = await asyncio.wait({task, waiter}, timeout=FIRST_RECORD_WAIT, return_when=asyncio.FIRST_COMPLETED)
    assert waiter in done, f"no progress record while the call ran (call done: {task.done()})"
    assert not task.done(), "the call ended before its progress was seen"
    running = list(handler.records)
    fd = await asyncio.to_thread(os.open, gate, os.O_WRONLY)  # the server holds the read end
    os.write(fd, b"go\n")
    os.close(fd)
    result = await asyncio.wait_for(task, FIRST_RECORD_WAIT)
    return running, result


def check_records(records: list[logging.LogRecord], server: str, tool: str) -> None:
    assert [r.levelno for r in records] == [logging.INFO] * len(records)
    for r in records:
        assert (r.server, r.tool, r.total) == (server, tool, 3.0), vars(r)  # type: ignore[attr-defined]
    values = [r.progress for r in records]  # type: ignore[attr-defined]
    assert values == sorted(values) and values[0] == 1.0 and values[-1] == 3.0, values
    assert records[0].getMessage() == f"{server}/{tool}: 1/3 step 1"
    assert records[-1].getMessage() == f"{server}/{tool}: 3/3 step 3"


@contextlib.asynccontextmanager
async def reported(server: Any, gate: Path) -> AsyncIterator[tuple[Any, list[logging.LogRecord]]]:
    """A session on ``server`` whose gated ``report`` call answered ``done`` with every record checked.

    Yields the connection and the records logged while the call ran.
    """
    with capture() as handler:
        async with server.session() as conn:
            running, result = await gated_call(conn, "report", gate, handler)
            assert str(result) == "done"
            assert running[0].getMessage() == f"{server.name}/report: 1/3 step 1"
            check_records(handler.records, server.name, "report")
            yield conn, running


@ISOLATIONS
def test_progress_of_a_running_raw_server_call_is_logged_with_server_tool_and_figures(
    isolation: str, gate: Path
) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[RAW], name="prog", isolation=isolation)  # type: ignore[arg-type]
        async with reported(server, gate) as (conn, running):
            assert [r.getMessage() for r in running] == ["prog/report: 1/3 step 1"]
            meta = json.loads(str(await conn.call_tool("meta")))
            assert isinstance(meta.get("progressToken"), int), meta

    run(main())


@ISOLATIONS
def test_progress_reported_by_an_sdk_server_tool_is_logged_while_the_call_runs(isolation: str, gate: Path) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[SDK], name="sdk", isolation=isolation)  # type: ignore[arg-type]
        async with reported(server, gate):
            pass  # reported() made every check

    run(main())


@pytest.fixture(scope="module")
def progress_url() -> Iterator[str]:
    with serving(SDK, "--http") as url:
        yield url


@ISOLATIONS
def test_progress_over_streamable_http_is_logged_while_the_call_runs(
    isolation: str, gate: Path, progress_url: str
) -> None:
    async def main() -> None:
        server = MCPServerStreamableHTTP(url=progress_url, name="web", isolation=isolation)  # type: ignore[arg-type]
        async with reported(server, gate):
            pass  # reported() made every check

    run(main())


@ISOLATIONS
def test_a_server_flooding_progress_is_coalesced_and_its_last_value_still_arrives(isolation: str) -> None:
    n = 20_000

    async def main() -> None:
        with capture() as handler:
            server = MCPServerStdio(command=PY, args=[RAW], name="prog", isolation=isolation)  # type: ignore[arg-type]
            async with server.session() as conn:
                started = time.monotonic()
                assert str(await conn.call_tool("flood", {"n": n})) == f"flooded {n}"
                elapsed = time.monotonic() - started
        records = handler.records
        bound = elapsed / PROGRESS_INTERVAL + 2
        print(
            f"[{isolation}] {n} progress notifications in {elapsed * 1000:.0f} ms -> {len(records)} records "
            f"(bound {bound:.0f})"
        )
        assert 1 <= len(records) <= bound
        assert records[-1].progress == float(n)  # type: ignore[attr-defined]
        assert records[-1].getMessage() == f"prog/flood: {n}/{n}"

    run(main())


@pytest.mark.unit
def test_the_forwarder_sends_at_once_holds_the_latest_within_an_interval_and_flushes_it_on_close() -> None:
    now = [0.0]
    timers: list[tuple[float, Any]] = []

    class Timer:
        def __init__(self, delay: float, fn: Any) -> None:
            timers.append((delay, fn))
            self.cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    sent: list[Progress] = []
    fwd = ProgressForwarder(sent.append, 7, interval=0.1, clock=lambda: now[0], later=Timer)
    fwd(1, 10, "a")
    assert [p.progress for p in sent] == [1]
    fwd(2, 10, "b")
    fwd(3, 10, "c")
    assert [p.progress for p in sent] == [1] and len(timers) == 1 and timers[0][0] == pytest.approx(0.1)
    now[0] = 0.1
    timers[0][1]()
    assert [p.progress for p in sent] == [1, 3]
    now[0] = 0.15
    fwd(4, 10, None)
    assert [p.progress for p in sent] == [1, 3]
    fwd.close()
    assert [(p.id, p.progress, p.total, p.message) for p in sent][-1] == (7, 4, 10, None)
    fwd(5, 10, None)
    assert len(sent) == 3 and fwd.received == 4 and fwd.sent == 3
