"""What a request's caller hears from the server while the request runs: the agent's side of the relay.

The library plugin wants tools only: a call's progress goes to the
``lovia_mcp.progress`` log and nothing else. A caller that speaks MCP to
clients of its own (``lovia-mcp serve``, a connection opened with
``relay=True``) hands a request a :class:`Listener`, and the core
(:mod:`.core`) gives it what the worker tells of that request: its
progress, as the worker coalesced it
(:class:`~lovia_mcp_worker.wire.messages.Progress`), and the server's other
notifications the worker attributed to it
(:class:`~lovia_mcp_worker.wire.messages.ServerNotification`, params raw
JSON). A notification attributed to no request in flight goes to the
connection's own listener (:attr:`ClientCore.on_notification`). A request
the server sends (``ServerRequest``: sampling, elicitation, roots) goes to
the listener of the request it is attributed to, whose answer the core
sends back (``ServerReply``); with no such listener, or one that declines,
the server gets a JSON-RPC error saying why.

A listener is called synchronously on the event loop, from the core's
dispatch of what the worker sends, in the order the worker sent it: it must
not block (queue the work and send it from a task of its own).
"""

from __future__ import annotations

from collections.abc import Awaitable


class Listener:
    """One request's ears; each method a no-op here, overridden by what a caller wants to hear."""

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """A ``notifications/progress`` of the request, as the server sent it (coalesced by the worker)."""

    def notified(self, method: str, params: bytes | None) -> None:
        """A notification the server sent while this request was the only one in flight on it (params raw JSON)."""

    def requested(self, method: str, params: bytes | None) -> Awaitable[tuple[bytes | None, bytes | None]] | None:
        """A request the server sent while this request was the only one in flight on it (sampling, elicitation,
        roots): what answers it (the raw result, or the raw JSON-RPC error object); ``None`` refuses it."""
        return None


__all__ = ["Listener"]
