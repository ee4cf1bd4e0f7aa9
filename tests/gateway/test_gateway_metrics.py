"""The gateway's per-call resource metrics, the restart circuit's gauge, and the Grafana dashboard over them.

A real ``lovia-mcp serve`` with raw servers, reached by the SDK's client:
a call that burns 0.3 s of CPU and one that holds 100 MB show in the
histograms by server and tool. The dashboard in ``deploy/grafana/`` may only
query metrics that ``/metrics`` exports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _gateway import PY, SERVERS, Serve, raw, samples, sdk_client, shared_by_module
from conftest import run
from lovia_mcp_worker.wire.messages import CallUsage, HostEgress

from lovia_mcp.gateway.metrics import EGRESS_HOSTS, OTHER_HOST, Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "lovia-mcp-gateway.json"

# Metrics the dashboard shows that /metrics does not export yet: each is
# another change's to add, named here so the panel is ready for it. Remove
# a name once the gateway exports it (the test then checks it like any other).
PENDING: frozenset[str] = frozenset()

MB = 1 << 20


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    starts = tmp_path_factory.mktemp("starts") / "starts"
    g = Serve(
        tmp_path_factory.mktemp("gateway"),
        {
            "raw": raw(),
            # Its open's server answers no call (it exits at the first), and
            # every later start fails: one restart trips a circuit of one.
            "loop": {
                "command": PY,
                "args": [str(SERVERS / "crashloop_server.py"), "--starts", str(starts), "--calls", "0"],
                "auto_reconnect": False,
                "restart_limit": 1,
                "restart_window": 600,
            },
        },
    )
    with shared_by_module(g):
        yield g


def scrape(g: Serve) -> str:
    return httpx.get(g.base + "/metrics", headers=g.headers, timeout=30).text


def test_a_calls_cpu_and_peak_memory_are_histograms_by_server_and_tool(gateway: Serve) -> None:
    async def main() -> None:
        async with sdk_client(gateway.url, gateway.headers) as client:
            await client.call_tool("raw__burn", {"seconds": 0.3})
            await client.call_tool("raw__alloc", {"mb": 100})

    run(main())
    got = samples(scrape(gateway))
    cpu = {k: v for k, v in got.items() if k.startswith("lovia_mcp_call_cpu_seconds")}
    print(cpu)
    assert got['lovia_mcp_call_cpu_seconds_count{server="raw",tool="burn"}'] == 1
    assert got['lovia_mcp_call_cpu_seconds_sum{server="raw",tool="burn"}'] >= 0.2
    # Cumulative buckets: nothing at or under 0.1 s, all of it by 1 s... or 5 s on a loaded machine.
    assert got['lovia_mcp_call_cpu_seconds_bucket{server="raw",tool="burn",le="0.1"}'] == 0
    assert got['lovia_mcp_call_cpu_seconds_bucket{server="raw",tool="burn",le="+Inf"}'] == 1
    assert got['lovia_mcp_call_memory_peak_bytes_count{server="raw",tool="alloc"}'] == 1
    assert got['lovia_mcp_call_memory_peak_bytes_sum{server="raw",tool="alloc"}'] >= 100 * MB
    assert got['lovia_mcp_call_memory_peak_bytes_bucket{server="raw",tool="alloc",le="6.71089e+07"}'] == 0


def test_a_tripped_restart_circuit_shows_on_its_gauge(gateway: Serve) -> None:
    def circuit() -> float:
        return samples(scrape(gateway))['lovia_mcp_circuit_open{server="loop"}']

    assert circuit() == 0

    async def main() -> list[Any]:
        answers = []
        async with sdk_client(gateway.url, gateway.headers) as client:
            # The first call ends its server; the second's restart fails;
            # the third fails fast on the open circuit.
            for _ in range(3):
                answers.append(await client.call_tool("loop__echo", {"text": "x"}))
        return answers

    answers = run(main())
    print([str(a.content) for a in answers])
    assert all(a.is_error for a in answers)
    assert circuit() == 1


def _queried(expr: str) -> set[str]:
    """The metric names an expression reads (histogram series by their family's name)."""
    names = set(re.findall(r"\blovia_mcp_[a-z0-9_]+", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def test_every_metric_the_grafana_dashboard_queries_is_one_the_gateway_exports(gateway: Serve) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    queried = set().union(*map(_queried, exprs))
    exported = set(re.findall(r"^# TYPE (\S+) ", scrape(gateway), re.MULTILINE))
    print(sorted(queried))
    assert len(queried) >= 15, "the dashboard covers calls, latency, resources, egress, denials and servers"
    assert queried - exported <= PENDING, f"not exported: {sorted(queried - exported - PENDING)}"
    # A pending name the gateway now exports is checked like any other: say so here.
    assert not PENDING & exported, f"exported now, drop from PENDING: {sorted(PENDING & exported)}"
    # Every panel reads a metric: none is left empty.
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and all(_queried(t["expr"]) for t in panel["targets"]), panel["title"]


@pytest.mark.unit
def test_egress_is_counted_by_server_and_host_and_hosts_past_the_cap_share_one_series() -> None:
    metrics = Metrics()
    for n in range(EGRESS_HOSTS + 5):
        usage = CallUsage(egress=[HostEgress(f"h{n}.example", 1, 100)])
        metrics.usage("s", "fetch", usage)
    metrics.usage("s", "fetch", CallUsage(egress=[HostEgress("h0.example", 2, 50)]))
    got = samples(metrics.render([]))
    assert got['lovia_mcp_egress_bytes_total{server="s",host="h0.example"}'] == 150
    assert got['lovia_mcp_egress_connections_total{server="s",host="h0.example"}'] == 3
    assert got[f'lovia_mcp_egress_bytes_total{{server="s",host="{OTHER_HOST}"}}'] == 500
    hosts = {k for k in got if k.startswith("lovia_mcp_egress_bytes_total")}
    assert len(hosts) == EGRESS_HOSTS + 1
