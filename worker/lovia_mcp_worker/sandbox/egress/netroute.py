"""A sandboxed server's way out: the worker's allowlist proxy, one per allowed set.

``Sandbox(network=[...])`` gives the server a fresh network namespace (no
route anywhere) plus the proxy variables pointing at a bridge inside the
sandbox (:mod:`._netbridge`) that forwards to the worker's proxy
(:mod:`.netproxy`) over a unix socket bound into the sandbox. The proxy
lets through exactly the allowed names (to public addresses, or to listed
internal ones) and the listed addresses; everything else gets a 403 saying why.

Each refusal is logged and told to the reporter the launch was made under
(:mod:`.reporter`): the session host, which attributes it to the calls in
flight. (With the network off, the box's deny-all listener is
:func:`.netbridge.route_closed`'s.)

Lifecycle: one proxy per distinct allowlist and reporter, started at the
first sandboxed spawn that needs it and reused by later generations (a
restart costs no new proxy); :func:`release` stops a reporter's proxies
(its host closed), :func:`aclose_all` every proxy and their socket
directories when the worker ends.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import tempfile
from collections.abc import Sequence
from typing import Final

from ...wire.refusals import EgressRefusal, words
from ..backend import SandboxError
from . import netbridge, netproxy, netrequest, reporter

logger = logging.getLogger("lovia_mcp.netproxy")

# The socket lives in a directory of its own (bound into the sandbox whole);
# short, because a unix socket path must fit in 108 bytes.
SOCKET_NAME: Final = "proxy.sock"

# The allowlist, the upstream proxy's URL, the names reached past it, and the reporter.
_Key = tuple[tuple[str, ...], str | None, tuple[str, ...], reporter.Reporter | None]
_proxies: dict[_Key, tuple[netproxy.Proxy, str]] = {}
_tcp_proxies: dict[_Key, tuple[netproxy.Proxy, int]] = {}


_HINT: Final = (
    "List host names, each optionally with a port, and the internal addresses or ranges to allow, e.g. "
    "Sandbox(network=['api.github.com', '*.npmjs.org', 'db.internal:5432', '10.0.0.0/8'])."
)


def _upstream(url: str | None, no_proxy: Sequence[str]) -> netrequest.Upstream | None:
    if url is None:
        return None
    try:
        return netrequest.parse_upstream(url, no_proxy)
    except netrequest.BadUpstream as exc:
        raise SandboxError(f"bad sandbox upstream_proxy: {exc.why}", hint=exc.hint) from exc
    except ValueError as exc:
        raise SandboxError(f"bad sandbox no_proxy entry: {exc}", hint=_HINT) from exc


def _decision(report: reporter.Reporter | None, _host: str, _port: int, refusal: EgressRefusal | None) -> None:
    if refusal is not None:
        logger.warning("%s", words(refusal, "log"))
        if report is not None:
            report(refusal)


async def route(
    allowed: list[str],
    argv: list[str],
    env: dict[str, str],
    *,
    seccomp_fd: int | None = None,
    upstream: str | None = None,
    no_proxy: Sequence[str] = (),
) -> tuple[str, list[str]]:
    """Start (or reuse) the proxy for ``allowed`` (through ``upstream``, a proxy URL, but for the names of
    ``no_proxy``); set the proxy variables in ``env``.

    Returns the proxy's socket path (to bind into the sandbox) and ``argv``
    behind the bridge, which installs the seccomp program from ``seccomp_fd``
    before it executes ``argv``. Raises SandboxError for a malformed
    allowlist entry or upstream.
    """
    report = reporter.current()
    key = (tuple(allowed), upstream, tuple(no_proxy), report)
    entry = _proxies.get(key)
    if entry is None:
        via = _upstream(upstream, no_proxy)
        folder = tempfile.mkdtemp(prefix="lovia-mcp-net-", dir="/tmp")
        path = f"{folder}/{SOCKET_NAME}"
        try:
            proxy = await netproxy.start(allowed, path, on_decision=functools.partial(_decision, report), upstream=via)
        except ValueError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise SandboxError(f"bad sandbox network allowlist: {exc}", hint=_HINT) from exc
        entry = _proxies[key] = (proxy, path)
    _, path = entry
    env.update(netbridge.proxy_env())
    return path, netbridge.bridge_argv(argv, socket_path=path, seccomp_fd=seccomp_fd)


async def route_tcp(
    allowed: list[str], env: dict[str, str], *, upstream: str | None = None, no_proxy: Sequence[str] = ()
) -> int:
    """Start (or reuse) the loopback TCP proxy for ``allowed`` (the Landlock backend); set ``env``.

    Returns the proxy's port, the only one the server may connect to.
    """
    report = reporter.current()
    key = (tuple(allowed), upstream, tuple(no_proxy), report)
    entry = _tcp_proxies.get(key)
    if entry is None:
        via = _upstream(upstream, no_proxy)
        try:
            on_decision = functools.partial(_decision, report)
            entry = _tcp_proxies[key] = await netproxy.start_tcp(allowed, on_decision=on_decision, upstream=via)
        except ValueError as exc:
            raise SandboxError(f"bad sandbox network allowlist: {exc}", hint=_HINT) from exc
    env.update(netbridge.proxy_env(entry[1]))
    return entry[1]


def proxies(allowed: list[str]) -> list[netproxy.Proxy]:
    """The proxies serving ``allowed`` in this process (none before a server that needs one started)."""
    key = tuple(allowed)
    return [entry[0] for table in (_proxies, _tcp_proxies) for k, entry in table.items() if k[0] == key]


async def release(report: reporter.Reporter) -> None:
    """Stop the proxies set up under ``report`` (its host has closed); bounded by the proxies' own close."""
    for table in (_proxies, _tcp_proxies):
        for key in [k for k in table if k[-1] is report]:
            proxy, where = table.pop(key)
            with contextlib.suppress(Exception):
                await proxy.aclose()
            if isinstance(where, str):
                shutil.rmtree(where.rsplit("/", 1)[0], ignore_errors=True)


async def aclose_all() -> None:
    """Stop every proxy and remove its socket directory (bounded by the proxies' own close)."""
    for proxy, _ in list(_tcp_proxies.values()):
        with contextlib.suppress(Exception):
            await proxy.aclose()
    _tcp_proxies.clear()
    entries = list(_proxies.values())
    _proxies.clear()
    for proxy, path in entries:
        with contextlib.suppress(Exception):
            await proxy.aclose()
        shutil.rmtree(path.rsplit("/", 1)[0], ignore_errors=True)


__all__ = ["SOCKET_NAME", "aclose_all", "proxies", "release", "route", "route_tcp"]
