"""Egress that cannot be turned inward: the allowlist proxy's address check.

An allowed name is resolved once; each address it resolves to must be on the
internet, or be listed as an address or range. Pure tests of the check (many
spellings, as an attacker writes them), then the proxy in-process with a
resolver table for names under ``allowed-api.test`` (``socket.getaddrinfo``
replaced: every other name is refused, so no lookup leaves the machine, and
every address connected to is a loopback one). The same thing end to end, in
a real sandbox with the name mapped by ``/etc/hosts``, is in
``test_egress_sandboxed.py``.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import pytest
from helpers import LocalHTTP, bounded, exchange
from lovia_mcp_worker.sandbox.egress import netproxy, netroute
from lovia_mcp_worker.sandbox.egress.netrequest import (
    Address,
    Allowlist,
    BadEntry,
    as_address,
    parse_head,
    parse_rule,
)
from lovia_mcp_worker.wire.refusals import EgressRefusal, words


def internal(address: Address) -> EgressRefusal | None:
    """The refusal of a name allowed on every port that resolves to ``address`` (None: it passes)."""
    return Allowlist(["x.test"]).screen("x.test", address, 80)


# --- the address check (pure) ------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # carrier-grade NAT
        ("169.254.169.254", "link-local address: the cloud metadata service"),
        ("169.254.1.1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "reserved"),
        ("198.18.0.1", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("febf:ffff::1", "link-local"),
        ("fc00::1", "private"),
        ("fd00:ec2::254", "private address: the cloud metadata service"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "reserved"),
        ("100::1", "reserved"),
        ("2001::1", "reserved"),  # Teredo
        ("5f00::1", "reserved"),  # outside global unicast
        ("64:ff9b:1::1", "private"),  # local-use NAT64
        # IPv6 forms that carry an IPv4 address are judged by it.
        ("::ffff:127.0.0.1", "loopback address (127.0.0.1) in IPv6 form"),
        ("::ffff:169.254.169.254", "link-local address (169.254.169.254) in IPv6 form"),
        ("::ffff:10.0.0.1", "private address (10.0.0.1)"),
        ("::127.0.0.1", "loopback address (127.0.0.1)"),  # IPv4-compatible
        ("::ffff:0:127.0.0.1", "loopback address (127.0.0.1)"),  # SIIT
        ("64:ff9b::127.0.0.1", "loopback address (127.0.0.1)"),  # NAT64
        ("64:ff9b::10.0.0.1", "private address (10.0.0.1)"),
        ("64:ff9b::169.254.169.254", "link-local address (169.254.169.254)"),
        ("2002:7f00:1::1", "loopback address (127.0.0.1)"),  # 6to4
        ("2002:a9fe:a9fe::", "link-local address (169.254.169.254)"),
        ("::8.8.8.8", "reserved"),  # IPv4-compatible: deprecated, whatever it carries
    ],
)
@pytest.mark.unit
def test_an_internal_address_in_any_form_is_named_by_its_kind(address: str, kind: str) -> None:
    refusal = internal(ipaddress.ip_address(address))

    assert refusal is not None and refusal.why == kind.split(" ")[0], refusal
    reason = words(refusal, "reason")
    assert kind in reason, reason
    assert reason.startswith(f"resolves to {ipaddress.ip_address(address)}, ")


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "172.15.255.255",
        "172.32.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "169.253.255.255",
        "223.255.255.255",
        "2606:4700:4700::1111",
        "2a00:1450::1",
        "::ffff:8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::1",
    ],
)
@pytest.mark.unit
def test_an_address_on_the_internet_passes(address: str) -> None:
    assert internal(ipaddress.ip_address(address)) is None


LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "0x7f.1",
    "0X7F.0.0.1",
    "0x7f000001",
    "2130706433",
    "0177.0.0.1",
    "017700000001",
    "127.0.0.1.",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
]


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
@pytest.mark.unit
def test_every_spelling_of_the_loopback_in_a_connect_line_or_url_is_an_address_listed_only_as_one(
    spelling: str,
) -> None:
    for head in (f"CONNECT {spelling}:8080 HTTP/1.1", f"GET http://{spelling}:8080/x HTTP/1.1"):
        request = parse_head([head.encode()])
        address = as_address(request.host)

        assert address is not None and str(ipaddress.ip_address("127.0.0.1")) in (
            str(address),
            str(getattr(address, "ipv4_mapped", "")),
        )
        # Not a name: a wildcard never matches it, listing the name "localhost" does not allow it.
        assert Allowlist(["*.allowed-api.test", "*.0.1.test", "localhost"]).refuses(request.host, 8080) is not None
        assert Allowlist(["127.0.0.1"]).refuses(request.host, 8080) is None
        assert Allowlist(["127.0.0.0/8:8080"]).refuses(request.host, 8080) is None
        assert Allowlist(["127.0.0.1:80"]).refuses(request.host, 8080) is not None


@pytest.mark.parametrize("spelling", ["0", "0.0", "0x0", "0.0.0.0", "[::]", "[::ffff:0.0.0.0]"])
@pytest.mark.unit
def test_the_unspecified_address_which_linux_connects_to_the_loopback_is_refused_unless_listed(spelling: str) -> None:
    host = parse_head([f"CONNECT {spelling}:80 HTTP/1.1".encode()]).host

    assert Allowlist(["*.allowed-api.test", "127.0.0.1"]).refuses(host, 80) is not None
    address = as_address(host)
    assert address is not None and internal(address) is not None


@pytest.mark.unit
def test_an_allowed_name_that_resolves_inward_is_refused_naming_the_address_and_what_to_list() -> None:
    rules = Allowlist(["*.allowed-api.test"])
    name = "inside.allowed-api.test"

    assert rules.refuses(name, 443) is None  # the name passes; its address does not
    for address, kind in [
        ("127.0.0.1", "a loopback address"),
        ("169.254.169.254", "a link-local address: the cloud metadata service"),
        ("10.0.0.7", "a private address"),
        ("fe80::1", "a link-local address"),
        ("fd12::1", "a private address"),
        ("::ffff:192.168.0.1", "a private address (192.168.0.1) in IPv6 form"),
    ]:
        refusal = rules.screen(name, ipaddress.ip_address(address), 443)
        assert refusal is not None and (refusal.kind, refusal.host, refusal.port) == ("internal_address", name, 443)
        shown = str(ipaddress.ip_address(address))
        assert words(refusal, "reason") == f"resolves to {shown}, {kind}"
        listed = address.removeprefix("::ffff:")
        text = words(refusal, "client")
        assert f"lovia-mcp sandbox: {name} resolves to {shown}, {kind}, which" in text
        assert f"add '{listed}'" in text and "Sandbox(network=[...])" in text
    assert rules.screen(name, ipaddress.ip_address("93.184.216.34"), 443) is None


@pytest.mark.parametrize(
    ("listed", "address", "port", "allowed"),
    [
        ("127.0.0.1", "127.0.0.1", 8080, True),
        ("127.0.0.1", "127.0.0.2", 8080, False),
        ("127.0.0.0/8", "127.0.0.2", 8080, True),
        ("127.0.0.1:8080", "127.0.0.1", 8080, True),
        ("127.0.0.1:8080", "127.0.0.1", 8081, False),
        ("10.0.0.0/8", "10.200.0.1", 5432, True),
        ("10.0.0.0/8:5432", "10.200.0.1", 5433, False),
        ("169.254.169.254", "169.254.169.254", 80, True),
        ("[::1]", "::1", 80, True),
        ("[::1]:8080", "::1", 8080, True),
        ("[::1]:8080", "::1", 80, False),
        ("fc00::/7", "fd00:ec2::254", 80, True),
        ("127.0.0.1", "::ffff:127.0.0.1", 80, True),  # the same destination
        ("127.0.0.1", "64:ff9b::127.0.0.1", 80, False),  # a translator's loopback, not ours
        ("::/0", "127.0.0.1", 80, False),  # a range holds addresses of its own family only
    ],
)
@pytest.mark.unit
def test_an_address_or_range_entry_allows_exactly_its_addresses_on_its_port(
    listed: str, address: str, port: int, allowed: bool
) -> None:
    denial = Allowlist(["*.allowed-api.test", listed]).screen("x.allowed-api.test", ipaddress.ip_address(address), port)

    assert (denial is None) is allowed


@pytest.mark.unit
def test_a_name_entry_with_a_port_allows_that_port_only_and_says_so() -> None:
    rules = Allowlist(["db.internal:5432", "*.allowed-api.test:443", "any.test"])

    assert rules.refuses("db.internal", 5432) is None
    assert rules.refuses("x.allowed-api.test", 443) is None
    assert rules.refuses("any.test", 1) is None and rules.refuses("any.test", 65535) is None
    refusal = rules.refuses("db.internal", 22)
    assert refusal == EgressRefusal(kind="allowlist", host="db.internal", port=22, why="port")
    assert words(refusal, "reason") == "port 22 not in the network allowlist"
    assert "add 'db.internal:22'" in words(refusal, "client")
    other = rules.refuses("x.allowed-api.test", 80)
    assert other is not None and words(other, "reason") == "port 80 not in the network allowlist"
    unknown = rules.refuses("elsewhere.test", 443)
    assert unknown == EgressRefusal(kind="allowlist", host="elsewhere.test", port=443, why="host")
    assert words(unknown, "reason") == "not in the network allowlist"


@pytest.mark.parametrize(
    ("entry", "normal"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1/32", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[::1]:8080", "[::1]:8080"),
        ("fc00::/7", "fc00::/7"),
        ("[fc00::/7]:5432", "[fc00::/7]:5432"),
        ("10.0.0.0/8:5432", "10.0.0.0/8:5432"),
        ("DB.Internal.:5432", "db.internal:5432"),
        ("*.Allowed-API.test:443", "*.allowed-api.test:443"),
        ("api.github.com", "api.github.com"),
    ],
)
@pytest.mark.unit
def test_a_valid_entry_is_read_in_one_canonical_form(entry: str, normal: str) -> None:
    assert str(parse_rule(entry)) == normal


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("10.0.0.1/8", "host bits set"),
        ("10.0.0.0/33", "not a valid address range"),
        ("300.0.0.0/8", "not a valid address range"),
        ("fc00::/129", "not a valid address range"),
        ("*.10.0.0.0/8", "a range takes no wildcard"),
        ("api.test/v1", "a path has no place here"),
        ("https://api.test", "scheme"),
        ("127.1", "written plainly ('127.0.0.1')"),
        ("0x7f.0.0.1", "written plainly ('127.0.0.1')"),
        ("010.0.0.1", "written plainly ('8.0.0.1')"),  # inet_aton reads a leading 0 as octal
        ("db.internal:0", "invalid port '0'"),
        ("db.internal:65536", "invalid port '65536'"),
        ("db.internal:ssh", "invalid port 'ssh'"),
        ("[db.internal]:5432", "brackets are for IPv6"),
        ("[::1]8080", "expected ':PORT'"),
        ("fe80::1%eth0", "scope id"),
        ("*.1", "a wildcard needs a domain name"),
    ],
)
@pytest.mark.unit
def test_a_bad_entry_is_refused_with_what_is_wrong_and_a_hint(entry: str, why: str) -> None:
    with pytest.raises(BadEntry) as caught:
        parse_rule(entry)

    assert why in caught.value.why
    assert "'10.0.0.0/8'" in caught.value.hint and "'db.internal:5432'" in caught.value.hint
    assert str(caught.value).startswith(f"invalid network allowlist entry {entry!r}: ")


# --- the proxy, in-process, with a resolver table ----------------------------


Answers = Callable[[], list[str]]


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[dict[str, Answers], list[str]]]:
    """``(table, lookups)``: names answered from ``table``; literals as the system reads them; the rest refused."""
    table: dict[str, Answers] = {}
    lookups: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> Any:
        if host in table:
            lookups.append(host)
            out = []
            for text in table[host]():
                address = ipaddress.ip_address(text)
                sockaddr = (text, port) if address.version == 4 else (text, port, 0, 0)
                fam = socket.AF_INET if address.version == 4 else socket.AF_INET6
                out.append((fam, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
            return out
        try:
            return real(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)
        except socket.gaierror:
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: not in the test's resolver table") from None

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield table, lookups


def Listener(host: str = "127.0.0.1", port: int = 0) -> LocalHTTP:  # noqa: N802 - read as the class it makes
    """A service on one loopback address that says which address it is."""
    return LocalHTTP(host, port, answer=lambda _: f"hello from {host}")


class Decided(NamedTuple):
    """One call of the proxy's ``on_decision``."""

    host: str
    port: int
    refusal: EgressRefusal | None

    @property
    def allowed(self) -> bool:
        return self.refusal is None


