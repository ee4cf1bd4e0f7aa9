"""``lovia-mcp serve``: the gateway's process, from listening socket to exit status.

Lifecycle:

1. The config file is read (the same files as ``check``, with its access
   section), the authentication scheme set up (:mod:`.auth.registry`: the
   token file read, or the OAuth issuer's key file), the audit log opened,
   the address checked (a non-loopback one needs credentials) and bound; the URL is
   the first line of stdout (``--listen 127.0.0.1:0`` picks a free port).
2. HTTP is served at once (``/healthz`` answers, ``/readyz`` says 503) while
   every server opens in parallel; a request that comes meanwhile waits for
   the servers it needs. Then ``/readyz`` answers 200 and stdout gets a
   second line, ``ready``. A server that cannot open stops the gateway with
   its error (exit 3), as ``check`` would report it; the other opens are
   stopped, and the requests waiting get that error.
3. SIGTERM (or SIGINT) starts the drain, the Kubernetes termination contract:
   ``/readyz`` says 503, new sessions are refused (HTTP 503), calls in flight
   get up to ``--drain-seconds`` to finish (a session's calls and stateless
   requests are still served meanwhile); then HTTP stops, every server is
   closed (each connection's close is bounded and kills what is left) and
   the process exits 0.

Logs are JSON lines on stderr (``--log-format text`` for people).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any, Final

import uvicorn
from lovia.exceptions import LoviaError, UserError
from lovia_mcp_worker.wire.hostport import BadHostPort, is_loopback, parse_hostport

from ..client import forkserver
from ..opening.config_file.loader import load_servers
from ..opening.servers import MCPServer, MCPServerStdio
from .access import access_options
from .app import Gateway
from .audit import AuditLog
from .auth.registry import authenticator_for
from .connections import KEEP_ALIVE_IDLE, ConnectionLimits, bounded, connection_cap
from .options import Served, served_options
from .upstreams import Upstream, upstream_for

logger = logging.getLogger("lovia_mcp.gateway")

# After the drain, open HTTP streams (a client's GET stream for server
# messages) are cut after this long: they would otherwise hold uvicorn forever.
HTTP_SHUTDOWN_GRACE: Final = 2
# A stateful MCP session with no request for this long is forgotten by the
# SDK (its per-session server, if any, has its own `idle`).
HTTP_SESSION_IDLE: Final = 30 * 60.0
# Idle workers the forkserver keeps once every server is open, when none is
# per-session or per-principal: no open is to come but the replacement of a
# worker that crashed, and one idle worker makes that as quick as a first
# open. Each other one (about 5.5 MB of its own, some 20 MB of RSS shared
# with the forkserver) would buy only a second replacement at the same
# moment, which then forks its worker on request (milliseconds more).
SHARED_IDLE_WORKERS: Final = 1
EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
EXIT_FAILED: Final = 3


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: SIGTERM is the gateway's (it drains first)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the record's extra fields."""

    _PLAIN: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
        "message",
        "asctime",
        "color_message",
    }

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in self._PLAIN and not k.startswith("_")})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(fmt: str, verbosity: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines() if fmt == "json" else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
    # The SDK logs every session at info; one line per client is noise here.
    logging.getLogger("mcp").setLevel(logging.DEBUG if verbosity > 1 else logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)


def parse_listen(text: str) -> tuple[str, int]:
    """``--listen``'s ``HOST:PORT`` by the rules every ``host:port`` follows (port 0: a free one)."""
    try:
        host, port = parse_hostport(text, port_zero=True)
    except BadHostPort as exc:
        why = exc.why
    else:
        if port is not None:
            return host, port
        why = "no port"
    raise UserError(
        f"--listen takes HOST:PORT, got {text!r}: {why}",
        hint="--listen 127.0.0.1:8765 (port 0 picks a free one), --listen [::1]:8765, or --listen "
        "0.0.0.0:8765 with --token-file in a container.",
    )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets
    # whose proto says TCP, and without it every keep-alive response written
    # in two parts waits out the client's delayed ACK (40 ms on Linux).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="Pick a free port (port 0 picks one) and an address of this machine.",
        ) from None
    # Listening before uvicorn starts: connections made as soon as the URL is
    # printed wait in the backlog instead of being refused.
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/mcp"


def _guarding(servers: list[MCPServer], *files: str | None) -> list[MCPServer]:
    """``servers``, the gateway's own ``files`` (its token file or the OAuth issuer's key file, its audit log) kept
    read-only in their boxes too.

    Like their config file and its lock (``load_servers``): a sandboxed
    server that rewrote the token file (or put a key of its own in the key
    file) would let itself, or anyone, in, and one that rewrote the audit
    log would hide its calls.
    """
    own = tuple(os.path.abspath(f) for f in files if f)
    return [
        dataclasses.replace(s, config_files=(*s.config_files, *own)) if isinstance(s, MCPServerStdio) and own else s
        for s in servers
    ]


