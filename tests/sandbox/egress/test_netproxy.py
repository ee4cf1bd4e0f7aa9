"""The sandbox's allowlist proxy (``netproxy``) and its in-sandbox bridge (``_netbridge.py``).

Real sockets, loopback only: the proxy is reached over its unix socket, the
upstreams are small HTTP servers on 127.0.0.1 that the tests start, and the
only allowed name that is ever resolved is ``localhost`` (with ``127.0.0.1``
listed: an allowed name reaches a loopback address only then). The bridge
runs as a subprocess without bwrap, with a client program executed behind
it. The address check itself is tested in ``test_egress.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import textwrap
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psutil
import pytest
from helpers import PY, LocalHTTP, LocalUpstream, LoopbackServer, bounded, exchange, pid_alive
from lovia_mcp_worker.sandbox.egress import netbridge, netproxy
from lovia_mcp_worker.sandbox.egress.netproxy import host_allowed
from lovia_mcp_worker.sandbox.egress.netrequest import BadUpstream, Upstream, parse_upstream
from lovia_mcp_worker.wire.refusals import EgressRefusal

Decision = tuple[str, int, bool]

# An allowed name for the upstreams on 127.0.0.1, and that address listed.
LOCAL = ["localhost", "127.0.0.1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def proxied(
    sock_path: str, allowed: Sequence[str]
) -> AsyncIterator[tuple[netproxy.Proxy, LocalHTTP, list[Decision]]]:
    decisions: list[Decision] = []
    async with LocalHTTP() as upstream:
        proxy = await netproxy.start(
            allowed, sock_path, on_decision=lambda host, port, refused: decisions.append((host, port, refused is None))
        )
        try:
            yield proxy, upstream, decisions
        finally:
            await proxy.aclose()


def status_and_body(response: bytes) -> tuple[int, str]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


def connect(host: str, port: int) -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


GET_THROUGH_TUNNEL = b"GET /through-the-tunnel HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


# --- host matching (pure) --------------------------------------------------


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("api.github.com", True),
        ("API.GitHub.COM", True),
        ("api.github.com.", True),
        ("github.com", False),
        ("xapi.github.com", False),
        ("api.github.com.evil.test", False),
        ("registry.npmjs.org", True),
        ("npmjs.org", False),
    ],
)
@pytest.mark.unit
def test_exact_names_match_case_insensitively_ignoring_a_trailing_dot(host: str, allowed: bool) -> None:
    assert host_allowed(host, ["api.github.com", "*.npmjs.org"]) is allowed


@pytest.mark.parametrize(
    ("host", "patterns", "allowed"),
    [
        ("a.example.test", ["*.example.test"], True),
        ("b.a.example.test", ["*.example.test"], True),
        ("A.Example.Test.", ["*.EXAMPLE.test."], True),
        ("example.test", ["*.example.test"], False),
        ("badexample.test", ["*.example.test"], False),
        ("a.example.test.evil", ["*.example.test"], False),
        ("example.test", ["*.example.test", "example.test"], True),
    ],
)
@pytest.mark.unit
def test_a_wildcard_matches_subdomains_at_any_depth_but_not_the_domain_itself(
    host: str, patterns: list[str], allowed: bool
) -> None:
    assert host_allowed(host, patterns) is allowed


@pytest.mark.parametrize(
    ("host", "patterns", "allowed"),
    [
        ("127.0.0.1", ["localhost"], False),
        ("127.0.0.1", ["127.0.0.1"], True),
        ("127.0.0.2", ["127.0.0.1"], False),
        ("::1", ["::1"], True),
        ("[::1]", ["0:0::1"], True),
        ("::1", ["localhost", "127.0.0.1"], False),
        # Names a resolver reads as addresses (inet_aton) are addresses too.
        ("127.1", ["localhost"], False),
        ("127.1", ["127.0.0.1"], True),
        ("0177.0.0.1", ["127.0.0.0/8"], True),
        ("127.1", ["127.1"], False),  # an entry writes an address plainly, or is invalid
        ("2130706433", ["localhost"], False),
        ("2130706433", ["127.0.0.1:80"], True),
        ("[::ffff:127.0.0.1]", ["127.0.0.1"], True),
        ("10.1.2.3", ["10.0.0.0/8"], True),
        ("11.1.2.3", ["10.0.0.0/8"], False),
        ("::1", ["::/127"], True),
        ("0x7f.1", ["*.1", "*.0x7f.1"], False),
        ("10.0.0.1", ["*.0.0.1"], False),
    ],
)
@pytest.mark.unit
def test_an_address_matches_only_an_address_or_range_entry_holding_it(
    host: str, patterns: list[str], allowed: bool
) -> None:
    assert host_allowed(host, patterns) is allowed


@pytest.mark.parametrize("host", ["", ".", "exa mple.test", "a..example.test", "ex%61mple.test", "example.test:443"])
@pytest.mark.unit
def test_a_string_that_is_no_host_name_never_matches(host: str) -> None:
    assert host_allowed(host, ["*.example.test", "example.test", host]) is False


@pytest.mark.parametrize(
    "entry",
    [
        "*",
        "",
        "api.*.test",
        "https://api.example.test",
        "api.example.test/path",
        "*.127.0.0.1",
        "api.example.test:0",
        "api.example.test:https",
        "10.0.0.1/8",
        "10.0.0.0/33",
        "*.10.0.0.0/8",
        "127.1",
        "[api.example.test]:443",
        "fe80::1%eth0",
        "[::1]:8o",
    ],
)
@pytest.mark.unit
def test_start_refuses_a_malformed_allowlist_entry_with_a_hint_before_binding(sock_path: str, entry: str) -> None:
    with pytest.raises(ValueError, match="invalid network allowlist entry") as caught:
        bounded(netproxy.start(["api.example.test", entry], sock_path))

    assert "'*.npmjs.org'" in str(caught.value)
    assert not os.path.exists(sock_path)


@pytest.mark.unit
def test_a_non_ascii_allowlist_entry_matches_its_idna_form() -> None:
    assert netproxy.normalize_pattern("*.Bücher.test") == "*.xn--bcher-kva.test"
    assert host_allowed("www.xn--bcher-kva.test", ["*.bücher.test"])


# --- the proxy -------------------------------------------------------------


@pytest.mark.unit
def test_connect_to_an_allowed_name_tunnels_to_the_server_behind_it(sock_path: str) -> None:
    async def main() -> None:
        async with proxied(sock_path, LOCAL) as (proxy, upstream, decisions):
            reader, writer = await asyncio.open_unix_connection(sock_path)
            writer.write(connect("localhost", upstream.port))
            established = await reader.readuntil(b"\r\n\r\n")
            writer.write(GET_THROUGH_TUNNEL)
            response = await reader.read()
            writer.close()
            await writer.wait_closed()

            assert established == b"HTTP/1.1 200 Connection established\r\n\r\n"
            assert status_and_body(response) == (200, "upstream saw: GET /through-the-tunnel HTTP/1.1\n")
            assert decisions == [("localhost", upstream.port, True)]
            assert proxy.denied == 0

    bounded(main())


@pytest.mark.unit
def test_a_plain_get_to_an_allowed_name_is_forwarded_in_origin_form_without_proxy_headers(sock_path: str) -> None:
    async def main() -> None:
        async with proxied(sock_path, LOCAL) as (_, upstream, decisions):
            response = await exchange(
                sock_path,
                f"GET http://LocalHost:{upstream.port}/some/path?q=1#frag HTTP/1.1\r\n"
                "Host: somewhere.else\r\n"
                "Proxy-Connection: keep-alive\r\n"
                "Proxy-Authorization: Basic c2VjcmV0\r\n"
                "Connection: keep-alive, X-Hop\r\n"
                "X-Hop: dropped\r\n"
                "User-Agent: test\r\n\r\n".encode(),
            )

            assert status_and_body(response) == (200, "upstream saw: GET /some/path?q=1 HTTP/1.1\n")
            assert upstream.requests == [
                [
                    "GET /some/path?q=1 HTTP/1.1",
                    f"Host: LocalHost:{upstream.port}",
                    "User-Agent: test",
                    "Connection: close",
                ]
            ]
            assert decisions == [("localhost", upstream.port, True)]

    bounded(main())


# --- through an upstream proxy ---------------------------------------------


@asynccontextmanager
async def through_upstream(
    sock_path: str,
    allowed: Sequence[str],
    answer: str = "HTTP/1.1 200 Connection established",
    url: str = "",
    no_proxy: Sequence[str] = (),
) -> AsyncIterator[tuple[netproxy.Proxy, LocalHTTP, LocalUpstream, list[Decision]]]:
    decisions: list[Decision] = []
    async with LocalHTTP() as origin, LocalUpstream(origin.port, answer) as upstream:
        proxy = await netproxy.start(
            allowed,
            sock_path,
            on_decision=lambda host, port, refused: decisions.append((host, port, refused is None)),
            upstream=parse_upstream(url or upstream.url, no_proxy),
        )
        try:
            yield proxy, origin, upstream, decisions
        finally:
            await proxy.aclose()


@pytest.mark.unit
def test_through_an_upstream_an_allowed_name_is_asked_of_it_unresolved_and_both_request_forms_are_tunnelled(
    sock_path: str,
) -> None:
    # "pypi.example.test" resolves nowhere: only the upstream, which maps every name to the
    # origin on 127.0.0.1, can reach it.
    async def main() -> None:
        async with through_upstream(sock_path, ["*.example.test"]) as (proxy, origin, upstream, decisions):
            reader, writer = await asyncio.open_unix_connection(sock_path)
            writer.write(connect("pypi.example.test", 443))
            established = await reader.readuntil(b"\r\n\r\n")
            writer.write(GET_THROUGH_TUNNEL)
            tunnelled = await reader.read()
            writer.close()
            await writer.wait_closed()
            plain = await exchange(sock_path, b"GET http://files.example.test/simple/ HTTP/1.1\r\nHost: x\r\n\r\n")

            assert established == b"HTTP/1.1 200 Connection established\r\n\r\n"
            assert status_and_body(tunnelled) == (200, "upstream saw: GET /through-the-tunnel HTTP/1.1\n")
            assert status_and_body(plain) == (200, "upstream saw: GET /simple/ HTTP/1.1\n")
            assert [r[0] for r in upstream.requests] == [
                "CONNECT pypi.example.test:443 HTTP/1.1",
                "CONNECT files.example.test:80 HTTP/1.1",
            ]
            assert all(not any(h.lower().startswith("proxy-authorization") for h in r) for r in upstream.requests)
            assert decisions == [("pypi.example.test", 443, True), ("files.example.test", 80, True)]
            assert proxy.traffic["pypi.example.test"].connections == 1 and proxy.denied == 0

    bounded(main())


@pytest.mark.unit
def test_a_no_proxy_name_is_reached_directly_with_the_address_check_and_the_others_through_the_upstream(
    sock_path: str,
) -> None:
    async def main() -> None:
        allowed = ["*.example.test", "localhost", "*.corp.test"]
        async with through_upstream(sock_path, [*allowed, "127.0.0.1"], no_proxy=["localhost", "*.corp.test"]) as (
            proxy,
            origin,
            upstream,
            decisions,
        ):
            direct = await exchange(
                sock_path, f"GET http://localhost:{origin.port}/here HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            assert status_and_body(direct) == (200, "upstream saw: GET /here HTTP/1.1\n")
            assert upstream.requests == []  # reached without the upstream
            through = await exchange(sock_path, b"GET http://files.example.test/simple/ HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status_and_body(through) == (200, "upstream saw: GET /simple/ HTTP/1.1\n")
            assert [r[0] for r in upstream.requests] == ["CONNECT files.example.test:80 HTTP/1.1"]
            # A direct name is resolved here, so the inward check holds: "db.corp.test" resolves nowhere.
            status, body = status_and_body(await exchange(sock_path, connect("db.corp.test", 5432)))
            assert status in (502, 504) and "db.corp.test" in body, (status, body)
            assert len(upstream.requests) == 1, upstream.requests
        # Reached directly, a name leading to an internal address nobody listed is refused as any direct name is.
        async with through_upstream(sock_path, allowed, no_proxy=["localhost"]) as (_, origin, upstream, decisions):
            status, body = status_and_body(await exchange(sock_path, connect("localhost", origin.port)))
            assert status == 403 and "127.0.0.1" in body, (status, body)
            assert upstream.requests == [] and decisions == [("localhost", origin.port, False)]
        # Without no_proxy the same name goes to the upstream.
        async with through_upstream(sock_path, [*allowed, "127.0.0.1"]) as (_, origin, upstream, _):
            await exchange(sock_path, f"GET http://localhost:{origin.port}/here HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert [r[0] for r in upstream.requests] == [f"CONNECT localhost:{origin.port} HTTP/1.1"]

    bounded(main())


@pytest.mark.unit
def test_through_an_upstream_a_name_outside_the_allowlist_is_refused_here_and_never_asked_of_it(
    sock_path: str,
) -> None:
    async def main() -> None:
        async with through_upstream(sock_path, ["*.example.test"]) as (proxy, _, upstream, decisions):
            status, body = status_and_body(await exchange(sock_path, connect("evil.test", 443)))
            assert status == 403 and "evil.test is not in the sandbox's network allowlist" in body
            assert upstream.requests == [] and decisions == [("evil.test", 443, False)] and proxy.denied == 1

    bounded(main())


@pytest.mark.unit
def test_an_upstream_that_refuses_gives_a_502_quoting_its_status_and_its_credentials_are_sent(sock_path: str) -> None:
    async def main() -> None:
        # The stand-in refuses every CONNECT, as a proxy that wants other credentials would.
        async with (
            LocalHTTP() as origin,
            LocalUpstream(origin.port, "HTTP/1.1 407 Proxy Authentication Required") as up,
        ):
            proxy = await netproxy.start(
                ["a.example.test"], sock_path, upstream=parse_upstream(f"http://us%40r:p%3Ass@127.0.0.1:{up.port}")
            )
            try:
                response = await exchange(sock_path, connect("a.example.test", 443))
            finally:
                await proxy.aclose()
            status, body = status_and_body(response)
            assert response.startswith(b"HTTP/1.1 502 Bad Gateway (HTTP/1.1 407 Proxy Authentication Required)")
            assert status == 502 and "refused a.example.test:443: HTTP/1.1 407" in body
            assert "Proxy-Authorization: Basic dXNAcjpwOnNz" in up.requests[0]  # us@r:p:ss
            assert origin.accepted == 0

    bounded(main())


@pytest.mark.unit
def test_an_upstream_nobody_listens_on_gives_a_502_naming_it(sock_path: str) -> None:
    async def main() -> None:
        port = free_port()
        proxy = await netproxy.start(["a.example.test"], sock_path, upstream=Upstream("127.0.0.1", port))
        try:
            status, body = status_and_body(await exchange(sock_path, connect("a.example.test", 443)))
        finally:
            await proxy.aclose()
        assert status == 502 and f"cannot connect to the upstream proxy 127.0.0.1:{port}" in body

    bounded(main())


@pytest.mark.unit
def test_an_upstream_that_never_answers_gives_a_504_at_the_connect_bound(
    sock_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netproxy, "CONNECT_TIMEOUT", 0.5)

    async def main() -> None:
        heard: list[bytes] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heard.append(await reader.readuntil(b"\r\n\r\n"))
            await reader.read()  # until the proxy gives up on it

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proxy = await netproxy.start(["a.example.test"], sock_path, upstream=Upstream("127.0.0.1", port))
        try:
            status, body = status_and_body(await exchange(sock_path, connect("a.example.test", 443)))
        finally:
            await proxy.aclose()
            server.close()
        assert status == 504 and f"the upstream proxy 127.0.0.1:{port} did not answer" in body
        assert heard and heard[0].startswith(b"CONNECT a.example.test:443 HTTP/1.1")

    bounded(main())


@pytest.mark.unit
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://proxy:3128", "only an http:// proxy"),
        ("http://proxy", "names no host and port"),
        ("proxy:3128", "only an http:// proxy"),
        ("http://proxy:3128/path", "has a path"),
        ("http://proxy:99999", "is not a URL"),
        ("", "expected a URL"),
    ],
)
def test_a_bad_upstream_url_is_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(BadUpstream) as refused:
        parse_upstream(url)
    assert why in refused.value.why and "http://HOST:PORT" in refused.value.hint


@pytest.mark.unit
def test_a_bad_upstream_url_never_shows_its_credentials() -> None:
    for url in ("https://alice:s3cret@proxy:3128", "http://alice:s3cret@proxy:99999", "http://alice:s3cret@proxy"):
        with pytest.raises(BadUpstream) as refused:
            parse_upstream(url)
        assert "s3cret" not in str(refused.value) and "alice" not in str(refused.value)
        assert "//***@proxy" in str(refused.value)


@pytest.mark.unit
def test_an_upstream_url_gives_its_host_port_and_basic_credentials() -> None:
    assert parse_upstream("http://proxy.internal:3128") == Upstream("proxy.internal", 3128)
    assert parse_upstream("http://[::1]:8080/") == Upstream("::1", 8080)
    assert parse_upstream("http://u:p@h:1").authorization == "Basic dTpw"


@pytest.mark.unit
def test_a_name_outside_the_allowlist_gets_a_403_naming_it_and_nothing_is_contacted(sock_path: str) -> None:
    async def main() -> None:
        async with proxied(sock_path, ["localhost", "*.example.test"]) as (proxy, upstream, decisions):
            tunnel = await exchange(sock_path, connect("denied.test", 443))
            plain = await exchange(sock_path, b"GET http://Denied.Test./x HTTP/1.1\r\nHost: denied.test\r\n\r\n")

            for response in (tunnel, plain):
                status, body = status_and_body(response)
                assert response.startswith(b"HTTP/1.1 403 Forbidden (not in the network allowlist)\r\n")
                assert body == (
                    "lovia-mcp sandbox: denied.test is not in the sandbox's network allowlist. "
                    "To reach it, add it to Sandbox(network=[...]).\n"
                )
            assert proxy.denied == 2
            assert decisions == [("denied.test", 443, False), ("denied.test", 80, False)]
            assert upstream.requests == []

    bounded(main())


@pytest.mark.unit
def test_the_proxy_refuses_the_bare_domain_of_a_wildcard(sock_path: str) -> None:
    async def main() -> None:
        async with proxied(sock_path, ["*.example.test"]) as (proxy, _, decisions):
            status, body = status_and_body(await exchange(sock_path, connect("example.test", 443)))

            assert (status, proxy.denied, decisions) == (403, 1, [("example.test", 443, False)])
            assert "example.test is not in the sandbox's network allowlist" in body

    bounded(main())


@pytest.mark.unit
def test_an_ip_literal_is_refused_unless_listed_and_then_reached(sock_path: str) -> None:
    async def main() -> None:
        async with proxied(sock_path, ["localhost"]) as (proxy, upstream, _):
            status, body = status_and_body(await exchange(sock_path, connect("127.0.0.1", upstream.port)))
            assert (status, proxy.denied) == (403, 1)
            assert "127.0.0.1 is not in the sandbox's network allowlist" in body

        async with proxied(sock_path, ["127.0.0.1"]) as (proxy, upstream, decisions):
            response = await exchange(sock_path, connect("127.0.0.1", upstream.port) + GET_THROUGH_TUNNEL)
            established, _, rest = response.partition(b"\r\n\r\n")

            assert established == b"HTTP/1.1 200 Connection established"
            assert status_and_body(rest) == (200, "upstream saw: GET /through-the-tunnel HTTP/1.1\n")
            assert decisions == [("127.0.0.1", upstream.port, True)]

    bounded(main())


@pytest.mark.parametrize(
    ("request_bytes", "reason"),
    [
        (b"HELLO\r\n\r\n", "expected 'METHOD target HTTP/1.x'"),
        (b"GET http://localhost/ HTTP/2.0\r\n\r\n", "expected 'METHOD target HTTP/1.x'"),
        (b"CONNECT localhost HTTP/1.1\r\n\r\n", "CONNECT needs host:port"),
        (b"CONNECT localhost:99999 HTTP/1.1\r\n\r\n", "invalid port"),
        (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", "an IPv6 address must be in brackets"),
        (b"CONNECT user@localhost:443 HTTP/1.1\r\n\r\n", "user information"),
        (b"CONNECT bad!name:443 HTTP/1.1\r\n\r\n", "invalid host name"),
        (b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n", "this is a proxy"),
        (b"GET https://localhost/ HTTP/1.1\r\n\r\n", "use CONNECT host:443 for https"),
        (b"GET ftp://localhost/ HTTP/1.1\r\n\r\n", "unsupported request target"),
        (b"GET http://localhost/ HTTP/1.1\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"GET http://localhost/ HTTP/1.1\r\n folded: header\r\n\r\n", "malformed header line"),
        (b"GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\n", "ended inside the request head"),
    ],
)
@pytest.mark.unit
def test_a_malformed_request_gets_a_400_with_its_reason(sock_path: str, request_bytes: bytes, reason: str) -> None:
    async def main() -> None:
        async with proxied(sock_path, LOCAL) as (proxy, _, decisions):
            response = await exchange(sock_path, request_bytes)

            status, body = status_and_body(response)
            assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n")
            assert body.startswith("lovia-mcp sandbox proxy: bad request: ")
            assert reason in body
            assert (proxy.denied, decisions) == (0, [])

    bounded(main())


@pytest.mark.parametrize(
    "headers",
    [
        b"X-Big: " + b"a" * netproxy.MAX_HEAD + b"\r\n",
        b"".join(b"X-Many-%d: %s\r\n" % (i, b"b" * 100) for i in range(netproxy.MAX_HEAD // 100)),
    ],
    ids=["one-long-line", "many-lines"],
)
@pytest.mark.unit
def test_a_request_head_over_the_bound_gets_a_431(sock_path: str, headers: bytes) -> None:
    async def main() -> None:
        async with proxied(sock_path, LOCAL) as (_, upstream, _decisions):
            response = await exchange(sock_path, b"GET http://localhost/ HTTP/1.1\r\n" + headers + b"\r\n")

            assert response.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
            assert f"larger than {netproxy.MAX_HEAD} bytes" in status_and_body(response)[1]
            assert upstream.requests == []

    bounded(main())


# --- one request per plain-HTTP connection --------------------------------


class KeptAlive(LoopbackServer):
    """An upstream that keeps each connection open and answers every request on it, whatever its
    ``Connection`` header says: a front shared by many names (virtual hosts on one address), as one
    that ignored the proxy's ``close`` would be. ``requests`` holds what reached it: each request
    line, ``Host`` and body (read by ``Content-Length`` or chunked)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, str, bytes]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ValueError):  # a malformed chunk (tests send some): the connection ends
            await self._serve(reader, writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")[:-2]
            fields = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in head[1:])}
            body = b""
            if "content-length" in fields:
                body = await reader.readexactly(int(fields["content-length"]))
            elif fields.get("transfer-encoding") == "chunked":
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    body += (await reader.readexactly(size + 2))[:-2]
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
            self.requests.append((head[0], fields.get("host", ""), body))
            answer = f"{head[0]} for {fields.get('host')}: {body.decode()}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
            await writer.drain()


