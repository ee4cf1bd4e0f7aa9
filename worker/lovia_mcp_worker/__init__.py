"""lovia-mcp's worker side: the code that runs in each connection's worker process.

Layout, top to bottom (a package imports only those below it; each
subpackage's ``__init__`` says more):

- ``forkserver/``: processes: the forkserver, a forked child becoming a
  worker, the worker's loop and its end of the agent's socket;
- ``session/``: the host (request dispatch, generations and their
  containment, the calls' deadlines, standby, re-listing, progress); also
  run in-process by ``isolation="none"``;
- ``transport/``: talking to a server: stdio with our own JSON-RPC client, or
  streamable HTTP through the MCP SDK; results as wire structs;
- ``containment/``: launching a server (env, cwd, rlimits) and watching,
  limiting and killing each generation's tree (cgroups or the psutil watch);
- ``sandbox/``: the box around a stdio server (namespaces through bubblewrap,
  or Landlock + seccomp) and the network allowlist proxy;
- ``wire/``: what crosses the pipe (messages, MCP's JSON, what a server is
  launched under, framing, failures), the one package the agent shares.

The agent imports only ``wire``, ``session.host.Host`` (for
``isolation="none"``), ``sandbox.netrequest`` (host-name patterns, to
check a config's ``deniedDomains``) and ``sandbox.registry`` (the backends'
names); ``lovia_mcp/__init__.py`` names them.

Only ``transport.http`` imports ``mcp`` (for HTTP servers); nothing imports ``lovia``.
"""

__all__: list[str] = []
