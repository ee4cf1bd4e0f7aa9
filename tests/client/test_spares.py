"""Warm spares for per-run servers (``spares=N``): a run takes an opened server, never a used one.

The raw server's ``pid`` tool answers with the server's own pid, so "a
distinct server" is the pid of the process that answered, and "the spare"
is the pid the pool's connection had before it was handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from helpers import (
    PY,
    RAW_SERVER,
    Model,
    alive_after,
    alive_after_sync,
    drive,
    end_process,
    leftover_cgroups,
    outputs,
    pid_alive,
    pid_of,
    raw,
    run,
)
from lovia import Agent, Runner
from lovia.testing import call, text

from lovia_mcp import MCP, MCPConnection, MCPError, MCPServerStdio, UserError, close_spares, warm_spares
from lovia_mcp.config.server import MAX_SPARES
from lovia_mcp.opening import spares

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process isolation is tested on Linux")

# A spare's worker and server end this soon after its close is due (idle
# expiry, the loop's end): a close is bounded by the worker's tree kill,
# milliseconds for the raw server; the margin is for a loaded 2-core box.
GONE_WAIT = 5.0
# The agent process reports its spare's pids: seconds when the forkserver is cold.
REPORT_WAIT = 15.0
# docs/failures.md: after an agent SIGKILL the worker kills the tree within about a second.
AGENT_DEATH_CLEANUP = 2.0


def ready_spares() -> list[MCPConnection]:
    """The spares ready on the running loop (the pool's own view)."""
    pool = spares._pools.get(asyncio.get_running_loop())
    return [] if pool is None else [conn for e in pool.entries.values() for conn, _ in e.ready]


class _Seen(logging.Handler):
    """Counts the ``lovia_mcp`` records (worker logs included) that contain ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.count = 0
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.count += 1
            self.changed.set()

    async def reach(self, n: int) -> None:
        while self.count < n:
            self.changed.clear()
            await self.changed.wait()


@contextlib.asynccontextmanager
async def spares_closed() -> AsyncIterator[None]:
    """Every spare in the process is closed when the block ends, however it ends."""
    try:
        yield
    finally:
        await close_spares()


@contextlib.asynccontextmanager
async def warmed(*servers: MCPServerStdio) -> AsyncIterator[list[MCPConnection]]:
    """The spares ready once ``servers`` are warmed; every spare closed when the block ends."""
    async with spares_closed():
        await warm_spares(*servers)
        yield ready_spares()


@contextlib.asynccontextmanager
async def opened(server: MCPServerStdio) -> AsyncIterator[MCPConnection]:
    conn = await server.open()
    try:
        yield conn
    finally:
        await conn.close()


@contextlib.contextmanager
def seen(text: str) -> Iterator[_Seen]:
    log = logging.getLogger("lovia_mcp")
    handler, level = _Seen(text), log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


# -- config ------------------------------------------------------------------ #
@pytest.mark.parametrize(
    "options",
    [
        {"spares": -1},
        {"spares": True},
        {"spares": 1.5},
        {"spares": MAX_SPARES + 1},
        {"spare_idle": 0},
        {"spare_idle": -3.0},
        {"spare_idle": "60"},
    ],
)
@pytest.mark.unit
def test_bad_spares_options_are_refused_with_a_hint(options: dict[str, Any]) -> None:
    with pytest.raises(UserError) as info:
        raw(**options)
    assert info.value.hint, info.value


@pytest.mark.unit
def test_warm_spares_refuses_a_config_without_spares_or_without_process_isolation() -> None:
    async def main() -> None:
        with pytest.raises(UserError, match="spares=0"):
            await warm_spares(raw())
        with pytest.raises(UserError, match="isolation"):
            await warm_spares(raw(spares=1, isolation="none"))

    run(main())


# -- per-run freshness ------------------------------------------------------- #
def test_a_spare_is_served_once_and_each_open_gets_a_server_no_one_used() -> None:
    async def main() -> None:
        server = raw(spares=1)
        seen: list[int] = []
        for _ in range(4):
            assert await warm_spares(server) == 1
            (spare,) = ready_spares()
            async with opened(server) as conn:
                assert conn is spare  # the spare was taken...
                assert ready_spares() == []  # ...and is no longer in the pool
                seen.append(await pid_of(conn))
                assert seen[-1] == spare.server_pid
            alive, _ = await alive_after([seen[-1]], GONE_WAIT)
            assert alive == [], "a per-run connection's server outlived its close"
        assert len(set(seen)) == len(seen), seen
        await close_spares()

    run(main())


def test_per_run_agent_runs_take_the_spare_and_never_share_a_server() -> None:
    async def main() -> None:
        plugin = MCP(raw(spares=1))
        pids: list[int] = []
        spare_pids: list[int | None] = []
        try:
            for _ in range(3):
                await warm_spares(*plugin.servers)  # type: ignore[arg-type]
                spare_pids.append(ready_spares()[0].server_pid)
                result, _ = await drive(plugin, call("raw__pid", {}))
                pids.append(json.loads(outputs(result)[0])["pid"])
        finally:
            await plugin.aclose()
        assert pids == spare_pids, (pids, spare_pids)
        assert len(set(pids)) == 3, pids
        assert plugin.connections() == []

    run(main())


def starting_spares() -> int:
    pool = spares._pools.get(asyncio.get_running_loop())
    return 0 if pool is None else sum(len(e.starting) for e in pool.entries.values())


async def spare_ready() -> None:
    """Until a spare is ready on this loop (woken by the pool's own change event)."""
    pool = spares._pools[asyncio.get_running_loop()]
    while not ready_spares():
        pool.changed.clear()
        await pool.changed.wait()


def test_an_open_with_no_spare_ready_opens_its_own_then_starts_one_for_the_next_run() -> None:
    async def main() -> None:
        server = raw(spares=1)
        async with spares_closed(), opened(server) as conn:
            # Started once the open is done (beside it, the two would compete for the CPU).
            assert starting_spares() == 0 and ready_spares() == []
            await asyncio.wait_for(spare_ready(), GONE_WAIT)
            assert ready_spares()[0].server_pid != conn.server_pid

    run(main())


def test_a_config_that_fails_to_open_starts_no_spare() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[RAW_SERVER, "--exit-on-start", "3"], spares=1)
        with pytest.raises(Exception, match="code 3"):
            await server.open()
        assert starting_spares() == 0 and ready_spares() == []
        with pytest.raises(Exception, match="code 3"):
            await warm_spares(server)  # its spare's open error, raised

    run(main())


def test_a_spare_whose_server_died_while_waiting_is_replaced_not_handed_out() -> None:
    async def main() -> None:
        server = raw(spares=1)
        with seen("ended") as ended:
            async with warmed(server) as (spare,):
                dead = spare.server_pid
                assert dead is not None
                os.kill(dead, signal.SIGKILL)
                await asyncio.wait_for(ended.reach(1), GONE_WAIT)  # the worker saw it
                async with opened(server) as conn:
                    assert conn is not spare
                    assert await pid_of(conn) != dead
                alive, _ = await alive_after([spare.worker_pid or 0], GONE_WAIT)
                assert alive == [], "the dead spare's worker was not closed"

    run(main())


def test_a_spare_whose_servers_end_is_written_but_not_yet_read_is_not_handed_out() -> None:
    # The take trusts what the agent has read of the worker only when
    # nothing is left unread: here the worker's Ended waits in the pipe (the
    # loop is held from the kill to the take), and the take must not hand
    # the spare out on its stale state.
    async def main() -> None:
        server = raw(spares=1)
        async with warmed(server) as (spare,):
            channel, dead = spare.core.channel, spare.server_pid
            assert channel is not None and dead is not None
            os.kill(dead, signal.SIGKILL)
            assert channel.unread(wait=GONE_WAIT), "the worker wrote nothing after its server was killed"
            assert spare.server_pid == dead  # not read yet: the agent still knows the server as alive
            conn = await spares.take(server, close_after_run=True)
            assert conn is not spare
            if conn is not None:
                await conn.close()

    run(main())


def test_a_spare_whose_worker_died_while_waiting_is_replaced_not_handed_out() -> None:
    async def main() -> None:
        server = raw(spares=1)
        async with warmed(server) as (spare,):
            assert spare.worker_pid is not None and spare.core.channel is not None
            os.kill(spare.worker_pid, signal.SIGKILL)
            await asyncio.wait_for(spare.core.channel.wait_lost(), GONE_WAIT)
            async with opened(server) as conn:
                assert conn is not spare
                assert await pid_of(conn) != spare.server_pid

    run(main())


def test_many_runs_starting_at_once_get_distinct_servers_the_spares_included() -> None:
    async def main() -> None:
        server = raw(spares=2)
        async with spares_closed():
            assert await warm_spares(server) == 2
            spare_pids = {c.server_pid for c in ready_spares()}
            conns = await asyncio.gather(*(server.open() for _ in range(6)))
            try:
                pids = await asyncio.gather(*(pid_of(c) for c in conns))
            finally:
                await asyncio.gather(*(c.close() for c in conns))
            print(f"6 concurrent opens with 2 spares: server pids {pids}, spares were {sorted(spare_pids)}")
            assert len(set(pids)) == 6, pids
            assert spare_pids <= set(pids), (spare_pids, pids)
            assert len({id(c) for c in conns}) == 6

    run(main())


def test_a_spare_taken_by_an_equal_config_of_another_plugin_gets_that_configs_options() -> None:
    async def main() -> None:
        first = raw(spares=1)
        other = raw(spares=1, include_tools=["echo"], timeout=7.0)
        async with warmed(first) as (spare,):
            conn = await MCP(other)._open_server(other)
            try:
                assert conn is spare
                assert [t.name for t in conn.tools()] == ["raw__echo"]
                assert conn.server is other and conn.tools()[0].timeout == 7.0
            finally:
                await conn.close()

    run(main())


def test_a_config_with_other_args_does_not_take_the_spare() -> None:
    async def main() -> None:
        server = raw(spares=1)
        other = MCPServerStdio(command=PY, args=[RAW_SERVER, "--many", "2"], name="raw", spares=1)
        async with warmed(server) as (spare,):
            async with opened(other) as conn:
                assert conn is not spare and spare in ready_spares()

    run(main())


def test_the_number_of_spares_in_the_process_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spares, "MAX_SPARES", 2)

    async def main() -> None:
        configs = [MCPServerStdio(command=PY, args=[RAW_SERVER, "--many", str(i)], spares=1) for i in range(4)]
        async with spares_closed():
            assert await warm_spares(*configs) == 2
            assert len(ready_spares()) == 2

    run(main())


