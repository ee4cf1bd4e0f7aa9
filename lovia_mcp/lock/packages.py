"""Package servers: installed into a content-addressed cache, verified, launched from it: what every ecosystem shares.

Each registry and its runners is an ecosystem (:mod:`.ecosystems`: PyPI's
``uvx``, ``uv tool run`` and ``pipx run``; npm's ``npx``); this module is
what they share. A runner option an ecosystem does not read (``uvx
--with``, ``npx --node-options``...) changes what runs in ways the lock does
not model, so such a server is left as the config says (its tools are
still pinned); so are ``bunx`` and ``pnpm dlx``, whose own lock formats are
not read.

Lifecycle:

- **lock** (:func:`install`): the ecosystem's package manager runs once,
  with the user's own environment (proxies, trust settings,
  ``PIP_INDEX_URL``, ``.npmrc``), into a staging folder; each artifact is
  hashed. The cache entry is named by the hash of the artifacts' hashes
  (and, for Python, the interpreter), made read-only, and its tree's digest
  recorded in the lock.
- **open** (:func:`verify`): the entry must exist and its tree must still
  have the locked digest; otherwise a clear error names the server and
  says to run ``lovia-mcp lock`` again. Never a download. The check hands
  the worker a :class:`~lovia_mcp_worker.wire.sealed.Sealed` stamp, and the
  worker stamps the tree again before every start, restarts included.
- **launch** (:func:`launch`): the ecosystem's, derived from the verified
  entry alone, so that what runs is what the digest covers; no package
  manager is in the tree.

The digest covers the folder the ecosystem names (Python: the venv's
``lib``, bytecode included; Node: the whole entry). The interpreter
itself (lovia-mcp's, or ``node`` on ``PATH``) is the machine's, trusted as
lovia-mcp itself is.

The cache is ``$LOVIA_MCP_CACHE_DIR`` or ``$XDG_CACHE_HOME/lovia-mcp``
(``~/.cache/lovia-mcp``), under ``packages/``.

Caveats: verifying the whole tree costs a read of every file; a stamp of
every file's identity (path, mode, inode, size, change time, which a user
cannot set back) beside the entry lets later opens check only the
metadata. That stamp, like the cache, is as safe as the folder it sits
in: a server that runs unboxed as the same user can rewrite both (and the
user's shell profile); :class:`~lovia_mcp.Sandbox` keeps the cache
read-only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Final

from lovia.exceptions import UserError
from lovia_mcp_worker.wire.sealed import Sealed, stamp

from .definition import canonical
from .ecosystems.ecosystem import Ecosystem, Runner, describe
from .ecosystems.registry import ECOSYSTEMS, ecosystem, parse_runner
from .lockfile import Artifact, Locked, PackageLock

CACHE_ENV: Final = "LOVIA_MCP_CACHE_DIR"
# A lock's cache and tree digests, as this module writes them.
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
# How this module installs, digests and launches an entry (PackageLock.layout).
# 2: bytecode in the digest, the launch derived from the entry alone. An
# entry of another layout was checked by rules that no longer hold, and is
# refused until it is locked again.
LAYOUT: Final = 2


def _of(name: str) -> Ecosystem:
    """The ecosystem a lock names (a ``ValueError`` for any other name: :func:`malformed` says so first)."""
    found = ecosystem(name)
    if found is None:
        raise ValueError(f"no ecosystem {name!r}")
    return found


def spelled(runner: Runner) -> str:
    """``uvx mcp-server-time==1.0``: a runner and what it asks for, in its ecosystem's spelling."""
    return describe(runner, _of(runner.ecosystem).pin)


# --------------------------------------------------------------------------- #
# The cache
# --------------------------------------------------------------------------- #
def cache_root() -> Path:
    named = os.environ.get(CACHE_ENV)
    if named:
        return Path(named).expanduser() / "packages"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lovia-mcp" / "packages"


def entry_dir(package: PackageLock) -> Path:
    """Where a locked package is installed: named by its content address (a ``ValueError`` for any other name)."""
    if ecosystem(package.ecosystem) is None or not _DIGEST.fullmatch(package.cache):
        raise ValueError(f"not a cache entry's name: {package.ecosystem!r}, {package.cache!r}")
    return cache_root() / package.ecosystem / package.cache.removeprefix("sha256:")


