"""The contained MCP gateway: ``lovia-mcp serve`` puts configured servers behind streamable HTTP.

Layout (agent side; the only part of ``lovia_mcp`` that imports ``mcp``'s
*server* side, and nothing imports it but ``lovia-mcp serve``, so this
``__init__`` imports no module of its own: the CLI reads ``options``
without loading the SDK):

- ``options``: the per-server ``session`` / ``max_sessions`` / ``idle`` keys
  of the config file, and the command's defaults;
- ``upstreams``: the servers behind the gateway, each an ordinary
  :class:`~lovia_mcp.MCPConnection` (shared, or one per client session or
  per principal from warm spares), so every containment guarantee holds per
  server, and whose server a call uses (its ``Holder``: a session or a
  principal; none for a shared server);
- ``app``: the ASGI app: composes the parts below per request and keeps the
  MCP request handlers (the SDK's low-level ``Server`` per endpoint);
- ``auth/``: who a request is, one scheme per module behind one
  ``Authenticator`` (none, the token file, an OAuth 2.1 resource server),
  picked from the command's options by ``auth.registry``;
- ``routes``: what each path is (health, readiness, metrics, ``/mcp``,
  ``/servers/<name>/mcp``), the header and version checks of an MCP
  request, and its dispatch to the endpoint's session managers;
- ``admission``: whether a request may enter now (opening waits, draining,
  each principal's share of the session cap), and the refusal if not;
- ``_http``: the answers the gateway writes itself (its refusals as
  JSON-RPC errors);
- ``fastpath``: a request answered in the SDK's JSON mode (a 2026-07-28
  ``tools/call`` or ``tools/list``, every POST of a 2025 session whose client
  declared none of sampling, elicitation and roots), turned into an event
  stream only when something must go before the answer (progress, a log
  message, a ping for a slow call);
- ``principals``: the principal a request carries, whichever scheme named
  it, and each principal's share of a cap; ``access``: what each principal
  may list and call (the config's ``"gateway": {"access": ...}``); ``audit``: the
  ``--audit-log`` line per call;
- ``sessions``: the 2025 sessions the SDK opened and the token each belongs
  to, the only session ids the gateway acts on;
- ``notify``: tool-list changes told to the clients (a 2025 session's
  notification, a 2026-07-28 client's ``subscriptions/listen`` stream);
- ``relay``: what a server says besides tools (a call's progress, its log
  messages, ``logging/setLevel``) relayed to the client it belongs to, and
  the capabilities advertised for it;
- ``connections``: uvicorn's HTTP protocol with bounds on what a client
  holds before its request is known (head timeout, connection cap);
- ``metrics``: the Prometheus text format, every name ``lovia_mcp_...``;
- ``serve``: the process: socket, uvicorn, the SIGTERM drain, exit status.

docs/gateway.md is the manual; docs/deploy.md the container and Kubernetes.
"""

__all__: list[str] = []
