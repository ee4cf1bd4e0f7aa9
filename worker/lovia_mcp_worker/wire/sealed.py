"""A sealed tree: the files a locked server runs from, and the stamp that says they are the ones checked.

A locked package server (``lovia-mcp lock``) runs only from its cache entry,
whose content the agent checks against the lock's digest before the first
start. A server then restarts in the worker (a crash, a timeout kill, a
spare promoted) with no agent in between, so the worker checks the tree
again before every start, cheaply: the :func:`stamp` of every entry's
identity (path, mode, inode, size, change and modification time). A file
cannot be written, replaced, renamed or chmodded without changing its
change time, which no caller can set back, so an unchanged stamp means
unchanged content.

The agent takes the stamp *before* it reads the tree for the digest: a
change made while it reads changes the stamp the worker then compares.

Both sides must walk the same tree the same way, so the walk lives here, in
the one package both import.

Caveats: the stamp holds against a change of the files, not against a
change of the whole file system under them (a bind mount over the entry,
say); the walk does not follow symbolic links (a link is stamped as a link,
and the digest covers its target text).
"""

from __future__ import annotations

import hashlib
import os

import msgspec


class Sealed(msgspec.Struct, frozen=True, array_like=True):
    """A tree a server starts from, and its stamp when the agent checked it (inside ``ServerSpec``)."""

    root: str
    stamp: str


def stamp(root: str) -> str:
    """The hex digest of every entry's identity under ``root``, in a fixed order; a missing root: ``""``."""
    digest = hashlib.sha256()
    cut = len(root) + 1

    def visit(folder: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            digest.update(
                f"{entry.path[cut:]}\0{st.st_mode}\0{st.st_ino}\0{st.st_size}\0{st.st_ctime_ns}\0{st.st_mtime_ns}\n".encode(
                    "utf-8", "surrogateescape"
                )
            )
            if entry.is_dir(follow_symlinks=False):
                visit(entry.path)

    try:
        visit(root)
    except FileNotFoundError:
        return ""
    return digest.hexdigest()


__all__ = ["Sealed", "stamp"]
