"""A sandboxed server's only way to the network: the worker's allowlist proxy, and what it refuses.

- ``netroute``: a box's route out, made once per worker and shared;
- ``netproxy``: the proxy (CONNECT and plain HTTP, the address check of
  each name, the upstream proxy);
- ``netrequest``: the request heads it reads, the host-name patterns, and
  ``host:port`` (pure, so the agent checks a config's names with them);
- ``netbridge``: the command lines of the forwarder inside a box, the proxy
  variables, and the deny-all route of a box with the network off;
  ``_netbridge``: that forwarder;
- ``reporter``: who hears of what the sandbox refuses (the session host,
  which attributes it to the calls in flight). A refusal itself, and its
  words, are the wire's (:mod:`lovia_mcp_worker.wire.refusals`): the agent
  reads them too.
"""

__all__: list[str] = []