# -- lifetime ---------------------------------------------------------------- #
def test_an_idle_spare_is_closed_after_spare_idle_seconds() -> None:
    idle = 0.5

    async def main() -> None:
        server = raw(spares=1, spare_idle=idle)
        await warm_spares(server)
        (spare,) = ready_spares()
        pids = [spare.worker_pid or 0, spare.server_pid or 0]
        alive, took = await alive_after(pids, idle + GONE_WAIT)
        print(f"spare_idle={idle}: spare gone {took:.2f} s after it was ready")
        assert alive == [], alive
        assert ready_spares() == []

    run(main())


def test_closing_the_plugin_closes_its_spares() -> None:
    async def main() -> None:
        plugin = MCP(raw(spares=1))
        await warm_spares(*plugin.servers)  # type: ignore[arg-type]
        (spare,) = ready_spares()
        pids = [spare.worker_pid or 0, spare.server_pid or 0]
        await plugin.aclose()
        assert ready_spares() == []
        assert [p for p in pids if pid_alive(p)] == []

    run(main())


def test_a_spare_made_on_one_event_loop_is_never_handed_to_another_and_goes_with_its_loop() -> None:
    server = raw(spares=1)

    async def first() -> list[int]:
        await warm_spares(server)
        (spare,) = ready_spares()
        return [spare.worker_pid or 0, spare.server_pid or 0]

    left = run(first())  # asyncio.run ends the loop: its spares must go with it
    alive, _ = alive_after_sync(left, GONE_WAIT)
    assert alive == [], "a spare outlived its event loop"

    async def second() -> int:
        conn = await server.open()
        try:
            return await pid_of(conn)
        finally:
            await conn.close()
            await close_spares()

    assert run(second()) not in left


