"""``lovia-mcp doctor [--config FILE] [--json]``: what lovia-mcp can guarantee on this machine.

The report is :mod:`lovia_mcp.doctor`'s; this module reads the command
line, prints the report (text, or ``--json`` for CI) and turns it into the
exit status: 0 when every available backend held every probe and every
configured server's sandbox can start, 1 otherwise (each failure named on
stderr), 2 for a config file that cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Final

import lovia_mcp_worker.sandbox.registry as registry
from lovia.exceptions import UserError

from ..doctor.report import Report, diagnose
from ..doctor.suite import DESCRIPTIONS
from ..opening.config_file.loader import load_servers
from ..opening.servers import MCPServer
from ._args import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, PROG
from ._terminal import terminal_block, terminal_json

EXIT_HELD: Final = 0
EXIT_NOT_HELD: Final = 1
EXIT_USAGE: Final = 2


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


# Where a fact's text starts: after its label, as ``  user namespaces  allowed``.
LABEL_WIDTH: Final = 17


def _kernel_lines(report: Report) -> list[str]:
    k, cg = report.kernel, report.cgroup
    sc = k["seccomp"]
    assert isinstance(sc, dict)
    rows: list[tuple[str, str]] = []
    for name in report.backends:  # each backend words its own facts (user namespaces, the Landlock ABI...)
        rows += registry.get(name).describe(k)
    installs = "filters can be installed" if sc["available"] else f"no filter can be installed: {sc['reason']}"
    rows.append(
        (
            "seccomp",
            f"{installs}; this process: {sc['this_process']} "
            f"({sc['filters_on_this_process']} filters), no_new_privs {_yes(sc['no_new_privs'])}",
        )
    )
    if cg["usable"]:
        rows.append(("cgroup", f"{cg['version']}; a cgroup per generation in {cg['where']}"))
        rows.append(("", f"controllers: {', '.join(cg['controllers']) or 'none'}"))  # type: ignore[arg-type]
    else:
        rows.append(("cgroup", f"{cg['version'] or 'none mounted'}; no cgroup per generation: {cg['reason']}"))
    enforced = ", ".join(f"{o} {how}" for o, how in cg["limits"].items())  # type: ignore[attr-defined]
    rows.append(("", f"limits: {enforced}"))
    head = f"kernel: Linux {k['release']} {k['machine']}, running as uid {k['euid']}"
    return [head, *(f"  {label:<{LABEL_WIDTH}}{text}" for label, text in rows)]


def _backend_lines(report: Report) -> list[str]:
    lines: list[str] = []
    for name, backend in report.backends.items():
        lines.append("")
        if not backend.available:
            lines.append(f"backend {name}: not available: {backend.reason}")
            continue
        state = "held every probe" if backend.held else "DID NOT HOLD"
        lines.append(f"backend {name}: available, {state}")
        if backend.error is not None:
            lines.append(f"  error: {backend.error}")
        width = max(map(len, DESCRIPTIONS))
        for probe, result in backend.probes.items():
            lines.append(f"  {result.outcome:<8} {probe:<{width}}  {DESCRIPTIONS[probe]}")
            lines.append(f"  {'':<8} {'':<{width}}  {result.reason}")
    return lines


def _server_lines(report: Report) -> list[str]:
    if report.servers is None:
        return []
    lines = ["", "servers:"]
    if not report.servers:
        lines.append("  none enabled")
    for plan in report.servers.values():
        if plan.transport == "http":
            lines.append(f"  {plan.name}: HTTP, no sandbox or limits here (the server runs elsewhere)")
            continue
        box = f"sandbox {plan.sandbox}" if plan.sandbox else "no sandbox"
        if plan.error is not None:
            box = f"sandbox CANNOT START: {plan.error}"
        limits = ", ".join(f"{o} {how}" for o, how in plan.limits.items()) or "none set"
        lines.append(f"  {plan.name}: {box}; limits: {limits}")
    return lines


def render(report: Report) -> str:
    """The report as the text the command prints."""
    lines = _kernel_lines(report) + _backend_lines(report) + _server_lines(report)
    failures = report.failures()
    lines.append("")
    lines.append(
        f"{len(failures)} failure(s): see below" if failures else "ok: every available backend held every probe"
    )
    return "\n".join(lines)


def status(report: Report) -> int:
    """The command's exit status for ``report``."""
    return EXIT_NOT_HELD if report.failures() else EXIT_HELD


def main(ns: argparse.Namespace) -> int:
    """The ``doctor`` subcommand."""
    servers: list[MCPServer] | None = None
    if ns.config is not None:
        try:
            servers = load_servers(ns.config)
        except UserError as exc:
            hint = f"\n  hint: {exc.hint}" if getattr(exc, "hint", None) else ""
            print(terminal_block(f"{PROG}: error: {exc}{hint}"), file=sys.stderr)
            return EXIT_USAGE
    try:
        report = asyncio.run(diagnose(servers))
        print(terminal_json(report.as_json()) if ns.json else terminal_block(render(report)))
        sys.stdout.flush()
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (| head): stop quietly; stdout to /dev/null so the exit's flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    failures = report.failures()
    for line in failures:
        print(terminal_block(f"{PROG}: doctor: {line}"), file=sys.stderr)
    return status(report)


__all__ = ["EXIT_HELD", "EXIT_NOT_HELD", "EXIT_USAGE", "main", "render", "status"]
