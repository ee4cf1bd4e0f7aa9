"""MCP 2026-07-28 (stateless) beside the handshake era, on stdio and streamable HTTP.

Servers: the SDK's own (``meta_sdk_server.py``: both eras, choosing by the
client's first request), a raw one that speaks only 2026-07-28 and refuses
``initialize`` with -32022 (``modern_server.py``; ``--legacy`` makes it a
handshake-era server that answers the probe only after the handshake
arrived), over stdio and HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, SERVERS, raw_args, run, serving
from lovia import Agent, Runner
from lovia.exceptions import UserError
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry

from lovia_mcp import MCP, MCPError, MCPServerStdio, MCPServerStreamableHTTP, close_spares, warm_spares

META_SERVER = str(SERVERS / "meta_sdk_server.py")
MODERN_SERVER = str(SERVERS / "modern_server.py")
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
ENVELOPE = (
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
)


def modern(*flags: str, **options: Any) -> MCPServerStdio:
    return MCPServerStdio(command=PY, args=[MODERN_SERVER, *flags], name="modern", **options)


def seen(result: Any) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(str(result))
    return found


@pytest.mark.parametrize(("protocol", "version"), [("auto", MODERN), ("legacy", HANDSHAKE), (MODERN, MODERN)])
def test_the_sdk_server_speaks_the_era_each_protocol_option_asks_for(protocol: str, version: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[META_SERVER], name="meta", protocol=protocol)
        async with server.session() as conn:
            reply = seen(await conn.call_tool("meta"))
            assert reply["version"] == version == conn.protocol_version
            assert (await conn.stats()).protocol_version == version
            envelope = [k for k in ENVELOPE if k in reply["meta"]]
            assert envelope == (list(ENVELOPE) if version == MODERN else []), reply

    run(main())


@ISOLATIONS
def test_a_server_that_speaks_only_2026_07_28_opens_and_every_request_carries_the_envelope(isolation: str) -> None:
    async def main() -> None:
        async with modern(isolation=isolation).session() as conn:
            assert conn.protocol_version == MODERN
            meta = seen(await conn.call_tool("meta"))
            assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
            assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "lovia-mcp"
            assert str(await conn.call_tool("echo", {"text": "hi"})) == "hi"

    run(main())


def test_legacy_against_a_modern_only_server_fails_at_open_naming_the_refusal() -> None:
    async def main() -> None:
        with pytest.raises(MCPError) as info:
            async with modern(protocol="legacy").session():
                pass
        err = info.value
        assert err.kind == "open"
        assert "initialize was answered with an error" in str(err) and "-32022" in str(err), str(err)

    run(main())


def test_a_server_that_speaks_only_versions_lovia_mcp_does_not_fails_at_open_with_a_hint() -> None:
    async def main() -> None:
        with pytest.raises(MCPError) as info:
            async with modern("--supported", "2099-01-01").session():
                pass
        err = info.value
        assert err.kind == "open"
        assert "speaks only MCP protocol versions 2099-01-01" in str(err), str(err)
        assert "Use a server release" in str(err)

    run(main())


def test_a_pinned_modern_version_is_spoken_without_a_probe() -> None:
    async def main() -> None:
        async with modern(protocol=MODERN).session() as conn:
            assert conn.protocol_version == MODERN
            assert str(await conn.call_tool("echo", {"text": "pinned"})) == "pinned"

    run(main())


def test_an_unknown_protocol_option_is_refused_with_a_hint() -> None:
    with pytest.raises(UserError) as info:
        modern(protocol="2030-01-01")
    assert "unknown protocol '2030-01-01'" in str(info.value)
    assert "legacy" in str(info.value.hint)


def test_the_probe_is_pipelined_with_the_handshake_so_a_handshake_era_server_costs_no_extra_round_trip() -> None:
    # This server refuses server/discover only once initialize has arrived: a
    # client that waited for the probe's answer first would never open it.
    async def main() -> None:
        started = time.monotonic()
        async with modern("--legacy", open_timeout=10).session() as conn:
            opened = time.monotonic() - started
            assert conn.protocol_version == HANDSHAKE
            assert str(await conn.call_tool("echo", {"text": "old"})) == "old"
        print(f"open of a handshake-era server under protocol='auto': {opened * 1e3:.1f} ms")

    run(main())


def test_a_handshake_era_raw_server_still_opens_under_auto() -> None:
    async def main() -> None:
        async with MCPServerStdio(command=PY, args=raw_args(), name="raw").session() as conn:
            assert conn.protocol_version == HANDSHAKE
            assert str(await conn.call_tool("echo", {"text": "x"})) == "x"

    run(main())


def test_an_input_required_result_reaches_the_model_as_a_tool_error_naming_what_was_asked() -> None:
    async def main() -> None:
        agent = Agent(
            name="a",
            model=ScriptedProvider([call("modern__ask", {}), text("done")]),
            plugins=[MCP(modern())],
        )
        result = await Runner.run(agent, "go")
        [entry] = [e for e in result.entries if isinstance(e, ToolResultEntry)]
        output = str(entry.output)
        assert "elicitation/create ('Really delete every file?')" in output, output
        assert "sampling/createMessage" in output and "does not answer elicitation" in output
        assert output.startswith("[tool error] "), output  # as an isError result renders

    run(main())


def test_tool_list_changes_of_a_modern_server_arrive_on_its_listen_stream() -> None:
    # The server announces changes only to subscriptions/listen streams.
    async def main() -> None:
        async with modern().session() as conn:
            await conn.call_tool("add_tool", {"name": "fresh"})
            assert "modern__fresh" in [t.name for t in conn.tools()]

    run(main())


# --------------------------------------------------------------------------- #
# Streamable HTTP: the SDK's own negotiation (mcp.Client's mode)
# --------------------------------------------------------------------------- #
def _serve(*argv: str) -> Iterator[str]:
    with serving(*argv) as url:
        yield url


@pytest.fixture(scope="module")
def sdk_url() -> Iterator[str]:
    yield from _serve(META_SERVER, "--http")


@pytest.fixture(scope="module")
def modern_url() -> Iterator[str]:
    yield from _serve(MODERN_SERVER, "--http")


@pytest.mark.parametrize(("protocol", "version"), [("auto", MODERN), ("legacy", HANDSHAKE), (MODERN, MODERN)])
def test_the_sdk_http_server_speaks_the_era_each_protocol_option_asks_for(
    sdk_url: str, protocol: str, version: str
) -> None:
    async def main() -> None:
        server = MCPServerStreamableHTTP(url=sdk_url, name="meta", protocol=protocol)
        async with server.session() as conn:
            reply = seen(await conn.call_tool("meta"))
            assert reply["version"] == version == conn.protocol_version
            assert (await conn.stats()).protocol_version == version

    run(main())


@ISOLATIONS
def test_an_http_server_that_speaks_only_2026_07_28_opens_and_gets_the_envelope(
    modern_url: str, isolation: str
) -> None:
    async def main() -> None:
        server = MCPServerStreamableHTTP(url=modern_url, name="modern", isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            assert conn.protocol_version == MODERN
            meta = seen(await conn.call_tool("meta"))
            assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
            asked = await conn.call_tool("ask")
            assert asked.is_error and "elicitation/create ('Really delete every file?')" in str(asked), str(asked)

    run(main())


def test_legacy_against_a_modern_only_http_server_fails_at_open(modern_url: str) -> None:
    async def main() -> None:
        with pytest.raises(MCPError) as info:
            async with MCPServerStreamableHTTP(url=modern_url, name="modern", protocol="legacy").session():
                pass
        assert info.value.kind == "open" and "-32022" in str(info.value), str(info.value)

    run(main())


# --------------------------------------------------------------------------- #
# ttlMs: a spare or a standby reuses its listing while it is fresh
# --------------------------------------------------------------------------- #
# A listing that stays fresh for the whole test, and one stale at once.
FRESH_TTL_MS = "600000"
STALE_TTL_MS = "0"
# Bound on waiting for the worker's standby to report itself ready.
STANDBY_WAIT = 15.0


@pytest.mark.parametrize(("ttl", "listings"), [(FRESH_TTL_MS, 1), (STALE_TTL_MS, 2)])
def test_a_spare_reuses_its_listing_while_fresh_and_re_lists_it_once_expired(ttl: str, listings: int) -> None:
    async def main() -> None:
        server = modern("--ttl-ms", ttl, spares=1)
        assert await warm_spares(server) == 1
        conn = await server.open()  # the spare
        try:
            assert str(await conn.call_tool("listings")) == str(listings)
        finally:
            await conn.close()
            await close_spares()

    run(main())


class _Ready(logging.Handler):
    """Set once the worker logs its standby server ready."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "standby server" in record.getMessage():
            self.event.set()


