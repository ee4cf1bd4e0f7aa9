"""The 2025 sessions the SDK opened, and the token each belongs to: the only session ids the gateway acts on.

A 2025 client's ``initialize`` opens a stateful session: the SDK's session
manager makes its id and answers it in the ``Mcp-HttpSession-Id`` response
header, and from then on serves that id only to the token that opened it.
The gateway records the same fact here, from that answer, so that nothing
it holds for a session (a per-session server, a listener for tool-list
changes) is made or found for an id the SDK did not issue to that token:

- :meth:`Sessions.opened`: the SDK answered an opening request with this id,
  for this owner (the token's line in the token file; ``None`` without tokens);
- :meth:`Sessions.owned`: the session, if the SDK opened it for this owner;
  an id sent by another token, forged, expired or sent under 2026-07-28
  (which has no sessions) gets ``None``, and ``None`` holds nothing;
- :meth:`Sessions.json_mode`: which of the endpoint's two session managers
  holds it (:mod:`.routes` decides at its ``initialize``, by what the client
  declared), so that each later request, GET stream and DELETE goes there.

Lifecycle: a session is forgotten on a ``DELETE`` the SDK accepted, and
after the session idle time with no request in flight, the SDK's own
expiry rule (this table sees every request of a session the SDK sees, and
their ends later than the SDK does, so it never forgets a live session
first). The table is pruned as sessions open: it never holds more than the
sessions opened within one idle time, which the SDK caps per endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mcp.server.session import ServerSession


class HttpSession:
    """One session the SDK opened: its owner, its requests in flight, and where it hears of changes."""

    __slots__ = ("in_flight", "json_mode", "listener", "only", "owner", "path", "principal", "seen")

    def __init__(self, owner: str | None, principal: str = "", path: str = "", *, json_mode: bool = False) -> None:
        self.owner = owner
        # Held by the endpoint's JSON-mode manager (else its SSE-mode one).
        self.json_mode = json_mode
        # Its principal and the endpoint it was opened on.
        self.principal = principal
        self.path = path
        self.in_flight = 0
        self.seen = time.monotonic()
        # The SDK's session object, once its handshake finished, and the
        # server its endpoint serves alone (None: /mcp, every server).
        self.listener: ServerSession | None = None
        self.only: str | None = None


class Sessions:
    """Session id -> :class:`HttpSession`, for the ids the SDK issued."""

    def __init__(self, idle: float) -> None:
        self._idle = idle
        self._table: dict[str, HttpSession] = {}

    def opened(
        self, session_id: str, owner: str | None, principal: str = "", path: str = "", *, json_mode: bool = False
    ) -> None:
        """The SDK answered an opening request on ``path`` with ``session_id``, a session of ``owner``'s (a token
        of ``principal``'s), held by the endpoint's JSON-mode manager if ``json_mode``."""
        self.prune()
        self._table[session_id] = HttpSession(owner, principal, path, json_mode=json_mode)

    def json_mode(self, session_id: str) -> bool:
        """Whether ``session_id`` is held by its endpoint's JSON-mode manager; an id the table does not hold is
        not (the SSE-mode manager answers it, as it answers any id it does not know)."""
        entry = self._table.get(session_id)
        return entry is not None and entry.json_mode

    def held(self, principal: str, path: str) -> int:
        """How many sessions ``principal`` holds open on the endpoint ``path``."""
        self.prune()
        return sum(1 for e in self._table.values() if e.principal == principal and e.path == path)

    def on(self, path: str) -> int:
        """How many sessions the endpoint ``path`` holds open."""
        self.prune()
        return sum(1 for e in self._table.values() if e.path == path)

    def owned(self, session_id: str | None, owner: str | None) -> HttpSession | None:
        """The session ``session_id`` if the SDK opened it for ``owner``; ``None`` for any other id."""
        if session_id is None:
            return None
        entry = self._table.get(session_id)
        return entry if entry is not None and entry.owner == owner else None

    def began(self, session_id: str) -> None:
        """A request of ``session_id`` is in flight (its GET stream counts while open); unknown ids are ignored."""
        entry = self._table.get(session_id)
        if entry is not None:
            entry.in_flight += 1

    def ended(self, session_id: str) -> None:
        entry = self._table.get(session_id)
        if entry is not None:
            entry.in_flight = max(0, entry.in_flight - 1)
            entry.seen = time.monotonic()

    def heard(self, session_id: str, listener: ServerSession, only: str | None, principal: str) -> None:
        """``session_id`` of ``principal`` finished its handshake on the endpoint serving ``only``: it hears of
        changes from now."""
        entry = self._table.get(session_id)
        if entry is not None:
            entry.listener, entry.only, entry.principal = listener, only, principal

    def forget(self, session_id: str) -> None:
        self._table.pop(session_id, None)

    def listeners(self, server: str, hears: Callable[[str], bool]) -> list[ServerSession]:
        """The sessions that hear of a change to ``server``'s tools: those on an endpoint that lists it, of a
        principal that ``hears``."""
        self.prune()
        return [
            e.listener
            for e in self._table.values()
            if e.listener is not None and e.only in (None, server) and hears(e.principal)
        ]

    def principal(self, session_id: str) -> str | None:
        """The principal of ``session_id``, if the table holds it."""
        entry = self._table.get(session_id)
        return None if entry is None else entry.principal

    def listening(self, server: str, hears: Callable[[str], bool]) -> dict[str, ServerSession]:
        """:meth:`listeners` by session id."""
        self.prune()
        return {
            sid: e.listener
            for sid, e in self._table.items()
            if e.listener is not None and e.only in (None, server) and hears(e.principal)
        }

    def listener(self, session_id: str) -> ServerSession | None:
        entry = self._table.get(session_id)
        return None if entry is None else entry.listener

    def prune(self) -> None:
        # The SDK ends a session after this long with nothing in flight; so
        # does this table (never sooner: it sees each request end after the SDK).
        now = time.monotonic()
        for sid, entry in list(self._table.items()):
            if entry.in_flight == 0 and now - entry.seen > self._idle:
                del self._table[sid]

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._table


__all__ = ["HttpSession", "Sessions"]
