"""Each call's deadline belongs to the worker; the agent keeps only a backstop for a worker that never answers.

The call carries its timeout. At the deadline the worker cancels it, applies
``on_timeout`` and answers with a ``timeout`` failure, whether or not the
caller runs a timer of its own (lovia's ``wait_for`` does, and then reports
its own error; a direct ``call_tool(timeout=...)`` does not). A worker that
cannot answer at all (stopped here with SIGSTOP) is given up after the
deadline, its kill grace and :data:`~lovia_mcp.client.core.STUCK_WORKER_BACKSTOP`,
and the next call runs on a fresh worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import PY, raw_args, run
from helpers import ISOLATIONS, SERVERS

from lovia_mcp import MCPError, MCPServerStdio
from lovia_mcp.client import core as client_core

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

TIMEOUT = 0.5
KILL_GRACE = 0.2
# Bound on a call the worker must end at its deadline: the deadline, the
# worker's slack after it, and a wide margin for a loaded 2-core machine.
CALL_BOUND = 10.0


async def _pid(conn: object) -> int:
    return int(json.loads(str(await conn.call_tool("pid")))["pid"])  # type: ignore[attr-defined]


@pytest.mark.timeout(30)
@ISOLATIONS
def test_a_call_with_no_timer_of_its_own_is_timed_out_by_the_worker_and_the_next_call_gets_a_fresh_server(
    isolation: str,
) -> None:
    async def main() -> tuple[MCPError, float, int, int, object]:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            kill_grace=KILL_GRACE,
            auto_reconnect=False,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            old = await _pid(conn)
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                # No wait_for: only the deadline the call carries can end it.
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), CALL_BOUND)
            took = time.monotonic() - started
            new = await _pid(conn)
            return info.value, took, old, new, await conn.stats()

    error, took, old, new, stats = run(main())
    print(f"[{isolation}] the worker ended the call {took * 1000:.0f} ms after it was sent (timeout {TIMEOUT} s)")
    assert error.kind == "timeout" and error.tool_name == "hang", error
    assert took >= TIMEOUT
    assert new != old
    assert stats.timeouts == 1 and stats.restarts == 1  # type: ignore[attr-defined]


@pytest.mark.timeout(30)
@ISOLATIONS
def test_a_call_due_before_the_calls_in_flight_is_timed_out_by_the_worker_at_its_own_deadline(isolation: str) -> None:
    # The worker keeps one deadline timer, armed for the earliest: a call
    # received after another but due before it must re-arm it.
    async def main() -> tuple[MCPError, float, BaseException | None]:
        server = MCPServerStdio(
            command=PY,
            args=raw_args(),
            name="raw",
            kill_grace=KILL_GRACE,
            auto_reconnect=False,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            # Received first (its task runs first), due long after the test's bound.
            late = asyncio.ensure_future(conn.call_tool("hang", timeout=10 * CALL_BOUND))
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                # No wait_for: only the deadline the call carries can end it.
                await asyncio.wait_for(conn.call_tool("hang", timeout=TIMEOUT), CALL_BOUND)
            took = time.monotonic() - started
            # Its server was retired for the timeout: the earlier call ends with it.
            outcome = (await asyncio.gather(late, return_exceptions=True))[0]
            return info.value, took, outcome if isinstance(outcome, BaseException) else None

    error, took, late = run(main())
    print(f"[{isolation}] the worker ended the call {took * 1000:.0f} ms after it was sent (timeout {TIMEOUT} s)")
    assert error.kind == "timeout" and error.tool_name == "hang", error
    assert TIMEOUT <= took < CALL_BOUND
    assert isinstance(late, MCPError) and late.kind == "server_exited", late


@pytest.mark.timeout(30)
def test_a_worker_that_never_answers_is_given_up_at_the_backstop_and_the_next_call_gets_a_fresh_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backstop = 0.5
    monkeypatch.setattr(client_core, "STUCK_WORKER_BACKSTOP", backstop)

    async def main() -> tuple[MCPError, float, int, int | None]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", kill_grace=KILL_GRACE, auto_reconnect=False)
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGSTOP)  # alive, pipe open, never answers
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("echo", {"text": "x"}, timeout=TIMEOUT), CALL_BOUND)
            took = time.monotonic() - started
            assert str(await conn.call_tool("echo", {"text": "again"})) == "again"
            return info.value, took, worker, conn.worker_pid

    error, took, old, new = run(main())
    print(f"given up after {took * 1000:.0f} ms (timeout {TIMEOUT} + grace {KILL_GRACE} + backstop {backstop} s)")
    assert error.kind == "timeout" and "did not answer" in str(error), error
    assert took >= TIMEOUT + KILL_GRACE + backstop
    assert new is not None and new != old
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE


@pytest.mark.timeout(30)
def test_a_call_whose_backstop_falls_before_those_of_the_calls_in_flight_is_given_up_at_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The connection keeps one backstop timer, armed for the earliest: a
    # call sent after another but due before it must re-arm it.
    backstop = 0.5
    monkeypatch.setattr(client_core, "STUCK_WORKER_BACKSTOP", backstop)

    async def main() -> tuple[MCPError, float, BaseException | None]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", kill_grace=KILL_GRACE, auto_reconnect=False)
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGSTOP)
            # Sent first (its task runs first), due long after the test's bound.
            late = asyncio.ensure_future(conn.call_tool("echo", {"text": "late"}, timeout=10 * CALL_BOUND))
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("echo", {"text": "x"}, timeout=TIMEOUT), CALL_BOUND)
            took = time.monotonic() - started
            # Given up with the worker: the earlier call fails as its loss.
            outcome = (await asyncio.gather(late, return_exceptions=True))[0]
            return info.value, took, outcome if isinstance(outcome, BaseException) else None

    error, took, late = run(main())
    print(f"given up after {took * 1000:.0f} ms (timeout {TIMEOUT} + grace {KILL_GRACE} + backstop {backstop} s)")
    assert error.kind == "timeout" and "did not answer" in str(error), error
    assert took >= TIMEOUT + KILL_GRACE + backstop
    assert isinstance(late, MCPError) and late.kind == "worker_died", late


@pytest.mark.timeout(60)
@ISOLATIONS
def test_a_call_waiting_for_a_restart_that_hangs_ends_at_its_deadline_told_it_never_reached_a_server(
    isolation: str, tmp_path: Path
) -> None:
    # gated_server.py reads a line from the gate at each start: the first start gets one; the
    # server is then killed, and its restart waits at the gate, as a server frozen before its
    # handshake would. A call meanwhile ends at its own deadline, not at open_timeout; once the
    # gate opens, the restart serves.
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)
    holder = os.open(gate, os.O_RDWR)
    os.write(holder, b"go\n")

    async def main() -> tuple[MCPError, float, int, int]:
        server = MCPServerStdio(
            command=PY,
            args=[str(SERVERS / "gated_server.py"), gate],
            name="raw",
            open_timeout=60,
            auto_reconnect=False,
            isolation=isolation,  # type: ignore[arg-type]
        )
        async with server.session() as conn:
            old = await _pid(conn)
            # Taken before the kill: the worker may reap it before psutil would look it up after.
            dying = psutil.Process(old)
            os.kill(old, signal.SIGKILL)
            await asyncio.to_thread(psutil.wait_procs, [dying], CALL_BOUND)

            async def seen_gone() -> None:
                # Until the host (the worker's, or this loop's under isolation="none") has seen the
                # exit: a call sent before would go to the dead server and fail as server_exited.
                while (await conn.stats()).server_pid == old:  # type: ignore[attr-defined]
                    await asyncio.sleep(0)  # in-process, stats() may answer without yielding to the loop

            await asyncio.wait_for(seen_gone(), CALL_BOUND)
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(conn.call_tool("echo", {"text": "x"}, timeout=TIMEOUT), CALL_BOUND)
            took = time.monotonic() - started
            os.write(holder, b"go\n")
            new = await _pid(conn)
            return info.value, took, old, new

    try:
        error, took, old, new = run(main())
    finally:
        os.close(holder)
    print(f"[{isolation}] the call ended {took * 1000:.0f} ms after it was sent (timeout {TIMEOUT} s): {error}")
    assert error.kind == "timeout", error
    assert "cancelled before it reached a server" in str(error)
    assert TIMEOUT <= took < CALL_BOUND
    assert new != old
