"""PyPI: ``uvx``, ``uv tool run`` and ``pipx run`` servers, locked into a venv and started isolated.

- **read**: ``uvx PKG[@VER] [ARGS]``, ``uvx --from PKG[==VER] CMD [ARGS]``,
  the same after ``uv tool run``, ``pipx run [--spec PKG[==VER]] PKG[==VER]
  [ARGS]``; any other option (``--with``, ``--python``...), extras,
  markers, ranges or URLs change what runs in ways the lock does not model,
  so such a command is not read;
- **install**: ``pip download`` resolves the package and its dependencies
  for this interpreter, each file hashed (sha256); a venv is made from
  exactly those files with no index (``pip install --no-index --no-deps``)
  and its bytecode compiled, reproducibly, into the digest;
- **launch**: lovia-mcp's own interpreter (the lock's Python version, which
  is checked) in isolated mode, ``-I`` (no current or script folder on the
  import path, no ``PYTHON*`` variables, no user site), ``-S`` (none of the
  interpreter's own site-packages) and ``-B`` (no bytecode written into the
  sealed tree), with the entry's site-packages the only one added: the
  entry's venv interpreter, its ``pyvenv.cfg`` and its scripts are never
  used.

Caveat: a lock holds for the interpreter version it was made with (wheels
are built per Python version and platform), so the cache's name includes
it and another interpreter must lock again.
"""

from __future__ import annotations

import configparser
import os
import platform
import re
import sys
from pathlib import Path
from typing import ClassVar, Final

from lovia.exceptions import UserError

from ..lockfile import Artifact, PackageLock
from .ecosystem import Installed, Runner, requirement, run_tool, sha256_file

_RUNNERS: Final = ("uvx", "uv tool run", "pipx run")
# Files an installer writes that name the machine (paths, the installer),
# not the package: left out of the digest.
_LOCAL_FILES: Final = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
# A console script's entry point (``module:attr``), as packaging tools write them.
_ENTRY: Final = re.compile(r"[A-Za-z_][\w.]*\s*:\s*[A-Za-z_][\w.]*")
# Runs a console script's entry point as pip's generated script would, named
# for the command (argv[0]) it stands for, with the entry's site-packages as
# the only one on the import path (the interpreter starts with -I -S).
_LAUNCH: Final = (
    "import site, sys; site.addsitedir({lib!r}); import importlib; sys.argv[0] = {name!r}\n"
    "obj = importlib.import_module({module!r})\n"
    "for part in {attrs!r}: obj = getattr(obj, part)\n"
    "sys.exit(obj())"
)
# Isolated mode (no current or script folder on the path, no PYTHON*
# variables, no user site), no site-packages of the interpreter's own, and
# no bytecode written into the (sealed) tree.
_FLAGS: Final = ("-I", "-S", "-B")


def python_tag() -> str:
    """The interpreter a Python lock holds for (its wheels are built for it)."""
    v = sys.version_info
    return f"{sys.implementation.name}-{v.major}.{v.minor}-{sys.platform}-{platform.machine()}"


def interpreter() -> str:
    """The Python a locked server runs on: this process's own, by its real path (never the entry's venv)."""
    return os.path.realpath(sys.executable)


def site_packages(top: Path) -> Path:
    """The entry's site-packages, named for this interpreter's version (a lock for another is refused first)."""
    return top / "env" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def compile_bytecode(lib: Path, environ: dict[str, str], what: str) -> None:
    """Compile every module under ``lib``: the bytecode the launch reads, in the digest.

    The same on every install (paths relative to site-packages, a fixed hash
    seed for the order of set constants), and hash-checked, so a changed
    source is never shadowed by its old bytecode.
    """
    run_tool(
        [interpreter(), "-m", "compileall", "-q", "-s", str(lib), "--invalidation-mode", "checked-hash", str(lib)],
        {**environ, "PYTHONHASHSEED": "0"},
        what,
    )


