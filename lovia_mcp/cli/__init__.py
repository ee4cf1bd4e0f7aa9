"""The ``lovia-mcp`` command.

- ``main``: the subcommands (``tools``, ``call``, ``check``, ``serve``, ``demo``;
  ``serve`` runs :mod:`lovia_mcp.gateway`);
- ``_args``: options, help texts and exit statuses; ``_servers``: which
  servers a command line names; ``_table``: the tables it prints;
  ``_progress``: the status line while it waits; ``_terminal``: what a
  server chose, escaped before it reaches the terminal.
"""

__all__: list[str] = []