def malformed(package: PackageLock, source: list[str] | None) -> str | None:
    """What in a lock's package entry ``lock`` would not have written for the command line ``source``; None: nothing.

    A lock file is a file in a repository like any other: one that names a
    cache entry outside the cache, an entry whose name is not the hash of
    its artifacts, another package than the command line runs, or a script
    outside the installed tree would start code the lock never verified.
    """
    eco = ecosystem(package.ecosystem)
    if eco is None:
        return f"ecosystem {package.ecosystem!r} is none of {', '.join(map(repr, ECOSYSTEMS))}"
    if package.layout != LAYOUT:
        return f"it was written by an older lovia-mcp lock (layout {package.layout}, this one starts layout {LAYOUT})"
    for field, value in (("cache", package.cache), ("tree", package.tree)):
        if not _DIGEST.fullmatch(value):
            return f"its {field} {value[:80]!r} is not a sha256 digest"
    if package.cache != content_address(package.ecosystem, package.artifacts, package.python):
        return "its cache entry's name is not the hash of its artifacts"
    runner = parse_runner(source[0], source[1:]) if source else None
    if runner is None:
        return "it records no package runner's command line"
    if (runner.runner, runner.ecosystem) != (package.runner, package.ecosystem) or not eco.same_package(
        runner.package, package.name
    ):
        return f"it installs {package.runner} {package.name}, and the command line runs {spelled(runner)}"
    if tuple(package.args) != runner.args:
        return "its arguments are not the command line's"
    return eco.entry_problem(package.entry)


def declared_entry(package: PackageLock, source: list[str]) -> str | None:
    """The entry the installed (verified) tree declares for ``source``'s command; None if it declares none."""
    runner = parse_runner(source[0], source[1:])
    if runner is None:
        return None
    try:
        return _of(package.ecosystem).declared(entry_dir(package), runner, "")
    except (UserError, OSError, ValueError):
        return None


def content_address(ecosystem: str, artifacts: list[Artifact], python: str | None) -> str:
    """A cache entry's name: the hash of its artifacts' integrity hashes (and of the interpreter, for Python)."""
    body = {"ecosystem": ecosystem, "artifacts": sorted([a.file, a.hash] for a in artifacts), "python": python}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def covered(top: Path, ecosystem: str) -> Path:
    """The folder of an entry that its digest covers and its launch reads (the ecosystem's to say)."""
    return _of(ecosystem).covered(top)


