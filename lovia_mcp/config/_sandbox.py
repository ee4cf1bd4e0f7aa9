"""``sandbox=`` values into :class:`~lovia_mcp_worker.wire.messages.Sandbox`, checked on the agent side.

Accepted: ``None`` (no sandbox), ``True`` (``Sandbox()``), a ``Sandbox``, or
a dict: either ``Sandbox``'s own fields (``network``, ``writable``,
``hidden``, ``backend``, ``read_only``, ``readable``, ``write_deny``) or the ``sandbox``
block of the configuration files users already have (VS Code's
``.vscode/mcp.json``)::

    {"filesystem": {"allowWrite": [...], "denyRead": [...], "denyWrite": [...]},
     "network": {"allowedDomains": [...], "deniedDomains": [...]},
     "backend": "auto"}

``allowWrite`` becomes ``writable``, ``denyRead`` is hidden on top of the
default secret stores, ``denyWrite`` becomes ``read_only``,
``allowedDomains`` becomes the network allowlist (an empty one: no
network). ``deniedDomains`` takes names out of it: a name listed in both is
dropped; a denied name that an allowed wildcard still matches is refused
(the proxy has allow rules only), with a hint to list the allowed names
instead. Paths are made absolute here, against the agent's cwd at open time,
with ``~`` expanded.

Then :func:`resolved` pins the server's cwd and its ``writable`` and
``readable`` paths (``Sandbox.pins``): each resolved, and identified by
device and inode, once per connection, here, because the agent builds a
connection's spec once and the worker keeps it for every server it starts
(a replaced worker included). A path is also resolved at most once per agent
process: the first resolution is kept, so a symlink that one connection's
server left in a path redirects no later connection (a per-run connection, a
gateway session); a later open finds the path changed and refuses it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lovia.exceptions import UserError
from lovia_mcp_worker.wire.confinement import DEFAULT_HIDDEN, PathPin, Sandbox

_OWN_KEYS = {
    "network",
    "writable",
    "hidden",
    "backend",
    "read_only",
    "readable",
    "write_deny",
    "upstream_proxy",
    "no_proxy",
}
_VSCODE_KEYS = {"filesystem", "network", "enabled", "backend"}
_EXAMPLE = "Sandbox(network=False, writable=['/srv/data'])"


def _strings(value: object, field: str) -> list[str]:
    if (
        isinstance(value, str)
        or not isinstance(value, (list, tuple))
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise UserError(f"sandbox {field} must be a list of non-empty strings, got {value!r}", hint=_EXAMPLE)
    return list(value)


def _from_vscode(block: Mapping[str, Any]) -> Sandbox:
    unknown = set(block) - _VSCODE_KEYS
    if unknown:
        raise UserError(
            f"unknown sandbox keys: {', '.join(sorted(unknown))}",
            hint="Use 'filesystem' (allowWrite, denyRead, denyWrite), 'network' "
            "(allowedDomains, deniedDomains) and 'backend'.",
        )
    fs = block.get("filesystem") or {}
    net = block.get("network") or {}
    if not isinstance(fs, Mapping) or not isinstance(net, Mapping):
        raise UserError(
            "sandbox 'filesystem' and 'network' must be objects",
            hint='"sandbox": {"filesystem": {"allowWrite": ["."]}, "network": {"allowedDomains": []}}',
        )
    for name, part, known in (
        ("filesystem", fs, {"allowWrite", "denyRead", "denyWrite"}),
        ("network", net, {"allowedDomains", "deniedDomains"}),
    ):
        extra = set(part) - known
        if extra:
            raise UserError(
                f"unknown sandbox {name} keys: {', '.join(sorted(extra))}", hint=f"Known: {', '.join(sorted(known))}."
            )
    domains = _allowed_minus_denied(
        _strings(net.get("allowedDomains", []), "network.allowedDomains"),
        _strings(net.get("deniedDomains", []), "network.deniedDomains"),
    )
    deny = _strings(fs.get("denyRead", []), "filesystem.denyRead")
    return Sandbox(
        network=domains or False,
        writable=_strings(fs.get("allowWrite", []), "filesystem.allowWrite"),
        hidden=[*DEFAULT_HIDDEN, *deny] if deny else None,
        read_only=_strings(fs.get("denyWrite", []), "filesystem.denyWrite"),
        backend=_backend(block.get("backend", "auto")),
    )


def _allowed_minus_denied(allowed: list[str], denied: list[str]) -> list[str]:
    from lovia_mcp_worker.sandbox.egress.netrequest import host_allowed, normalize_pattern

    gone = {d.lower().rstrip(".") for d in denied}
    kept = [a for a in allowed if a.lower().rstrip(".") not in gone]
    try:
        patterns = tuple(normalize_pattern(a) for a in kept)
    except ValueError as exc:
        raise UserError(
            f"bad sandbox network.allowedDomains: {exc}", hint='"allowedDomains": ["api.github.com", "*.npmjs.org"]'
        ) from exc
    for name in denied:
        if not name.startswith("*") and host_allowed(name, patterns):
            raise UserError(
                f"sandbox network.deniedDomains has {name!r}, which an allowed wildcard still matches",
                hint="The sandbox proxy has allow rules only: list the allowed names one by one "
                "instead of the wildcard, leaving the denied one out.",
            )
    return kept


def _network(entries: list[str], field: str = "network") -> list[str]:
    """``entries`` if each is a valid allowlist entry: a bad one fails here, not at the server's open."""
    from lovia_mcp_worker.sandbox.egress.netrequest import BadEntry, parse_rule

    for entry in entries:
        try:
            parse_rule(entry)
        except BadEntry as exc:
            raise UserError(f"sandbox {field} entry {entry!r} is invalid: {exc.why}", hint=exc.hint) from None
    return entries


