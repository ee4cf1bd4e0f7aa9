"""What opens server configs: per run, ahead of a run, or from a config file.

- ``plugin``: the ``MCP`` lovia plugin (setup, the run's tools, closing
  exactly what it opened);
- ``servers``: ``MCPServerStdio`` and ``MCPServerStreamableHTTP``, a config
  with ``open()`` and ``session()``, and ``open_server``, the one place a
  config is opened;
- ``spares``: warm spares, opened per-run connections kept ready for the
  next run;
- ``ahead``: what is kept ready ahead of a run (idle workers, spares,
  standby), and the one place a run begins and ends;
- ``config_file/``: server configs from ``mcp.json`` files (``load_servers``),
  joined to their lock file, and ``lovia-mcp lock``;
- ``_deferred``: the deferred tools' search/call pair (owned copies of
  lovia's helpers).
"""

__all__: list[str] = []