def test_a_spare_ready_on_another_running_loop_is_not_handed_to_this_one() -> None:
    import threading

    server = raw(spares=1)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, name="other-loop", daemon=True)
    thread.start()
    try:

        async def warm() -> int | None:
            await warm_spares(server)
            return ready_spares()[0].server_pid

        theirs = asyncio.run_coroutine_threadsafe(warm(), other).result(REPORT_WAIT)

        async def here() -> int:
            conn = await server.open()
            try:
                return await pid_of(conn)
            finally:
                await conn.close()
                await close_spares()

        assert run(here()) != theirs
        assert asyncio.run_coroutine_threadsafe(close_spares(), other).result(GONE_WAIT) is None
        assert theirs is not None and not pid_alive(theirs)
    finally:

        async def end() -> None:  # what asyncio.run does at a loop's end
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end(), other).result(GONE_WAIT)
        other.call_soon_threadsafe(other.stop)
        thread.join(GONE_WAIT)
        other.close()


AGENT_CODE = """
import asyncio, json, sys
from lovia_mcp import MCPServerStdio, warm_spares
from lovia_mcp.opening import spares

async def main():
    server = MCPServerStdio(command=sys.executable, args=[sys.argv[1]], spares=2)
    await warm_spares(server)
    pool = spares._pools[asyncio.get_running_loop()]
    conns = [c for e in pool.entries.values() for c, _ in e.ready]
    print(json.dumps([p for c in conns for p in (c.worker_pid, c.server_pid)]), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["SIGKILL", "exit"])
def test_an_agent_killed_or_exiting_with_spares_ready_leaves_no_process(how: str) -> None:
    agent = subprocess.Popen(
        [PY, "-c", AGENT_CODE, RAW_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert agent.stdout is not None and agent.stdin is not None
        ready, _, _ = select.select([agent.stdout], [], [], REPORT_WAIT)
        assert ready, "the agent process did not report its spares"
        line = agent.stdout.readline()
        assert line, agent.stderr.read().decode() if agent.stderr else ""
        pids = json.loads(line)
        assert len(pids) == 4 and all(pid_alive(p) for p in pids), pids
        started = time.monotonic()
        if how == "SIGKILL":
            os.kill(agent.pid, signal.SIGKILL)
        else:
            agent.stdin.close()  # main() returns; asyncio.run ends the loop
        agent.wait(GONE_WAIT)
        alive, took = alive_after_sync(pids, AGENT_DEATH_CLEANUP)
        print(f"agent {how}: 2 spares (workers and servers) gone {time.monotonic() - started:.3f} s after")
        assert alive == [], f"still alive {took:.2f} s after the agent's {how}: {alive}"
        if how == "exit":
            assert agent.returncode == 0, agent.stderr.read().decode() if agent.stderr else ""
    finally:
        end_process(agent)


# -- persistent connections: a standby server in the worker ------------------- #
def server_pids(worker: int) -> set[int]:
    """The raw servers running under a worker (its current and standby generations)."""
    import psutil

    return {
        p.pid
        for p in psutil.Process(worker).children(recursive=True)
        if any(a.endswith("raw_server.py") for a in p.cmdline())
    }


async def standby_up(conn: MCPConnection, ready: _Seen, n: int, current: int) -> int:
    """The pid of the ``n``-th standby once the worker logged it ready: the server under it that is not ``current``."""
    await asyncio.wait_for(ready.reach(n), GONE_WAIT)
    assert conn.worker_pid is not None
    (pid,) = server_pids(conn.worker_pid) - {current}
    return pid


def test_a_persistent_connection_with_spares_restarts_each_crash_on_the_standby_and_keeps_a_new_one(
    enforcement: str,
) -> None:
    async def main() -> None:
        with seen("standby server") as ready:
            async with raw(spares=1, auto_reconnect=False).session() as conn:
                current = await pid_of(conn)
                assert conn.worker_pid is not None
                for n in (1, 2):
                    standby = await standby_up(conn, ready, n, current)
                    with pytest.raises(MCPError, match="code 3"):
                        await conn.call_tool("exit", {"code": 3})
                    current = await pid_of(conn)
                    assert current == standby, "the restart did not take the standby"
                    assert (await conn.stats()).restarts == n
                await standby_up(conn, ready, 3, current)
                kept = server_pids(conn.worker_pid)
                assert len(kept) == 2
            alive, _ = await alive_after(list(kept), GONE_WAIT)
            assert alive == [], "a standby outlived its connection"
            assert leftover_cgroups() == []

    run(main())


def test_a_call_whose_server_crashed_is_retried_on_the_standby() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[RAW_SERVER, "--crash-after", "2"], name="raw", spares=1)
        with seen("standby server") as ready:
            async with server.session() as conn:
                first = await pid_of(conn)  # call 1
                standby = await standby_up(conn, ready, 1, first)
                started = time.monotonic()
                assert await pid_of(conn) == standby  # call 2 crashes the server; the retry is the standby's call 1
                print(f"crash and retry on the standby: {1e3 * (time.monotonic() - started):.1f} ms")

    run(main())


def test_after_a_timeout_kill_the_next_call_is_served_by_the_standby() -> None:
    timeout = 0.3

    async def main() -> None:
        with seen("standby server") as ready:
            async with raw(spares=1).session() as conn:
                first = await pid_of(conn)
                standby = await standby_up(conn, ready, 1, first)
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(conn.call_tool("hang", timeout=timeout), timeout)
                started = time.monotonic()
                assert await pid_of(conn) == standby
                print(f"first call after the timeout, on the standby: {1e3 * (time.monotonic() - started):.1f} ms")

    run(main())


def test_a_persistent_connection_without_spares_keeps_no_standby() -> None:
    async def main() -> None:
        async with raw().session() as conn:
            first = await pid_of(conn)
            assert conn.worker_pid is not None and server_pids(conn.worker_pid) == {first}

    run(main())


def test_a_persistent_session_does_not_take_a_pooled_spare() -> None:
    async def main() -> None:
        server = raw(spares=1)
        async with warmed(server) as (spare,):
            async with server.session() as conn:
                assert conn is not spare and ready_spares() == [spare]

    run(main())


def test_a_restart_on_the_standby_hands_the_agent_the_standbys_own_tool_list(tmp_path: Any) -> None:
    # The standby was started before the tool was added: once promoted, its
    # listing (without "fresh") is the connection's, as after a cold restart.
    from helpers import SERVERS

    server = MCPServerStdio(command=PY, args=[str(SERVERS / "annotated_server.py")], spares=1)

    async def main() -> tuple[set[str], set[str], str]:
        with seen("standby server") as ready:
            async with server.session() as conn:
                await asyncio.wait_for(ready.reach(1), GONE_WAIT)
                await conn.call_tool("add_tool", {"text": "fresh"})
                with_fresh = {t.name for t in conn.tools()}
                answer = await conn.call_tool("plain", {"crash_once": str(tmp_path / "crashed")})
                assert (await conn.stats()).restarts == 1
                return with_fresh, {t.name for t in conn.tools()}, str(answer)

    with_fresh, after, answer = run(main())
    assert "fresh" in with_fresh
    assert after == with_fresh - {"fresh"}
    assert answer == "plain: ok"


def test_a_spare_taken_hands_a_custom_renderer_the_sdk_models_as_a_fresh_open_does() -> None:
    seen_types: list[str] = []

    def renderer(result: Any, ctx: Any) -> str:
        seen_types.extend(type(block).__module__ for block in result.content)
        return "rendered"

    async def main() -> None:
        first = raw(spares=1)
        taker = raw(spares=1, result_renderer=renderer)
        async with warmed(first) as (spare,):
            async with opened(taker) as conn:
                assert conn is spare
                (tool,) = [t for t in conn.tools() if t.name == "raw__echo"]
                result = await conn.call_tool("echo", {"text": "hi"})
                assert tool.result_renderer is not None
                assert tool.result_renderer(result, None) == "rendered"

    run(main())
    assert seen_types and all(m.startswith("mcp") for m in seen_types), seen_types


def test_a_refill_scheduled_before_the_pool_closed_starts_nothing() -> None:
    # A take schedules its replacement REFILL_DELAY later; close_spares() or
    # MCP.aclose() in between must win. The scheduled refill is run by hand
    # here, at once, instead of waiting for its timer.
    async def main() -> None:
        server = raw(spares=1)
        await warm_spares(server)
        pool = spares._pool()
        ((key, entry),) = pool.entries.items()
        await MCP(server).aclose()
        pool.refill(key, entry)
        assert entry.starting == set() and pool.count() == 0

    run(main())


# Bound on holding a run in its second turn for the refill's timer (50 ms,
# or the shortened REFILL_MAX_DEFER): past it the run goes on and the test
# fails on what it saw, instead of hanging.
HOLD_WAIT = 10.0


class _HoldsSecondTurn(Model):
    """A scripted model whose second turn starts only once ``go`` is set (the run stays in progress)."""

    def __init__(self, go: asyncio.Event, *script: Any) -> None:
        super().__init__(*script)
        self.go = go
        self.turns = 0

    async def stream(self, entries: Any, *, tools: Any = None, **kw: Any) -> Any:
        self.turns += 1
        if self.turns == 2:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.go.wait(), HOLD_WAIT)
        async for delta in super().stream(entries, tools=tools, **kw):
            yield delta


def test_a_refill_waits_for_the_run_that_took_the_spare_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 19: five refills starting inside a run competed with it for the
    # CPU. The refill's timer (REFILL_DELAY after the take) fires while the
    # run is held in its second model turn; it must start nothing until the
    # run has ended.
    async def main() -> None:
        server = raw(spares=1)
        await warm_spares(server)
        pool = spares._pool()
        ((_, entry),) = pool.entries.items()
        fired = asyncio.Event()
        during: list[int] = []
        timer = spares._Pool.refill_when_idle

        def spy(self: Any, key: bytes, e: Any) -> None:
            timer(self, key, e)
            during.append(len(e.starting) + len(e.ready))
            fired.set()

        monkeypatch.setattr(spares._Pool, "refill_when_idle", spy)
        model = _HoldsSecondTurn(fired, call("raw__echo", {"text": "hi"}), text("done"))
        result = await Runner.run(Agent(name="tester", model=model, plugins=[MCP(server)]), "go")
        assert result.output == "done"
        assert during == [0]  # the timer fired in the run, and started nothing
        assert len(entry.starting) == 1  # the run's end started it
        assert await warm_spares(server) == 1
        await close_spares()

    run(main())


def test_a_run_that_goes_on_past_refill_max_defer_gets_its_refills_started_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A long run mostly waits for its model: a concurrent run starting then
    # should find spares, so deferred refills start after REFILL_MAX_DEFER
    # even though the run is still in progress (shortened here).
    monkeypatch.setattr(spares, "REFILL_MAX_DEFER", 0.2)

    async def main() -> None:
        server = raw(spares=1)
        await warm_spares(server)
        pool = spares._pool()
        ((_, entry),) = pool.entries.items()
        started = asyncio.Event()
        during: list[int] = []
        deferred = spares._Pool.refill_deferred

        def spy(self: Any) -> None:
            deferred(self)
            if self.runs:
                during.append(len(entry.starting) + len(entry.ready))
                started.set()

        monkeypatch.setattr(spares._Pool, "refill_deferred", spy)
        model = _HoldsSecondTurn(started, call("raw__echo", {"text": "hi"}), text("done"))
        result = await Runner.run(Agent(name="tester", model=model, plugins=[MCP(server)]), "go")
        assert result.output == "done"
        assert during == [1]  # started while the run was still held
        assert await warm_spares(server) == 1
        await close_spares()

    run(main())
