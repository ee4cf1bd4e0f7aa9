"""What keeps working on the Landlock backend: the shared code paths and real servers.

Timeouts, tree kills, restarts, stats, stderr, limits and warm spares run on
the same code as without a sandbox, so one test each shows they still hold
inside Landlock. The third-party servers (installed by
``scripts/thirdparty.sh``: node's server-everything and server-filesystem,
mcp-server-time and mcp-server-git) run on it too; the escape probes are in
``test_landlock.py`` and ``sandbox/test_escapes.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PY, ROOT, raw_args, run
from lovia_mcp_worker.sandbox import landlock

from lovia_mcp import Limits, MCPError, MCPServerStdio, Sandbox

pytestmark = pytest.mark.skipif(
    landlock.ABI < landlock.NETWORK_ABI, reason="needs Landlock ABI 4 (Linux 6.7+) for the network rules"
)

LL = Sandbox(backend="landlock")
# Bound on a git command run by the test itself.
GIT_TIMEOUT = 25.0
# The hung call's own timeout: short, since the test is about what follows it.
HANG_TIMEOUT = 1.0
# Bound on a call that makes the server restart first (a killed tree, a fresh
# server's start): about a second; the margin is for a loaded 2-core machine.
RESTART_WAIT = 15.0
# Bound on a call that fails on the server's side (an exit, a passed memory
# limit the watch or the kernel acts on).
FAIL_WAIT = 20.0


def test_stats_report_the_landlock_backend_and_timeouts_restarts_and_stderr_work() -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY, args=raw_args(), name="raw", sandbox=LL, timeout=HANG_TIMEOUT, kill_grace=0.2
        )
        async with server.session() as conn:
            first = conn.server_pid
            stats = await conn.stats()
            assert stats.sandbox == "landlock"
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=HANG_TIMEOUT), HANG_TIMEOUT)
            assert str(await asyncio.wait_for(conn.call_tool("echo", {"text": "after"}), RESTART_WAIT)) == "after"
            print(f"hung Landlock server replaced; next call served {time.monotonic() - started:.2f} s after the start")
            assert conn.server_pid != first
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("stderr_then_exit", {"lines": 3, "code": 7}), FAIL_WAIT)
            assert "stderr line 2" in info.value.stderr_tail
            stats = await conn.stats()
            assert stats.restarts >= 2 and stats.timeouts == 1 and stats.sandbox == "landlock"

    run(main())


def test_the_memory_and_cpu_limits_hold_on_landlock() -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            sandbox=LL,
            auto_reconnect=False,
            limits=Limits(memory_mb=80, cpu_seconds=30),
        )
        async with server.session() as conn:
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("alloc", {"mb": 400}), FAIL_WAIT)
            assert info.value.kind == "limit" and "memory" in str(info.value)

    run(main())


def test_a_cwd_of_slash_is_refused_on_landlock() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), cwd="/", sandbox=LL)
        with pytest.raises(MCPError) as info:
            await server.open()
        assert info.value.kind == "open" and "whole file system writable" in str(info.value)

    run(main())


# --------------------------------------------------------------------------- #
# Third-party servers on Landlock (installed by scripts/thirdparty.sh)
# --------------------------------------------------------------------------- #
THIRDPARTY = ROOT / ".cache" / "thirdparty"
NPM_SCOPE = THIRDPARTY / "npm" / "node_modules" / "@modelcontextprotocol"
NODE = shutil.which("node")


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is missing: run `bash scripts/thirdparty.sh`")


def test_node_servers_run_on_landlock_and_the_filesystem_server_stays_in_its_directory(tmp_path: Path) -> None:
    if NODE is None:
        pytest.skip("node is not on PATH")
    everything, filesystem = (NPM_SCOPE / n / "dist" / "index.js" for n in ("server-everything", "server-filesystem"))
    _need(everything)
    _need(filesystem)
    root = tmp_path / "root"
    root.mkdir()
    outside = ROOT / ".cache" / f"ll-fs-outside-{os.getpid()}"
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text("SECRET\n")

    async def main() -> dict[str, str]:
        out = {}
        async with MCPServerStdio(command=NODE, args=[str(everything), "stdio"], sandbox=LL).session() as conn:
            out["echo"] = str(await conn.call_tool("echo", {"message": "boxed"}))
        # The server is told it may use a folder outside its cwd: Landlock keeps it to its cwd.
        async with MCPServerStdio(
            command=NODE, args=[str(filesystem), str(root), str(outside)], cwd=root, sandbox=LL
        ).session() as conn:
            for key, name, args in (
                ("inside", "write_file", {"path": str(root / "in.txt"), "content": "ok"}),
                ("outside", "write_file", {"path": str(outside / "escaped.txt"), "content": "x"}),
                ("secret", "read_text_file", {"path": str(outside / "secret.txt")}),
            ):
                out[key] = str(await conn.call_tool(name, args))
        return out

    try:
        out = run(main())
        print(out)
        assert "boxed" in out["echo"]
        assert not out["inside"].startswith("[tool error]") and (root / "in.txt").read_text() == "ok"
        assert out["outside"].startswith("[tool error]") and not (outside / "escaped.txt").exists()
        assert out["secret"].startswith("[tool error]") and "SECRET" not in out["secret"]
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_the_time_server_runs_and_the_git_server_commits_on_landlock_only_when_write_deny_is_waived(
    tmp_path: Path,
) -> None:
    git_server = THIRDPARTY / "venv" / "bin" / "mcp-server-git"
    _need(git_server)
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=GIT_TIMEOUT)
    (repo / "a.txt").write_text("one\n")
    ident = {
        "GIT_AUTHOR_NAME": "Boxed",
        "GIT_AUTHOR_EMAIL": "boxed@example.invalid",
        "GIT_COMMITTER_NAME": "Boxed",
        "GIT_COMMITTER_EMAIL": "boxed@example.invalid",
    }

    async def add_and_commit(write_deny: bool) -> list[str]:
        box = Sandbox(backend="landlock", writable=[str(repo)], write_deny=write_deny)
        async with MCPServerStdio(command=str(git_server), env=ident, sandbox=box).session() as conn:
            added = str(await conn.call_tool("git_add", {"repo_path": str(repo), "files": ["a.txt"]}))
            if added.startswith("[tool error]"):
                return [added]
            return [added, str(await conn.call_tool("git_commit", {"repo_path": str(repo), "message": "boxed"}))]

    async def now() -> str:
        async with MCPServerStdio(command=str(git_server.with_name("mcp-server-time")), sandbox=LL).session() as conn:
            return str(await conn.call_tool("get_current_time", {"timezone": "Asia/Tokyo"}))

    assert "Asia/Tokyo" in run(now())
    # The documented cost of carving .git around hooks/ and config: no new
    # file at .git's top (index.lock), so git cannot stage.
    kept = run(add_and_commit(True))
    assert kept[0].startswith("[tool error]") and "index.lock" in kept[0], kept
    waived = run(add_and_commit(False))
    assert not any(r.startswith("[tool error]") for r in waived), waived
    log = subprocess.run(
        ["git", "log", "--format=%s %an"], cwd=repo, capture_output=True, text=True, timeout=GIT_TIMEOUT
    )
    assert log.stdout.strip() == "boxed Boxed"


# After a timeout kill, how long the killed tree may take to be gone (milliseconds
# for the raw server; the margin is for a loaded 2-core machine).
GONE_WAIT = 5.0


def test_a_timeout_kills_the_whole_landlock_tree_grandchildren_and_orphans_included() -> None:
    import psutil

    async def main() -> list[int]:
        server = MCPServerStdio(
            command=PY, args=raw_args(), name="raw", sandbox=LL, timeout=HANG_TIMEOUT, kill_grace=0.2
        )
        async with server.session() as conn:
            children = json.loads(str(await conn.call_tool("spawn", {"n": 2})))
            orphans = json.loads(str(await conn.call_tool("spawn", {"n": 1, "orphan": True})))
            tree = [*children, *orphans]
            assert all(psutil.pid_exists(p) for p in tree)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=HANG_TIMEOUT), HANG_TIMEOUT)
            procs = [psutil.Process(p) for p in tree if psutil.pid_exists(p)]
            started = time.monotonic()
            _, alive = psutil.wait_procs(procs, timeout=GONE_WAIT)
            print(f"tree of {len(tree)} gone {time.monotonic() - started:.2f} s after the timeout")
            return [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE]

    assert run(main()) == []


def test_a_warm_spare_runs_in_the_landlock_sandbox_too() -> None:
    from lovia_mcp import close_spares, warm_spares

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", sandbox=LL, spares=1)
        try:
            assert await warm_spares(server) == 1
            async with server.session() as conn:
                stats = await conn.stats()
                assert stats.sandbox == "landlock"
                assert str(await conn.call_tool("echo", {"text": "spare"})) == "spare"
        finally:
            await close_spares()

    run(main())


def test_a_config_file_sandbox_block_chooses_the_backend(tmp_path: Path) -> None:
    from lovia_mcp.opening.config_file.loader import load_servers

    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "raw": {
                        "command": PY,
                        "args": raw_args(),
                        "sandbox": {"backend": "landlock", "write_deny": False},
                    }
                }
            }
        )
    )
    (server,) = load_servers(str(config))
    assert isinstance(server, MCPServerStdio) and server.sandbox == Sandbox(backend="landlock", write_deny=False)

    async def main() -> str | None:
        async with server.session() as conn:
            return (await conn.stats()).sandbox

    assert run(main()) == "landlock"


def test_a_dead_workers_private_folder_is_removed_by_the_next_landlock_spawn() -> None:
    # A worker killed outright (SIGKILL) cannot remove its folder; its pid names it.
    dead = subprocess.run(
        [PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, timeout=GIT_TIMEOUT, check=True
    )
    stale = Path(f"/tmp/lovia-mcp-ll-{dead.stdout.strip()}-test")
    (stale / "s0" / "tmp").mkdir(parents=True)

    async def main() -> None:
        async with MCPServerStdio(command=PY, args=raw_args(), sandbox=LL).session() as conn:
            assert str(await conn.call_tool("echo", {"text": "x"})) == "x"

    try:
        run(main())
        assert not stale.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
