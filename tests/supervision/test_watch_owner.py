"""Which generation an orphan adopted by the worker counts against (the psutil watch, no cgroup).

Pure logic over fake trees and a fake orphan (unit tests), and the walk's
order of reads against two real processes.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from lovia_mcp_worker.containment import guard
from lovia_mcp_worker.containment.guard import CLOCK_TICK, WatchTree


class Orphan:
    """A process the worker adopted; its pid is this test's (whose session leads no generation)."""

    def __init__(self, born: float) -> None:
        self.pid = os.getpid()
        self._born = born

    def create_time(self) -> float:
        return self._born


def generation(started: float | None, server_pid: int) -> WatchTree:
    tree = WatchTree(subreaper=True, generations=lambda: [])
    tree.server_pid, tree.started = server_pid, started
    return tree


@pytest.mark.unit
def test_an_orphan_born_before_every_live_generation_counts_against_none_of_them() -> None:
    # A retired generation's child, still dying after its kill, must not
    # break the memory limit of the fresh generation that replaced it (seen:
    # a fresh server killed at 151.8 MB before its handshake).
    fresh = generation(started=1000.0, server_pid=2**22 - 1)

    assert fresh._owner(Orphan(born=990.0), [fresh]) is None


@pytest.mark.unit
def test_an_orphan_counts_against_the_newest_generation_started_before_it() -> None:
    old, new = generation(1000.0, 2**22 - 1), generation(1010.0, 2**22 - 2)

    assert new._owner(Orphan(born=1005.0), [old, new]) is old
    assert new._owner(Orphan(born=1020.0), [old, new]) is new


@pytest.mark.unit
def test_an_orphan_a_clock_tick_before_its_server_still_counts_against_it() -> None:
    # create_time has the resolution of a clock tick.
    only = generation(1000.0, 2**22 - 1)

    assert only._owner(Orphan(born=1000.0 - CLOCK_TICK / 2), [only]) is only


@pytest.mark.timeout(30)
def test_a_server_spawned_while_a_kill_walk_reads_is_never_taken_for_the_old_generations_orphan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The walk runs in a thread while the loop spawns the next generation:
    # the fresh server appears between the walk's two reads. The reads are
    # scripted: each returns the world before the spawn until the first of
    # them has been made, and the world after it from then on.
    old = subprocess.Popen(["sleep", "30"], start_new_session=True)
    fresh = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        old_gen = WatchTree(subreaper=True, generations=lambda: [])
        old_gen.attach(old.pid)
        fresh_gen = WatchTree(subreaper=True, generations=lambda: [])  # spawning: not attached yet
        spawned = [False]

        def children() -> list[int]:
            listed = [fresh.pid] if spawned[0] else []
            spawned[0] = True
            return listed

        def generations() -> list[WatchTree]:
            listed = [old_gen, fresh_gen] if spawned[0] else [old_gen]
            spawned[0] = True
            return listed

        old_gen._generations = generations
        monkeypatch.setattr(guard, "child_pids", children)
        assert [p.pid for p in old_gen.procs()] == [old.pid]
    finally:
        for proc in (old, fresh):
            proc.kill()
            proc.wait()
