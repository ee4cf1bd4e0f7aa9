"""The allowlist proxy's request side: the allowlist's rules, the address check, HTTP request heads.

Pure, apart from :func:`read_head` reading a stream: what :mod:`.netproxy`
decides on. See :mod:`.netproxy` for the rules and the caveats.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeAlias
from urllib.parse import unquote, urlsplit

from ...wire.hostport import BadHostPort, hostport, parse_hostport
from ...wire.refusals import EgressRefusal, Why

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
_LENGTH: Final = re.compile(r"[0-9]{1,18}")
# A chunk's size line (RFC 9112, 7.1), extensions allowed; a bare LF is not.
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,15})(?:[ \t]*;[^\r\n]*)?\r\n")
_VERSION: Final = re.compile(r"HTTP/1\.[0-9]")

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


# --- the address check -----------------------------------------------------

# Where an allowed name may not lead unless the operator lists the address:
# the host's own services and the networks behind it, never the internet.
# Most specific first (the first match names the kind). Kept per family:
# ``in`` compares integers, so a v4 address must never meet a v6 range.
_RANGES_V4: Final[tuple[tuple[str, Why], ...]] = (
    ("0.0.0.0/8", "unspecified"),  # "this network": a connect to 0.0.0.0 reaches the loopback
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "private"),  # carrier-grade NAT (RFC 6598)
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),  # cloud metadata services live here
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
    ("192.0.2.0/24", "reserved"),  # documentation
    ("192.88.99.0/24", "reserved"),  # 6to4 relays (deprecated)
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "reserved"),  # benchmarking; also proxies' "fake IP" DNS ranges
    ("198.51.100.0/24", "reserved"),  # documentation
    ("203.0.113.0/24", "reserved"),  # documentation
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_INTERNAL_V4: Final = tuple((ipaddress.IPv4Network(net), kind) for net, kind in _RANGES_V4)
_RANGES_V6: Final[tuple[tuple[str, Why], ...]] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "private"),  # local-use NAT64 (RFC 8215)
    ("100::/64", "reserved"),  # discard-only
    ("2001::/23", "reserved"),  # IETF protocol assignments (Teredo, benchmarking, ORCHID)
    ("2001:db8::/32", "reserved"),  # documentation
    ("3fff::/20", "reserved"),  # documentation
    ("fc00::/7", "private"),  # unique local (AWS's metadata service is fd00:ec2::254)
    ("fe80::/10", "link-local"),
    ("fec0::/10", "private"),  # site-local (deprecated)
    ("ff00::/8", "multicast"),
)
_INTERNAL_V6: Final = tuple((ipaddress.IPv6Network(net), kind) for net, kind in _RANGES_V6)
# Global unicast: an IPv6 address outside it, and in none of the ranges above
# or the embeddings below, is unassigned or reserved.
_GLOBAL_V6: Final = ipaddress.IPv6Network("2000::/3")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_TRANSLATED: Final = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT (RFC 2765)
_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")  # deprecated IPv4-compatible form


def _v4_kind(address: ipaddress.IPv4Address) -> Why | None:
    for net, kind in _INTERNAL_V4:
        if address in net:
            return kind
    return None


def internal(address: Address) -> tuple[Why, ipaddress.IPv4Address | None] | None:
    """The kind of internal address ``address`` is (``loopback``...) and the IPv4 address it was judged
    by, if it carries one; None if it is on the internet.

    IPv6 forms that carry an IPv4 address (mapped ``::ffff:127.0.0.1``,
    compatible, SIIT, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged
    by the address they carry: the mapped form is the same destination, and a
    translator or relay would deliver the others to it.
    """
    if isinstance(address, ipaddress.IPv4Address):
        kind = _v4_kind(address)
        return None if kind is None else (kind, None)
    kind6 = next((kind for net, kind in _INTERNAL_V6 if address in net), None)
    if kind6 is not None:
        return kind6, None
    embedded: ipaddress.IPv4Address | None = None
    public_ok = True
    if address.ipv4_mapped is not None:
        embedded = address.ipv4_mapped
    elif address in _NAT64:
        embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    elif address.sixtofour is not None:
        embedded = address.sixtofour
    elif address in _TRANSLATED or address in _COMPATIBLE:
        embedded, public_ok = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), False
    if embedded is not None:
        kind = _v4_kind(embedded)
        if kind is not None:
            return kind, embedded
        return None if public_ok else ("reserved", None)
    if address not in _GLOBAL_V6:
        return "reserved", None
    return None


def as_address(host: str) -> Address | None:
    """The address a resolver reads ``host`` (canonical) as, or None for a name.

    Besides IP literals, every spelling ``inet_aton`` accepts (``127.1``,
    ``0x7f.1``, ``2130706433``, ``0177.0.0.1``): a URL or a ``CONNECT`` line
    can name the loopback in each of them.
    """
    # Cheap tests first: this runs on every request, and most hosts are names.
    if ":" in host:
        with contextlib.suppress(ValueError):
            return ipaddress.IPv6Address(host)
        return None
    if _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]) is None:
        return None
    with contextlib.suppress(ValueError):
        return ipaddress.IPv4Address(host)
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None  # "999.1": a name ending in a number, which only an exact entry matches


def destination(address: Address) -> Address:
    """The address to connect to for ``address``: an IPv4-mapped one is its IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


# --- the allowlist's rules -------------------------------------------------

_HINT: Final = (
    "List host names such as 'api.github.com' or '*.npmjs.org' (every subdomain), each "
    "optionally with a port ('db.internal:5432'), and, for internal destinations, addresses "
    "or ranges ('127.0.0.1', '[::1]:8080', '10.0.0.0/8'); no scheme or path."
)


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
    """An IP literal, or a name a resolver would read as one (canonical ``host``).

    Every IPv6 literal has a colon and every IPv4 one a numeric last label,
    so no parse is needed.
    """
    return ":" in host or _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]) is not None