@asynccontextmanager
async def proxy_for(sock_path: str, allowed: Sequence[str]) -> AsyncIterator[list[Decided]]:
    decisions: list[Decided] = []

    def decided(host: str, port: int, refusal: EgressRefusal | None) -> None:
        decisions.append(Decided(host, port, refusal))

    async with await netproxy.start(allowed, sock_path, on_decision=decided):
        yield decisions


def get(host: str, port: int, path: str = "/") -> bytes:
    return f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


def tunnel(host: str, port: int, path: str = "/") -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\n\r\nGET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


@pytest.mark.unit
def test_a_name_under_an_allowed_wildcard_mapped_to_the_loopback_is_refused_until_the_address_is_listed(
    sock_path: str, names: tuple[dict[str, Answers], list[str]]
) -> None:
    table, _ = names
    table["inside.allowed-api.test"] = lambda: ["127.0.0.1"]

    async def main() -> None:
        async with Listener() as service:
            async with proxy_for(sock_path, ["*.allowed-api.test"]) as decisions:
                for request in (tunnel, get):
                    response = await exchange(sock_path, request("inside.allowed-api.test", service.port))
                    head, _, body = response.partition(b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 403 Forbidden (resolves to 127.0.0.1, a loopback address)\r\n"), (
                        head
                    )
                    assert body.decode() == (
                        "lovia-mcp sandbox: inside.allowed-api.test resolves to 127.0.0.1, a loopback address, "
                        "which the sandbox refuses unless it is listed. To allow it, add '127.0.0.1' (or "
                        f"'127.0.0.1:{service.port}', or a range holding it) to Sandbox(network=[...]).\n"
                    )
                assert service.accepted == 0
                refusal = EgressRefusal(
                    kind="internal_address",
                    host="inside.allowed-api.test",
                    port=service.port,
                    why="loopback",
                    address="127.0.0.1",
                )
                assert [(d.host, d.refusal) for d in decisions] == [("inside.allowed-api.test", refusal)] * 2

            for listed in ("127.0.0.1", "127.0.0.0/8", f"127.0.0.1:{service.port}"):
                async with proxy_for(sock_path, ["*.allowed-api.test", listed]) as decisions:
                    response = await exchange(sock_path, tunnel("inside.allowed-api.test", service.port, f"/{listed}"))
                    assert response.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK")
                    assert response.endswith(b"hello from 127.0.0.1")
                    assert [d.allowed for d in decisions] == [True]
            assert service.accepted == 3

    bounded(main())


