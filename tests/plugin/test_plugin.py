"""The plugin surface end to end: a real lovia ``Agent``, ``Runner.run`` and
real server processes, in both isolation modes.

Tool naming and filtering, name clashes, and lovia's per-tool policies
(approval, retries, timeout, output cap, result renderer) applied to MCP tools
exactly as lovia applies them to any tool.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import ISOLATIONS, PY, RAW_TOOLS, Model, drive, outputs, pid_alive, raw, raw_args, results, run
from lovia import Agent, Runner
from lovia.messages import ToolCall
from lovia.plugins import mcp as lovia_plugin
from lovia.plugins.mcp import MCPToolResult as LoviaMCPToolResult
from lovia.run_context import RunContext
from lovia.runtime.result import RunResult
from lovia.testing import call, text
from lovia.tools.base import truncate_tool_output

from lovia_mcp import MCP, MCPToolResult, UserError


# --------------------------------------------------------------------------- #
# Naming, filtering, clashes
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_a_named_server_offers_its_tools_as_name__tool_and_calls_them_by_raw_name(isolation: str) -> None:
    result, model = run(drive(MCP(raw(isolation, name="raw")), call("raw__echo", {"text": "hi there"})))

    offered = set(model.offered[0])
    assert {f"raw__{t}" for t in RAW_TOOLS} <= offered
    assert not RAW_TOOLS & offered
    assert model.offered[0]["raw__add"]["parameters"]["properties"] == {
        "a": {"type": "number"},
        "b": {"type": "number"},
    }
    assert outputs(result) == ["hi there"]


@ISOLATIONS
def test_an_unnamed_server_offers_its_tools_under_their_raw_names(isolation: str) -> None:
    result, model = run(drive(MCP(raw(isolation, name=None)), call("echo", {"text": "plain"})))

    assert RAW_TOOLS <= set(model.offered[0])
    assert outputs(result) == ["plain"]


@ISOLATIONS
def test_include_and_exclude_tools_filter_on_raw_names_before_prefixing(isolation: str) -> None:
    server = raw(
        isolation,
        name="raw",
        include_tools=["echo", "add", "fail", "raw__counter"],  # a prefixed name matches nothing
        exclude_tools=["fail"],
    )
    _, model = run(drive(MCP(server), call("raw__add", {"a": 1, "b": 2})))

    assert {n for n in model.offered[0] if n.startswith("raw__")} == {"raw__echo", "raw__add"}


@ISOLATIONS
def test_two_servers_offering_the_same_tool_name_fail_the_run_at_start_like_any_duplicate_tool(
    isolation: str,
) -> None:
    model = Model(text("never reached"))
    agent = Agent(name="tester", model=model, plugins=[MCP(raw(isolation, name=None), raw(isolation, name=None))])

    with pytest.raises(UserError, match=r"Tool name conflict for '\w+'") as info:
        run(Runner.run(agent, "go"))

    assert "MCPServer.name" in (info.value.hint or "")
    assert model.calls == []  # refused before the first model call


# --------------------------------------------------------------------------- #
# Approval
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_needs_approval_true_runs_a_tool_only_when_the_approval_flow_allows_it(isolation: str) -> None:
    asked: list[str] = []

    def handler(tool_call: ToolCall, ctx: RunContext[Any]) -> bool:
        asked.append(tool_call.name)
        return tool_call.name == "raw__echo"

    plugin = MCP(raw(isolation, name="raw", needs_approval=True))
    result, _ = run(
        drive(
            plugin,
            call("raw__add", {"a": 1, "b": 1}),
            call("raw__echo", {"text": "allowed"}),
            call("raw__counter", {}),
            approval_handler=handler,
        )
    )

    assert asked == ["raw__add", "raw__echo", "raw__counter"]
    assert outputs(result) == [
        "Tool raw__add was not approved.",
        "allowed",
        "Tool raw__counter was not approved.",
    ]


@ISOLATIONS
def test_a_needs_approval_predicate_gates_only_the_calls_it_flags_and_denied_calls_never_reach_the_server(
    isolation: str,
) -> None:
    seen: list[dict[str, Any]] = []

    def risky(args: dict[str, Any], ctx: RunContext[Any]) -> bool:
        seen.append(args)
        return args.get("text") == "rm -rf"

    plugin = MCP(raw(isolation, name="raw", needs_approval=risky))
    result, _ = run(
        drive(
            plugin,
            call("raw__echo", {"text": "rm -rf"}),
            call("raw__echo", {"text": "ls"}),
            call("raw__counter", {}),
            approval_handler=lambda tool_call, ctx: False,
        )
    )

    assert seen == [{"text": "rm -rf"}, {"text": "ls"}, {}]
    # The server counted two calls (ls, counter): the denied one never crossed.
    assert outputs(result) == ["Tool raw__echo was not approved.", "ls", "2"]


# --------------------------------------------------------------------------- #
# Retries, timeout, output cap, renderer
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_retries_re_run_a_failing_call_as_lovia_does_for_any_tool(isolation: str) -> None:
    async def main() -> tuple[RunResult, int]:
        server = raw(isolation, name="raw", retries=2, auto_reconnect=False)
        async with server.session() as conn:
            result, _ = await drive(MCP(conn), call("raw__exit", {"code": 7}))
            return result, (await conn.stats()).calls

    result, calls = run(main())

    (entry,) = results(result)
    assert entry.is_error
    assert entry.output.startswith("Tool error: MCP tool 'exit' failed: the server exited with code 7")
    assert calls == 3  # the first attempt and two retries, each on a fresh server


@ISOLATIONS
def test_a_timeout_reports_lovias_timeout_error_kills_the_hung_server_and_the_next_call_works(
    isolation: str,
) -> None:
    server_pid_seen = None

    async def main() -> tuple[RunResult, Any, Any]:
        nonlocal server_pid_seen
        # The next call waits for the hung tree to be killed (kill_grace, then
        # SIGTERM grace, then SIGKILL): its timeout must cover that.
        server = raw(isolation, name="raw", timeout=1.5, kill_grace=0.1)
        async with server.session() as conn:
            before = await conn.stats()
            result, _ = await drive(MCP(conn), call("raw__hang", {}), call("raw__echo", {"text": "alive"}))
            server_pid_seen = conn.server_pid
            return result, before, await conn.stats()

    result, before, after = run(main())

    hang, echo = results(result)
    assert hang.is_error and hang.output == "Tool error: TimeoutError"
    assert echo.output == "alive"
    assert after.timeouts == 1 and after.restarts == 1
    assert after.server_pid != before.server_pid
    assert after.server_pid == server_pid_seen  # the connection follows the restart
    assert before.server_pid is not None and not pid_alive(before.server_pid)


@ISOLATIONS
def test_the_agents_default_tool_timeout_applies_to_mcp_tools_without_their_own(isolation: str) -> None:
    async def main() -> tuple[RunResult, Any]:
        async with raw(isolation, name="raw", kill_grace=0.1).session() as conn:
            result, _ = await drive(MCP(conn), call("raw__hang", {}), default_tool_timeout=0.3)
            return result, await conn.stats()

    result, stats = run(main())

    assert outputs(result) == ["Tool error: TimeoutError"]
    # Classified as a timeout (the server is killed), not a plain cancellation.
    assert stats.timeouts == 1


@ISOLATIONS
def test_max_output_chars_truncates_a_tool_result_exactly_as_lovia_does(isolation: str) -> None:
    plugin = MCP(raw(isolation, name="raw", max_output_chars=1000))
    result, _ = run(drive(plugin, call("raw__big", {"size": 5000}), call("raw__echo", {"text": "short"})))

    big, short = outputs(result)
    assert big == truncate_tool_output("x" * 5000, 1000)
    assert "kept 1,000 of 5,000 chars" in big
    assert short == "short"


@ISOLATIONS
def test_a_custom_result_renderer_receives_the_raw_mcp_tool_result_with_sdk_attribute_names(
    isolation: str,
) -> None:
    received: list[tuple[Any, Any]] = []

    async def renderer(result: Any, ctx: RunContext[Any]) -> str:
        received.append((result, ctx))
        return "rendered: " + ",".join(block.type for block in result.content)

    plugin = MCP(raw(isolation, name="raw", result_renderer=renderer))
    result, model = run(drive(plugin, call("raw__mixed", {}), call("raw__add", {"a": 2, "b": 3})))

    assert outputs(result) == [
        "rendered: text,image,audio,resource,resource,resource_link",
        "rendered: text",
    ]
    (mixed, ctx), (added, _) = received
    assert isinstance(ctx, RunContext)
    assert isinstance(mixed, MCPToolResult) and isinstance(mixed, LoviaMCPToolResult)
    assert mixed.is_error is False and mixed.structured_content is None
    text_block, image, audio, embedded, blob, link = mixed.content
    assert text_block.text == "hello"
    assert (image.mime_type, image.data) == ("image/png", "aGVsbG8gd29ybGQ=")
    assert (audio.mime_type, audio.data) == ("audio/wav", "AAAA")
    assert embedded.resource.uri == "file:///a.txt"
    assert (embedded.resource.mime_type, embedded.resource.text) == ("text/plain", "inline text")
    assert (blob.resource.blob, getattr(blob.resource, "text", None)) == (
        "AAAAAAAA",
        None,
    )  # the SDK's BlobResourceContents
    assert (link.uri, link.name) == ("file:///c.txt", "c.txt")
    assert added.structured_content == {"sum": 5}
    assert [b.text for b in added.content] == ["5"]
    # The model saw only what the renderer returned.
    assert "aGVsbG8gd29ybGQ=" not in repr(model.calls)


@ISOLATIONS
def test_two_named_servers_with_the_same_tools_coexist_and_each_keeps_its_own_options(isolation: str) -> None:
    plugin = MCP(
        raw(isolation, name="capped", max_output_chars=100, needs_approval=True),
        raw(isolation, name="free"),
    )
    result, _ = run(
        drive(
            plugin,
            call("capped__echo", {"text": "y"}),
            call("free__big", {"size": 500}),
            call("free__echo", {"text": "free"}),
            approval_handler=lambda tool_call, ctx: False,
        )
    )

    assert outputs(result) == ["Tool capped__echo was not approved.", "x" * 500, "free"]


# --------------------------------------------------------------------------- #
# Parity with lovia's own plugin
# --------------------------------------------------------------------------- #
def _sdk_view(block: Any) -> tuple[Any, ...]:
    """What a renderer written against the SDK's models reads from a block."""
    res = getattr(block, "resource", None)
    uri = getattr(block, "uri", None)
    return (
        block.type,
        getattr(block, "text", None),
        getattr(block, "mime_type", None),
        getattr(block, "data", None),
        None if uri is None else str(uri),
        None if res is None else (str(res.uri), res.mime_type, getattr(res, "text", None), getattr(res, "blob", None)),
    )


