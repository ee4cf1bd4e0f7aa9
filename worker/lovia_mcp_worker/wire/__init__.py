"""The wire: what crosses the agent-worker pipe, and the one place both sides import.

- ``messages``: every message as a frozen, tagged msgspec ``Struct`` (a union
  per direction, decoders built once);
- ``mcpjson``: MCP's JSON (content blocks, tool listings, annotations) read
  into wire structs, the codec of both sides;
- ``confinement``: what a server is launched under (``Limits``, ``Sandbox``);
- ``framing``: the length-framed socket, read the same way on both sides;
- ``failures``: every way a server can fail, as the caller is told it;
- ``refusals``: what the sandbox's egress refused, as data (``EgressRefusal``),
  and the one function that words it for the client, the log and the model;
- ``environment``: the variables a server gets by default (trust paths and
  proxies without credentials included), and the hint its stderr calls for;
- ``hostport``: ``host:port``, read and written by one set of rules (an
  allowlist entry, the proxy's request targets, ``upstream_proxy``, the
  gateway's ``--listen``);
- ``sealed``: the tree a locked server runs from and its stamp, taken by
  the agent when it checks the tree, compared by the worker at every start.
- ``timers``: many keyed due times on one loop timer (the worker's call
  deadlines, the agent's stuck-worker backstop).

Standard library and msgspec only: the agent process imports this package
and must never load ``mcp``.
"""

__all__: list[str] = []
