"""2025 sessions and per-session servers behind the gateway (:mod:`lovia_mcp.gateway.sessions`, the holders of
:mod:`lovia_mcp.gateway.upstreams`).

A session answers only to the token that opened it; a per-session server
is one per session, capped, closed when its session ends or after its idle
expiry, and refuses a request that belongs to no session. On the shared
gateway (tests/_gateway.py); each principal's share of the caps is
test_gateway_shares.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import psutil
import pytest
from _gateway import IDLE_EXPIRY_WAIT, INITIALIZE, OTHER_TOKEN, Serve, answer, sdk_client
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from _gateway import mcp_post as _mcp_post
from _gateway import pid_of as _pid
from conftest import run

pytestmark = pytest.mark.timeout(120)


def test_a_session_answers_only_to_the_token_that_opened_it(gateway: Serve) -> None:
    mine = gateway.headers["Authorization"]
    theirs = f"Bearer {OTHER_TOKEN}"
    opened = _mcp_post(gateway, INITIALIZE, authorization=mine)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}

    def as_(authorization: str) -> httpx.Response:
        return _mcp_post(
            gateway,
            listing,
            authorization=authorization,
            **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"},
        )

    def pid() -> int:
        # The session's own per-session server.
        answered = _mcp_post(
            gateway,
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ps__pid", "arguments": {}}},
            authorization=mine,
            **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"},
        )
        return int(json.loads(answer(answered)["result"]["content"][0]["text"])["pid"])

    held = pid()
    # The other token is let in (it is valid) but the session is not its own:
    # the answer is an unknown session's, and ending it is refused the same way.
    refused = as_(theirs)
    assert refused.status_code == 404 and "Session not found" in refused.text
    ended = httpx.delete(gateway.url, headers={"authorization": theirs, "mcp-session-id": session}, timeout=30)
    assert ended.status_code == 404
    served = as_(mine)
    assert served.status_code == 200 and "raw__echo" in served.text
    # Nor did the refused DELETE close the session's per-session server (it did: a new pid).
    assert pid() == held
    # (Without the binding, the other token's list got a 200: checked by hand.)
    assert (
        httpx.delete(gateway.url, headers={"authorization": mine, "mcp-session-id": session}, timeout=30).status_code
        == 200
    )


@pytest.mark.parametrize(
    ("capabilities", "kind"),
    [({}, "application/json"), ({"sampling": {}}, "text/event-stream"), ({"roots": {}}, "text/event-stream")],
)
def test_a_2025_sessions_plain_call_is_one_json_body_unless_its_client_declared_a_capability_a_server_may_ask_of(
    gateway: Serve, capabilities: dict[str, Any], kind: str
) -> None:
    # A client a server may ask something mid-call (sampling, elicitation,
    # roots) keeps the SDK's event stream, which can carry the request; any
    # other gets one JSON body, as cheap as mcp-proxy's answer.
    auth = {"authorization": gateway.headers["Authorization"]}
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": capabilities}}
    opened = _mcp_post(gateway, initialize, **auth)
    assert opened.status_code == 200, opened.text
    assert opened.headers["content-type"].startswith(kind), opened.headers
    session = {**auth, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "raw__echo", "arguments": {"text": "j"}},
    }
    try:
        answered = _mcp_post(gateway, call, **session)
        assert answered.status_code == 200, answered.text
        assert answered.headers["content-type"].startswith(kind), answered.headers
        assert answer(answered)["result"]["content"][0]["text"] == "j"
    finally:
        assert httpx.delete(gateway.url, headers=session, timeout=30).status_code == 200


def test_per_session_servers_are_one_per_session_capped_and_closed_when_the_session_ends(gateway: Serve) -> None:
    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with sdk_client(gateway.url, gateway.headers, mode="legacy") as a:
            out["a"] = [_pid(await a.call_tool("ps__pid", {})), _pid(await a.call_tool("ps__pid", {}))]
            async with sdk_client(gateway.url, gateway.headers, mode="legacy") as b:
                out["b"] = _pid(await b.call_tool("ps__pid", {}))
                async with sdk_client(gateway.url, gateway.headers, mode="legacy") as c:
                    try:
                        await c.call_tool("ps__pid", {})
                    except Exception as exc:  # noqa: BLE001 - the SDK's MCPError, checked below
                        out["refused"] = str(exc)
            # b's DELETE closed its server: a new session gets a slot.
            async with sdk_client(gateway.url, gateway.headers, mode="legacy") as d:
                out["d"] = _pid(await d.call_tool("ps__pid", {}))
        return out

    out = run(main())
    assert out["a"][0] == out["a"][1]
    assert out["b"] != out["a"][0]
    assert "max_sessions" in out["refused"] and "hint" in out["refused"]
    assert out["d"] not in (out["a"][0], out["b"])
    gone = []
    for p in (out["a"][0], out["b"], out["d"]):
        with contextlib.suppress(psutil.NoSuchProcess):  # exited between the look and the wait: gone already
            gone.append(psutil.Process(p))
    _, alive = psutil.wait_procs(gone, timeout=10)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


def test_a_per_session_server_is_closed_after_its_idle_expiry(gateway: Serve) -> None:
    async def main() -> int:
        async with sdk_client(gateway.url, gateway.headers, mode="legacy") as client:
            pid = _pid(await client.call_tool("brief__pid", {}))
            # The session stays open; only its server expires (idle 0.5 s).
            proc = psutil.Process(pid)
            _, alive = await asyncio.to_thread(psutil.wait_procs, [proc], IDLE_EXPIRY_WAIT)
            assert alive == [], "the idle session's server is still running"
            return pid

    pid = run(main())
    assert not psutil.pid_exists(pid)


def test_a_per_session_server_refuses_a_sessionless_2026_request_with_a_hint(gateway: Serve) -> None:
    async def main() -> None:
        async with sdk_client(gateway.url, gateway.headers, mode="auto") as client:
            await client.call_tool("ps__pid", {})

    with pytest.raises(Exception) as caught:
        run(main())
    assert "belongs to no session" in repr(caught.value) and "Client(mode=" in repr(caught.value)


def test_a_gateway_with_a_per_session_server_keeps_the_forkserver_s_idle_workers_for_its_opens(gateway: Serve) -> None:
    # Its per-session servers open as sessions come: the idle workers are what
    # makes those opens quick, so serve never asks for fewer.
    log = gateway.stderr()
    assert "lovia_mcp.gateway: ready" in log  # the log is read, and serve is past the point where it would ask
    assert "idle workers kept" not in log