@pytest.mark.parametrize(("ttl", "listings"), [(FRESH_TTL_MS, 1), (STALE_TTL_MS, 2)])
def test_a_standby_taking_over_reuses_its_listing_while_fresh_and_re_lists_it_once_expired(
    ttl: str, listings: int
) -> None:
    async def main() -> None:
        log = logging.getLogger("lovia_mcp")
        ready, level = _Ready(), log.level
        log.setLevel(logging.DEBUG)
        log.addHandler(ready)
        try:
            async with modern("--ttl-ms", ttl, spares=1, auto_reconnect=False).session() as conn:
                await asyncio.wait_for(ready.event.wait(), STANDBY_WAIT)
                with pytest.raises(MCPError):
                    await conn.call_tool("exit")
                assert str(await conn.call_tool("listings")) == str(listings)  # the standby's
                assert (await conn.stats()).restarts == 1
        finally:
            log.removeHandler(ready)
            log.setLevel(level)

    run(main())


def test_the_protocol_option_is_read_from_a_config_file() -> None:
    from lovia_mcp import load_servers

    [legacy, pinned] = load_servers(
        {
            "mcpServers": {
                "modern": {"command": PY, "args": [MODERN_SERVER], "protocol": "legacy"},
                "pinned": {"command": PY, "args": [MODERN_SERVER], "protocol": MODERN},
            }
        }
    )
    assert legacy.protocol == "legacy" and pinned.protocol == MODERN
    with pytest.raises(UserError, match="unknown protocol"):
        load_servers({"mcpServers": {"x": {"command": PY, "protocol": "2030"}}})


