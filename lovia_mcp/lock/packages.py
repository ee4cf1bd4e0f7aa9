"""Package servers: resolved, installed into a content-addressed cache, verified, launched from it.

Covered runners (the command of a stdio server):

- ``uvx PKG[@VER] [ARGS]``, ``uvx --from PKG[==VER] CMD [ARGS]``, and the
  same after ``uv tool run``;
- ``pipx run [--spec PKG[==VER]] PKG[==VER] [ARGS]``;
- ``npx [-y|--yes] PKG[@VER] [ARGS]``, ``npx -p PKG[@VER] CMD [ARGS]``.

These are what MCP configs use. A runner option not listed here (``uvx
--with``, ``--python``, ``npx --node-options``...) changes what runs in ways
the lock does not model, so such a server is left as the config says (its
tools are still pinned); so are ``bunx`` and ``pnpm dlx``, whose own lock
formats this module does not read.

Lifecycle:

- **lock** (:func:`install`): the package manager runs once, with the
  user's own environment (proxies, trust settings, ``PIP_INDEX_URL``,
  ``.npmrc``). Python: ``pip download`` resolves the package and its
  dependencies for this interpreter, each file is hashed (sha256), and a
  venv is made from exactly those files with no index (``pip install
  --no-index --no-deps``). Node: ``npm install`` into a fresh folder;
  each package's ``integrity`` comes from the ``package-lock.json`` npm
  wrote. The cache entry is named by the hash of the artifacts' hashes
  (and, for Python, the interpreter), made read-only, and its tree's
  digest recorded in the lock.
- **open** (:func:`verify`): the entry must exist and its tree must
  still have the locked digest; otherwise a clear error names the server
  and says to run ``lovia-mcp lock`` again. Never a download. The check
  hands the worker a :class:`~lovia_mcp_worker.wire.sealed.Sealed` stamp,
  and the worker stamps the tree again before every start, restarts
  included.
- **launch** (:func:`launch`): derived from the verified entry alone, so
  that what runs is what the digest covers. Python: lovia-mcp's own
  interpreter (the lock's Python version, checked) in isolated mode
  (``-I``: no current folder or script folder on the import path, no
  ``PYTHON*`` variables, no user site), without the interpreter's own
  site-packages (``-S``) and writing no bytecode (``-B``), with the
  entry's site-packages added: the entry's venv interpreter, its
  ``pyvenv.cfg`` and its scripts are never used. Node: ``node`` with
  :data:`NODE_CONFINE` preloaded, which refuses any module that resolves
  outside the entry (parent ``node_modules`` folders, ``NODE_PATH``, the
  global folders). No package manager is in the tree.

What the digest covers: Python, every file under the venv's ``lib``
(bytecode included: it is compiled at lock time with paths relative to
site-packages and a fixed hash seed, so it is the same on every install);
Node, every file of the entry. The interpreter itself (lovia-mcp's, or
``node`` on ``PATH``) is the machine's, trusted as lovia-mcp itself is.

The cache is ``$LOVIA_MCP_CACHE_DIR`` or ``$XDG_CACHE_HOME/lovia-mcp``
(``~/.cache/lovia-mcp``), under ``packages/``.

Caveats: a Python lock holds for the interpreter version it was made
with (wheels are built per Python version and platform), so the cache
key names it and another interpreter must lock again. Verifying the
whole tree costs a read of every file; a stamp of every file's identity
(path, mode, inode, size, change time, which a user cannot set back)
beside the entry lets later opens check only the metadata. That stamp,
like the cache, is as safe as the folder it sits in: a server that runs
unboxed as the same user can rewrite both (and the user's shell profile);
:class:`~lovia_mcp.Sandbox` keeps the cache read-only.
"""

from __future__ import annotations

import configparser
import dataclasses
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lovia.exceptions import UserError
from lovia_mcp_worker.wire.sealed import Sealed, stamp

from .definition import canonical
from .lockfile import Artifact, Locked, PackageLock

CACHE_ENV: Final = "LOVIA_MCP_CACHE_DIR"
# A package manager resolving and downloading a server and its dependencies:
# minutes on a slow link, never forever.
INSTALL_TIMEOUT: Final = 600.0
# The last lines of a failed package manager's output shown in the error.
_TAIL_LINES: Final = 12
# Files an installer writes that name the machine (paths, the installer),
# not the package: left out of a Python tree's digest.
_PY_LOCAL_FILES: Final = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})

