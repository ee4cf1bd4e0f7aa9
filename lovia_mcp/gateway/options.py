"""The gateway's per-server options, read from the same config file as the servers.

Three keys of an entry mean something only to ``lovia-mcp serve`` (the
loader lets them through; ``check`` and the plugin ignore them)::

    {"mcpServers": {
        "time":  {"command": "uvx", "args": ["mcp-server-time"], "session": "shared"},
        "shell": {"command": "my-shell-server", "session": "per-session",
                  "max_sessions": 20, "idle": 300, "spares": 2}}}

- ``session``: ``"shared"`` (the default) serves every client's calls from
  one contained server; ``"per-session"`` gives each client session a server
  of its own, taken from warm spares (``spares``, at least one);
  ``"per-principal"`` gives each principal (:mod:`.principals`) one, which
  all its sessions and stateless requests share and no other principal's reach.
- ``max_sessions``: how many client sessions (per-principal: principals)
  may hold a server of their own at once; the next one gets a clear error.
  With several principals each may hold at most its share
  (:func:`.principals.share`).
- ``idle``: seconds after which a session's (principal's) server is closed
  when it has made no call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from lovia.exceptions import UserError

from ..opening.config_file.loader import strip_jsonc

SessionMode = Literal["shared", "per-session", "per-principal"]
SESSION_MODES: Final = ("shared", "per-session", "per-principal")

# Enough for a team's agents on one replica; past it a session waits for
# another to end rather than starting servers without bound.
DEFAULT_MAX_SESSIONS: Final = 16
# An agent run that pauses for a model turn keeps its server; one gone for
# ten minutes has most likely ended without saying so (no DELETE).
DEFAULT_IDLE: Final = 600.0

# The command's defaults (here, not in serve.py: the CLI's parser reads them
# without importing the SDK's server side).
DEFAULT_LISTEN: Final = "127.0.0.1:8765"
# Kubernetes gives a pod 30 s (terminationGracePeriodSeconds) between SIGTERM
# and SIGKILL; the drain takes most of it and leaves time to close servers.
DEFAULT_DRAIN: Final = 20.0
# The SDK's default cap on a request body; a tool's arguments rarely approach it.
DEFAULT_MAX_BODY: Final = 4 * 1024 * 1024
# Stateful MCP sessions per endpoint (the SDK answers 503 past it).
DEFAULT_MAX_HTTP_SESSIONS: Final = 1000
# A client sends its request head in one write; a slow link or proxy takes
# well under a second. Ten seconds is generous to them and keeps what a
# flood of unfinished heads holds short-lived (nginx waits 60 s, with no cap
# of its own on what that holds).
DEFAULT_HEAD_TIMEOUT: Final = 10.0
# Open HTTP connections at once (lower if the open-file limit asks it):
# enough for a thousand sessions each holding a GET stream and a call.
DEFAULT_MAX_CONNECTIONS: Final = 4096


@dataclass(frozen=True, kw_only=True)
class Served:
    """How the gateway serves one configured server."""

    session: SessionMode = "shared"
    max_sessions: int = DEFAULT_MAX_SESSIONS
    idle: float = DEFAULT_IDLE


def read_config(source: str | Path | Mapping[str, Any]) -> tuple[Any, str]:
    """The config's data, and how errors name it (its path, or ``config`` for a mapping).

    Call after ``load_servers`` accepted the file: its shape is known good.
    """
    if isinstance(source, Mapping):
        return source, "config"
    return json.loads(strip_jsonc(Path(source).expanduser().read_text(encoding="utf-8"))), str(source)


def served_options(source: str | Path | Mapping[str, Any]) -> dict[str, Served]:
    """Each entry's gateway options by server name (entries without any get the defaults).

    Call after ``load_servers`` accepted the file: its shape is known good.
    """
    data, label = read_config(source)
    entries = data.get("mcpServers", data.get("servers", {}))
    return {
        name: _served(f"{label}: server {name!r}", entry)
        for name, entry in entries.items()
        if isinstance(entry, Mapping)
    }


def _served(where: str, entry: Mapping[str, Any]) -> Served:
    session = entry.get("session", "shared")
    if session not in SESSION_MODES:
        raise UserError(
            f"{where}: unknown session {session!r}",
            hint='Use "shared" (one server for every client: stateless tools), '
            '"per-session" (a server for each client session) or "per-principal" '
            "(a server for each principal of the token file).",
        )
    max_sessions = entry.get("max_sessions", DEFAULT_MAX_SESSIONS)
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise UserError(
            f"{where}: max_sessions must be a whole number >= 1, got {max_sessions!r}",
            hint=f'"max_sessions": {DEFAULT_MAX_SESSIONS}, say.',
        )
    idle = entry.get("idle", DEFAULT_IDLE)
    if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not (math.isfinite(idle) and idle > 0):
        raise UserError(
            f"{where}: idle must be a positive number of seconds, got {idle!r}",
            hint=f'"idle": {DEFAULT_IDLE:g} closes a session\'s server after that long without a call.',
        )
    if session == "shared" and ("max_sessions" in entry or "idle" in entry):
        raise UserError(
            f"{where}: max_sessions and idle apply to per-session and per-principal servers only",
            hint='Add "session": "per-session" (or "per-principal"), or drop them.',
        )
    return Served(session=session, max_sessions=max_sessions, idle=float(idle))


__all__ = [
    "read_config",
    "DEFAULT_DRAIN",
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_IDLE",
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HTTP_SESSIONS",
    "DEFAULT_MAX_SESSIONS",
    "SESSION_MODES",
    "Served",
    "SessionMode",
    "served_options",
]
