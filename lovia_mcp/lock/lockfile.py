"""The lock file: per server, the package it runs and the tools it may offer.

Written by ``lovia-mcp lock`` beside the config (``.mcp.json`` gives
``.mcp.lock.json``; any ``NAME.json`` or ``NAME.jsonc`` gives
``NAME.lock.json``), read by every front end that loads the config.
Meant to be committed with the config and reviewed like code::

    {
      "lockfileVersion": 1,
      "servers": {
        "time": {
          "source": ["uvx", "mcp-server-time"],
          "package": {"runner": "uvx", "ecosystem": "pypi", "name": "mcp-server-time",
                      "version": "2025.9.25", "artifacts": [{"file": "...whl", "hash": "sha256:..."}],
                      "cache": "sha256:...", "tree": "sha256:...", "entry": "bin/mcp-server-time"},
          "tools": {"get_current_time": {"hash": "sha256:...", "definition": {...}}}
        }
      }
    }

``source`` is the config's command line the entry was made from (a
package server only: its launch is replaced by the lock's, so an edited
command must not be silently ignored). ``package`` (see
:mod:`.packages`) names where the installed server lives in the cache, by
content, and what it is; ``tools`` pins each tool's canonical definition
(:mod:`.definition`), kept whole so that ``lovia-mcp check`` can show what
changed. Paths in the lock are relative to the cache: the same lock works
on every machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
from lovia.exceptions import UserError

LOCKFILE_VERSION: Final = 1
LOCK_SUFFIX: Final = ".lock.json"


class ToolPin(msgspec.Struct, frozen=True):
    """A tool as it was when locked: the hash of its canonical definition, and the definition."""

    hash: str
    definition: dict[str, Any]


class Artifact(msgspec.Struct, frozen=True):
    """One downloaded file: its name and its integrity (``sha256:<hex>``, or npm's ``sha512-<base64>``)."""

    file: str
    hash: str


class PackageLock(msgspec.Struct, frozen=True, omit_defaults=True):
    """A package server installed into the cache (:mod:`.packages`)."""

    runner: str  # how the config ran it: "uvx", "uv tool run", "pipx run", "npx"
    ecosystem: str  # "pypi" or "npm"
    name: str
    version: str
    # What it runs: the installed entry point, relative to the cache entry.
    entry: str
    # The cache entry's name: a hash of the artifacts' integrity hashes.
    cache: str
    # The installed tree's digest (every file's path, mode and content).
    tree: str
    artifacts: list[Artifact] = []
    # Arguments the config gave after the package (kept as the config's own).
    args: list[str] = []
    # Python: the interpreter the wheels were chosen for (ecosystems.pypi.python_tag()).
    python: str | None = None
    # How the entry was installed, digested and is launched (packages.LAYOUT);
    # locks written before the field had layout 1, which is not started.
    layout: int = 1


class ServerLock(msgspec.Struct, frozen=True, omit_defaults=True):
    """One server's entry."""

    tools: dict[str, ToolPin] = {}
    source: list[str] | None = None
    package: PackageLock | None = None


class LockFile(msgspec.Struct, rename="camel"):
    lockfile_version: int = LOCKFILE_VERSION
    servers: dict[str, ServerLock] = {}


@dataclass(frozen=True)
class Locked:
    """A server config's lock: its entry (``None``: the lock has none for it) and where it came from."""

    entry: ServerLock | None
    lock_path: str
    config_path: str | None = None

    def command(self, verb: str, name: str | None) -> str:
        """The ``lovia-mcp`` command line that runs ``verb`` (``check``, ``lock --update``) on this server."""
        parts = ["lovia-mcp", verb]
        if self.config_path:
            parts.append(f"--config {self.config_path}")
        if not self.config_path or default_lock_path(self.config_path) != Path(self.lock_path):
            parts.append(f"--lock {self.lock_path}")
        if name:
            parts.append(f"--server {name}")
        return " ".join(parts)


def default_lock_path(config: str | os.PathLike[str]) -> Path:
    """``<config stem>.lock.json`` beside the config."""
    path = Path(config)
    name = path.name
    for suffix in (".jsonc", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return path.with_name(name + LOCK_SUFFIX)


_decode_lock = msgspec.json.Decoder(LockFile).decode
_encode_lock = msgspec.json.Encoder(order="sorted").encode


def read_lock(path: str | os.PathLike[str]) -> LockFile:
    """The lock at ``path``; a clear error for one that cannot be read or is not a lock file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(
            f"no lock file at {os.fspath(path)!r}",
            hint="Write one with: lovia-mcp lock --config FILE (or drop lock= / --lock to use none).",
        ) from None
    except OSError as exc:
        raise UserError(
            f"cannot read the lock file {os.fspath(path)!r}: {exc.strerror or exc}",
            hint="Check that the file is readable.",
        ) from None
    try:
        lock = _decode_lock(data)
    except msgspec.DecodeError as exc:
        raise UserError(
            f"{os.fspath(path)}: not a lovia-mcp lock file ({exc})",
            hint="Write it again with: lovia-mcp lock --config FILE --update (it is generated, not hand-edited).",
        ) from None
    if lock.lockfile_version != LOCKFILE_VERSION:
        raise UserError(
            f"{os.fspath(path)}: lock file version {lock.lockfile_version}, this lovia-mcp reads {LOCKFILE_VERSION}",
            hint="Write it again with this version: lovia-mcp lock --config FILE --update.",
        )
    return lock


def write_lock(path: str | os.PathLike[str], lock: LockFile) -> None:
    """Write ``lock`` to ``path`` at once (a reader sees the old file or the new one, never half)."""
    body = msgspec.json.format(_encode_lock(lock), indent=2) + b"\n"
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_bytes(body)
    os.replace(temporary, target)


__all__ = [
    "LOCKFILE_VERSION",
    "LOCK_SUFFIX",
    "Artifact",
    "LockFile",
    "Locked",
    "PackageLock",
    "ServerLock",
    "ToolPin",
    "default_lock_path",
    "read_lock",
    "write_lock",
]
