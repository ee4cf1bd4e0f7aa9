"""``lovia-mcp serve`` reached by real clients over loopback: lovia's own plugin in a real Agent,
lovia-mcp's HTTP config, and the MCP SDK's client (both protocol eras).

One gateway serves the whole module (starting one per test would triple the
module's time); tests that stop or misconfigure a gateway are in
test_gateway_serve.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from _gateway import (
    NOTIFY_WAIT,
    OTHER_TOKEN,
    TOKEN,
    Heard,
    Serve,
    modern_call,
    raised_within,
    raw,
    samples,
    sdk_client,
    sdk_http_server,
    server,
    shared_by_module,
)
from conftest import register_shared, run
from helpers import outputs
from lovia import Agent, Runner
from lovia.plugins.mcp import MCP as LoviaMCP
from lovia.plugins.mcp import MCPServerStreamableHTTP as LoviaHTTP
from lovia.testing import ScriptedProvider, call, text
from lovia_mcp_worker.sandbox import bwrap as sandbox_mod

from lovia_mcp import MCPServerStreamableHTTP
from lovia_mcp.gateway.auth.authenticator import AUTH_REFUSED

pytestmark = pytest.mark.timeout(120)

SANDBOX = sandbox_mod.BWRAP is not None

# A bound on forty agents' runs through one gateway on a loaded 2-core
# machine (each run: a session handshake, a listing, a call); a few
# seconds unloaded.
FORTY_AGENTS_WAIT = 60.0
# An idle expiry of 0.5 s is swept every 0.25 s; the server's close is
# bounded by the connection's own close wait. Generous for a loaded machine.
IDLE_EXPIRY_WAIT = 20.0
# Linux's delayed ACK; a keep-alive request that waits for it takes at least this.
DELAYED_ACK = 0.040
KEEP_ALIVE_REQUESTS = 21
# A client gone mid-call: uvicorn sees the closed socket, the gateway cancels
# the call (a few ms unloaded). Generous for a loaded machine.
CANCEL_SEEN_WAIT = 20.0


@pytest.fixture(scope="module")
def remote() -> Iterator[str]:
    """An HTTP server (the SDK's own) for the gateway to serve beside stdio ones."""
    with sdk_http_server() as (proc, url):
        register_shared(proc.pid)
        yield url


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, remote: str) -> Iterator[Serve]:
    g = Serve(
        tmp_path_factory.mktemp("gateway"),
        {
            "remote": {"type": "http", "url": remote},
            "raw": raw(),
            "ann": server("annotated_server.py"),
            "ps": raw(session="per-session", max_sessions=2, idle=60),
            "store": server("store_server.py", session="per-session", max_sessions=4),
            "slow": raw(timeout=0.5, kill_grace=0.1),
            "capped": raw(limits={"memory_mb": 60}, auto_reconnect=False),
            "brief": raw(session="per-session", idle=0.5),
            "bare": server("escape_server.py"),
            "hdr": server("header_server.py"),
            "latch": server("latch_server.py"),
            # Tool lists that grow on demand (add_tool): one shared, one per session.
            "grow": server("annotated_server.py"),
            "growps": server("annotated_server.py", session="per-session"),
            "growbrief": server("annotated_server.py", session="per-session", idle=0.5),
            # Only where the sandbox can run (a server that cannot be sandboxed never opens).
            **({"jail": server("escape_server.py", sandbox=True)} if SANDBOX else {}),
        },
        "--max-body-bytes",
        "65536",
    )
    with shared_by_module(g):
        yield g


