"""A cancelled call on a wedged server does not wedge a persistent connection (issue 18).

The scenario: a single-threaded server blocks in a tool and ignores
``notifications/cancelled``. A run on a persistent connection calls it and
the run is cancelled. The server gets its cancel grace (``kill_grace``): it
must answer a ping within it. It cannot, so its generation is retired and
the next call, from the next run, is served by a fresh server at once
instead of waiting behind the wedged one until its own timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time

import pytest
from conftest import PY, SERVERS, run
from helpers import ISOLATIONS
from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry

from lovia_mcp import MCP, MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

WEDGE_SERVER = str(SERVERS / "wedge_server.py")
KILL_GRACE = 0.5
# Bound on the stall reaching the server: a raw server answers in milliseconds.
STALL_WAIT = 10.0
# Bound on the next run's call: the cancel grace plus a fresh server's start
# (~50 ms idle), with a wide margin for a loaded 2-core machine. Without the
# cancel grace the call waits behind the wedged server until this passes.
NEXT_CALL_BOUND = 8.0


class _Seen(logging.Handler):
    """Sets ``event`` when a record containing ``needle`` is logged."""

    def __init__(self, needle: str, event: asyncio.Event) -> None:
        super().__init__(logging.DEBUG)
        self.needle = needle
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.event.set()


@pytest.mark.timeout(40)
@ISOLATIONS
def test_a_run_cancelled_on_a_wedged_server_does_not_leave_the_next_run_waiting_behind_it(isolation: str) -> None:
    async def main() -> tuple[int, int, float]:
        server = MCPServerStdio(
            command=PY,
            args=[WEDGE_SERVER],
            name="wedge",
            kill_grace=KILL_GRACE,
            isolation=isolation,  # type: ignore[arg-type]
        )
        stalled = asyncio.Event()
        seen = _Seen("stalling request", stalled)
        server_log = logging.getLogger("lovia_mcp.server.wedge")
        level = server_log.level
        server_log.setLevel(logging.DEBUG)
        server_log.addHandler(seen)
        try:
            async with server.session() as conn:
                old = int(str(await conn.call_tool("pid")))
                first = Agent(
                    name="a", model=ScriptedProvider([call("wedge__stall", {}), text("done")]), plugins=[MCP(conn)]
                )
                stalling = asyncio.ensure_future(Runner.run(first, "stall"))
                await asyncio.wait_for(stalled.wait(), STALL_WAIT)
                stalling.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await stalling

                second = Agent(
                    name="b", model=ScriptedProvider([call("wedge__pid", {}), text("done")]), plugins=[MCP(conn)]
                )
                started = time.monotonic()
                result = await asyncio.wait_for(Runner.run(second, "pid"), NEXT_CALL_BOUND)
                took = time.monotonic() - started
                outputs = [e.output for e in result.entries if isinstance(e, ToolResultEntry)]
                assert len(outputs) == 1 and outputs[0].isdigit(), outputs
                return old, int(outputs[0]), took
        finally:
            server_log.removeHandler(seen)
            server_log.setLevel(level)

    old, new, took = run(main())
    print(
        f"[{isolation}] next run served by a fresh server {took * 1000:.0f} ms after the cancel "
        f"(cancel grace {KILL_GRACE} s; wedged pid {old}, fresh pid {new})"
    )
    assert new != old


@pytest.mark.timeout(30)
@ISOLATIONS
def test_a_cancelled_call_on_a_server_that_still_answers_keeps_that_server(isolation: str) -> None:
    async def main() -> tuple[int, int, int]:
        # sup_server's "wait" never answers but keeps reading: it sees the
        # cancel and answers the ping (with a method-not-found error, which
        # is an answer).
        server = MCPServerStdio(
            command=PY,
            args=[str(SERVERS / "sup_server.py")],
            name="sup",
            kill_grace=KILL_GRACE,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            old = int(str(await conn.call_tool("pid")))
            waiting = asyncio.ensure_future(conn.call_tool("wait"))
            # Each answer of "cancelled" is a round trip to the server, which
            # lists the waiting calls it has received.
            while not json.loads(str(await conn.call_tool("cancelled")))["waiting"]:
                pass
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            new = int(str(await conn.call_tool("pid")))
            return old, new, (await conn.stats()).restarts

    old, new, restarts = run(main())
    assert new == old and restarts == 0
