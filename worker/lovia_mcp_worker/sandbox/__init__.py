"""The box around a stdio server.

- ``bwrap``: the namespace backend, a bubblewrap command line;
- ``seccomp``: the system-call filter every backend puts on the server;
- ``netroute``, ``netproxy``, ``netrequest``: the worker's allowlist proxy, a
  sandboxed server's only way to the network; ``_netbridge``: its forwarder
  inside the box.
"""

__all__: list[str] = []
