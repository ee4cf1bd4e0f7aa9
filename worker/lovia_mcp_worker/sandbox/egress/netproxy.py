"""The worker's allowlist proxy: a sandboxed server's only way to the network.

A server under ``Sandbox(network=["api.github.com", "*.npmjs.org"])`` runs in
a fresh network namespace with only its own loopback. Its proxy variables
(:func:`~.netbridge.proxy_env`) point at ``127.0.0.1:BRIDGE_PORT`` inside the
sandbox, where ``_netbridge.py`` (:func:`~.netbridge.bridge_argv`) forwards
each TCP connection to this proxy's unix socket, bound into the sandbox. The proxy, running in the
worker outside the sandbox, answers:

- ``CONNECT host:port``: ``200 Connection established``, then a byte tunnel,
  when ``host`` is allowed;
- an absolute-form request (``GET http://host/path``): forwarded in origin
  form with ``Connection: close``, then its body (``Content-Length`` or
  chunked) and nothing more; the answer is relayed until the upstream
  closes, and the connection ends with it;
- anything else: ``403`` for a destination that is not allowed (the status
  line and the body say why), ``400`` for a malformed request (one whose
  body's end is ambiguous included: ``Content-Length`` beside
  ``Transfer-Encoding``, a coding that does not end in ``chunked``),
  ``431``/``408`` for an oversized or unfinished request head, ``502``/``504``
  when the upstream cannot be resolved or reached.

The rules (:class:`~.netrequest.Allowlist`), in two steps:

- the request: a name passes if an entry names it (exact names,
  case-insensitive, trailing dot ignored; ``*.example.com`` every subdomain
  of ``example.com`` but not ``example.com`` itself) on that port (an entry
  without a port: any, ``"db.internal:5432"`` that one). An address, as a
  literal or in any spelling a resolver reads as one (``127.1``,
  ``0x7f.1``, ``2130706433``, ``[::ffff:127.0.0.1]``), passes only if an
  address or range entry lists it (``"127.0.0.1"``, ``"10.0.0.0/8"``,
  ``"[::1]:8080"``);
- the addresses an allowed name resolves to: each must be on the internet,
  or be listed by an address or range entry. Loopback, private (RFC 1918,
  CGNAT, unique local), link-local (cloud metadata services), unspecified,
  multicast, broadcast and reserved addresses are refused by default, and so
  are IPv6 forms that carry one of them (mapped, compatible, NAT64, 6to4):
  an allowed wildcard whose subdomains someone else controls, or a rebound
  name, would otherwise reach the host's own services. The proxy connects to
  the checked address itself, never resolving again, trying each checked
  address in the resolver's order; addresses that fail the check are
  skipped, and a name with none left is refused, naming the first reason.

Through an upstream proxy (``Sandbox(upstream_proxy="http://proxy:3128")``,
for networks whose only way out is a proxy): an allowed *name* is not
resolved here; the proxy asks the upstream for a tunnel (``CONNECT
host:port``, with ``Proxy-Authorization`` when the URL carries
credentials) and relays through it, a plain request in origin form inside
the tunnel. The upstream resolves the name, so the address check above is
the upstream's to make, not this proxy's. Listed addresses, and the names
of ``Sandbox.no_proxy`` (:meth:`Upstream.direct`), are still reached
directly, with the address check. An upstream that refuses answers the
client 502 with its status line.

Lifecycle: :func:`start` binds the unix socket (mode 0600) and serves;
:meth:`Proxy.aclose` stops accepting, aborts every open connection, waits a
bounded time for their tasks and removes the socket file.

Caveats:

- Names are resolved by the worker's resolver: a public address is reached
  on any name allowed to resolve to it. Listing ``127.0.0.1`` reaches the
  worker's loopback, not the sandbox's (on Landlock, the proxy's own port
  too).
- A tunnel is opaque: TLS is not inspected, so the SNI or ``Host`` inside it
  is not checked against the name of the ``CONNECT``.
- One request per plain-HTTP connection: a further request on it (keep-alive,
  pipelining) would name a host of its own and reach the first one's
  address unchecked, so its bytes are dropped and the connection ends with
  the first answer (:func:`_one_body`); the client sends it again on a new
  connection, checked afresh.

Non-goals: caching, authentication, HTTP/2 towards the proxy, ``Upgrade``
over plain HTTP (WebSocket clients use ``CONNECT`` through a proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import stat
from collections.abc import Callable, Sequence
from typing import Final

from ...wire.hostport import hostport
from ...wire.refusals import EgressRefusal, words
from .netrequest import (
    CHUNKED,
    MAX_HEAD,
    Address,
    Allowlist,
    Answer,
    Request,
    Upstream,
    as_address,
    chunk_size,
    destination,
    host_allowed,
    normalize_pattern,
    parse_head,
    read_head,
)

# How long a client gets to send its request head after connecting. Clients
# send it at once; the bound only frees connections that never will.
HEAD_TIMEOUT: Final = 30.0

# Bound on resolving and connecting to an upstream (every checked address in
# turn). Covers a slow resolver and a lost SYN or two (Linux retransmits after
# 1 s, then 3 s), and is short enough that the server gets a 504 well before a
# tool call times out.
CONNECT_TIMEOUT: Final = 10.0

# After a refusal (403, 400...), how long the proxy keeps reading what the
# client still sends before closing: closing with unread data resets the
# connection, which can destroy the answer before the client has read it.
LINGER_TIMEOUT: Final = 2.0

# Bound on flushing a finished connection's last bytes, and on waiting for
# the connection tasks in aclose(): connections are aborted there, so their
# tasks finish within a loop iteration or two unless something is wrong.
CLOSE_TIMEOUT: Final = 2.0

_CHUNK: Final = 64 * 1024

_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}


OnDecision = Callable[[str, int, EgressRefusal | None], None]
"""``on_decision(host, port, refusal)``: called once per request that gets as far as a decision, with
the destination it names and why it was refused (None: allowed), for logging and for attributing
refusals to the calls in flight; called before the client is answered."""


class Traffic:
    """What went through the proxy to one destination host: running totals, for per-call accounting."""

    __slots__ = ("bytes", "connections")

    def __init__(self) -> None:
        self.connections = 0  # upstream connections opened
        self.bytes = 0  # bytes relayed, both ways (a forwarded request head included)


# --- the proxy -------------------------------------------------------------


class Proxy:
    """A running allowlist proxy; made by :func:`start`, closed by :meth:`aclose`."""

    def __init__(
        self, socket_path: str, allowlist: Allowlist, on_decision: OnDecision | None, upstream: Upstream | None = None
    ) -> None:
        self.socket_path = socket_path
        self.allowlist = allowlist
        self.upstream = upstream
        self.patterns = allowlist.patterns
        self.denied = 0
        """Requests refused because their destination is not allowed."""
        self.traffic: dict[str, Traffic] = {}
        """Per destination host (as the client named it), since the proxy started."""
        self._on_decision = on_decision
        self._server: asyncio.AbstractServer | None = None
        self._socket_ino: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def active(self) -> int:
        """Connections being served."""
        return len(self._tasks)

    async def _start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, path=self.socket_path, limit=MAX_HEAD)
        try:
            os.chmod(self.socket_path, 0o600)
            self._socket_ino = os.stat(self.socket_path).st_ino
        except BaseException:
            self._server.close()
            raise

    async def aclose(self) -> None:
        """Stop serving, abort every connection, remove the socket file. Bounded; idempotent."""
        if self._closing:
            return
        self._closing = True
        if self._server is not None:
            self._server.close()
        self._remove_socket()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            # Shielded: a cancelled caller still gets every connection closed.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(asyncio.wait(tasks, timeout=CLOSE_TIMEOUT))

    async def __aenter__(self) -> Proxy:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _remove_socket(self) -> None:
        # Only our own socket: another proxy may have been bound there since.
        with contextlib.suppress(OSError):
            st = os.stat(self.socket_path)
            if stat.S_ISSOCK(st.st_mode) and st.st_ino == self._socket_ino:
                os.unlink(self.socket_path)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:
            writer.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _decide(self, request: Request, refusal: EgressRefusal | None) -> None:
        if refusal is not None:
            self.denied += 1
        if self._on_decision is None:
            return
        try:
            self._on_decision(request.host, request.port, refusal)
        except Exception as e:  # noqa: BLE001 - a logging hook must not break the proxy
            asyncio.get_running_loop().call_exception_handler(
                {"message": "netproxy: the on_decision callback raised", "exception": e}
            )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        aborted = False
        try:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT):
                    lines = await read_head(reader)
                if lines is None:
                    return
                request = parse_head(lines)
            except TimeoutError:
                raise Answer(408, "lovia-mcp sandbox proxy: the request head did not arrive in time.") from None
            refusal = self.allowlist.refuses(request.host, request.port)
            if refusal is not None:
                self._decide(request, refusal)
                raise _forbidden(refusal)
            where = hostport(request.host, request.port)
            # One bound on resolving and connecting together.
            deadline = asyncio.get_running_loop().time() + CONNECT_TIMEOUT
            if (
                self.upstream is not None
                and as_address(request.host) is None
                and not self.upstream.direct(request.host, request.port)
            ):
                self._decide(request, None)
                up_reader, upstream = await _tunnel(self.upstream, request, where, deadline)
            else:
                up_reader, upstream = await self._direct(request, where, deadline)
            traffic = self.traffic.get(request.host)
            if traffic is None:
                traffic = self.traffic[request.host] = Traffic()
            traffic.connections += 1
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await _relay(reader, writer, up_reader, upstream, traffic)
            else:
                head = request.forward_head()
                traffic.bytes += len(head)
                upstream.write(head)
                await _relay(reader, writer, up_reader, upstream, traffic, body=request.body)
        except Answer as answer:
            await _refuse(reader, writer, answer.status, answer.text, answer.reason)
        except asyncio.CancelledError:
            aborted = True
            raise
        except OSError:
            aborted = True  # a reset or broken pipe: nothing left to flush
        except Exception as e:  # noqa: BLE001 - one connection's bug must not go unreported or stop the proxy
            aborted = True
            asyncio.get_running_loop().call_exception_handler(
                {"message": "netproxy: a connection failed unexpectedly", "exception": e}
            )
        finally:
            await _close([writer] if upstream is None else [writer, upstream], abort=aborted or self._closing)

    async def _direct(
        self, request: Request, where: str, deadline: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to ``request``'s host, resolved here and checked address by address; an :class:`Answer`."""
        try:
            async with asyncio.timeout_at(deadline):
                targets, refusal = await self._targets(request)
        except OSError as e:  # TimeoutError included
            self._decide(request, None)  # the name was allowed; resolving it failed
            raise _unreachable(where, e) from None
        self._decide(request, refusal)
        if refusal is not None:
            raise _forbidden(refusal)
        try:
            async with asyncio.timeout_at(deadline):
                return await _connect(targets, request.port)
        except OSError as e:
            raise _unreachable(where, e) from None

    async def _targets(self, request: Request) -> tuple[list[Address], EgressRefusal | None]:
        """The checked addresses to try for ``request``, in order, or why there are none.

        A listed address is its own target. A name is resolved here, once;
        what is connected to is exactly what was checked.
        """
        address = as_address(request.host)
        if address is not None:
            return [destination(address)], None
        infos = await asyncio.get_running_loop().getaddrinfo(request.host, request.port, type=socket.SOCK_STREAM)
        targets: list[Address] = []
        first: EgressRefusal | None = None
        for _family, _type, _proto, _name, sockaddr in infos:
            found = ipaddress.ip_address(sockaddr[0])
            refusal = self.allowlist.screen(request.host, found, request.port)
            if refusal is not None:
                first = first or refusal
            elif destination(found) not in targets:
                targets.append(destination(found))
        return targets, None if targets else first