@ISOLATIONS
def test_a_renderer_written_against_the_sdk_models_reads_the_same_values_as_under_lovias_own_plugin(
    isolation: str,
) -> None:
    script = [call("raw__mixed", {}), call("raw__fail", {}), call("raw__add", {"a": 1, "b": 2})]

    def recording(into: list[Any]) -> Any:
        def renderer(result: Any, ctx: RunContext[Any]) -> str:
            into.append(([_sdk_view(b) for b in result.content], result.is_error))
            return "ok"

        return renderer

    theirs: list[Any] = []
    ours: list[Any] = []
    lovia_server = lovia_plugin.MCPServerStdio(
        command=PY, args=raw_args(), name="raw", result_renderer=recording(theirs)
    )
    run(drive(lovia_plugin.MCP(lovia_server), *script))
    run(drive(MCP(raw(isolation, name="raw", result_renderer=recording(ours))), *script))

    assert len(ours) == 3
    assert ours == theirs


@ISOLATIONS
def test_the_model_sees_exactly_what_lovias_own_plugin_shows_it(isolation: str) -> None:
    script = [
        call("raw__echo", {"text": "plain"}),
        call("raw__mixed", {}),
        call("raw__fail", {}),
        call("raw__add", {"a": 1, "b": 2}),
        call("raw__big", {"size": 300}),
    ]
    lovia_server = lovia_plugin.MCPServerStdio(command=PY, args=raw_args(), name="raw", max_output_chars=100)
    theirs, _ = run(drive(lovia_plugin.MCP(lovia_server), *script))
    ours, _ = run(drive(MCP(raw(isolation, name="raw", max_output_chars=100)), *script))

    assert [(e.output, e.is_error) for e in results(ours)] == [(e.output, e.is_error) for e in results(theirs)]


def test_an_empty_include_list_filters_nothing_as_in_lovias_plugin() -> None:
    async def main() -> tuple[set[str], set[str]]:
        theirs = await lovia_plugin.MCPServerStdio(command=PY, args=raw_args(), include_tools=[]).open()
        try:
            their_names = {t.name for t in theirs.tools()}
        finally:
            await theirs.close()
        async with raw("process", name=None, include_tools=[]).session() as ours:
            return their_names, {t.name for t in ours.tools()}

    theirs, ours = run(main())
    assert ours == theirs == set(RAW_TOOLS)


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_is_passed_to_every_tool_of_the_server(parallel: bool) -> None:
    async def main() -> set[bool]:
        async with raw("process", name="raw", parallel=parallel).session() as conn:
            return {t.parallel for t in conn.tools()}

    assert run(main()) == {parallel}
