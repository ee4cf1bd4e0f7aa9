"""A config's servers joined to their entries in the lock file.

``load_servers`` (and through it ``MCP.from_config``, ``lovia-mcp check``,
``tools``, ``call`` and ``serve``) calls :func:`with_lock`: the lock beside
the config when there is one, the one ``lock=`` names, or none
(``lock=False``). A config with no lock behaves as it would without this
module. With one, every server gets its entry (or ``entry=None``: the
lock does not know it, so each of its tools is new); a package server is
launched from the cache the entry names (:mod:`lovia_mcp.lock.packages`).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

from lovia.exceptions import UserError

from ...lock.lockfile import Locked, PackageLock, default_lock_path, read_lock
from ...lock.packages import entry_dir, launch, refused
from ..servers import MCPServer, MCPServerStdio

LockOption = str | os.PathLike[str] | bool | None


def lock_path(config: str | os.PathLike[str] | None, lock: LockOption) -> Path | None:
    """The lock file to use: ``lock`` named, else the one beside ``config`` if it exists; None: no lock."""
    if lock is False:
        return None
    if lock is not None and lock is not True:
        return Path(lock).expanduser()
    if config is None:
        return None
    beside = default_lock_path(Path(config).expanduser())
    return beside if beside.exists() or lock is True else None


def with_lock(servers: list[MCPServer], path: Path, config: str | os.PathLike[str] | None) -> list[MCPServer]:
    """``servers``, each with its lock entry attached (and a package server's launch from the cache)."""
    lock = read_lock(path)
    config_path = None if config is None else os.fspath(config)
    out: list[MCPServer] = []
    for server in servers:
        entry = lock.servers.get(server.name or "")
        locked = Locked(entry=entry, lock_path=os.fspath(path), config_path=config_path)
        joined = dataclasses.replace(server, locked=locked)
        if entry is not None and entry.package is not None and isinstance(joined, MCPServerStdio):
            _same_source(joined, entry.source, locked)
            joined = launch_from_cache(joined, entry.package, locked)
        out.append(joined)
    return out


def launch_from_cache(server: MCPServerStdio, package: PackageLock, locked: Locked) -> MCPServerStdio:
    """``server`` launched from the cache entry the lock names (its form checked now, its files when it is opened)."""
    refused(package, locked.entry.source if locked.entry is not None else None, server.name, locked)
    command, args, env = launch(package, entry_dir(package))
    return dataclasses.replace(
        server, command=command, args=args, env={**(server.env or {}), **env} if env else server.env
    )


def _same_source(server: MCPServerStdio, source: list[str] | None, locked: Locked) -> None:
    """A package server's config must still say what was locked: its launch is replaced by the lock's."""
    now = [server.command, *(server.args or [])]
    if source is not None and now != source:
        raise UserError(
            f"MCP server {server.name!r}: the config runs {shlex.join(now)}, the lock was made for "
            f"{shlex.join(source)}",
            hint=f"Lock what the config says now: {locked.command('lock --update', server.name)}.",
        )


__all__ = ["LockOption", "launch_from_cache", "lock_path", "with_lock"]
