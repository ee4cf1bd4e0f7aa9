"""``sandbox=`` values into :class:`~lovia_mcp_worker.protocol.Sandbox`, checked on the agent side.

Accepted: ``None`` (no sandbox), ``True`` (``Sandbox()``), a ``Sandbox``, or
a dict: either ``Sandbox``'s own fields (``network``, ``writable``,
``hidden``) or the ``sandbox`` block of the configuration files users
already have (VS Code's ``.vscode/mcp.json``)::

    {"filesystem": {"allowWrite": [...], "denyRead": [...]},
     "network": {"allowedDomains": [...]}}

``allowWrite`` becomes ``writable``, ``denyRead`` is hidden on top of the
default secret stores, ``allowedDomains`` becomes the network allowlist (an
empty one: no network). Paths are made absolute here, against the agent's
cwd at open time, with ``~`` expanded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lovia.exceptions import UserError

from lovia_mcp_worker.protocol import DEFAULT_HIDDEN, Sandbox

_OWN_KEYS = {"network", "writable", "hidden"}
_VSCODE_KEYS = {"filesystem", "network", "enabled"}
_EXAMPLE = "Sandbox(network=False, writable=['/srv/data'])"


def _strings(value: object, field: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
        isinstance(v, str) and v for v in value
    ):
        raise UserError(f"sandbox {field} must be a list of non-empty strings, got {value!r}", hint=_EXAMPLE)
    return list(value)


def _from_vscode(block: Mapping[str, Any]) -> Sandbox:
    unknown = set(block) - _VSCODE_KEYS
    if unknown:
        raise UserError(f"unknown sandbox keys: {', '.join(sorted(unknown))}",
                        hint="Use 'filesystem' (allowWrite, denyRead) and 'network' (allowedDomains).")
    fs = block.get("filesystem") or {}
    net = block.get("network") or {}
    if not isinstance(fs, Mapping) or not isinstance(net, Mapping):
        raise UserError("sandbox 'filesystem' and 'network' must be objects",
                        hint='"sandbox": {"filesystem": {"allowWrite": ["."]}, "network": {"allowedDomains": []}}')
    for name, part, known in (("filesystem", fs, {"allowWrite", "denyRead"}), ("network", net, {"allowedDomains"})):
        extra = set(part) - known
        if extra:
            raise UserError(f"unknown sandbox {name} keys: {', '.join(sorted(extra))}",
                            hint=f"Known: {', '.join(sorted(known))}.")
    domains = _strings(net.get("allowedDomains", []), "network.allowedDomains")
    deny = _strings(fs.get("denyRead", []), "filesystem.denyRead")
    return Sandbox(
        network=domains or False,
        writable=_strings(fs.get("allowWrite", []), "filesystem.allowWrite"),
        hidden=[*DEFAULT_HIDDEN, *deny] if deny else None,
    )


def coerce(value: object) -> Sandbox | None:
    """The Sandbox a ``sandbox=`` value stands for (raises UserError with a hint)."""
    if value is None or value is False:
        return None
    if value is True:
        return Sandbox()
    if isinstance(value, Mapping):
        if set(value) <= _OWN_KEYS and not isinstance(value.get("network"), Mapping):
            value = Sandbox(**value)
        else:
            if value.get("enabled") is False:
                return None
            value = _from_vscode(value)
    if not isinstance(value, Sandbox):
        raise UserError(f"sandbox must be a Sandbox(...), True, or a dict, got {type(value).__name__}",
                        hint=f"from lovia_mcp import Sandbox; sandbox={_EXAMPLE}")
    network = value.network
    if not isinstance(network, bool):
        network = _strings(network, "network")
    return Sandbox(
        network=network,
        writable=_strings(value.writable, "writable") if value.writable else [],
        hidden=None if value.hidden is None else (_strings(value.hidden, "hidden") if value.hidden else []),
    )


def resolved(box: Sandbox, cwd: str) -> Sandbox:
    """Paths absolute against ``cwd`` (the agent's at open time), ``~`` expanded."""

    def fix(path: str) -> str:
        return os.path.abspath(os.path.join(cwd, os.path.expanduser(path)))

    return Sandbox(
        network=box.network,
        writable=[fix(p) for p in box.writable],
        hidden=None if box.hidden is None else [p if p.startswith("~") else fix(p) for p in box.hidden],
    )


__all__ = ["coerce", "resolved"]
