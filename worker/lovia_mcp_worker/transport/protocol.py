"""What a transport is to the session above it: the contract every transport (stdio, HTTP) keeps.

A generation (:mod:`..session.generation`) drives its server through a
:class:`TransportSession`; progress notifications reach the caller's
:data:`OnProgress`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ..wire.failures import HostError
from ..wire.mcpjson import ContentBlock, ToolSpec

# A call's progress: (progress, total, message), as the server sent them.
OnProgress = Callable[[float, "float | None", "str | None"], None]
# A server's own request (method, raw params) relayed: its raw result, or its raw JSON-RPC error object.
OnRequest = Callable[[str, "bytes | None"], Awaitable["tuple[bytes | None, bytes | None]"]]


class TransportSession(Protocol):
    """What a generation needs of its transport (stdio or HTTP)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def stderr_tail(self) -> list[str]: ...

    @property
    def stdout_head(self) -> bytes | None:
        """What a stdio server wrote before its handshake that was not JSON-RPC (None: HTTP)."""
        ...

    initialized: bool

    @property
    def sandbox(self) -> str | None:
        """The sandbox backend its server runs in (None: none, or not launched yet)."""
        ...

    @property
    def protocol_version(self) -> str | None:
        """The MCP protocol version negotiated (None until it is)."""
        ...

    @property
    def listing_ttl(self) -> float | None:
        """How long the last listing may be reused (the server's ``ttlMs``; None: no limit)."""
        ...

    @property
    def listed_at(self) -> float:
        """When the last listing was asked for (``time.monotonic()``)."""
        ...

    @property
    def capabilities(self) -> object:
        """The server's capabilities object as it declared them (None until known)."""
        ...

    def running(self) -> AbstractAsyncContextManager[None]: ...

    # ``trace``: the agent's W3C trace context for the request's ``_meta``.
    async def start(self, trace: dict[str, str] | None = None) -> list[ToolSpec]: ...

    async def list_tools(self, trace: dict[str, str] | None = None) -> list[ToolSpec]: ...

    async def ping(self) -> None:
        """Return once the server answers a ping (its cancel grace, :meth:`..session.generations.Generations.probe`)."""
        ...

    async def call(
        self,
        name: str,
        arguments: bytes,
        on_progress: OnProgress | None = None,
        trace: dict[str, str] | None = None,
    ) -> tuple[list[ContentBlock], bool, bytes | None]: ...

    async def relay(self, method: str, params: bytes | None) -> tuple[bytes | None, bytes | None]:
        """Send request ``method`` as it came (raw JSON params): the server's raw result, or its raw error object."""
        ...

    def end(self, reason: HostError) -> None: ...

    # The process's end, for the teardown of a transport with a local tree
    # (a remote one has none: exited, nothing to wait for or close).
    def has_exited(self) -> bool: ...

    async def wait_exited(self, timeout: float) -> bool: ...

    def close_transport(self) -> None: ...


__all__ = ["OnProgress", "OnRequest", "TransportSession"]