def _mcp_post(g: Serve, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(
        g.url,
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream", **headers},
        timeout=30,
    )


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


# --------------------------------------------------------------------------- #
# The three clients
# --------------------------------------------------------------------------- #
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


# --------------------------------------------------------------------------- #
# Security
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "authorization",
    # The token itself under another scheme: only Bearer carries it.
    [None, "Bearer wrong-token-0123456789abcdef", "Basic dGVzdA==", "Bearer", f"Basic {TOKEN}", TOKEN],
)
def test_a_request_without_the_right_bearer_token_gets_401_on_every_protected_route(
    gateway: Serve, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    for path in ("/mcp", "/servers/raw/mcp", "/metrics"):
        response = httpx.post(
            gateway.base + path, json=INITIALIZE, headers={"accept": "application/json, text/event-stream", **headers}
        )
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"].startswith("Bearer")
        error = response.json()["error"]
        assert error["code"] == AUTH_REFUSED and "--token-file" in error["data"]["hint"], error
    # Probes carry no token (Kubernetes' httpGet cannot read a Secret).
    assert httpx.get(gateway.base + "/healthz").status_code == 200
    assert httpx.get(gateway.base + "/readyz").text == "ready\n"


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
        # The session's own per-session server (an SSE answer: one message event).
        answered = _mcp_post(
            gateway,
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ps__pid", "arguments": {}}},
            authorization=mine,
            **{"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"},
        )
        data = next(line for line in answered.text.splitlines() if line.startswith("data:"))
        return int(json.loads(json.loads(data[5:])["result"]["content"][0]["text"])["pid"])

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


class _Session2025:
    """A 2025 session opened by hand (initialize), as any HTTP client can: its id, its calls, its end."""

    def __init__(self, g: Serve, authorization: str) -> None:
        self.g, self.authorization = g, authorization
        opened = _mcp_post(g, INITIALIZE, authorization=authorization)
        assert opened.status_code == 200, opened.text
        self.id = opened.headers["mcp-session-id"]

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The call's first text block (its SSE answer: one message event)."""
        answered = _mcp_post(
            self.g,
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
            authorization=self.authorization,
            **{"mcp-session-id": self.id, "mcp-protocol-version": "2025-11-25"},
        )
        data = next(line for line in answered.text.splitlines() if line.startswith("data:"))
        result = json.loads(data[5:])["result"]
        assert result["isError"] is False, result
        return str(result["content"][0]["text"])

    def close(self) -> None:
        ended = httpx.delete(
            self.g.url, headers={"authorization": self.authorization, "mcp-session-id": self.id}, timeout=30
        )
        assert ended.status_code == 200, ended.text


def _samples(g: Serve) -> dict[str, float]:
    return samples(httpx.get(g.base + "/metrics", headers=g.headers, timeout=30).text)


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


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_with_a_wrong_token_raises_the_gateways_message_and_hint(gateway: Serve, mode: str) -> None:
    from mcp.shared.exceptions import MCPError

    async def main() -> None:
        async with sdk_client(gateway.url, {"Authorization": "Bearer wrong-token-0123456789abcdef"}, mode=mode):
            pass

    with pytest.raises(BaseException) as caught:
        run(main())
    error = raised_within(caught.value, MCPError)
    assert error.error.code == AUTH_REFUSED, error
    assert error.error.message == "the bearer token is not one of this gateway's", error
    assert isinstance(error.error.data, dict) and "--token-file" in error.error.data["hint"], error.error


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


def test_a_2026_call_whose_client_goes_away_is_cancelled_and_counted_so(gateway: Serve, tmp_path: Path) -> None:
    entered, release = tmp_path / "entered", tmp_path / "release"
    os.mkfifo(entered)
    os.mkfifo(release)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {
                "name": "latch__latch",
                "arguments": {"entered": str(entered), "release": str(release)},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    ).encode()
    host, port = gateway.base.removeprefix("http://").rsplit(":", 1)
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n"
        f"mcp-method: tools/call\r\nmcp-name: latch__latch\r\n"
        f"authorization: {gateway.headers['Authorization']}\r\ncontent-length: {len(body)}\r\n\r\n"
    )

    def metric(text: str, name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    cancelled = 'lovia_mcp_calls_total{server="latch",tool="latch",outcome="cancelled"}'
    try:
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(head.encode() + body)
            # The server has the call; then the client goes away.
            assert entered.read_text() == "in\n"
        # Synchronised on what the gateway reports, bounded.
        deadline = time.monotonic() + CANCEL_SEEN_WAIT
        with httpx.Client(base_url=gateway.base, headers=gateway.headers) as http:
            while (text := http.get("/metrics").text) and metric(text, cancelled) < 1:
                assert time.monotonic() < deadline, f"the call was not cancelled in {CANCEL_SEEN_WAIT} s:\n{text}"
        assert metric(text, "lovia_mcp_calls_in_flight") == 0, text
    finally:
        with open(release, "w") as fifo:  # the server's thread, still held, answers into the void
            fifo.write("go\n")


def test_an_unknown_endpoint_and_an_unknown_tool_get_errors_naming_what_exists(gateway: Serve) -> None:
    response = httpx.post(gateway.base + "/servers/nope/mcp", json=INITIALIZE, headers=gateway.headers)
    assert response.status_code == 404 and "ps" in response.json()["error"]["data"]["hint"]

    async def main() -> None:
        async with sdk_client(gateway.url, gateway.headers, mode="legacy") as client:
            await client.call_tool("nope__echo", {})

    with pytest.raises(Exception) as caught:
        run(main())
    assert "<server>__<tool>" in repr(caught.value)


# --------------------------------------------------------------------------- #
# Containment
# --------------------------------------------------------------------------- #
def test_a_server_crash_mid_call_is_that_calls_error_and_the_next_call_is_served(gateway: Serve) -> None:
    async def main() -> tuple[Any, Any, Any]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            before = json.loads((await client.call_tool("raw__pid", {})).content[0].text)["pid"]
            crashed = await client.call_tool("raw__exit", {"code": 3})
            after = json.loads((await client.call_tool("raw__pid", {})).content[0].text)["pid"]
            return before, crashed, after

    before, crashed, after = run(main())
    assert crashed.is_error is True
    assert "exited with code 3" in crashed.content[0].text
    assert crashed.meta["lovia-mcp/error"] == "server_exited"
    assert after != before and not psutil.pid_exists(before)
    assert httpx.get(gateway.base + "/readyz").status_code == 200


def test_a_call_past_its_timeout_is_an_error_result_and_its_server_is_replaced(gateway: Serve) -> None:
    async def main() -> tuple[int, Any, float, int]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            before = json.loads((await client.call_tool("slow__pid", {})).content[0].text)["pid"]
            started = time.monotonic()
            hung = await client.call_tool("slow__hang", {})
            took = time.monotonic() - started
            after = json.loads((await client.call_tool("slow__pid", {})).content[0].text)["pid"]
            return before, hung, took, after

    before, hung, took, after = run(main())
    print(f"timeout 0.5 s answered after {took:.2f} s")
    assert hung.is_error is True and hung.meta["lovia-mcp/error"] == "timeout"
    assert "timeout" in hung.content[0].text and "killed" in hung.content[0].text
    assert after != before


def test_a_server_past_its_memory_limit_is_killed_and_the_call_says_which_limit(gateway: Serve) -> None:
    async def main() -> tuple[int, Any, int]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            before = _pid(await client.call_tool("capped__pid", {}))
            over = await client.call_tool("capped__alloc", {"mb": 150})
            return before, over, _pid(await client.call_tool("capped__pid", {}))

    before, over, after = run(main())
    assert over.is_error is True and over.meta["lovia-mcp/error"] == "limit"
    assert "memory limit" in over.content[0].text and "memory_mb=60" in over.content[0].text
    assert after != before and not psutil.pid_exists(before)


@pytest.mark.skipif(not SANDBOX, reason="bubblewrap is not available (Linux only)")
def test_a_sandboxed_server_behind_the_gateway_can_neither_write_outside_nor_connect_out(gateway: Serve) -> None:
    # Outside /tmp (private in the sandbox) and outside the server's cwd.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="lovia-gateway-"))
    # A loopback listener that greets each connection (the tool reads a greeting).
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def greet() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"hello")

    threading.Thread(target=greet, daemon=True).start()

    async def main() -> dict[str, str]:
        out = {}
        async with sdk_client(gateway.url, gateway.headers) as client:
            for name in ("bare", "jail"):
                wrote = await client.call_tool(f"{name}__write", {"path": str(outside / f"{name}.txt")})
                reached = await client.call_tool(f"{name}__connect", {"host": "127.0.0.1", "port": port})
                out[name] = f"{wrote.content[0].text} | {reached.content[0].text}"
        return out

    try:
        out = run(main())
    finally:
        listener.close()
        shutil.rmtree(outside, ignore_errors=True)
    print(out)
    assert out["bare"].startswith("ok") and out["bare"].endswith("| ok hello")
    assert out["jail"].startswith("denied") and "| denied" in out["jail"]