def normal(name: str) -> str:
    """A distribution's name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


class PyPI:
    """The ``Ecosystem`` of Python packages."""

    name: ClassVar[str] = "pypi"
    pin: ClassVar[str] = "=="

    def parse(self, command: str, args: list[str]) -> Runner | None:
        base = os.path.basename(command)
        if base == "uvx":
            return _read("uvx", args)
        if base == "uv" and args[:2] == ["tool", "run"]:
            return _read("uv tool run", args[2:])
        if base == "pipx" and args[:1] == ["run"]:
            return _read("pipx run", args[1:])
        return None

    def install(self, runner: Runner, environ: dict[str, str], top: Path, staging: Path) -> Installed:
        what = f"locking {runner.runner} {requirement(runner, self.pin)}"
        artifacts_dir = staging / "artifacts"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        asked = requirement(runner, self.pin)
        run_tool([*pip, "download", "--progress-bar", "off", "--dest", str(artifacts_dir), asked], environ, what)
        files = sorted(artifacts_dir.iterdir())
        artifacts = [Artifact(file=f.name, hash=sha256_file(f)) for f in files]
        version = _version(runner.package, files, what)
        env = top / "env"
        run_tool([sys.executable, "-m", "venv", "--without-pip", str(env)], environ, what)
        python = env / "bin" / "python"
        run_tool(
            [*pip, "--python", str(python), "install", "--no-index", "--no-deps", "--no-compile", *map(str, files)],
            environ,
            what,
        )
        lib = next((env / "lib").glob("python*/site-packages"))
        compile_bytecode(lib, environ, what)
        return Installed(
            version=version, entry=_console_script(lib, runner, what), artifacts=artifacts, python=python_tag()
        )

    def covered(self, top: Path) -> Path:
        return top / "env" / "lib"

    def left_out(self, folder: str, name: str) -> bool:
        return folder.endswith(".dist-info") and name in _LOCAL_FILES

    def entry_problem(self, entry: str) -> str | None:
        if not _ENTRY.fullmatch(entry.strip()):
            return f"its entry point {entry[:80]!r} is not module:attribute"
        return None

    def declared(self, top: Path, runner: Runner, what: str) -> str:
        lib = next((top / "env" / "lib").glob("python*/site-packages"), None)
        if lib is None:
            raise UserError(f"{what}: the entry has no site-packages", hint="Lock it again.")
        return _console_script(lib, runner, what)

    def foreign(self, package: PackageLock) -> str | None:
        if package.python and package.python != python_tag():
            return f"for {package.python}, and this is {python_tag()}"
        return None

    def same_package(self, asked: str, locked: str) -> bool:
        return normal(asked) == normal(locked)

    def launch(self, package: PackageLock, top: Path) -> tuple[str, list[str], dict[str, str]]:
        module, _, attr = package.entry.partition(":")
        code = _LAUNCH.format(
            lib=str(site_packages(top)), name=package.name, module=module.strip(), attrs=attr.strip().split(".")
        )
        return interpreter(), [*_FLAGS, "-c", code, *package.args], {}


def _split(spec: str) -> tuple[str, str | None] | None:
    name, sep, version = spec.partition("==")
    if not sep:
        name, sep, version = spec.partition("@")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or (sep and not re.fullmatch(r"[\w.+!-]+", version)):
        return None  # extras, markers, ranges, URLs: not modelled
    return name, (version if sep and version != "latest" else None)


def _read(runner: str, args: list[str]) -> Runner | None:
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
        split = _split(first)
        return None if split is None else Runner(runner, "pypi", split[0], split[1], args=rest)
    split = _split(source)
    if split is None:
        return None
    return Runner(runner, "pypi", split[0], split[1], command=first, args=rest)


def _version(name: str, files: list[Path], what: str) -> str:
    wanted = normal(name)
    for f in files:
        stem = f.name.removesuffix(".tar.gz").removesuffix(".zip").removesuffix(".whl")
        parts = stem.split("-")
        if len(parts) >= 2 and normal(parts[0]) == wanted:
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
                own = normal(dist.name.split("-")[0]) == normal(runner.package)
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


__all__ = ["PyPI", "compile_bytecode", "interpreter", "normal", "python_tag", "site_packages"]
