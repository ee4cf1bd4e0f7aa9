"""lovia-mcp's worker side: the code that runs in each connection's worker process.

Layout:

- ``protocol``, ``framing``: the wire messages and frames, shared with the agent;
- ``host``: request dispatch and generations (also run in-process by
  ``isolation="none"``); ``generation``: one server's life as a state machine;
- ``stdio``, ``jsonrpc``, ``_jsonscan``: the stdio transport and our own
  JSON-RPC client; ``http``: streamable HTTP through the MCP SDK;
- ``failures``, ``content``: failure wording and result conversion (pure);
- ``launch``, ``sandbox``, ``netroute``/``netproxy``/``_netbridge``: starting a
  server (env, cwd, rlimits, bubblewrap, the network allowlist proxy);
- ``guard``, ``cgroup``: watching, limiting and killing a generation's tree;
- ``main``, ``process``: the worker's loop over its pipe, and the forkserver.

Only ``http`` imports ``mcp`` (for HTTP servers); nothing imports ``lovia``.
"""

__all__: list[str] = []
