"""Soak: 100,000 small calls on one connection, and 1,000 open/close cycles, leave nothing growing.

The agent's RSS and open descriptors, and the worker's, are sampled as the
calls go on; after a warm-up their least-squares slope must stay under what
a real leak would add (100 bytes per call, one descriptor per cycle), and
the slopes are printed. The cycles do the same for the agent and the
forkserver (each cycle has a fresh worker), every tenth one under a sandbox
with a network allowlist (so the worker's proxy makes, and must remove, its
socket file). After the close no worker, server, cgroup or socket file of
the soak is left.

Many calls are in flight at once (a 2-core machine serves about 10,000 a
second that way, against 2,000 one after another), so the whole soak takes
under a minute. Marked ``long`` (``-m "not long"`` leaves it out).
"""

from __future__ import annotations

import asyncio
import gc
import glob
import os
import sys
import time
from collections.abc import Callable
from typing import Final

import psutil
import pytest
from helpers import PY, RAW_SERVER, agent_fds, alive_after, leftover_cgroups

from lovia_mcp import MCPServerStdio, Sandbox

pytestmark = [
    pytest.mark.long,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only"),
]

CALLS: Final = 100_000
# Calls in flight at once, and calls between two samples.
IN_FLIGHT: Final = 100
CALLS_PER_SAMPLE: Final = 5_000
# Samples before this are warm-up (caches, the allocator's first arenas).
WARM_CALLS: Final = 10_000
CYCLES: Final = 1_000
# Open/close cycles under way at once (the 2-core machine's sweet spot).
CYCLE_LANES: Final = 4
CYCLES_PER_SAMPLE: Final = 50
WARM_CYCLES: Final = 100
# One cycle in this many opens a sandboxed server with a network allowlist:
# its worker's proxy makes a socket file, which its close must remove.
SANDBOXED_EVERY: Final = 10

# The leaks these must catch, and the slopes allowed: half of each, well
# above the noise measured here (RSS: within +-5 bytes a call, +-0.5 kB a
# cycle; descriptors: none).
LEAK_BYTES_PER_CALL: Final = 100
MAX_BYTES_PER_CALL: Final = LEAK_BYTES_PER_CALL / 2
MAX_FDS_PER_CALL: Final = 1 / CALLS  # one descriptor over the whole soak
LEAK_FDS_PER_CYCLE: Final = 1
MAX_FDS_PER_CYCLE: Final = LEAK_FDS_PER_CYCLE / 10
# A cycle's objects (a connection, its channel, tools, a task or two) come
# to several kB; a leaked cycle would add that much.
MAX_BYTES_PER_CYCLE: Final = 2048
# After the close, the processes of the soak are gone within this.
GONE_WITHIN: Final = 10.0

# The proxy's socket folders (worker/lovia_mcp_worker/sandbox/egress/netroute.py).
PROXY_FOLDERS: Final = "/tmp/lovia-mcp-net-*"


