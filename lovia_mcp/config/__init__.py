"""The server configs, as descriptions: fields, checks and the spec a worker is told; nothing here opens.

- ``server``: the frozen configs (``ServerConfig``, ``StdioConfig``,
  ``StreamableHTTPConfig``) and the spec each makes;
- ``_sandbox``: ``sandbox=`` values, their paths pinned once;
- ``annotations``: ``MCPTool`` (a tool with its hints and ``_meta``) and the
  policies built on the hints;
- ``_isolation``: the isolation modes, defined once.
"""

__all__: list[str] = []
