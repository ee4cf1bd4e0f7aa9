"""The server configs a caller builds: a config (:mod:`..config`) that opens.

``MCPServerStdio`` and ``MCPServerStreamableHTTP`` are the frozen
descriptions of :mod:`..config` with lovia's two ways to open one:
``open()`` (a per-run connection, owned by the caller) and ``session()``
(a persistent one, closed when the block ends). Both go through
:func:`open_server`, which is also what the plugin calls: it takes a warm
spare where the config keeps them (:mod:`.spares`) and otherwise opens a
fresh :class:`~lovia_mcp.connection.MCPConnection`.

The split is the layering: the connection and the spares are written
against the descriptions, and only this module, above them, knows both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..config._isolation import Isolation
from ..config.server import ServerConfig, StdioConfig, StreamableHTTPConfig
from ..connection.live import MCPConnection
from . import spares


async def open_server(server: ServerConfig, *, isolation: Isolation | None, close_after_run: bool) -> MCPConnection:
    """Open ``server``: a ready spare when it keeps them, else a fresh connection.

    ``isolation`` is the default for a config that sets none (the plugin's);
    a config's own ``isolation`` wins, and ``"process"`` is the last resort.
    """
    mode: Isolation = server.isolation or isolation or "process"
    # Per-run opens take the pool's spares; a persistent connection keeps
    # a standby server in its own worker instead (MCPConnection).
    pooled = bool(server.spares) and mode == "process" and close_after_run
    if pooled:
        spare = await spares.take(server, close_after_run=close_after_run)
        if spare is not None:
            return spare
    conn = MCPConnection(server, isolation=mode, close_after_run=close_after_run)
    await conn.connect()
    if pooled:
        # After this open, not beside it: the two would compete for the
        # CPU. (Not after a failed one: a broken config starts nothing more.)
        spares.refill(server)
    return conn


@dataclass(frozen=True, kw_only=True)
class MCPServer(ServerConfig):
    """Options shared by every transport (see the table in docs/options.md), and opening."""

    async def open(self) -> MCPConnection:
        """Open a fresh connection owned by the caller (the runtime, per run)."""
        return await open_server(self, isolation=None, close_after_run=self.close_after_run)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[MCPConnection]:
        """Open a persistent connection for reuse across runs; closed on exit."""
        conn = await open_server(self, isolation=None, close_after_run=False)
        try:
            yield conn
        finally:
            await conn.close()


@dataclass(frozen=True, kw_only=True)
class MCPServerStdio(StdioConfig, MCPServer):
    """Launch a local MCP server and speak MCP over its stdin/stdout."""


@dataclass(frozen=True, kw_only=True)
class MCPServerStreamableHTTP(StreamableHTTPConfig, MCPServer):
    """Connect to a streamable-HTTP MCP endpoint (from the worker, in process mode).

    Process limits do not apply (there is no local server tree); timeouts,
    crash containment of the client side and ``max_result_bytes`` do.
    """


__all__ = ["MCPServer", "MCPServerStdio", "MCPServerStreamableHTTP", "open_server"]