_PYTHON_RUNNERS: Final = {"uvx": "uvx", "uv tool run": "uv tool run", "pipx run": "pipx run"}
# The ecosystems a lock's package entry may name.
_ECOSYSTEMS: Final = ("pypi", "npm")
# A lock's cache and tree digests, as this module writes them.
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
# How this module installs, digests and launches an entry (PackageLock.layout).
# 2: bytecode in the digest, the launch derived from the entry alone. An
# entry of another layout was checked by rules that no longer hold, and is
# refused until it is locked again.
LAYOUT: Final = 2
# A console script's entry point (``module:attr``), as packaging tools write them.
_PY_ENTRY: Final = re.compile(r"[A-Za-z_][\w.]*\s*:\s*[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Runner:
    """A package runner's command line, read."""

    runner: str  # "uvx", "uv tool run", "pipx run", "npx"
    ecosystem: str  # "pypi" or "npm"
    package: str
    version: str | None  # as asked; None: the newest
    command: str | None = None  # the executable to run, when it is not the package's own
    args: tuple[str, ...] = ()

    def describe(self) -> str:
        at = "@" if self.ecosystem == "npm" else "=="
        return f"{self.runner} {self.package}{at + self.version if self.version else ''}"

    def requirement(self) -> str:
        if self.version is None:
            return self.package
        return f"{self.package}@{self.version}" if self.ecosystem == "npm" else f"{self.package}=={self.version}"


# --------------------------------------------------------------------------- #
# Reading a runner's command line
# --------------------------------------------------------------------------- #
def parse_runner(command: str, args: list[str]) -> Runner | None:
    """The package a server's command runs through a package runner, or None (not one this module covers)."""
    base = os.path.basename(command)
    if base == "uvx":
        return _python("uvx", args)
    if base == "uv" and args[:2] == ["tool", "run"]:
        return _python("uv tool run", args[2:])
    if base == "pipx" and args[:1] == ["run"]:
        return _python("pipx run", args[1:])
    if base == "npx":
        return _npm(args)
    return None


def _split_python(spec: str) -> tuple[str, str | None] | None:
    name, sep, version = spec.partition("==")
    if not sep:
        name, sep, version = spec.partition("@")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or (sep and not re.fullmatch(r"[\w.+!-]+", version)):
        return None  # extras, markers, ranges, URLs: not modelled
    return name, (version if sep and version != "latest" else None)


def _python(runner: str, args: list[str]) -> Runner | None:
    source: str | None = None
    i = 0
    while i < len(args) and args[i].startswith("-"):
        flag, eq, value = args[i].partition("=")
        if flag in ("-q", "--quiet"):
            i += 1
        elif flag in ("--from", "--spec") and (eq or i + 1 < len(args)):
            source = value if eq else args[i + 1]
            i += 1 if eq else 2
        else:
            return None
    if i >= len(args):
        return None
    first, rest = args[i], tuple(args[i + 1 :])
    if rest[:1] == ("--",):
        rest = rest[1:]
    if source is None:
        split = _split_python(first)
        return None if split is None else Runner(_PYTHON_RUNNERS[runner], "pypi", split[0], split[1], args=rest)
    split = _split_python(source)
    if split is None:
        return None
    return Runner(_PYTHON_RUNNERS[runner], "pypi", split[0], split[1], command=first, args=rest)


def _split_npm(spec: str) -> tuple[str, str | None] | None:
    scoped = spec.startswith("@")
    name, sep, version = spec[1:].partition("@") if scoped else spec.partition("@")
    name = "@" + name if scoped else name
    if not re.fullmatch(r"(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*", name) or (sep and not version):
        return None  # a path, a URL, a git spec: not a registry package
    return name, (version if sep and version != "latest" else None)


def _npm(args: list[str]) -> Runner | None:
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
    split = _split_npm(package if package is not None else first)
    if split is None:
        return None
    return Runner("npx", "npm", split[0], split[1], command=first if package is not None else None, args=rest)


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
    if package.ecosystem not in _ECOSYSTEMS or not _DIGEST.fullmatch(package.cache):
        raise ValueError(f"not a cache entry's name: {package.ecosystem!r}, {package.cache!r}")
    return cache_root() / package.ecosystem / package.cache.removeprefix("sha256:")


def malformed(package: PackageLock, source: list[str] | None) -> str | None:
    """What in a lock's package entry ``lock`` would not have written for the command line ``source``; None: nothing.

    A lock file is a file in a repository like any other: one that names a
    cache entry outside the cache, an entry whose name is not the hash of
    its artifacts, another package than the command line runs, or a script
    outside the installed tree would start code the lock never verified.
    """
    if package.ecosystem not in _ECOSYSTEMS:
        return f"ecosystem {package.ecosystem!r} is neither 'pypi' nor 'npm'"
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
    same = (
        runner.package == package.name
        if runner.ecosystem == "npm"
        else _normal(runner.package) == _normal(package.name)
    )
    if (runner.runner, runner.ecosystem) != (package.runner, package.ecosystem) or not same:
        return f"it installs {package.runner} {package.name}, and the command line runs {runner.describe()}"
    if tuple(package.args) != runner.args:
        return "its arguments are not the command line's"
    if package.ecosystem == "npm":
        parts = package.entry.split("/")
        if parts[0] != "node_modules" or ".." in parts or "" in parts or "\\" in package.entry:
            return f"its script {package.entry[:80]!r} is not a path inside its node_modules"
    elif not _PY_ENTRY.fullmatch(package.entry.strip()):
        return f"its entry point {package.entry[:80]!r} is not module:attribute"
    return None


def declared_entry(package: PackageLock, source: list[str]) -> str | None:
    """The entry the installed (verified) tree declares for ``source``'s command; None if it declares none."""
    runner = parse_runner(source[0], source[1:])
    if runner is None:
        return None
    top = entry_dir(package)
    try:
        if package.ecosystem == "npm":
            return _npm_bin(top, runner, "")
        lib = next((top / "env" / "lib").glob("python*/site-packages"), None)
        return None if lib is None else _console_script(lib, runner, "")
    except (UserError, OSError, ValueError):
        return None


def python_tag() -> str:
    """The interpreter a Python lock holds for (its wheels are built for it)."""
    v = sys.version_info
    return f"{sys.implementation.name}-{v.major}.{v.minor}-{sys.platform}-{platform.machine()}"


def content_address(ecosystem: str, artifacts: list[Artifact], python: str | None) -> str:
    """A cache entry's name: the hash of its artifacts' integrity hashes (and of the interpreter, for Python)."""
    body = {"ecosystem": ecosystem, "artifacts": sorted([a.file, a.hash] for a in artifacts), "python": python}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def covered(top: Path, ecosystem: str) -> Path:
    """The folder of an entry that its digest covers and its launch reads: Python's ``env/lib``, Node's whole entry."""
    return top if ecosystem == "npm" else top / "env" / "lib"


def _walk(top: Path, ecosystem: str) -> list[tuple[str, os.DirEntry[str]]]:
    """The entries a tree's digest covers (files and links), by path relative to the entry, sorted.

    Bytecode is covered like any file: Python runs it instead of the
    source it was compiled from, and trusts the validation mode each
    ``.pyc`` names in its own header. ``os.scandir`` with string paths: the
    open-time check walks thousands of entries, and its cost is the walk.
    """
    out: list[tuple[str, os.DirEntry[str]]] = []
    cut = len(str(top)) + 1

    def visit(folder: str, dist_info: bool) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                visit(entry.path, entry.name.endswith(".dist-info"))
                continue
            if dist_info and ecosystem == "pypi" and entry.name in _PY_LOCAL_FILES:
                continue
            out.append((entry.path[cut:], entry))

    visit(str(covered(top, ecosystem)), False)
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
    if package.ecosystem == "pypi" and package.python and package.python != python_tag():
        return "python", ""
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
    """What is wrong with a locked package's cache entry: ``"python"``, ``"missing"``, ``"changed"``, or None."""
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
    if found == "python":
        raise UserError(
            f"MCP server {server!r}: its lock installs {what} for {package.python}, and this is {python_tag()}",
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


def _run(argv: list[str], environ: dict[str, str], what: str, cwd: Path | None = None) -> str:
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


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


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
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    if expect is not None:
        runner = dataclasses.replace(runner, version=expect.version)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        made = (_install_pypi if runner.ecosystem == "pypi" else _install_npm)(runner, environ, staging)
    finally:
        _remove(staging)
    if expect is not None and (made.cache != expect.cache or (expect.layout == LAYOUT and made.tree != expect.tree)):
        raise UserError(
            f"{runner.describe()}: the registry now serves other files for this version than the lock records "
            f"(content address {made.cache}, locked {expect.cache})",
            hint="Review the change; to accept it, lock with --update.",
        )
    return made


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


def _install_pypi(runner: Runner, environ: dict[str, str], staging: Path) -> PackageLock:
    what = f"locking {runner.describe()}"
    artifacts_dir = staging / "artifacts"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "download", "--progress-bar", "off", "--dest", str(artifacts_dir), runner.requirement()], environ, what)
    files = sorted(artifacts_dir.iterdir())
    artifacts = [Artifact(file=f.name, hash=_sha256(f)) for f in files]
    version = _pypi_version(runner.package, files, what)
    top = staging / "entry"
    top.mkdir()
    env = top / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], environ, what)
    python = env / "bin" / "python"
    _run(
        [*pip, "--python", str(python), "install", "--no-index", "--no-deps", "--no-compile", *map(str, files)],
        environ,
        what,
    )
    lib = next((env / "lib").glob("python*/site-packages"))
    compile_bytecode(lib, environ, what)
    entry = _console_script(lib, runner, what)
    tree = tree_digest(top, "pypi")
    package = PackageLock(
        runner=runner.runner,
        ecosystem="pypi",
        name=runner.package,
        version=version,
        entry=entry,
        cache=content_address("pypi", artifacts, python_tag()),
        tree=tree,
        artifacts=artifacts,
        args=list(runner.args),
        python=python_tag(),
        layout=LAYOUT,
    )
    _place(top, package)
    return package


