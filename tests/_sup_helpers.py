"""Helpers shared by the supervision tests (tests/test_sup_*.py)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from conftest import pid_alive

from lovia_mcp_worker.containment import cgroup

# Poll period while waiting, against a deadline, for processes to exit.
POLL = 0.01


async def alive_after(pids: list[int], within: float) -> tuple[list[int], float]:
    """Wait up to ``within`` seconds for ``pids`` to exit (zombies count as gone).

    Returns the pids still alive and the time taken. Async, so that a server
    hosted in this event loop (``isolation="none"``) is torn down meanwhile.
    """
    started = time.monotonic()
    deadline = started + within
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive, time.monotonic() - started
        await asyncio.sleep(POLL)


def alive_after_sync(pids: list[int], within: float) -> tuple[list[int], float]:
    """:func:`alive_after` outside an event loop."""
    return asyncio.run(alive_after(pids, within))


@pytest.fixture(params=["cgroup", "watch"])
def enforcement(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test under each enforcement path: a cgroup per generation, or the watch.

    "watch" turns cgroups off (``LOVIA_MCP_CGROUPS=0``, which reaches workers
    with ``Open``); "cgroup" is skipped where this process may make none.
    """
    if request.param == "watch":
        monkeypatch.setenv(cgroup.ENV_SWITCH, "0")
    else:
        monkeypatch.delenv(cgroup.ENV_SWITCH, raising=False)
        if cgroup.layout() is None:
            pytest.skip("no cgroup can be made here (not root, or no writable memory and pids hierarchy)")
    return str(request.param)


def leftover_cgroups() -> list[str]:
    """lovia-mcp generation cgroups that exist now (under this process's own cgroups)."""
    where = cgroup.layout()
    if where is None:
        return []
    return [os.path.join(d, n) for d in where.parents for n in os.listdir(d) if n.startswith(cgroup.PREFIX)]
