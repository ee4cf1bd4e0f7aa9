"""Which transport speaks to a server: the one place a spec's ``transport`` is read.

Each transport is a :class:`~..transport.protocol.TransportSession` (stdio: our own JSON-RPC
client over a launched process, :mod:`..transport.stdio`; HTTP: the MCP SDK
against an endpoint, :mod:`..transport.http`). The host asks this module for
a session and for what differs between them (:class:`Transport`) and never
branches on the kind itself; containment works on any session with a tree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..transport.protocol import OnRequest, TransportSession
from ..wire import failures
from ..wire.failures import HostError
from ..wire.messages import ServerSpec


@dataclass(frozen=True)
class Hooks:
    """What a session reports to its generation and host (and the open's trace context)."""

    on_end: Callable[[HostError], None]
    log: Callable[[int, str, bool], None]
    on_garbage: Callable[[bytes], None]
    explain: Callable[[HostError], HostError]
    on_tools_changed: Callable[[], None]
    # The server's other notifications (method, raw params), with ServerSpec.relay.
    on_notification: Callable[[str, bytes | None], None] | None = None
    # The server's own requests (method, raw params) -> the raw result or error, with ServerSpec.relay.
    on_request: OnRequest | None = None
    # The agent's W3C trace context of the open (Open.trace): an HTTP session
    # negotiates in it as it enters; stdio's start() is handed it instead.
    trace: dict[str, str] | None = None


@dataclass(frozen=True)
class Transport:
    """One kind of transport: how to make its session and what its failures are called.

    ``contained``: it runs a local process tree, which each generation
    contains, limits and kills (``False``: a remote endpoint, no tree).
    """

    contained: bool
    make: Callable[[ServerSpec, Hooks], TransportSession]
    # Why a session ended on an exception nothing else classified.
    failed: Callable[[ServerSpec, TransportSession, BaseException, bool], HostError]


def _stdio(spec: ServerSpec, hooks: Hooks) -> TransportSession:
    from ..transport.stdio import StdioSession

    return StdioSession(
        spec,
        on_end=hooks.on_end,
        log=hooks.log,
        on_garbage=hooks.on_garbage,
        explain=hooks.explain,
        on_tools_changed=hooks.on_tools_changed,
        on_notification=hooks.on_notification,
        on_request=hooks.on_request,
    )


def _stdio_failed(spec: ServerSpec, session: TransportSession, exc: BaseException, opened: bool) -> HostError:
    if opened:
        return failures.lost(failures.describe(exc), session.stderr_tail)
    return failures.start_failed(failures.describe(exc), session.stderr_tail)


def _http(spec: ServerSpec, hooks: Hooks) -> TransportSession:
    from ..transport.http import HttpSession

    return HttpSession(
        spec,
        on_end=hooks.on_end,
        warn=lambda text: hooks.log(logging.WARNING, text, False),
        on_tools_changed=hooks.on_tools_changed,
        on_notification=hooks.on_notification,
        trace=hooks.trace,
    )


def _http_failed(spec: ServerSpec, session: TransportSession, exc: BaseException, opened: bool) -> HostError:
    return failures.http_failed(spec.url, failures.describe(exc), opened=opened)


TRANSPORTS: dict[str, Transport] = {
    "stdio": Transport(contained=True, make=_stdio, failed=_stdio_failed),
    "http": Transport(contained=False, make=_http, failed=_http_failed),
}


def transport(spec: ServerSpec) -> Transport:
    return TRANSPORTS[spec.transport]


__all__ = ["TRANSPORTS", "Hooks", "Transport", "transport"]
