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

import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from _locked import PYPI_SOURCE as SOURCE
from _locked import Entry, configure, install_pypi, locked_entry, open_tools, refused, write
from helpers import run

from lovia_mcp import close_spares, load_servers, warm_spares
from lovia_mcp.lock.lockfile import Artifact, PackageLock
from lovia_mcp.lock.packages import LAYOUT, content_address, entry_dir, malformed, tree_digest
from lovia_mcp.opening.servers import open_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def entry(tmp_path: Path) -> Iterator[Entry]:
    with locked_entry(tmp_path) as made:
        yield made


def test_the_lock_as_lock_writes_it_starts_the_server_from_the_cache(entry: Entry) -> None:
    write(entry, entry.package)
    assert "fake__echo" in open_tools(entry)
    assert not entry.marker.exists()


def test_an_entry_point_the_package_does_not_declare_is_refused_before_it_runs(entry: Entry) -> None:
    # The tree is intact (its digest holds): only the lock's "entry" was edited.
    write(entry, msgspec.structs.replace(entry.package, entry="fake_server:evil"))
    said = refused(entry)
    print(said)
    assert "MCP server 'fake'" in said and "does not declare" in said and "not started" in said
    assert "lovia-mcp lock --update" in said
    assert not entry.marker.exists(), "the undeclared entry point ran"


def test_a_cache_entry_outside_the_cache_is_refused_when_the_config_is_loaded(entry: Entry, tmp_path: Path) -> None:
    # A tree planted elsewhere (in the repository, say), its digest computed by the attacker,
    # and the lock's cache name walking out of the cache to it.
    planted = tmp_path / "repo" / "vendor"
    install_pypi(planted, entry.marker)
    rel = os.path.relpath(planted, entry_dir(entry.package).parent)
    forged = msgspec.structs.replace(
        entry.package, cache=f"sha256:{rel}", tree=tree_digest(planted, "pypi"), entry="fake_server:evil"
    )
    write(entry, forged)
    said = refused(entry)
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
        ("ecosystem", "cargo", "is none of 'pypi', 'npm'"),
    ],
)
def test_each_field_a_lock_binds_refuses_an_edit(entry: Entry, field: str, value: object, reason: str) -> None:
    forged = msgspec.structs.replace(entry.package, **{field: value})
    assert malformed(entry.package, SOURCE) is None
    wrong = malformed(forged, SOURCE)
    assert wrong is not None and reason in wrong, wrong
    write(entry, forged)
    assert reason in refused(entry)
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
        layout=LAYOUT,
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
    configure(entry, spares=1)
    write(entry, entry.package)
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
