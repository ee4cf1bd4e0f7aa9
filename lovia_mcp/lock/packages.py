"""Package servers: resolved, installed into a content-addressed cache, launched from it.

(Filled in by the package-locking step.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..servers import MCPServerStdio
    from .lockfile import Locked, PackageLock, ServerLock


@dataclass(frozen=True)
class Runner:
    runner: str

    def describe(self) -> str:
        return self.runner


def parse_runner(command: str, args: list[str]) -> Runner | None:
    return None


def install(runner: Runner, environ: dict[str, str]) -> PackageLock:
    raise NotImplementedError


def launch_from_cache(server: MCPServerStdio, entry: ServerLock, locked: Locked) -> MCPServerStdio:
    return server


__all__ = ["Runner", "install", "launch_from_cache", "parse_runner"]