@asynccontextmanager
async def kept_alive(sock_path: str) -> AsyncIterator[tuple[KeptAlive, list[Decision]]]:
    decisions: list[Decision] = []
    async with KeptAlive() as upstream:
        proxy = await netproxy.start(
            LOCAL, sock_path, on_decision=lambda host, port, refused: decisions.append((host, port, refused is None))
        )
        try:
            yield upstream, decisions
        finally:
            await proxy.aclose()


# A second request on the same connection, for a name outside the allowlist, in both forms a client
# might write it: origin form with its own Host, and absolute form.
FRONTED = (
    b"GET /second HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    b"GET http://evil.example/third HTTP/1.1\r\nHost: evil.example\r\n\r\n"
)


@pytest.mark.unit
def test_a_second_request_on_a_kept_alive_connection_never_reaches_the_first_ones_address(sock_path: str) -> None:
    """Virtual-host fronting: the second request names a host the allowlist refuses, on the connection
    the proxy opened to an allowed one. Without one request per connection, the shared front answers it."""

    async def main() -> None:
        async with kept_alive(sock_path) as (upstream, decisions):
            first = f"GET http://localhost:{upstream.port}/first HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            response = await exchange(sock_path, first + FRONTED)

            print(response, upstream.requests)
            assert status_and_body(response) == (200, f"GET /first HTTP/1.1 for localhost:{upstream.port}: ")
            assert upstream.requests == [("GET /first HTTP/1.1", f"localhost:{upstream.port}", b"")]
            assert decisions == [("localhost", upstream.port, True)]

    bounded(main())


