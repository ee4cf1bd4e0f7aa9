"""Deferred servers (``defer=True``) end to end, in both isolation modes.

Their tools leave the agent's tool list; one shared ``search_mcp_tools`` /
``call_mcp_tool`` pair reaches them; a system-prompt section names them; and
approval, retries, timeout, renderer and output cap are delegated to the
underlying tool exactly as lovia's own plugin does it. lovia-mcp's copy of
lovia's (private) deferred helpers is checked against the originals.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from helpers import ISOLATIONS, RAW_TOOLS, Model, drive, outputs, raw, run
from lovia import Agent, Runner
from lovia.exceptions import ToolError
from lovia.messages import ToolCall
from lovia.plugins.mcp import _deferred_instructions, _make_call_tool, _make_search_tool
from lovia.run_context import RunContext
from lovia.runtime.result import RunResult
from lovia.testing import call, text
from lovia.tools import Tool, tool
from lovia.tools.base import run_tool, truncate_tool_output

from lovia_mcp import MCP, MCPServerStdio, MCPToolResult, UserError
from lovia_mcp.opening._deferred import deferred_instructions, make_call_tool, make_search_tool


def deferred(isolation: str, name: str | None = "d", *, defer: bool = True, **options: Any) -> MCPServerStdio:
    """The raw test server, deferred unless ``defer=False``, named ``d`` unless ``name`` says otherwise."""
    return raw(isolation, name=name, defer=defer, **options)


def deferred_call(tool: str, arguments: dict[str, Any]) -> Any:
    return call("call_mcp_tool", {"tool": tool, "arguments": arguments})


@ISOLATIONS
def test_deferred_tools_leave_the_tool_list_and_two_servers_share_one_search_and_call_pair(isolation: str) -> None:
    plugin = MCP(deferred(isolation, "alpha"), deferred(isolation, "beta"))
    result, model = run(
        drive(
            plugin,
            deferred_call("beta__echo", {"text": "via beta"}),
            deferred_call("alpha__add", {"a": 1, "b": 1}),
        )
    )

    offered = list(model.offered[0])
    assert offered.count("search_mcp_tools") == 1 and offered.count("call_mcp_tool") == 1
    assert not [n for n in offered if n.startswith(("alpha__", "beta__"))]
    system = model.calls[0][0]
    assert system.role == "system"
    assert _deferred_instructions(
        [
            ("alpha", [f"alpha__{t}" for t in sorted(RAW_TOOLS)]),
            ("beta", [f"beta__{t}" for t in sorted(RAW_TOOLS)]),
        ]
    ) in str(system.content)
    assert outputs(result) == ["via beta", "2"]


@ISOLATIONS
def test_search_finds_a_deferred_tools_definition_and_call_invokes_it_beside_an_exposed_server(
    isolation: str,
) -> None:
    result, model = run(
        drive(
            MCP(deferred(isolation), deferred(isolation, "x", defer=False, include_tools=["add"])),
            call("search_mcp_tools", {"query": "echo"}),
            deferred_call("d__echo", {"text": "found"}),
            deferred_call("d__ecko", {"text": "typo"}),
            call("x__add", {"a": 1, "b": 2}),
        )
    )

    offered = set(model.offered[0])
    assert {"x__add", "search_mcp_tools", "call_mcp_tool"} <= offered
    assert not [n for n in offered if n.startswith("d__")]
    system = str(model.calls[0][0].content)
    assert f"- d ({len(RAW_TOOLS)} tools): d__add, d__alloc, d__alloc_fast, d__answer_if_exists, d__big" in system
    assert "x__add" not in system
    search, found, typo, added = outputs(result)
    (match,) = [m for m in json.loads(search) if m["name"] == "d__echo"]
    assert match["description"] == "Echo the text back."
    assert match["parameters"]["properties"] == {"text": {"type": "string"}}
    assert found == "found"
    assert "unknown deferred MCP tool: 'd__ecko'" in typo and "d__echo" in typo
    assert added == "3"


@ISOLATIONS
def test_approval_of_a_deferred_tool_is_delegated_to_its_own_needs_approval(isolation: str) -> None:
    asked: list[tuple[str, str]] = []

    def handler(tool_call: ToolCall, ctx: RunContext[Any]) -> bool:
        asked.append((tool_call.name, tool_call.arguments))
        return False

    plugin = MCP(deferred(isolation, needs_approval=lambda args, ctx: args.get("text") == "secret"))
    result, _ = run(
        drive(
            plugin,
            deferred_call("d__echo", {"text": "secret"}),
            deferred_call("d__echo", {"text": "public"}),
            deferred_call("d__counter", {}),
            approval_handler=handler,
        )
    )

    assert [name for name, _ in asked] == ["call_mcp_tool"]
    assert "secret" in asked[0][1]
    # The denied call never reached the server: it counted two calls.
    assert outputs(result) == ["Tool call_mcp_tool was not approved.", "public", "2"]


@ISOLATIONS
def test_retries_of_a_deferred_tool_are_delegated(isolation: str) -> None:
    async def main() -> tuple[RunResult, int]:
        async with deferred(isolation, retries=2, auto_reconnect=False).session() as conn:
            result, _ = await drive(MCP(conn), deferred_call("d__exit", {"code": 7}))
            return result, (await conn.stats()).calls

    result, calls = run(main())

    (output,) = outputs(result)
    assert output.startswith("Tool error: MCP tool 'exit' failed: the server exited with code 7")
    assert calls == 3


@ISOLATIONS
def test_the_timeout_of_a_deferred_tool_is_delegated_and_kills_the_hung_server(isolation: str) -> None:
    async def main() -> tuple[RunResult, Any]:
        async with deferred(isolation, timeout=0.3, kill_grace=0.1).session() as conn:
            result, _ = await drive(MCP(conn), deferred_call("d__hang", {}))
            return result, await conn.stats()

    result, stats = run(main())

    assert outputs(result) == ["Tool error: TimeoutError"]
    assert stats.timeouts == 1


@ISOLATIONS
def test_the_renderer_and_output_cap_of_a_deferred_tool_are_delegated(isolation: str) -> None:
    received: list[Any] = []

    def renderer(result: Any, ctx: RunContext[Any]) -> str:
        received.append(result)
        return "[" + ";".join(block.type for block in result.content) + "]" + "z" * 500

    plugin = MCP(deferred(isolation, result_renderer=renderer, max_output_chars=100))
    result, model = run(drive(plugin, deferred_call("d__mixed", {})))

    (shown,) = outputs(result)
    (raw_result,) = received
    assert isinstance(raw_result, MCPToolResult) and raw_result.content[1].mime_type == "image/png"
    assert shown == truncate_tool_output("[text;image;audio;resource;resource;resource_link]" + "z" * 500, 100)
    assert "aGVsbG8gd29ybGQ=" not in repr(model.calls)


@ISOLATIONS
def test_two_deferred_servers_with_clashing_tool_names_are_refused_at_setup(isolation: str) -> None:
    model = Model(text("never reached"))
    agent = Agent(name="tester", model=model, plugins=[MCP(deferred(isolation, None), deferred(isolation, None))])

    with pytest.raises(UserError, match="deferred MCP tool name clash: 'echo'") as info:
        run(Runner.run(agent, "go"))

    assert "name=" in (info.value.hint or "")
    assert model.calls == []
    # The first server, opened before the clash was found, was closed (the
    # no-leak fixture checks its processes are gone).


@ISOLATIONS
def test_a_deferred_tool_named_like_an_exposed_tool_is_refused_at_setup(isolation: str) -> None:
    plugin = MCP(deferred(isolation, "same"), deferred(isolation, "same", defer=False, include_tools=["echo"]))
    agent = Agent(name="tester", model=Model(text("never reached")), plugins=[plugin])

    with pytest.raises(UserError, match="deferred MCP tool name clash with exposed tools: same__echo"):
        run(Runner.run(agent, "go"))


def _catalog() -> dict[str, Tool]:
    @tool(
        name="d__echo", description="Echo the text back.", needs_approval=lambda args, ctx: args.get("text") == "secret"
    )
    async def echo(text: str) -> str:
        return text

    @tool(name="d__add", description="Add two integers.")
    async def add(a: int, b: int) -> int:
        return a + b

    @tool(name="d__shout", description="Echo the text back in capitals.", max_output_chars=8)
    async def shout(text: str) -> str:
        return text.upper()

    return {t.name: t for t in (echo, add, shout)}


async def _answers(search: Tool, invoke: Tool) -> list[Any]:
    # lovia named the dependencies field "context" before it named it "deps".
    deps = "deps" if "deps" in {f.name for f in dataclasses.fields(RunContext)} else "context"
    ctx = RunContext(**{deps: None}, entries=[], agent=Agent(name="tester", model=Model()))
    answers: list[Any] = [
        invoke.requires_approval(args, ctx)
        for args in (
            {"tool": "d__echo", "arguments": {"text": "secret"}},
            {"tool": "d__echo", "arguments": "not an object"},
            {"tool": "d__nope"},
        )
    ]
    for query in ({"query": "echo"}, {"query": "d__add"}, {"query": "nothing here"}, {"query": "d", "max_results": 1}):
        answers.append(await run_tool(search, query, ctx))
    for arguments in (
        {"tool": "d__add", "arguments": {"a": 1, "b": 2}},
        {"tool": "d__shout", "arguments": {"text": "much too long"}},
        {"tool": "d__ecko"},
        {"tool": "zzz"},
        {"tool": "d__add", "arguments": {"a": "x"}},
    ):
        try:
            answers.append(await run_tool(invoke, arguments, ctx))
        except ToolError as exc:
            answers.append((type(exc).__name__, str(exc), exc.hint))
    return answers


@pytest.mark.unit
def test_the_copied_deferred_helpers_show_the_model_exactly_what_lovias_own_plugin_shows() -> None:
    catalog = _catalog()
    ours = (make_search_tool(catalog), make_call_tool(catalog))
    lovias = (_make_search_tool(catalog), _make_call_tool(catalog))
    by_server = [("beta", ["beta__z", "beta__a"]), (None, ["echo"])]

    for mine, theirs in zip(ours, lovias):
        assert mine.openai_schema() == theirs.openai_schema()
        assert (mine.retries, mine.timeout, mine.max_output_chars, mine.parallel, mine.policies) == (
            theirs.retries,
            theirs.timeout,
            theirs.max_output_chars,
            theirs.parallel,
            theirs.policies,
        )
    assert deferred_instructions(by_server) == _deferred_instructions(by_server)
    answers = run(_answers(*ours))
    assert answers == run(_answers(*lovias))
    # The comparison covered approval, hits, misses, overflow, delegation and errors.
    assert answers[:3] == [True, False, False] and answers[7] == "3"
    assert answers[8] == truncate_tool_output("MUCH TOO LONG", 8)
    assert [a[0] for a in answers[9:]] == ["ToolError", "ToolError", "InvalidToolArguments"]
