"""``lovia-mcp serve`` reached by real clients over loopback: lovia's own plugin in a real Agent (forty at once),
lovia-mcp's HTTP config, and the MCP SDK's client (both protocol eras).

One gateway serves this module and the gateway's other modules by part (the
``gateway`` fixture of tests/_gateway.py: starting one per module would
multiply their time); tests that stop or misconfigure a gateway are in
test_gateway_serve.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from _gateway import Serve, sdk_client
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from conftest import run
from helpers import outputs
from lovia import Agent, Runner
from lovia.plugins.mcp import MCP as LoviaMCP
from lovia.plugins.mcp import MCPServerStreamableHTTP as LoviaHTTP
from lovia.testing import ScriptedProvider, call, text

from lovia_mcp import MCPServerStreamableHTTP

pytestmark = pytest.mark.timeout(120)

# A bound on forty agents' runs through one gateway on a loaded 2-core
# machine (each run: a session handshake, a listing, a call); a few
# seconds unloaded.
FORTY_AGENTS_WAIT = 60.0


def test_an_agent_on_lovias_own_plugin_calls_tools_of_every_server_through_the_aggregated_endpoint(
    gateway: Serve,
) -> None:
    async def main() -> Any:
        plugin = LoviaMCP(LoviaHTTP(url=gateway.url, headers=gateway.headers))
        model = ScriptedProvider([call("raw__echo", {"text": "via lovia"}), call("ann__plain", {}), text("done")])
        return await Runner.run(Agent(name="a", model=model, plugins=[plugin]), "go")

    result = run(main())
    assert result.output == "done"
    assert outputs(result)[0] == "via lovia"
    assert "plain" in outputs(result)[1]


def test_lovia_mcps_own_http_config_sees_one_servers_tools_under_their_own_names(gateway: Serve) -> None:
    async def main() -> tuple[set[str], Any]:
        config = MCPServerStreamableHTTP(url=f"{gateway.base}/servers/raw/mcp", headers=gateway.headers)
        async with config.session() as conn:
            names = {t.name for t in conn.tools()}
            return names, await conn.call_tool("add", {"a": 2, "b": 3})

    names, added = run(main())
    assert {"echo", "add", "fail", "exit"} <= names
    assert not any("__" in n for n in names)
    assert added.content[0].text == "5" and added.structured_content == {"sum": 5}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_sdk_client_sees_annotations_meta_and_is_error_results_unchanged_in_both_protocol_eras(
    gateway: Serve, mode: str
) -> None:
    async def main() -> tuple[str, Any, Any, Any]:
        async with sdk_client(f"{gateway.base}/servers/ann/mcp", gateway.headers, mode=mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
        async with sdk_client(gateway.url, gateway.headers, mode=mode) as client:
            failed = await client.call_tool("raw__fail", {})
            return client.protocol_version, tools, failed, await client.call_tool("raw__echo", {"text": "x"})

    version, tools, failed, echoed = run(main())
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    read = tools["read"]
    assert read.annotations.read_only_hint is True and read.annotations.title == "Read it"
    assert read.meta == {"example.com/ui": {"icon": "eye"}}
    assert tools["write"].annotations.destructive_hint is True
    assert tools["plain"].annotations is None
    # The server's own isError: passed through, with no gateway error kind.
    assert failed.is_error is True and failed.content[0].text == "something went wrong"
    assert "lovia-mcp/error" not in (failed.meta or {})
    assert echoed.is_error is False and echoed.content[0].text == "x"


def test_an_http_server_in_the_config_is_served_beside_stdio_ones_with_its_annotations(gateway: Serve) -> None:
    async def main() -> tuple[dict[str, Any], Any, Any]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            return (
                tools,
                await client.call_tool("remote__echo", {"text": "over http"}),
                await client.call_tool("remote__add", {"a": 1, "b": 2}),
            )

    tools, echoed, added = run(main())
    assert {"remote__echo", "remote__look", "raw__echo"} <= set(tools)
    look = tools["remote__look"]
    assert look.annotations.read_only_hint is True and look.annotations.open_world_hint is False
    assert look.meta == {"example.com/k": 1}
    assert echoed.content[0].text == "over http"
    assert added.structured_content == {"sum": 3.0}


def test_forty_concurrent_agents_on_lovias_plugin_are_served_by_one_shared_server(gateway: Serve) -> None:
    async def one(i: int) -> Any:
        plugin = LoviaMCP(LoviaHTTP(url=gateway.url, headers=gateway.headers))
        model = ScriptedProvider([call("raw__echo", {"text": f"agent {i}"}), call("raw__pid", {}), text("done")])
        return await Runner.run(Agent(name=f"a{i}", model=model, plugins=[plugin]), "go")

    async def main() -> list[Any]:
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(40))), FORTY_AGENTS_WAIT)

    started = time.monotonic()
    results = run(main())
    print(f"forty agents through the gateway: {time.monotonic() - started:.2f} s")
    assert [outputs(r)[0] for r in results] == [f"agent {i}" for i in range(40)]
    assert len({json.loads(outputs(r)[1])["pid"] for r in results}) == 1
