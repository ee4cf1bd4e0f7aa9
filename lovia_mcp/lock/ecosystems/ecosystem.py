"""What a lock ecosystem provides: the ``Ecosystem`` protocol, the ``Runner`` it reads, and the tools both share.

An ecosystem is a package registry and its runners (PyPI with ``uvx``,
``uv tool run`` and ``pipx run``; npm with ``npx``). The lock's shared
mechanics (:mod:`..packages`: the cache, the digest, the stamp, the checks,
the placing of a finished install) ask the ecosystem for everything that
differs: how a runner's command line reads, how a package is resolved,
hashed and installed, which folder of an entry the digest covers, which
entry point a tree declares, and how a locked server starts. A new
ecosystem is one module here with one class, and its line in
:mod:`.registry`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final, Protocol

from lovia.exceptions import UserError

from ..lockfile import Artifact, PackageLock

# A package manager resolving and downloading a server and its dependencies:
# minutes on a slow link, never forever.
INSTALL_TIMEOUT: Final = 600.0
# The last lines of a failed package manager's output shown in the error.
_TAIL_LINES: Final = 12


@dataclass(frozen=True)
class Runner:
    """A package runner's command line, read."""

    runner: str  # "uvx", "uv tool run", "pipx run", "npx"
    ecosystem: str  # the Ecosystem's name: "pypi" or "npm"
    package: str
    version: str | None  # as asked; None: the newest
    command: str | None = None  # the executable to run, when it is not the package's own
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Installed:
    """What an ecosystem installed into an entry: the lock's :mod:`..packages` names and digests it."""

    version: str
    entry: str  # what runs, relative to the entry
    artifacts: list[Artifact]
    python: str | None = None  # the interpreter the artifacts were chosen for (part of the cache's name)


class Ecosystem(Protocol):
    """One registry and its runners, as the lock sees them."""

    # The name a lock's ``package.ecosystem`` says, and how a version is pinned in a requirement.
    name: ClassVar[str]
    pin: ClassVar[str]

    def parse(self, command: str, args: list[str]) -> Runner | None:
        """The package that ``command args`` runs through one of this ecosystem's runners; None: not one."""
        ...

    def install(self, runner: Runner, environ: dict[str, str], top: Path, staging: Path) -> Installed:
        """Resolve, download, hash and install ``runner``'s package into the empty folder ``top``.

        Run with the user's own environment (proxies, trust, registry
        settings); ``staging`` is scratch space beside ``top``. The lock's
        ``tree`` is then the digest of ``top`` as left.
        """
        ...

    def covered(self, top: Path) -> Path:
        """The folder of an entry that its digest covers and its launch reads."""
        ...

    def left_out(self, folder: str, name: str) -> bool:
        """Whether a file the installer writes about the machine, not the package, stays out of the digest."""
        ...

    def entry_problem(self, entry: str) -> str | None:
        """What is wrong with the form of a lock's ``entry`` (before anything is read); None: nothing."""
        ...

    def declared(self, top: Path, runner: Runner, what: str) -> str:
        """The entry the installed tree declares for ``runner`` (a ``UserError`` if none)."""
        ...

    def foreign(self, package: PackageLock) -> str | None:
        """Why an entry cannot run here at all (made for another interpreter, say); None: it can."""
        ...

    def same_package(self, asked: str, locked: str) -> bool:
        """Whether a command line's package name and a lock's name are the same package."""
        ...

    def launch(self, package: PackageLock, top: Path) -> tuple[str, list[str], dict[str, str]]:
        """The command, arguments and environment that start the cached server, nothing outside the digest."""
        ...


def describe(runner: Runner, pin: str) -> str:
    """``uvx mcp-server-time==1.0``: the runner and what it asks for."""
    return f"{runner.runner} {requirement(runner, pin)}"


def requirement(runner: Runner, pin: str) -> str:
    """``mcp-server-time==1.0`` (``pin`` the ecosystem's separator), or the name alone for the newest."""
    return runner.package if runner.version is None else f"{runner.package}{pin}{runner.version}"


def run_tool(argv: list[str], environ: dict[str, str], what: str, cwd: Path | None = None) -> str:
    """Run a package manager, bounded; its output, or a ``UserError`` with its last lines and a hint."""
    try:
        done = subprocess.run(
            argv, env=environ, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
        )
    except FileNotFoundError:
        raise UserError(
            f"{what}: {argv[0]!r} was not found", hint=f"Install {os.path.basename(argv[0])}, or put it on PATH."
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{what}: {os.path.basename(argv[0])} did not finish in {INSTALL_TIMEOUT:g} s",
            hint="Check the network and the registry settings (proxy, index URL), then lock again.",
        ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-_TAIL_LINES:])
        raise UserError(
            f"{what}: {' '.join(argv[:4])}... failed (exit {done.returncode}):\n{tail}",
            hint="Fix what the package manager says (the package's name and version, the registry, "
            "the network), then lock again.",
        )
    return done.stdout


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


__all__ = ["INSTALL_TIMEOUT", "Ecosystem", "Installed", "Runner", "describe", "requirement", "run_tool", "sha256_file"]