def _walk(top: Path, ecosystem: str) -> list[tuple[str, os.DirEntry[str]]]:
    """The entries a tree's digest covers (files and links), by path relative to the entry, sorted.

    Bytecode is covered like any file: Python runs it instead of the
    source it was compiled from, and trusts the validation mode each
    ``.pyc`` names in its own header. ``os.scandir`` with string paths: the
    open-time check walks thousands of entries, and its cost is the walk.
    """
    out: list[tuple[str, os.DirEntry[str]]] = []
    cut = len(str(top)) + 1
    eco = _of(ecosystem)

    def visit(folder: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                visit(entry.path)
                continue
            if eco.left_out(folder, entry.name):
                continue
            out.append((entry.path[cut:], entry))

    visit(str(eco.covered(top)))
    return out


def tree_digest(top: Path, ecosystem: str) -> str:
    """``sha256:`` of every covered file's path, kind, exec bit and content (a link: its target)."""
    digest = hashlib.sha256()
    for rel, entry in _walk(top, ecosystem):
        if entry.is_symlink():
            line = f"L {rel} {os.readlink(entry.path)}\n"
        else:
            with open(entry.path, "rb") as f:
                content = hashlib.file_digest(f, "sha256").hexdigest()
            executable = entry.stat(follow_symlinks=False).st_mode & 0o111
            line = f"F {rel} {'x' if executable else '-'} {content}\n"
        digest.update(line.encode("utf-8", "surrogateescape"))
    return "sha256:" + digest.hexdigest()


def _stamp_path(top: Path) -> Path:
    return top.with_name(top.name + ".verified")


def _write_stamp(top: Path, tree: str, seal: str) -> None:
    body = json.dumps({"tree": tree, "signature": seal})
    temporary = _stamp_path(top).with_name(f".{top.name}.{os.getpid()}.tmp")
    temporary.write_text(body)
    os.replace(temporary, _stamp_path(top))


def _stamped(top: Path, tree: str, seal: str) -> bool:
    try:
        written = json.loads(_stamp_path(top).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(written, dict) and written.get("tree") == tree and written.get("signature") == seal


def _check(package: PackageLock) -> tuple[str | None, str]:
    """What is wrong with the entry (see :func:`problem`), and the stamp its tree had before it was read."""
    top = entry_dir(package)
    if _of(package.ecosystem).foreign(package) is not None:
        return "foreign", ""
    if not top.is_dir():
        return "missing", ""
    # Stamped before the digest reads the files: a change made while they
    # are read changes the stamp every start then compares.
    seal = stamp(str(covered(top, package.ecosystem)))
    if _stamped(top, package.tree, seal):
        return None, seal
    if tree_digest(top, package.ecosystem) != package.tree:
        return "changed", seal
    try:
        _write_stamp(top, package.tree, seal)
    except OSError:
        pass  # a read-only cache: every open checks the whole tree
    return None, seal


def problem(package: PackageLock) -> str | None:
    """What is wrong with a locked package's cache entry: ``"foreign"``, ``"missing"``, ``"changed"``, or None."""
    return _check(package)[0]


def verify(package: PackageLock, server: str | None, locked: Locked) -> Sealed:
    """The package's cache entry, checked against the lock; a ``UserError`` naming the server if missing or changed.

    Then the entry the lock launches must be the one the verified tree
    declares for the command line the lock was made for. Returned: the
    tree the server runs from and its stamp, which the worker compares
    before every start.
    """
    source = locked.entry.source if locked.entry is not None else None
    refused(package, source, server, locked)
    found, seal = _check(package)
    top = entry_dir(package)
    what = f"{package.name} {package.version}"
    again = locked.command("lock", server)
    if found is None:
        if source is not None and declared_entry(package, source) != package.entry:
            raise UserError(
                f"MCP server {server!r}: its lock launches {package.entry!r}, which the cached {what} does not "
                "declare for the command line it was locked for; it is not started",
                hint=f"Lock it again: {locked.command('lock --update', server)}.",
            )
        return Sealed(root=str(covered(top, package.ecosystem)), stamp=seal)
    if found == "foreign":
        raise UserError(
            f"MCP server {server!r}: its lock installs {what} {_of(package.ecosystem).foreign(package)}",
            hint=f"Lock it for this interpreter: {locked.command('lock --update', server)}.",
        )
    if found == "missing":
        raise UserError(
            f"MCP server {server!r}: the locked package {what} is not in the cache ({top})",
            hint=f"Install it from the lock (its hashes are checked): {again}.",
        )
    raise UserError(
        f"MCP server {server!r}: the cached {what} was changed since it was locked "
        f"(its files no longer have the digest {package.tree}); it is not started",
        hint=f"Reinstall it from the lock with: {again} (nothing is downloaded silently).",
    )


# --------------------------------------------------------------------------- #
# Installing (lovia-mcp lock)
# --------------------------------------------------------------------------- #
def refused(package: PackageLock, source: list[str] | None, server: str | None, locked: Locked) -> None:
    """A ``UserError`` naming the server if its lock entry is :func:`malformed`."""
    wrong = malformed(package, source)
    if wrong is not None:
        raise UserError(
            f"MCP server {server!r}: its lock entry is not one lovia-mcp lock writes ({wrong}); it is not started",
            hint=f"Lock it again after a look at how the lock file changed: {locked.command('lock --update', server)}.",
        )


def _seal(top: Path) -> None:
    """Make the installed tree read-only: a server (or anything else) writing into it changes its change times."""
    for folder, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode & ~0o222)
        os.chmod(folder, os.stat(folder).st_mode & ~0o222)


def _remove(top: Path) -> None:
    if not top.exists():
        return
    for folder, _, _ in os.walk(top):
        os.chmod(folder, os.stat(folder).st_mode | 0o700)
    shutil.rmtree(top)


def install(runner: Runner, environ: dict[str, str], expect: PackageLock | None = None) -> PackageLock:
    """Resolve ``runner``'s package, install it into the cache (once), and describe it for the lock.

    ``expect``: a locked package whose cache entry is missing or changed;
    it is installed again at its locked version, and its artifacts must have
    the locked hashes (else an error: the registry now serves something else).
    """
    eco = _of(runner.ecosystem)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    if expect is not None:
        runner = dataclasses.replace(runner, version=expect.version)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        top = staging / "entry"
        top.mkdir()
        made = eco.install(runner, environ, top, staging)
        package = PackageLock(
            runner=runner.runner,
            ecosystem=eco.name,
            name=runner.package,
            version=made.version,
            entry=made.entry,
            cache=content_address(eco.name, made.artifacts, made.python),
            tree=tree_digest(top, eco.name),
            artifacts=made.artifacts,
            args=list(runner.args),
            python=made.python,
            layout=LAYOUT,
        )
        _place(top, package)
    finally:
        _remove(staging)
    if expect is not None and (
        package.cache != expect.cache or (expect.layout == LAYOUT and package.tree != expect.tree)
    ):
        raise UserError(
            f"{spelled(runner)}: the registry now serves other files for this version than the lock records "
            f"(content address {package.cache}, locked {expect.cache})",
            hint="Review the change; to accept it, lock with --update.",
        )
    return package


def _place(staging_entry: Path, package: PackageLock) -> None:
    """Move a finished install to its content address (an intact entry already there is kept)."""
    top = entry_dir(package)
    top.parent.mkdir(parents=True, exist_ok=True)
    if top.is_dir():
        if tree_digest(top, package.ecosystem) == package.tree:
            return
        _remove(top)  # changed since: replaced by what was just checked
    _seal(staging_entry)
    os.rename(staging_entry, top)
    _write_stamp(top, package.tree, stamp(str(covered(top, package.ecosystem))))


# --------------------------------------------------------------------------- #
# Launching
# --------------------------------------------------------------------------- #
def launch(package: PackageLock, top: Path) -> tuple[str, list[str], dict[str, str]]:
    """The command, arguments and environment that start the cached server (nothing outside the digest)."""
    return _of(package.ecosystem).launch(package, top)


__all__ = [
    "CACHE_ENV",
    "LAYOUT",
    "cache_root",
    "content_address",
    "covered",
    "declared_entry",
    "entry_dir",
    "install",
    "launch",
    "malformed",
    "problem",
    "refused",
    "spelled",
    "tree_digest",
    "verify",
]
