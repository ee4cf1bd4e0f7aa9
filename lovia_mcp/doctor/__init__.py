"""``lovia-mcp doctor``: what the sandbox and the limits hold on this machine, shown by trying.

- ``probes``: the escape probes and the small stdio MCP server that runs
  them inside a box (standard library only, one file: it runs as a script);
- ``suite``: the targets planted outside the box, and the probes run inside
  each backend's real box;
- ``report``: the kernel's facts (from the worker package's
  ``containment.machine``), the backends, the cgroups, each configured
  server's plan, and what makes the command fail.

The command itself (options, text, exit status) is :mod:`lovia_mcp.cli.doctor`.
"""

__all__: list[str] = []
