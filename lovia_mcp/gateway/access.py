"""What each principal may list and call: the config file's ``"gateway": {"access": ...}`` section.

::

    {"mcpServers": {...},
     "gateway": {"access": {
        "alice": ["*", "/metrics"],
        "ci":    ["search", "shell/read_*"]}}}

A principal's list holds rules, each one of:

- ``"server"``: every tool of that server;
- ``"server/tool-glob"``: that server's tools whose names match the glob
  (``fnmatch``: ``*``, ``?``, ``[...]``; case-sensitive);
- ``"*"``: every tool of every server;
- ``"/metrics"``: the ``/metrics`` endpoint (a scraper's principal needs no tool).

A principal sees, on ``/mcp`` and on the per-server endpoints, only the
tools its rules allow, and a server's endpoint only if a rule names the
server; everything else answers as if it did not exist (an unknown tool,
an unknown endpoint), so a principal learns nothing of what it may not use.
A principal the section does not name may use nothing.

Without the section every principal sees everything, ``/metrics`` included.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from lovia.exceptions import UserError

from ..opening.config_file.loader import GATEWAY_SECTION
from .options import read_config
from .principals import PRINCIPAL_NAME

# The top-level key of the config file that only ``lovia-mcp serve`` reads.
SECTION: Final = GATEWAY_SECTION
EVERYTHING: Final = "*"
METRICS: Final = "/metrics"
_EXAMPLE: Final = '"gateway": {"access": {"alice": ["*"], "ci": ["search", "shell/read_*"]}}'


class Access:
    """The rules of one access section, compiled; ``None`` rules (no section) allow everything."""

    def __init__(self, rules: Mapping[str, Iterable[str]] | None) -> None:
        self.restricted = rules is not None
        # principal -> server -> compiled tool globs (None: every tool of it).
        self._servers: dict[str, dict[str, list[re.Pattern[str]] | None]] = {}
        self._everything: set[str] = set()
        self._metrics: set[str] = set()
        for principal, items in (rules or {}).items():
            servers = self._servers.setdefault(principal, {})
            for rule in items:
                if rule == EVERYTHING:
                    self._everything.add(principal)
                elif rule == METRICS:
                    self._metrics.add(principal)
                else:
                    server, sep, glob = rule.partition("/")
                    if not sep:
                        servers[server] = None  # the whole server: its globs add nothing
                        continue
                    globs = servers.get(server, [])
                    if globs is not None:
                        globs.append(re.compile(fnmatch.translate(glob)))
                        servers[server] = globs

    def principals(self) -> list[str]:
        return sorted(self._servers)

    def sees(self, principal: str, server: str) -> bool:
        """True if a rule names ``server`` for ``principal``: it sees the server's endpoint."""
        return not self.restricted or principal in self._everything or server in self._servers.get(principal, {})

    def allows(self, principal: str, server: str, tool: str) -> bool:
        """True if ``principal`` may list and call ``server``'s tool ``tool``."""
        if not self.restricted or principal in self._everything:
            return True
        servers = self._servers.get(principal)
        if servers is None or server not in servers:
            return False
        globs = servers[server]
        return globs is None or any(g.match(tool) for g in globs)

    def metrics(self, principal: str) -> bool:
        """True if ``principal`` may read ``/metrics``."""
        return not self.restricted or principal in self._metrics


def access_options(source: str | Path | Mapping[str, Any], servers: Iterable[str]) -> Access:
    """The config's access section, checked against the configured ``servers``.

    Call after ``load_servers`` accepted the file: its shape is known good.
    """
    data, label = read_config(source)
    section = data.get(SECTION)
    if section is None:
        return Access(None)
    where = f"{label}: {SECTION!r}"
    if not isinstance(section, Mapping) or set(section) - {"access"}:
        raise UserError(
            f"{where} must be an object whose only key is 'access'",
            hint=f"Write {_EXAMPLE}.",
        )
    rules = section.get("access")
    if rules is None:
        return Access(None)
    if not isinstance(rules, Mapping):
        raise UserError(
            f"{where}: 'access' must be an object of principal -> list of rules, got {type(rules).__name__}",
            hint=f"Write {_EXAMPLE}.",
        )
    known = sorted(servers)
    for principal, items in rules.items():
        if not PRINCIPAL_NAME.fullmatch(principal):
            raise UserError(
                f"{where}: {principal[:80]!r} is not a principal name",
                hint="Use the names of the token file's `PRINCIPAL TOKEN` lines (letters, digits, _ . @ -).",
            )
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise UserError(
                f"{where}: principal {principal!r} must have a list of rules (strings)",
                hint=f'Write "{principal}": ["server", "server/tool-glob", "*", "/metrics"].',
            )
        for rule in items:
            if rule in (EVERYTHING, METRICS):
                continue
            server, sep, glob = rule.partition("/")
            if server not in known or (sep and not glob):
                raise UserError(
                    f"{where}: principal {principal!r} has the rule {rule!r}, which names no configured server",
                    hint=f'Rules are "server", "server/tool-glob", "*" or "/metrics"; servers: {", ".join(known)}.',
                )
    return Access({p: list(items) for p, items in rules.items()})


__all__ = ["EVERYTHING", "METRICS", "SECTION", "Access", "access_options"]