@pytest.mark.unit
def test_a_client_reusing_the_connection_sees_it_end_and_its_next_request_is_served_on_a_new_one(
    sock_path: str,
) -> None:
    """A keep-alive client that reads its answer and sends the next request on the same connection
    (allowed, this time) gets the connection ended, not a hang, and is served on a new connection."""

    async def main() -> None:
        async with kept_alive(sock_path) as (upstream, decisions):
            reader, writer = await asyncio.open_unix_connection(sock_path)
            try:
                writer.write(f"GET http://localhost:{upstream.port}/one HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                first = await reader.readexactly(length)
                writer.write(f"GET http://localhost:{upstream.port}/two HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                rest = await reader.read()  # the end of the connection, with nothing before it
            finally:
                writer.close()
                await writer.wait_closed()
            again = await exchange(
                sock_path, f"GET http://localhost:{upstream.port}/two HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )

            assert first == f"GET /one HTTP/1.1 for localhost:{upstream.port}: ".encode() and rest == b""
            assert status_and_body(again) == (200, f"GET /two HTTP/1.1 for localhost:{upstream.port}: ")
            assert [r[0] for r in upstream.requests] == ["GET /one HTTP/1.1", "GET /two HTTP/1.1"]
            assert decisions == [("localhost", upstream.port, True)] * 2

    bounded(main())


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        ("Content-Length: 11", b"hello world"),
        ("Transfer-Encoding: chunked", b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"),
    ],
    ids=["content-length", "chunked"],
)
@pytest.mark.unit
def test_a_request_body_goes_through_whole_and_a_request_after_it_does_not(
    sock_path: str, framing: str, body: bytes
) -> None:
    async def main() -> None:
        async with kept_alive(sock_path) as (upstream, _):
            head = f"POST http://localhost:{upstream.port}/up HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode()
            response = await exchange(sock_path, head + body + FRONTED)

            assert status_and_body(response) == (200, f"POST /up HTTP/1.1 for localhost:{upstream.port}: hello world")
            assert upstream.requests == [("POST /up HTTP/1.1", f"localhost:{upstream.port}", b"hello world")]

    bounded(main())


@pytest.mark.unit
def test_a_content_length_the_connection_header_names_is_not_forwarded_and_neither_is_its_body(
    sock_path: str,
) -> None:
    """``Connection: Content-Length`` drops the header from what is forwarded: the body it announced
    (here a request for another host) must go with it, or the upstream reads it as a request."""

    async def main() -> None:
        async with kept_alive(sock_path) as (upstream, _):
            smuggled = b"GET /smuggled HTTP/1.1\r\nHost: evil.example\r\n\r\n"
            head = (
                f"POST http://localhost:{upstream.port}/up HTTP/1.1\r\n"
                f"Content-Length: {len(smuggled)}\r\nConnection: Content-Length\r\n\r\n"
            ).encode()
            response = await exchange(sock_path, head + smuggled)

            print(response, upstream.requests)
            assert upstream.requests == [("POST /up HTTP/1.1", f"localhost:{upstream.port}", b"")]
            assert status_and_body(response)[0] == 200

    bounded(main())


@pytest.mark.parametrize(
    ("framing", "reason"),
    [
        ("Content-Length: 5\r\nTransfer-Encoding: chunked", "both Transfer-Encoding and Content-Length"),
        ("Transfer-Encoding: gzip", "must end in one 'chunked'"),
        ("Transfer-Encoding: chunked, gzip", "must end in one 'chunked'"),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "must end in one 'chunked'"),
        ("Content-Length: 5\r\nContent-Length: 6", "invalid Content-Length"),
        ("Content-Length: -1", "invalid Content-Length"),
        ("Content-Length: 0x10", "invalid Content-Length"),
    ],
)
@pytest.mark.unit
def test_a_body_whose_end_is_ambiguous_gets_a_400_before_anything_is_contacted(
    sock_path: str, framing: str, reason: str
) -> None:
    async def main() -> None:
        async with kept_alive(sock_path) as (upstream, decisions):
            request = f"POST http://localhost:{upstream.port}/ HTTP/1.1\r\n{framing}\r\n\r\nhello".encode()
            status, body = status_and_body(await exchange(sock_path, request))

            assert status == 400 and reason in body, body
            assert (upstream.requests, decisions) == ([], [])

    bounded(main())


@pytest.mark.parametrize(
    "body",
    [b"zz\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloXX0\r\n\r\n", b"5\nhello\r\n0\r\n\r\n"],
    ids=["size-not-hex", "no-crlf-after-data", "bare-lf"],
)
@pytest.mark.unit
def test_a_malformed_chunked_body_aborts_the_connection_and_nothing_after_it_goes_upstream(
    sock_path: str, body: bytes
) -> None:
    async def main() -> None:
        async with kept_alive(sock_path) as (upstream, _):
            head = f"POST http://localhost:{upstream.port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            try:
                response = await exchange(sock_path, head + body + FRONTED)
            except ConnectionResetError:
                response = b""

            assert response == b""
            assert [r[1] for r in upstream.requests if "evil" in r[1]] == []

    bounded(main())


@pytest.mark.unit
def test_an_allowed_name_with_nothing_listening_gets_a_502(sock_path: str) -> None:
    async def main() -> None:
        port = free_port()
        async with proxied(sock_path, LOCAL) as (proxy, _, decisions):
            status, body = status_and_body(await exchange(sock_path, connect("localhost", port)))

            assert status == 502
            assert f"cannot connect to localhost:{port}" in body
            assert (proxy.denied, decisions) == (0, [("localhost", port, True)])

    bounded(main())


@pytest.mark.unit
def test_aclose_closes_every_connection_and_leaves_no_task_or_socket_behind(sock_path: str) -> None:
    async def main() -> None:
        tasks_before = asyncio.all_tasks()
        async with LocalHTTP() as upstream:
            fds_before = psutil.Process().num_fds()
            proxy = await netproxy.start(LOCAL, sock_path)
            # Accepted in this order: once the later ones reached the upstream, the first is being served.
            half_reader, half_writer = await asyncio.open_unix_connection(sock_path)
            half_writer.write(b"CONNECT localhost:")
            tunnel_reader, tunnel_writer = await asyncio.open_unix_connection(sock_path)
            tunnel_writer.write(connect("localhost", upstream.port))
            assert await tunnel_reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
            tunnel_writer.write(b"GET /hold-tunnel HTTP/1.1\r\nHost: localhost\r\n\r\n")
            plain_reader, plain_writer = await asyncio.open_unix_connection(sock_path)
            plain_writer.write(f"GET http://localhost:{upstream.port}/hold-plain HTTP/1.1\r\n\r\n".encode())
            assert {await upstream.holding.get(), await upstream.holding.get()} == {"/hold-tunnel", "/hold-plain"}
            assert proxy.active == 3

            await asyncio.wait_for(proxy.aclose(), netproxy.CLOSE_TIMEOUT + 1)
            await proxy.aclose()  # idempotent

            for reader in (half_reader, tunnel_reader, plain_reader):
                try:
                    assert await reader.read() == b""
                except ConnectionResetError:
                    pass
            assert {await upstream.ended.get(), await upstream.ended.get()} == {"/hold-tunnel", "/hold-plain"}
            for writer in (half_writer, tunnel_writer, plain_writer):
                writer.close()
                await writer.wait_closed()
            await asyncio.gather(*upstream.tasks)

            assert proxy.active == 0
            assert asyncio.all_tasks() == tasks_before
            assert not os.path.exists(sock_path)
            with pytest.raises(OSError):
                await asyncio.open_unix_connection(sock_path)
            assert psutil.Process().num_fds() == fds_before

    bounded(main())


@pytest.mark.unit
def test_a_tunnel_carries_megabytes_both_ways_and_passes_the_end_of_stream_on(sock_path: str) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def main() -> None:
        payload = os.urandom(4 * 1024 * 1024)
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with proxied(sock_path, LOCAL) as _:
                reader, writer = await asyncio.open_unix_connection(sock_path)
                writer.write(connect("localhost", port))
                await reader.readuntil(b"\r\n\r\n")

                async def send() -> None:
                    writer.write(payload)
                    await writer.drain()
                    writer.write_eof()

                _, received = await asyncio.gather(send(), reader.read())
                writer.close()
                await writer.wait_closed()

                assert received == payload
        finally:
            server.close()
            await server.wait_closed()

    bounded(main())


@pytest.mark.unit
def test_a_client_that_never_finishes_its_request_head_gets_a_408(
    sock_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netproxy, "HEAD_TIMEOUT", 0.2)

    async def main() -> None:
        async with proxied(sock_path, LOCAL) as (_, _upstream, decisions):
            reader, writer = await asyncio.open_unix_connection(sock_path)
            writer.write(b"CONNECT localhost:")
            response = await reader.read()
            writer.close()
            await writer.wait_closed()

            assert response.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
            assert "did not arrive in time" in status_and_body(response)[1]
            assert decisions == []

    bounded(main())


@pytest.mark.unit
def test_an_on_decision_hook_that_raises_is_reported_and_the_request_still_served(sock_path: str) -> None:
    def hook(host: str, port: int, refusal: EgressRefusal | None) -> None:
        raise RuntimeError("logging is broken")

    async def main() -> None:
        reported: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: reported.append(context))
        async with LocalHTTP() as upstream:
            async with await netproxy.start(LOCAL, sock_path, on_decision=hook) as proxy:
                response = await exchange(sock_path, connect("localhost", upstream.port) + GET_THROUGH_TUNNEL)
                denied = await exchange(sock_path, connect("denied.test", 443))

            assert response.startswith(b"HTTP/1.1 200 Connection established\r\n")
            assert status_and_body(denied)[0] == 403
            assert proxy.denied == 1
            assert [str(context["exception"]) for context in reported] == ["logging is broken"] * 2
            assert reported[0]["message"] == "netproxy: the on_decision callback raised"

    bounded(main())


