"""Supervision: servers and workers that die (docs/failures.md).

A server or worker that dies mid-call fails the call with ``MCPError`` at
once (exit code or signal, last stderr lines; never a timeout), the next call
gets a fresh one; ``auto_reconnect=False`` never retries; a crash loop opens
the circuit until its window has passed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time

import pytest
from helpers import ISOLATIONS, PY, alive_after, pid_alive, pid_of, raw_args, run
from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry

from lovia_mcp import MCP, MCPError, MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

# A dead server is noticed through its pipes and exit status: well under this.
DEATH_NOTICED_WITHIN = 1.0


@ISOLATIONS
@pytest.mark.parametrize(
    ("tool", "args", "expect_code", "expect_signal", "expect_stderr"),
    [
        ("exit", {"code": 7}, 7, None, "about to exit"),
        ("signal", {"name": "SIGKILL"}, None, "SIGKILL", "about to die by signal"),
        ("signal", {"name": "SIGSEGV"}, None, "SIGSEGV", "about to die by signal"),
    ],
    ids=["exit-code-7", "SIGKILL", "SIGSEGV"],
)
@pytest.mark.timing
def test_server_dying_mid_call_raises_mcp_error_with_exit_status_and_stderr_at_once(
    isolation: str,
    tool: str,
    args: dict[str, object],
    expect_code: int | None,
    expect_signal: str | None,
    expect_stderr: str,
) -> None:
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            auto_reconnect=False,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            old = await pid_of(conn)
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await conn.call_tool(tool, args, timeout=30)
            elapsed = time.monotonic() - started
            err = info.value
            assert elapsed < DEATH_NOTICED_WITHIN, elapsed
            assert err.tool_name == tool
            assert err.kind == "server_exited"
            assert "timeout" not in str(err).lower()
            assert err.exit_code == expect_code
            assert err.signal == expect_signal
            if expect_code is not None:
                assert f"exited with code {expect_code}" in str(err)
            else:
                assert f"killed by {expect_signal}" in str(err)
            assert expect_stderr in err.stderr_tail
            assert expect_stderr in str(err)  # quoted in the hint
            # The next call runs on a fresh server.
            assert await pid_of(conn) != old
            assert not pid_alive(old)
            print(f"[{isolation}] {tool} {args}: MCPError after {elapsed * 1000:.1f} ms")

    run(main())


def test_server_exit_with_auto_reconnect_retries_once_on_a_fresh_server() -> None:
    # --crash-after 2: the second call on any one server process crashes; the
    # retry is the first call on a fresh one, so it succeeds and says so.
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args("--crash-after", "2"), name="raw")
        async with server.session() as conn:
            assert str(await conn.call_tool("counter")) == "1"
            assert str(await conn.call_tool("counter")) == "1"  # crashed, retried
            stats = await conn.stats()
            assert stats.restarts == 1
            assert "exited with code 3" in (stats.last_restart_reason or "")

    run(main())


def test_auto_reconnect_false_never_retries_a_call_that_died_and_the_model_sees_the_error() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args("--crash-after", "2"), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            provider = ScriptedProvider(
                [call("raw__counter", {}, call_id="c1"), call("raw__counter", {}, call_id="c2"), text("done")]
            )
            agent = Agent(name="a", model=provider, plugins=[MCP(conn)])
            result = await Runner.run(agent, "count")
            outputs = [e.output for e in result.entries if isinstance(e, ToolResultEntry)]
            assert outputs[0] == "1"
            assert outputs[1].startswith("Tool error: MCP tool 'counter' failed: the server exited with code 3")
            assert "crashing on call 2" in outputs[1]
            # Had the dead call been retried, it would have been call 1 of the
            # fresh server and this one call 2 (a crash).
            assert str(await conn.call_tool("counter")) == "1"

    run(main())


@pytest.mark.timing
def test_worker_killed_mid_call_fails_the_call_at_once_and_a_fresh_worker_serves_the_next() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            worker, old_server = conn.worker_pid, await pid_of(conn)
            assert worker is not None
            in_flight = asyncio.ensure_future(conn.call_tool("hang"))
            # Kill once the request has been sent (it is then in flight).
            while not conn.core.in_flight:  # noqa: SLF001 - only to know the request was sent
                await asyncio.sleep(0)
            os.kill(worker, signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(MCPError) as info:
                await in_flight
            elapsed = time.monotonic() - killed
            assert elapsed < DEATH_NOTICED_WITHIN, elapsed
            assert info.value.kind == "worker_died"
            assert "killed by SIGKILL" in str(info.value)
            assert info.value.tool_name == "hang"
            # The worker's server went with it (parent-death signal).
            deadline = time.monotonic() + 2.0
            while pid_alive(old_server) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert not pid_alive(old_server)
            assert str(await conn.call_tool("echo", {"text": "again"})) == "again"
            assert conn.worker_pid not in (None, worker)
            assert conn.worker_restarts == 1
            print(f"worker SIGKILL: in-flight call failed after {elapsed * 1000:.1f} ms")

    run(main())


def test_sigterm_to_a_serving_worker_stops_its_server_tree_and_the_worker_exits_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw")
        async with server.session() as conn:
            worker, old_server = conn.worker_pid, await pid_of(conn)
            assert worker is not None
            os.kill(worker, signal.SIGTERM)
            left, took = await alive_after([worker, old_server], 5.0)
            assert not left, left
            assert str(await conn.call_tool("echo", {"text": "after"})) == "after"  # a fresh worker
            assert conn.worker_pid not in (None, worker)
            print(f"SIGTERM to a serving worker: worker and server gone in {took * 1000:.0f} ms")

    with caplog.at_level("WARNING", logger="lovia_mcp"):
        run(main())
    # Its own shutdown (the tree first), not SIGTERM's default action.
    exits = [r.getMessage() for r in caplog.records if "the worker process" in r.getMessage()]
    assert exits and all("exited with code 0" in m for m in exits), exits


@pytest.mark.timeout(20)
@pytest.mark.timing
def test_crash_loop_opens_the_circuit_fails_fast_and_recovers_after_the_window(tmp_path: object) -> None:
    crash_file = os.path.join(str(tmp_path), "crash")
    window = 1.5

    async def main() -> None:
        open(crash_file, "w").close()
        server = MCPServerStdio(
            command=PY,
            args=raw_args("--crash-if-exists", crash_file),
            name="raw",
            auto_reconnect=False,
            restart_limit=2,
            restart_window=window,
        )
        async with server.session() as conn:
            first_restart: float | None = None
            # Generation 1 crashes, then two restarts (the limit) crash too.
            for i in range(3):
                if i == 1:
                    # No later than the worker's own record of the first restart.
                    first_restart = time.monotonic()
                with pytest.raises(MCPError) as info:
                    await conn.call_tool("echo", {"text": "x"})
                assert info.value.kind == "server_exited" and info.value.exit_code == 4, info.value
            assert first_restart is not None
            # The next start would be restart 3 within the window: fail fast.
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await conn.call_tool("echo", {"text": "x"})
            fail_fast = time.monotonic() - started
            assert info.value.kind == "circuit_open"
            assert "restarted 2 times in 1.5 s" in str(info.value)
            assert "exited with code 4" in str(info.value)  # the last reason
            assert "calls are tried again in" in str(info.value)
            assert fail_fast < 0.2, fail_fast
            # The server is fixed; once the window has passed, calls go through.
            os.unlink(crash_file)
            deadline = first_restart + window + 1.0
            while True:
                try:
                    reply = await conn.call_tool("echo", {"text": "back"})
                    break
                except MCPError as exc:
                    assert exc.kind == "circuit_open", exc
                    assert time.monotonic() < deadline, "the circuit did not close after its window"
                    await asyncio.sleep(0.05)
            recovered_after = time.monotonic() - first_restart
            assert str(reply) == "back"
            assert recovered_after >= window
            print(
                f"circuit failed fast in {fail_fast * 1000:.1f} ms, closed {recovered_after:.2f} s after first restart"
            )

    run(main())


def test_worker_killed_after_a_server_restart_still_takes_the_new_servers_grandchildren() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            first = await pid_of(conn)
            with pytest.raises(MCPError):
                await conn.call_tool("exit", {"code": 1})
            second = await pid_of(conn)
            assert second != first
            assert conn.server_pid == second  # the connection follows restarts
            grandchildren = json.loads(str(await conn.call_tool("spawn", {"n": 1})))
            orphans = json.loads(str(await conn.call_tool("spawn", {"n": 1, "orphan": True})))
            worker = conn.worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            alive, took = await alive_after([second, *grandchildren, *orphans], 2.0)
            assert alive == [], f"still alive {took:.2f} s after the worker died: {alive}"
            assert str(await conn.call_tool("echo", {"text": "fresh"})) == "fresh"

    run(main())


@ISOLATIONS
@pytest.mark.timing
def test_server_exit_is_noticed_while_a_grandchild_still_holds_its_pipes(isolation: str) -> None:
    # raw_server's sleepers inherit its stdout and stderr: no EOF arrives when
    # the server exits, and before Python 3.12 asyncio's Process.wait() waited
    # for those pipes too.
    async def main() -> None:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            auto_reconnect=False,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            grandchildren = json.loads(str(await conn.call_tool("spawn", {"n": 2})))
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("exit", {"code": 5}), 10)
            elapsed = time.monotonic() - started
            assert info.value.exit_code == 5 and "about to exit" in info.value.stderr_tail
            assert elapsed < DEATH_NOTICED_WITHIN, elapsed
            # The rest of the dead server's tree is killed, and a fresh one serves.
            assert (await alive_after(grandchildren, 2.0))[0] == []
            assert str(await conn.call_tool("echo", {"text": "fresh"})) == "fresh"
            print(f"[{isolation}] exit with pipes held by grandchildren: MCPError after {elapsed * 1000:.1f} ms")

    run(main())


def test_calls_made_while_a_dead_workers_exit_status_is_read_are_failed_over_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reading a dead worker's exit status takes a join on a thread. A call made
    # in that window must still be answered: failed over to a fresh worker,
    # not left waiting on a channel nobody reports on any more.
    from lovia_mcp.client import worker_link

    release = threading.Event()
    original = worker_link.ProcessChannel._exit_description

    def slow_exit_description(self: worker_link.ProcessChannel) -> str:
        release.wait(10)
        return original(self)

    monkeypatch.setattr(worker_link.ProcessChannel, "_exit_description", slow_exit_description)

    async def main() -> tuple[str, str]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw")
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            channel = conn.core.channel  # noqa: SLF001 - to see the loss begin
            os.kill(worker, signal.SIGKILL)
            while not channel._losing:  # noqa: SLF001
                await asyncio.sleep(0.01)
            late = asyncio.ensure_future(conn.call_tool("echo", {"text": "late"}))
            await asyncio.sleep(0)  # the late call is sent into the dead channel
            release.set()
            first = str(await asyncio.wait_for(late, 10))
            return first, str(await conn.call_tool("echo", {"text": "next"}))

    assert run(main()) == ("late", "next")


def test_a_call_made_while_a_dead_workers_exit_is_being_read_goes_to_a_fresh_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The agent sees the pipe close at once, but names the worker's end
    # (its exit status, read on a thread) a moment later. A call made in
    # between used to go to the dead worker and fail with its loss (under a
    # loaded machine, test_worker_killed_after_a_server_restart... did).
    from lovia_mcp.client.worker_link import ProcessChannel

    release = threading.Event()
    describe = ProcessChannel._exit_description

    def slow(self: ProcessChannel) -> str:
        assert release.wait(10.0), "never released"
        return describe(self)

    monkeypatch.setattr(ProcessChannel, "_exit_description", slow)

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation="process", auto_reconnect=False)
        async with server.session() as conn:
            channel = conn.core.channel
            assert isinstance(channel, ProcessChannel) and conn.worker_pid is not None
            dead = conn.worker_pid
            os.kill(dead, signal.SIGKILL)
            await asyncio.wait_for(channel.wait_lost(), 10.0)
            assert channel.reporting  # the pipe is gone, its report held
            calling = asyncio.ensure_future(conn.call_tool("echo", {"text": "fresh"}))
            release.set()
            assert str(await asyncio.wait_for(calling, 30.0)) == "fresh"
            assert conn.worker_pid not in (None, dead)

    run(main())
