"""A lock file that points a package server at code the lock never verified is refused, before anything starts.

A lock file lives in the repository beside the config, and a change to it
reads as generated noise in a review. These are the edits an attacker with a
pull request would try, each against a cache entry made here the way
``lovia-mcp lock`` makes one (a venv with the package installed, its tree
digest and content address), offline: a Python package ``fake-server`` whose
console script runs ``raw_server.py``, and beside it a function the package
does not declare, ``fake_server:evil``, that leaves a marker file and then
serves too (so the attack, where it works, is seen working: the open succeeds
and the marker is there).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from helpers import PY, RAW_SERVER, SERVERS, run

from lovia_mcp import close_spares, load_servers, warm_spares
from lovia_mcp.lock.lockfile import Artifact, LockFile, PackageLock, ServerLock, write_lock
from lovia_mcp.lock.packages import CACHE_ENV, content_address, entry_dir, malformed, python_tag, tree_digest
from lovia_mcp.servers import open_server

pytestmark = pytest.mark.timeout(120)

SOURCE = ["uvx", "fake-server==1.0"]
ARTIFACTS = [Artifact(file="fake_server-1.0-py3-none-any.whl", hash="sha256:" + "ab" * 32)]


@dataclass
class Entry:
    config: Path
    lock: Path
    package: PackageLock
    marker: Path


def _install(top: Path, marker: Path) -> None:
    """A venv at ``top/env`` with the package ``fake-server`` 1.0 in it, as pip would leave it."""
    subprocess.run([PY, "-m", "venv", "--without-pip", str(top / "env")], check=True, timeout=60)
    [lib] = (top / "env" / "lib").glob("python*/site-packages")
    (lib / "fake_server.py").write_text(
        textwrap.dedent(f"""\
            import runpy, sys

            def main():
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


@pytest.fixture
def entry(tmp_path: Path) -> Iterator[Entry]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CACHE_ENV, str(tmp_path / "cache"))
        marker = tmp_path / "evil-ran"
        cache = content_address("pypi", ARTIFACTS, python_tag())
        shell = PackageLock(
            runner="uvx",
            ecosystem="pypi",
            name="fake-server",
            version="1.0",
            entry="fake_server:main",
            cache=cache,
            tree="sha256:" + "0" * 64,
            artifacts=ARTIFACTS,
            python=python_tag(),
        )
        top = entry_dir(shell)
        _install(top, marker)
        package = msgspec.structs.replace(shell, tree=tree_digest(top, "pypi"))
        made = Entry(tmp_path / ".mcp.json", tmp_path / ".mcp.lock.json", package, marker)
        _config(made)
        yield made


def _config(e: Entry, **options: object) -> None:
    # pin "off": the tools' pins are not what these tests are about.
    entry = {"command": SOURCE[0], "args": SOURCE[1:], "pin": "off", **options}
    e.config.write_text(json.dumps({"mcpServers": {"fake": entry}}))


def _write(e: Entry, package: PackageLock) -> None:
    write_lock(e.lock, LockFile(servers={"fake": ServerLock(source=SOURCE, package=package)}))


def _open(e: Entry) -> list[str]:
    async def main() -> list[str]:
        [server] = load_servers(e.config)
        async with server.session() as conn:
            return sorted(t.name for t in conn.tools())

    return run(main())


def _refused(e: Entry) -> str:
    with pytest.raises(Exception) as refused:
        _open(e)
    return f"{refused.value}\nhint: {getattr(refused.value, 'hint', '')}"


def test_the_lock_as_lock_writes_it_starts_the_server_from_the_cache(entry: Entry) -> None:
    _write(entry, entry.package)
    assert "fake__echo" in _open(entry)
    assert not entry.marker.exists()


def test_an_entry_point_the_package_does_not_declare_is_refused_before_it_runs(entry: Entry) -> None:
    # The tree is intact (its digest holds): only the lock's "entry" was edited.
    _write(entry, msgspec.structs.replace(entry.package, entry="fake_server:evil"))
    said = _refused(entry)
    print(said)
    assert "MCP server 'fake'" in said and "does not declare" in said and "not started" in said
    assert "lovia-mcp lock --update" in said
    assert not entry.marker.exists(), "the undeclared entry point ran"


