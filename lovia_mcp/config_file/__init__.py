"""Server configs from ``mcp.json`` files.

- ``loader``: ``load_servers`` and the file formats it reads;
- ``_values``: JSON values checked against, and converted to, the config
  fields' types.
"""

__all__: list[str] = []
