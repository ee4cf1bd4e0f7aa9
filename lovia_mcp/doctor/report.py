"""The whole doctor report: the kernel's facts, each backend's probes, the cgroups, each configured server.

:func:`diagnose` builds a :class:`Report`; :meth:`Report.as_json` is the
``--json`` shape, :meth:`Report.failures` what makes the command exit 1:

- a backend reported available whose box did not start, or let a probe
  escape, or whose probe broke;
- a configured server whose sandbox cannot be built here.

A backend that is not available is no failure by itself (``auto`` takes the
next one); a server whose sandbox no backend can build is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import lovia_mcp_worker.containment.machine as machine
import lovia_mcp_worker.sandbox.registry as registry
from lovia_mcp_worker.sandbox.backend import SandboxError
from lovia_mcp_worker.wire.confinement import Limits, Sandbox

from ..config._isolation import Isolation
from ..opening.servers import MCPServer, MCPServerStdio
from .suite import BackendReport, Targets, backend_names, run_backend

JSON = dict[str, object]
# The limits a server config can set on its tree, as the report names them.
LIMIT_OPTIONS = ("memory_mb", "cpu_seconds", "max_processes", "max_open_files")


@dataclass
class ServerPlan:
    """What one configured server would get here: its box's backend, and how its limits are enforced."""

    name: str
    transport: str
    sandbox: str | None = None  # the backend, None for no sandbox
    error: str | None = None  # its sandbox cannot be built here
    limits: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> JSON:
        return dataclasses.asdict(self) | {"ok": self.error is None}


def plan_server(server: MCPServer, enforcement: dict[str, str]) -> ServerPlan:
    name = server.name or "server"
    if not isinstance(server, MCPServerStdio):
        return ServerPlan(name=name, transport="http")
    plan = ServerPlan(name=name, transport="stdio")
    box = server.sandbox
    if isinstance(box, Sandbox):
        try:
            plan.sandbox = registry.pick(box).name
        except SandboxError as exc:
            plan.error = f"{exc} ({exc.hint})"
    limits = server.limits or Limits()
    for option in LIMIT_OPTIONS:
        if getattr(limits, option) is not None:
            plan.limits[option] = enforcement[option]
    return plan


@dataclass
class Report:
    kernel: JSON
    cgroup: JSON
    backends: dict[str, BackendReport]
    servers: dict[str, ServerPlan] | None = None

    def failures(self) -> list[str]:
        """What failed, one line each; empty when the command exits 0."""
        out: list[str] = []
        for name, backend in self.backends.items():
            if not backend.available:
                continue
            if backend.error is not None:
                out.append(f"backend {name}: {backend.error}")
            for probe, result in backend.probes.items():
                if result.outcome == "escaped":
                    out.append(f"backend {name}: probe {probe} escaped the box ({result.reason})")
                elif result.broken:
                    out.append(f"backend {name}: probe {probe} could not run ({result.reason})")
        for plan in (self.servers or {}).values():
            if plan.error is not None:
                out.append(f"server {plan.name!r}: its sandbox cannot start here: {plan.error}")
        return out

    def as_json(self) -> JSON:
        return {
            "kernel": self.kernel,
            "backends": {name: b.as_json() for name, b in self.backends.items()},
            "cgroup": self.cgroup,
            "servers": None if self.servers is None else {n: p.as_json() for n, p in self.servers.items()},
            "ok": not self.failures(),
            "failures": self.failures(),
        }


async def diagnose(
    servers: list[MCPServer] | None = None,
    *,
    backends: list[str] | None = None,
    isolation: Isolation | None = None,
) -> Report:
    """Everything :mod:`lovia_mcp.doctor` reports, the probes run in each backend's box (one at a time)."""
    names = backends if backends is not None else backend_names()
    cgroup = machine.cgroups()
    report = Report(kernel=machine.facts(names), cgroup=cgroup, backends={})
    targets = Targets()
    try:
        for name in names:
            report.backends[name] = await run_backend(name, targets, isolation=isolation)
    finally:
        targets.close()
    if servers is not None:
        enforcement = cgroup["limits"]
        assert isinstance(enforcement, dict)
        report.servers = {}
        for server in servers:
            plan = plan_server(server, enforcement)
            report.servers[plan.name] = plan
    return report


__all__ = ["LIMIT_OPTIONS", "Report", "ServerPlan", "diagnose", "plan_server"]
