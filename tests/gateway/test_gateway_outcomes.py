"""What each call through the gateway is counted as in /metrics (:mod:`lovia_mcp.gateway.metrics`, the call in
:mod:`lovia_mcp.gateway.app`).

By outcome: ``ok``, ``tool_error``, ``error`` (with the kill and the
restart), ``cancelled`` when its client goes away mid-call, and an error
for a failure nobody foresaw; calls to unknown tool names name no series;
lone surrogates in arguments are repaired and counted ok (a 2025 session's
are refused by the SDK's parser and reach no server). On the shared gateway
(tests/_gateway.py); per-call resources, the restart circuit and the
dashboard are test_gateway_metrics.py.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from _gateway import Serve, modern_call, samples, sdk_client
from _gateway import Session2025 as _Session2025
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from _gateway import mcp_post as _mcp_post
from _gateway import metrics_of as _samples
from conftest import run

pytestmark = pytest.mark.timeout(120)

# A client gone mid-call: uvicorn sees the closed socket, the gateway cancels
# the call (a few ms unloaded). Generous for a loaded machine.
CANCEL_SEEN_WAIT = 20.0


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