# --- the bridge, end to end without bwrap ----------------------------------


def bridge_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", os.defpath), **extra}


async def run_bridge(
    port: int, sock_path: str, argv: Sequence[str], env: dict[str, str], stdin: bytes | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *netbridge.bridge_argv(argv, socket_path=sock_path, port=port),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def assert_gone(pid: int) -> None:
    try:
        psutil.wait_procs([psutil.Process(pid)], timeout=5)
    except psutil.NoSuchProcess:
        pass
    assert not pid_alive(pid)


TUNNEL_CLIENT = textwrap.dedent("""
    import http.client, sys, psutil
    bridge_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    me = psutil.Process()
    print("bridge", *[child.pid for child in me.children()], flush=True)
    conn = http.client.HTTPConnection("127.0.0.1", bridge_port, timeout=10)
    conn.set_tunnel("localhost", target_port)
    conn.request("GET", "/through-the-bridge")
    response = conn.getresponse()
    print(response.status, response.read().decode().strip())
""")


def test_a_program_behind_the_bridge_tunnels_through_the_proxy_and_the_bridge_dies_with_it(sock_path: str) -> None:
    async def main() -> None:
        port = free_port()
        async with proxied(sock_path, LOCAL) as (_, upstream, decisions):
            code, out, err = await run_bridge(
                port, sock_path, [PY, "-c", TUNNEL_CLIENT, str(port), str(upstream.port)], bridge_env()
            )

            assert (code, err) == (0, "")
            bridge_line, answer = out.splitlines()
            assert answer == "200 upstream saw: GET /through-the-bridge HTTP/1.1"
            assert decisions == [("localhost", upstream.port, True)]
            _, bridge_pid = bridge_line.split()
            # communicate() returned, so the bridge let go of stderr: it died with the program.
            assert_gone(int(bridge_pid))

    bounded(main())


ENV_CLIENT = textwrap.dedent("""
    import sys, urllib.error, urllib.request
    for url in sys.argv[1:]:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                print(response.status, response.read().decode().strip())
        except urllib.error.HTTPError as e:
            print(e.code, e.read().decode().strip())
""")


def test_a_program_following_the_proxy_variables_reaches_allowed_names_only(sock_path: str) -> None:
    async def main() -> None:
        port = free_port()
        env = bridge_env(**netbridge.proxy_env(port))
        # Inside the sandbox loopback names bypass the proxy; here localhost stands for an allowed host.
        del env["no_proxy"], env["NO_PROXY"]
        async with proxied(sock_path, LOCAL) as (proxy, upstream, decisions):
            code, out, err = await run_bridge(
                port,
                sock_path,
                [PY, "-c", ENV_CLIENT, f"http://localhost:{upstream.port}/allowed", "http://denied.test/"],
                env,
            )

            assert (code, err) == (0, "")
            assert out.splitlines() == [
                "200 upstream saw: GET /allowed HTTP/1.1",
                "403 lovia-mcp sandbox: denied.test is not in the sandbox's network allowlist. "
                "To reach it, add it to Sandbox(network=[...]).",
            ]
            assert decisions == [("localhost", upstream.port, True), ("denied.test", 80, False)]
            assert proxy.denied == 1

    bounded(main())


@pytest.mark.unit
def test_proxy_env_points_both_spellings_at_the_bridge_and_bypasses_loopback() -> None:
    env = netbridge.proxy_env(4321)

    for name in ("http_proxy", "https_proxy", "all_proxy"):
        assert env[name] == env[name.upper()] == "http://127.0.0.1:4321"
    assert env["no_proxy"] == env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert env["NODE_USE_ENV_PROXY"] == "1"


HOLDING_CLIENT = textwrap.dedent("""
    import socket, sys, psutil
    bridge_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    s = socket.create_connection(("127.0.0.1", bridge_port), timeout=10)
    s.sendall(b"CONNECT localhost:%d HTTP/1.1\\r\\n\\r\\n" % target_port)
    head = b""
    while not head.endswith(b"\\r\\n\\r\\n"):
        head += s.recv(1) or sys.exit("the bridge closed the connection")
    s.sendall(b"GET /hold-bridge HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")
    print(*[child.pid for child in psutil.Process().children()], flush=True)
    sys.stdin.readline()
""")


def test_the_bridge_holds_only_stderr_its_listener_and_the_connections_it_serves(sock_path: str) -> None:
    async def main() -> None:
        port = free_port()
        async with proxied(sock_path, LOCAL) as (_, upstream, _decisions):
            proc = await asyncio.create_subprocess_exec(
                *netbridge.bridge_argv(
                    [PY, "-c", HOLDING_CLIENT, str(port), str(upstream.port)], socket_path=sock_path, port=port
                ),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=bridge_env(),
            )
            assert proc.stdin is not None and proc.stdout is not None
            try:
                # The tunnel is open end to end, so the bridge is serving (it detached before).
                assert await upstream.holding.get() == "/hold-bridge"
                bridge = psutil.Process(int((await proc.stdout.readline()).decode()))
                fd_dir = f"/proc/{bridge.pid}/fd"
                fds = {int(fd): os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)}
                server_stderr = os.readlink(f"/proc/{proc.pid}/fd/2")
                inet = sorted((c.status, c.laddr.port) for c in bridge.net_connections(kind="inet"))

                assert bridge.ppid() == proc.pid
                assert fds.pop(0) == fds.pop(1) == "/dev/null"
                assert fds.pop(2) == server_stderr
                # The listener, the accepted connection, and its unix socket to the proxy.
                assert sorted(target.split(":")[0] for target in fds.values()) == ["socket"] * 3
                assert inet == [(psutil.CONN_ESTABLISHED, port), (psutil.CONN_LISTEN, port)]
            finally:
                proc.stdin.write(b"\n")
                await proc.communicate()
            assert proc.returncode == 0
            assert_gone(bridge.pid)

    bounded(main())


