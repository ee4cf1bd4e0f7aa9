"""An idle worker rehearses the server's spawn (``true``), off the open's path.

The rehearsal runs under ``contextlib.suppress`` in the idle worker (a
missing ``true`` only skips it), so a rehearsal that broke would only make
opens slower, silently: these tests run it directly and check that it
spawns, waits for and reaps its child.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import psutil
import pytest

from lovia_mcp_worker import main
from lovia_mcp_worker.containment import launch

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux"), pytest.mark.timeout(30)]


@pytest.mark.skipif(shutil.which("true") is None, reason="no true on PATH")
def test_the_rehearsal_spawns_true_through_the_servers_spawn_and_reaps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    spawned: list[int] = []
    real = launch.spawn

    async def spawn(spec, factory):  # type: ignore[no-untyped-def]
        transport, protocol = await real(spec, factory)
        spawned.append(transport.get_pid())
        return transport, protocol

    monkeypatch.setattr(launch, "spawn", spawn)
    asyncio.run(main._rehearse_spawn())
    assert len(spawned) == 1
    pid = spawned[0]
    # Reaped by the loop's child watcher: no zombie of ours is left under that pid.
    assert not (psutil.pid_exists(pid) and psutil.Process(pid).ppid() == os.getpid())


def test_without_true_on_path_the_rehearsal_fails_with_a_launch_error_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(launch.LaunchError, match="command not found: 'true'"):
        asyncio.run(main._rehearse_spawn())
