"""Tool-list changes: a server that adds a tool and sends ``notifications/tools/list_changed``.

``tests/servers/annotated_server.py``'s ``add_tool`` adds a tool, notifies,
then answers, so the answer reaches the agent after the new list does: no
waiting is needed to see it. A run keeps the tool list it started with; the
next run on a persistent connection, and ``conn.tools()``, get the new one.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, SERVERS, Model, outputs, run
from lovia import Agent, Runner
from lovia.testing import call, text

from lovia_mcp import MCP, MCPServerStdio, MCPTool

SERVER = str(SERVERS / "annotated_server.py")


def server(**options: Any) -> MCPServerStdio:
    return MCPServerStdio(command=PY, args=[SERVER], **options)


def names(tools: list[Any]) -> set[str]:
    return {t.name for t in tools}


@ISOLATIONS
def test_a_tool_added_at_run_time_is_listed_by_the_time_the_call_that_added_it_returns(isolation: str) -> None:
    async def go() -> tuple[set[str], set[str], str]:
        async with server(isolation=isolation, name="srv").session() as conn:
            before = names(conn.tools())
            await conn.call_tool("add_tool", {"text": "fresh"})
            after = names(conn.tools())
            # The new tool is called through the connection like any other.
            fresh = next(t for t in conn.tools() if t.name == "srv__fresh")
            answer = await fresh.invoke({"text": "hi"}, None)
            return before, after, str(answer)

    before, after, answer = run(go())

    assert "srv__fresh" not in before
    assert after == before | {"srv__fresh"}
    assert answer == "fresh: hi"


@ISOLATIONS
def test_a_running_run_keeps_its_tool_list_and_the_next_run_on_the_connection_gets_the_new_one(
    isolation: str,
) -> None:
    async def go() -> tuple[Model, Model, Any, Any]:
        async with server(isolation=isolation).session() as conn:
            first = Model(call("add_tool", {"text": "fresh"}), call("fresh", {"text": "too soon"}), text("done"))
            one = await Runner.run(Agent(name="a", model=first, plugins=[MCP(conn)]), "go")
            second = Model(call("fresh", {"text": "now"}), text("done"))
            two = await Runner.run(Agent(name="a", model=second, plugins=[MCP(conn)]), "go")
            assert "fresh" in names(conn.tools())
            return first, second, one, two

    first, second, one, two = run(go())

    assert all("fresh" not in offered for offered in first.offered)
    assert outputs(one)[0] == "added fresh"
    assert "fresh" in outputs(one)[1] and "fresh: too soon" not in outputs(one)[1]
    assert "fresh" in second.offered[0]
    assert outputs(two) == ["fresh: now"]


def test_a_tool_list_change_keeps_annotations_and_logs_what_changed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lovia_mcp")

    async def go() -> list[Any]:
        async with server(trust_annotations=True).session() as conn:
            await conn.call_tool("add_tool", {"text": "fresh"})
            return conn.tools()

    tools = {t.name: t for t in run(go())}

    assert isinstance(tools["fresh"], MCPTool) and tools["fresh"].annotations is None
    assert tools["read"].annotations is not None and tools["read"].parallel is True
    assert tools["fresh"].parallel is False
    assert any("added ['fresh']" in r.getMessage() for r in caplog.records)


@ISOLATIONS
def test_a_server_restarted_after_a_crash_that_lists_other_tools_changes_the_connections_tools(
    isolation: str, tmp_path: Any
) -> None:
    async def go() -> tuple[set[str], set[str], str]:
        async with server(isolation=isolation).session() as conn:
            await conn.call_tool("add_tool", {"text": "fresh"})
            with_fresh = names(conn.tools())
            # The server dies mid-call; its successor lists only its own tools.
            answer = await conn.call_tool("plain", {"crash_once": str(tmp_path / "crashed")})
            return with_fresh, names(conn.tools()), str(answer)

    with_fresh, after_restart, answer = run(go())

    assert "fresh" in with_fresh
    assert after_restart == with_fresh - {"fresh"}
    assert answer == "plain: ok"


def test_a_replaced_worker_whose_server_lists_other_tools_changes_the_connections_tools() -> None:
    import os
    import signal

    async def go() -> tuple[set[str], set[str], str]:
        async with server().session() as conn:
            await conn.call_tool("add_tool", {"text": "fresh"})
            with_fresh = names(conn.tools())
            assert conn.worker_pid is not None
            os.kill(conn.worker_pid, signal.SIGKILL)
            # Served by a fresh worker (a retry if the call met the dead one).
            answer = await conn.call_tool("plain", {})
            return with_fresh, names(conn.tools()), str(answer)

    with_fresh, after, answer = run(go())

    assert "fresh" in with_fresh
    assert after == with_fresh - {"fresh"}
    assert answer == "plain: ok"
