"""Where a stdio server starts: ``cwd=`` and a relative command are taken from
the agent's working directory at open time, once.

The worker is forked from a forkserver whose cwd was fixed when it started;
a server must not inherit that, nor have a relative path resolved twice
(once against ``cwd``, then again by starting it *in* ``cwd``).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import psutil
import pytest
from helpers import ISOLATIONS, PY, RAW_SERVER, copy_raw_server, run

from lovia_mcp import MCPServerStdio, UserError


def executable_raw_server(path: Path) -> None:
    """A copy of raw_server.py at ``path`` that runs on its own (this interpreter)."""
    copy_raw_server(path)
    body = path.read_text().split("\n", 1)[1]
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


async def server_cwd(server: MCPServerStdio) -> str:
    async with server.session() as conn:
        result = await conn.call_tool("cwd")
        return str(result.content[0].text)


@ISOLATIONS
@pytest.mark.parametrize(
    ("command", "cwd"),
    [("./server.py", "sub"), ("bin/server", "rel/dir"), ("./bin/server", None)],
)
def test_a_relative_command_starts_from_a_relative_cwd_both_taken_from_the_agents_cwd(
    isolation: str, command: str, cwd: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / (cwd or "")
    executable_raw_server(where / command)
    monkeypatch.chdir(tmp_path)

    started_in = run(server_cwd(MCPServerStdio(command=command, cwd=cwd, isolation=isolation)))  # type: ignore[arg-type]

    assert os.path.realpath(started_in) == os.path.realpath(where)


def test_a_server_opened_after_the_agent_changed_directory_starts_in_the_new_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    server = MCPServerStdio(command=PY, args=[RAW_SERVER], isolation="process")

    async def main() -> tuple[str, str]:
        # The first open also starts the forkserver if no test did yet: its
        # cwd (first, or the suite's) is then fixed, unlike the agent's.
        monkeypatch.chdir(first)
        before = await server_cwd(server)
        monkeypatch.chdir(second)
        return before, await server_cwd(server)

    before, after = run(main())

    assert os.path.realpath(before) == os.path.realpath(first)
    assert os.path.realpath(after) == os.path.realpath(second)


def test_a_replaced_worker_starts_the_server_again_in_the_cwd_of_the_open_not_the_agents_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_in, moved_to = tmp_path / "opened", tmp_path / "moved"
    opened_in.mkdir()
    moved_to.mkdir()
    monkeypatch.chdir(opened_in)
    server = MCPServerStdio(command=PY, args=[RAW_SERVER], isolation="process")

    async def main() -> tuple[str, str]:
        async with server.session() as conn:
            before = str((await conn.call_tool("cwd")).content[0].text)
            monkeypatch.chdir(moved_to)
            worker = conn.worker_pid
            assert worker is not None
            dying = psutil.Process(worker)  # before the kill: it may be reaped before a look-up after
            os.kill(worker, signal.SIGKILL)
            psutil.wait_procs([dying], timeout=5)
            # The call finds the worker gone and replaces it (auto_reconnect).
            return before, str((await conn.call_tool("cwd")).content[0].text)

    before, after = run(main())

    assert os.path.realpath(before) == os.path.realpath(opened_in)
    assert os.path.realpath(after) == os.path.realpath(opened_in)


def test_opening_a_server_without_cwd_after_the_agents_cwd_was_removed_fails_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()

    with pytest.raises(UserError, match="working directory no longer exists") as info:
        run(MCPServerStdio(command=PY, args=[RAW_SERVER]).open())

    assert "cwd=" in (info.value.hint or "")