@dataclass(frozen=True)
class Rule:
    """One parsed allowlist entry: a name (``*.x`` for subdomains) or a range, and a port or any."""

    name: str | None
    network: Network | None
    port: int | None

    def __str__(self) -> str:
        if self.network is None:
            host = self.name or ""
        elif self.network.prefixlen == self.network.max_prefixlen:
            host = str(self.network.network_address)
        else:
            host = str(self.network)
        if self.port is None:
            return host
        return hostport(host, self.port)

    def admits_port(self, port: int | None) -> bool:
        return self.port is None or port is None or self.port == port


class BadEntry(ValueError):
    """An allowlist entry that cannot be parsed: ``why`` says what is wrong, ``hint`` what to write."""

    def __init__(self, entry: object, why: str) -> None:
        super().__init__(f"invalid network allowlist entry {entry!r}: {why}. {_HINT}")
        self.entry = entry
        self.why = why
        self.hint = _HINT


def _bad_entry(pattern: str, why: str) -> BadEntry:
    return BadEntry(pattern, why)


def _split_port(pattern: str) -> tuple[str, int | None]:
    try:
        return parse_hostport(pattern)
    except BadHostPort as exc:
        raise _bad_entry(pattern, exc.why) from None


def parse_rule(pattern: str) -> Rule:
    """``pattern`` parsed; ValueError with a hint if it is not a valid allowlist entry.

    Non-ASCII names are converted to their IDNA (``xn--``) form, which is
    what clients send. Addresses are written as ``ipaddress`` reads them
    (dotted decimal, no leading zeros): ``127.1`` or ``0x7f.1`` are refused
    here, since an operator rarely means what ``inet_aton`` reads them as.
    """
    if not isinstance(pattern, str):
        raise BadEntry(pattern, f"an entry is a string, not {type(pattern).__name__}")
    if "://" in pattern:
        raise _bad_entry(pattern, "a URL's scheme has no place here, only the host")
    host, port = _split_port(pattern)
    if "%" in host:
        raise _bad_entry(pattern, "an address with a scope id ('%eth0') cannot be listed")
    if "/" in host:
        if host.startswith("*"):
            raise _bad_entry(pattern, "a range takes no wildcard")
        if not host.partition("/")[2].isdigit():
            raise _bad_entry(pattern, "a path has no place here, only the host")
        try:
            return Rule(None, ipaddress.ip_network(host), port)
        except ValueError as exc:
            raise _bad_entry(pattern, f"not a valid address range ({exc}; e.g. '10.0.0.0/8')") from None
    with contextlib.suppress(ValueError):
        return Rule(None, ipaddress.ip_network(host), port)
    if ":" in host:
        raise _bad_entry(pattern, "not an IPv6 address")
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    if "*" in name:
        raise _bad_entry(pattern, "'*' may only be the whole first label ('*.example.com')")
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise _bad_entry(pattern, "not a valid host name") from None
    canonical = _canonical(name)
    if canonical is None:
        raise _bad_entry(pattern, "not a host name or IP address")
    if _is_address(canonical):
        if wildcard:
            raise _bad_entry(pattern, "a wildcard needs a domain name")
        address = as_address(canonical)
        if address is None:
            raise _bad_entry(pattern, "a host name cannot end in a number")
        raise _bad_entry(pattern, f"an address must be written plainly ({str(address)!r})")
    return Rule(("*." if wildcard else "") + canonical, None, port)


