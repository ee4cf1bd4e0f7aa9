"""lovia-mcp's worker side: the code that runs in each connection's worker process.

Layout:

- ``protocol``: msgspec messages and framing, the one module the agent side
  imports too (it must stay free of ``mcp`` imports);
- ``launch``: starting a stdio server with env, cwd, rlimits, own session;
- ``guard``: watching and killing a server's process tree;
- ``host``: the supervised MCP ``ClientSession`` (also used in-process by
  ``isolation="none"``);
- ``main``: the worker process's loop over its pipe.

This package imports ``mcp`` and never ``lovia``.
"""

__all__: list[str] = []