def _forbidden(refusal: EgressRefusal) -> Answer:
    return Answer(403, words(refusal, "client"), words(refusal, "reason"))


def _unreachable(where: str, error: OSError) -> Answer:
    if isinstance(error, TimeoutError):
        return Answer(504, f"lovia-mcp sandbox proxy: connecting to {where} timed out.")
    return Answer(502, f"lovia-mcp sandbox proxy: cannot connect to {where}: {error.strerror or error}.")


async def _connect(targets: list[Address], port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the first of ``targets`` that answers; the last failure if none does.

    ``AI_NUMERICHOST``: an address is never looked up again, so no second
    answer from a resolver can stand in for the one that was checked.
    """
    assert targets
    failure: OSError | None = None
    for address in targets:
        try:
            return await asyncio.open_connection(str(address), port, flags=socket.AI_NUMERICHOST, limit=_CHUNK)
        except OSError as e:
            failure = e
    assert failure is not None
    raise failure


async def _tunnel(
    via: Upstream, request: Request, where: str, deadline: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A tunnel to ``request``'s host and port through the upstream proxy ``via``; an :class:`Answer` if none."""
    try:
        async with asyncio.timeout_at(deadline):
            reader, writer = await asyncio.open_connection(via.host, via.port, limit=_CHUNK)
    except OSError as e:  # TimeoutError included
        if isinstance(e, TimeoutError):
            raise Answer(504, f"lovia-mcp sandbox proxy: connecting to the upstream proxy {via} timed out.") from None
        raise Answer(
            502, f"lovia-mcp sandbox proxy: cannot connect to the upstream proxy {via}: {e.strerror or e}."
        ) from None
    lines: list[bytes] | None = None
    try:
        writer.write(via.connect_head(request.host, request.port))
        async with asyncio.timeout_at(deadline):
            lines = await read_head(reader)
    except TimeoutError:
        writer.transport.abort()
        raise Answer(
            504, f"lovia-mcp sandbox proxy: the upstream proxy {via} did not answer for {where} in time."
        ) from None
    except (OSError, Answer):  # a reset, or an answer head over the bound
        lines = None
    except BaseException:
        writer.transport.abort()
        raise
    status = lines[0].decode("latin-1", "replace").strip() if lines else ""
    parts = status.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].startswith("2"):
        writer.transport.abort()
        said = "".join(c for c in status[:200] if " " <= c <= "~") or "no answer"
        raise Answer(502, f"lovia-mcp sandbox proxy: the upstream proxy {via} refused {where}: {said}.", said[:80])
    return reader, writer


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, traffic: Traffic) -> None:
    while data := await reader.read(_CHUNK):
        traffic.bytes += len(data)
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


