"""lovia-mcp: lovia's MCP plugin with process isolation.

Layout: this package is the *agent side*. It imports ``lovia`` and never
``mcp`` (with ``isolation="process"`` the agent process never loads it).
Its folders are layers, top to bottom; each imports only from its own layer
or those below (tests/project/test_layout.py holds the order):

- the front ends: ``cli/`` (the ``lovia-mcp`` command), ``gateway/``
  (``lovia-mcp serve``), ``doctor/`` (what ``lovia-mcp doctor`` reports:
  escape probes run in each sandbox backend's real box, the kernel's
  facts), ``demo/`` (``lovia-mcp demo``), ``examples/`` (its server);
- ``opening/``: what opens configs (the ``MCP`` plugin, the servers, warm
  spares, what is kept ready ahead of a run, config files and their lock);
- ``connection/``: the live connection as lovia sees it (its fields, tools,
  calls, each failure mapped once);
- ``client/``: the client core under the connection (request ids, the
  channel and its replacement, dispatch, the one retry decision, the
  restart circuit), the channels and the agent's handle on its forkserver;
- ``config/``: the frozen server configs as descriptions, which open
  nothing; and ``lock/`` (the lock file: tool definitions pinned, package
  servers installed into a verified cache and launched from it);
- the leaves, importing nothing of the package: ``_names`` (tool names made
  safe for providers), ``render`` (results and schemas as the model sees
  them), ``tracing`` (OpenTelemetry spans, trace context and the duration
  metric, at no cost unless the application has loaded OpenTelemetry).

The *worker side* is the ``lovia_mcp_worker`` package (``worker/`` in the
repository). The agent imports from it only this public surface, all of it
``mcp``-free (tests/project/test_layout.py checks):

- ``wire``: the messages, MCP's JSON codec, ``Limits``/``Sandbox``, the
  length-framed pipe and the timer heap: the one package both sides are
  written against;
- ``session.host.Host``: the host, run in the agent's own loop for
  ``isolation="none"``;
- ``sandbox.egress.netrequest``: the allowlist's host-name patterns (pure), so a
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

from .config.annotations import MCPTool, ToolAnnotations
from .connection.live import MCPConnection
from .opening.config_file.loader import load_servers
from .opening.plugin import MCP, MCPServerLike
from .opening.servers import MCPServer, MCPServerStdio, MCPServerStreamableHTTP
from .opening.spares import close_spares, warm_spares
from .render import MCPToolResult, normalize_schema, render_mcp_content

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
