"""What the gateway's paths answer before a call reaches a server (:mod:`lovia_mcp.gateway.routes`).

The checks of an MCP request: its body under the cap, its ``Mcp-Param-*``
headers agreeing with its arguments, a 2026-07-28 request carrying a 2025
session's ``Mcp-Session-Id`` (the attack: another token's session) refused;
and an unknown endpoint or tool answered with what exists. On the shared
gateway (tests/_gateway.py).
"""

from __future__ import annotations

import json

import httpx
import pytest
from _gateway import INITIALIZE, OTHER_TOKEN, Serve, modern_call, sdk_client
from _gateway import Session2025 as _Session2025
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from _gateway import mcp_post as _mcp_post
from _gateway import metrics_of as _samples
from conftest import run

pytestmark = pytest.mark.timeout(120)


def test_a_2026_request_carrying_another_tokens_session_id_neither_reads_nor_writes_that_sessions_server(
    gateway: Serve,
) -> None:
    # The attack: token A keeps a value in its session's own server; token B
    # sends 2026-07-28 calls (which the SDK serves without looking at any
    # session) carrying A's Mcp-Session-Id, and forged ids. Without the
    # gateway's refusal B read A's value, overwrote it, and every forged id
    # got a per-session server of its own (counted against max_sessions).
    mine, theirs = gateway.headers["Authorization"], f"Bearer {OTHER_TOKEN}"
    a = _Session2025(gateway, mine)
    try:
        assert a.call("store__put", {"value": "A's secret"}) == "kept"
        held = json.loads(a.call("store__get", {}))
        sessions = _samples(gateway)['lovia_mcp_sessions{server="store"}']
        read = modern_call(gateway, "store__get", {}, theirs, **{"mcp-session-id": a.id})
        wrote = modern_call(gateway, "store__put", {"value": "B was here"}, theirs, **{"mcp-session-id": a.id})
        forged = [modern_call(gateway, "store__get", {}, theirs, **{"mcp-session-id": f"forged-{i}"}) for i in range(3)]
        # Not even the token that opened the session may mix the eras.
        own = modern_call(gateway, "store__get", {}, mine, **{"mcp-session-id": a.id})
        assert "A's secret" not in read.text and "A's secret" not in own.text
        for refused in (read, wrote, *forged, own):
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert "Mcp-Session-Id" in error["message"] and "hint" in error["data"], error
        assert json.loads(a.call("store__get", {})) == held
        assert _samples(gateway)['lovia_mcp_sessions{server="store"}'] == sessions
    finally:
        a.close()


def test_a_request_body_over_the_cap_gets_413_before_any_session(gateway: Serve) -> None:
    big = {**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * 70_000}}
    response = _mcp_post(gateway, big, authorization=gateway.headers["Authorization"])
    assert response.status_code == 413
    error = response.json()["error"]
    assert "over this gateway's cap of 65536" in error["message"] and "--max-body-bytes" in error["data"]["hint"]


def test_a_2026_call_whose_mcp_param_header_disagrees_with_its_arguments_is_rejected(gateway: Serve) -> None:
    # The SDK validates Mcp-Param-* headers against the tool's schema, which
    # the gateway hands it from its listing (not a tools/list run per call).
    def call(region_header: str) -> httpx.Response:
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "hdr__route",
                "arguments": {"region": "eu"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        return _mcp_post(
            gateway,
            body,
            authorization=gateway.headers["Authorization"],
            **{
                "mcp-protocol-version": "2026-07-28",
                "mcp-method": "tools/call",
                "mcp-name": "hdr__route",
                "mcp-param-region": region_header,
            },
        )

    agreed, disagreed = call("eu"), call("us")
    assert agreed.status_code == 200 and agreed.json()["result"]["content"][0]["text"] == "eu", agreed.text
    assert disagreed.status_code == 400, disagreed.text
    assert "Region" in disagreed.json()["error"]["message"], disagreed.text


def test_an_unknown_endpoint_and_an_unknown_tool_get_errors_naming_what_exists(gateway: Serve) -> None:
    response = httpx.post(gateway.base + "/servers/nope/mcp", json=INITIALIZE, headers=gateway.headers)
    assert response.status_code == 404 and "ps" in response.json()["error"]["data"]["hint"]

    async def main() -> None:
        async with sdk_client(gateway.url, gateway.headers, mode="legacy") as client:
            await client.call_tool("nope__echo", {})

    with pytest.raises(Exception) as caught:
        run(main())
    assert "<server>__<tool>" in repr(caught.value)
