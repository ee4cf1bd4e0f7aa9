"""Helpers for tests that drive a real lovia Agent with a ScriptedProvider."""

from __future__ import annotations

from typing import Any

import pytest
from lovia import Agent, Runner
from lovia.runtime.result import RunResult
from lovia.testing import ScriptedProvider, text
from lovia.transcript import ToolResultEntry

from lovia_mcp import MCP, MCPServer

ISOLATIONS = pytest.mark.parametrize("isolation", ["process", "none"])

# Every tool tests/servers/raw_server.py lists (without its flags).
RAW_TOOLS = frozenset({
    "echo", "add", "fail", "big", "mixed", "hang", "exit", "signal", "stderr_then_exit", "garbage",
    "flood", "chatty", "alloc", "spawn", "burn", "pid", "cwd", "counter", "ping_client",
    "alloc_fast", "fork_storm", "kill_parent", "answer_if_exists", "escape",
})


class Model(ScriptedProvider):
    """A ScriptedProvider that also records the tool schemas offered on each turn."""

    def __init__(self, *script: Any) -> None:
        super().__init__(list(script))
        self.offered: list[dict[str, Any]] = []

    async def stream(self, entries: Any, *, tools: Any = None, **kw: Any) -> Any:
        self.offered.append({t["function"]["name"]: t["function"] for t in tools or []})
        async for delta in super().stream(entries, tools=tools, **kw):
            yield delta


async def drive(plugin: Any, *script: Any, **agent_options: Any) -> tuple[RunResult, Model]:
    """Run an agent through ``script`` then a final "done"; ``plugin`` may be a bare server."""
    if isinstance(plugin, MCPServer):
        plugin = MCP(plugin)
    model = Model(*script, text("done"))
    agent = Agent(name="tester", model=model, plugins=[plugin], **agent_options)
    result = await Runner.run(agent, "go")
    assert result.output == "done"
    return result, model


def results(result: RunResult) -> list[ToolResultEntry]:
    return [e for e in result.entries if isinstance(e, ToolResultEntry)]


def outputs(result: RunResult) -> list[str]:
    return [e.output for e in results(result)]