@pytest.mark.skipif(not SANDBOX or sandbox_mod.userns_refused() is not None, reason="needs the bwrap backend")
def test_a_sandboxed_call_refused_a_host_tells_the_client_in_its_result_and_meta_and_metrics_count_it(
    gateway: Serve,
) -> None:
    """With the network off, the box's deny-all listener sees the attempt; the gateway's client reads it."""
    key = 'lovia_mcp_sandbox_denials_total{server="jail",tool="proxy_get",kind="network_off"}'
    before = _samples(gateway).get(key, 0.0)

    async def main() -> Any:
        async with sdk_client(gateway.url, gateway.headers) as client:
            return await client.call_tool("jail__proxy_get", {"url": "http://evil.example/x"})

    result = run(main())
    texts = [block.text for block in result.content]
    print(texts, result.meta)
    assert texts[0].startswith("ok 403 lovia-mcp sandbox: this server has no network access")
    assert texts[-1] == "[sandbox] blocked a connection to evil.example:80 (this server has no network access)"
    assert result.meta is not None
    [denied] = result.meta["lovia-mcp/sandbox_denied"]
    assert (denied["kind"], denied["target"], denied["count"]) == ("network_off", "evil.example:80", 1)
    assert _samples(gateway)[key] == before + 1


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


# --------------------------------------------------------------------------- #
# Sessions
# --------------------------------------------------------------------------- #
def _pid(result: Any) -> int:
    assert result.is_error is False, result
    return int(json.loads(result.content[0].text)["pid"])


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


