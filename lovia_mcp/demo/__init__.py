"""``lovia-mcp demo``: a lovia agent survives its MCP server crashing, offline.

- ``run``: the demo (a real ``Agent`` driven by lovia's ``ScriptedProvider``
  against ``lovia_mcp/examples/demo_server.py``);
- ``_boxed``: its second chapter, the same server bare and boxed.
"""

__all__: list[str] = []
