"""What the sandbox's egress refused, as data, and the one function that words it.

A refusal is decided in the worker (the allowlist proxy, the deny-all
listener of a box with the network off) and read in three places: the
refused client (a 403's status line and body), the worker's log, and the
model, which reads it after the call's result (``Result.denied`` carries it
across the pipe). One :class:`EgressRefusal` holds the facts (what kind of
rule, the destination, why, and for an internal address the address it
resolved to); :func:`words` says it for each reader, so no reader parses
another's prose.

Standard library and msgspec only, as the rest of the wire.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import msgspec

from .hostport import hostport

# What a refusal refused, a closed set (the gateway's metrics label by it):
# a destination the network allowlist does not name (or a port it does not
# allow); an allowed name that resolves to an internal address nobody
# listed; any destination, with the network off.
Kind = Literal["allowlist", "internal_address", "network_off"]
DENIAL_KINDS: Final[tuple[Kind, ...]] = get_args(Kind)

# Why, in one word: for ``allowlist``, whether the host or only its port is
# unlisted; for ``internal_address``, the kind of address it resolved to;
# for ``network_off``, ``off``.
Why = Literal[
    "host",
    "port",
    "unspecified",
    "loopback",
    "private",
    "link-local",
    "multicast",
    "broadcast",
    "reserved",
    "off",
]

# Who reads the words: ``reason`` a few words (the 403's status line, the
# denial's ``reason``, a span's event); ``log`` the worker's log line;
# ``model`` what the model reads after the call's result (the server's own
# view: "this server's"); ``client`` the 403's body, with what to list.
Audience = Literal["reason", "log", "model", "client"]

# Addresses worth naming beyond their kind.
_NOTES: Final = {
    "169.254.169.254": "the cloud metadata service",
    "fd00:ec2::254": "the cloud metadata service",
}
_ADD: Final = "Sandbox(network=[...])"


class EgressRefusal(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One refusal: ``kind`` of rule, the destination ``host`` and ``port`` as the client named them, ``why``.

    ``address``: for ``internal_address``, the address the host resolved
    to (a scope id kept); ``embedded``: the IPv4 address that address
    carries in IPv6 form, by which it was judged (``""``: none).
    """

    kind: Kind
    host: str
    port: int
    why: Why
    address: str = ""
    embedded: str = ""

    @property
    def target(self) -> str:
        """``host:port``, an IPv6 address in brackets."""
        return hostport(self.host, self.port)


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _address(refusal: EgressRefusal) -> str:
    """``127.0.0.1, a loopback address``: the address an internal refusal names, and its kind."""
    said = f"{refusal.address}, {_a(refusal.why)} address"
    if refusal.embedded:
        return f"{said} ({refusal.embedded}) in IPv6 form"
    note = _NOTES.get(refusal.address.partition("%")[0])
    return f"{said}: {note}" if note else said


def _listable(address: str) -> str:
    """The entry that lists ``address``: an IPv4-mapped one as its IPv4 address, never with a scope id."""
    import ipaddress  # only the proxy, which has it loaded, words a refusal for the client

    parsed = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


def words(refusal: EgressRefusal, audience: Audience) -> str:
    """``refusal`` said for ``audience`` (see :data:`Audience`); the one place a refusal is worded."""
    if audience == "log":
        who = "sandbox" if refusal.kind == "network_off" else "sandbox proxy"
        return f"{who} refused {refusal.target} ({words(refusal, 'reason')})"
    whose = "this server's" if audience == "model" else "the sandbox's" if audience == "client" else "the"
    if refusal.kind == "network_off":
        if audience == "client":
            return (
                "lovia-mcp sandbox: this server has no network access (its sandbox has network=False). "
                f"To reach a host, list it in {_ADD}."
            )
        return "this server has no network access" if audience == "model" else "the network is off for this server"
    if refusal.kind == "internal_address":
        if audience != "client":
            return f"resolves to {_address(refusal)}"
        listed = _listable(refusal.address)
        return (
            f"lovia-mcp sandbox: {refusal.host} resolves to {_address(refusal)}, which the sandbox refuses unless "
            f"it is listed. To allow it, add '{listed}' (or '{hostport(listed, refusal.port)}', or a range holding "
            f"it) to {_ADD}."
        )
    if audience == "client":
        if refusal.why == "port":
            return (
                f"lovia-mcp sandbox: port {refusal.port} of {refusal.host} is not in {whose} network allowlist. "
                f"To reach it, add '{refusal.target}' to {_ADD}."
            )
        return f"lovia-mcp sandbox: {refusal.host} is not in {whose} network allowlist. To reach it, add it to {_ADD}."
    if refusal.why == "port":
        return f"port {refusal.port} not in {whose} network allowlist"
    return f"not in {whose} network allowlist"


__all__ = ["DENIAL_KINDS", "Audience", "EgressRefusal", "Kind", "Why", "words"]
