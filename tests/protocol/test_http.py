"""Streamable HTTP end to end: an SDK ``MCPServer`` served by uvicorn
(``tests/servers/http_server.py``, started once per session), reached through
``MCPServerStreamableHTTP`` and ``Runner.run`` in both isolation modes.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ISOLATIONS, SERVERS, drive, pid_alive, results, run, serving
from lovia import Agent, Runner
from lovia.run_context import RunContext
from lovia.testing import ScriptedProvider, call, text

from lovia_mcp import MCP, MCPError, MCPServerStreamableHTTP, MCPToolResult

# Bound on listing MAX_LIST_PAGES in-memory pages (well under a second idle):
# without the cap the listing never ends, and this turns that into a failure.
ENDLESS_LISTING_WAIT = 30.0


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    with serving(str(SERVERS / "http_server.py")) as url:
        yield url


def web(url: str, isolation: str, **options: Any) -> MCPServerStreamableHTTP:
    return MCPServerStreamableHTTP(url=url, name="web", isolation=isolation, **options)  # type: ignore[arg-type]


@ISOLATIONS
def test_a_streamable_http_server_serves_text_structured_output_and_images_through_a_run(
    http_url: str, isolation: str
) -> None:
    result, _ = run(
        drive(
            MCP(web(http_url, isolation)),
            call("web__echo", {"text": "over http"}),
            call("web__add", {"a": 1.5, "b": 2}),
            call("web__pixel", {}),
        )
    )

    echo, add, pixel = results(result)
    assert echo.output == "over http"
    assert isinstance(add.raw, MCPToolResult) and add.raw.structured_content == {"sum": 3.5}
    assert pixel.output == "[image: image/png, 67 B]"


@ISOLATIONS
def test_an_http_config_is_opened_per_run_and_its_worker_is_gone_when_the_run_returns(
    http_url: str, isolation: str
) -> None:
    workers: list[int | None] = []

    def renderer(result: Any, ctx: RunContext[Any]) -> str:
        (conn,) = plugin.connections()
        workers.append(conn.worker_pid)
        return str(result)

    plugin = MCP(web(http_url, isolation, result_renderer=renderer, include_tools=["echo"]))
    result, _ = run(drive(plugin, call("web__echo", {"text": "once"})))

    assert [e.output for e in results(result)] == ["once"]
    assert plugin.connections() == []
    (worker,) = workers
    if isolation == "process":
        assert worker is not None and not pid_alive(worker)
    else:
        assert worker is None


@ISOLATIONS
def test_a_persistent_http_connection_is_reused_across_runs(http_url: str, isolation: str) -> None:
    async def main() -> list[str]:
        async with web(http_url, isolation).session() as conn:
            first, _ = await drive(MCP(conn), call("web__echo", {"text": "first"}))
            second, _ = await drive(MCP(conn), call("web__echo", {"text": "second"}), call("web__pid", {}))
            return [e.output for e in results(first) + results(second)]

    first, second, pid = run(main())

    assert (first, second) == ("first", "second")
    assert json.loads(pid) > 0


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@ISOLATIONS
def test_an_http_url_where_nothing_listens_fails_at_open_time_naming_the_url(isolation: str) -> None:
    url = f"http://127.0.0.1:{_unused_port()}/mcp"
    model = ScriptedProvider([text("never reached")])

    with pytest.raises(MCPError) as info:
        run(Runner.run(Agent(name="tester", model=model, plugins=[MCP(web(url, isolation))]), "go"))

    assert "web" in str(info.value)
    assert model.calls == []


@ISOLATIONS
def test_an_http_url_where_nothing_listens_says_the_connection_failed(isolation: str) -> None:
    async def open_error(url: str) -> str:
        try:
            await web(url, isolation).open()
        except MCPError as exc:
            return str(exc)
        return "opened"

    message = run(open_error(f"http://127.0.0.1:{_unused_port()}/mcp"))

    assert "All connection attempts failed" in message


def test_a_failed_in_process_http_open_leaves_no_task_exception_unretrieved(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{_unused_port()}/mcp"
    with pytest.raises(MCPError):
        run(web(url, "none").open())

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()

    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


@ISOLATIONS
def test_an_http_tool_keeps_its_annotations_and_meta(http_url: str, isolation: str) -> None:
    async def go() -> Any:
        async with web(http_url, isolation, trust_annotations=True).session() as conn:
            return {t.name: t for t in conn.tools()}["web__look"]

    look = run(go())

    assert look.annotations.read_only_hint is True and look.annotations.open_world_hint is False
    assert look.meta == {"example.com/k": 1}
    assert look.parallel is True


@ISOLATIONS
def test_an_http_server_that_adds_a_tool_is_re_listed_before_the_call_that_added_it_returns(
    http_url: str, isolation: str
) -> None:
    name = f"added_{isolation}"

    async def go() -> tuple[set[str], set[str], str]:
        async with web(http_url, isolation).session() as conn:
            before = {t.name for t in conn.tools()}
            await conn.call_tool("add_tool", {"name": name})
            after = {t.name for t in conn.tools()}
            return before, after, str(await conn.call_tool(name, {"text": "hi"}))

    before, after, answer = run(go())

    assert f"web__{name}" not in before and f"web__{name}" in after
    assert answer == f"{name}: hi"


class EndlessListing:
    """Stands in for the SDK's ``ClientSession``: every ``tools/list`` page names a fresh next cursor."""

    # As the SDK's session says once negotiated (a handshake-era server).
    protocol_version = "2025-11-25"

    def __init__(self) -> None:
        self.pages = 0

    async def list_tools(self, params: Any = None) -> Any:
        import mcp_types

        self.pages += 1
        tool = mcp_types.Tool(name=f"t{self.pages}", input_schema={"type": "object"})
        return mcp_types.ListToolsResult(tools=[tool], next_cursor=f"c{self.pages}")


def test_an_http_listing_whose_cursors_never_end_is_cut_at_the_same_page_cap_as_stdio() -> None:
    from lovia_mcp_worker.transport.http import HttpSession
    from lovia_mcp_worker.wire.mcpjson import MAX_LIST_PAGES
    from lovia_mcp_worker.wire.messages import ServerSpec

    warnings: list[str] = []
    sdk = EndlessListing()

    async def go() -> list[Any]:
        session = HttpSession(
            ServerSpec(name="web", transport="http", url="http://127.0.0.1:9/mcp"),
            on_end=lambda _: None,
            warn=warnings.append,
        )
        session._session = sdk  # our own class: the SDK session it would hold inside running()
        return await asyncio.wait_for(session.list_tools(), ENDLESS_LISTING_WAIT)

    tools = run(go())

    assert len(tools) == sdk.pages == MAX_LIST_PAGES
    assert warnings == [f"tools/list had more than {MAX_LIST_PAGES} pages; listing stopped at {MAX_LIST_PAGES} tools"]