def compile_bytecode(lib: Path, environ: dict[str, str], what: str) -> None:
    """Compile every module under ``lib``: the bytecode the launch reads, in the digest.

    The same on every install (paths relative to site-packages, a fixed hash
    seed for the order of set constants), and hash-checked, so a changed
    source is never shadowed by its old bytecode.
    """
    _run(
        [interpreter(), "-m", "compileall", "-q", "-s", str(lib), "--invalidation-mode", "checked-hash", str(lib)],
        {**environ, "PYTHONHASHSEED": "0"},
        what,
    )


def _pypi_version(name: str, files: list[Path], what: str) -> str:
    wanted = _normal(name)
    for f in files:
        stem = f.name.removesuffix(".tar.gz").removesuffix(".zip").removesuffix(".whl")
        parts = stem.split("-")
        if len(parts) >= 2 and _normal(parts[0]) == wanted:
            return parts[1]
    raise UserError(f"{what}: pip downloaded no file of {name!r}", hint="Check the package's name.")


def _console_script(lib: Path, runner: Runner, what: str) -> str:
    """The entry point (``module:attr``) the runner would run: the command asked for, or the package's own."""
    wanted = runner.command or runner.package
    scripts: dict[str, str] = {}
    for dist in sorted(lib.glob("*.dist-info")):
        points = dist / "entry_points.txt"
        if not points.is_file():
            continue
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names are case-sensitive
        parser.read(points, encoding="utf-8")
        if parser.has_section("console_scripts"):
            for name, value in parser.items("console_scripts"):
                own = _normal(dist.name.split("-")[0]) == _normal(runner.package)
                if own or name == wanted:
                    scripts.setdefault(name, value.strip())
    if wanted in scripts:
        return scripts[wanted]
    if runner.command is None and len(scripts) == 1:
        return next(iter(scripts.values()))
    raise UserError(
        f"{what}: the package has no command {wanted!r}"
        + (f" (it has {', '.join(sorted(scripts))})" if scripts else " (it declares no console scripts)"),
        hint="Name the command with uvx --from PACKAGE COMMAND (pipx run --spec PACKAGE COMMAND).",
    )


