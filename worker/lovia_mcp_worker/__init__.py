"""lovia-mcp's worker side: the code that runs in each connection's worker process.

Layout (each subpackage's ``__init__`` says more):

- ``protocol``, ``framing``: the wire messages and frames, shared with the agent
  (``_mcpjson``: MCP's JSON, the protocol's codec, re-exported by it);
  ``failures``: every way a server can fail, as the caller is told it (pure);
- ``session/``: the host (request dispatch, generations, standby, re-listing,
  progress); also run in-process by ``isolation="none"``;
- ``transport/``: talking to a server: stdio with our own JSON-RPC client, or
  streamable HTTP through the MCP SDK; results as wire structs;
- ``containment/``: launching a server (env, cwd, rlimits) and watching,
  limiting and killing each generation's tree (cgroups or the psutil watch);
- ``sandbox/``: the box around a stdio server (namespaces through bubblewrap,
  or Landlock + seccomp) and the network allowlist proxy;
- ``main``, ``channel``, ``process``, ``start``: the worker's loop, its end of
  the agent's socket (frames both ways), the forkserver's serving side, which
  also kills what a dead worker left, and a forked child becoming a worker
  (idle ahead of its request, or forked on it) (``_preload_begin``,
  ``_warm``, ``_warm_http``: what it loads before forking; ``pages``: the
  forkserver's pages an open writes, learned once and copied by each idle
  worker while it waits). The agent's handle on the forkserver is the
  agent's own (``lovia_mcp.client.forkserver``).

The agent imports only ``protocol``, ``framing``, ``session.host.Host``
(for ``isolation="none"``) and ``sandbox.netrequest`` (host-name patterns, to
check a config's ``deniedDomains``); ``lovia_mcp/__init__.py`` names them.

Only ``transport.http`` imports ``mcp`` (for HTTP servers); nothing imports ``lovia``.
"""

__all__: list[str] = []
