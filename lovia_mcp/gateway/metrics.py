"""The gateway's Prometheus metrics, in the text exposition format (version 0.0.4).

Owned code rather than ``prometheus_client``: a handful of counters, one
histogram and a few gauges read at scrape time do not justify a dependency.
Every name starts ``lovia_mcp_``:

- ``lovia_mcp_calls_total{server,tool,outcome}``: ``tool`` is a tool the
  server lists (a name outside it is refused before the call; should one
  reach a call, it is :data:`UNKNOWN_TOOL`), so the series are bounded by
  the servers' listings, never by clients;
  outcome ``ok``,
  ``tool_error`` (the server's ``isError``), ``error`` (the call failed:
  crash, limit, circuit...), ``timeout``, ``refused`` (no session slot, or
  the gateway is draining), ``cancelled`` (the client went away mid-call),
  ``denied`` (a tool the principal may not call); with ``--metrics-principal``
  a ``principal`` label too (the token file's names: bounded by the operator);
- ``lovia_mcp_call_duration_seconds{server}``: a histogram of call latency;
- ``lovia_mcp_call_cpu_seconds{server,tool}`` and
  ``lovia_mcp_call_memory_peak_bytes{server,tool}``: histograms of what the
  server's tree used during each call answered (CPU seconds, peak memory;
  a call beside another on the same server counts the server's figures
  over its window); ``lovia_mcp_egress_bytes_total{server,host}`` and
  ``lovia_mcp_egress_connections_total{server,host}``: traffic through the
  sandbox's allowlist proxy during calls, by destination host (at most
  :data:`EGRESS_HOSTS` hosts per server, the rest as :data:`OTHER_HOST`);
- ``lovia_mcp_kills_total{server,reason}``: a call that ended with its
  server tree killed or gone (``timeout``, ``limit``, ``server_exited``,
  ``worker_died``, ``protocol``);
- ``lovia_mcp_sandbox_denials_total{server,tool,kind}``: refusals by the
  sandbox during calls (``kind``: ``allowlist``, ``internal_address``,
  ``network_off``); a refusal while several calls were in flight on the
  server counts for each of them;
- ``lovia_mcp_share_refusals_total{endpoint,cap}``: requests refused because
  their principal held its share of a cap (``cap``: ``sessions``,
  ``listen_streams``, ``server_slots``); with ``--metrics-principal`` a
  ``principal`` label too;
- ``lovia_mcp_restarts_total{server}``, ``lovia_mcp_server_memory_bytes{server}``,
  ``lovia_mcp_server_processes{server}``, ``lovia_mcp_sessions{server}``,
  ``lovia_mcp_calls_in_flight``, ``lovia_mcp_up{server}`` and
  ``lovia_mcp_circuit_open{server}`` (connections failing fast after too
  many restarts): read from the servers' stats at scrape time;
  ``lovia_mcp_requests_waiting``: requests waiting for their servers to
  open (before ready).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from typing import Final

from lovia_mcp_worker.wire.messages import CallUsage
from lovia_mcp_worker.wire.refusals import DENIAL_KINDS

# Latency buckets (seconds): from a raw server's sub-millisecond echo to a
# slow tool's half minute.
BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
# Buckets of a call's CPU time (seconds): a small call's tenth of a
# millisecond to a minute of work.
CPU_BUCKETS: Final = (0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Buckets of a call's peak memory (bytes): 1 MiB to 16 GiB, by powers of four.
MEMORY_BUCKETS: Final = tuple(float(1 << n) for n in range(20, 35, 2))
# Destination hosts labelled per server: a wildcard in a sandbox's
# allowlist lets a server name any number of hosts, and each would be a series.
EGRESS_HOSTS: Final = 50
# The ``host`` label of every host past :data:`EGRESS_HOSTS`.
OTHER_HOST: Final = "<other>"
# The ``tool`` label of a call to a name its server does not list.
UNKNOWN_TOOL: Final = "<unknown>"
# Failure kinds that mean the server's tree was killed or went away mid-call.
KILL_KINDS: Final = frozenset({"timeout", "limit", "server_exited", "worker_died", "protocol"})

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Histogram:
    """One histogram family: cumulative buckets per label set."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.help = help_text
        self.buckets = buckets
        self._counts: dict[Labels, list[int]] = {}
        self._sum: defaultdict[Labels, float] = defaultdict(float)

    def observe(self, labels: Labels, value: float) -> None:
        counts = self._counts.get(labels)
        if counts is None:
            counts = self._counts[labels] = [0] * (len(self.buckets) + 1)
        counts[bisect.bisect_left(self.buckets, value)] += 1
        self._sum[labels] += value

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {self.help}")
        out.append(f"# TYPE {self.name} histogram")
        for labels, counts in sorted(self._counts.items()):
            running = 0
            for bound, n in zip(self.buckets, counts):
                running += n
                le = 'le="%g"' % bound
                out.append(f"{self.name}_bucket{_labels(labels, le)} {running}")
            total = running + counts[-1]
            inf = 'le="+Inf"'
            out.append(f"{self.name}_bucket{_labels(labels, inf)} {total}")
            out.append(f"{self.name}_sum{_labels(labels)} {self._sum[labels]:g}")
            out.append(f"{self.name}_count{_labels(labels)} {total}")


