"""MCP protocol eras: the ``initialize`` handshake, and the stateless 2026-07-28 revision.

The stdio client (:mod:`.jsonrpc`) negotiates as the MCP SDK's
``Client(mode="auto")`` does (the rules are owned here, not imported), with one
difference for speed: the ``server/discover`` probe and the ``initialize``
handshake are written together (pipelined), so a handshake-era server costs
no extra round trip. The probe goes first; the SDK's dual-era server decides
a connection's era by its first request, so it answers the probe and refuses
the handshake with -32022.

- The probe succeeds with a mutual modern version: the modern era.
- The probe fails with -32022 naming a mutual modern version: one re-probe
  at it. Naming only modern versions we do not speak: incompatible.
- Any other probe failure, or a discover result with no mutual modern
  version: the handshake's answer decides (the handshake era). A handshake
  answered with -32022 is modern evidence: one re-probe at a version it names.
- A handshake answered before the probe (a server that answers out of
  order): the handshake era.

In the modern era every request carries the envelope (:func:`envelope`) in
``_meta``; ``tools/list`` results carry ``ttlMs`` (:func:`ttl_seconds`);
tool-list changes come on a ``subscriptions/listen`` stream; a ``tools/call``
may answer ``resultType: "input_required"`` (:func:`input_required`), which
lovia-mcp cannot fulfil (elicitation, sampling and roots are non-goals).

The agent's ``protocol=`` option: ``"auto"``, ``"legacy"`` (the handshake
only, byte for byte as before), or a version to pin (a modern version is
adopted without a probe, as the SDK's pin is; a handshake version is the
only one offered and accepted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from ..wire.failures import HostError, RemoteError
from ..wire.messages import MCP_HANDSHAKE_VERSIONS, MCP_MODERN_VERSIONS

UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO: Final = {"name": "lovia-mcp", "version": "0.1.0"}
# What lovia-mcp can do for a server: nothing it would ask of the client
# (no sampling, roots or elicitation), so the advertisement is empty.
CLIENT_CAPABILITIES: Final[dict[str, Any]] = {}


def envelope(version: str) -> dict[str, Any]:
    """The per-request ``_meta`` entries of the modern era."""
    return {
        PROTOCOL_VERSION_KEY: version,
        CLIENT_INFO_KEY: CLIENT_INFO,
        CLIENT_CAPABILITIES_KEY: CLIENT_CAPABILITIES,
    }


def supported(error: RemoteError) -> list[str] | None:
    """The versions a -32022 error names (``data.supported``), or None if it names none."""
    data = error.data
    if not isinstance(data, dict):
        return None
    found = data.get("supported")
    if not isinstance(found, list) or not all(isinstance(v, str) for v in found):
        return None
    return found


def mutual_modern(versions: object) -> str | None:
    """The newest modern version in ``versions`` that lovia-mcp speaks."""
    if not isinstance(versions, list):
        return None
    return next((v for v in MCP_MODERN_VERSIONS if v in versions), None)


def only_modern(versions: list[str] | None) -> bool:
    """Whether a -32022's list leaves the handshake out (a modern-only server)."""
    return versions is not None and not any(v in MCP_HANDSHAKE_VERSIONS for v in versions)


def incompatible(versions: list[str]) -> HostError:
    return HostError(
        "open",
        f"the server speaks only MCP protocol versions {', '.join(versions) or 'none'}, none of which "
        f"lovia-mcp speaks ({', '.join([*MCP_MODERN_VERSIONS, *MCP_HANDSHAKE_VERSIONS])})",
        hint="Use a server release that supports one of these versions, or upgrade lovia-mcp.",
    )


def lists_changes(discovered: dict[str, Any] | None) -> bool:
    """Whether a discover result says the server announces tool-list changes."""
    caps = (discovered or {}).get("capabilities")
    tools = caps.get("tools") if isinstance(caps, dict) else None
    return isinstance(tools, dict) and tools.get("listChanged") is True