def test_a_cache_entry_outside_the_cache_is_refused_when_the_config_is_loaded(entry: Entry, tmp_path: Path) -> None:
    # A tree planted elsewhere (in the repository, say), its digest computed by the attacker,
    # and the lock's cache name walking out of the cache to it.
    planted = tmp_path / "repo" / "vendor"
    _install(planted, entry.marker)
    rel = os.path.relpath(planted, entry_dir(entry.package).parent)
    forged = msgspec.structs.replace(
        entry.package, cache=f"sha256:{rel}", tree=tree_digest(planted, "pypi"), entry="fake_server:evil"
    )
    _write(entry, forged)
    said = _refused(entry)
    print(said)
    assert "not one lovia-mcp lock writes" in said and "not a sha256 digest" in said
    assert not entry.marker.exists(), "code outside the cache ran"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("cache", "sha256:" + "cd" * 32, "not the hash of its artifacts"),
        ("tree", "sha256:abc", "not a sha256 digest"),
        ("name", "other-server", "the command line runs uvx fake-server==1.0"),
        ("runner", "pipx run", "the command line runs uvx fake-server==1.0"),
        ("args", ["--evil"], "arguments are not the command line's"),
        ("entry", "fake_server:evil; import os", "not module:attribute"),
        ("ecosystem", "cargo", "neither 'pypi' nor 'npm'"),
    ],
)
def test_each_field_a_lock_binds_refuses_an_edit(entry: Entry, field: str, value: object, reason: str) -> None:
    forged = msgspec.structs.replace(entry.package, **{field: value})
    assert malformed(entry.package, SOURCE) is None
    wrong = malformed(forged, SOURCE)
    assert wrong is not None and reason in wrong, wrong
    _write(entry, forged)
    assert reason in _refused(entry)
    assert not entry.marker.exists()


@pytest.mark.parametrize(
    "script",
    [
        "../evil.js",
        "node_modules/x/../../../evil.js",
        "/tmp/evil.js",
        "node_modules//x.js",
        "node_modules\\x\\..\\e.js",
    ],
)
def test_an_npm_script_outside_the_installed_node_modules_is_refused(script: str) -> None:
    artifacts = [Artifact(file="x@1.0.0", hash="sha512-AAAA")]
    package = PackageLock(
        runner="npx",
        ecosystem="npm",
        name="x",
        version="1.0.0",
        entry=script,
        cache=content_address("npm", artifacts, None),
        tree="sha256:" + "0" * 64,
        artifacts=artifacts,
    )
    wrong = malformed(package, ["npx", "-y", "x@1.0.0"])
    assert wrong is not None and "not a path inside its node_modules" in wrong
    assert (
        malformed(msgspec.structs.replace(package, entry="node_modules/x/bin/x.js"), ["npx", "-y", "x@1.0.0"]) is None
    )


def test_every_start_from_the_cache_checks_it_a_warm_spare_too_and_taking_a_spare_starts_nothing(entry: Entry) -> None:
    # The spare is checked as it starts, in the background; a run that takes it pays no walk of the
    # tree. Once a file of the tree changes, nothing more starts from it: not the spare's
    # replacement, not a fresh open. The changed code would leave the marker.
    _config(entry, spares=1)
    _write(entry, entry.package)
    [server] = load_servers(entry.config)
    [lib] = (entry_dir(entry.package) / "env" / "lib").glob("python*/site-packages")

    async def main() -> tuple[int, list[str], str, str]:
        try:
            ready = await warm_spares(server)
            with open(lib / "fake_server.py", "a") as f:  # noqa: ASYNC230 - a few bytes, once
                f.write(f"\nopen({str(entry.marker)!r}, 'w').close()\n")
            conn = await open_server(server, isolation=None, close_after_run=True)
            try:
                tools = sorted(t.name for t in conn.tools())
            finally:
                await conn.close()
            with pytest.raises(Exception) as spare:
                await warm_spares(server)  # the taken spare's replacement
            with pytest.raises(Exception) as fresh:
                await open_server(server, isolation=None, close_after_run=True)
            return ready, tools, str(spare.value), str(fresh.value)
        finally:
            await close_spares()

    ready, tools, spare, fresh = run(main())
    print(f"spare: {spare}\nfresh open: {fresh}")
    assert ready == 1 and "fake__echo" in tools
    assert "was changed since it was locked" in spare and "was changed since it was locked" in fresh
    assert not entry.marker.exists(), "a server started from the changed cache"