def test_a_pinned_handshake_version_is_the_only_one_offered_and_accepted() -> None:
    async def main() -> None:
        async with MCPServerStdio(command=PY, args=[META_SERVER], name="meta", protocol="2025-06-18").session() as conn:
            assert seen(await conn.call_tool("meta"))["version"] == "2025-06-18" == conn.protocol_version
        with pytest.raises(MCPError, match="answered protocol='2024-11-05' with version '2025-11-25'"):
            async with modern("--legacy", protocol="2024-11-05").session():
                pass

    run(main())


@pytest.mark.parametrize("first", ["-32022", "-32603"])
def test_a_refused_probe_is_followed_by_one_re_probe_as_the_sdk_does(first: str) -> None:
    # -32022 naming a mutual version: probed again at it. Any other error:
    # the fallback handshake, which this server refuses with -32022 (modern
    # evidence), and then the one re-probe.
    async def main() -> None:
        async with modern("--first-probe", first).session() as conn:
            assert conn.protocol_version == MODERN
            assert str(await conn.call_tool("probes")) == "2"

    run(main())


class _Changed(logging.Handler):
    """Set when the connection applies a changed tool list."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "the server's tools changed" in record.getMessage():
            self.event.set()


# Bound on waiting for a listen stream's change to be applied (it may come
# after the call's own answer: another stream).
CHANGE_WAIT = 10.0


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_sdk_servers_tool_list_changes_arrive_through_subscriptions_listen(transport: str, sdk_url: str) -> None:
    async def main() -> None:
        log = logging.getLogger("lovia_mcp")
        changed, level = _Changed(), log.level
        log.setLevel(logging.INFO)
        log.addHandler(changed)
        server: MCPServerStdio | MCPServerStreamableHTTP
        if transport == "stdio":
            server = MCPServerStdio(command=PY, args=[META_SERVER], name="meta")
        else:
            server = MCPServerStreamableHTTP(url=sdk_url, name="meta")
        try:
            async with server.session() as conn:
                assert conn.protocol_version == MODERN
                name = f"fresh_{transport}"
                await conn.call_tool("add_tool", {"name": name})
                await asyncio.wait_for(changed.event.wait(), CHANGE_WAIT)
                assert f"meta__{name}" in [t.name for t in conn.tools()]
        finally:
            log.removeHandler(changed)
            log.setLevel(level)

    run(main())
