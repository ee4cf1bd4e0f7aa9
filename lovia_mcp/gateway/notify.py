"""Tool-list changes forwarded to the gateway's clients, in each protocol era's own way.

A backend's connection tells the gateway that a server's tools changed
(:attr:`~lovia_mcp.MCPConnection.on_tools_changed`); the next ``tools/list``
already shows the new list. Then :meth:`Notifier.changed` tells the clients
of every endpoint that lists that server (``/mcp`` and
``/servers/<name>/mcp``):

- a 2025 session gets ``notifications/tools/list_changed`` on its standalone
  stream (the GET stream the SDK's client opens after the handshake): the
  session is remembered when its ``notifications/initialized`` arrives, with
  the SDK's public ``ServerSession`` of that message, and the gateway's
  ``initialize`` answer says ``tools.listChanged: true``;
- a 2026-07-28 client has no session: it hears of changes by holding a
  ``subscriptions/listen`` stream, served by the SDK's own ``ListenHandler``
  over an ``InMemorySubscriptionBus`` per endpoint (``server/discover`` then
  says ``tools.listChanged: true``).

Who hears: a client of a principal that may see the server (its access
rules, :mod:`.access`), and of that principal alone when the server is a
per-principal one: a listen stream is served from a bus of its principal's
own, so another principal's change never reaches it. A per-session server's
change goes only to its own session (a stateless client cannot use
per-session servers, so no listen stream hears of it); so does the idle
expiry of a changed one (the session lists the first listing again).

Caveats: the SDK drops a notification for a session whose GET stream is not
open at that moment (no replay without an event store), as it does for any
server message. Which sessions exist (and when they are forgotten) is
:mod:`.sessions`'s to say; a session is told only once its handshake
finished there.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import SubscriptionsListenRequestParams, SubscriptionsListenResult
from mcp_types.jsonrpc import INTERNAL_ERROR

from .access import Access
from .principals import principal_of
from .sessions import Sessions
from .upstreams import Holder, SessionHolder

logger = logging.getLogger("lovia_mcp.gateway")

# A notification is written to the session's own message stream, which a
# client that stopped reading can fill: one session's send is abandoned after
# this long rather than holding anything up (the SDK's other writes are
# bounded the same way by its stream buffers).
NOTIFY_WAIT: Final = 5.0


class ListChangedServer(Server[Any]):
    """The SDK's low-level Server whose handshake says ``tools.listChanged: true``.

    The SDK's session manager asks the Server for its initialization options
    and passes it no NotificationOptions, so a 2025 client would be told the
    list never changes. (A 2026-07-28 ``server/discover`` says so by itself
    when ``subscriptions/listen`` is served.)
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )


class Endpoint:
    """One MCP endpoint's listen streams: a bus and the SDK's handler per principal, at most ``max_streams`` in all
    and ``share`` per principal (:func:`.principals.share`: no principal fills the endpoint for the others).

    :meth:`listen` is the endpoint's ``subscriptions/listen`` handler: it
    serves the stream from its request's principal's bus, so a change
    published to some principals' buses (:meth:`publish`) reaches their
    streams alone.
    """

    def __init__(
        self, max_streams: int, share: int | None = None, on_share_refused: Callable[[str], None] | None = None
    ) -> None:
        self._max = max_streams
        self._share = max_streams if share is None else share
        # Told the principal whose stream was refused for its share.
        self._on_share_refused = on_share_refused
        # Streams open, by principal.
        self._open: collections.Counter[str] = collections.Counter()
        self._buses: dict[str, tuple[InMemorySubscriptionBus, ListenHandler]] = {}

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        principal = principal_of(getattr(ctx.request, "scope", None))
        if self._open.total() >= self._max:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")  # the SDK handler's own refusal
        if self._open[principal] >= self._share:
            if self._on_share_refused is not None:
                self._on_share_refused(principal)
            raise MCPError(
                INTERNAL_ERROR,
                f"Subscription limit reached: principal {principal!r} holds {self._share} listen streams here, "
                f"its share of {self._max}",
            )
        _, handler = self._own(principal)
        self._open[principal] += 1
        try:
            return await handler(ctx, params)
        finally:
            self._open[principal] -= 1

    def bus(self, principal: str) -> InMemorySubscriptionBus:
        """The bus that ``principal``'s listen streams on this endpoint hear (made on first use)."""
        return self._own(principal)[0]

    def _own(self, principal: str) -> tuple[InMemorySubscriptionBus, ListenHandler]:
        found = self._buses.get(principal)
        if found is None:
            bus = InMemorySubscriptionBus()
            found = self._buses[principal] = (bus, ListenHandler(bus, max_subscriptions=self._max))
        return found

    def publish(self, hears: Callable[[str], bool]) -> list[Coroutine[Any, Any, None]]:
        """A tool-list change for the streams of each principal that ``hears``: the publications to await."""
        return [bus.publish(ToolsListChanged()) for principal, (bus, _) in self._buses.items() if hears(principal)]

    def close(self) -> None:
        """End every listen stream gracefully."""
        for _, handler in self._buses.values():
            handler.close()


class Notifier:
    """Who hears of tool-list changes, and the sending."""

    def __init__(
        self,
        paths: dict[str, str | None],
        *,
        max_streams: int,
        sessions: Sessions,
        access: Access | None = None,
        share: int | None = None,
        on_share_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        """``on_share_refused(path, principal)``: a listen stream was refused for its principal's share."""

        def told(path: str) -> Callable[[str], None] | None:
            if on_share_refused is None:
                return None
            return lambda principal: on_share_refused(path, principal)

        # path -> the server it serves alone (None: /mcp, every server)
        self.endpoints = {path: Endpoint(max_streams, share, told(path)) for path in paths}
        self._serves = dict(paths)
        self._sessions = sessions
        self._access = access if access is not None else Access(None)
        self._sending: set[asyncio.Task[None]] = set()

    # -- changes -------------------------------------------------------------- #
    def changed(self, server: str, holder: Holder | None) -> None:
        """``server``'s tools changed: for the session alone if ``holder`` is a per-session server's, for the
        principal's clients alone if a per-principal one's; either way only for principals that may see it."""
        if not isinstance(holder, SessionHolder):
            principal = None if holder is None else holder.principal

            def hears(who: str) -> bool:
                return (principal is None or who == principal) and self._access.sees(who, server)

            targets = self._sessions.listeners(server, hears)
            for path, only in self._serves.items():
                if only in (None, server):
                    for publication in self.endpoints[path].publish(hears):
                        self._spawn(publication)
        else:
            listener = self._sessions.listener(holder.session)
            targets = [] if listener is None else [listener]
        for session in targets:
            self._spawn(self._send(session))
        logger.info("tools changed", extra={"server": server, "sessions": len(targets)})

    async def _send(self, session: ServerSession) -> None:
        try:
            await asyncio.wait_for(session.send_tool_list_changed(), NOTIFY_WAIT)
        except Exception as exc:  # noqa: BLE001 - a session gone or stuck loses its notification, nothing else
            logger.debug("tools/list_changed not sent: %r", exc)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        # Held until done: the loop keeps only weak references to tasks.
        task = asyncio.ensure_future(coro)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def close(self) -> None:
        """End every listen stream gracefully (the drain): its client re-listens, on another replica."""
        for endpoint in self.endpoints.values():
            endpoint.close()


__all__ = ["NOTIFY_WAIT", "Endpoint", "ListChangedServer", "Notifier"]
