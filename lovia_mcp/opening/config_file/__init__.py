"""Server configs from ``mcp.json`` files.

- ``loader``: ``load_servers`` and the file formats it reads;
- ``_values``: JSON values checked against, and converted to, the config
  fields' types;
- ``_variables``: ``${VAR}`` and VS Code's ``${workspaceFolder}``... in
  the values;
- ``locks``: a file's servers joined to their entries in its lock file;
- ``locking``: ``lovia-mcp lock``: open the servers, pin them, write the lock.
"""

__all__: list[str] = []
