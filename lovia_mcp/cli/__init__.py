"""The ``lovia-mcp`` command.

- ``main``: the subcommands (``tools``, ``call``, ``check``, ``serve``, ``doctor``,
  ``demo``; ``serve`` runs :mod:`lovia_mcp.gateway`);
- ``doctor``: ``lovia-mcp doctor``'s options' reading, its text and exit
  status (the report is :mod:`lovia_mcp.doctor`'s);
- ``_args``: options, help texts and exit statuses; ``_servers``: which
  servers a command line names; ``_table``: the tables it prints;
  ``_progress``: the status line while it waits; ``_terminal``: what a
  server chose, escaped before it reaches the terminal.
"""

__all__: list[str] = []
