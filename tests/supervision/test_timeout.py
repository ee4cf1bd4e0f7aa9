"""Supervision: a call that passes its timeout (docs/failures.md).

on_timeout="kill": the caller gets lovia's timeout error at the deadline, the
server's whole tree (grandchildren included) is killed after the grace
period, and the next call runs on a fresh server. on_timeout="cancel": the
server only gets the cancel notification and keeps running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time

import pytest
from helpers import ISOLATIONS, PY, SERVERS, alive_after, pid_alive, raw_args, run
from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry

from lovia_mcp import MCP, MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

SUP_SERVER = str(SERVERS / "sup_server.py")
TIMEOUT = 1.0
KILL_GRACE = 1.0


@pytest.mark.timeout(20)
@ISOLATIONS
def test_hung_call_gets_lovia_timeout_error_tree_is_killed_and_next_call_uses_fresh_server(isolation: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            timeout=TIMEOUT,
            kill_grace=KILL_GRACE,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            old = json.loads(str(await conn.call_tool("pid")))["pid"]
            grandchildren = json.loads(str(await conn.call_tool("spawn", {"n": 2})))
            orphans = json.loads(str(await conn.call_tool("spawn", {"n": 1, "orphan": True})))
            tree = [old, *grandchildren, *orphans]
            assert all(pid_alive(p) for p in tree)

            provider = ScriptedProvider([call("raw__hang", {}), text("done")])
            agent = Agent(name="a", model=provider, plugins=[MCP(conn)])
            started = time.monotonic()
            result = await Runner.run(agent, "hang please")
            error_after = time.monotonic() - started
            outputs = [e.output for e in result.entries if isinstance(e, ToolResultEntry)]
            assert outputs == ["Tool error: TimeoutError"]
            # lovia's wait_for fires at the deadline; nothing waits for the kill.
            assert error_after < TIMEOUT + KILL_GRACE + 1.0, error_after

            # The cancel notification is ignored and SIGTERM is ignored, so the
            # tree dies by SIGKILL after kill_grace + TERM_GRACE.
            alive, _ = await alive_after(tree, started + TIMEOUT + KILL_GRACE + 2.0 - time.monotonic())
            killed_after = time.monotonic() - started
            assert alive == [], f"still alive {killed_after:.2f} s after the call: {alive}"

            new = json.loads(str(await conn.call_tool("pid")))["pid"]
            assert new != old
            assert pid_alive(new)
            stats = await conn.stats()
            assert stats.timeouts == 1 and stats.restarts == 1
            print(f"[{isolation}] timeout error after {error_after:.3f} s, tree gone after {killed_after:.3f} s")

    run(main())


@pytest.mark.timeout(20)
@pytest.mark.timing
def test_timeout_through_run_tool_raises_asyncio_timeout_error_at_the_deadline() -> None:
    from lovia.tools.base import run_tool

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", timeout=TIMEOUT, kill_grace=0.2)
        async with server.session() as conn:
            hang = next(t for t in conn.tools() if t.name == "raw__hang")
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await run_tool(hang, {}, None)  # type: ignore[arg-type]
            elapsed = time.monotonic() - started
            assert TIMEOUT - 0.05 <= elapsed < TIMEOUT + 0.5, elapsed
            echo = await conn.call_tool("echo", {"text": "after"})
            assert str(echo) == "after"

    run(main())


@pytest.mark.timeout(20)
def test_on_timeout_cancel_sends_the_cancel_notification_and_keeps_the_server() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[SUP_SERVER], name="sup", on_timeout="cancel", kill_grace=0.1)
        async with server.session() as conn:
            pid = int(str(await conn.call_tool("pid")))
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("wait", timeout=TIMEOUT), TIMEOUT)
            # The notification races the next request inside the worker;
            # poll (bounded) rather than assume an order.
            deadline = time.monotonic() + 3.0
            while True:
                seen = json.loads(str(await conn.call_tool("cancelled")))
                if seen["cancelled"] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.02)
            assert seen["waiting"] and seen["cancelled"] == seen["waiting"], seen
            # Not killed, not replaced, even well past kill_grace.
            assert int(str(await conn.call_tool("pid"))) == pid
            assert pid_alive(pid)
            stats = await conn.stats()
            assert stats.timeouts == 1 and stats.restarts == 0 and stats.server_pid == pid

    run(main())


@pytest.mark.timeout(20)
def test_on_timeout_kill_sends_the_cancel_notification_before_killing(caplog: pytest.LogCaptureFixture) -> None:
    # The server logs each cancel notification to stderr, which the worker
    # forwards to lovia_mcp.server.sup; it is killed only after kill_grace.
    grace = 0.5

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[SUP_SERVER], name="sup", kill_grace=grace)
        async with server.session() as conn:
            pid = int(str(await conn.call_tool("pid")))
            with caplog.at_level(logging.INFO, logger="lovia_mcp.server.sup"):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(conn.call_tool("wait", timeout=0.5), 0.5)
                timed_out = time.monotonic()
                alive, took = await alive_after([pid], grace + 2.0)
                assert alive == []
                assert took >= grace - 0.05, took  # not before the grace period
            notes = [r.getMessage() for r in caplog.records if r.name == "lovia_mcp.server.sup"]
            assert any(n.startswith("cancelled request ") for n in notes), notes
            new = int(str(await conn.call_tool("pid")))
            assert new != pid
            print(f"kill after cancel: server gone {time.monotonic() - timed_out:.3f} s after the timeout")

    run(main())