def _bad_body(what: str) -> ConnectionAbortedError:
    # Part of the request has gone upstream: no answer can follow, the connection is aborted.
    return ConnectionAbortedError(f"lovia-mcp sandbox proxy: {what} in a request body")


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int, traffic: Traffic) -> None:
    while size > 0:
        data = await reader.read(min(size, _CHUNK))
        if not data:
            raise _bad_body("the connection ended")
        size -= len(data)
        traffic.bytes += len(data)
        writer.write(data)
        await writer.drain()


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One line of a chunked body (bounded by the reader's limit, MAX_HEAD)."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        raise _bad_body("the connection ended") from None
    except asyncio.LimitOverrunError:
        raise _bad_body(f"a line over {MAX_HEAD} bytes") from None


def _send(writer: asyncio.StreamWriter, data: bytes, traffic: Traffic) -> None:
    traffic.bytes += len(data)
    writer.write(data)


async def _one_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: int, traffic: Traffic) -> None:
    """Pass on exactly one request's body (``body`` bytes, or CHUNKED up to its last chunk and
    trailers), then nothing more: what the client sends after it is read and dropped.

    A further request on the connection (keep-alive) would name a host of
    its own and go unchecked to this one's address. Once the client sends
    one, or ends its side, the upstream's side is ended too, so that it
    closes after its answer; the client, seeing the connection end, sends
    the request again on a connection of its own, which is checked afresh.
    """
    if body == CHUNKED:
        # Each line is checked before it is passed on: the upstream never reads one the proxy did not.
        while True:
            line = await _line(reader)
            size = chunk_size(line)
            if size is None:
                raise _bad_body("a malformed chunk size")
            _send(writer, line, traffic)
            if size == 0:
                break
            await _copy(reader, writer, size, traffic)
            if await _line(reader) != b"\r\n":
                raise _bad_body("a chunk without its CRLF")
            _send(writer, b"\r\n", traffic)
        trailers = 0
        while (line := await _line(reader)) != b"\r\n":
            trailers += len(line)
            if trailers > MAX_HEAD or not line.endswith(b"\r\n"):
                raise _bad_body("malformed trailers")
            _send(writer, line, traffic)
        _send(writer, line, traffic)
    else:
        await _copy(reader, writer, body, traffic)
    await writer.drain()
    data = await reader.read(_CHUNK)
    if writer.can_write_eof():
        writer.write_eof()
    while data:
        data = await reader.read(_CHUNK)


