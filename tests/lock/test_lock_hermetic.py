"""A locked server runs only what its lock checked: nothing outside the digest is executed or imported.

Each test is an attack on a cache entry made as ``lovia-mcp lock`` makes
one (``tests/_locked.py``), by someone who can write where the server runs
(its cwd, a parent folder of the cache, the cache itself), between two
starts. Where the attack works, the planted code leaves a marker in the
server's cwd, which each box lets it write; where it is stopped, the marker
is not there and the server either serves (the planted file is never read)
or is refused before it starts (a file of the tree changed).

The Python attacks run unboxed and in each sandbox backend.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _locked import Entry, configure, locked_entry, open_tools, plant_module, refused
from helpers import ISOLATIONS, PY, SERVERS, run
from lovia.exceptions import MCPError
from lovia_mcp_worker.wire.sealed import stamp

from lovia_mcp import Sandbox, load_servers
from lovia_mcp.lock.packages import entry_dir

pytestmark = pytest.mark.timeout(120)

BOXES = [
    None,
    pytest.param(
        "bwrap", marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
    ),
    pytest.param(
        "landlock", marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
    ),
]
CHANGED = "was changed since it was locked"


def _box(backend: str | None) -> dict[str, Any]:
    """The config options that run the server in its cwd, boxed by ``backend`` (None: unboxed)."""
    if backend is None:
        return {}
    from lovia_mcp_worker.sandbox import bwrap, landlock

    if backend == "bwrap" and bwrap.userns_refused() is not None:
        pytest.skip("bubblewrap cannot make a user namespace here")
    if backend == "landlock" and landlock.unavailable(Sandbox(backend="landlock")):
        pytest.skip("Landlock is not available here")
    # The fake package serves tests/servers/raw_server.py, outside its entry.
    return {"sandbox": {"backend": backend, "readable": [str(SERVERS)]}}


@pytest.fixture
def entry(tmp_path: Path) -> Iterator[Entry]:
    with locked_entry(tmp_path) as made:
        yield made


@pytest.mark.parametrize("backend", BOXES)
def test_a_module_in_the_cwd_never_shadows_the_locked_code(entry: Entry, backend: str | None) -> None:
    # The server imports json; Python's -c puts the cwd first on the import path.
    (entry.work / "json.py").write_text(f"open({str(entry.marker)!r}, 'w').close()\nraise ImportError('planted')\n")
    configure(entry, cwd=str(entry.work), **_box(backend))
    assert "fake__echo" in open_tools(entry)
    assert not entry.marker.exists(), "a json.py in the cwd ran in place of the standard library's"


@pytest.mark.parametrize("backend", BOXES)
def test_a_replaced_venv_interpreter_and_its_config_are_never_used(entry: Entry, backend: str | None) -> None:
    # Outside the digest before: env/bin/python and env/pyvenv.cfg. A wrapper in place of the
    # interpreter, and the interpreter's own site-packages switched on.
    env = entry.top / "env"
    python = env / "bin" / "python"
    python.unlink()
    python.write_text(f'#!/bin/sh\n: > {entry.marker}\nexec {PY} "$@"\n')
    python.chmod(0o755)
    cfg = env / "pyvenv.cfg"
    cfg.write_text(
        cfg.read_text().replace("include-system-site-packages = false", "include-system-site-packages = true")
    )
    configure(entry, cwd=str(entry.work), **_box(backend))
    assert "fake__echo" in open_tools(entry)
    assert not entry.marker.exists(), "the entry's replaced interpreter ran"


@pytest.mark.parametrize("backend", BOXES)
def test_planted_bytecode_is_refused_before_the_server_starts(
    entry: Entry, backend: str | None, tmp_path: Path
) -> None:
    # Bytecode that claims not to need checking against its source, in place of the module's:
    # Python trusts the mode a .pyc names in its own header.
    evil = tmp_path / "evil_source.py"
    evil.write_text(f"open({str(entry.marker)!r}, 'w').close()\ndef main(): pass\n")
    [pyc] = (entry.lib / "__pycache__").glob("fake_server.*.pyc")
    py_compile.compile(
        str(evil), cfile=str(pyc), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    configure(entry, cwd=str(entry.work), **_box(backend))
    said = refused(entry)
    print(said)
    assert CHANGED in said and "lovia-mcp lock" in said
    assert not entry.marker.exists(), "planted bytecode ran"


def test_a_same_size_edit_with_its_times_set_back_is_caught(entry: Entry) -> None:
    # The first open checks the whole tree and leaves a stamp of every file's identity beside
    # it; the next open compares only that. Content, size, inode and modification time are
    # as before: only the change time, which no one can set back, tells.
    assert "fake__echo" in open_tools(entry)
    source = entry.lib / "fake_server.py"
    before = source.stat()
    text = source.read_text()
    source.write_text(text.replace("EVIL = 0", "EVIL = 1"))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = source.stat()
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)
    said = refused(entry)
    print(said)
    assert CHANGED in said
    assert not entry.marker.exists(), "the edited module ran"


@ISOLATIONS
def test_a_restart_after_a_crash_is_refused_once_the_tree_changed(entry: Entry, isolation: str) -> None:
    # The worker restarts a crashed server with no agent in between: it compares the tree's
    # stamp, as the open checked it, before every start.
    source = entry.lib / "fake_server.py"

    async def main() -> tuple[str, str]:
        [server] = load_servers(entry.config, isolation=isolation, auto_reconnect=True)
        async with server.session() as conn:
            assert "ok" in str(await conn.call_tool("echo", {"text": "ok"}))
            source.write_text(source.read_text().replace("EVIL = 0", "EVIL = 1"))
            with pytest.raises(MCPError) as crashed:
                await conn.call_tool("exit", {"code": 3})  # dies mid-call; the retry needs a restart
            with pytest.raises(MCPError) as later:
                await conn.call_tool("echo", {"text": "again"})
            return str(crashed.value), str(later.value)

    crashed, later = run(main())
    print(f"the crashed call: {crashed}\nthe next call: {later}")
    assert "changed since they were checked" in crashed + later
    assert not entry.marker.exists(), "a restart ran the changed module"


def test_the_stamp_changes_with_any_write_rename_or_new_file_under_the_tree(entry: Entry) -> None:
    root = str(entry.top / "env" / "lib")
    first = stamp(root)
    assert first == stamp(root) and len(first) == 64
    target = entry.lib / "fake_server.py"
    target.chmod(0o644)
    changed = stamp(root)
    assert changed != first
    (entry.lib / "new_module.py").write_text("")
    assert stamp(root) != changed
    assert stamp(str(entry.top / "no-such-folder")) == ""


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_locked_npm_server_never_loads_a_module_from_outside_its_entry(tmp_path: Path) -> None:
    with locked_entry(tmp_path, "npm") as e:
        top = entry_dir(e.package)
        # Where Node looks for a module its entry lacks: a parent folder's node_modules
        # (the cache's, the home folder's, /node_modules) and NODE_PATH.
        plant_module(top.parent, e.marker)
        elsewhere = plant_module(tmp_path / "node-path", e.marker).parent
        # The control: plain node, as the lock launched it before, loads the planted module.
        script = top / e.package.entry
        subprocess.run([NODE, str(script)], input=b"", timeout=60, check=True, env={**os.environ, "NODE_PATH": ""})
        assert e.marker.exists(), "the planted module is not where Node looks"
        e.marker.unlink()
        configure(e, env={"NODE_PATH": str(elsewhere)})
        assert "fake__echo" in open_tools(e)
        assert not e.marker.exists(), f"a module from outside the locked entry ran ({e.marker.read_text()})"


def test_the_node_preload_refuses_what_resolves_outside_whatever_the_import_style(tmp_path: Path) -> None:
    # The words a server's log shows: the module is not found, and why.
    if NODE is None:
        pytest.skip("node is not installed")
    from lovia_mcp.lock.ecosystems.npm import NODE_CONFINE, NODE_ROOT_ENV

    root = tmp_path / "entry"
    root.mkdir()
    plant_module(tmp_path, tmp_path / "ran")
    script = root / "probe.js"
    script.write_text(
        textwrap.dedent("""\
            try { require("lovia-optional-extra"); console.log("require: loaded"); }
            catch (e) { console.log("require: " + e.code + " " + e.message); }
            import("lovia-optional-extra/esm.mjs").then(
              () => console.log("import: loaded"), (e) => console.log("import: " + e.code));
            """)
    )
    env = {**os.environ, NODE_ROOT_ENV: str(root)}
    out = subprocess.run(
        [NODE, "--require", str(NODE_CONFINE), str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    print(out.stdout, out.stderr)
    assert "require: MODULE_NOT_FOUND" in out.stdout and "outside the locked package" in out.stdout
    assert "import: ERR_MODULE_NOT_FOUND" in out.stdout
    assert not (tmp_path / "ran").exists()
