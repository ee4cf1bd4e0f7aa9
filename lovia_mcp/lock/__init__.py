"""Lock and pin: what a config's servers run and which tools they may offer.

- ``definition``: a tool's canonical definition and its hash;
- ``lockfile``: the lock file's format (``<config stem>.lock.json``);
- ``pins``: a listing screened against the lock (quarantine, warn, off);
- ``packages``: package servers (``uvx``, ``npx``, ...) resolved, installed
  into a content-addressed cache, verified, launched from it.

A layer with the configs: a config holds its lock entry, the connection
screens its listings with ``pins``, and ``servers.open_server`` checks the
cache. Joining a config file's servers to their entries, and ``lovia-mcp
lock`` itself, open configs, so they live above, in ``config_file``
(``locks``, ``locking``).
"""

__all__: list[str] = []
