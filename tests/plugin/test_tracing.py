"""OpenTelemetry: a CLIENT span per MCP operation, W3C trace context into the server's ``_meta``.

Against real servers that report the ``_meta`` they received
(``tests/servers/meta_sdk_server.py``, the SDK's own server, over stdio and
streamable HTTP), in both isolation modes, with the OpenTelemetry SDK's
in-memory exporter and metric reader installed as this process's providers
(a process can set them once; other tests' spans land in them too and are
cleared before each test here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, SERVERS, raw_args, run, serving
from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, call, text
from lovia_mcp_worker.sandbox import bwrap
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from lovia_mcp import MCP, Limits, MCPError, MCPServerStdio, MCPServerStreamableHTTP, Sandbox, tracing
from lovia_mcp.client import core as client_core

META_SERVER = str(SERVERS / "meta_sdk_server.py")
SUP_SERVER = str(SERVERS / "sup_server.py")
# A call that never answers, cut by the tool timeout.
TIMEOUT = 0.5

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
app_tracer = trace.get_tracer("the-application")


@pytest.fixture(autouse=True)
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER


@pytest.fixture(scope="module")
def meta_url() -> Iterator[str]:
    with serving(META_SERVER, "--http") as url:
        yield url


def named(name: str) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


def traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-"


def server_meta(result: Any) -> dict[str, Any]:
    seen: dict[str, Any] = json.loads(str(result))
    return seen


def check_call_span(span: ReadableSpan, *, tool: str, transport: str, parent: ReadableSpan) -> None:
    assert span.kind is SpanKind.CLIENT
    attrs = dict(span.attributes or {})
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["gen_ai.tool.name"] == tool
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["network.transport"] == transport
    assert attrs["mcp.protocol.version"]
    assert "jsonrpc.request.id" in attrs
    assert "error.type" not in attrs and span.status.status_code is StatusCode.UNSET
    assert span.parent is not None and parent.context is not None
    assert span.parent.span_id == parent.context.span_id


@ISOLATIONS
def test_a_tool_call_is_a_client_span_and_its_trace_context_reaches_the_stdio_servers_meta(isolation: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[META_SERVER], name="meta", isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            with app_tracer.start_as_current_span("app"):
                seen = server_meta(await conn.call_tool("meta"))
        [span] = named("tools/call meta")
        [app] = named("app")
        check_call_span(span, tool="meta", transport="pipe", parent=app)
        assert seen["meta"]["traceparent"].startswith(traceparent(span)), seen
        # The progress token still travels beside it.
        assert "progress_token" in seen["meta"] or "progressToken" in seen["meta"]
        # The SDK's server speaks 2026-07-28, whose open is server/discover.
        assert seen["version"] == "2026-07-28" == span.attributes["mcp.protocol.version"]  # type: ignore[index]
        [opened] = named("server/discover")
        assert [e.name for e in opened.events] == [tracing.EVENT_START]
        assert opened.events[0].attributes is not None
        assert opened.events[0].attributes["lovia_mcp.sandbox.backend"] == "none"

    run(main())


@ISOLATIONS
def test_a_tool_call_over_streamable_http_carries_the_agents_trace_context_into_meta(
    isolation: str, meta_url: str
) -> None:
    async def main() -> None:
        server = MCPServerStreamableHTTP(url=meta_url, name="meta", isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            with app_tracer.start_as_current_span("app"):
                seen = server_meta(await conn.call_tool("meta"))
        [span] = named("tools/call meta")
        check_call_span(span, tool="meta", transport="tcp", parent=named("app")[0])
        assert (span.attributes or {})["server.address"] == "127.0.0.1"
        assert (span.attributes or {})["server.port"] == int(meta_url.split(":")[2].split("/")[0])
        if isolation == "process":
            assert seen["meta"]["traceparent"].startswith(traceparent(span)), seen
        else:
            # In the agent's process the SDK makes its own span, a child of ours,
            # and that is the one it sends.
            [sdk] = named("MCP send tools/call meta")
            assert sdk.parent is not None and span.context is not None
            assert sdk.parent.span_id == span.context.span_id
            assert seen["meta"]["traceparent"].startswith(traceparent(sdk)), seen

    run(main())


class OtelTracer:
    """A lovia ``Tracer`` adapter onto OpenTelemetry, as an application would write one."""

    @contextlib.contextmanager
    def span(self, name: str, /, **attributes: object) -> Iterator[Any]:
        attrs = {k: str(v) for k, v in attributes.items()}
        with app_tracer.start_as_current_span(name, attributes=attrs) as span:
            yield span


def test_lovias_tool_call_span_parents_the_mcp_span_in_an_agent_run() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[META_SERVER], name="meta")
        provider = ScriptedProvider([call("meta__echo", {"text": "hi"}), text("done")])
        agent = Agent(name="a", model=provider, plugins=[MCP(server)])
        with app_tracer.start_as_current_span("request"):
            result = await Runner.run(agent, "go", tracer=OtelTracer())  # type: ignore[arg-type]
        assert result.output == "done"
        [span] = named("tools/call echo")
        [tool_call] = [s for s in EXPORTER.get_finished_spans() if s.name == "tool_call"]
        check_call_span(span, tool="echo", transport="pipe", parent=tool_call)
        # The whole run is one trace: the application's.
        [request] = named("request")
        assert request.context is not None and span.context is not None
        assert span.context.trace_id == request.context.trace_id

    run(main())


@ISOLATIONS
def test_a_crash_mid_call_marks_the_span_an_error_and_the_retry_and_restart_are_events(isolation: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args("--crash-after", "2"),
            name="raw",
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            await conn.call_tool("echo", {"text": "fine"})
            await conn.call_tool("echo", {"text": "after a restart"})
        first, second = named("tools/call echo")
        assert not first.events
        # The second call crashed its server and was retried once on a fresh
        # one, which answered: the crash still marks the span (the SDK's
        # spans would not show it), and the retry and restart are events.
        names = [e.name for e in second.events]
        assert {tracing.EVENT_FAILURE, tracing.EVENT_RETRY, tracing.EVENT_RESTART} <= set(names), names
        assert names.index(tracing.EVENT_RETRY) < names.index(tracing.EVENT_RESTART), names
        assert second.status.status_code is StatusCode.ERROR
        assert (second.attributes or {})["error.type"] == "server_exited"
        restart = next(e for e in second.events if e.name == tracing.EVENT_RESTART)
        assert restart.attributes is not None and "exited" in str(restart.attributes["lovia_mcp.reason"])

    run(main())


def test_a_crash_without_a_retry_fails_the_span_with_its_error_type() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            with pytest.raises(MCPError):
                await conn.call_tool("exit", {"code": 7})
        [span] = named("tools/call exit")
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "server_exited"
        [event] = [e for e in span.events if e.name == tracing.EVENT_FAILURE]
        assert event.attributes is not None and event.attributes["lovia_mcp.exit_code"] == 7

    run(main())


@ISOLATIONS
def test_a_timed_out_call_marks_its_span_a_timeout_error(isolation: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            isolation=isolation,
            timeout=TIMEOUT,
            kill_grace=0.1,  # type: ignore[arg-type]
        )
        agent = Agent(name="a", model=ScriptedProvider([call("raw__hang", {}), text("done")]), plugins=[MCP(server)])
        await Runner.run(agent, "go")
        [span] = named("tools/call hang")
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "timeout"
        [event] = [e for e in span.events if e.name == tracing.EVENT_TIMEOUT]
        assert event.attributes is not None
        assert event.attributes["lovia_mcp.timeout_s"] == TIMEOUT and event.attributes["lovia_mcp.on_timeout"] == "kill"

    run(main())


@ISOLATIONS
def test_a_call_cancelled_before_its_deadline_is_no_timeout_on_its_span_and_is_not_held_back(isolation: str) -> None:
    # The worker says whether a cancel was the timeout: asked, it answers a
    # plain cancel too, so the cancellation waits one round trip, not
    # VERDICT_WAIT (what it would wait for a worker that never answers).
    async def main() -> float:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            call = asyncio.ensure_future(conn.call_tool("hang", timeout=60.0))
            while conn.core.in_flight == 0:  # sent: the cancel follows it on the same pipe
                await asyncio.sleep(0)
            started = time.monotonic()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            return time.monotonic() - started

    took = run(main())
    print(f"[{isolation}] cancelled in {took * 1000:.1f} ms (VERDICT_WAIT {client_core.VERDICT_WAIT:g} s)")
    assert took < client_core.VERDICT_WAIT
    [span] = named("tools/call hang")
    assert span.status.status_code is not StatusCode.ERROR
    assert not [e for e in span.events if e.name == tracing.EVENT_TIMEOUT]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")
def test_a_memory_limit_kill_is_a_span_event_naming_the_figure(enforcement: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=[SUP_SERVER],
            name="sup",
            auto_reconnect=False,
            limits=Limits(memory_mb=60),
        )
        async with server.session() as conn:
            with pytest.raises(MCPError):
                await conn.call_tool("hold", {"mb": 150})
        [span] = named("tools/call hold")
        assert (span.attributes or {})["error.type"] == "limit"
        want = tracing.EVENT_OOM if enforcement == "cgroup" else tracing.EVENT_LIMIT
        found = [e for e in span.events if e.name == want]
        assert len(found) == 1, [(e.name, dict(e.attributes or {})) for e in span.events]
        [event] = found
        assert event.attributes is not None and "memory_mb=60" in str(event.attributes["lovia_mcp.reason"])

    run(main())


def test_a_traced_call_carries_the_cpu_time_and_peak_memory_its_server_tree_used(enforcement: str) -> None:
    """Issue 35: a call that burns 0.3 s of CPU, and one that holds 100 MB, in a real Agent run."""

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="used")
        provider = ScriptedProvider(
            [call("used__burn", {"seconds": 0.3}), call("used__alloc", {"mb": 100}), text("done")]
        )
        agent = Agent(name="a", model=provider, plugins=[MCP(server)])
        result = await Runner.run(agent, "go", tracer=OtelTracer())  # type: ignore[arg-type]
        assert result.output == "done"

    run(main())
    [burn] = named("tools/call burn")
    [alloc] = named("tools/call alloc")
    burned, held = dict(burn.attributes or {}), dict(alloc.attributes or {})
    print({k: v for k, v in burned.items() if k.startswith("lovia_mcp.call")})
    print({k: v for k, v in held.items() if k.startswith("lovia_mcp.call")})
    cpu = burned[tracing.ATTR_CPU_TIME]
    assert isinstance(cpu, float) and cpu >= 0.2
    peak = held[tracing.ATTR_MEMORY_PEAK]
    assert isinstance(peak, int) and peak >= 100 * 1024 * 1024
    for attrs in (burned, held):
        assert attrs[tracing.ATTR_SHARED] is False
        assert attrs[tracing.ATTR_EGRESS_CONNECTIONS] == 0 and attrs[tracing.ATTR_EGRESS_BYTES] == 0
    # Span attributes only: a figure per call would make a series per call of the duration metric.
    data = READER.get_metrics_data()
    assert data is not None
    labels = [
        dict(point.attributes)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        for point in metric.data.data_points  # type: ignore[union-attr]
    ]
    assert not [a for a in labels if any(k.startswith("lovia_mcp.call") for k in a)]


def test_every_operation_records_the_duration_histogram_with_its_attributes() -> None:
    async def main() -> None:
        # A name of its own: the reader is cumulative over the whole session.
        server = MCPServerStdio(command=PY, args=raw_args(), name="metered")
        async with server.session() as conn:
            await conn.call_tool("echo", {"text": "x"})
            await conn.call_tool("fail")
            await conn.refresh_tools()

    run(main())
    data = READER.get_metrics_data()
    assert data is not None
    points = [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        if sm.scope.name == tracing.SCOPE
        for metric in sm.metrics
        if metric.name == tracing.DURATION_METRIC
        for point in metric.data.data_points  # type: ignore[union-attr]
        if point.attributes.get("lovia_mcp.server.name") == "metered"
    ]
    by = {(p.attributes.get("mcp.method.name"), p.attributes.get("gen_ai.tool.name")): p for p in points}
    assert by[("tools/call", "echo")].count == 1
    assert "error.type" not in by[("tools/call", "echo")].attributes
    assert by[("tools/call", "fail")].attributes["error.type"] == "tool_error"
    assert by[("tools/list", None)].count == 1
    assert by[("initialize", None)].attributes["network.transport"] == "pipe"
    assert "jsonrpc.request.id" not in by[("tools/call", "echo")].attributes


def test_an_agent_that_never_imported_opentelemetry_does_not_import_it_for_isolated_servers() -> None:
    code = f"""
