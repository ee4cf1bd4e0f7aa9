"""The ``MCP`` plugin: lovia's MCP plugin, with each server in its own worker.

Per run, ``setup`` opens every server config (closing them at run end) and
uses every live connection as is (never closing it). The run's end only
starts those closes (:mod:`..client.closing`): ``MCP.aclose()``,
``close_spares()`` and the loop's end wait for them. Servers with
``defer=True`` are reached through one shared ``search_mcp_tools`` /
``call_mcp_tool`` pair, built by a copy of lovia's own code (``_deferred``)
so behaviour matches exactly. When setup fails half-way, exactly the
connections it opened are closed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import weakref
from typing import Any, Final, Protocol

from lovia.exceptions import UserError
from lovia.plugins.base import PluginInstance
from lovia.run_context import RunContext
from lovia.tools import Tool
from lovia_mcp_worker.wire.confinement import Sandbox

from ..client import closing
from ..client.forkserver import warm_up_soon
from ..config import _sandbox
from ..config._isolation import ISOLATIONS, Isolation
from ..connection.live import MCPConnection
from . import ahead, spares
from ._deferred import deferred_instructions, make_call_tool, make_search_tool
from .config_file.loader import ConfigSource, load_servers
from .config_file.locks import LockOption
from .servers import MCPServer, MCPServerStdio, MCPServerStreamableHTTP, open_server

logger = logging.getLogger("lovia_mcp")


class MCPServerLike(Protocol):
    """What :class:`MCP` needs of each entry: a config or a live connection."""

    @property
    def close_after_run(self) -> bool: ...

    @property
    def defer(self) -> bool: ...

    async def open(self) -> MCPConnection: ...


class MCP:
    """Mount MCP servers' tools on an agent, each server in its own worker.

    ``isolation`` applies to servers that do not set their own: ``"process"``
    (the default) or ``"none"`` (in the agent process, lovia's behaviour).
    """

    name: str

    def __init__(
        self,
        *servers: MCPServerLike,
        name: str = "mcp",
        isolation: Isolation = "process",
        sandbox: Sandbox | bool | dict[str, Any] | None = None,
    ) -> None:
        if isolation not in ISOLATIONS:
            raise UserError(f"unknown isolation {isolation!r}", hint="Use isolation='process' or 'none'.")
        servers = tuple(_from_lovia(s) for s in servers)
        for s in servers:
            if not (isinstance(s, (MCPServer, MCPConnection)) or hasattr(s, "open")):
                raise UserError(
                    f"MCP() takes server configs or connections, got {type(s).__name__}",
                    hint="MCP(MCPServerStdio(command=...), MCPServerStreamableHTTP(url=...))",
                )
        self.servers = tuple(servers)
        self.name = name
        self.isolation: Isolation = isolation
        # The default for stdio configs that set no sandbox of their own.
        self.sandbox = _sandbox.coerce(sandbox)
        if self.sandbox is not None:
            servers = tuple(
                dataclasses.replace(s, sandbox=self.sandbox)
                if isinstance(s, MCPServerStdio) and s.sandbox is None
                else s
                for s in servers
            )
            self.servers = servers
        self._open: weakref.WeakSet[MCPConnection] = weakref.WeakSet()
        isolated = [s for s in servers if isinstance(s, MCPServer) and (s.isolation or isolation) == "process"]
        if isolated:
            # The first worker then forks from a warm forkserver; with the MCP
            # SDK preloaded only if an HTTP server will need it (stdio workers
            # never import it).
            warm_up_soon(http=any(isinstance(s, MCPServerStreamableHTTP) for s in isolated))

    @classmethod
    def from_config(
        cls,
        source: ConfigSource,
        /,
        *,
        name: str = "mcp",
        isolation: Isolation = "process",
        sandbox: Sandbox | bool | dict[str, Any] | None = None,
        lock: LockOption = None,
        **overrides: Any,
    ) -> MCP:
        """The plugin for every server of an ``mcp.json`` (see :func:`~lovia_mcp.opening.config_file.loader.load_servers`).

        The lock beside the file is used when there is one; ``lock=`` names another, ``lock=False`` none.
        """
        servers = load_servers(source, lock=lock, **overrides)
        return cls(*servers, name=name, isolation=isolation, sandbox=sandbox)

    def connections(self) -> list[MCPConnection]:
        """The connections this plugin opened that are still open (for ``stats()``)."""
        return [c for c in self._open if not c.closed]

    async def aclose(self) -> None:
        """Close the warm spares of this plugin's configs on the running loop (shared ones included),
        and wait for every close a run's end started on this loop (every worker joined).

        Runs never close spares (keeping them between runs is their point);
        this, :func:`~lovia_mcp.opening.spares.close_spares`, idle expiry or the
        loop's end do.
        """
        spared = [s for s in self.servers if isinstance(s, MCPServer) and s.spares]
        if spared:
            await spares.close_spares(*spared)
        await closing.wait_closed()

    async def _open_server(self, server: MCPServerLike) -> MCPConnection:
        if isinstance(server, MCPServer):
            conn = await open_server(server, isolation=self.isolation, close_after_run=server.close_after_run)
        else:
            conn = await server.open()
        self._open.add(conn)
        return conn

    async def _open_all(self, closers: list[MCPConnection]) -> list[MCPConnection]:
        """Open every server at once: a run waits for the slowest, not the sum.

        When one fails, the opens still running are cancelled (an open closes
        what it started) and the first failure is raised; ``closers`` then
        holds every per-run connection that did open.
        """
        tasks = [asyncio.ensure_future(self._open_server(s)) for s in self.servers]

        def keep(server: MCPServerLike, task: asyncio.Task[MCPConnection]) -> None:
            if server.close_after_run and not task.cancelled() and task.exception() is None:
                closers.append(task.result())

        for server, task in zip(self.servers, tasks):
            task.add_done_callback(functools.partial(keep, server))
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        except BaseException:
            pending = set(tasks)
            done = set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        failed = [t for t in tasks if t in done and not t.cancelled() and t.exception() is not None]
        if failed:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            exc = failed[0].exception()
            assert exc is not None
            raise exc
        return [t.result() for t in tasks]

    async def setup(self, ctx: RunContext[Any]) -> PluginInstance:
        _ = ctx
        exposed: list[Tool] = []
        deferred: dict[str, Tool] = {}
        deferred_by_server: list[tuple[str | None, list[str]]] = []
        closers: list[MCPConnection] = []

        ended = False

        def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                ahead.run_ended()

        async def aclose() -> None:
            # The run's end: each close is started, not waited for (the
            # worker kills its tree; MCP.aclose(), close_spares() and the
            # loop's end wait for it). Refills may start once no run is on.
            for conn in reversed(closers):
                conn.close_soon()
            end()

        async def abandon() -> None:
            # Setup failed half-way: close exactly what was opened, and wait.
            try:
                await asyncio.gather(*(conn.close() for conn in reversed(closers)), return_exceptions=True)
            finally:
                end()

        ahead.run_began()

        try:
            conns = await self._open_all(closers)
            for server, conn in zip(self.servers, conns):
                if server.defer:
                    names: list[str] = []
                    for t in conn.tools():
                        if t.name in deferred:
                            raise UserError(
                                f"deferred MCP tool name clash: {t.name!r} is provided by two servers.",
                                hint="Set MCPServer(name=...) to prefix one server's tools.",
                            )
                        deferred[t.name] = t
                        names.append(t.name)
                    deferred_by_server.append((conn.prefix, names))
                else:
                    exposed.extend(conn.tools())
            overlap = sorted(deferred.keys() & {t.name for t in exposed})
            if overlap:
                raise UserError(
                    f"deferred MCP tool name clash with exposed tools: {', '.join(overlap)}.",
                    hint="Set MCPServer(name=...) to prefix one server's tools.",
                )
        except BaseException:
            await abandon()
            raise
        instructions: str | None = None
        if deferred:
            exposed.append(make_search_tool(deferred))
            exposed.append(make_call_tool(deferred))
            instructions = deferred_instructions(deferred_by_server)
        return PluginInstance(tools=exposed, instructions=instructions, aclose=aclose)


# The options lovia's own server configs share with ours, copied as they are.
_LOVIA_SHARED: Final = (
    "name",
    "include_tools",
    "exclude_tools",
    "needs_approval",
    "retries",
    "timeout",
    "max_output_chars",
    "result_renderer",
    "auto_reconnect",
    "close_after_run",
    "defer",
)


def _from_lovia(server: Any) -> Any:
    """lovia's own ``MCPServerStdio`` / ``MCPServerStreamableHTTP`` as lovia-mcp's configs.

    Someone replacing the import one server at a time hands us lovia's
    configs; they are converted (and so isolated). A live lovia connection
    cannot be taken over: it is refused, before anything is opened.
    """
    from lovia.plugins import mcp as lovia_mcp_plugin

    if isinstance(server, lovia_mcp_plugin.MCPConnection):
        raise UserError(
            "MCP() got a live connection of lovia's own plugin (lovia.plugins.mcp), which runs in this process",
            hint="Pass the server config instead, or open it with lovia_mcp: lovia_mcp.MCPServerStdio(...).session().",
        )
    if not isinstance(server, lovia_mcp_plugin.MCPServer):
        return server
    shared = {f: getattr(server, f) for f in _LOVIA_SHARED}
    if isinstance(server, lovia_mcp_plugin.MCPServerStdio):
        return MCPServerStdio(command=server.command, args=server.args, env=server.env, **shared)
    if isinstance(server, lovia_mcp_plugin.MCPServerStreamableHTTP):
        return MCPServerStreamableHTTP(url=server.url, headers=server.headers, **shared)
    raise UserError(
        f"MCP() cannot convert lovia's {type(server).__name__}",
        hint="Use lovia_mcp.MCPServerStdio(...) or lovia_mcp.MCPServerStreamableHTTP(...).",
    )


__all__ = ["MCP", "MCPServerLike"]
