"""Lock and pin: what a config's servers run and which tools they may offer.

- ``definition``: a tool's canonical definition and its hash;
- ``lockfile``: the lock file's format (``<config stem>.lock.json``);
- ``pins``: a listing screened against the lock (quarantine, warn, off);
- ``packages``: package servers (``uvx``, ``npx``, ...) resolved, installed
  into a content-addressed cache, verified, launched from it;
- ``attach``: a config's servers joined to their lock entries;
- ``locking``: ``lovia-mcp lock`` itself (opens the servers, writes the lock).

The first three sit below the server configs (a config holds its lock
entry); ``attach`` and ``locking`` sit above them. This module imports
none of them, so a config can import the lower ones without a cycle.
"""

__all__: list[str] = []