def normalize_pattern(pattern: str) -> str:
    """``pattern`` in the form :class:`Allowlist` compares; ValueError with a hint if invalid."""
    return str(parse_rule(pattern))


class Allowlist:
    """``Sandbox(network=[...])`` parsed once: the rules :mod:`.netproxy` decides on.

    A request names a host and a port. A *name* passes :meth:`refuses` if a
    name rule matches it (exact, case-insensitive, trailing dot ignored;
    ``*.x`` any subdomain of ``x`` but not ``x``) on that port (a rule
    without a port: any). Each address it resolves to then passes
    :meth:`screen` if it is on the internet, or an address rule lists it on
    that port. An *address* (literal, or any spelling a resolver reads as
    one) passes only if an address rule lists it on that port. Invalid
    entries raise ValueError with a hint.
    """

    def __init__(self, entries: Iterable[str]) -> None:
        rules = list(dict.fromkeys(parse_rule(e) for e in entries))
        self.rules: Final = tuple(rules)
        self.patterns: Final = tuple(str(r) for r in rules)
        self._exact = [r for r in rules if r.name is not None and not r.name.startswith("*.")]
        self._wild = [r for r in rules if r.name is not None and r.name.startswith("*.")]
        self._ranges = [r for r in rules if r.network is not None]

    def _names(self, name: str) -> list[Rule]:
        found = [r for r in self._exact if r.name == name]
        # Labels are never empty, so a match has at least one label before the suffix.
        if not _is_address(name):
            found += [r for r in self._wild if r.name is not None and name.endswith(r.name[1:])]
        return found

    def lists(self, address: Address, port: int | None) -> bool:
        """Whether an address rule lists ``address`` on ``port`` (None: on some port)."""
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address):
            if address.ipv4_mapped is not None:
                candidates.append(address.ipv4_mapped)
            if address.scope_id is not None:
                candidates.append(ipaddress.IPv6Address(int(address)))
        return any(
            r.network is not None and r.network.version == a.version and a in r.network and r.admits_port(port)
            for r in self._ranges
            for a in candidates
        )

    def admits(self, host: str, port: int | None = None) -> bool:
        """Whether ``host`` (canonical) on ``port`` passes the first check, before any resolution."""
        address = as_address(host)
        if address is not None:
            return self.lists(address, port)
        return any(r.admits_port(port) for r in self._names(host))

    def refuses(self, host: str, port: int) -> EgressRefusal | None:
        """Why a request for ``host:port`` (canonical host) is refused before resolution, or None."""
        if self.admits(host, port):
            return None
        why: Why = "port" if self.admits(host) else "host"
        return EgressRefusal(kind="allowlist", host=host, port=port, why=why)

    def screen(self, host: str, address: Address, port: int) -> EgressRefusal | None:
        """Why ``host``, resolved to ``address``, may not be reached there on ``port``, or None."""
        if self.lists(address, port):
            return None
        found = internal(address)
        if found is None:
            return None
        why, embedded = found
        return EgressRefusal(
            kind="internal_address",
            host=host,
            port=port,
            why=why,
            address=str(address),
            embedded="" if embedded is None else str(embedded),
        )


