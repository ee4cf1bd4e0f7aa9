"""Which servers a ``lovia-mcp`` command line names: a command after ``--``, ``--url``, or ``--config``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from typing import Any, Final

import msgspec

from ..config.server import Limits, Sandbox
from ..opening.config_file.loader import load_servers
from ..opening.servers import MCPServer, MCPServerStdio, MCPServerStreamableHTTP
from ._args import PROG, UsageError

# Longest server label (a command line) on the status line and in tables.
MAX_LABEL: Final = 60


def servers_from(ns: argparse.Namespace, command: list[str] | None) -> list[MCPServer]:
    """The server configs to open, in order (one unless ``--config``)."""
    if ns.config is not None:
        return _from_config(ns, command)
    if ns.lock is not None:
        raise UsageError(
            "--lock applies to --config only",
            hint="Name the config the lock belongs to: --config mcp.json --lock FILE.",
        )
    if ns.server:
        raise UsageError(
            "--server applies to --config only",
            hint="Name the servers of a config file: --config mcp.json --server NAME.",
        )
    return [_server(ns, command)]


def label(server: MCPServer) -> str:
    """How the command names a server to its user."""
    if server.name:
        return server.name
    if isinstance(server, MCPServerStdio):
        # "npx -y some-server" says more than "npx" while a first download runs.
        text = shlex.join([os.path.basename(server.command), *(server.args or [])])
        return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"
    return getattr(server, "url", "server")


def _sandbox(ns: argparse.Namespace) -> Sandbox | None:
    """The Sandbox the sandbox flags ask for, or None when none of them is given."""
    if not (ns.sandbox or ns.network or ns.writable or ns.sandbox_backend or ns.upstream_proxy or ns.no_proxy):
        return None
    return Sandbox(
        network=list(ns.network) or False,
        writable=list(ns.writable),
        backend=ns.sandbox_backend or "auto",
        upstream_proxy=ns.upstream_proxy,
        no_proxy=list(ns.no_proxy),
    )


def _limits(ns: argparse.Namespace, *, tree: bool) -> dict[str, Any]:
    """The ``Limits`` fields the flags set: with ``tree``, those on a started server's process tree too."""
    fields = ["max_result_bytes", *(("memory_mb", "cpu_seconds", "max_processes") if tree else ())]
    return {field: getattr(ns, field) for field in fields if getattr(ns, field) is not None}


def _open_timeout(ns: argparse.Namespace) -> float | None:
    if ns.open_timeout is not None:
        return float(ns.open_timeout)
    # tools and check do nothing but open: --timeout bounds exactly that.
    return float(ns.timeout) if ns.timeout is not None and ns.command in ("tools", "check") else None


def _from_config(ns: argparse.Namespace, command: list[str] | None) -> list[MCPServer]:
    clash = [
        flag
        for flag, used in (
            ("a command after '--'", command is not None),
            ("--url", ns.url is not None),
            ("--header", bool(ns.header)),
            ("--name", ns.name is not None),
            ("--cwd", ns.cwd is not None),
            ("--env", bool(ns.env)),
            ("--inherit-env", bool(ns.inherit_env)),
        )
        if used
    ]
    if clash:
        raise UsageError(
            f"{', '.join(clash)} cannot be combined with --config",
            hint="Set them in the file's entry (command, url, headers, cwd, env, inherit_env), or drop --config.",
        )
    # One call, one answer: a retry would run a failing tool twice. No
    # standby either: a command opens each server once, and a spare would
    # start the server a second time.
    overrides: dict[str, Any] = {"auto_reconnect": False, "spares": 0}
    for option, value in (
        ("isolation", ns.isolation),
        ("timeout", ns.timeout),
        ("open_timeout", _open_timeout(ns)),
        ("kill_grace", ns.kill_grace),
    ):
        if value is not None:
            overrides[option] = value
    # Only the entries --server names are read: another's unset variable is no error here.
    servers = load_servers(ns.config, lock=ns.lock, names=ns.server, **overrides)
    if not servers:
        raise UsageError(
            f"{ns.config}: every server in it is disabled", hint='Set "disabled": false on the one to use.'
        )
    if _limits(ns, tree=True):
        # On top of the entry's own limits, which keep what the flags do not set.
        servers = [
            dataclasses.replace(
                s,
                limits=msgspec.structs.replace(s.limits or Limits(), **_limits(ns, tree=isinstance(s, MCPServerStdio))),
            )
            for s in servers
        ]
    box = _sandbox(ns)
    if box is not None:
        # Replaces each command entry's own sandbox block: the flags say the whole box.
        servers = [dataclasses.replace(s, sandbox=box) if isinstance(s, MCPServerStdio) else s for s in servers]
    return servers


def _server(ns: argparse.Namespace, command: list[str] | None) -> MCPServer:
    have_command = bool(command)
    example = f"{PROG} {ns.command}{' ' + ns.tool if ns.command == 'call' else ''}"
    if command is not None and not command:
        raise UsageError(
            "no command after '--'", hint=f"Put the server's command after '--': {example} -- python server.py"
        )
    if not have_command and ns.url is None:
        raise UsageError(
            "no server given",
            hint=f"Put the server's command after '--' ({example} -- npx -y some-mcp-server), "
            "pass --url http://host/mcp, or --config mcp.json.",
        )
    if have_command and ns.url is not None:
        raise UsageError("both a command and --url given", hint="Pass one server: a command after '--', or --url.")

    given = _limits(ns, tree=True)
    common: dict[str, Any] = {
        "name": ns.name,
        "timeout": ns.timeout,
        "isolation": ns.isolation,
        "limits": Limits(**given) if given else None,
        # One call, one answer: a retry would run a failing tool twice.
        "auto_reconnect": False,
    }
    open_timeout = _open_timeout(ns)
    if open_timeout is not None:
        common["open_timeout"] = open_timeout
    if ns.kill_grace is not None:
        common["kill_grace"] = ns.kill_grace

    if ns.url is not None:
        local = [
            opt
            for opt, used in (
                ("--cwd", ns.cwd is not None),
                ("--env", bool(ns.env)),
                ("--inherit-env", bool(ns.inherit_env)),
                ("--memory-mb", ns.memory_mb is not None),
                ("--cpu-seconds", ns.cpu_seconds is not None),
                ("--max-processes", ns.max_processes is not None),
                ("--sandbox and its options", _sandbox(ns) is not None),
            )
            if used
        ]
        if local:
            raise UsageError(
                f"{', '.join(local)} apply to a server started from a command, not to --url",
                hint="Drop them, or start the server with a command after '--'.",
            )
        return MCPServerStreamableHTTP(url=ns.url, headers=dict(ns.header) or None, **common)
    if ns.header:
        raise UsageError("--header applies to --url only", hint="Pass environment variables with --env NAME=VALUE.")
    assert command
    return MCPServerStdio(
        command=command[0],
        args=command[1:],
        env=dict(ns.env) or None,
        inherit_env=list(ns.inherit_env) or None,
        cwd=ns.cwd,
        sandbox=_sandbox(ns),
        **common,
    )


__all__ = ["label", "servers_from"]
