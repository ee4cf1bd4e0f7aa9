"""Admission: whether a request for an MCP endpoint may enter now, and if not, the refusal.

The gateway asks once per request, after authentication and the header
checks (:meth:`Admission.admit`); four things may keep a request out:

- opening: before ready, a request waits until the servers its endpoint
  serves to its principal are open (:func:`.upstreams.wait_open`), then is
  served; only one of those that failed to open (or the gateway stopping)
  makes it a 503. A server the principal may not see is not waited for,
  nor named;
- draining (:meth:`Admission.drain`, on SIGTERM): what would open a session
  or a listen stream is a 503 (it would die with this replica); a
  session's requests and stateless ones are still served until HTTP stops,
  so a load balancer slow to notice ``/readyz`` loses nothing;
- the cap: an endpoint holds at most ``--max-http-sessions`` sessions in
  its two session managers together (each manager checks it alone);
- shares: with several principals, each may hold at most its share of an
  endpoint's sessions (:func:`.principals.share` of ``--max-http-sessions``),
  counting those the SDK has yet to answer (:meth:`Admission.opening`), so
  that no principal can fill the cap for the others. The same split bounds
  listen streams (:mod:`.notify`) and a per-session server's slots
  (:mod:`.upstreams`); every refusal for a share is logged and counted
  (:meth:`Admission.share_refused`).

It also counts the tool calls in flight, which a drain waits for.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping

from starlette.types import Message, Receive, Scope, Send

from ._http import UNAVAILABLE, RpcRefusal
from .access import Access
from .metrics import Metrics
from .principals import share
from .routes import SESSION_HEADER, McpRequest, Opener, endpoints, owner
from .sessions import Sessions
from .upstreams import Upstream, UpstreamRefused, wait_open

logger = logging.getLogger("lovia_mcp.gateway")


class Admission:
    """Who may enter, and the counts that decide it: waiting, in flight, sessions each principal opens."""

    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        *,
        access: Access,
        sessions: Sessions,
        metrics: Metrics,
        max_sessions: int,
        principals: int,
        labelled: Callable[[str], str | None],
    ) -> None:
        """``principals``: how many share each cap; ``labelled``: a principal as the metrics label it."""
        self._upstreams = upstreams
        self._paths = endpoints(list(upstreams))
        self._access = access
        self._sessions = sessions
        self._metrics = metrics
        self._labelled = labelled
        self.max_sessions = max_sessions
        self.session_share = share(max_sessions, principals)
        self.ready = False
        self.draining = False
        self.in_flight = 0
        # Requests waiting for their servers to open (before ready).
        self.waiting = 0
        # Opening requests the SDK has not answered yet, by principal and
        # endpoint: counted against the principal's share with its sessions.
        self._pending: collections.Counter[tuple[str, str]] = collections.Counter()
        self._idle_now = asyncio.Event()
        self._idle_now.set()

    def readiness(self) -> tuple[int, str]:
        """``/readyz``'s status and text."""
        if self.ready and not self.draining:
            return 200, "ready\n"
        return 503, "draining\n" if self.draining else "opening servers\n"

    async def admit(self, request: McpRequest) -> RpcRefusal | None:
        """``None`` if ``request`` may enter now (after waiting for its servers to open, before ready); else the
        refusal to answer it with."""
        if not self.ready:
            refused = await self._opened(request.path, request.principal)
            if refused is not None:
                return RpcRefusal(503, UNAVAILABLE, str(refused), refused.hint)
        if request.session is not None:
            return None
        if self.draining and (not request.stateless or request.listen):
            return RpcRefusal(
                503,
                UNAVAILABLE,
                "the gateway is shutting down; retry shortly",
                "Retry: a load balancer sends the new session to another replica.",
                ((b"retry-after", b"1"),),
            )
        if request.handshake and request.method == "POST" and self._past_share(request.principal, request.path):
            self.share_refused(request.path, "sessions", request.principal)
            return RpcRefusal(
                503,
                UNAVAILABLE,
                f"principal {request.principal!r} already holds {self.session_share} sessions on {request.path}, "
                f"its share of the endpoint's {self.max_sessions} (--max-http-sessions, split among the token "
                "file's principals)",
                "End a session you no longer use (HTTP DELETE) or wait for idle ones to expire; the "
                "operator can raise --max-http-sessions.",
            )
        if request.handshake and request.method == "POST" and self._past_cap(request.path):
            return RpcRefusal(
                503,
                UNAVAILABLE,
                f"{request.path} already holds {self.max_sessions} sessions, its cap (--max-http-sessions)",
                "End a session you no longer use (HTTP DELETE) or wait for idle ones to expire; the "
                "operator can raise --max-http-sessions.",
            )
        return None

    def share_refused(self, endpoint: str, cap: str, principal: str) -> None:
        """A request refused for its principal's share of ``cap``: logged for the operator, and counted."""
        logger.warning(
            "a principal held its share of a cap",
            extra={"principal": principal, "endpoint": endpoint, "cap": cap},
        )
        self._metrics.share_refused(endpoint, cap, self._labelled(principal))

    def _past_share(self, principal: str, path: str) -> bool:
        """Whether ``principal`` holds its share of ``path``'s sessions (those the SDK has yet to answer included).

        With one principal its share is the whole cap, which the SDK checks itself.
        """
        if self.session_share >= self.max_sessions:
            return False
        return self._sessions.held(principal, path) + self._pending[principal, path] >= self.session_share

    def _past_cap(self, path: str) -> bool:
        """Whether ``path`` holds its cap of sessions (those the SDK has yet to answer included): the endpoint's
        two session managers (:mod:`.routes`) each check the cap alone, so the sum is checked here."""
        pending = sum(n for (_, at), n in self._pending.items() if at == path)
        return self._sessions.on(path) + pending >= self.max_sessions

    async def opening(self, handle: Opener, scope: Scope, receive: Receive, send: Send, request: McpRequest) -> None:
        """Serve a request that may open a 2025 session through ``handle``: the id the SDK answers is recorded
        for the token (and the principal) that sent it, with the manager that holds it, and the request counts
        against the principal's share until then."""
        token = owner(scope)
        key = (request.principal, request.path)
        pending = True
        self._pending[key] += 1

        def settle() -> None:
            nonlocal pending
            if pending:
                pending = False
                self._pending[key] -= 1

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    for name, value in message.get("headers", ()):
                        if name.lower() == SESSION_HEADER:
                            self._sessions.opened(value.decode("latin-1"), token, *key, json_mode=handle.json_mode)
                settle()  # recorded, or no session: no longer pending either way
            await send(message)

        try:
            await handle(scope, receive, watch)
        finally:
            settle()

    async def _opened(self, path: str, principal: str) -> UpstreamRefused | None:
        """Wait until the servers ``path`` serves to ``principal`` are open; why not, if one failed (or the wait
        ran out). A server the principal may not see is not waited for, nor named."""
        only = self._paths[path]
        self.waiting += 1
        try:
            await wait_open(
                [
                    b
                    for name, b in self._upstreams.items()
                    if only in (None, name) and self._access.sees(principal, name)
                ]
            )
            return None
        except UpstreamRefused as exc:
            return exc
        finally:
            self.waiting -= 1

    # -- calls in flight, and the drain ------------------------------------------ #
    def call_began(self) -> None:
        self.in_flight += 1
        self._idle_now.clear()

    def call_ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle_now.set()

    async def drain(self, timeout: float) -> bool:
        """Refuse new sessions and listen streams; wait up to ``timeout`` for the calls in flight. True if they
        all ended."""
        self.draining = True
        try:
            await asyncio.wait_for(self._idle_now.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False


__all__ = ["Admission"]