@pytest.mark.unit
def test_the_address_connected_to_is_the_one_checked_so_a_second_answer_cannot_swap_it(
    sock_path: str, names: tuple[dict[str, Answers], list[str]]
) -> None:
    # DNS rebinding: the first answer passes the check, a later one would not.
    # Both are loopback addresses here; only 127.0.0.2 is listed.
    table, lookups = names
    answers = iter([["127.0.0.2"]])
    table["rebind.allowed-api.test"] = lambda: next(answers, ["127.0.0.1"])

    async def main() -> None:
        async with Listener("127.0.0.1") as victim, Listener("127.0.0.2", victim.port) as checked:
            async with proxy_for(sock_path, ["*.allowed-api.test", "127.0.0.2"]):
                response = await exchange(sock_path, tunnel("rebind.allowed-api.test", checked.port))

            assert response.endswith(b"hello from 127.0.0.2")
            assert (checked.accepted, victim.accepted) == (1, 0)
            assert lookups == ["rebind.allowed-api.test"]

    bounded(main())


@pytest.mark.unit
def test_every_resolved_address_is_checked_and_the_checked_ones_tried_in_order(
    sock_path: str, names: tuple[dict[str, Answers], list[str]]
) -> None:
    table, _ = names
    table["mixed.allowed-api.test"] = lambda: ["127.0.0.3", "127.0.0.1"]

    async def main() -> None:
        async with Listener("127.0.0.1") as listed, Listener("127.0.0.3", listed.port) as unlisted:
            # 127.0.0.3 is refused, so skipped without a connection; 127.0.0.1 is reached.
            async with proxy_for(sock_path, ["*.allowed-api.test", "127.0.0.1"]):
                response = await exchange(sock_path, tunnel("mixed.allowed-api.test", listed.port))
            assert response.endswith(b"hello from 127.0.0.1")
            assert (listed.accepted, unlisted.accepted) == (1, 0)

        async with Listener("127.0.0.1") as second:
            # Both listed; nothing listens on 127.0.0.3 at this port, so the second is tried.
            async with proxy_for(sock_path, ["*.allowed-api.test", "127.0.0.0/8"]):
                response = await exchange(sock_path, tunnel("mixed.allowed-api.test", second.port))
            assert response.endswith(b"hello from 127.0.0.1")
            assert second.accepted == 1

    bounded(main())


