"""``lovia-mcp lock`` on real package servers: ``uvx mcp-server-time`` and ``npx -y @modelcontextprotocol/server-everything``.

No network at test time: ``scripts/thirdparty.sh`` keeps what the lock
downloads in ``.cache/thirdparty/`` (the wheels, and an npm cache holding
server-everything's tree), and the lock runs pip and npm as a user would,
with the user's own environment, which here points them there:
``PIP_NO_INDEX`` and ``PIP_FIND_LINKS`` for pip, ``npm_config_offline`` and
``npm_config_cache`` for npm. ``uvx`` and ``npx`` themselves are never run:
the config only names them. The lock is written once for the module, into a
cache of its own (``LOVIA_MCP_CACHE_DIR``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import ROOT, run
from lovia_mcp_worker.sandbox import landlock

from lovia_mcp import MCPServer, Sandbox, load_servers
from lovia_mcp.lock.definition import definition_hash
from lovia_mcp.lock.packages import CACHE_ENV, entry_dir
from lovia_mcp.opening.config_file.locking import lock_config

# The lock installs mcp-server-time's ~30 wheels into a venv and compiles
# them, and server-everything's ~110 npm packages: half a minute on a loaded
# 2-core machine, once for the module.
pytestmark = pytest.mark.timeout(300)

THIRDPARTY = ROOT / ".cache" / "thirdparty"
WHEELS = THIRDPARTY / "wheels"
NPM_CACHE = THIRDPARTY / "npm-cache"
TIME_VERSION = "2026.10.19"
EVERYTHING_VERSION = "2026.8.31"
CONFIG = {
    "mcpServers": {
        "time": {"command": "uvx", "args": [f"mcp-server-time@{TIME_VERSION}"]},
        "everything": {
            "command": "npx",
            "args": ["-y", f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}"],
        },
    }
}
PACKAGE_MANAGERS = {"uv", "uvx", "pip", "pipx", "npm", "npx"}


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The config, locked (``.mcp.lock.json`` beside it), its cache in a folder of its own."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not on PATH: the npm server cannot be locked here")
    if not WHEELS.is_dir() or not NPM_CACHE.is_dir():
        pytest.skip(".cache/thirdparty has no wheels or npm-cache: run `bash scripts/thirdparty.sh`")
    folder = tmp_path_factory.mktemp("lock")
    path = folder / ".mcp.json"
    path.write_text(json.dumps(CONFIG))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CACHE_ENV, str(folder / "cache"))
        for name, value in {
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(WHEELS),
            "PIP_CONFIG_FILE": os.devnull,
            "npm_config_offline": "true",
            "npm_config_cache": str(NPM_CACHE),
        }.items():
            env.setenv(name, value)
        _, outcomes = run(lock_config(path))
        assert [(o.name, o.action, o.error) for o in outcomes] == [
            ("time", "locked", None),
            ("everything", "locked", None),
        ]
        yield path


def server(path: Path, name: str) -> MCPServer:
    return next(s for s in load_servers(path) if s.name == name)


def tree_of(pid: int) -> list[str]:
    root = psutil.Process(pid)
    return [" ".join(p.cmdline()) for p in [root, *root.children(recursive=True)]]


def test_the_lock_records_exact_versions_integrity_hashes_and_the_launch_from_the_cache(locked: Path) -> None:
    lock = json.loads(locked.with_name(".mcp.lock.json").read_text())["servers"]
    time, every = lock["time"]["package"], lock["everything"]["package"]

    assert lock["time"]["source"] == ["uvx", f"mcp-server-time@{TIME_VERSION}"]
    assert (time["runner"], time["ecosystem"], time["version"]) == ("uvx", "pypi", TIME_VERSION)
    wheels = {a["file"]: a["hash"] for a in time["artifacts"]}
    assert f"mcp_server_time-{TIME_VERSION}-py3-none-any.whl" in wheels
    assert all(h.startswith("sha256:") and len(h) == 71 for h in wheels.values())
    assert len(wheels) == len(list(WHEELS.glob("*.whl")))  # the package and every dependency
    assert time["entry"] == "mcp_server_time:main"
    assert (every["runner"], every["ecosystem"], every["version"]) == ("npx", "npm", EVERYTHING_VERSION)
    integrity = {a["file"]: a["hash"] for a in every["artifacts"]}
    assert integrity[f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}"].startswith("sha512-")
    assert every["entry"].startswith("node_modules/@modelcontextprotocol/server-everything/")
    assert set(lock["time"]["tools"]) == {"get_current_time", "convert_time"}
    assert "echo" in lock["everything"]["tools"]


@pytest.mark.parametrize("backend", ["auto", "landlock"])
@pytest.mark.parametrize(
    ("name", "tool", "arguments"),
    [
        ("time", "get_current_time", {"timezone": "UTC"}),
        ("everything", "echo", {"message": "from the cache"}),
    ],
)
def test_a_locked_server_starts_from_the_cache_with_no_package_manager_and_no_network(
    locked: Path, name: str, tool: str, arguments: dict[str, Any], backend: str
) -> None:
    # Landlock reads are an allowlist: the cache entry must be granted as the server's own runtime.
    if backend == "landlock" and landlock.ABI < landlock.NETWORK_ABI:
        pytest.skip("needs Landlock ABI 4 (Linux 6.7+) for the network rules")
    boxed = dataclasses.replace(server(locked, name), sandbox=Sandbox(network=False, backend=backend))

    async def go() -> tuple[list[str], str, str | None]:
        async with boxed.session() as conn:
            assert conn.server_pid is not None
            tree = tree_of(conn.server_pid)
            answer = str(await conn.call_tool(tool, arguments))
            return tree, answer, (await conn.stats()).sandbox

    with pytest.MonkeyPatch.context() as env:
        env.setenv(CACHE_ENV, str(locked.parent / "cache"))
        tree, answer, sandbox = run(go())

    assert sandbox is not None and (backend == "auto" or sandbox == backend)
    words = {os.path.basename(w) for line in tree for w in line.split()[:2]}
    assert not words & PACKAGE_MANAGERS, tree
    assert str(locked.parent / "cache") in tree[0]
    assert ("UTC" in answer) if name == "time" else ("from the cache" in answer)


def test_a_tampered_or_removed_cache_is_refused_naming_the_server_and_the_fix(locked: Path) -> None:
    [package_server] = [s for s in load_servers(locked) if s.name == "time"]
    assert package_server.locked is not None and package_server.locked.entry is not None
    package = package_server.locked.entry.package
    assert package is not None

    async def open_error() -> str:
        with pytest.raises(Exception) as refused:
            async with server(locked, "time").session():
                pass
        return f"{refused.value}\nhint: {getattr(refused.value, 'hint', '')}"

    with pytest.MonkeyPatch.context() as env:
        env.setenv(CACHE_ENV, str(locked.parent / "cache"))
        top = entry_dir(package)
        source = next(top.glob("env/lib/python*/site-packages/mcp_server_time/server.py"))
        original = source.read_bytes()
        os.chmod(source, 0o644)
        source.write_bytes(original + b"\nprint('tampered')\n")
        try:
            tampered = run(open_error())
        finally:
            source.write_bytes(original)
        moved = top.with_name(top.name + ".away")
        os.rename(top, moved)
        try:
            removed = run(open_error())
        finally:
            os.rename(moved, top)

        async def opens() -> int:
            async with server(locked, "time").session() as conn:
                return len(conn.tools())

        restored = run(opens())

    for said in (tampered, removed):
        assert "MCP server 'time'" in said and f"lovia-mcp lock --config {locked} --server time" in said
    assert "was changed since it was locked" in tampered and "not started" in tampered
    assert "is not in the cache" in removed
    assert restored == 2


def test_a_config_whose_package_changed_since_the_lock_is_refused_until_locked_again(locked: Path) -> None:
    edited = locked.with_name("edited.json")
    config = json.loads(json.dumps(CONFIG))
    config["mcpServers"]["time"]["args"] = ["mcp-server-time@2099.1.1"]
    edited.write_text(json.dumps(config))

    with pytest.raises(Exception) as refused:
        load_servers(edited, lock=locked.with_name(".mcp.lock.json"))

    assert "the config runs uvx mcp-server-time@2099.1.1" in str(refused.value)
    assert "lock --update" in str(getattr(refused.value, "hint", ""))


@pytest.mark.parametrize(
    ("name", "changed", "other", "arguments"),
    [
        (
            "time",
            "get_current_time",
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"},
        ),
        ("everything", "echo", "get-sum", {"a": 1, "b": 2}),
    ],
)
def test_a_tool_whose_definition_differs_from_its_pin_is_withheld_while_the_others_work(
    locked: Path, name: str, changed: str, other: str, arguments: dict[str, Any]
) -> None:
    # The server's own code cannot change under a verified cache, so the pin
    # changes instead: the same comparison, from the other side.
    lock = json.loads(locked.with_name(".mcp.lock.json").read_text())
    pin = lock["servers"][name]["tools"][changed]
    pin["definition"]["description"] = "What the user approved."
    pin["hash"] = definition_hash(pin["definition"])
    edited = locked.with_name(f"{name}-edited.lock.json")
    edited.write_text(json.dumps(lock))

    async def go() -> tuple[list[str], list[str], str]:
        boxed = next(s for s in load_servers(locked, lock=edited) if s.name == name)
        async with boxed.session() as conn:
            offered = [t.name for t in conn.tools()]
            return offered, conn.quarantined, str(await conn.call_tool(other, arguments))

    with pytest.MonkeyPatch.context() as env:
        env.setenv(CACHE_ENV, str(locked.parent / "cache"))
        offered, quarantined, answer = run(go())

    assert quarantined == [changed]
    assert f"{name}__{changed}" not in offered and f"{name}__{other}" in offered
    assert answer and "error" not in answer.lower()