def _no_proxy(value: object, upstream: object) -> list[str]:
    """``no_proxy``'s entries, checked: allowlist entries, and only beside an ``upstream_proxy``."""
    if not value:
        return []
    if upstream is None:
        raise UserError(
            "sandbox no_proxy names what is reached without the upstream proxy, and there is none",
            hint="Sandbox(network=['pypi.org', 'git.corp.internal'], upstream_proxy='http://proxy.internal:3128', "
            "no_proxy=['*.corp.internal']), or drop no_proxy.",
        )
    return _network(_strings(value, "no_proxy"), "no_proxy")


def _upstream(url: object, network: bool | list[str]) -> None:
    """A bad ``upstream_proxy``, or one without a network allowlist, fails here, not at the server's open."""
    from lovia_mcp_worker.sandbox.egress.netrequest import BadUpstream, parse_upstream

    if not isinstance(network, list) or not network:
        raise UserError(
            "sandbox upstream_proxy needs a network allowlist: it is how the allowed names are reached",
            hint="Sandbox(network=['pypi.org'], upstream_proxy='http://proxy.internal:3128'); "
            "with network=True the server uses the proxy variables it is given.",
        )
    try:
        parse_upstream(url)  # type: ignore[arg-type]
    except BadUpstream as exc:
        raise UserError(f"sandbox upstream_proxy is invalid: {exc.why}", hint=exc.hint) from None


def _backend(value: object) -> Any:
    from lovia_mcp_worker.sandbox.registry import names  # names the backends without loading any

    if value not in names():
        raise UserError(
            f"sandbox backend must be one of {', '.join(names())}, got {value!r}",
            hint="'auto' uses namespaces where they can be made, else Landlock.",
        )
    return value


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
        raise UserError(
            f"sandbox must be a Sandbox(...), True, or a dict, got {type(value).__name__}",
            hint=f"from lovia_mcp import Sandbox; sandbox={_EXAMPLE}",
        )
    network = value.network
    if not isinstance(network, bool):
        network = _network(_strings(network, "network"))
    upstream = value.upstream_proxy
    if upstream is not None:
        _upstream(upstream, network)
    no_proxy = _no_proxy(value.no_proxy, upstream)
    if not isinstance(value.write_deny, bool):
        raise UserError(
            f"sandbox write_deny must be true or false, got {value.write_deny!r}",
            hint="write_deny=False lets the server write .git/hooks, shell rc files and editor configs.",
        )
    return Sandbox(
        network=network,
        writable=_strings(value.writable, "writable") if value.writable else [],
        hidden=None if value.hidden is None else (_strings(value.hidden, "hidden") if value.hidden else []),
        backend=_backend(value.backend),
        read_only=_strings(value.read_only, "read_only") if value.read_only else [],
        readable=_strings(value.readable, "readable") if value.readable else [],
        write_deny=value.write_deny,
        upstream_proxy=upstream,
        no_proxy=no_proxy,
    )


# Each absolute path as this agent process first resolved it (see the module's docstring).
_first_resolution: dict[str, str] = {}


def pin(path: str) -> PathPin:
    """``path`` (absolute) resolved as when this process first resolved it, and what is there now."""
    real = _first_resolution.setdefault(path, os.path.realpath(path))
    try:
        # Follows symlinks: if ``real`` has one now, the worker, which never
        # follows one, refuses the start instead of granting the file found here.
        st = os.stat(real)
    except OSError:
        return PathPin(real)
    return PathPin(real, st.st_dev, st.st_ino)


def resolved(box: Sandbox, cwd: str) -> Sandbox:
    """Paths absolute against ``cwd`` (the agent's at open time), ``~`` expanded; cwd, writable and readable pinned."""

    def fix(path: str) -> str:
        return os.path.abspath(os.path.join(cwd, os.path.expanduser(path)))

    writable, readable = [fix(p) for p in box.writable], [fix(p) for p in box.readable]
    return Sandbox(
        network=box.network,
        writable=writable,
        hidden=None if box.hidden is None else [p if p.startswith("~") else fix(p) for p in box.hidden],
        backend=box.backend,
        read_only=[fix(p) for p in box.read_only],
        readable=readable,
        write_deny=box.write_deny,
        upstream_proxy=box.upstream_proxy,
        no_proxy=box.no_proxy,
        pins={p: pin(p) for p in dict.fromkeys([cwd, *writable, *readable])},
    )


__all__ = ["coerce", "pin", "resolved"]
