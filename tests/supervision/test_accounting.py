"""Per-call accounting: what the server's tree used during each call, on ``MCPToolResult.usage`` and in ``stats()``.

Real servers (``raw_server.py``'s ``burn``, ``alloc`` and ``spike``), under
both containment paths (the ``enforcement`` fixture: a cgroup per
generation, and the watch). The figures are the kernel's, so the bounds
are the work the tool did, with room for a loaded machine below and above.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import RAW_SERVER, ROOT, nobody_python, raw, run
from lovia_mcp_worker.containment import usage as usage_mod
from lovia_mcp_worker.containment.cgroup import GenerationCgroup
from lovia_mcp_worker.containment.cgroup_layout import Layout

from lovia_mcp import CallUsage, MCPToolResult

pytestmark = pytest.mark.linux_only

MB = 1 << 20
NOBODY = 65534
# Bound on the ordinary user's agent: a forkserver, a worker, a raw server
# and two calls (about a second here).
AGENT_WAIT = 60.0
# The work the tools are asked for; the figures must show most of it.
BURN = 0.3
HOLD_MB = 100


def usage_of(result: MCPToolResult) -> CallUsage:
    assert result.usage is not None, "a stdio server's call carries its usage"
    print(result.usage)
    return result.usage


def test_a_call_that_burns_cpu_reports_its_cpu_time_and_one_that_holds_memory_its_peak(enforcement: str) -> None:
    async def main() -> dict[str, CallUsage]:
        async with raw("process").session() as conn:
            return {
                "echo": usage_of(await conn.call_tool("echo", {"text": "x"})),
                "burn": usage_of(await conn.call_tool("burn", {"seconds": BURN})),
                "alloc": usage_of(await conn.call_tool("alloc", {"mb": HOLD_MB})),
            }

    got = run(main())
    assert got["burn"].cpu_time is not None and 0.2 <= got["burn"].cpu_time < 5.0
    # An echo takes microseconds of the server's CPU (the watch counts in 10 ms ticks).
    assert got["echo"].cpu_time is not None and got["echo"].cpu_time < 0.1
    alloc = got["alloc"]
    assert alloc.memory_peak is not None and alloc.memory_peak >= HOLD_MB * MB
    assert alloc.memory_source == "kernel"
    assert not any(u.shared for u in got.values())
    assert all(u.egress == [] for u in got.values())  # no sandbox, no proxy


def test_a_memory_spike_freed_before_the_answer_is_the_calls_peak_and_not_the_next_calls(enforcement: str) -> None:
    """The kernel's peak restarts with each call: a later call does not inherit an earlier one's spike.

    Without the restart (the cgroup's or the process's lifetime peak), a
    later call reports the spike's 100 MB: the echo under a cgroup, the longer
    call on the watch (an echo there takes the resident memory at its two
    ends). This test fails there.
    """

    async def main() -> tuple[CallUsage, CallUsage, CallUsage]:
        async with raw("process").session() as conn:
            spike = usage_of(await conn.call_tool("spike", {"mb": HOLD_MB}))
            after = usage_of(await conn.call_tool("echo", {"text": "x"}))
            # A window this long reads the kernel's peak on the watch too (an echo's, under a
            # millisecond, takes the resident memory at its two ends instead).
            longer = usage_of(await conn.call_tool("burn", {"seconds": 0.05}))
            return spike, after, longer

    spike, after, longer = run(main())
    print(
        f"peaks: spike {spike.memory_peak}, echo {after.memory_peak} ({after.memory_source}), "
        f"burn {longer.memory_peak} ({longer.memory_source})"
    )
    assert spike.memory_peak is not None and spike.memory_peak >= HOLD_MB * MB
    assert spike.memory_source == "kernel"
    assert after.memory_peak is not None and after.memory_peak < HOLD_MB * MB / 2
    assert longer.memory_source == "kernel"
    assert longer.memory_peak is not None and longer.memory_peak < HOLD_MB * MB / 2


def test_overlapping_calls_are_marked_shared_and_stats_count_each_busy_spell_once(enforcement: str) -> None:
    async def main() -> tuple[list[CallUsage], CallUsage, Any]:
        import asyncio

        async with raw("process").session() as conn:
            # raw_server.py serves one call at a time: the three windows
            # overlap while the server burns 0.1 s for each in turn.
            results = await asyncio.gather(*(conn.call_tool("burn", {"seconds": 0.1}) for _ in range(3)))
            alone = usage_of(await conn.call_tool("echo", {"text": "x"}))
            return [usage_of(r) for r in results], alone, await conn.stats()

    shared, alone, stats = run(main())
    assert all(u.shared for u in shared)
    assert not alone.shared
    per_call = sum(u.cpu_time or 0.0 for u in shared)
    print(f"per-call CPU summed {per_call:.3f} s; stats {stats.call_cpu_seconds:.3f} s")
    # The spell's CPU is the tree's over the union of the windows: about
    # 0.3 s, where the overlapping figures add up to about 0.6 s.
    assert 0.2 <= stats.call_cpu_seconds < per_call - 0.1
    assert stats.shared_calls == 3
    assert stats.call_memory_peak_bytes > 0


def test_where_the_kernel_cannot_restart_its_peak_a_spike_held_past_the_sampling_interval_is_sampled(
    monkeypatch: pytest.MonkeyPatch, enforcement: str
) -> None:
    """v2 before Linux 6.12, or a ``clear_refs`` the worker may not write: the readings are sampled instead.

    In the agent's process (``isolation="none"``), so the gauges can be told
    the kernel refuses the restart. The spike is held for many sampling
    intervals (50 ms) and freed before the answer, so only a sample taken
    during the call sees it.
    """
    monkeypatch.setattr(usage_mod.CgroupGauge, "reset_peak", lambda self: False)
    monkeypatch.setattr(usage_mod.ProcGauge, "reset_peak", lambda self: False)

    async def main() -> CallUsage:
        async with raw("none").session() as conn:
            return usage_of(await conn.call_tool("spike", {"mb": HOLD_MB, "hold": 0.5}))

    got = run(main())
    assert got.memory_source == "sampled"
    assert got.memory_peak is not None and got.memory_peak >= HOLD_MB * MB


def test_a_server_without_a_local_tree_has_no_usage() -> None:
    """The figures are the local tree's: an HTTP server has none (the usage is absent, not zero)."""
    from helpers import SERVERS, serving

    from lovia_mcp import MCPServerStreamableHTTP

    async def main(url: str) -> MCPToolResult:
        async with MCPServerStreamableHTTP(url=url, name="h").session() as conn:
            return await conn.call_tool("echo", {"text": "x"})

    with serving(str(SERVERS / "meta_sdk_server.py"), "--http") as url:
        result = run(main(url))
    assert result.usage is None