import asyncio, sys
from lovia_mcp import MCPServerStdio
async def main():
    async with MCPServerStdio(command={PY!r}, args={raw_args()!r}, name="raw").session() as conn:
        await conn.call_tool("echo", {{"text": "x"}})
asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=30, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(bwrap.BWRAP is None, reason="bubblewrap is not available (Linux only)")
def test_the_sandbox_backend_in_force_is_on_the_opens_start_event() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="boxed", sandbox=Sandbox())
        async with server.session() as conn:
            await conn.call_tool("echo", {"text": "x"})
        [opened] = named("initialize")
        [start] = [e for e in opened.events if e.name == tracing.EVENT_START]
        assert start.attributes is not None and start.attributes["lovia_mcp.sandbox.backend"] == "bwrap"

    run(main())


def test_a_lost_worker_is_a_worker_restart_event_on_the_span_of_the_call_that_replaces_it() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            with pytest.raises(MCPError):
                await conn.call_tool("kill_parent")  # SIGKILLs the worker
            assert str(await conn.call_tool("echo", {"text": "again"})) == "again"
        [lost] = named("tools/call kill_parent")
        assert (lost.attributes or {})["error.type"] == "worker_died"
        [span] = named("tools/call echo")
        [event] = [e for e in span.events if e.name == tracing.EVENT_WORKER_RESTART]
        assert event.attributes is not None and "SIGKILL" in str(event.attributes["lovia_mcp.reason"])
        # The fresh worker's open is its own span, nested in nothing of ours.
        assert len(named("initialize")) == 2

    run(main())


def test_tracestate_travels_with_traceparent_into_the_servers_meta() -> None:
    from opentelemetry import context, propagate

    incoming = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=opaque"}

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[META_SERVER], name="meta", protocol="legacy")
        async with server.session() as conn:
            token = context.attach(propagate.extract(incoming))  # as a request handler continuing a remote trace
            try:
                seen = server_meta(await conn.call_tool("meta"))
            finally:
                context.detach(token)
        [span] = named("tools/call meta")
        assert seen["meta"]["traceparent"].startswith(traceparent(span))
        assert seen["meta"]["tracestate"] == "vendor=opaque"
        assert span.context is not None and f"{span.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"

    run(main())