# --------------------------------------------------------------------------- #
# Operations
# --------------------------------------------------------------------------- #
def test_keep_alive_responses_do_not_wait_for_the_clients_delayed_ack(gateway: Serve) -> None:
    # Without TCP_NODELAY on the listening socket's connections, each
    # response written in two parts waits for the client's delayed ACK:
    # 40 ms a request on Linux, whatever the load (seen failing: 44 ms).
    with httpx.Client(base_url=gateway.base) as http:
        took = []
        for _ in range(KEEP_ALIVE_REQUESTS):
            started = time.perf_counter()
            assert http.get("/healthz").status_code == 200
            took.append(time.perf_counter() - started)
    median = sorted(took)[len(took) // 2]
    print(f"keep-alive GET /healthz: median {median * 1000:.2f} ms")
    assert median < DELAYED_ACK / 2, median


# --------------------------------------------------------------------------- #
# --------------------------------------------------------------------------- #
def test_metrics_count_calls_by_outcome_latency_kills_and_memory_per_server(gateway: Serve) -> None:
    async def main() -> None:
        async with sdk_client(gateway.url, gateway.headers) as client:
            await client.call_tool("raw__echo", {"text": "m"})
            await client.call_tool("raw__fail", {})
            await client.call_tool("raw__exit", {"code": 5})

    run(main())
    body = httpx.get(gateway.base + "/metrics", headers=gateway.headers).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line and not line.startswith("#")
    }
    assert all(name.startswith("lovia_mcp_") for name in samples)
    assert samples['lovia_mcp_calls_total{server="raw",tool="echo",outcome="ok"}'] >= 1
    assert samples['lovia_mcp_calls_total{server="raw",tool="fail",outcome="tool_error"}'] >= 1
    assert samples['lovia_mcp_calls_total{server="raw",tool="exit",outcome="error"}'] >= 1
    assert samples['lovia_mcp_kills_total{server="raw",reason="server_exited"}'] >= 1
    assert samples['lovia_mcp_call_duration_seconds_bucket{server="raw",le="+Inf"}'] >= 3
    assert samples['lovia_mcp_restarts_total{server="raw"}'] >= 1
    # raw's server was just killed (replaced on next use); ann's runs.
    assert samples['lovia_mcp_server_memory_bytes{server="ann"}'] > 1_000_000
    assert samples['lovia_mcp_server_processes{server="ann"}'] == 1
    assert samples['lovia_mcp_up{server="raw"}'] == 1