NOBODY_AGENT = textwrap.dedent("""
    import asyncio, json, sys
    from lovia_mcp import MCPServerStdio

    async def main():
        server = MCPServerStdio(command=sys.executable, args=[sys.argv[1]], name="raw")
        async with server.session() as conn:
            spike = (await conn.call_tool("spike", {"mb": 100})).usage
            after = (await conn.call_tool("echo", {"text": "x"})).usage
            stats = await conn.stats()
        print(json.dumps({"spike": [spike.memory_peak, spike.memory_source], "after": after.memory_peak,
                          "enforcement": stats.enforcement}))

    asyncio.run(main())
""")


def test_as_an_ordinary_user_the_watch_reads_the_kernels_peak_of_each_call() -> None:
    """Not root, no cgroup: the watch restarts each process's peak (``clear_refs``), which its owner may write."""
    python, site = nobody_python()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "worker"), str(site)]),
    }
    out = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c", NOBODY_AGENT, RAW_SERVER],
        capture_output=True,
        text=True,
        timeout=AGENT_WAIT,
        env=env,
        cwd="/tmp",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout)
    print(seen)
    assert seen["enforcement"] == "watch"
    assert seen["spike"][0] >= HOLD_MB * MB and seen["spike"][1] == "kernel"
    assert seen["after"] < HOLD_MB * MB / 2


@pytest.mark.unit
@pytest.mark.parametrize("version", [1, 2])
def test_a_cgroup_gauge_reads_its_version_s_files_and_restarts_the_peak_by_writing_to_it(
    tmp_path: Path, version: int
) -> None:
    """The files as each cgroup version names them (a cgroup v2 with memory delegated is not on every test machine).

    The kernel's side (a write restarting the peak) is what the tests above
    show on a real cgroup; here, that the v2 files are the ones read and
    written, in the form the kernel takes: ``usage_usec`` from ``cpu.stat``,
    any text written to ``memory.peak`` (v2), ``0`` to ``memory.max_usage_in_bytes`` (v1).
    """
    if version == 2:
        (tmp_path / "cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n")
        (tmp_path / "memory.current").write_text("4096\n")
        peak = tmp_path / "memory.peak"
        where = Layout(version=2, unified=str(tmp_path))
        made = GenerationCgroup(where, {"unified": str(tmp_path)})
        cpu = 1.25
    else:
        (tmp_path / "cpuacct.usage").write_text("2500000000\n")
        (tmp_path / "memory.usage_in_bytes").write_text("4096\n")
        peak = tmp_path / "memory.max_usage_in_bytes"
        where = Layout(version=1, memory=str(tmp_path), pids=str(tmp_path), cpuacct=str(tmp_path))
        made = GenerationCgroup(where, {"memory": str(tmp_path), "pids": str(tmp_path), "cpuacct": str(tmp_path)})
        cpu = 2.5
    peak.write_text("104857600\n")
    gauge = usage_mod.CgroupGauge(made)
    try:
        assert gauge.cpu() == cpu
        assert gauge.peak() == 100 * MB
        assert gauge.current() == 4096
        assert gauge.reset_peak()
    finally:
        gauge.close()
    written = peak.read_bytes()
    assert written.startswith(b"reset\n" if version == 2 else b"0\n"), written