class Metrics:
    """Counters and histograms the gateway updates as calls end."""

    def __init__(self) -> None:
        self.calls: defaultdict[Labels, int] = defaultdict(int)
        self.kills: defaultdict[Labels, int] = defaultdict(int)
        self.cpu = Histogram(
            "lovia_mcp_call_cpu_seconds", "CPU seconds the server's tree used during a call.", CPU_BUCKETS
        )
        self.memory = Histogram(
            "lovia_mcp_call_memory_peak_bytes", "Peak memory of the server's tree during a call.", MEMORY_BUCKETS
        )
        self.egress_bytes: defaultdict[Labels, int] = defaultdict(int)
        self.egress_connections: defaultdict[Labels, int] = defaultdict(int)
        self._hosts: defaultdict[str, set[str]] = defaultdict(set)
        self.denials: defaultdict[Labels, int] = defaultdict(int)
        self.share_refusals: defaultdict[Labels, int] = defaultdict(int)
        self._hist: dict[str, list[int]] = {}
        self._sum: defaultdict[str, float] = defaultdict(float)
        self._count: defaultdict[str, int] = defaultdict(int)

    def call(
        self,
        server: str,
        tool: str,
        outcome: str,
        seconds: float,
        kind: str | None = None,
        principal: str | None = None,
    ) -> None:
        """Count one call; ``principal`` labels the count when given (the operator's ``--metrics-principal``)."""
        labels: Labels = (("server", server), ("tool", tool), ("outcome", outcome))
        self.calls[labels if principal is None else (("principal", principal), *labels)] += 1
        buckets = self._hist.setdefault(server, [0] * len(BUCKETS))
        i = bisect.bisect_left(BUCKETS, seconds)
        if i < len(buckets):
            buckets[i] += 1
        self._sum[server] += seconds
        self._count[server] += 1
        if kind in KILL_KINDS:
            self.kills[(("server", server), ("reason", kind or ""))] += 1

    def denied(self, server: str, tool: str, principal: str | None = None) -> None:
        """Count a call refused by the access rules (no latency: it never started)."""
        labels: Labels = (("server", server), ("tool", tool), ("outcome", "denied"))
        self.calls[labels if principal is None else (("principal", principal), *labels)] += 1

    def usage(self, server: str, tool: str, usage: CallUsage) -> None:
        """What a call's server tree used (the call was answered)."""
        labels: Labels = (("server", server), ("tool", tool))
        if usage.cpu_time is not None:
            self.cpu.observe(labels, usage.cpu_time)
        if usage.memory_peak is not None:
            self.memory.observe(labels, float(usage.memory_peak))
        for e in usage.egress:
            hosts = self._hosts[server]
            host = e.host
            if host not in hosts:
                if len(hosts) >= EGRESS_HOSTS:
                    host = OTHER_HOST
                else:
                    hosts.add(host)
            key: Labels = (("server", server), ("host", host))
            self.egress_bytes[key] += e.bytes
            self.egress_connections[key] += e.connections

    def sandbox_denied(self, server: str, tool: str, kind: str, count: int) -> None:
        """``count`` refusals of ``kind`` by the sandbox during a call to ``tool``.

        A kind the protocol does not name (the worker is on the untrusted
        side) counts as ``other``: the series stay bounded.
        """
        kind = kind if kind in DENIAL_KINDS else "other"
        self.denials[(("server", server), ("tool", tool), ("kind", kind))] += count

    def share_refused(self, endpoint: str, cap: str, principal: str | None = None) -> None:
        """A request refused because its principal held its share of ``cap`` on ``endpoint``."""
        labels: Labels = (("endpoint", endpoint), ("cap", cap))
        self.share_refusals[labels if principal is None else (("principal", principal), *labels)] += 1

    def render(self, gauges: Iterable[tuple[str, str, str, Labels, float]]) -> str:
        """The exposition text; ``gauges`` are (name, type, help, labels, value) read at scrape time."""
        out: list[str] = []
        self._family(
            out, "lovia_mcp_calls_total", "counter", "Tool calls by server, tool and outcome.", self.calls.items()
        )
        out.append("# HELP lovia_mcp_call_duration_seconds Tool call latency through the gateway.")
        out.append("# TYPE lovia_mcp_call_duration_seconds histogram")
        for server, buckets in sorted(self._hist.items()):
            base: Labels = (("server", server),)
            running = 0
            for bound, n in zip(BUCKETS, buckets):
                running += n
                le = 'le="%g"' % bound
                out.append(f"lovia_mcp_call_duration_seconds_bucket{_labels(base, le)} {running}")
            inf = 'le="+Inf"'
            out.append(f"lovia_mcp_call_duration_seconds_bucket{_labels(base, inf)} {self._count[server]}")
            out.append(f"lovia_mcp_call_duration_seconds_sum{_labels(base)} {self._sum[server]:.6f}")
            out.append(f"lovia_mcp_call_duration_seconds_count{_labels(base)} {self._count[server]}")
        self._family(
            out,
            "lovia_mcp_kills_total",
            "counter",
            "Calls that ended with the server tree killed or gone, by reason.",
            self.kills.items(),
        )
        self.cpu.render(out)
        self.memory.render(out)
        self._family(
            out,
            "lovia_mcp_egress_bytes_total",
            "counter",
            "Bytes through the sandbox's allowlist proxy during calls, both ways, by destination host.",
            self.egress_bytes.items(),
        )
        self._family(
            out,
            "lovia_mcp_egress_connections_total",
            "counter",
            "Connections through the sandbox's allowlist proxy during calls, by destination host.",
            self.egress_connections.items(),
        )
        self._family(
            out,
            "lovia_mcp_sandbox_denials_total",
            "counter",
            "Refusals by the sandbox during tool calls, by server, tool and kind.",
            self.denials.items(),
        )
        self._family(
            out,
            "lovia_mcp_share_refusals_total",
            "counter",
            "Requests refused because their principal held its share of a cap, by endpoint and cap.",
            self.share_refusals.items(),
        )
        by_name: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        meta: dict[str, tuple[str, str]] = {}
        for name, kind, help_text, labels, value in gauges:
            by_name[name].append((labels, value))
            meta[name] = (kind, help_text)
        for name, samples in by_name.items():
            kind, help_text = meta[name]
            self._family(out, name, kind, help_text, samples)
        return "\n".join(out) + "\n"

    @staticmethod
    def _family(out: list[str], name: str, kind: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in sorted(samples):
            shown = f"{value:g}" if isinstance(value, float) and not value.is_integer() else f"{int(value)}"
            out.append(f"{name}{_labels(labels)} {shown}")


__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "CPU_BUCKETS",
    "EGRESS_HOSTS",
    "KILL_KINDS",
    "MEMORY_BUCKETS",
    "OTHER_HOST",
    "UNKNOWN_TOOL",
    "Histogram",
    "Labels",
    "Metrics",
]