@pytest.mark.unit
def test_loopback_spellings_in_a_request_reach_the_loopback_only_when_it_is_listed(sock_path: str) -> None:
    async def main() -> None:
        async with Listener() as service:
            async with proxy_for(sock_path, ["*.allowed-api.test", "localhost"]) as decisions:
                for spelling in LOOPBACK_SPELLINGS:
                    response = await exchange(sock_path, tunnel(spelling, service.port))
                    assert response.startswith(b"HTTP/1.1 403 Forbidden (not in the network allowlist)\r\n"), spelling
                response = await exchange(sock_path, tunnel("0", service.port))
                assert response.startswith(b"HTTP/1.1 403 "), "0.0.0.0 connects to the loopback on Linux"
            assert service.accepted == 0
            assert not any(d.allowed for d in decisions)

            async with proxy_for(sock_path, ["127.0.0.1"]):
                for spelling in LOOPBACK_SPELLINGS:
                    response = await exchange(sock_path, get(spelling, service.port, "/spelled"))
                    assert response.endswith(b"hello from 127.0.0.1"), spelling
            assert service.accepted == len(LOOPBACK_SPELLINGS)

    bounded(main())


@pytest.mark.unit
def test_a_port_entry_lets_that_port_through_and_refuses_the_others(sock_path: str) -> None:
    async def main() -> None:
        async with Listener() as service, Listener() as other:
            entries = [f"localhost:{service.port}", f"127.0.0.1:{service.port}"]
            async with proxy_for(sock_path, entries) as decisions:
                allowed = await exchange(sock_path, tunnel("localhost", service.port))
                refused = await exchange(sock_path, tunnel("localhost", other.port))

            assert allowed.endswith(b"hello from 127.0.0.1")
            assert refused.startswith(
                f"HTTP/1.1 403 Forbidden (port {other.port} not in the network allowlist)".encode()
            )
            assert f"add 'localhost:{other.port}'".encode() in refused
            assert (service.accepted, other.accepted) == (1, 0)
            assert [d.allowed for d in decisions] == [True, False]

            # The name on every port, its address on one: the address entry decides.
            async with proxy_for(sock_path, ["localhost", f"127.0.0.1:{service.port}"]):
                refused = await exchange(sock_path, tunnel("localhost", other.port))
            assert refused.startswith(b"HTTP/1.1 403 Forbidden (resolves to 127.0.0.1, a loopback address)")
            assert other.accepted == 0

    bounded(main())


