"""``host:port``, read and written by one set of rules on both sides.

Every place that reads a ``host:port`` (an allowlist entry, a request's
authority in the allowlist proxy, ``upstream_proxy``, ``lovia-mcp serve
--listen``) reads it with :func:`parse_hostport`, and every place that
writes one writes it with :func:`hostport`:

- an IPv6 address is written in brackets, with or without a port
  (``[::1]``, ``[::1]:8080``); brackets hold nothing else;
- a name or an IPv4 address takes ``:PORT`` directly (``example.com:443``);
- a port is decimal digits, 1 to 65535 (0 only for a listening address,
  where it asks for a free one);
- a host is never empty (``:80`` is refused), nor a port after a colon
  (``host:`` is refused);
- an IPv6 address without brackets (``fe80::1``, where a caller allows it)
  takes no port, and is refused if it reads as well as an address and a
  port (``::1:80``: ``[::1]:80`` or ``[::1:80]``?).

What the host must be beyond that (a name, an address, a range) is the
caller's to check; so is whether a port is required.
"""

from __future__ import annotations

import contextlib
from typing import Final

HINT: Final = (
    "Write HOST:PORT with a port from 1 to 65535: 'example.com:443', '127.0.0.1:8080', "
    "an IPv6 address in brackets ('[::1]:8080')."
)


class BadHostPort(ValueError):
    """A ``host:port`` that breaks the rules: ``why`` says which, ``hint`` how to write one."""

    def __init__(self, text: str, why: str) -> None:
        super().__init__(f"{text!r}: {why}")
        self.why, self.hint = why, HINT


def hostport(host: object, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (as a request target, an allowlist entry and a log spell it)."""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _port(text: str, port_text: str, *, zero: bool) -> int:
    low = 0 if zero else 1
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and low <= int(port_text) <= 65535):
        raise BadHostPort(text, f"invalid port {port_text!r} ({low} to 65535)")
    return int(port_text)


def _is_ipv6(text: str) -> bool:
    # Imported here: every worker's session host writes host:port (its denials), few ever read one.
    import ipaddress

    with contextlib.suppress(ValueError):
        ipaddress.IPv6Address(text)
        return True
    return False


def parse_hostport(text: str, *, bare_ipv6: bool = True, port_zero: bool = False) -> tuple[str, int | None]:
    """``text`` as ``(host, port)``, the host without brackets, the port None where none is written.

    ``bare_ipv6=False``: an IPv6 address must be in brackets even without a
    port (a URL's authority). ``port_zero``: port 0 is allowed (a listening
    address). :class:`BadHostPort` saying what is wrong otherwise.
    """
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadHostPort(text, "unterminated '[' (an IPv6 address in brackets: '[::1]:8080')")
        host, rest = text[1:end], text[end + 1 :]
        if ":" not in host:
            raise BadHostPort(text, "brackets are for IPv6 addresses ('[::1]:8080')")
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise BadHostPort(text, "expected ':PORT' after ']'")
        return host, _port(text, rest[1:], zero=port_zero)
    colons = text.count(":")
    if colons == 1:
        host, _, port_text = text.partition(":")
        if not host:
            raise BadHostPort(text, "no host before the ':PORT'")
        return host, _port(text, port_text, zero=port_zero)
    if not text:
        raise BadHostPort(text, "no host")
    if colons == 0:
        return text, None
    if not bare_ipv6:
        raise BadHostPort(text, "an IPv6 address must be in brackets ('[::1]:8080')")
    head, _, tail = text.rpartition(":")
    if tail.isascii() and tail.isdigit() and _is_ipv6(head):
        raise BadHostPort(
            text,
            f"an IPv6 address must be in brackets to take a port ('[{head}]:{tail}'), or to be read whole ('[{text}]')",
        )
    return text, None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, no brackets) is this machine's loopback: ``localhost`` or 127/8, ::1."""
    if host == "localhost":
        return True
    import ipaddress  # as in _is_ipv6: only the agent's few checks need it

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["HINT", "BadHostPort", "hostport", "is_loopback", "parse_hostport"]