@pytest.fixture(autouse=True)
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak measures lovia-mcp's memory, untraced.

    In a full run another test (test_tracing) has installed an OpenTelemetry
    SDK whose in-memory exporter keeps every span of the process: traced, a
    100,000-call soak would measure that exporter (~3 kB a span), not a leak.
    """
    from lovia_mcp import tracing

    monkeypatch.setattr(tracing, "enabled", lambda: False)


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


class Samples:
    """RSS and open descriptors of a process, sampled against a count (calls or cycles)."""

    def __init__(self, name: str, pid: Callable[[], int | None], fds: Callable[[], int] | None = None) -> None:
        self.name = name
        self.pid = pid
        self._fds = fds
        self.at: list[float] = []
        self.rss: list[float] = []
        self.fds: list[float] = []

    def take(self, count: int) -> None:
        pid = self.pid()
        if pid is None:
            return
        p = psutil.Process(pid)
        self.at.append(count)
        self.rss.append(p.memory_info().rss)
        self.fds.append(p.num_fds() if self._fds is None else self._fds())

    def slopes(self, warm: int) -> tuple[float, float]:
        kept = [i for i, x in enumerate(self.at) if x >= warm]
        xs = [self.at[i] for i in kept]
        return slope(xs, [self.rss[i] for i in kept]), slope(xs, [self.fds[i] for i in kept])


def live_proxy_sockets() -> set[str]:
    """Paths of Unix sockets some live process has bound (/proc/net/unix)."""
    with open("/proc/net/unix") as f:
        next(f)
        return {parts[7] for line in f if len(parts := line.split()) >= 8}


def left_proxy_folders(before: set[str]) -> list[str]:
    """Proxy folders made since ``before`` that are still there and that no live socket is bound in.

    Other sessions on a shared machine may be running sandboxes of their own:
    their folders have a live listener; a leaked one has none.
    """
    live = live_proxy_sockets()
    return [d for d in set(glob.glob(PROXY_FOLDERS)) - before if not any(s.startswith(d + "/") for s in live)]


def server(sandbox: Sandbox | None = None) -> MCPServerStdio:
    # -S: the raw server needs only the standard library; skipping site
    # saves a third of its start, and the cycles are mostly starts.
    return MCPServerStdio(command=PY, args=["-S", RAW_SERVER], name="raw", sandbox=sandbox)


def sandbox_works() -> bool:
    from lovia_mcp_worker.sandbox import registry

    try:
        registry.pick(Sandbox(network=["example.com"]))
    except Exception:  # noqa: BLE001 - neither backend here: the sandboxed cycles are left out
        return False
    return True


@pytest.mark.timeout(300)
def test_100000_calls_on_one_connection_leave_agent_and_worker_memory_and_descriptors_flat() -> None:
    agent = Samples("agent", os.getpid)

    async def main() -> tuple[Samples, float, list[int]]:
        async with server().session() as conn:
            worker = Samples("worker", lambda: conn.worker_pid)
            pids = {conn.worker_pid, conn.server_pid}
            done = 0
            started = time.monotonic()
            while done < CALLS:

                async def lane(lane_id: int) -> None:
                    for i in range(CALLS_PER_SAMPLE // IN_FLIGHT):
                        token = f"{done + lane_id}-{i}"
                        assert str(await conn.call_tool("echo", {"text": token})) == token

                await asyncio.gather(*(lane(n) for n in range(IN_FLIGHT)))
                done += CALLS_PER_SAMPLE
                gc.collect()
                agent.take(done)
                worker.take(done)
            rate = CALLS / (time.monotonic() - started)
            stats = await conn.stats()
            assert stats.calls == CALLS and stats.restarts == 0, stats
            assert conn.worker_pid in pids and conn.server_pid in pids  # one worker, one server throughout
        left, _ = await alive_after([p for p in pids if p is not None], GONE_WITHIN)
        return worker, rate, left

    worker, rate, left = asyncio.run(main())
    print(f"{CALLS:,} calls, {IN_FLIGHT} in flight: {rate:,.0f} calls/s")
    for s in (agent, worker):
        rss, fds = s.slopes(WARM_CALLS)
        print(
            f"{s.name}: RSS {rss:+.2f} bytes/call ({s.rss[0] / 2**20:.1f} -> {s.rss[-1] / 2**20:.1f} MB), "
            f"descriptors {fds * CALLS:+.2f} per {CALLS:,} calls ({s.fds[0]:.0f} -> {s.fds[-1]:.0f})"
        )
        assert rss < MAX_BYTES_PER_CALL, (s.name, rss)
        assert fds < MAX_FDS_PER_CALL, (s.name, fds, s.fds)
    assert left == [], left


@pytest.mark.timeout(300)
def test_1000_open_close_cycles_leave_agent_and_forkserver_flat_and_no_process_cgroup_or_socket_file() -> None:
    from lovia_mcp.client.forkserver import process_forkserver

    boxed = sandbox_works()
    cgroups_before = set(leftover_cgroups())
    proxies_before = set(glob.glob(PROXY_FOLDERS))
    # The agent's descriptors less the forkserver's idle workers' sockets: a
    # pool shared by all connections whose size follows bursts of opens (two
    # to five). The forkserver's own count includes its ends of them.
    agent = Samples("agent", os.getpid, agent_fds)
    forkserver = Samples("forkserver", lambda: process_forkserver.pid)
    plain = server()
    sandboxed = server(Sandbox(network=["example.com"])) if boxed else plain

    async def main() -> tuple[list[int], int]:
        pids: set[int] = set()
        proxied = 0
        # Warm: the forkserver runs, the sandbox path is loaded.
        for config in (plain, sandboxed):
            async with config.session():
                pass
        done = 0
        started = time.monotonic()
        while done < CYCLES:

            async def lane(lane_id: int) -> None:
                nonlocal proxied
                for i in range(lane_id, CYCLES_PER_SAMPLE, CYCLE_LANES):
                    with_proxy = (done + i) % SANDBOXED_EVERY == 0
                    conn = await (sandboxed if with_proxy else plain).open()
                    try:
                        pids.update(p for p in (conn.worker_pid, conn.server_pid) if p is not None)
                        proxied += with_proxy and boxed
                    finally:
                        await conn.close()

            await asyncio.gather(*(lane(n) for n in range(CYCLE_LANES)))
            done += CYCLES_PER_SAMPLE
            gc.collect()
            agent.take(done)
            forkserver.take(done)
        print(
            f"{CYCLES:,} open/close cycles, {CYCLE_LANES} at once: "
            f"{(time.monotonic() - started) / CYCLES * 1000:.1f} ms a cycle"
        )
        left, _ = await alive_after(sorted(pids), GONE_WITHIN)
        return left, proxied

    left, proxied = asyncio.run(main())
    for s in (agent, forkserver):
        rss, fds = s.slopes(WARM_CYCLES)
        print(
            f"{s.name}: RSS {rss:+.0f} bytes/cycle ({s.rss[0] / 2**20:.1f} -> {s.rss[-1] / 2**20:.1f} MB), "
            f"descriptors {fds:+.4f} per cycle ({s.fds[0]:.0f} -> {s.fds[-1]:.0f})"
        )
        assert rss < MAX_BYTES_PER_CYCLE, (s.name, rss)
        assert fds < MAX_FDS_PER_CYCLE, (s.name, fds, s.fds)
    assert left == [], f"processes of the cycles still alive: {left}"
    assert set(leftover_cgroups()) - cgroups_before == set()
    if boxed:
        assert proxied == CYCLES // SANDBOXED_EVERY, proxied
        assert left_proxy_folders(proxies_before) == []
    print(f"{proxied} cycles had a network proxy; no process, cgroup or socket file left")


__all__: list[str] = []
