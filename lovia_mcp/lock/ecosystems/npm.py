"""npm: ``npx`` servers, locked into a ``node_modules`` tree and started confined to it.

- **read**: ``npx [-y|--yes] PKG[@VER] [ARGS]``, ``npx -p PKG[@VER] CMD
  [ARGS]``; a path, a URL, a git spec or another option is not read;
- **install**: ``npm install`` into a fresh folder with a ``package.json``
  of its own (so npm never walks up into a parent project); each package's
  ``integrity`` comes from the ``package-lock.json`` npm wrote;
- **launch**: ``node`` (found on ``PATH`` at start) runs the package's
  ``bin`` script with :data:`NODE_CONFINE` preloaded, which refuses, as not
  found, any module that resolves outside the entry (parent
  ``node_modules`` folders, ``NODE_PATH``, the global folders), for
  ``require`` and ``import`` alike.

Caveat: the preload wraps ``Module._resolveFilename`` (kept by Node since
its first release, not documented) and registers a resolve hook
(``module.register``, Node 20.6 and later); on an older Node the locked
server is not started.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar, Final

from lovia.exceptions import UserError

from ..lockfile import Artifact, PackageLock
from .ecosystem import Installed, Runner, requirement, run_tool

# The variable that names the entry to the preload, and the preload itself.
NODE_ROOT_ENV: Final = "LOVIA_MCP_NODE_ROOT"
NODE_CONFINE: Final = Path(__file__).resolve().parent.parent / "node_confine.cjs"


class Npm:
    """The ``Ecosystem`` of npm packages."""

    name: ClassVar[str] = "npm"
    pin: ClassVar[str] = "@"

    def parse(self, command: str, args: list[str]) -> Runner | None:
        if os.path.basename(command) != "npx":
            return None
        package: str | None = None
        i = 0
        while i < len(args) and args[i].startswith("-") and args[i] != "--":
            flag, eq, value = args[i].partition("=")
            if flag in ("-y", "--yes", "-q", "--quiet"):
                i += 1
            elif flag in ("-p", "--package") and (eq or i + 1 < len(args)):
                package = value if eq else args[i + 1]
                i += 1 if eq else 2
            else:
                return None
        if i < len(args) and args[i] == "--":
            i += 1
        if i >= len(args):
            return None
        first, rest = args[i], tuple(args[i + 1 :])
        split = _split(package if package is not None else first)
        if split is None:
            return None
        return Runner("npx", "npm", split[0], split[1], command=first if package is not None else None, args=rest)

    def install(self, runner: Runner, environ: dict[str, str], top: Path, staging: Path) -> Installed:
        asked = requirement(runner, self.pin)
        what = f"locking {runner.runner} {asked}"
        # A package.json of its own, so npm never walks up into a parent project.
        (top / "package.json").write_text('{"private": true}\n')
        npm = shutil.which("npm", path=environ.get("PATH")) or "npm"
        run_tool(
            [npm, "install", "--no-audit", "--no-fund", "--save-exact", "--loglevel=error", asked],
            environ,
            what,
            cwd=top,
        )
        try:
            packages = json.loads((top / "package-lock.json").read_text())["packages"]
        except (OSError, ValueError, KeyError, TypeError):
            raise UserError(
                f"{what}: npm wrote no readable package-lock.json", hint="Update npm (7 or later)."
            ) from None
        artifacts = sorted(
            (
                Artifact(
                    file=f"{key.removeprefix('node_modules/')}@{info.get('version', '')}",
                    hash=info.get("integrity", ""),
                )
                for key, info in packages.items()
                if key and isinstance(info, dict)
            ),
            key=lambda a: a.file,
        )
        own = packages.get(f"node_modules/{runner.package}")
        if not isinstance(own, dict) or "version" not in own:
            raise UserError(f"{what}: npm did not install {runner.package!r}", hint="Check the package's name.")
        return Installed(version=str(own["version"]), entry=self.declared(top, runner, what), artifacts=artifacts)

    def covered(self, top: Path) -> Path:
        return top

    def left_out(self, folder: str, name: str) -> bool:
        return False

    def entry_problem(self, entry: str) -> str | None:
        parts = entry.split("/")
        if parts[0] != "node_modules" or ".." in parts or "" in parts or "\\" in entry:
            return f"its script {entry[:80]!r} is not a path inside its node_modules"
        return None

    def declared(self, top: Path, runner: Runner, what: str) -> str:
        """The package's script npx would run, relative to the entry: the ``bin`` named as asked, or its only one."""
        folder = Path("node_modules", *runner.package.split("/"))
        manifest: dict[str, Any] = json.loads((top / folder / "package.json").read_text())
        given = manifest.get("bin")
        bins: dict[str, str] = {runner.package.split("/")[-1]: given} if isinstance(given, str) else dict(given or {})
        wanted = runner.command or runner.package.split("/")[-1]
        chosen = bins.get(wanted)
        if chosen is None and runner.command is None and len(bins) == 1:
            chosen = next(iter(bins.values()))
        if chosen is None:
            raise UserError(
                f"{what}: the package has no command {wanted!r}"
                + (f" (it has {', '.join(sorted(bins))})" if bins else " (it declares no bin)"),
                hint="Name the command with npx -p PACKAGE COMMAND.",
            )
        return (folder / os.path.normpath(chosen)).as_posix()

    def foreign(self, package: PackageLock) -> str | None:
        return None

    def same_package(self, asked: str, locked: str) -> bool:
        return asked == locked

    def launch(self, package: PackageLock, top: Path) -> tuple[str, list[str], dict[str, str]]:
        return (
            "node",
            ["--require", str(NODE_CONFINE), str(top / package.entry), *package.args],
            {NODE_ROOT_ENV: str(top)},
        )


def _split(spec: str) -> tuple[str, str | None] | None:
    scoped = spec.startswith("@")
    name, sep, version = spec[1:].partition("@") if scoped else spec.partition("@")
    name = "@" + name if scoped else name
    if not re.fullmatch(r"(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*", name) or (sep and not version):
        return None  # a path, a URL, a git spec: not a registry package
    return name, (version if sep and version != "latest" else None)


__all__ = ["NODE_CONFINE", "NODE_ROOT_ENV", "Npm"]