def host_allowed(host: str, patterns: Sequence[str], port: int | None = None) -> bool:
    """Whether ``host`` (as a client names it) passes ``patterns`` before resolution.

    Invalid hosts and invalid patterns never match; ``port=None`` asks
    whether some port passes. See :class:`Allowlist` for the rules.
    """
    canonical = _canonical(host)
    if canonical is None:
        return False
    valid: list[str] = []
    for raw in patterns:
        with contextlib.suppress(ValueError):
            parse_rule(raw)
            valid.append(raw)
    return Allowlist(valid).admits(canonical, port)


# --- request parsing -------------------------------------------------------


class Answer(Exception):
    """An answer instead of a connection: ``text`` is the body, ``reason`` (if any) goes on the status line.

    A refused destination's (403) words are :func:`~...wire.refusals.words`'.
    """

    def __init__(self, status: int, text: str, reason: str = "") -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.reason = reason


# Request.body for a chunked body: its end is its last, empty chunk.
CHUNKED: Final = -1


@dataclass(frozen=True)
class Request:
    method: str
    host: str  # canonical
    port: int
    authority: str  # as sent (absolute form), for the Host header
    target: str  # origin form; "" for CONNECT
    version: str
    headers: list[tuple[str, str]]
    # A plain request's body as the upstream will read it: its length in bytes, or CHUNKED.
    body: int = 0

    def forwarded_headers(self) -> list[tuple[str, str]]:
        """The headers the upstream gets: without the hop-by-hop ones, the fixed set and whatever
        the client's Connection headers name."""
        drop = set(_HOP_BY_HOP)
        for name, value in self.headers:
            if name.lower() in ("connection", "proxy-connection"):
                drop.update(token.strip().lower() for token in value.split(","))
        return [(name, value) for name, value in self.headers if name.lower() not in drop]

    def forward_head(self) -> bytes:
        lines = [f"{self.method} {self.target} {self.version}", f"Host: {self.authority}"]
        lines += [f"{name}: {value}" for name, value in self.forwarded_headers()]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def body_framing(version: str, headers: list[tuple[str, str]]) -> int:
    """Where the body after a request head with ``headers`` ends (RFC 9112, 6.3): its length, or
    CHUNKED. An :class:`Answer` (400) where the end is ambiguous, since the proxy and the upstream
    could then disagree on where the next request starts."""
    codings = [t.strip().lower() for n, v in headers if n.lower() == "transfer-encoding" for t in v.split(",")]
    lengths = [t.strip() for n, v in headers if n.lower() == "content-length" for t in v.split(",")]
    if codings:
        if lengths:
            raise _bad("both Transfer-Encoding and Content-Length: where the body ends is ambiguous")
        if version == "HTTP/1.0":
            raise _bad("Transfer-Encoding in an HTTP/1.0 request")
        if codings[-1] != "chunked" or "chunked" in codings[:-1]:
            raise _bad(f"a body's Transfer-Encoding must end in one 'chunked', not {', '.join(codings)[:100]!r}")
        return CHUNKED
    if not lengths:
        return 0
    if len(set(lengths)) != 1 or not _LENGTH.fullmatch(lengths[0]):
        raise _bad(f"invalid Content-Length {', '.join(lengths)[:100]!r}")
    return int(lengths[0])


def chunk_size(line: bytes) -> int | None:
    """The size a chunked body's size line (CRLF included) gives, or None if it is malformed."""
    match = _CHUNK_SIZE.fullmatch(line)
    return None if match is None else int(match.group(1), 16)


# --- the upstream proxy ----------------------------------------------------

_UPSTREAM_HINT: Final = (
    "Give the upstream proxy as http://HOST:PORT (with USER:PASSWORD@ if it asks for them), "
    "e.g. Sandbox(network=['pypi.org'], upstream_proxy='http://proxy.internal:3128')."
)


class BadUpstream(ValueError):
    """An ``upstream_proxy`` that cannot be used: ``why`` says what is wrong, ``hint`` what to write."""

    def __init__(self, why: str) -> None:
        super().__init__(f"invalid upstream_proxy: {why}. {_UPSTREAM_HINT}")
        self.why = why
        self.hint = _UPSTREAM_HINT


