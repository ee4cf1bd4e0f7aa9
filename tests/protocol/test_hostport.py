"""``host:port``: one set of rules, at every place that reads one.

An allowlist entry, the allowlist proxy's request targets (``CONNECT`` and
an absolute ``http://`` URL), ``upstream_proxy`` and ``lovia-mcp serve
--listen`` all read ``host:port`` with ``wire.hostport.parse_hostport``.
Each of them had its own reading before, and each let through a spelling
another refused (``--listen`` took ``[::1`` and ``::1:80``, an allowlist
entry took ``::1:80`` as one address, the proxy took ``http://host:/``,
``upstream_proxy`` took port 0): the table below is refused at every door
(port 0 but by ``--listen``, where it asks for a free port).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lovia.exceptions import UserError
from lovia_mcp_worker.sandbox.egress.netrequest import (
    Answer,
    BadEntry,
    BadUpstream,
    parse_head,
    parse_rule,
    parse_upstream,
)
from lovia_mcp_worker.wire.hostport import BadHostPort, hostport, parse_hostport

from lovia_mcp.gateway.serve import parse_listen


def _connect(text: str) -> object:
    return parse_head([f"CONNECT {text} HTTP/1.1".encode()])


def _get(text: str) -> object:
    return parse_head([f"GET http://{text}/ HTTP/1.1".encode()])


def _upstream(text: str) -> object:
    return parse_upstream(f"http://{text}")


# Each door, and what it raises for a spelling it refuses.
DOORS: dict[str, tuple[Callable[[str], object], type[Exception]]] = {
    "listen": (parse_listen, UserError),
    "allowlist": (parse_rule, BadEntry),
    "connect": (_connect, Answer),
    "get": (_get, Answer),
    "upstream": (_upstream, BadUpstream),
}

MALFORMED = [
    ("[::1", "unterminated '['"),
    ("::1:80", "an IPv6 address must be in brackets"),
    ("2001:db8::1:443", "an IPv6 address must be in brackets"),
    ("example.com:", "invalid port ''"),
    ("example.com:99999", "invalid port '99999'"),
    ("example.com:0", "invalid port '0'"),
    ("example.com:+80", "invalid port '+80'"),
    (":80", "no host"),
    ("[example.com]:80", "brackets are for IPv6"),
    ("[::1]80", "expected ':PORT'"),
]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("door", "text", "why"),
    [
        (door, text, why)
        for door in sorted(DOORS)
        for text, why in MALFORMED
        if (door, text) != ("listen", "example.com:0")
    ],
)
def test_a_malformed_host_port_is_refused_at_every_door_saying_why(door: str, text: str, why: str) -> None:
    read, refusal = DOORS[door]

    with pytest.raises(refusal) as refused:
        read(text)

    assert why in str(refused.value)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("example.com:443", ("example.com", 443)),
        ("127.0.0.1:1", ("127.0.0.1", 1)),
        ("[::1]:65535", ("::1", 65535)),
        ("[::1]", ("::1", None)),
        ("example.com", ("example.com", None)),
        # Without brackets an IPv6 address takes no port; where it cannot be read as one, it is whole.
        ("::1", ("::1", None)),
        ("fe80::1%eth0", ("fe80::1%eth0", None)),
        ("fc00::/7", ("fc00::/7", None)),
    ],
)
def test_a_well_formed_host_port_reads_as_host_and_port(text: str, parsed: tuple[str, int | None]) -> None:
    assert parse_hostport(text) == parsed


@pytest.mark.unit
def test_what_hostport_writes_parse_hostport_reads_back() -> None:
    for host, port in [("example.com", 443), ("10.0.0.1", 8080), ("::1", 80), ("2001:db8::1", 65535)]:
        assert parse_hostport(hostport(host, port)) == (host, port)


@pytest.mark.unit
def test_a_url_authority_and_a_listening_address_differ_only_where_asked() -> None:
    with pytest.raises(BadHostPort) as bare:
        parse_hostport("fe80::1", bare_ipv6=False)
    assert "in brackets" in bare.value.why and "'[::1]:8080'" in bare.value.hint
    assert parse_hostport("127.0.0.1:0", port_zero=True) == ("127.0.0.1", 0)
    assert parse_listen("[::1]:0") == ("::1", 0)
    with pytest.raises(UserError) as no_port:
        parse_listen("127.0.0.1")
    assert "no port" in str(no_port.value) and no_port.value.hint and "--listen 127.0.0.1:8765" in no_port.value.hint
