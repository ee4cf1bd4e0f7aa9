"""lovia-mcp: lovia's MCP plugin with process isolation.

Layout: this package is the *agent side*. It imports ``lovia`` and never
``mcp`` (with ``isolation="process"`` the agent process never loads it).

- ``config``: frozen server configs and ``Limits``;
- ``plugin``: the ``MCP`` lovia plugin;
- ``connection``: the live connection, request ids, retries, error mapping;
- ``render``: results and schemas as the model sees them;
- ``annotations``: ``MCPTool`` (a tool with its hints and ``_meta``) and the
  policies built on the hints;
- ``spares``: warm spares, opened per-run connections kept ready for the next run;
- ``ahead``: what is kept ready ahead of a run (idle workers, spares,
  standby) and the one place a run begins and ends;
- ``tracing``: OpenTelemetry spans, trace context and the duration metric of
  MCP operations (imported lazily: only where the application has OpenTelemetry);
- ``client/``: the client core under the connection (request ids, the
  channel and its replacement, dispatch, the one retry decision, the restart
  circuit), the channels (a worker process over a pipe, or the in-process
  host) and the agent's handle on its forkserver;
- ``_names``: tool names made safe for providers; ``_deferred``: the deferred
  tools' search/call pair (owned copies of lovia's helpers);
- ``_sandbox_config``: ``sandbox=`` values (``Sandbox``, ``True``, VS Code's block),
  their paths pinned once;
- ``_isolation``: the isolation modes, defined once; ``_errors``: a worker's
  failure as a lovia error, worded for the library;
- ``config_file/``: server configs from ``mcp.json`` files (``load_servers``);
- ``cli/``: the ``lovia-mcp`` command; ``gateway/``: ``lovia-mcp serve``;
  ``doctor/``: what ``lovia-mcp doctor`` reports (escape probes run in each
  sandbox backend's real box, the kernel's facts).

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
from lovia_mcp_worker.wire.messages import Stats

from .annotations import MCPTool, ToolAnnotations
from .config import MCPServer, MCPServerStdio, MCPServerStreamableHTTP
from .config_file.loader import load_servers
from .connection import MCPConnection
from .plugin import MCP, MCPServerLike
from .render import MCPToolResult, normalize_schema, render_mcp_content
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