# Distinct unknown tool names, each long: labelled as sent, they grew /metrics
# by 20 kB a call (600 kB after 30). A name outside the callable set is
# answered before any call, so it names no series.
UNKNOWN_CALLS = 30
UNKNOWN_NAME_BYTES = 20_000
# What those calls may add to /metrics: the digits of counters and gauges
# changing meanwhile.
METRICS_GROWTH = 1_000


def test_calls_to_many_long_unknown_tool_names_are_unknown_tools_and_metrics_stay_small(gateway: Serve) -> None:
    mine = gateway.headers["Authorization"]
    # One call first: the server's series exist from then on.
    assert modern_call(gateway, "raw__echo", {"text": "first"}, mine).status_code == 200
    before = httpx.get(gateway.base + "/metrics", headers=gateway.headers).text
    answers = [modern_call(gateway, f"raw__{i}{'x' * UNKNOWN_NAME_BYTES}", {}, mine) for i in range(UNKNOWN_CALLS)]
    after = httpx.get(gateway.base + "/metrics", headers=gateway.headers).text
    print(
        f"/metrics: {len(before):,} bytes before {UNKNOWN_CALLS} calls to unknown "
        f"{UNKNOWN_NAME_BYTES:,}-byte names, {len(after):,} after"
    )
    assert all(a.json()["error"]["code"] == -32602 for a in answers), answers[0].text
    assert len(after) - len(before) < METRICS_GROWTH
    assert max(len(line) for line in after.splitlines()) < 200
    # A tool the server lists keeps its own series.
    assert modern_call(gateway, "raw__echo", {"text": "known"}, mine).status_code == 200
    assert 'lovia_mcp_calls_total{server="raw",tool="echo",outcome="ok"}' in samples(
        httpx.get(gateway.base + "/metrics", headers=gateway.headers).text
    )


def test_lone_surrogates_in_arguments_reach_the_server_as_replacement_characters_and_the_call_counts_ok(
    gateway: Serve,
) -> None:
    # Models emit lone surrogates ("\\ud800": half an emoji); UTF-8 cannot
    # carry one. Before the repair the call failed with a bare -32603 from
    # the connection's encoder, and was counted ok.
    mine = gateway.headers["Authorization"]
    ok = 'lovia_mcp_calls_total{server="raw",tool="echo",outcome="ok"}'
    errors = 'lovia_mcp_calls_total{server="raw",tool="echo",outcome="error"}'
    before = _samples(gateway)
    # json.dumps writes each lone surrogate as its \\u escape, as a model's client would send it.
    arguments = {"text": "a\ud800b\udc00c \ud83d\ude00", "nested": [{"k\udfff": "\ud83d"}]}
    answered = modern_call(gateway, "raw__echo", arguments, mine)
    after = _samples(gateway)
    assert answered.status_code == 200, answered.text
    assert answered.json()["result"]["content"][0]["text"] == "a\ufffdb\ufffdc \U0001f600"
    assert after[ok] - before.get(ok, 0) == 1 and after.get(errors, 0) == before.get(errors, 0)


def test_a_2025_session_request_with_a_lone_surrogate_is_refused_by_the_sdks_parser_and_reaches_no_server(
    gateway: Serve,
) -> None:
    # The SDK parses a session's messages strictly (a lone surrogate escape is
    # a JSON-RPC parse error); only 2026-07-28 requests reach the gateway's repair.
    mine = gateway.headers["Authorization"]
    session = _Session2025(gateway, mine)
    try:
        before = _samples(gateway)
        refused = _mcp_post(
            gateway,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "raw__echo", "arguments": {"text": "a\ud800"}},
            },
            authorization=mine,
            **{"mcp-session-id": session.id, "mcp-protocol-version": "2025-11-25"},
        )
        after = _samples(gateway)
    finally:
        session.close()
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32700, refused.text
    echo = {k: v for k, v in after.items() if 'tool="echo"' in k and k.startswith("lovia_mcp_calls_total")}
    assert echo == {k: before[k] for k in echo}