async def run(ns: argparse.Namespace) -> int:
    """Serve until SIGTERM; the exit status."""
    jwks = getattr(ns, "oauth_jwks", None)
    key_file = jwks if jwks and not jwks.startswith(("http://", "https://")) else None
    servers = _guarding(load_servers(ns.config, lock=ns.lock), ns.token_file, key_file, getattr(ns, "audit_log", None))
    served = served_options(ns.config)
    auth = authenticator_for(ns)
    access = access_options(ns.config, [s.name or "" for s in servers])
    known = auth.principals
    strangers = [] if known is None else [p for p in access.principals() if p not in known]
    if strangers:
        raise UserError(
            f"the access section names {', '.join(map(repr, strangers))}, but no token is that principal's",
            hint=f"Name the token file's principals ({', '.join(sorted(known or ()))}), or add a "
            "`PRINCIPAL TOKEN` line for each."
            if ns.token_file
            else "Without --token-file every client is principal 'default': name only it, or pass a "
            "--token-file of `PRINCIPAL TOKEN` lines.",
        )
    host, port = parse_listen(ns.listen)
    limits = ConnectionLimits(max_connections=connection_cap(ns.max_connections), head_timeout=ns.head_timeout)
    loopback = is_loopback(host)
    if not loopback and not auth.required:
        raise UserError(
            f"refusing to listen on {host} (not loopback) without credentials",
            hint="Pass --token-file FILE (one bearer token a line) or --oauth-issuer URL (an authorization "
            "server's access tokens), or listen on 127.0.0.1.",
        )
    upstreams: list[Upstream] = [upstream_for(s, served.get(s.name or "", Served())) for s in servers]
    idle = max([b.served.idle for b in upstreams if b.served.session == "per-session"] + [HTTP_SESSION_IDLE])
    audit = AuditLog(ns.audit_log) if getattr(ns, "audit_log", None) else None
    gateway = Gateway(
        upstreams,
        auth=auth,
        access=access,
        audit=audit,
        metrics_principal=bool(getattr(ns, "metrics_principal", False)),
        loopback=loopback,
        max_body_bytes=ns.max_body_bytes,
        max_sessions=ns.max_http_sessions,
        session_idle=idle,
        limits=limits,
    )
    sock = _bind(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # No proxy-headers middleware: nothing here reads the client's address,
    # and it was a layer on every request. The backlog is the cap: asyncio
    # accepts up to that many a turn before the protocol can close any.
    config = uvicorn.Config(
        gateway,
        lifespan="off",
        log_config=None,
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=HTTP_SHUTDOWN_GRACE,
        ws="none",
        http=bounded(limits),
        timeout_keep_alive=KEEP_ALIVE_IDLE,
        backlog=limits.max_connections,
    )
    http = _Uvicorn(config)
    try:
        async with AsyncExitStack() as stack:
            stack.callback(sock.close)
            await gateway.enter(stack)
            serving = asyncio.ensure_future(http.serve(sockets=[sock]))
            print(_url(sock), flush=True)
            logger.info(
                "listening",
                extra={
                    "url": _url(sock),
                    "servers": [b.name for b in upstreams],
                    "max_connections": limits.max_connections,
                },
            )
            opened = await _open_all(upstreams, stop)
            if opened:
                gateway.admission.ready = True
                # No forkserver (every server in isolation "none", or no fork here): no idle workers to keep.
                if forkserver.forkserver_pid() is not None and all(b.served.session == "shared" for b in upstreams):
                    if await asyncio.to_thread(forkserver.keep_idle, SHARED_IDLE_WORKERS):
                        logger.info(
                            "idle workers kept: %d", SHARED_IDLE_WORKERS, extra={"idle_workers": SHARED_IDLE_WORKERS}
                        )
                    else:
                        logger.warning(
                            "the forkserver could not be told to keep fewer idle workers",
                            extra={"idle_workers": SHARED_IDLE_WORKERS},
                        )
                print("ready", flush=True)
                logger.info("ready")
                waiting = asyncio.ensure_future(stop.wait())
                either: set[asyncio.Future[Any]] = {waiting, serving}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                drained = await gateway.drain(ns.drain_seconds)
                logger.info(
                    "draining done" if drained else "drain timed out; closing calls in flight",
                    extra={"in_flight": gateway.admission.in_flight},
                )
            http.should_exit = True
            await serving
    finally:
        await _close_all(upstreams)
        if audit is not None:
            audit.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    logger.info("stopped")
    # Stopped while opening is a stop asked for, not a failure.
    return EXIT_OK if opened or stop.is_set() else EXIT_FAILED


async def _open_all(upstreams: list[Upstream], stop: asyncio.Event) -> bool:
    """Open every server in parallel; False (logged) if one failed or a signal came first.

    Either way the opens still running are stopped (before the servers are
    closed: nothing opens after that), and the requests waiting hear why.
    """
    starts = [asyncio.ensure_future(b.start()) for b in upstreams]
    opening = asyncio.ensure_future(asyncio.gather(*starts))
    waiting = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {opening, waiting}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not opening.done() or opening.exception() is not None:
        for start in starts:
            start.cancel()
        await asyncio.gather(*starts, return_exceptions=True)
    if not opening.done():
        opening.cancel()
        with contextlib.suppress(BaseException):
            await opening
        return False
    exc = opening.exception()
    if exc is not None:
        message = str(exc) if isinstance(exc, LoviaError) else f"{type(exc).__name__}: {exc}"
        logger.error("a server failed to open; stopping", extra={"error": message})
        print(f"lovia-mcp: error: {message}", file=sys.stderr, flush=True)
        return False
    return True


async def _close_all(upstreams: list[Upstream]) -> None:
    # Each close is bounded by the connection itself (CLOSE_WAIT, then kills).
    await asyncio.shield(asyncio.gather(*(b.aclose() for b in upstreams), return_exceptions=True))


def main(ns: argparse.Namespace) -> int:
    """The ``serve`` subcommand; errors in the command line or the files exit 2 with a hint."""
    configure_logging(ns.log_format, getattr(ns, "verbose", 0))
    try:
        return asyncio.run(run(ns))
    except UserError as exc:
        print(f"lovia-mcp: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


__all__ = [
    "HTTP_SESSION_IDLE",
    "HTTP_SHUTDOWN_GRACE",
    "configure_logging",
    "main",
    "parse_listen",
    "run",
]
