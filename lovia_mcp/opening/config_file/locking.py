"""``lovia-mcp lock``: open a config's servers, pin their tools, write the lock.

For each server chosen (every one, or those ``--server`` names):

- a package server (:mod:`lovia_mcp.lock.packages`) is resolved to an exact version and
  installed into the cache, with the user's own environment and package
  manager; its entry records the package, the artifacts' integrity hashes
  and the launch from the cache;
- the server is opened (a package server from the cache, as an agent will
  open it) and every tool it lists is pinned (:mod:`lovia_mcp.lock.definition`).

A server the lock already has is kept as it is unless ``update`` is given:
re-pinning is a decision, made after ``lovia-mcp check`` showed what
changed. Entries of servers no longer in the config are dropped. The file
is replaced at once, so a failed lock leaves the old one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ...lock import packages
from ...lock.definition import definition, definition_hash
from ...lock.ecosystems.registry import parse_runner
from ...lock.lockfile import Locked, LockFile, ServerLock, ToolPin, default_lock_path, read_lock, write_lock
from ..servers import MCPServer, MCPServerStdio
from .loader import load_servers
from .locks import launch_from_cache


@dataclass(frozen=True)
class Outcome:
    """What ``lock`` did with one server."""

    name: str
    action: str  # "locked", "kept", "failed"
    tools: int | None = None
    package: str | None = None  # "uvx mcp-server-time 2025.9.25"
    error: BaseException | None = None


async def _pin(server: MCPServer) -> dict[str, ToolPin]:
    async with server.session() as conn:
        listing = conn.listing
    pins: dict[str, ToolPin] = {}
    for spec in listing:
        if spec.name in pins:
            continue  # listed twice: the first listing is the one used
        value = definition(spec)
        pins[spec.name] = ToolPin(hash=definition_hash(value), definition=value)
    return pins


async def _lock_one(server: MCPServer, config: Path, lock: Path, say: Callable[[str], None]) -> ServerLock:
    name = server.name or ""
    if isinstance(server, MCPServerStdio):
        runner = parse_runner(server.command, server.args or [])
        if runner is not None:
            say(f"{name}: resolving and installing {packages.spelled(runner)}")
            # The user's own environment: their proxy, trust and registry settings.
            package = await asyncio.to_thread(packages.install, runner, dict(os.environ))
            entry = ServerLock(source=[server.command, *(server.args or [])], package=package)
            locked = Locked(entry=entry, lock_path=os.fspath(lock), config_path=os.fspath(config))
            # The lock's own launch is what is pinned: the server an agent will run.
            opened = launch_from_cache(server, package, locked)
            return msgspec.structs.replace(entry, tools=await _pin(opened))
    return ServerLock(tools=await _pin(server))


async def _reinstall(server: MCPServer, entry: ServerLock, say: Callable[[str], None]) -> bool:
    """A kept package server whose cache entry is missing or changed, installed again as locked; whether it was."""
    package = entry.package
    if package is None or not isinstance(server, MCPServerStdio):
        return False
    if await asyncio.to_thread(packages.problem, package) is None:
        return False
    source = entry.source or [server.command, *(server.args or [])]
    runner = parse_runner(source[0], source[1:])
    if runner is None:
        return False
    say(f"{server.name}: installing {package.name} {package.version} from the lock")
    await asyncio.to_thread(packages.install, runner, dict(os.environ), package)
    return True


async def lock_config(
    config: str | os.PathLike[str],
    *,
    lock: str | os.PathLike[str] | None = None,
    names: Sequence[str] = (),
    update: bool = False,
    say: Callable[[str], None] = lambda _: None,
    **overrides: Any,
) -> tuple[Path, list[Outcome]]:
    """Lock ``config``'s servers into ``lock`` (default: beside it); the path written and each server's outcome.

    Every server is attempted; the lock is written with those that worked
    (and the kept entries), so one broken server does not block the others.
    """
    config = Path(config).expanduser()
    path = Path(lock).expanduser() if lock is not None else default_lock_path(config)
    # With names, only those entries are read (another entry's unset variable is no error)
    # and the lock's other entries are left as they are.
    servers = load_servers(config, lock=False, names=names, auto_reconnect=False, spares=0, pin="off", **overrides)
    old = read_lock(path) if path.exists() else LockFile()
    todo = [s for s in servers if update or (s.name or "") not in old.servers]
    kept = [s for s in servers if s not in todo]
    results = await asyncio.gather(
        *(_lock_one(s, config, path, say) for s in todo),
        *(_reinstall(s, old.servers[s.name or ""], say) for s in kept),
        return_exceptions=True,
    )
    reinstalled = dict(zip((s.name or "" for s in kept), results[len(todo) :]))
    results = results[: len(todo)]
    done = {s.name or "": r for s, r in zip(todo, results)}
    entries: dict[str, ServerLock] = {n: e for n, e in old.servers.items() if names and n not in names}
    outcomes: list[Outcome] = []
    for server in servers:
        name = server.name or ""
        result = done.get(name)
        if isinstance(result, ServerLock):
            entries[name] = result
            outcomes.append(Outcome(name, "locked", len(result.tools), _described(result)))
            continue
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
        if name in old.servers:
            entries[name] = old.servers[name]
        again = reinstalled.get(name)
        if isinstance(again, BaseException) and not isinstance(again, Exception):
            raise again
        if isinstance(result, Exception) or isinstance(again, Exception):
            error = result if isinstance(result, Exception) else again
            assert isinstance(error, Exception)
            outcomes.append(Outcome(name, "failed", error=error))
        elif name in old.servers:
            entry = old.servers[name]
            action = "installed" if again is True else "kept"
            outcomes.append(Outcome(name, action, len(entry.tools), _described(entry)))
    write_lock(path, LockFile(servers=entries))
    return path, outcomes


def _described(entry: ServerLock) -> str | None:
    package = entry.package
    return None if package is None else f"{package.runner} {package.name} {package.version}"


__all__ = ["Outcome", "lock_config"]