@pytest.mark.unit
def test_a_call_that_fails_in_a_way_nobody_foresaw_is_counted_as_an_error_not_ok() -> None:
    import sys

    from lovia_mcp import MCPServerStdio
    from lovia_mcp.gateway import app, options, upstreams

    class Broken(upstreams.Upstream):
        def tools(self, holder: Any = None) -> list[Any]:
            return []

        async def call(
            self,
            holder: Any,
            raw_name: str,
            arguments: dict[str, Any],
            principal: str = "",
            listener: Any = None,
        ) -> Any:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    broken = Broken(MCPServerStdio(name="b", command=sys.executable, args=["-c", ""]), options.Served())
    gateway = app.Gateway([broken], loopback=True, max_body_bytes=1024, max_sessions=1, session_idle=60.0)
    with pytest.raises(UnicodeEncodeError):
        run(gateway._call(broken, "t", {}, None))  # noqa: SLF001 - the counting itself is the point
    assert dict(gateway.metrics.calls) == {(("server", "b"), ("tool", "<unknown>"), ("outcome", "error")): 1}


@pytest.mark.unit
def test_bearer_tokens_are_each_compared_in_constant_time_and_never_with_equality(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ast
    import hmac
    import inspect
    import textwrap

    from lovia_mcp.gateway.auth import tokens as scheme
    from lovia_mcp.gateway.auth.authenticator import Identity

    # Behaviour: every known token goes through hmac.compare_digest, whether
    # the given one matches the first, the last or none (no early exit).
    tokens = ["first-token-0123456789", "second-token-0123456789", "third-token-0123456789"]
    auth = scheme.TokenFile([scheme.Credential("default", t) for t in tokens])
    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(scheme.hmac, "compare_digest", spy)
    for given, allowed in ((tokens[0], True), (tokens[2], True), ("wrong-token-0123456789", False)):
        compared.clear()
        headers = [(b"authorization", f"Bearer {given}".encode())]
        assert isinstance(auth.check(headers), Identity) is allowed
        assert compared == [t.encode() for t in tokens]
    # Source: no == / != / in anywhere in the check (a weakening the
    # behaviour above would also catch, kept as the issue asks).
    tree = ast.parse(textwrap.dedent(inspect.getsource(scheme.TokenFile.check)))
    weak = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
        and "token" in ast.unparse(node)
    ]
    assert weak == []


# --------------------------------------------------------------------------- #
# Tool-list changes reach the clients
# --------------------------------------------------------------------------- #
def _fresh() -> str:
    # The shared server keeps every tool added: each test adds its own.
    return f"t{os.urandom(4).hex()}"


@pytest.mark.parametrize("path", ["/mcp", "/servers/grow/mcp"])
def test_a_2025_session_is_told_when_a_shared_servers_tools_change_and_then_lists_the_new_tool(
    gateway: Serve, path: str
) -> None:
    name = _fresh()
    prefix = "grow__" if path == "/mcp" else ""

    async def main() -> tuple[Any, int, set[str], set[str]]:
        heard = Heard()
        async with sdk_client(
            gateway.base + path, gateway.headers, mode="legacy", message_handler=heard, stream_open=heard.stream_open
        ) as listener:
            before = {t.name for t in (await listener.list_tools()).tools}
            await asyncio.wait_for(heard.stream_open.wait(), NOTIFY_WAIT)
            # Another client changes the list: every session listing the server hears of it.
            async with sdk_client(gateway.url, gateway.headers) as other:
                added = await other.call_tool("grow__add_tool", {"text": name})
                assert added.content[0].text == f"added {name}"
            await heard.next()
            after = {t.name for t in (await listener.list_tools()).tools}
            return listener.server_capabilities, heard.count, before, after

    capabilities, count, before, after = run(main())
    assert capabilities.tools.list_changed is True
    assert count == 1
    assert prefix + name not in before
    assert after == before | {prefix + name}