def ttl_seconds(result: dict[str, Any]) -> float | None:
    """How long a listing may be reused (``ttlMs``), or None when the result sets no limit (the handshake era)."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        return None
    return max(0.0, float(ttl)) / 1000.0


def input_required(result: dict[str, Any]) -> str | None:
    """For an ``InputRequiredResult``, the tool error text naming what the server asked for; else None."""
    if result.get("resultType") != "input_required":
        return None
    asked: list[str] = []
    requests = result.get("inputRequests")
    if isinstance(requests, dict):
        for key, request in requests.items():
            if not isinstance(request, dict):
                continue
            method = request.get("method")
            params = request.get("params")
            what = f"{method}" if isinstance(method, str) else "an unknown request"
            message = params.get("message") if isinstance(params, dict) else None
            if isinstance(message, str) and message:
                what += f" ({message[:200]!r})"
            asked.append(f"{what} [{str(key)[:60]}]")
    named = "; ".join(asked) if asked else "more input (no request named, only request state)"
    return (
        f"The MCP server needs input from the client before this tool can finish: {named}. "
        "lovia-mcp does not answer elicitation, sampling or roots requests, so the call cannot complete; "
        "call the tool with arguments that need no further input, or use another tool."
    )


class Negotiating(Protocol):
    """What the era's rules need of a client (:class:`.jsonrpc.Client` is one): its requests, and adopting a verdict."""

    def discover(self, version: str, trace: dict[str, str] | None) -> Coroutine[Any, Any, dict[str, Any]]: ...

    def handshake(self, version: str | None, trace: dict[str, str] | None) -> Coroutine[Any, Any, dict[str, Any]]: ...

    def adopt_handshake(self, result: dict[str, Any]) -> None: ...

    def adopt_modern(self, version: str, discovered: dict[str, Any] | None) -> None: ...

    async def listen(self) -> None: ...


async def negotiate_auto(client: Negotiating, trace: dict[str, str] | None) -> None:
    """The SDK's ``mode="auto"`` with the probe and the handshake pipelined (the rules above)."""
    probe = asyncio.ensure_future(client.discover(MCP_MODERN_VERSIONS[0], trace))
    handshake = asyncio.ensure_future(client.handshake(None, trace))
    try:
        await asyncio.wait((probe, handshake), return_when=asyncio.FIRST_COMPLETED)
        if not probe.done() and handshake.exception() is None:
            client.adopt_handshake(handshake.result())  # answered out of order: the handshake era
            return
        await asyncio.wait((probe,))
        failed = probe.exception()
        if failed is None:
            version = mutual_modern(probe.result().get("supportedVersions"))
            if version is not None:
                client.adopt_modern(version, probe.result())
                return
        elif not isinstance(failed, RemoteError):
            raise failed  # the server died or broke the protocol: no era verdict
        elif failed.code == UNSUPPORTED_PROTOCOL_VERSION:
            named = supported(failed)
            mutual = mutual_modern(named)
            if mutual is not None:
                await _reprobe(client, mutual, trace)
                return
            if named is not None and only_modern(named):
                raise incompatible(named)
        try:
            result = await handshake
        except RemoteError as exc:
            # -32022 from the handshake is modern evidence (the probe settled
            # the era server-side): one re-probe at a version it names.
            mutual = mutual_modern(supported(exc)) if exc.code == UNSUPPORTED_PROTOCOL_VERSION else None
            if mutual is None:
                raise
            await _reprobe(client, mutual, trace)
            return
        client.adopt_handshake(result)
    finally:
        for task in (probe, handshake):
            if not task.done():
                task.cancel()  # no notifications/cancelled: the spec forbids cancelling either
            else:
                task.exception()  # retrieved: the losing answer is not an error


async def follow_changes(client: Negotiating, log: Callable[[int, str, bool], None]) -> None:
    """Tool-list changes in the modern era: a ``subscriptions/listen`` stream for the generation's life."""
    try:
        await client.listen()
    except RemoteError as exc:
        log(logging.INFO, f"the server refused subscriptions/listen ({exc}); tool-list changes are not followed", False)
    except HostError:
        pass  # the generation ended


async def _reprobe(client: Negotiating, version: str, trace: dict[str, str] | None) -> None:
    result = await client.discover(version, trace)
    versions = result.get("supportedVersions")
    mutual = mutual_modern(versions)
    if mutual is None:
        raise incompatible([v for v in versions or [] if isinstance(v, str)] if isinstance(versions, list) else [])
    client.adopt_modern(mutual, result)


__all__ = [
    "CLIENT_CAPABILITIES",
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO",
    "CLIENT_INFO_KEY",
    "Negotiating",
    "PROTOCOL_VERSION_KEY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "envelope",
    "follow_changes",
    "incompatible",
    "input_required",
    "lists_changes",
    "negotiate_auto",
    "mutual_modern",
    "only_modern",
    "supported",
    "ttl_seconds",
]
