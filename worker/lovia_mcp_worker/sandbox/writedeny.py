"""The entries of a writable folder that stay read-only (sandbox-runtime's mandatory deny list).

A server that may write its cwd could otherwise plant code that runs on the
host later: a git hook or ``core.fsmonitor`` in ``.git/config`` (the next
``git status``), a shell rc file (the next shell), an editor's task or an
MCP configuration (the next editor or agent start). :data:`WRITE_DENY`
names them relative to cwd and each ``writable=`` path; ``read_only=`` adds
paths of the user's own; ``write_deny=False`` drops the list.

Both backends keep the *existing* entries read-only (bwrap binds each one
read-only over itself; Landlock grants the folder's other entries instead of
the folder). An entry that does not exist when the server starts is not
covered on bwrap (there is nothing to bind); on Landlock the folder that would
hold it is only writable entry by entry, so it cannot be created at its top.
"""

from __future__ import annotations

import os

from ..wire.confinement import WRITE_DENY, Sandbox


def protected_entries(box: Sandbox, roots: list[str]) -> list[str]:
    """The existing protected entries under the writable ``roots``, plus ``read_only``, resolved."""
    out = [os.path.realpath(p) for p in box.read_only if os.path.lexists(p)]
    if box.write_deny:
        for root in roots:
            for rel in WRITE_DENY:
                path = os.path.join(root, rel)
                if os.path.lexists(path):
                    out.append(os.path.realpath(path))
    return list(dict.fromkeys(out))


__all__ = ["WRITE_DENY", "protected_entries"]
