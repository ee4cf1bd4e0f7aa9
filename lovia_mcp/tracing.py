"""OpenTelemetry for MCP operations: spans, trace context and the duration metric, on the agent side.

The agent owns the spans (a worker has no exporter; the user's OpenTelemetry
SDK lives in the agent process). Each MCP operation a connection performs
(the open's handshake, ``tools/list``, ``tools/call``) is one CLIENT span
named ``{mcp.method.name} {target}``, with the attributes of the
OpenTelemetry semantic conventions for MCP:

- ``mcp.method.name``, ``jsonrpc.request.id``, ``mcp.protocol.version``,
  ``network.transport`` (``pipe`` for stdio, ``tcp`` for HTTP), and for
  HTTP ``server.address`` and ``server.port``;
- for ``tools/call``: ``gen_ai.tool.name`` and ``gen_ai.operation.name``
  (``execute_tool``);
- ``error.type`` on failure: the failure's kind (``server_exited``,
  ``limit``, ``timeout``, ``remote``...), or ``tool_error`` for a result the
  server marked ``isError``. A crash, a limit kill and a timeout mark the
  span as an error too.

The span's W3C trace context (``traceparent``, ``tracestate``) crosses the
pipe on the request (:attr:`Operation.trace`) and the worker puts it into
the MCP request's ``_meta``, so an instrumented server's spans join the
agent's trace. What the worker reports while an operation is in flight
becomes span events with their figures (:func:`started`, :meth:`Operation.failure`):
a server (re)start and its reason, the sandbox backend in force, a timeout,
a limit kill, an OOM kill, a replaced worker, a retry. Every operation also
records the ``mcp.client.operation.duration`` histogram (seconds).

A ``tools/call`` answered by a server with a local tree carries what the
tree used during the call (:meth:`Operation.usage`):
``lovia_mcp.call.cpu_time`` (s), ``lovia_mcp.call.memory_peak`` (bytes),
``lovia_mcp.call.egress.connections`` and ``lovia_mcp.call.egress.bytes``
(through the sandbox's allowlist proxy, all hosts), ``lovia_mcp.call.shared``
(another call ran on the server meanwhile: the figures are the server's over
the call's window), and an event ``lovia_mcp.call.egress`` per destination
host. These are span attributes only, never the duration metric's.

Parenting is OpenTelemetry's own: the span's parent is the current span
where the operation starts (lovia's ``tool_call`` span when the run's
``tracer=`` is an OpenTelemetry adapter, or the application's span).

Cost: nothing is imported and nothing is done unless ``opentelemetry.trace``
is already imported in the agent process (:func:`enabled`): a configured SDK
has imported it, and without one there is no span to make. With the API
but no SDK, the spans are OpenTelemetry's no-op ones (microseconds).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from lovia_mcp_worker.wire.messages import CallUsage, Denied, Ended, Failure, Started
    from opentelemetry.metrics import Histogram
    from opentelemetry.trace import Span, Tracer

# The instrumentation scope of the spans and the metric.
SCOPE: Final = "lovia_mcp"
DURATION_METRIC: Final = "mcp.client.operation.duration"
# The semantic conventions' advisory buckets for MCP operation durations (s).
DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# network.transport by the server config's transport.
NETWORK_TRANSPORT: Final = {"stdio": "pipe", "http": "tcp"}
# Span events (names under the project's own namespace: no convention names them).
EVENT_START: Final = "lovia_mcp.server.start"
EVENT_RESTART: Final = "lovia_mcp.server.restart"
EVENT_END: Final = "lovia_mcp.server.end"
EVENT_TIMEOUT: Final = "lovia_mcp.timeout"
EVENT_LIMIT: Final = "lovia_mcp.limit_kill"
EVENT_OOM: Final = "lovia_mcp.oom_kill"
EVENT_WORKER_RESTART: Final = "lovia_mcp.worker.restart"
EVENT_RETRY: Final = "lovia_mcp.retry"
EVENT_FAILURE: Final = "lovia_mcp.failure"
EVENT_EGRESS: Final = "lovia_mcp.call.egress"
# What a call's server tree used (span attributes, from the worker's CallUsage).
ATTR_CPU_TIME: Final = "lovia_mcp.call.cpu_time"
ATTR_MEMORY_PEAK: Final = "lovia_mcp.call.memory_peak"
ATTR_EGRESS_CONNECTIONS: Final = "lovia_mcp.call.egress.connections"
ATTR_EGRESS_BYTES: Final = "lovia_mcp.call.egress.bytes"
ATTR_SHARED: Final = "lovia_mcp.call.shared"
EVENT_DENIED: Final = "lovia_mcp.sandbox.denied"

_tracer: Tracer | None = None
_histogram: Histogram | None = None


def enabled() -> bool:
    """Whether OpenTelemetry is in this process at all (a configured SDK has imported it)."""
    return "opentelemetry.trace" in sys.modules


def _instruments() -> tuple[Tracer, Histogram]:
    # The API's proxies follow a provider set later, so one of each is enough.
    global _tracer, _histogram
    if _tracer is None or _histogram is None:
        from opentelemetry import metrics, trace

        _tracer = trace.get_tracer(SCOPE)
        _histogram = metrics.get_meter(SCOPE).create_histogram(
            DURATION_METRIC,
            unit="s",
            description="The duration of an MCP request or notification, as the client sees it.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
    return _tracer, _histogram


class Operation:
    """One MCP operation's span and duration; made by :func:`operation`."""

    def __init__(self, method: str, target: str | None, attributes: dict[str, Any]) -> None:
        from opentelemetry import propagate, trace

        tracer, self._histogram = _instruments()
        attrs: dict[str, Any] = {"mcp.method.name": method, **attributes}
        if method == "tools/call" and target is not None:
            attrs["gen_ai.tool.name"] = target
            attrs["gen_ai.operation.name"] = "execute_tool"
        self._metric = {k: v for k, v in attrs.items() if v is not None}
        self.span: Span = tracer.start_span(
            f"{method} {target}" if target else method,
            kind=trace.SpanKind.CLIENT,
            attributes=self._metric,
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        # What the worker puts into the request's _meta (None: nothing to carry).
        self.trace: dict[str, str] | None = carrier or None
        self.error_type: str | None = None
        # A call's timeout and on_timeout as configured: the figures of its
        # timeout event, should the worker answer that it timed out.
        self.deadline: dict[str, Any] = {}
        self._started = time.perf_counter()

    def set(self, key: str, value: str | int | None) -> None:
        if value is not None:
            self.span.set_attribute(key, value)
            if key != "jsonrpc.request.id":  # one series per request would be unbounded
                self._metric[key] = value

    def rename(self, method: str, target: str | None = None) -> None:
        self.span.update_name(f"{method} {target}" if target else method)
        self.set("mcp.method.name", method)

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        self.span.add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def fail(self, error_type: str, message: str | None = None) -> None:
        """Mark the operation failed (the first reason stays, as the worker's do)."""
        from opentelemetry.trace import Status, StatusCode

        if self.error_type is None:
            self.error_type = error_type
            self.set("error.type", error_type)
            self.span.set_status(Status(StatusCode.ERROR, message))

    def denied(self, denials: Iterable[Denied]) -> None:
        """What the sandbox refused during the call: one event per distinct denial, with the destination."""
        from lovia_mcp_worker.wire.refusals import words

        for d in denials:
            self.event(
                EVENT_DENIED,
                {
                    "lovia_mcp.denial.kind": d.refusal.kind,
                    "lovia_mcp.denial.target": d.refusal.target,
                    "lovia_mcp.denial.reason": words(d.refusal, "reason"),
                    "lovia_mcp.denial.count": d.count,
                    "lovia_mcp.denial.shared": d.shared,
                },
            )

    def failure(self, failure: Failure) -> None:
        """A worker ``Failure`` answered this operation: an event with its figures, and the error.

        The kind says what happened (``timeout`` is the worker's verdict, also
        on a cancel at the deadline); the words are the failure's own.
        """
        if failure.kind == "timeout":
            self.event(EVENT_TIMEOUT, {**self.deadline, "lovia_mcp.reason": failure.text()})
            self.fail(failure.kind, failure.text())
            return
        if failure.kind == "limit":
            name = EVENT_OOM if failure.limit == "oom" else EVENT_LIMIT
        else:
            name = EVENT_FAILURE
        self.event(
            name,
            {
                "lovia_mcp.failure.kind": failure.kind,
                "lovia_mcp.limit": failure.limit,
                "lovia_mcp.reason": failure.text(),
                "lovia_mcp.exit_code": failure.exit_code,
                "lovia_mcp.signal": failure.signal,
            },
        )
        self.fail(failure.kind, failure.text())

    def usage(self, usage: CallUsage) -> None:
        """What the server's tree used during the call: span attributes (not metric labels), an event per host."""
        span = self.span
        if usage.cpu_time is not None:
            span.set_attribute(ATTR_CPU_TIME, usage.cpu_time)
        if usage.memory_peak is not None:
            span.set_attribute(ATTR_MEMORY_PEAK, usage.memory_peak)
            span.set_attribute("lovia_mcp.call.memory_peak.source", usage.memory_source or "")
        span.set_attribute(ATTR_EGRESS_CONNECTIONS, usage.egress_connections)
        span.set_attribute(ATTR_EGRESS_BYTES, usage.egress_bytes)
        span.set_attribute(ATTR_SHARED, usage.shared)
        for e in usage.egress:
            span.add_event(
                EVENT_EGRESS,
                {
                    "server.address": e.host,
                    "lovia_mcp.egress.connections": e.connections,
                    "lovia_mcp.egress.bytes": e.bytes,
                },
            )

    def end(self) -> None:
        self._histogram.record(time.perf_counter() - self._started, self._metric)
        self.span.end()


@contextlib.contextmanager
def operation(method: str, target: str | None, **attributes: Any) -> Iterator[Operation | None]:
    """Span one MCP operation; yields ``None`` (and costs nothing) without OpenTelemetry.

    ``attributes`` are span attributes (``None`` values are left out). An
    exception that leaves the block fails the operation with its ``kind``
    (lovia's ``MCPError``) or its type name; a plain cancellation does not.
    """
    if not enabled():
        yield None
        return
    op = Operation(method, target, attributes)
    try:
        yield op
    except BaseException as exc:
        if op.error_type is None and not _cancelled(exc):
            op.fail(str(getattr(exc, "kind", None) or type(exc).__qualname__), str(exc))
        raise
    finally:
        op.end()


def _cancelled(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, asyncio.CancelledError)


def server_address(url: str | None) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of an HTTP server's URL (nothing for stdio)."""
    if not url:
        return {}
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return {}
    return {"server.address": parts.hostname, "server.port": port}


def started(ops: Iterable[Operation], msg: Started, reason: str | None) -> None:
    """The worker started a server generation (``reason``: why the one before ended): an event on each operation in flight."""
    for op in ops:
        op.event(
            EVENT_RESTART if msg.generation > 1 else EVENT_START,
            {
                "lovia_mcp.generation": msg.generation,
                "lovia_mcp.server.pid": msg.server_pid,
                "lovia_mcp.reason": reason,
                "lovia_mcp.sandbox.backend": msg.sandbox or "none",
                "mcp.protocol.version": msg.protocol_version,
            },
        )
        op.set("mcp.protocol.version", msg.protocol_version)


def ended(ops: Iterable[Operation], msg: Ended) -> None:
    for op in ops:
        op.event(
            EVENT_END,
            {
                "lovia_mcp.generation": msg.generation,
                "lovia_mcp.reason": msg.reason,
                "lovia_mcp.draining": msg.draining,
            },
        )


def worker_restarted(ops: Iterable[Operation], reason: str | None) -> None:
    for op in ops:
        op.event(EVENT_WORKER_RESTART, {"lovia_mcp.reason": reason})


__all__ = [
    "ATTR_CPU_TIME",
    "ATTR_EGRESS_BYTES",
    "ATTR_EGRESS_CONNECTIONS",
    "ATTR_MEMORY_PEAK",
    "ATTR_SHARED",
    "DURATION_BUCKETS",
    "DURATION_METRIC",
    "EVENT_EGRESS",
    "EVENT_DENIED",
    "EVENT_END",
    "EVENT_FAILURE",
    "EVENT_LIMIT",
    "EVENT_OOM",
    "EVENT_RESTART",
    "EVENT_RETRY",
    "EVENT_START",
    "EVENT_TIMEOUT",
    "EVENT_WORKER_RESTART",
    "NETWORK_TRANSPORT",
    "SCOPE",
    "Operation",
    "ended",
    "enabled",
    "operation",
    "server_address",
    "started",
    "worker_restarted",
]
