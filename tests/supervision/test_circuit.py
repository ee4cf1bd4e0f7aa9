"""The restart circuit counts every start: a crash loop stops, whatever kills the starts.

A server that dies before its handshake never serves, so a circuit that
counted only generations that served restarted it forever (two starts a
call: the call and its retry). Every attempt counts now: a start that
serves, one that dies before its handshake, one whose exec fails, and a
fresh worker after one was lost. The open's own start does not: a
connection starts at most ``restart_limit`` + 1 server processes in a
window, however many calls it is asked for.

The starts are counted by the server itself (``tests/servers/crashloop_server.py``
appends its pid to a file at every start), so the count includes every
process, whoever started it and however it ended.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import ISOLATIONS, PY, SERVERS
from lovia_mcp_worker.wire.messages import Ended, Started

from lovia_mcp import MCPError, MCPServerStdio
from lovia_mcp.client.circuit import RestartCircuit
from lovia_mcp.client.core import ClientCore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

CRASHLOOP = str(SERVERS / "crashloop_server.py")
LIMIT = 3
WINDOW = 60.0
# Sequential calls made against a crash loop: many more than the limit.
CALLS = 12
# A call refused by an open circuit starts nothing and waits for nothing:
# it is answered from the agent's own state (generous for a loaded machine).
FAIL_FAST_WITHIN = 0.2


def starts(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


def crashloop(isolation: str, starts_file: Path, *flags: str, command: str = PY) -> MCPServerStdio:
    args = [CRASHLOOP, "--starts", str(starts_file), *flags] if command == PY else list(flags)
    return MCPServerStdio(
        command=command,
        args=args,
        name="loop",
        isolation=isolation,  # type: ignore[arg-type]
        restart_limit=LIMIT,
        restart_window=WINDOW,
    )


async def call_kinds(conn: object, n: int) -> tuple[list[str], float]:
    """Each of ``n`` sequential calls' outcome ("ok" or the MCPError kind), and the last call's time."""
    kinds: list[str] = []
    took = 0.0
    for i in range(n):
        began = time.monotonic()
        try:
            await conn.call_tool("echo", {"text": f"call {i}"})  # type: ignore[attr-defined]
            kinds.append("ok")
        except MCPError as exc:
            kinds.append(exc.kind)
            if exc.kind == "circuit_open":
                assert exc.hint is not None and "Fix the server" in exc.hint, exc
        took = time.monotonic() - began
    return kinds, took


# --------------------------------------------------------------------------- #
# Pure: the window and the core's counting of what the worker tells
# --------------------------------------------------------------------------- #


@pytest.mark.unit
def test_a_start_that_failed_counts_and_still_leaves_the_server_needing_a_restart() -> None:
    now = [0.0]
    circuit = RestartCircuit(limit=2, window=10.0, clock=lambda: now[0])
    circuit.ended("exited")
    circuit.restarted()
    circuit.ended("the server exited with code 5 before answering the MCP handshake")
    assert circuit.needs_restart and circuit.check("s") is None
    now[0] = 1.0
    circuit.restarted()
    circuit.ended("again")
    refused = circuit.check("s")
    assert refused is not None and refused.kind == "circuit_open"
    assert "restarted 2 times in 10 s" in refused.message and "(last: again)" in refused.message
    assert refused.hint == "Fix the server; calls are tried again in 9 s."
    # The window slides: the first restart leaves it at 10 s, the second at 11 s.
    now[0] = 10.5
    assert circuit.check("s") is None
    circuit.restarted()
    now[0] = 10.9
    assert circuit.check("s") is not None


def core(limit: int = LIMIT) -> ClientCore:
    server = MCPServerStdio(command=PY, args=[CRASHLOOP], name="loop")
    return ClientCore(server._spec(), "none", RestartCircuit(limit, WINDOW), lambda tools, changed: None)


@pytest.mark.unit
def test_the_core_counts_each_generation_the_worker_tells_of_once_whether_it_served_or_not() -> None:
    c = core()
    c._generation = 1  # noqa: SLF001 - as after Opened: the open's generation, not a restart
    c._dispatch(Ended(generation=1, reason="exited"))  # noqa: SLF001
    assert c.circuit.needs_restart and c.circuit.restarts == 0
    # Generation 2 never served: a failed start, counted, and a restart is still needed.
    c._dispatch(Ended(generation=2, reason="died before its handshake"))  # noqa: SLF001
    assert c.circuit.restarts == 1 and c.circuit.needs_restart
    assert c.circuit.last_restart_reason == "exited"
    # Generation 3 served: counted once, though told twice (Started, then its Ended).
    c._dispatch(Started(server_pid=1, generation=3))  # noqa: SLF001
    assert c.circuit.restarts == 2 and not c.circuit.needs_restart
    c._dispatch(Ended(generation=3, reason="crashed"))  # noqa: SLF001
    c._dispatch(Ended(generation=3, reason="crashed"))  # noqa: SLF001
    assert c.circuit.restarts == 2 and c.circuit.needs_restart
    # An old generation's late end (a drained one going down) is no news.
    c._dispatch(Ended(generation=2))  # noqa: SLF001
    assert c.circuit.restarts == 2
    c._dispatch(Ended(generation=4, reason="died before its handshake"))  # noqa: SLF001
    refused = c.circuit.check("loop")
    assert refused is not None and refused.kind == "circuit_open"


# --------------------------------------------------------------------------- #
# Real processes
# --------------------------------------------------------------------------- #


@ISOLATIONS
@pytest.mark.parametrize(
    ("served", "expect"),
    [
        # The open's server dies at the first call; every later start dies before its handshake.
        ("0", ["server_exited", "server_exited"]),
        # The open's server answers one call and dies at the next; every later start dies likewise.
        ("1", ["ok", "server_exited", "server_exited"]),
    ],
    ids=["dies-at-every-start", "serves-one-call-then-dies-at-every-start"],
)
@pytest.mark.timeout(30)
def test_a_server_that_dies_at_every_start_is_started_at_most_limit_plus_one_times_then_fails_fast(
    isolation: str, served: str, expect: list[str], tmp_path: Path
) -> None:
    record = tmp_path / "starts"

    async def main() -> tuple[list[str], float]:
        async with crashloop(isolation, record, "--calls", served).session() as conn:
            kinds, fail_fast = await call_kinds(conn, CALLS)
            # Concurrent callers find it open too, and start nothing.
            burst = await asyncio.gather(
                *(conn.call_tool("echo", {"text": "b"}) for _ in range(8)), return_exceptions=True
            )
            assert all(isinstance(e, MCPError) and e.kind == "circuit_open" for e in burst), burst
            stats = await conn.stats()
            assert stats.restarts == LIMIT, stats
            assert "before answering the MCP handshake" in (stats.last_restart_reason or ""), stats
            return kinds, fail_fast

    kinds, fail_fast = asyncio.run(main())
    assert starts(record) <= LIMIT + 1, (starts(record), kinds)
    # Each call starts a server and retries once: the limit is reached within two calls.
    assert kinds == expect + ["circuit_open"] * (CALLS - len(expect)), kinds
    assert fail_fast < FAIL_FAST_WITHIN, fail_fast
    print(
        f"[{isolation}] {CALLS} calls: {starts(record)} starts (limit {LIMIT}), then circuit_open "
        f"in {fail_fast * 1000:.2f} ms"
    )


@ISOLATIONS
@pytest.mark.timeout(30)
def test_a_server_whose_command_can_no_longer_be_executed_stops_restarting_at_the_limit(
    isolation: str, tmp_path: Path
) -> None:
    record = tmp_path / "starts"
    wrapper = tmp_path / "server.sh"
    wrapper.write_text(f"#!/bin/sh\nexec {PY} {CRASHLOOP} --starts {record} --serve 99 --calls 0\n")
    wrapper.chmod(0o755)

    async def main() -> list[str]:
        async with crashloop(isolation, record, command=str(wrapper)).session() as conn:
            wrapper.unlink()  # every later start fails to exec: no process of the server runs
            kinds, _ = await call_kinds(conn, CALLS)
            stats = await conn.stats()
            assert stats.restarts == LIMIT, stats
            return kinds

    kinds = asyncio.run(main())
    # The first call kills the open's server and its retry's start cannot exec
    # ("open", never retried); each next call's start fails likewise until the limit.
    assert kinds == ["open"] * LIMIT + ["circuit_open"] * (CALLS - LIMIT), kinds
    assert starts(record) == 1


@pytest.mark.timeout(30)
def test_fresh_workers_whose_server_dies_at_every_start_stop_at_the_limit(tmp_path: Path) -> None:
    # The worker is killed; each fresh worker's open then fails (its server
    # dies before the handshake). A failed replacement counts, and the one
    # after it is a restart too.
    record = tmp_path / "starts"

    async def main() -> tuple[list[str], int]:
        async with crashloop("process", record).session() as conn:
            assert conn.worker_pid is not None
            os.kill(conn.worker_pid, signal.SIGKILL)
            kinds, _ = await call_kinds(conn, CALLS)
            return kinds, conn.worker_restarts

    kinds, workers = asyncio.run(main())
    assert starts(record) <= LIMIT + 1, (starts(record), kinds)
    assert workers == LIMIT, (workers, kinds)
    assert "circuit_open" in kinds and kinds[-1] == "circuit_open", kinds
    print(f"worker killed, then {CALLS} calls: {starts(record)} starts, {workers} fresh workers, then {kinds[-1]}")


__all__: list[str] = []
