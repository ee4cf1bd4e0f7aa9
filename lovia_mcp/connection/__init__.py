"""The live connection, as lovia sees it.

- ``live``: ``MCPConnection``: its fields, tools and calls over the client
  core, and the lock's check before a locked server starts;
- ``_tools``: the lovia tools built from a listing;
- ``_errors``: each worker failure mapped once to the error lovia raises;
- ``_parity``: the fields lovia's own connection has, kept in step.
"""

__all__: list[str] = []
