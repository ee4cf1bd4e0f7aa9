"""The box around a stdio server.

- ``backend``: what a backend provides (the ``Backend`` protocol, its
  ``LaunchPlan``) and ``SandboxError``;
- ``registry``: the backends by name, and ``auto``, which delegates to the
  first one available: a new backend is one module (``x.py``, class
  ``XBackend``) and its name in the wire's ``BuiltinBackend``;
- ``bwrap``: the namespace backend, a bubblewrap command line;
- ``landlock``: the Landlock + seccomp backend, where namespaces are refused;
- ``pinned``: the configured paths, opened as they were pinned at the open;
- ``writedeny``: the entries of a writable folder that stay read-only;
- ``seccomp``: the system-call filter every backend puts on the server;
  ``privileges``: the capabilities a Landlock-boxed server gives up before
  its exec; ``_runtime``: what a boxed command must read to run at all;
- ``egress/``: the worker's allowlist proxy, a sandboxed server's only way
  to the network, its forwarder inside the box, and who hears of what the
  sandbox refuses.
"""

__all__: list[str] = []