def test_a_2026_client_listening_for_tool_list_changes_gets_the_event_and_then_lists_the_new_tool(
    gateway: Serve,
) -> None:
    from mcp.client.subscriptions import ToolsListChanged

    name = _fresh()

    async def main() -> tuple[str, Any, Any, set[str]]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            async with client.listen(tools_list_changed=True) as sub:
                # The stream is acknowledged: a change from now on is delivered.
                await client.call_tool("grow__add_tool", {"text": name})
                events = aiter(sub)
                event = await asyncio.wait_for(anext(events), NOTIFY_WAIT)
                after = {t.name for t in (await client.list_tools()).tools}
            return client.protocol_version, client.server_capabilities, event, after

    version, capabilities, event, after = run(main())
    assert version == "2026-07-28"
    assert capabilities.tools.list_changed is True
    assert isinstance(event, ToolsListChanged)
    assert f"grow__{name}" in after


def test_a_per_session_servers_tool_list_change_is_told_to_its_own_session_only(gateway: Serve) -> None:
    mine, theirs = _fresh(), _fresh()

    async def main() -> tuple[Heard, Heard, set[str], set[str]]:
        a, b = Heard(), Heard()
        async with (
            sdk_client(
                gateway.url, gateway.headers, mode="legacy", message_handler=a, stream_open=a.stream_open
            ) as one,
            sdk_client(
                gateway.url, gateway.headers, mode="legacy", message_handler=b, stream_open=b.stream_open
            ) as two,
        ):
            await asyncio.wait_for(asyncio.gather(a.stream_open.wait(), b.stream_open.wait()), NOTIFY_WAIT)
            await one.call_tool("growps__add_tool", {"text": mine})
            await a.next()
            # b's own change is told after anything a's change could have sent
            # it (the same stream, in order): b hearing exactly one means a's
            # change was not told to b.
            await two.call_tool("growps__add_tool", {"text": theirs})
            await b.next()
            return (
                a,
                b,
                {t.name for t in (await one.list_tools()).tools},
                {t.name for t in (await two.list_tools()).tools},
            )

    a, b, one_lists, two_lists = run(main())
    assert (a.count, b.count) == (1, 1)
    assert f"growps__{mine}" in one_lists and f"growps__{theirs}" not in one_lists
    assert f"growps__{theirs}" in two_lists and f"growps__{mine}" not in two_lists


def test_a_session_whose_per_session_server_expired_is_told_its_tools_are_the_first_listing_again(
    gateway: Serve,
) -> None:
    name = _fresh()

    async def main() -> tuple[int, set[str]]:
        heard = Heard()
        async with sdk_client(
            gateway.url, gateway.headers, mode="legacy", message_handler=heard, stream_open=heard.stream_open
        ) as client:
            await asyncio.wait_for(heard.stream_open.wait(), NOTIFY_WAIT)
            await client.call_tool("growbrief__add_tool", {"text": name})
            await heard.next()
            # The server's idle expiry closes it: the session lists the first open's tools again, and is told.
            await heard.next(IDLE_EXPIRY_WAIT)
            return heard.count, {t.name for t in (await client.list_tools()).tools}

    count, after = run(main())
    assert count == 2
    assert "growbrief__read" in after and f"growbrief__{name}" not in after


class _Ears:
    """Stands in for the SDK's ServerSession: counts the notifications sent on it."""

    def __init__(self) -> None:
        self.sent = 0

    async def send_tool_list_changed(self) -> None:
        self.sent += 1