@dataclass(frozen=True)
class Upstream:
    """A proxy the allowlist proxy reaches allowed names through: its address and credentials."""

    host: str
    port: int
    # The Proxy-Authorization header's value (Basic), if the URL carried credentials.
    authorization: str | None = None
    # Names reached directly, not through this proxy (``Sandbox.no_proxy``).
    bypass: Allowlist | None = None

    def direct(self, host: str, port: int) -> bool:
        """Whether ``host:port`` (a canonical name) is reached directly rather than through this proxy."""
        return self.bypass is not None and self.bypass.admits(host, port)

    def __str__(self) -> str:
        return hostport(self.host, self.port)

    def connect_head(self, host: str, port: int) -> bytes:
        """The ``CONNECT`` that asks this proxy for a tunnel to ``host:port``."""
        where = hostport(host, port)
        lines = [f"CONNECT {where} HTTP/1.1", f"Host: {where}"]
        if self.authorization is not None:
            lines.append(f"Proxy-Authorization: {self.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_upstream(url: str, no_proxy: Sequence[str] = ()) -> Upstream:
    """``http://[USER:PASSWORD@]HOST:PORT`` as an :class:`Upstream`; :class:`BadUpstream` for anything else.

    ``no_proxy``: the names (allowlist entries) reached directly instead;
    a bad one raises ValueError. The errors show the URL without its credentials.
    """
    if not isinstance(url, str) or not url:
        raise BadUpstream(f"expected a URL, got {url!r}")
    shown = re.sub(r"//[^/@]*@", "//***@", url)[:200]
    scheme, _, rest = url.partition("://")
    if scheme.lower() != "http":
        raise BadUpstream(f"{shown!r}: only an http:// proxy is supported (TLS to the proxy is not)")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    try:
        host, port = parse_hostport(netloc.rpartition("@")[2])
    except BadHostPort as exc:
        raise BadUpstream(f"{shown!r} is not a URL ({exc.why})") from None
    if port is None:
        raise BadUpstream(f"{shown!r} names no host and port")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise BadUpstream(f"{shown!r} is not a URL ({str(exc).replace(url, shown)})") from None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise BadUpstream(f"{shown!r} has a path; a proxy URL is only http://HOST:PORT")
    authorization = None
    if parts.username is not None:
        user, password = unquote(parts.username), unquote(parts.password or "")
        authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    # A bad no_proxy entry raises the allowlist's ValueError (with its hint).
    return Upstream(host.lower(), port, authorization, Allowlist(no_proxy) if no_proxy else None)


def _bad(reason: str) -> Answer:
    return Answer(400, f"lovia-mcp sandbox proxy: bad request: {reason}.")


async def read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    """The lines of a request head, without line ends; None if the client sent nothing."""
    lines: list[bytes] = []
    size = 0
    too_large = Answer(431, f"lovia-mcp sandbox proxy: the request head is larger than {MAX_HEAD} bytes.")
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
    try:
        host, port = parse_hostport(authority, bare_ipv6=False)
    except BadHostPort as exc:
        raise _bad(f"{exc.why}: {authority!r}") from None
    if port is None:
        if default_port is None:
            raise _bad(f"CONNECT needs host:port, got {authority!r}")
        port = default_port
    canonical = _canonical(f"[{host}]" if ":" in host else host)
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
    request = Request(method, host, port, authority, path, version, headers)
    # Framed by the headers as forwarded: a Content-Length the Connection header names is not
    # sent, so its bytes would reach the upstream as a request of their own.
    return replace(request, body=body_framing(version, request.forwarded_headers()))


__all__ = [
    "CHUNKED",
    "MAX_HEAD",
    "Address",
    "Allowlist",
    "BadEntry",
    "Answer",
    "BadUpstream",
    "Network",
    "Request",
    "Rule",
    "Upstream",
    "as_address",
    "body_framing",
    "chunk_size",
    "destination",
    "host_allowed",
    "internal",
    "normalize_pattern",
    "parse_head",
    "parse_rule",
    "parse_upstream",
    "read_head",
]
