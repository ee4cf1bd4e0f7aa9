"""The allowlist proxy's request side: host-name matching and HTTP request heads.

Pure, apart from :func:`read_head` reading a stream: what :mod:`.netproxy`
decides on. See :mod:`.netproxy` for the matching rules and the caveats.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

# Bound on a request head (request line and headers). Real clients send a
# few hundred bytes to a proxy; 16 KiB leaves room for long URLs and cookies
# and keeps a misbehaving client from growing the worker's memory.
MAX_HEAD: Final = 16 * 1024

# Headers that belong to the hop between client and proxy, not to the request.
_HOP_BY_HOP: Final = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "host"})

_LABEL: Final = re.compile(r"[a-z0-9_-]{1,63}")
# A last label that resolvers read as a number (inet_aton: 127.1, 0x7f.1, 2130706433).
_NUMERIC_LABEL: Final = re.compile(r"[0-9]+|0x[0-9a-f]*")
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VERSION: Final = re.compile(r"HTTP/1\.[0-9]")


# --- host matching ---------------------------------------------------------


def _canonical(host: str) -> str | None:
    """``host`` lower-cased, without brackets or one trailing dot; None if it is no host."""
    if host.startswith("[") and host.endswith("]"):
        inner = host[1:-1]
        try:
            return str(ipaddress.IPv6Address(inner))
        except ValueError:
            return None
    host = host.lower()
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253 or not host.isascii():
        return None
    if not all(_LABEL.fullmatch(label) for label in host.split(".")):
        return None
    return host


def _is_address(host: str) -> bool:
    """An IP literal, or a name a resolver would read as one (canonical ``host``)."""
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return True
    return _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]) is not None


def normalize_pattern(pattern: str) -> str:
    """``pattern`` in the form :func:`host_allowed` compares; ValueError with a hint if invalid.

    Non-ASCII names are converted to their IDNA (``xn--``) form, which is
    what clients send.
    """
    hint = (
        "List host names such as 'api.github.com', '*.npmjs.org' for every subdomain, "
        "or an IP address, without scheme, port or path."
    )
    if not isinstance(pattern, str):
        raise ValueError(f"a network allowlist entry must be a string, not {type(pattern).__name__}. {hint}")
    wildcard = pattern.startswith("*.")
    name = pattern[2:] if wildcard else pattern
    if "*" in name:
        raise ValueError(
            f"invalid network allowlist entry {pattern!r}: '*' may only be the whole first label "
            f"('*.example.com'). {hint}"
        )
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"invalid network allowlist entry {pattern!r}: not a valid host name. {hint}") from None
    canonical = _canonical(name)
    if canonical is None:
        raise ValueError(f"invalid network allowlist entry {pattern!r}: not a host name or IP address. {hint}")
    if wildcard:
        if _is_address(canonical):
            raise ValueError(f"invalid network allowlist entry {pattern!r}: a wildcard needs a domain name. {hint}")
        return "*." + canonical
    return canonical


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """Whether ``host`` (as a client names it) matches one of ``patterns``.

    Exact names match case-insensitively, a trailing dot ignored;
    ``*.example.com`` matches any subdomain but not ``example.com``; IP
    literals, and names that end in a numeric label, match only a pattern
    naming the same address. Invalid hosts and invalid patterns never match.
    """
    canonical = _canonical(host)
    if canonical is None:
        return False
    address = _is_address(canonical)
    for raw in patterns:
        try:
            pattern = normalize_pattern(raw)
        except ValueError:
            continue
        if pattern.startswith("*."):
            # Labels are never empty, so a match has at least one label before the suffix.
            if not address and canonical.endswith(pattern[1:]):
                return True
        elif canonical == pattern:
            return True
    return False


# --- request parsing -------------------------------------------------------


class Refusal(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@dataclass(frozen=True)
class Request:
    method: str
    host: str  # canonical
    port: int
    authority: str  # as sent (absolute form), for the Host header
    target: str  # origin form; "" for CONNECT
    version: str
    headers: list[tuple[str, str]]

    def forward_head(self) -> bytes:
        # Hop-by-hop: the fixed set, and whatever the client's Connection headers name.
        drop = set(_HOP_BY_HOP)
        for name, value in self.headers:
            if name.lower() in ("connection", "proxy-connection"):
                drop.update(token.strip().lower() for token in value.split(","))
        lines = [f"{self.method} {self.target} {self.version}", f"Host: {self.authority}"]
        lines += [f"{name}: {value}" for name, value in self.headers if name.lower() not in drop]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _bad(reason: str) -> Refusal:
    return Refusal(400, f"lovia-mcp sandbox proxy: bad request: {reason}.")


async def read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    """The lines of a request head, without line ends; None if the client sent nothing."""
    lines: list[bytes] = []
    size = 0
    too_large = Refusal(431, f"lovia-mcp sandbox proxy: the request head is larger than {MAX_HEAD} bytes.")
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            if not lines and not e.partial.strip():
                return None
            raise _bad("the connection ended inside the request head") from None
        except asyncio.LimitOverrunError:
            raise too_large from None
        size += len(line)
        if size > MAX_HEAD:
            raise too_large
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        if not line:
            if lines:
                return lines
            continue  # an empty line before the request line is tolerated (RFC 9112, 2.2)
        lines.append(line)


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    if "@" in authority:
        raise _bad("user information in the request target is not supported")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _bad(f"unterminated IPv6 address in {authority!r}")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _bad(f"invalid authority {authority!r}")
        port_text = rest[1:] if rest else None
    elif authority.count(":") == 1:
        host, port_text = authority.split(":")
    elif ":" in authority:
        raise _bad(f"an IPv6 address must be in brackets: {authority!r}")
    else:
        host, port_text = authority, None
    if port_text is None or port_text == "":
        if default_port is None:
            raise _bad(f"CONNECT needs host:port, got {authority!r}")
        port = default_port
    elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise _bad(f"invalid port in {authority!r}")
    canonical = _canonical(host)
    if canonical is None:
        raise _bad(f"invalid host name {host!r}")
    return canonical, port


def parse_head(lines: list[bytes]) -> Request:
    try:
        request_line = lines[0].decode("ascii")
    except UnicodeDecodeError:
        raise _bad("the request line is not ASCII") from None
    parts = request_line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not _VERSION.fullmatch(parts[2]):
        raise _bad(f"expected 'METHOD target HTTP/1.x', got {request_line[:100]!r}")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    for raw in lines[1:]:
        line = raw.decode("latin-1")
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise _bad(f"malformed header line {line[:100]!r}")
        headers.append((name, value.strip(" \t")))
    if method == "CONNECT":
        host, port = _split_authority(target, None)
        return Request(method, host, port, target, "", version, headers)
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        if target.startswith("/"):
            raise _bad("this is a proxy: send the absolute URL (GET http://host/path) or CONNECT host:port")
        if sep and scheme.lower() == "https":
            raise _bad("use CONNECT host:443 for https")
        raise _bad(f"unsupported request target {target[:100]!r}")
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].partition("#")[0]
    if not path.startswith("/"):
        path = "/" + path
    host, port = _split_authority(authority, 80)
    return Request(method, host, port, authority, path, version, headers)


__all__ = [
    "MAX_HEAD",
    "Refusal",
    "Request",
    "host_allowed",
    "normalize_pattern",
    "parse_head",
    "read_head",
]