@pytest.mark.unit
def test_the_notifier_tells_the_endpoints_listing_a_server_and_the_session_table_forgets_sessions_as_the_sdk_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from lovia_mcp.gateway import notify, sessions
    from lovia_mcp.gateway.upstreams import SessionHolder

    now = [1000.0]
    monkeypatch.setattr(sessions, "time", SimpleNamespace(monotonic=lambda: now[0]))
    table = sessions.Sessions(idle=60.0)
    n = notify.Notifier({"/mcp": None, "/servers/a/mcp": "a", "/servers/b/mcp": "b"}, max_streams=4, sessions=table)
    published: dict[str, int] = {path: 0 for path in n.endpoints}
    for path, endpoint in n.endpoints.items():
        endpoint.bus("p").subscribe(lambda _event, path=path: published.__setitem__(path, published[path] + 1))
    ears = {sid: _Ears() for sid in ("all", "a", "b")}

    # A request naming an id the SDK never issued leaves nothing behind.
    table.began("stranger")
    table.ended("stranger")
    assert "stranger" not in table and len(table) == 0
    for sid, only in (("all", None), ("a", "a"), ("b", "b")):
        table.opened(sid, "token-1")
        table.began(sid)
        table.heard(sid, ears[sid], only, "p")  # type: ignore[arg-type]
        table.ended(sid)
    # A session is its opener's only: another token (or none) naming it finds nothing.
    assert table.owned("all", "token-1") is not None
    assert table.owned("all", "token-2") is None and table.owned("all", None) is None
    table.began("all")  # its GET stream: open from now on

    async def change(server: str, session: str | None) -> None:
        n.changed(server, None if session is None else SessionHolder(session))
        await asyncio.gather(*list(n._sending))  # noqa: SLF001 - every send of this change, done

    async def main() -> None:
        await change("a", None)
        assert {sid: e.sent for sid, e in ears.items()} == {"all": 1, "a": 1, "b": 0}
        assert published == {"/mcp": 1, "/servers/a/mcp": 1, "/servers/b/mcp": 0}
        # A per-session server's change: its session only, and no listen stream.
        await change("b", "b")
        assert {sid: e.sent for sid, e in ears.items()} == {"all": 1, "a": 1, "b": 1}
        assert published == {"/mcp": 1, "/servers/a/mcp": 1, "/servers/b/mcp": 0}
        # Past the SDK's idle time: the idle sessions are gone, the one whose GET stream is open is not.
        now[0] += 61.0
        await change("a", None)
        assert {sid: e.sent for sid, e in ears.items()} == {"all": 2, "a": 1, "b": 1}
        assert len(table) == 1 and table.owned("a", "token-1") is None
        # DELETE.
        table.forget("all")
        await change("a", None)
        assert ears["all"].sent == 2 and len(table) == 0

    run(main())


@pytest.mark.unit
def test_a_change_is_told_only_to_principals_that_may_see_the_server_and_a_per_principal_one_to_its_own() -> None:
    from lovia_mcp.gateway import notify, sessions
    from lovia_mcp.gateway.access import Access
    from lovia_mcp.gateway.upstreams import PrincipalHolder

    table = sessions.Sessions(idle=60.0)
    # alice sees every server, bob only "a".
    access = Access({"alice": ["*"], "bob": ["a"]})
    n = notify.Notifier({"/mcp": None}, max_streams=4, sessions=table, access=access)
    published = {who: 0 for who in ("alice", "bob")}
    for who in published:
        n.endpoints["/mcp"].bus(who).subscribe(lambda _event, who=who: published.__setitem__(who, published[who] + 1))
    ears = {who: _Ears() for who in published}
    for who, e in ears.items():
        table.opened(who, f"token-{who}")
        table.heard(who, e, None, who)  # type: ignore[arg-type]

    async def change(server: str, principal: str | None) -> dict[str, tuple[int, int]]:
        n.changed(server, None if principal is None else PrincipalHolder(principal))
        await asyncio.gather(*list(n._sending))  # noqa: SLF001 - every send of this change, done
        return {who: (ears[who].sent, published[who]) for who in ears}

    async def main() -> list[dict[str, tuple[int, int]]]:
        # (2025 session told, listen streams told) per principal, after each change:
        return [
            await change("a", None),  # a shared server both see
            await change("b", None),  # a shared server bob may not see
            await change("a", "alice"),  # alice's own per-principal server
            await change("a", "bob"),  # bob's own
        ]

    assert run(main()) == [
        {"alice": (1, 1), "bob": (1, 1)},
        {"alice": (2, 2), "bob": (1, 1)},
        {"alice": (3, 3), "bob": (1, 1)},
        {"alice": (3, 3), "bob": (2, 2)},
    ]
