"""Server configs as descriptions: frozen, keyword-only, checked when made, and never opened here.

A config says what to run and how (its fields), and what its worker is
told (:meth:`ServerConfig._spec`); it holds no state, so one config serves
concurrent runs. Opening is the layer above: the public classes
(:mod:`lovia_mcp.opening.servers`: ``MCPServerStdio``...) are these descriptions
with ``open()`` and ``session()``, and the connection and the spares are
written against the descriptions, so nothing here imports them.
Keyword-only on purpose: ``MCPServerStdio("npx")`` would otherwise silently
set a name instead of a command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import msgspec
from lovia.exceptions import UserError
from lovia.tools.base import ToolResultRenderer
from lovia_mcp_worker.wire.confinement import Limits, Sandbox
from lovia_mcp_worker.wire.messages import (
    DEFAULT_KILL_GRACE,
    DEFAULT_OPEN_TIMEOUT,
    ON_TIMEOUT_CANCEL,
    ON_TIMEOUT_KILL,
    ON_TIMEOUTS,
    OnTimeout,
    ServerSpec,
)
from lovia_mcp_worker.wire.messages import (
    MCP_PROTOCOL_MODES as PROTOCOL_MODES,
)

from ..lock import packages
from ..lock.lockfile import Locked
from ..lock.pins import PIN_POLICIES, PinPolicy
from . import _sandbox
from ._isolation import ISOLATIONS, Isolation
from .annotations import AUTO_RECONNECTS, Approval, AutoReconnect

# Crash-loop circuit: this many restarts within the window open it.
DEFAULT_RESTART_LIMIT: Final = 5
DEFAULT_RESTART_WINDOW: Final = 60.0
# How long a warm spare nobody took lives: long enough to bridge the gap
# between the runs of a busy agent, short enough that an agent gone quiet
# does not keep a worker and a server tree for nothing.
DEFAULT_SPARE_IDLE: Final = 300.0

# Spares per agent process, over every config and event loop: each is a
# worker (about 11 MB unique memory) and a live server tree, so a typo like
# spares=100 must not start a hundred of them.
MAX_SPARES: Final = 16


def _names(value: Sequence[str] | None, field: str) -> None:
    if value is None:
        return
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise UserError(
            f"{field} must be a list of names, got {value!r}",
            hint=f"Write {field}=[{value!r}]" if isinstance(value, str) else f"Pass {field} as a list of strings.",
        )


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """Options shared by every transport (see the table in docs/options.md)."""

    # The transport a concrete config describes; the shared base has none.
    _transport: ClassVar[str | None] = None

    name: str | None = None
    include_tools: list[str] | None = None
    exclude_tools: list[str] | None = None
    needs_approval: Approval = False
    retries: int | None = None
    timeout: float | None = None
    max_output_chars: int | None = None
    result_renderer: ToolResultRenderer | None = None
    auto_reconnect: AutoReconnect = True
    close_after_run: bool = True
    defer: bool = False
    isolation: Isolation | None = None
    parallel: bool = True
    limits: Limits | None = None
    open_timeout: float = DEFAULT_OPEN_TIMEOUT
    inherit_env: list[str] | None = None
    on_timeout: OnTimeout = ON_TIMEOUT_KILL
    kill_grace: float = DEFAULT_KILL_GRACE
    restart_limit: int = DEFAULT_RESTART_LIMIT
    restart_window: float = DEFAULT_RESTART_WINDOW
    trust_annotations: bool = False
    spares: int = 0
    spare_idle: float = DEFAULT_SPARE_IDLE
    # The MCP protocol negotiation (docs/tracing.md): "auto" probes
    # server/discover (2026-07-28) and falls back to initialize; "legacy"
    # is the initialize handshake only; a version pins it.
    protocol: str = "auto"
    # Tool pinning (docs/pinning.md): "quarantine" (the default where a lock
    # exists), "warn" or "off"; `locked` is the server's lock, set by
    # load_servers() from the lock file, never written in a config file.
    pin: PinPolicy | None = None
    locked: Locked | None = None
    # Set by `lovia-mcp serve`, never in a config file: the connection relays
    # what a server says besides tools (MCPConnection.relay, .on_notification)
    # to the gateway's clients. The library plugin uses tools only.
    relay: bool = False

    def __post_init__(self) -> None:
        if self._transport is None:
            raise UserError(
                f"{type(self).__name__} is the shared base of the server configs.",
                hint="Use MCPServerStdio(command=...) or MCPServerStreamableHTTP(url=...).",
            )
        if self.isolation is not None and self.isolation not in ISOLATIONS:
            raise UserError(
                f"unknown isolation {self.isolation!r}",
                hint="Use isolation='process' (a worker per connection) or 'none' (in the agent process).",
            )
        if self.auto_reconnect not in AUTO_RECONNECTS or not isinstance(self.auto_reconnect, (bool, str)):
            raise UserError(
                f"unknown auto_reconnect {self.auto_reconnect!r}",
                hint="Use True (retry a lost call once), False (never), or 'safe' "
                "(only tools marked read-only or idempotent).",
            )
        if isinstance(self.needs_approval, str) and self.needs_approval != "destructive":
            raise UserError(
                f"unknown needs_approval {self.needs_approval!r}",
                hint="Use True, False, a predicate (args, ctx) -> bool, or 'destructive' "
                "(approval for every tool not marked read-only, trusted with trust_annotations=True).",
            )
        if not isinstance(self.trust_annotations, bool):
            raise UserError(
                f"trust_annotations must be True or False, got {self.trust_annotations!r}",
                hint="trust_annotations=True only for a server you trust to describe its tools.",
            )
        if self.on_timeout not in ON_TIMEOUTS:
            raise UserError(
                f"unknown on_timeout {self.on_timeout!r}",
                hint=f"Use {ON_TIMEOUT_KILL!r} (cancel, then kill the server tree) or {ON_TIMEOUT_CANCEL!r} "
                "(notification only).",
            )
        for field, value in (("timeout", self.timeout), ("open_timeout", self.open_timeout)):
            if value is not None and not value > 0:
                raise UserError(
                    f"{field} must be a positive number of seconds, got {value!r}", hint=f"Pass {field}=30, say."
                )
        if self.kill_grace < 0 or self.restart_limit < 1 or self.restart_window <= 0:
            raise UserError(
                "kill_grace must be >= 0, restart_limit >= 1 and restart_window > 0",
                hint="Keep the defaults unless you have a reason.",
            )
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise UserError(
                f"limits must be a Limits(...), got {type(self.limits).__name__}",
                hint="from lovia_mcp import Limits; limits=Limits(memory_mb=512)",
            )
        if self.limits is not None:
            for field in ("memory_mb", "cpu_seconds", "max_processes", "max_open_files", "max_result_bytes"):
                value = getattr(self.limits, field)
                if value is not None and (isinstance(value, bool) or not value > 0):
                    raise UserError(
                        f"Limits({field}={value!r}) must be a positive number",
                        hint="Use a positive byte count (the default is 32 MiB)."
                        if field == "max_result_bytes"
                        else f"Leave {field} out (None) for no limit.",
                    )
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise UserError(f"name must be a non-empty string, got {self.name!r}", hint="name='github', say.")
        if isinstance(self.spares, bool) or not isinstance(self.spares, int) or self.spares < 0:
            raise UserError(
                f"spares must be a whole number >= 0, got {self.spares!r}",
                hint="spares=1 keeps one opened server ready for the next run; 0 (the default) keeps none.",
            )
        if self.spares > MAX_SPARES:
            raise UserError(
                f"spares={self.spares} is over the cap of {MAX_SPARES} spares per agent process",
                hint="One or two spares cover a run starting while another one opens; use fewer.",
            )
        if (
            isinstance(self.spare_idle, bool)
            or not isinstance(self.spare_idle, (int, float))
            or not self.spare_idle > 0
        ):
            raise UserError(
                f"spare_idle must be a positive number of seconds, got {self.spare_idle!r}",
                hint=f"Keep the default ({DEFAULT_SPARE_IDLE:g} s) or pass spare_idle=60, say.",
            )
        if self.protocol not in PROTOCOL_MODES:
            raise UserError(
                f"unknown protocol {self.protocol!r}",
                hint=f"Use 'auto' (the default), 'legacy', or a version to pin: {', '.join(PROTOCOL_MODES[2:])}.",
            )
        if self.pin is not None and self.pin not in PIN_POLICIES:
            raise UserError(
                f"unknown pin {self.pin!r}",
                hint="Use 'quarantine' (withhold tools that differ from the lock), 'warn' (offer them, "
                "with a warning) or 'off'.",
            )
        if self.locked is not None and not isinstance(self.locked, Locked):
            raise UserError(
                f"locked must be the server's lock, got {type(self.locked).__name__}",
                hint="Let load_servers() or MCP.from_config() read the lock file (lock= names another).",
            )
        _names(self.include_tools, "include_tools")
        _names(self.exclude_tools, "exclude_tools")
        _names(self.inherit_env, "inherit_env")

    # -- the worker's view --------------------------------------------------- #
    def _spec(self) -> ServerSpec:
        raise NotImplementedError

    def _label(self) -> str:
        raise NotImplementedError

    def _common(self) -> dict[str, Any]:
        return {
            "name": self.name or self._label(),
            "limits": self.limits or Limits(),
            "open_timeout": float(self.open_timeout),
            "kill_grace": float(self.kill_grace),
            "on_timeout": self.on_timeout,
            "protocol": self.protocol,
            "relay": self.relay,
        }

    def _env(self, explicit: dict[str, str] | None) -> dict[str, str]:
        env: dict[str, str] = {}
        for key in self.inherit_env or ():
            value = os.environ.get(key)
            if value is not None:
                env[key] = value
        env.update(explicit or {})
        return env


@dataclass(frozen=True, kw_only=True)
class StdioConfig(ServerConfig):
    """Launch a local MCP server and speak MCP over its stdin/stdout."""

    _transport: ClassVar[str | None] = "stdio"

    command: str
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    sandbox: Sandbox | bool | dict[str, Any] | None = None
    # The config file this server was loaded from and its lock (absolute
    # paths), kept read-only in its sandbox so that it cannot rewrite what
    # starts it next; set by load_servers(), never written in a config file.
    config_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        # Normalised once: a dict (VS Code's "sandbox" block) or True becomes a Sandbox.
        object.__setattr__(self, "sandbox", _sandbox.coerce(self.sandbox))
        if not isinstance(self.command, str) or not self.command.strip():
            raise UserError(
                f"command must be a non-empty string, got {self.command!r}",
                hint="MCPServerStdio(command='uvx', args=['mcp-server-time'])",
            )
        if self.args is not None and (isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args)):
            raise UserError(
                f"args must be a list of strings, got {self.args!r}",
                hint="Split the arguments: args=['--root', '/tmp'], not a single string.",
            )
        if self.env is not None and not (
            isinstance(self.env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items())
        ):
            raise UserError("env must map names to string values", hint="env={'API_URL': 'http://...'}")
        if not isinstance(self.config_files, tuple) or not all(
            isinstance(p, str) and os.path.isabs(p) for p in self.config_files
        ):
            raise UserError(
                f"config_files must be a tuple of absolute paths, got {self.config_files!r}",
                hint="Leave it out: load_servers() sets it to the config file a server came from and its lock.",
            )

    def _label(self) -> str:
        return os.path.basename(self.command)

    def _guarded(self) -> Sandbox:
        """The sandbox, with this server's config file and lock added to ``read_only``.

        A locked package server also gets the tree it runs from added to
        ``readable``: its launch names no file of it as a script (Python
        runs ``-c``), so a backend that grants only what the command needs
        (Landlock) would not know it.
        """
        box = self.sandbox
        assert isinstance(box, Sandbox)
        added = [p for p in self.config_files if p not in box.read_only]
        if added:
            box = msgspec.structs.replace(box, read_only=[*box.read_only, *added])
        package = None if self.locked is None or self.locked.entry is None else self.locked.entry.package
        if package is not None:
            tree = str(packages.covered(packages.entry_dir(package), package.ecosystem))
            if tree not in box.readable:
                box = msgspec.structs.replace(box, readable=[*box.readable, tree])
        return box

    def _spec(self) -> ServerSpec:
        # Absolute and fixed here, at open time: the worker's own cwd is the
        # forkserver's (whatever it was when it started), and lovia's plugin
        # starts a server in the agent's cwd, relative cwd= included.
        try:
            cwd = os.path.abspath(os.getcwd() if self.cwd is None else os.fspath(self.cwd))
        except FileNotFoundError:
            raise UserError(
                "the agent's working directory no longer exists, so the server has none to start in",
                hint="Pass cwd= an existing absolute directory, or change to one before opening.",
            ) from None
        return ServerSpec(
            transport="stdio",
            command=self.command,
            args=list(self.args or []),
            env=self._env(self.env),
            cwd=cwd,
            sandbox=None if not isinstance(self.sandbox, Sandbox) else _sandbox.resolved(self._guarded(), cwd),
            **self._common(),
        )


@dataclass(frozen=True, kw_only=True)
class StreamableHTTPConfig(ServerConfig):
    """Connect to a streamable-HTTP MCP endpoint (from the worker, in process mode).

    Process limits do not apply (there is no local server tree); timeouts,
    crash containment of the client side and ``max_result_bytes`` do.
    """

    _transport: ClassVar[str | None] = "http"

    url: str
    headers: dict[str, str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise UserError(
                f"url must be an http(s) URL, got {self.url!r}",
                hint="MCPServerStreamableHTTP(url='http://127.0.0.1:8000/mcp')",
            )

    def _label(self) -> str:
        return self.url

    def _spec(self) -> ServerSpec:
        return ServerSpec(
            transport="http",
            url=self.url,
            headers=dict(self.headers or {}),
            **self._common(),
        )


__all__ = [
    "DEFAULT_SPARE_IDLE",
    "MAX_SPARES",
    "Isolation",
    "Limits",
    "Sandbox",
    "ServerConfig",
    "StdioConfig",
    "StreamableHTTPConfig",
]
