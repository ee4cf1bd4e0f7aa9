"""Supervision: each server generation contained on its own (issue 9).

Every test runs under both enforcement paths (the ``enforcement`` fixture):
a cgroup per generation, where this process may make one, and the watch
(cgroups turned off). A generation retired after a timed-out call gets its
grace and dies in the background while a fresh one already serves; a call
that ran beside the timed-out one is retried there; the kernel holds memory
and process limits where a cgroup exists; the restart circuit belongs to
the connection. The figures each test prints are the ones docs/operating.md quotes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import ISOLATIONS, alive_after, leftover_cgroups, limit_hit, pid_alive, pid_of, raw, run, wait_gone

from lovia_mcp import Limits, MCPError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")


TIMEOUT = 1.0
# Under a cgroup the kernel charges the tree and never lets the charge pass
# memory.limit_in_bytes: the stated margin over memory_mb is nothing.
CGROUP_MEMORY_MARGIN_MB = 0.0


@pytest.mark.timeout(30)
@ISOLATIONS
def test_a_call_issued_during_the_kill_grace_is_served_by_a_fresh_server_within_its_own_timeout(
    enforcement: str, isolation: str
) -> None:
    grace = 3.0  # long, so that the overlap is plain to see

    async def main() -> None:
        server = raw(isolation, kill_grace=grace)
        async with server.session() as conn:
            assert (await conn.stats()).enforcement == enforcement
            old = await pid_of(conn)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), TIMEOUT)
            timed_out = time.monotonic()
            # Its own timeout is the same second that made the first call fail.
            new = int(json.loads(str(await asyncio.wait_for(conn.call_tool("pid", timeout=TIMEOUT), TIMEOUT)))["pid"])
            served = time.monotonic() - timed_out
            assert new != old
            assert pid_alive(old), "the old server should still be in its grace period"
            alive, _ = await alive_after([old], grace + 3.0)
            gone = time.monotonic() - timed_out
            assert alive == [], f"the old server outlived its grace by {gone - grace:.2f} s"
            assert gone >= grace - 0.05, gone
            stats = await conn.stats()
            assert stats.timeouts == 1 and stats.restarts == 1 and stats.server_pid == new
            assert served < TIMEOUT, served
            print(
                f"[{enforcement}, {isolation}] next call served {served * 1000:.0f} ms after the timeout; "
                f"old tree gone after {gone:.2f} s (kill_grace={grace:g})"
            )

    run(main())


@pytest.mark.timeout(30)
def test_a_call_running_beside_a_timed_out_call_is_retried_once_on_the_fresh_server_and_succeeds(
    enforcement: str, tmp_path: Path
) -> None:
    flag = tmp_path / "answer"
    grace = 0.5

    async def main() -> None:
        server = raw(kill_grace=grace)
        async with server.session() as conn:
            old = await pid_of(conn)
            # Reaches the old server first and blocks there: no answer without the flag.
            innocent = asyncio.ensure_future(conn.call_tool("answer_if_exists", {"path": str(flag)}))
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), TIMEOUT)
            flag.touch()  # a retry on a fresh server now answers at once
            answered = int(json.loads(str(await asyncio.wait_for(innocent, grace + 5.0)))["pid"])
            took = time.monotonic() - started
            assert answered != old and pid_alive(answered)
            assert answered == (await conn.stats()).server_pid
            assert not pid_alive(old)
            print(
                f"[{enforcement}] the innocent call answered from the fresh server after {took:.2f} s "
                f"(timeout {TIMEOUT:g} s + kill_grace {grace:g} s)"
            )

    run(main())


@pytest.mark.timeout(30)
def test_without_auto_reconnect_the_call_beside_a_timed_out_call_fails_as_server_exited(tmp_path: Path) -> None:
    async def main() -> None:
        server = raw(kill_grace=0.2, auto_reconnect=False)
        async with server.session() as conn:
            innocent = asyncio.ensure_future(conn.call_tool("answer_if_exists", {"path": str(tmp_path / "never")}))
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), TIMEOUT)
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(innocent, 5.0)
            assert info.value.kind == "server_exited"
            assert "another call on it passed its timeout" in str(info.value)

    run(main())


@pytest.mark.timeout(30)
def test_a_timeout_partly_spent_replacing_a_dead_worker_still_kills_the_hung_server(enforcement: str) -> None:
    async def main() -> None:
        server = raw(kill_grace=0.2)
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            wait_gone(worker)
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), TIMEOUT)
            hung = conn.server_pid
            assert hung is not None and conn.worker_pid != worker
            alive, took = await alive_after([hung], 0.2 + 3.0)
            assert alive == [], "the hung server survived: its timeout was not recognised"
            stats = await conn.stats()
            assert stats.timeouts == 1
            print(
                f"[{enforcement}] hung server on the replacement worker gone {time.monotonic() - started:.2f} s "
                f"after the call began"
            )

    run(main())


@pytest.mark.timeout(60)
def test_a_fast_1gb_allocation_with_memory_mb_100_is_stopped_and_under_cgroups_never_passes_the_limit(
    enforcement: str, tmp_path: Path
) -> None:
    progress = tmp_path / "mb"
    limit = 100

    async def main() -> None:
        server = raw(auto_reconnect=False, limits=Limits(memory_mb=limit))
        async with server.session() as conn:
            err, elapsed = await limit_hit(conn, "alloc_fast", {"mb": 1024, "progress": str(progress)})
            allocated = int(progress.read_text())
            match = re.search(r"memory limit: ([\d.]+) MB .*\(memory_mb=100\)", str(err))
            assert match, str(err)
            peak = float(match.group(1))
            stats = await conn.stats()
            if enforcement == "cgroup":
                # The kernel's own peak of the tree's charge, and what the
                # server itself got to allocate: both within the limit.
                assert peak <= limit + CGROUP_MEMORY_MARGIN_MB, peak
                assert allocated <= limit, allocated
                assert "OOM killer" in str(err)
                assert stats.oom_kills == 1
            else:
                assert peak > limit and allocated < 1024, (peak, allocated)
                assert stats.oom_kills == 0
            print(
                f"[{enforcement}] memory_mb={limit}: tree peak {peak:.1f} MB ({peak - limit:+.1f} MB over), "
                f"server allocated {allocated} MB, stopped after {elapsed:.2f} s"
            )

    run(main())


@pytest.mark.timeout(60)
def test_a_fork_storm_with_max_processes_20_is_stopped_and_under_cgroups_never_passes_20(
    enforcement: str, tmp_path: Path
) -> None:
    progress = tmp_path / "forked"
    n = 300

    async def main() -> None:
        server = raw(auto_reconnect=False, limits=Limits(max_processes=20))
        async with server.session() as conn:
            old = await pid_of(conn)
            err, elapsed = await limit_hit(conn, "fork_storm", {"n": n, "progress": str(progress)})
            forked = int(progress.read_text())
            match = re.search(r"process limit: (\d+) (tasks|processes) in its tree.*\(max_processes=20\)", str(err))
            assert match, str(err)
            figure = int(match.group(1))
            if enforcement == "cgroup":
                # pids.peak, the kernel's own count, and the forks that succeeded.
                assert figure <= 20 and forked + 1 <= 20, (figure, forked)
            else:
                assert 20 < figure <= n + 1, figure
            assert (await alive_after([old], 3.0))[0] == []
            assert await pid_of(conn) != old
            assert (await conn.stats()).processes == 1  # the fresh server alone
            print(
                f"[{enforcement}] max_processes=20: largest count {max(figure, forked + 1)} "
                f"(figure {figure}, {forked} children forked), stopped after {elapsed:.2f} s"
            )

    run(main())


@pytest.mark.timeout(30)
def test_an_escaped_orphan_dies_with_its_own_generation_while_the_fresh_generation_and_its_escapee_live(
    enforcement: str,
) -> None:
    grace = 0.3

    async def main() -> None:
        before = set(leftover_cgroups())
        server = raw(kill_grace=grace)
        async with server.session() as conn:
            old = await pid_of(conn)
            old_escapee = int(json.loads(str(await conn.call_tool("escape")))["pid"])
            assert os.getsid(old_escapee) != os.getsid(old)  # it left the server's session
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), TIMEOUT)
            new = await pid_of(conn)
            new_escapee = int(json.loads(str(await conn.call_tool("escape")))["pid"])
            alive, _ = await alive_after([old, old_escapee], grace + 3.0)
            assert alive == [], alive
            assert pid_alive(new) and pid_alive(new_escapee)
            if enforcement == "cgroup":
                # The old generation's cgroups go once it is empty; the live one's stay.
                deadline = time.monotonic() + 3.0
                while len(set(leftover_cgroups()) - before) > 3 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                assert len(set(leftover_cgroups()) - before) == 3  # memory, pids, cpuacct of the live generation
        assert not pid_alive(new_escapee)
        assert set(leftover_cgroups()) - before == set()

    run(main())


@pytest.mark.timeout(30)
def test_stats_say_which_enforcement_is_in_force_and_count_cpu_of_the_whole_tree(enforcement: str) -> None:
    async def main() -> None:
        server = raw()
        async with server.session() as conn:
            await conn.call_tool("burn", {"seconds": 0.3})
            stats = await conn.stats()
            assert stats.enforcement == enforcement
            assert stats.cpu_seconds >= 0.3 and stats.processes == 1 and stats.rss_bytes > 1_000_000
            assert stats.oom_kills == 0

    run(main())


@pytest.mark.timeout(60)
@pytest.mark.timing
def test_a_server_that_keeps_killing_its_worker_opens_the_connections_restart_circuit() -> None:
    async def main() -> None:
        server = raw(restart_limit=3, restart_window=60)
        async with server.session() as conn:
            kinds = []
            for _ in range(5):
                started = time.monotonic()
                try:
                    await conn.call_tool("kill_parent")
                except MCPError as exc:
                    kinds.append(exc.kind)
            fail_fast = time.monotonic() - started
            assert kinds == ["worker_died", "worker_died", "circuit_open", "circuit_open", "circuit_open"], kinds
            assert conn.worker_restarts == 3
            assert fail_fast < 0.1, fail_fast
            print(
                f"worker-killing server: {conn.worker_restarts} worker restarts, then failing fast "
                f"in {fail_fast * 1000:.1f} ms"
            )

    run(main())


@pytest.mark.timeout(30)
def test_a_worker_killed_by_sigkill_leaves_no_escapee_when_its_generations_had_cgroups(enforcement: str) -> None:
    if enforcement != "cgroup":
        pytest.skip("without a cgroup an escapee of a SIGKILLed worker is found by nobody (documented)")

    async def main() -> None:
        before = set(leftover_cgroups())
        server = raw()
        async with server.session() as conn:
            escapee = int(json.loads(str(await conn.call_tool("escape")))["pid"])
            worker = conn.worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            wait_gone(worker)
            # The agent notices the loss and kills what the worker's cgroups hold.
            alive, took = await alive_after([escapee], 3.0)
            assert alive == [], "the escapee outlived its worker"
            assert str(await conn.call_tool("echo", {"text": "after"})) == "after"
            print(f"escapee of a SIGKILLed worker gone after {took * 1000:.0f} ms")
        deadline = time.monotonic() + 3.0
        while set(leftover_cgroups()) - before and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert set(leftover_cgroups()) - before == set()

    run(main())


@pytest.mark.timeout(30)
def test_a_cgroup_that_cannot_be_made_falls_back_to_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    from lovia_mcp_worker.containment import cgroup, cgroup_layout

    if cgroup_layout.layout() is None:
        pytest.skip("no cgroup can be made here: the watch is the only path anyway")

    def refuse(*_: object) -> object:
        raise PermissionError(13, "Permission denied")

    # In the agent's process (isolation="none"), where the patch applies; the
    # detection it disables is restored for the next test.
    monkeypatch.setattr(cgroup_layout, "_detected", None)
    monkeypatch.setattr(cgroup.GenerationCgroup, "create", classmethod(lambda cls, *a: refuse()))

    async def main() -> None:
        server = raw(isolation="none", limits=Limits(max_processes=5))
        async with server.session() as conn:
            assert str(await conn.call_tool("echo", {"text": "ok"})) == "ok"
            stats = await conn.stats()
            assert stats.enforcement == "watch" and stats.processes == 1

    run(main())
    assert cgroup_layout.layout() is None  # the watch, for the rest of this process's detection


@pytest.mark.timeout(30)
def test_two_connections_in_the_agents_process_each_get_their_own_cgroup() -> None:
    """isolation="none": every connection's generation 1 is made in one process, under distinct names."""
    from lovia_mcp_worker.containment import cgroup_layout

    if cgroup_layout.layout() is None:
        pytest.skip("no cgroup can be made here")

    async def main() -> None:
        async with raw(isolation="none", name="a").session() as a, raw(isolation="none", name="b").session() as b:
            ours = [os.path.basename(p) for p in leftover_cgroups() if f".{os.getpid()}." in os.path.basename(p)]
            print(sorted(set(ours)))
            assert [(await a.stats()).enforcement, (await b.stats()).enforcement] == ["cgroup", "cgroup"]
            assert len(set(ours)) == 2  # one name per connection, in every hierarchy
        assert cgroup_layout.layout() is not None  # nothing failed: cgroups stay on for this process

    run(main())


@pytest.mark.unit
def test_a_removed_generation_cgroup_reads_as_empty_instead_of_raising() -> None:
    # stats() reads every generation's figures from the worker's reader; one
    # whose cgroup was just removed (a teardown in another thread) must not
    # raise there, or the worker's pipe dies with it.
    from lovia_mcp_worker.containment import cgroup, cgroup_layout
    from lovia_mcp_worker.wire.confinement import Limits

    where = cgroup_layout.layout()
    if where is None:
        pytest.skip("no cgroup can be made here")
    made = cgroup.GenerationCgroup.create(where, 999, Limits(memory_mb=64))
    assert made.remove()
    assert (made.memory_bytes(), made.oom_kills(), made.members()) == (0, 0, [])
    assert made.cpu_seconds() in (None, 0.0)
