"""lovia-mcp: lovia's MCP plugin with process isolation.

Layout: this package is the *agent side*. It imports ``lovia`` and never
``mcp`` (with ``isolation="process"`` the agent process never loads it).
Its modules are layers, top to bottom; each imports only from its own layer
or those below (tests/project/test_layout.py holds the order):

- the front ends: ``cli/`` (the ``lovia-mcp`` command), ``gateway/``
  (``lovia-mcp serve``), ``doctor/`` (what ``lovia-mcp doctor`` reports:
  escape probes run in each sandbox backend's real box, the kernel's
  facts), ``demo``;
- what opens configs: ``plugin`` (the ``MCP`` lovia plugin); ``servers``
  (``MCPServerStdio``, ``MCPServerStreamableHTTP``: a config with
  ``open()`` and ``session()``, and ``open_server``, the one place a config
  is opened); ``spares`` (warm spares, opened per-run connections kept
  ready for the next run); ``ahead`` (what is kept ready ahead of a run:
  idle workers, spares, standby, and the one place a run begins and ends);
  ``config_file/`` (server configs from ``mcp.json`` files,
  ``load_servers``, joined to their lock file; ``lovia-mcp lock``); ``_deferred`` (the deferred tools' search/call pair,
  owned copies of lovia's helpers);
- ``connection``: the live connection as lovia sees it (its fields, tools,
  calls), each failure mapped once (``_errors``), the lovia tools built
  from a listing (``_tools``), lovia's connection fields (``_parity``);
- ``client/``: the client core under the connection (request ids, the
  channel and its replacement, dispatch, the one retry decision, the
  restart circuit), the channels (a worker process over a pipe, or the
  in-process host) and the agent's handle on its forkserver;
- ``config``: the frozen server configs as descriptions (fields, checks, the
  spec a worker is told), which open nothing; ``_sandbox_config``
  (``sandbox=`` values, their paths pinned once); ``annotations``
  (``MCPTool``, a tool with its hints and ``_meta``, and the policies built
  on the hints); ``lock/`` (the lock file: tool definitions pinned, package
  servers installed into a verified cache);
- the leaves, importing nothing of the package: ``_isolation`` (the
  isolation modes, defined once), ``_names`` (tool names made safe for
  providers), ``render`` (results and schemas as the model sees them),
  ``tracing`` (OpenTelemetry spans, trace context and the duration metric,
  at no cost unless the application has loaded OpenTelemetry).

The *worker side* is the ``lovia_mcp_worker`` package (``worker/`` in the
repository). The agent imports from it only this public surface, all of it
``mcp``-free (tests/project/test_layout.py checks):

- ``wire``: the messages, MCP's JSON codec, ``Limits``/``Sandbox`` and the
  length-framed pipe: the one package both sides are written against;
- ``session.host.Host``: the host, run in the agent's own loop for
  ``isolation="none"``;
- ``sandbox.netrequest``: the allowlist's host-name patterns (pure), so a
  config's ``deniedDomains`` is checked against them before anything starts.
- ``sandbox.registry``: the sandbox backends' names (it loads no backend
  until one is asked for), for ``Sandbox(backend=...)`` and the CLI.

It also names, without importing them, what the forkserver runs:
``lovia_mcp_worker.forkserver.server.serve`` and the preload list (``client.forkserver``).
"""

import logging
from importlib import metadata as _metadata

from lovia.exceptions import MCPError, UserError
from lovia_mcp_worker.wire.confinement import Limits, Sandbox
from lovia_mcp_worker.wire.messages import CallUsage, HostEgress, Stats

from .annotations import MCPTool, ToolAnnotations
from .config_file.loader import load_servers
from .connection import MCPConnection
from .plugin import MCP, MCPServerLike
from .render import MCPToolResult, normalize_schema, render_mcp_content
from .servers import MCPServer, MCPServerStdio, MCPServerStreamableHTTP
from .spares import close_spares, warm_spares

try:
    __version__ = _metadata.version("lovia-mcp")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# A library logs, it does not print: without the application's own logging
# set-up, records stop here instead of reaching stderr via the last resort.
logging.getLogger("lovia_mcp").addHandler(logging.NullHandler())

__all__ = [
    "__version__",
    "MCP",
    "CallUsage",
    "HostEgress",
    "Limits",
    "MCPConnection",
    "MCPError",
    "MCPServer",
    "MCPServerLike",
    "MCPServerStdio",
    "MCPServerStreamableHTTP",
    "MCPTool",
    "MCPToolResult",
    "Sandbox",
    "Stats",
    "ToolAnnotations",
    "UserError",
    "close_spares",
    "load_servers",
    "normalize_schema",
    "render_mcp_content",
    "warm_spares",
]