def test_the_program_gets_exactly_the_environment_and_signal_dispositions_of_a_plain_launch(sock_path: str) -> None:
    env_program, grep = shutil.which("env"), shutil.which("grep")
    if env_program is None or grep is None:
        pytest.skip("needs env and grep")

    async def main() -> None:
        # No LANG or LC_*: Python's locale coercion would add LC_CTYPE to os.environ.
        env = bridge_env(LOVIA_PROBE="a b=c", HTTPS_PROXY="http://127.0.0.1:1")
        code, out, err = await run_bridge(free_port(), sock_path, [env_program, "-0"], env)
        assert (code, err) == (0, "")
        assert dict(entry.split("=", 1) for entry in out.split("\0") if entry) == env

        sig_argv = [grep, "^SigIgn", "/proc/self/status"]
        code, through_bridge, err = await run_bridge(free_port(), sock_path, sig_argv, env)
        direct = await asyncio.create_subprocess_exec(*sig_argv, stdout=asyncio.subprocess.PIPE, env=env)
        plain, _ = await direct.communicate()
        assert (code, err) == (0, "")
        assert through_bridge == plain.decode()

    bounded(main())


def test_a_command_the_bridge_cannot_execute_is_reported_with_status_127(sock_path: str) -> None:
    async def main() -> None:
        code, out, err = await run_bridge(free_port(), sock_path, ["lovia-no-such-program"], bridge_env())

        assert (code, out) == (127, "")
        assert err == "_netbridge: failed to execute lovia-no-such-program: No such file or directory\n"

    bounded(main())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "0", "--socket", "/x", "--", "true"], "--port must be a fixed port"),
        (["--port", "3128", "--socket", "/x", "true"], "missing '--'"),
        (["--port", "3128", "--socket", "/x", "--"], "no command after '--'"),
        (["--socket", "/x", "--", "true"], "--port and --socket are required"),
        (["--port", "3128", "--socket", "/x", "--verbose", "1", "--", "true"], "unknown option '--verbose'"),
    ],
)
def test_the_bridge_refuses_bad_arguments_with_usage(args: list[str], message: str) -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-I",
            "-S",
            netbridge.BRIDGE_SCRIPT,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=bridge_env(),
        )
        out, err = await proc.communicate()

        assert (proc.returncode, out) == (2, b"")
        assert err.decode().startswith(f"_netbridge: {message}")
        assert "usage: python -I -S _netbridge.py" in err.decode()

    bounded(main())