@pytest.mark.unit
def test_the_workers_log_line_names_the_refusal_and_its_reason(
    sock_path: str, names: tuple[dict[str, Answers], list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    table, _ = names
    table["inside.allowed-api.test"] = lambda: ["127.0.0.1"]

    async def main() -> None:
        env: dict[str, str] = {}
        try:
            path, _ = await netroute.route(["*.allowed-api.test"], ["true"], env)
            await exchange(path, tunnel("inside.allowed-api.test", 8443))
            await exchange(path, tunnel("elsewhere.test", 443))
        finally:
            await netroute.aclose_all()

    with caplog.at_level(logging.WARNING, logger="lovia_mcp.netproxy"):
        bounded(main())
    assert [r.getMessage() for r in caplog.records if r.name == "lovia_mcp.netproxy"] == [
        "sandbox proxy refused inside.allowed-api.test:8443 (resolves to 127.0.0.1, a loopback address)",
        "sandbox proxy refused elsewhere.test:443 (not in the network allowlist)",
    ]


@pytest.mark.unit
def test_a_name_that_does_not_resolve_gets_a_502_and_counts_as_allowed(
    sock_path: str, names: tuple[dict[str, Answers], list[str]]
) -> None:
    async def main() -> None:
        async with proxy_for(sock_path, ["*.allowed-api.test"]) as decisions:
            response = await exchange(sock_path, tunnel("nowhere.allowed-api.test", 443))

        assert response.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        assert b"cannot connect to nowhere.allowed-api.test:443" in response
        assert [(d.host, d.allowed) for d in decisions] == [("nowhere.allowed-api.test", True)]

    bounded(main())