async def _relay(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
    traffic: Traffic,
    body: int | None = None,
) -> None:
    """Pipe both ways, passing each end-of-stream on, until both ends are done or one fails; count the bytes.

    ``body``: a plain request's (its length, or CHUNKED), already sent with
    its head: only that body goes from a to b (:func:`_one_body`), and the
    relay ends with b's answer.
    """
    outbound = _pump(a_reader, b_writer, traffic) if body is None else _one_body(a_reader, b_writer, body, traffic)
    pumps = [asyncio.create_task(outbound), asyncio.create_task(_pump(b_reader, a_writer, traffic))]
    try:
        pending = set(pumps)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if (error := task.exception()) is not None:
                    raise error
            if body is not None and pumps[1].done():
                break  # the answer has ended, and the connection with it
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


async def _refuse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, text: str, reason: str = ""
) -> None:
    body = (text + "\n").encode("utf-8")
    # The reason also goes on the status line: many clients show only that
    # for a refused CONNECT ("Tunnel connection failed: 403 ..."). Its text
    # is ASCII (canonical host names, addresses); anything else is dropped.
    phrase = _REASONS[status] + (f" ({reason})" if reason else "")
    phrase = "".join(c for c in phrase if " " <= c <= "~")
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError, TimeoutError):
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_TIMEOUT):
            while await reader.read(_CHUNK):
                pass


