"""Cache entries made here the way ``lovia-mcp lock`` makes them, offline, for tests that attack a locked server.

- :func:`pypi_entry`: a venv at ``<entry>/env`` with the package ``fake-server``
  1.0 in it, as pip would leave it, its bytecode compiled as the lock
  compiles it; its console script ``fake_server:main`` serves
  ``raw_server.py``. Beside it, ``fake_server:evil``, a function the package
  does not declare, leaves the marker and then serves too; and a switch,
  ``EVIL = 0``, which a same-size edit to ``EVIL = 1`` turns into the same.
- :func:`npm_entry`: ``node_modules/fake-npm`` whose ``bin`` script asks for an
  optional module (as ``ws`` asks for ``bufferutil``) and then hands its
  standard streams to ``raw_server.py``; a module found under that name leaves
  the marker.

In both, the attack is seen working where it works: the open succeeds and
the marker is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from helpers import PY, RAW_SERVER, SERVERS, run

from lovia_mcp import load_servers
from lovia_mcp.lock.ecosystems.pypi import compile_bytecode, python_tag, site_packages
from lovia_mcp.lock.lockfile import Artifact, LockFile, PackageLock, ServerLock, write_lock
from lovia_mcp.lock.packages import (
    CACHE_ENV,
    LAYOUT,
    content_address,
    entry_dir,
    tree_digest,
)

PYPI_SOURCE = ["uvx", "fake-server==1.0"]
PYPI_ARTIFACTS = [Artifact(file="fake_server-1.0-py3-none-any.whl", hash="sha256:" + "ab" * 32)]
NPM_SOURCE = ["npx", "-y", "fake-npm@1.0.0"]
NPM_ARTIFACTS = [Artifact(file="fake-npm@1.0.0", hash="sha512-" + "A" * 86 + "==")]
# The optional module the npm server asks for.
OPTIONAL = "lovia-optional-extra"


@dataclass
class Entry:
    config: Path
    lock: Path
    package: PackageLock
    # In work/, a folder a server may write in its box (its cwd in the attacks that box it).
    marker: Path
    source: list[str]

    @property
    def work(self) -> Path:
        return self.marker.parent

    @property
    def top(self) -> Path:
        return entry_dir(self.package)

    @property
    def lib(self) -> Path:
        return site_packages(self.top)


def install_pypi(top: Path, marker: Path) -> None:
    """A venv at ``top/env`` with ``fake-server`` 1.0 in it and its bytecode compiled, as ``lock`` leaves it."""
    subprocess.run([PY, "-m", "venv", "--without-pip", str(top / "env")], check=True, timeout=60)
    lib = site_packages(top)
    (lib / "fake_server.py").write_text(
        textwrap.dedent(f"""\
            import runpy, sys

            EVIL = 0

            def main():
                if EVIL:
                    open({str(marker)!r}, "w").close()
                sys.path.insert(0, {str(SERVERS)!r})
                runpy.run_path({RAW_SERVER!r}, run_name="__main__")

            def evil():
                open({str(marker)!r}, "w").close()
                main()
            """)
    )
    info = lib / "fake_server-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-server\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nfake-server = fake_server:main\n")
    compile_bytecode(lib, dict(os.environ), "a test entry")


def plant_module(folder: Path, marker: Path) -> Path:
    """:data:`OPTIONAL` in ``folder/node_modules`` (for ``require`` and for ``import``), leaving ``marker``."""
    module = folder / "node_modules" / OPTIONAL
    module.mkdir(parents=True)
    (module / "package.json").write_text(json.dumps({"name": OPTIONAL, "version": "9.9.9"}))
    leave = f"require('node:fs').writeFileSync({str(marker)!r}, 'require');\n"
    (module / "index.js").write_text(leave)
    (module / "esm.mjs").write_text(f"import fs from 'node:fs';\nfs.writeFileSync({str(marker)!r}, 'import');\n")
    return module


def install_npm(top: Path) -> None:
    """``node_modules/fake-npm`` with a ``bin`` that asks for :data:`OPTIONAL`, then serves ``raw_server.py``."""
    folder = top / "node_modules" / "fake-npm"
    (folder / "bin").mkdir(parents=True)
    (top / "package.json").write_text('{"private": true}\n')
    (folder / "package.json").write_text(json.dumps({"name": "fake-npm", "version": "1.0.0", "bin": "bin/serve.js"}))
    (folder / "bin" / "serve.js").write_text(
        textwrap.dedent(f"""\
            #!/usr/bin/env node
            try {{ require({OPTIONAL!r}); }} catch (e) {{ /* optional, as ws treats bufferutil */ }}
            import({OPTIONAL!r} + "/esm.mjs").catch(() => {{}}).finally(() => {{
              const child = require("node:child_process").spawn({PY!r}, [{RAW_SERVER!r}], {{ stdio: "inherit" }});
              child.on("exit", (code) => process.exit(code === null ? 1 : code));
            }});
            """)
    )


@contextmanager
def locked_entry(tmp_path: Path, ecosystem: str = "pypi") -> Iterator[Entry]:
    """A cache under ``tmp_path``, an entry in it, a config that runs it, and the lock that names it."""
    with _cache(tmp_path):
        (tmp_path / "work").mkdir()
        marker = tmp_path / "work" / "evil-ran"
        if ecosystem == "pypi":
            source, artifacts = PYPI_SOURCE, PYPI_ARTIFACTS
            shell = PackageLock(
                runner="uvx",
                ecosystem="pypi",
                name="fake-server",
                version="1.0",
                entry="fake_server:main",
                cache=content_address("pypi", PYPI_ARTIFACTS, python_tag()),
                tree="sha256:" + "0" * 64,
                artifacts=artifacts,
                python=python_tag(),
                layout=LAYOUT,
            )
            install_pypi(entry_dir(shell), marker)
        else:
            source, artifacts = NPM_SOURCE, NPM_ARTIFACTS
            shell = PackageLock(
                runner="npx",
                ecosystem="npm",
                name="fake-npm",
                version="1.0.0",
                entry="node_modules/fake-npm/bin/serve.js",
                cache=content_address("npm", NPM_ARTIFACTS, None),
                tree="sha256:" + "0" * 64,
                artifacts=artifacts,
                layout=LAYOUT,
            )
            install_npm(entry_dir(shell))
        package = msgspec.structs.replace(shell, tree=tree_digest(entry_dir(shell), ecosystem))
        made = Entry(tmp_path / ".mcp.json", tmp_path / ".mcp.lock.json", package, marker, source)
        configure(made)
        write(made, package)
        yield made


@contextmanager
def _cache(tmp_path: Path) -> Iterator[None]:
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path / "cache")
    try:
        yield
    finally:
        if saved is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = saved


def configure(e: Entry, **options: Any) -> None:
    # pin "off": the tools' pins are not what these tests are about.
    entry = {"command": e.source[0], "args": e.source[1:], "pin": "off", **options}
    e.config.write_text(json.dumps({"mcpServers": {"fake": entry}}))


def write(e: Entry, package: PackageLock) -> None:
    write_lock(e.lock, LockFile(servers={"fake": ServerLock(source=e.source, package=package)}))


def open_tools(e: Entry, **options: Any) -> list[str]:
    """Open the config's server (``options`` as ``load_servers`` takes them) and list its tools."""

    async def main() -> list[str]:
        [server] = load_servers(e.config, **options)
        async with server.session() as conn:
            return sorted(t.name for t in conn.tools())

    return run(main())


def refused(e: Entry, **options: Any) -> str:
    """The error (and its hint) of an open that must fail."""
    try:
        open_tools(e, **options)
    except Exception as exc:  # noqa: BLE001 - any refusal; the caller checks its words
        return f"{exc}\nhint: {getattr(exc, 'hint', '')}"
    raise AssertionError("the open succeeded")


__all__ = [
    "NPM_SOURCE",
    "OPTIONAL",
    "PYPI_SOURCE",
    "Entry",
    "configure",
    "install_pypi",
    "locked_entry",
    "open_tools",
    "plant_module",
    "refused",
    "write",
]