def _install_npm(runner: Runner, environ: dict[str, str], staging: Path) -> PackageLock:
    what = f"locking {runner.describe()}"
    top = staging / "entry"
    top.mkdir()
    # A package.json of its own, so npm never walks up into a parent project.
    (top / "package.json").write_text('{"private": true}\n')
    npm = shutil.which("npm", path=environ.get("PATH")) or "npm"
    _run(
        [npm, "install", "--no-audit", "--no-fund", "--save-exact", "--loglevel=error", runner.requirement()],
        environ,
        what,
        cwd=top,
    )
    try:
        packages = json.loads((top / "package-lock.json").read_text())["packages"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{what}: npm wrote no readable package-lock.json", hint="Update npm (7 or later).") from None
    artifacts = sorted(
        (
            Artifact(
                file=f"{key.removeprefix('node_modules/')}@{info.get('version', '')}", hash=info.get("integrity", "")
            )
            for key, info in packages.items()
            if key and isinstance(info, dict)
        ),
        key=lambda a: a.file,
    )
    own = packages.get(f"node_modules/{runner.package}")
    if not isinstance(own, dict) or "version" not in own:
        raise UserError(f"{what}: npm did not install {runner.package!r}", hint="Check the package's name.")
    entry = _npm_bin(top, runner, what)
    package = PackageLock(
        runner=runner.runner,
        ecosystem="npm",
        name=runner.package,
        version=str(own["version"]),
        entry=entry,
        cache=content_address("npm", artifacts, None),
        tree=tree_digest(top, "npm"),
        artifacts=artifacts,
        args=list(runner.args),
        layout=LAYOUT,
    )
    _place(top, package)
    return package


def _npm_bin(top: Path, runner: Runner, what: str) -> str:
    """The package's script npx would run, relative to the entry: the ``bin`` named as asked, or its only one."""
    folder = Path("node_modules", *runner.package.split("/"))
    manifest: dict[str, Any] = json.loads((top / folder / "package.json").read_text())
    declared = manifest.get("bin")
    bins: dict[str, str] = (
        {runner.package.split("/")[-1]: declared} if isinstance(declared, str) else dict(declared or {})
    )
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


# --------------------------------------------------------------------------- #
# Launching
# --------------------------------------------------------------------------- #
# Runs a console script's entry point as pip's generated script would, named
# for the command (argv[0]) it stands for, with the entry's site-packages as
# the only one on the import path (the interpreter starts with -I -S).
_PY_LAUNCH: Final = (
    "import site, sys; site.addsitedir({lib!r}); import importlib; sys.argv[0] = {name!r}\n"
    "obj = importlib.import_module({module!r})\n"
    "for part in {attrs!r}: obj = getattr(obj, part)\n"
    "sys.exit(obj())"
)
# Isolated mode (no current or script folder on the path, no PYTHON*
# variables, no user site), no site-packages of the interpreter's own, and
# no bytecode written into the (sealed) tree.
_PY_FLAGS: Final = ("-I", "-S", "-B")
# A Node preload that refuses any module resolved outside the folder this
# variable names (the entry): parent node_modules folders, NODE_PATH and
# the global folders are never reached.
NODE_ROOT_ENV: Final = "LOVIA_MCP_NODE_ROOT"
NODE_CONFINE: Final = Path(__file__).with_name("node_confine.cjs")


def interpreter() -> str:
    """The Python a locked server runs on: this process's own, by its real path (never the entry's venv)."""
    return os.path.realpath(sys.executable)


def site_packages(top: Path) -> Path:
    """The entry's site-packages, named for this interpreter's version (a lock for another is refused first)."""
    return top / "env" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def launch(package: PackageLock, top: Path) -> tuple[str, list[str], dict[str, str]]:
    """The command, arguments and environment that start the cached server (nothing outside the digest)."""
    if package.ecosystem == "pypi":
        module, _, attr = package.entry.partition(":")
        code = _PY_LAUNCH.format(
            lib=str(site_packages(top)), name=package.name, module=module.strip(), attrs=attr.strip().split(".")
        )
        return interpreter(), [*_PY_FLAGS, "-c", code, *package.args], {}
    return "node", ["--require", str(NODE_CONFINE), str(top / package.entry), *package.args], {NODE_ROOT_ENV: str(top)}


__all__ = [
    "CACHE_ENV",
    "LAYOUT",
    "NODE_CONFINE",
    "NODE_ROOT_ENV",
    "Runner",
    "cache_root",
    "compile_bytecode",
    "content_address",
    "covered",
    "entry_dir",
    "install",
    "interpreter",
    "launch",
    "declared_entry",
    "malformed",
    "parse_runner",
    "problem",
    "python_tag",
    "refused",
    "site_packages",
    "tree_digest",
    "verify",
]