async def _close(writers: list[asyncio.StreamWriter], *, abort: bool) -> None:
    """Close gracefully (buffered bytes flushed) unless ``abort``; abort what does not close in time."""
    flushed = False
    try:
        if not abort:
            for w in writers:
                w.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    for w in writers:
                        with contextlib.suppress(OSError):
                            await w.wait_closed()
                    flushed = True
    finally:
        if not flushed:
            for w in writers:
                w.transport.abort()


async def start(
    allowed: Sequence[str], socket_path: str, *, on_decision: OnDecision | None = None, upstream: Upstream | None = None
) -> Proxy:
    """Serve an allowlist proxy on the unix socket ``socket_path``.

    ``allowed`` holds host names and ``*.domain`` wildcards, addresses and
    ranges, each optionally with a port (:class:`~.netrequest.Allowlist`); a
    malformed entry raises ValueError (with a hint) before anything is bound.
    ``on_decision(host, port, refusal)`` is called once per request decided. The
    path must be short (a unix socket path has at most 107 bytes on Linux) and
    its directory private to the worker; a stale socket there is replaced.
    ``upstream``: reach allowed names through that proxy.
    """
    proxy = Proxy(socket_path, Allowlist(allowed), on_decision, upstream)
    await proxy._start()
    return proxy


async def start_tcp(
    allowed: Sequence[str], *, on_decision: OnDecision | None = None, upstream: Upstream | None = None
) -> tuple[Proxy, int]:
    """Serve an allowlist proxy on a free loopback TCP port (the Landlock backend's way out).

    Landlock cannot stop a ``connect()`` to a unix socket, and the seccomp
    filter refuses unix sockets outright, so there the server reaches the
    proxy over TCP; Landlock allows that one port. Returns the proxy and the port.
    """
    proxy = Proxy("", Allowlist(allowed), on_decision, upstream)
    proxy._server = await asyncio.start_server(proxy._accept, "127.0.0.1", 0, limit=MAX_HEAD)
    port: int = proxy._server.sockets[0].getsockname()[1]
    return proxy, port


__all__ = [
    "CLOSE_TIMEOUT",
    "CONNECT_TIMEOUT",
    "HEAD_TIMEOUT",
    "LINGER_TIMEOUT",
    "MAX_HEAD",
    "OnDecision",
    "Proxy",
    "Traffic",
    "host_allowed",
    "normalize_pattern",
    "start",
    "start_tcp",
]
