#!/usr/bin/env python3
"""Benchmark: lovia's in-process MCP plugin against lovia-mcp, in one run.

Three clients on the same servers:

- ``lovia``: lovia's own in-process plugin (``lovia.plugins.mcp.MCPServerStdio``);
- ``none``: lovia-mcp with ``isolation="none"`` (the session host in the agent's loop);
- ``process``: lovia-mcp with ``isolation="process"`` (a worker process per connection).

Two servers: ``raw`` (``scripts/bench_server.py``, a minimal raw JSON-RPC
loop, so the client-side cost is what is measured; the goals are judged on
it) and ``sdk`` (``scripts/bench_sdk_server.py``, the SDK's ``MCPServer``).

How it runs: each client is measured in a fresh child process of its own
(``--child``), so an in-process client never pollutes an isolated client's
agent process (memory figures, "never imports mcp"). Clients are interleaved
in rounds (the order rotates every round) and every figure is the median of
all samples, because these machines are shared and noisy. "First open" is
measured in yet another fresh process per sample, timed from just before the
process is started to the moment its first tool list is in hand.

Figures (goal ratios are isolated/in-process; the targets are in docs/performance.md):

- open: ``async with server.session()`` enter, warm (imports done, forkserver
  up); close: its exit (reported, not a goal);
- first_open: fresh agent process, imports included, to the first tool list
  (each package's modules from cached bytecode, as an installed agent
  imports them: lovia-mcp's are compiled first, see ``_compile_bytecode``);
- small_call: one ``echo`` call through the lovia ``Tool.invoke``, median;
- concurrent: C calls (default 300) with ``asyncio.gather`` on one connection;
- big: one text result of B bytes (default 10 MB);
- stall_max / stall_total: lateness of a 1 ms ticker on the agent loop while
  the big result arrives, minus the ticker's idle overshoot measured just
  before (so timer slack is not counted as stall);
- big_run / stall_run_max: the same result in a whole ``Runner.run`` of a
  real Agent with lovia's default output cap (200,000 characters), and the
  ticker's worst lateness during it: what a user pays (the cut in the worker
  applies there, issue 19);
- stall_cpu_max / loop_cpu (not goals): the loop thread's CPU time in the
  worst tick, and in total, during that call (the ticker's own idle cost
  subtracted): the work behind the stall, without the time a busy shared
  machine merely preempted the agent;
- accounting_cgroup / accounting_watch / accounting_burst: the per-call
  accounting's own cost (issue 35), in the measuring process's CPU time per
  call: a window opened and closed on a real server's tree (a sleeping
  child) under its cgroup (where one can be made) and on the watch, one call
  at a time, and 300 overlapping; measured in the ``process`` child only
  (the code is the worker's; where it runs does not change its cost);
- rss_per_server: agent RSS delta when N (default 5) more connections are
  opened after a first one, divided by N;
- worker_uss: unique memory (USS) of each worker process (process mode only);
- idle_worker_uss: USS of the worker the forkserver forks ahead of the next
  open, while it waits (process mode only);
- run1 / run5 (and ``_spares``): a whole ``Runner.run`` of a real lovia
  ``Agent`` (``ScriptedProvider``: one tool call, then text) with 1 or 5
  per-run servers, from the call to its return; ``_spares``: process with
  ``spares=1`` and a spare ready for each server (lovia's figure is its
  plain run, the same baseline); the ``_setup`` / ``_call`` / ``_close``
  rows split that run: the plugin's setup, the run in between (the model
  turns and the tool call), and the plugin's close at the run's end;
  ``_drain``: after the run returned, the time until the closes it started
  in the background are done (every worker joined; lovia-mcp only; not in
  the run's figure, and waited for before the next sample); the runs
  without spares are ``RUN_GAP`` (0.2 s) apart, as an agent's runs are
  apart by its model's answers; ``run5_b2b``: five servers, back to back;
- run5_spares_model: the same five-server run with spares, its scripted
  model answering after 100 ms a turn (minus those 200 ms): the refills a
  take starts would land inside it; ``--refills-in-run`` starts them there
  (as before issue 19) to show what waiting for the run's end buys;
- soak (raw server): S calls (default 100,000, split over the rounds) on one
  connection, ``SOAK_IN_FLIGHT`` (100) at a time through the lovia ``Tool``,
  then K open/close cycles (default 300) one after another:
  ``soak_rate`` the calls per second; ``soak_bytes_per_call`` (and
  ``soak_worker_bytes_per_call``, process only) the least-squares slope of
  RSS over the calls after a warm-up (a tenth of them); ``soak_fds_per_cycle``
  and ``soak_bytes_per_cycle`` the slope of the agent's open descriptors
  (less the forkserver's idle workers' sockets, a shared pool) and of its
  RSS over the cycles. Flat is 0; a leak of 100 bytes a call or of one
  descriptor a cycle shows as that (tests/long/test_soak.py asserts the same on
  100,000 calls and 1,000 cycles);
- pdeathsig_setpriv / pdeathsig_preexec (process only): what giving a server
  its parent-death signal adds to its start, timed in the worker's own launch
  code (``containment.launch.spawn``) on a trivial server (``true``), from the
  spawn to its exit: a start through ``setpriv --pdeathsig KILL`` (the
  launcher's choice without rlimits or a sandbox), and a start whose
  pre-exec hook sets the signal (with rlimits or Landlock: subprocess then
  forks the launching process instead of vfork), each minus a bare start
  with no parent-death signal just before it (paired, medians);

- cold start (``--cold-start``, a run of its own): the first open of a real
  ``uvx mcp-server-time`` and ``npx -y @modelcontextprotocol/server-everything``
  in a fresh ``lovia-mcp check`` process, unlocked (uvx and npx with their
  caches warmed by one open first) against locked (``lovia-mcp lock`` run
  once into a cache of the run's own): the ``open_seconds`` check reports
  (spawn, handshake, tool list; for the locked server, the cache check
  too), interleaved, medians; and "the server itself": the lock's launch
  given as a plain command (no lock, no check). Needs uvx, npx and the registries once (the
  lock and the warm-up); skipped with a message where they are missing;

Usage::

    .venv/bin/python scripts/bench.py              # full run, table
    .venv/bin/python scripts/bench.py --cold-start # locked against unlocked npx/uvx first opens
    .venv/bin/python scripts/bench.py --json       # machine-readable
    .venv/bin/python scripts/bench.py --quick      # smoke run: small sizes, clients side by side (~13 s)
    .venv/bin/python scripts/bench.py --only big --repeat 15

To measure another copy of the code (a snapshot, a prototype), put it first
on PYTHONPATH: ``PYTHONPATH=DIR:DIR/worker``. An environment variable, not a
``sys.path`` edit: every client runs in a fresh child interpreter, which
would import the installed packages instead. The report names the source it
measured.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import gc
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
SERVER_SCRIPTS = {
    "raw": str(ROOT / "scripts" / "bench_server.py"),
    "sdk": str(ROOT / "scripts" / "bench_sdk_server.py"),
    # A real third-party server (scripts/thirdparty.sh installs it): run with node.
    "everything": str(
        ROOT
        / ".cache"
        / "thirdparty"
        / "npm"
        / "node_modules"
        / "@modelcontextprotocol"
        / "server-everything"
        / "dist"
        / "index.js"
    ),
}
CLIENTS = ("lovia", "none", "process")
CLIENT_LABELS = {"lovia": "lovia in-process", "none": "lovia-mcp none", "process": "lovia-mcp process"}
# Each child process runs its samples and is bounded: a hung client must not
# hang the benchmark (or the smoke test that runs it).
CHILD_TIMEOUT = 900.0
# Idle time the stall ticker runs before each big call, to measure the
# loop's own timer overshoot (subtracted from the lateness during the call).
STALL_BASELINE_SECONDS = 0.1
# The ticker's period.
TICK = 0.001
# A server with a tool call that exits on demand, for the crash figures.
CRASH_SERVER = str(ROOT / "tests" / "servers" / "raw_server.py")
# How long a ready spare is left alone while its worker's and server's CPU
# time is measured: long enough to see periodic work (the worker's 1 s
# orphan reap), short enough for the run. --quick, which judges no figure,
# takes a short look (the smoke test runs it: 5.5 s of its 26 s were this wait).
SPARE_IDLE_SECONDS = 5.0
SPARE_IDLE_SECONDS_QUICK = 0.2
# Left to a fresh spare before that: past its start-up's last work.
SPARE_SETTLE_SECONDS = 0.5
SPARE_SETTLE_SECONDS_QUICK = 0.05
# Servers opened by one run in the "five servers" figures.
FIVE = 5
# Soak calls in flight at once on the one connection, and samples taken over
# the calls and over the cycles (the first tenth of either is warm-up).
SOAK_IN_FLIGHT = 100
SOAK_SAMPLES = 20
# The scripted model's answer time in the run5_spares_model figure: a real
# model takes seconds; 100 ms already puts a take's refills (REFILL_DELAY,
# 50 ms, after it) inside the run, where they would compete with it.
MODEL_LATENCY = 0.1
# Server starts timed per launch path for the parent-death signal figures,
# in all (split over the rounds): a trivial server starts in about a
# millisecond, so many samples cost little and steady the median.
LAUNCH_REPEAT = 90

# Between whole-run samples (every client): an agent's runs are apart by at
# least its model's answers. Back to back, a lovia-mcp run shares the CPU
# with the previous run's pool refills (an idle worker forked ahead for each
# server, ~7 ms of CPU each); run5_b2b shows that case (not a goal).
RUN_GAP = 0.2


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    servers: tuple[str, ...]
    group: str  # what a child must run to produce it (``--only`` takes either)
    goal: float | None = None
    # "ratio": process/lovia <= goal; "ratio_none": process/none <= goal; "abs": process <= goal
    goal_kind: str | None = None
    scale: float = 1.0  # samples are seconds/bytes; shown as unit
    # The goal is judged on the first server listed (the raw server, where
    # the client side is what is measured); the others' rows are reported.


FIGURES: tuple[Figure, ...] = (
    Figure("open", "open (spawn, handshake, list), warm", "ms", ("raw", "sdk"), "open", 1.0, "ratio", 1e3),
    Figure("close", "close, warm (not a goal)", "ms", ("raw", "sdk"), "open", None, None, 1e3),
    # Paired: each sample is one sandboxed open minus the plain open just before it.
    Figure("sandbox_cost", "open in Sandbox() minus a plain open, warm", "ms", ("raw",), "open", 10.0, "abs", 1e3),
    Figure(
        "sandbox_cost_landlock",
        "open in Sandbox(backend='landlock') minus a plain open, warm",
        "ms",
        ("raw",),
        "open",
        10.0,
        "abs",
        1e3,
    ),
    Figure("first_open", "first open in a fresh agent process", "ms", ("raw",), "first_open", 0.5, "ratio", 1e3),
    # Paired: each sample is one server start minus a bare start (no parent-death signal) just before it.
    Figure(
        "pdeathsig_setpriv",
        "server start through setpriv --pdeathsig minus a bare start (not a goal)",
        "ms",
        ("raw",),
        "launch",
        None,
        None,
        1e3,
    ),
    Figure(
        "pdeathsig_preexec",
        "server start with the pre-exec hook minus a bare start (not a goal)",
        "ms",
        ("raw",),
        "launch",
        None,
        None,
        1e3,
    ),
    Figure("small_call", "one small call, median", "ms", ("raw", "sdk"), "small_call", 1.0, "ratio", 1e3),
    Figure("concurrent", "{conc} concurrent small calls", "ms", ("raw", "sdk"), "concurrent", 0.15, "ratio", 1e3),
    Figure("big", "one {big} text result", "ms", ("raw", "sdk"), "big", 0.2, "ratio", 1e3),
    Figure("stall_max", "agent loop stall during it, max", "ms", ("raw", "sdk"), "big", 5.0, "abs", 1e3),
    Figure("stall_total", "agent loop stall during it, total", "ms", ("raw", "sdk"), "big", 20.0, "abs", 1e3),
    Figure(
        "stall_cpu_max",
        "agent loop CPU in one tick during it, max (not a goal)",
        "ms",
        ("raw", "sdk"),
        "big",
        None,
        None,
        1e3,
    ),
    Figure("loop_cpu", "agent loop CPU during it, total (not a goal)", "ms", ("raw", "sdk"), "big", None, None, 1e3),
    # The same result in a whole Runner.run of a real Agent (lovia's default output cap, 200,000
    # characters): what a user pays, the result rendered and cut into the transcript.
    Figure(
        "big_run",
        "whole Runner.run, one {big} text result, agent's default cap",
        "ms",
        ("raw", "sdk"),
        "big",
        0.5,
        "ratio",
        1e3,
    ),
    Figure("stall_run_max", "agent loop stall during that run, max", "ms", ("raw", "sdk"), "big", 5.0, "abs", 1e3),
    Figure("rss_per_server", "agent RSS per extra server (N={n})", "MB", ("raw",), "memory", 2.0, "abs", 1 / 2**20),
    Figure("worker_uss", "worker USS per connection", "MB", ("raw",), "memory", 20.0, "abs", 1 / 2**20),
    # The worker the forkserver forks ahead of the next open (issue 19), while it waits.
    Figure(
        "idle_worker_uss",
        "the forkserver's idle worker: USS (not a goal)",
        "MB",
        ("raw",),
        "memory",
        None,
        None,
        1 / 2**20,
    ),
    # Per-run opens (server.open(), as lovia's runtime does per run); "process" with spares=1 and a spare
    # ready (warm_spares before each sample, not timed).
    Figure("spare_open", "per-run open, spare ready (spares=1)", "ms", ("raw",), "spares", 0.1, "ratio", 1e3),
    Figure(
        "spare_open_3p",
        "per-run open of server-everything, spare ready",
        "ms",
        ("everything",),
        "spares",
        10.0,
        "abs",
        1e3,
    ),
    # A plugin's setup of five servers (lovia's opens them one after another; ours at once).
    Figure("open5", "per-run setup of {five} servers, no spares", "ms", ("raw",), "spares", 0.3, "ratio", 1e3),
    Figure(
        "open5_spares", "per-run setup of {five} servers, spares ready", "ms", ("raw",), "spares", 0.05, "ratio", 1e3
    ),
    # The cost of a spare while it waits (process only).
    Figure(
        "spare_worker_uss", "a waiting spare: worker USS (not a goal)", "MB", ("raw",), "spares", None, None, 1 / 2**20
    ),
    Figure(
        "spare_server_uss",
        "a waiting spare: raw server USS (not a goal)",
        "MB",
        ("raw",),
        "spares",
        None,
        None,
        1 / 2**20,
    ),
    Figure(
        "spare_idle_cpu",
        "a waiting spare: worker + server CPU, % of a core (not a goal)",
        "%",
        ("raw",),
        "spares",
        None,
        None,
        100.0,
    ),
    # A persistent connection whose server crashes mid-call: the call's retry on a fresh server, or on the
    # standby a connection with spares=1 keeps (process only; lovia's plugin does not recover, see README).
    Figure(
        "crash_retry",
        "crash mid-call and its retry, persistent, no standby (not a goal)",
        "ms",
        ("raw",),
        "spares",
        None,
        None,
        1e3,
    ),
    Figure(
        "crash_retry_standby",
        "crash mid-call and its retry on the standby (not a goal)",
        "ms",
        ("raw",),
        "spares",
        None,
        None,
        1e3,
    ),
)
# Whole runs (issue 19): the goals are what a user pays for a Runner.run.
RUN_GOALS: dict[str, tuple[float | None, str | None]] = {
    "run1": (None, None),
    "run5": (1.1, "ratio_none"),  # the servers' own start is the limit without spares
    "run1_spares": (0.1, "ratio"),
    "run5_spares": (0.05, "ratio"),
}
for _key, (_goal, _kind) in RUN_GOALS.items():
    _n = 1 if _key.startswith("run1") else FIVE
    _what = "spares ready" if _key.endswith("spares") else "no spares"
    FIGURES += (
        Figure(_key, f"whole Runner.run, {_n} server(s), one call, {_what}", "ms", ("raw",), "run", _goal, _kind, 1e3),
    )
    for _phase, _text in (
        ("setup", "its setup"),
        ("call", "its turns and call"),
        ("close", "its close at run end"),
        ("drain", "after it: its closes finish in the background"),
    ):
        FIGURES += (
            Figure(
                f"{_key}_{_phase}",
                f"  {_text} ({_n} server(s), {_what}; not a goal)",
                "ms",
                ("raw",),
                "run",
                None,
                None,
                1e3,
            ),
        )
FIGURES += (
    Figure(
        "run5_b2b",
        "whole Runner.run, 5 server(s), one call, no spares, runs back to back (not a goal)",
        "ms",
        ("raw",),
        "run",
        None,
        None,
        1e3,
    ),
)
FIGURES += (
    Figure(
        "run5_spares_model",
        "whole Runner.run, 5 servers, spares ready, model 100 ms a turn, minus the model's 200 ms (not a goal)",
        "ms",
        ("raw",),
        "run",
        None,
        None,
        1e3,
    ),
)
# Soak (issue 32): the slopes of a long run on one connection and of many open/close cycles.
FIGURES += (
    Figure(
        "soak_rate",
        "soak: calls per second on one connection, {inflight} in flight ({soak_calls} calls; not a goal)",
        "calls/s",
        ("raw",),
        "soak",
        None,
        None,
    ),
    Figure(
        "soak_bytes_per_call",
        "soak: agent RSS slope over the calls, after warm-up",
        "B/call",
        ("raw",),
        "soak",
        100.0,
        "abs",
    ),
    Figure(
        "soak_worker_bytes_per_call",
        "soak: worker RSS slope over the calls, after warm-up",
        "B/call",
        ("raw",),
        "soak",
        100.0,
        "abs",
    ),
    Figure(
        "soak_fds_per_cycle",
        "soak: agent descriptors per open/close cycle ({soak_cycles} cycles)",
        "fds/cycle",
        ("raw",),
        "soak",
        0.1,
        "abs",
    ),
    Figure(
        "soak_bytes_per_cycle",
        "soak: agent RSS per open/close cycle (not a goal)",
        "B/cycle",
        ("raw",),
        "soak",
        None,
        None,
    ),
)
# Per-call accounting (issue 35): what the worker spends measuring each call.
FIGURES += (
    Figure(
        "accounting_cgroup",
        "per-call accounting, CPU per call under a cgroup (not a goal)",
        "us",
        ("raw",),
        "accounting",
        None,
        None,
        1e6,
    ),
    Figure(
        "accounting_watch",
        "per-call accounting, CPU per call on the watch (not a goal)",
        "us",
        ("raw",),
        "accounting",
        None,
        None,
        1e6,
    ),
    Figure(
        "accounting_burst",
        "per-call accounting, CPU per call in a burst of 300 overlapping (not a goal)",
        "us",
        ("raw",),
        "accounting",
        None,
        None,
        1e6,
    ),
)
FIGURE_BY_KEY = {f.key: f for f in FIGURES}
# Set (by --otel) for the client children: configure an OpenTelemetry SDK first.
OTEL_ENV = "LOVIA_MCP_BENCH_OTEL"
GROUPS = (
    "open",
    "first_open",
    "launch",
    "small_call",
    "concurrent",
    "big",
    "memory",
    "spares",
    "run",
    "soak",
    "accounting",
)


@dataclass(frozen=True)
class Params:
    rounds: int
    repeat: int  # samples per figure per client (summed over rounds)
    small_calls: int  # individual small calls per client (summed over rounds)
    conc: int
    big: int
    n_conns: int
    sdk_open_repeat: int  # the SDK server takes ~0.5 s to start: fewer opens
    # The raw server's warm open is ~30 ms and the machines here are noisy
    # (two modes ~10 ms apart): more samples for a steadier median (the
    # five-server run without spares takes as many).
    open_repeat: int = 0
    # Refills start REFILL_DELAY after a take even while the run goes on (as
    # before issue 19): to show what deferring them buys.
    refills_in_run: bool = False
    # A waiting spare's CPU is sampled over spare_idle s, spare_settle s after it is ready.
    spare_idle: float = SPARE_IDLE_SECONDS
    spare_settle: float = SPARE_SETTLE_SECONDS
    run_gap: float = RUN_GAP
    # Soak: calls on one connection and open/close cycles, in all (split over the rounds).
    soak_calls: int = 100_000
    soak_cycles: int = 300
    # Server starts per launch path (the parent-death signal figures), in all.
    launch_repeat: int = LAUNCH_REPEAT

    def per_round(self, total: int) -> int:
        return max(1, math.ceil(total / self.rounds))


def _human_bytes(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1_000_000 else f"{n / 1e3:g} kB"


# --------------------------------------------------------------------------- #
# Child side: one client, measured in its own process
# --------------------------------------------------------------------------- #
def _command(script: str) -> tuple[str, list[str]]:
    if script.endswith(".js"):
        import shutil

        return shutil.which("node") or "node", [script, "stdio"]
    return sys.executable, [script]


def _make_server(client: str, script: str, *, sandbox: bool | str = False, **options: Any) -> Any:
    command, args = _command(script)
    if client == "lovia":
        from lovia.plugins.mcp import MCPServerStdio as LoviaStdio

        return LoviaStdio(command=command, args=args, **options)
    import lovia_mcp

    return lovia_mcp.MCPServerStdio(
        command=command,
        args=args,
        isolation=client,
        sandbox=(
            lovia_mcp.Sandbox(backend=sandbox) if isinstance(sandbox, str) else lovia_mcp.Sandbox() if sandbox else None
        ),
        **options,
    )


async def _timed_open(client: str, script: str, *, sandbox: bool | str = False) -> tuple[float, float]:
    cm = _make_server(client, script, sandbox=sandbox).session()
    t0 = time.perf_counter()
    conn = await cm.__aenter__()
    t1 = time.perf_counter()
    await cm.__aexit__(None, None, None)
    t2 = time.perf_counter()
    assert conn.tools()
    return t1 - t0, t2 - t1


def _tools(conn: Any) -> dict[str, Any]:
    return {t.name: t for t in conn.tools()}


async def _ticker(lates: list[float], cpus: list[float], stop: asyncio.Event) -> None:
    """Lateness of each 1 ms sleep, and the loop thread's CPU time during it.

    Wall lateness is what the goal is about, but on a shared machine it also
    counts time the agent was merely preempted; the thread's CPU time per tick
    separates work done on the loop from that noise.
    """
    clock, cpu = time.perf_counter, time.thread_time
    while not stop.is_set():
        t0, c0 = clock(), cpu()
        await asyncio.sleep(TICK)
        lates.append(clock() - t0 - TICK)
        cpus.append(cpu() - c0)


async def _with_ticker(aw: Any) -> tuple[Any, list[float], list[float], float]:
    lates: list[float] = []
    cpus: list[float] = []
    stop = asyncio.Event()
    task = asyncio.ensure_future(_ticker(lates, cpus, stop))
    c0 = time.thread_time()
    try:
        result = await aw
    finally:
        loop_cpu = time.thread_time() - c0
        stop.set()
        await task
    return result, lates, cpus, loop_cpu


async def _idle_overshoot() -> tuple[float, float]:
    """The idle ticker's median lateness and CPU per tick (timer slack, ticker cost)."""
    lates: list[float] = []
    cpus: list[float] = []
    stop = asyncio.Event()
    task = asyncio.ensure_future(_ticker(lates, cpus, stop))
    await asyncio.sleep(STALL_BASELINE_SECONDS)
    stop.set()
    await task
    if not lates:
        return 0.0, 0.0
    return statistics.median(lates), statistics.median(cpus)


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


async def _measure_server(client: str, server: str, groups: set[str], p: Params, out: dict[str, list[float]]) -> None:
    script = SERVER_SCRIPTS[server]
    reps = p.per_round(p.sdk_open_repeat if server in ("sdk", "everything") else p.repeat)
    warmed = False

    def add(key: str, value: float) -> None:
        out.setdefault(f"{key}[{server}]", []).append(value)

    if "memory" in groups and server == "raw":
        # First, before any other figure: freed heap from earlier opens would
        # otherwise be reused and hide the cost of a connection.
        await _measure_memory(client, script, p, add)
        warmed = True

    if groups & {"small_call", "concurrent", "big"}:
        # The first open of the child also warms imports and the forkserver.
        async with _make_server(client, script).session() as conn:
            warmed = True
            tools = _tools(conn)
            echo, big = tools["echo"], tools["big"]
            for _ in range(10):
                await echo.invoke({"text": "warm"}, None)
            if "small_call" in groups:
                clock = time.perf_counter
                for _ in range(p.per_round(p.small_calls)):
                    t0 = clock()
                    await echo.invoke({"text": "hello"}, None)
                    add("small_call", clock() - t0)
            if "concurrent" in groups:
                await asyncio.gather(*(echo.invoke({"text": "warm"}, None) for _ in range(min(p.conc, 50))))
                for _ in range(p.per_round(p.repeat)):
                    t0 = time.perf_counter()
                    results = await asyncio.gather(*(echo.invoke({"text": f"c{i}"}, None) for i in range(p.conc)))
                    add("concurrent", time.perf_counter() - t0)
                    assert str(results[-1]) == f"c{p.conc - 1}", results[-1]
            if "big" in groups:
                # Warm: the server caches the body; first-use costs on both sides.
                await big.invoke({"size": p.big}, None)
                for _ in range(p.per_round(p.repeat)):
                    gc.collect()
                    base, cpu_base = await _idle_overshoot()
                    t0 = time.perf_counter()
                    result, lates, cpus, loop_cpu = await _with_ticker(big.invoke({"size": p.big}, None))
                    add("big", time.perf_counter() - t0)
                    assert len(result.content[0].text) == p.big
                    del result
                    excess = [max(0.0, late - base) for late in lates]
                    add("stall_max", max(excess, default=0.0))
                    add("stall_total", sum(excess))
                    add("stall_cpu_max", max((max(0.0, c - cpu_base) for c in cpus), default=0.0))
                    add("loop_cpu", max(0.0, loop_cpu - cpu_base * len(cpus)))
                await _measure_big_run(tools, p, add)

    if "spares" in groups:
        await _measure_spares(client, server, script, reps, add, p)

    if "run" in groups and server == "raw":
        await _measure_runs(client, script, reps, add, p)

    if "soak" in groups and server == "raw":
        await _measure_soak(client, script, p, add)

    if "launch" in groups and client == "process" and server == "raw":
        await _measure_launch(p, add)

    if "accounting" in groups and server == "raw" and client == "process":
        await _measure_accounting(p, add)

    if "open" in groups:
        if not warmed:
            async with _make_server(client, script).session() as conn:
                warmed = True
        boxed = client != "lovia" and server == "raw" and _sandbox_available()
        try:
            from lovia_mcp_worker.sandbox import landlock
        except ImportError:  # an older snapshot without the Landlock backend
            landlocked = False
        else:
            landlocked = client == "process" and server == "raw" and landlock.ABI >= landlock.NETWORK_ABI
        # The warm opens first, on their own: a sandboxed open's server is
        # torn down after its close returns, and would share the CPU with
        # the next open (lovia's plugin, which has no sandbox, would then
        # be measured against a busier machine).
        for _ in range(p.per_round(p.open_repeat) if server == "raw" else reps):
            opened, closed = await _timed_open(client, script)
            add("open", opened)
            add("close", closed)
        if boxed:
            await _timed_open(client, script, sandbox=True)  # warm the sandbox path too
        if landlocked:
            await _timed_open(client, script, sandbox="landlock")
        # Each sandboxed open paired with a plain open of its own: the pair shares the moment's load.
        for _ in range(reps if boxed or landlocked else 0):
            if boxed:
                plain, _ = await _timed_open(client, script)
                opened_boxed, _ = await _timed_open(client, script, sandbox=True)
                add("sandbox_cost", opened_boxed - plain)
            if landlocked:
                plain, _ = await _timed_open(client, script)
                opened_ll, _ = await _timed_open(client, script, sandbox="landlock")
                add("sandbox_cost_landlock", opened_ll - plain)


async def _measure_launch(p: Params, add: Any) -> None:
    """The parent-death signal's cost per server start, by the worker's launch code (see the docstring)."""
    import shutil

    try:
        from lovia_mcp_worker.containment import launch
        from lovia_mcp_worker.wire.confinement import Limits
        from lovia_mcp_worker.wire.messages import ServerSpec
    except ImportError:  # an older snapshot with another layout
        return
    true = shutil.which("true")
    chosen = getattr(launch, "_launch_plan", None)
    if true is None or chosen is None:
        return
    spec = ServerSpec(name="true", transport="stdio", command=true, cwd=os.getcwd())
    plans = {
        "bare": lambda limits, argv, box=None: (argv, None),
        "preexec": lambda limits, argv, box=None: (argv, launch._preexec(limits)),
    }
    if getattr(launch, "_SETPRIV", None) is not None:  # else the hook is the launcher's only way
        assert chosen(Limits(), [true])[1] is None, "the launcher no longer takes setpriv without rlimits"
        plans["setpriv"] = chosen

    class Exited(asyncio.SubprocessProtocol):
        def __init__(self) -> None:
            self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def process_exited(self) -> None:
            if not self.done.done():
                self.done.set_result(None)

    async def start(how: str) -> float:
        launch._launch_plan = plans[how]
        try:
            t0 = time.perf_counter()
            transport, exited, _ = await launch.spawn(spec, Exited)
            await exited.done
            took = time.perf_counter() - t0
        finally:
            launch._launch_plan = chosen
        assert transport.get_returncode() == 0, (how, transport.get_returncode())
        transport.close()
        return took

    for how in plans:  # warm: the paths' first use (imports, page faults)
        await start(how)
    for _ in range(p.per_round(p.launch_repeat)):
        for how in [h for h in plans if h != "bare"]:
            bare = await start("bare")
            add(f"pdeathsig_{how}", await start(how) - bare)


async def _measure_spares(client: str, server: str, script: str, reps: int, add: Any, p: Params) -> None:
    """Per-run opens with spares ready (process) against lovia's per-run opens; a waiting spare's cost."""
    spare = client == "process"
    if client == "none" and server != "raw":
        return
    if spare:
        from lovia_mcp import close_spares, warm_spares

    async def timed_open(config: Any) -> float:
        if spare:
            await warm_spares(config)
        t0 = time.perf_counter()
        conn = await config.open()
        took = time.perf_counter() - t0
        assert conn.tools()
        await conn.close()
        return took

    options = {"spares": 1} if spare else {}
    config = _make_server(client, script, **options)
    await timed_open(config)  # warm: imports, the forkserver, node's caches
    if client != "none":
        for _ in range(reps):
            add("spare_open_3p" if server == "everything" else "spare_open", await timed_open(config))
    if server != "raw":
        if spare:
            await close_spares()
        return

    async def timed_setup(configs: list[Any]) -> float:
        if client == "lovia":
            from lovia.plugins.mcp import MCP as LoviaMCP

            plugin: Any = LoviaMCP(*configs)
        else:
            from lovia_mcp import MCP
            from lovia_mcp import warm_spares as warm

            plugin = MCP(*configs)
            if any(c.spares for c in configs):
                await warm(*configs)
        t0 = time.perf_counter()
        instance = await plugin.setup(None)
        took = time.perf_counter() - t0
        assert instance.tools
        await instance.aclose()
        return took

    # Named apart: five configs, five keys, one spare each.
    plain = [_make_server(client, script, name=f"s{i}") for i in range(FIVE)]
    await timed_setup(plain)
    for _ in range(reps):
        took = await timed_setup(plain)
        add("open5", took)
        if client == "lovia":
            add("open5_spares", took)  # lovia has no spares: the same baseline
    if spare:
        spared = [_make_server(client, script, name=f"s{i}", spares=1) for i in range(FIVE)]
        await timed_setup(spared)
        for _ in range(reps):
            add("open5_spares", await timed_setup(spared))
        await close_spares()
        await _measure_waiting_spare(script, add, p)
        for _ in range(reps):
            add("crash_retry", await _crash_retry(standby=False))
            add("crash_retry_standby", await _crash_retry(standby=True))


class _PhaseTimer:
    """A plugin around another that stamps a run's phases: its setup, and its close at the run's end."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.setup_took = 0.0
        self.close_took = 0.0

    async def setup(self, ctx: Any) -> Any:
        import dataclasses

        t0 = time.perf_counter()
        instance = await self.inner.setup(ctx)
        self.setup_took = time.perf_counter() - t0
        inner_close = instance.aclose

        async def aclose() -> None:
            t1 = time.perf_counter()
            try:
                await inner_close()
            finally:
                self.close_took = time.perf_counter() - t1

        return dataclasses.replace(instance, aclose=aclose)


async def _drain_closes() -> float:
    """Wait for the closes still under way in the background (lovia-mcp); how long that took."""
    try:
        from lovia_mcp.client import closing
    except ImportError:  # before issue 19 every close finished inside the run
        return 0.0
    t0 = time.perf_counter()
    await closing.wait_closed()
    return time.perf_counter() - t0


async def _measure_big_run(tools: dict[str, Any], p: Params, add: Any) -> None:
    """A whole ``Runner.run`` whose one tool call returns the big result, on the open connection's tools."""
    from lovia import Agent, Runner
    from lovia.testing import ScriptedProvider, call, text

    big = next(name for name in tools if name.endswith("big"))

    async def one() -> tuple[Any, list[float], list[float], float]:
        model = ScriptedProvider([call(big, {"size": p.big}), text("done")])
        agent = Agent(name="bench", model=model, tools=list(tools.values()))  # lovia's default output cap
        return await _with_ticker(Runner.run(agent, "go"))

    await one()  # warm
    for _ in range(p.per_round(p.repeat)):
        gc.collect()
        base, _ = await _idle_overshoot()
        t0 = time.perf_counter()
        result, lates, _, _ = await one()
        add("big_run", time.perf_counter() - t0)
        assert result.output == "done", result.output
        del result
        add("stall_run_max", max((max(0.0, late - base) for late in lates), default=0.0))


async def _measure_runs(client: str, script: str, reps: int, add: Any, p: Params) -> None:
    """Whole ``Runner.run`` calls: a real Agent, one tool call on the first of n per-run servers."""
    from lovia import Agent, Runner
    from lovia.testing import ScriptedProvider, call, text

    spare = client == "process"
    if spare:
        from lovia_mcp import close_spares, warm_spares

        if p.refills_in_run:
            from lovia_mcp.opening import spares

            spares.run_began = lambda: None  # the pool never learns of a run in progress

    def plugin_of(configs: list[Any]) -> Any:
        if client == "lovia":
            from lovia.plugins.mcp import MCP as LoviaMCP

            return LoviaMCP(*configs)
        from lovia_mcp import MCP

        return MCP(*configs)

    class SlowModel(ScriptedProvider):  # type: ignore[misc]
        """Answers after MODEL_LATENCY, as a model over the network would (the loop idle meanwhile)."""

        async def stream(self, *args: Any, **kw: Any) -> Any:
            await asyncio.sleep(MODEL_LATENCY)
            async for delta in super().stream(*args, **kw):
                yield delta

    async def one_run(configs: list[Any], *keys: str, slow: bool = False) -> None:
        timer = _PhaseTimer(plugin_of(configs))
        model = (SlowModel if slow else ScriptedProvider)([call("s0__echo", {"text": "hi"}), text("done")])
        agent = Agent(name="bench", model=model, plugins=[timer])
        t0 = time.perf_counter()
        result = await Runner.run(agent, "go")
        took = time.perf_counter() - t0
        assert result.output == "done", result.output
        if slow:
            await _drain_closes()
            for key in keys:
                add(key, took - 2 * MODEL_LATENCY)
            return
        # Not timed in the run: the closes a run's end handed to the
        # background (lovia-mcp since issue 19), waited for here so that
        # every sample starts on a quiet machine, as lovia's do.
        drained = await _drain_closes()
        for key in keys:
            add(key, took)
            add(f"{key}_setup", timer.setup_took)
            add(f"{key}_close", timer.close_took)
            add(f"{key}_call", took - timer.setup_took - timer.close_took)
            if client != "lovia":
                add(f"{key}_drain", drained)

    for n in (1, FIVE):
        plain = [_make_server(client, script, name=f"s{i}") for i in range(n)]
        await one_run(plain)  # warm: imports, the forkserver
        # Five servers without spares: ~0.1 s a run, the two modes ~10 %
        # apart on a noisy machine: the warm open's count of samples.
        for _ in range(p.per_round(p.open_repeat) if n == FIVE else reps):
            await asyncio.sleep(p.run_gap)
            # lovia has no spares: its plain run is the baseline of both.
            await one_run(plain, f"run{n}", *([f"run{n}_spares"] if client == "lovia" else []))
        if n == FIVE and p.run_gap:
            for _ in range(reps):
                await one_run(plain, "run5_b2b")
        if n == FIVE and client == "lovia":
            for _ in range(reps):
                await one_run(plain, "run5_spares_model", slow=True)
        if not spare:
            continue
        spared = [_make_server(client, script, name=f"s{i}", spares=1) for i in range(n)]
        await warm_spares(*spared)
        await one_run(spared)  # warm
        for _ in range(reps):
            await warm_spares(*spared)  # every spare ready (the last run's refills done), not timed
            await one_run(spared, f"run{n}_spares")
        if n == FIVE:
            for _ in range(reps):
                await warm_spares(*spared)
                await one_run(spared, "run5_spares_model", slow=True)
        await close_spares()


class _StandbyReady(logging.Handler):
    """Counts the worker's "standby server ... ready" log records (forwarded to the agent's logging)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "standby server" in record.getMessage():
            self.count += 1
            self.changed.set()


async def _crash_retry(*, standby: bool) -> float:
    """One call whose server exits mid-call (raw_server --crash-after 2) and its retry, timed."""
    import lovia_mcp

    server = lovia_mcp.MCPServerStdio(
        command=sys.executable, args=[CRASH_SERVER, "--crash-after", "2"], spares=1 if standby else 0
    )
    log = logging.getLogger("lovia_mcp")
    ready, level = _StandbyReady(), log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(ready)
    try:
        async with server.session() as conn:
            await conn.call_tool("echo", {"text": "1"})
            while standby and ready.count < 1:
                ready.changed.clear()
                await ready.changed.wait()
            t0 = time.perf_counter()
            result = await conn.call_tool("echo", {"text": "2"})  # the server exits; retried once
            took = time.perf_counter() - t0
            assert str(result) == "2", result
            return took
    finally:
        log.removeHandler(ready)
        log.setLevel(level)


async def _measure_waiting_spare(script: str, add: Any, p: Params) -> None:
    import psutil

    from lovia_mcp import close_spares, warm_spares
    from lovia_mcp.opening import spares

    config = _make_server("process", script, spares=1)
    await warm_spares(config)
    pool = spares._pools[asyncio.get_running_loop()]
    (conn,) = [c for e in pool.entries.values() for c, _ in e.ready]
    procs = [psutil.Process(conn.worker_pid), psutil.Process(conn.server_pid)]

    def cpu() -> float:
        return sum(sum(p.cpu_times()[:2]) for p in procs)

    await asyncio.sleep(p.spare_settle)
    c0 = cpu()
    await asyncio.sleep(p.spare_idle)
    add("spare_idle_cpu", (cpu() - c0) / p.spare_idle)
    add("spare_worker_uss", float(procs[0].memory_full_info().uss))
    add("spare_server_uss", float(procs[1].memory_full_info().uss))
    await close_spares()


def _sandbox_available() -> bool:
    try:
        from lovia_mcp_worker.sandbox.bwrap import BWRAP
    except ImportError:  # an older snapshot without the sandbox
        return False
    return BWRAP is not None


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _agent_fds(client: str) -> int:
    """The agent's open descriptors, less the forkserver's idle workers' sockets (a pool shared by all connections)."""
    idle: set[int] = set()
    if client == "process":
        from lovia_mcp.client import forkserver as _forkserver_mod

        forkserver = getattr(_forkserver_mod, "process_forkserver", None)
        if forkserver is not None and hasattr(forkserver, "_idle"):
            forkserver.idle_pids()  # reads the pool's announcements
            idle = {sock.fileno() for pair in forkserver._idle.values() if pair for sock in pair}
    return len(set(os.listdir("/proc/self/fd")) - {str(fd) for fd in idle})


async def _measure_soak(client: str, script: str, p: Params, add: Any) -> None:
    """Calls per second and the RSS slope over many calls on one connection; the slopes over open/close cycles."""
    import psutil

    calls = max(SOAK_SAMPLES * SOAK_IN_FLIGHT, p.per_round(p.soak_calls))
    batch = calls // SOAK_SAMPLES // SOAK_IN_FLIGHT  # calls per in-flight lane between two samples
    async with _make_server(client, script).session() as conn:
        echo = _tools(conn)["echo"]
        await asyncio.gather(*(echo.invoke({"text": "warm"}, None) for _ in range(SOAK_IN_FLIGHT)))
        worker = psutil.Process(conn.worker_pid) if getattr(conn, "worker_pid", None) else None
        at: list[float] = []
        rss: list[float] = []
        worker_rss: list[float] = []

        async def lane(n: int) -> None:
            for i in range(batch):
                assert str(await echo.invoke({"text": f"{n}.{i}"}, None)) == f"{n}.{i}"

        busy = 0.0
        for k in range(1, SOAK_SAMPLES + 1):
            t1 = time.perf_counter()
            await asyncio.gather(*(lane(n) for n in range(SOAK_IN_FLIGHT)))
            busy += time.perf_counter() - t1
            gc.collect()
            at.append(k * batch * SOAK_IN_FLIGHT)
            rss.append(_rss())
            if worker is not None:
                worker_rss.append(worker.memory_info().rss)
        done = batch * SOAK_IN_FLIGHT * SOAK_SAMPLES
        add("soak_rate", done / busy)
        warm = SOAK_SAMPLES // 10
        add("soak_bytes_per_call", _slope(at[warm:], rss[warm:]))
        if worker_rss:
            add("soak_worker_bytes_per_call", _slope(at[warm:], worker_rss[warm:]))
    cycles = max(SOAK_SAMPLES, p.per_round(p.soak_cycles))
    every = cycles // SOAK_SAMPLES
    at, rss, fds = [], [], []
    for k in range(1, every * SOAK_SAMPLES + 1):
        async with _make_server(client, script).session():
            pass
        if k % every == 0:
            if client != "lovia":
                await _drain_closes()
            gc.collect()
            at.append(k)
            rss.append(_rss())
            fds.append(_agent_fds(client))
    warm = SOAK_SAMPLES // 10
    add("soak_fds_per_cycle", _slope(at[warm:], fds[warm:]))
    add("soak_bytes_per_cycle", _slope(at[warm:], rss[warm:]))


def _idle_worker() -> int | None:
    """The forkserver's idle worker (None before issue 19, or when it has none)."""
    from lovia_mcp.client import forkserver as _forkserver_mod

    forkserver = getattr(_forkserver_mod, "process_forkserver", None)
    idle_pid = getattr(forkserver, "idle_pid", None)
    return None if idle_pid is None else idle_pid(10.0)


async def _measure_memory(client: str, script: str, p: Params, add: Any) -> None:
    import psutil

    first = await _make_server(client, script).open()
    conns: list[Any] = []
    try:
        await _tools(first)["echo"].invoke({"text": "warm"}, None)
        gc.collect()
        await asyncio.sleep(0.05)
        rss0 = _rss()
        for _ in range(p.n_conns):
            conn = await _make_server(client, script).open()
            conns.append(conn)
            await _tools(conn)["echo"].invoke({"text": "hi"}, None)
        gc.collect()
        await asyncio.sleep(0.05)
        add("rss_per_server", (_rss() - rss0) / p.n_conns)
        for conn in conns:
            pid = getattr(conn, "worker_pid", None)
            if pid is not None:
                add("worker_uss", float(psutil.Process(pid).memory_full_info().uss))
        idle = _idle_worker() if client == "process" else None
        if idle is not None:
            add("idle_worker_uss", float(psutil.Process(idle).memory_full_info().uss))
    finally:
        everything = [first, *conns]
        if client == "lovia":
            # anyio transports must close in the task that opened them.
            for conn in reversed(everything):
                await conn.close()
        else:
            # Concurrently, as a plugin's teardown of several servers may.
            # (Before b994689, with isolation="none", each sequential close
            # waited seconds for every other open connection's host.)
            await asyncio.gather(*(conn.close() for conn in everything))


# Windows per accounting sample: enough CPU time (a few ms) for process_time's resolution.
ACCOUNTING_WINDOWS = 3000


async def _measure_accounting(p: Params, add: Any) -> None:
    """The per-call accounting's CPU per window, on a sleeping child's tree: cgroup (where one can be made) and watch."""
    from lovia_mcp_worker.containment import cgroup, cgroup_layout, guard
    from lovia_mcp_worker.session.accounting import Accounting
    from lovia_mcp_worker.session.generation import Generation
    from lovia_mcp_worker.wire.confinement import Limits

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    made: Any = None
    try:
        trees: list[tuple[str, Any]] = []
        where = cgroup_layout.layout()
        if where is not None:
            made = cgroup.GenerationCgroup.create(where, 1, Limits())
            made.enter(child.pid)
            trees.append(("accounting_cgroup", cgroup.CgroupTree(made)))
        watch = guard.WatchTree(subreaper=False, generations=lambda: [])
        watch.attach(child.pid)
        trees.append(("accounting_watch", watch))
        for key, tree in trees:
            gen = Generation(1)
            gen.tree = tree
            books = Accounting()
            books.end(books.begin(gen, None))
            for _ in range(p.per_round(p.repeat)):
                t0 = time.process_time()
                for _ in range(ACCOUNTING_WINDOWS):
                    window = books.begin(gen, None)
                    books.end(window)
                    books.answered(window)
                add(key, (time.process_time() - t0) / ACCOUNTING_WINDOWS)
                if key == "accounting_watch":
                    t0 = time.process_time()
                    for _ in range(ACCOUNTING_WINDOWS // 300):
                        windows = [books.begin(gen, None) for _ in range(300)]
                        for w in windows:
                            books.end(w)
                    add("accounting_burst", (time.process_time() - t0) / (ACCOUNTING_WINDOWS // 300 * 300))
            books.close()
    finally:
        child.kill()
        child.wait()
        if made is not None:
            made.kill(0.0)
            made.remove()


def _configure_otel() -> None:
    """An OpenTelemetry SDK as an application would set one up (spans batched to an exporter that drops them)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)


async def _child_main(client: str, servers: list[str], groups: set[str], p: Params) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    if os.environ.get(OTEL_ENV) == "1":
        _configure_otel()
    for server in servers:
        # Only the groups with a figure on this server (server-everything has only a spares figure).
        await _measure_server(client, server, groups & {f.group for f in FIGURES if server in f.servers}, p, out)
    return out


# --------------------------------------------------------------------------- #
# First open: a fresh agent process per sample
# --------------------------------------------------------------------------- #
# Imports only the client package, opens one connection and reports the
# system-wide monotonic clock when the tool list is in hand (CLOCK_MONOTONIC
# is shared by all processes on Linux, so the parent's start stamp compares).
FIRST_OPEN_CODE = """
import asyncio, sys, time
client, script = sys.argv[1], sys.argv[2]
if client == "lovia":
    from lovia.plugins.mcp import MCPServerStdio
    server = MCPServerStdio(command=sys.executable, args=[script])
else:
    from lovia_mcp import MCPServerStdio
    server = MCPServerStdio(command=sys.executable, args=[script], isolation=client)

async def main():
    async with server.session() as conn:
        assert conn.tools()
        sys.stdout.write(repr(time.monotonic()) + "\\n")
        sys.stdout.flush()

asyncio.run(main())
"""


def _compile_bytecode() -> None:
    """Compile lovia-mcp's packages' bytecode where the first-open children import them from.

    A fresh process imports lovia's modules from cached bytecode (pip compiles
    site-packages at install, and Python writes the cache on a first import).
    A source tree run with ``PYTHONDONTWRITEBYTECODE=1`` has none, so without
    this every first-open sample would compile lovia-mcp's modules from
    source, in the agent and again in its forkserver: a cost no installed
    agent pays, counted against lovia-mcp alone (~80 ms of CPU on a loaded
    2-core machine, a ratio of about 0.75 where it is 0.6 with the cache).
    The cache is ``__pycache__`` beside the sources, as an install has it.
    """
    import compileall
    import importlib.util

    for name in ("lovia_mcp", "lovia_mcp_worker"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            if not compileall.compile_dir(folder, quiet=1):
                _log(f"{folder}: some modules did not compile; first open compiles them in every sample")
    lovia = importlib.util.find_spec("lovia")
    if lovia is not None and lovia.origin and not os.path.exists(lovia.cached or ""):
        _log(f"{lovia.origin} has no cached bytecode: lovia's first open compiles its modules in every sample")


def _first_open_sample(client: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(
        # -P: no current directory on sys.path, so nothing stray is imported.
        [sys.executable, "-P", "-c", FIRST_OPEN_CODE, client, SERVER_SCRIPTS["raw"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"first-open child ({client}) failed: {proc.stderr[-2000:]}")
    return float(proc.stdout.split()[0]) - t0


# --------------------------------------------------------------------------- #
# Cold start: a package server's first open, unlocked against locked
# --------------------------------------------------------------------------- #
COLD_SERVERS: Final = {
    "uvx": {"command": "uvx", "args": ["mcp-server-time@2026.10.19"]},
    "npx": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31"]},
}
# A first open through a package manager may resolve over the network.
COLD_TIMEOUT: Final = 300.0
# What uvx and npx need from the environment to reach a registry (behind a
# TLS-intercepting proxy, trust is given by these): passed when set.
COLD_INHERIT: Final = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "UV_NATIVE_TLS",
    "UV_INDEX_URL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lovia_mcp", *args], capture_output=True, text=True, timeout=COLD_TIMEOUT, env=env
    )


def _cold_open(config: Path, server: str, env: dict[str, str]) -> float:
    done = _cli("check", "--json", "--config", str(config), "--server", server, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"check of {server} ({config}) failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout)[0]["open_seconds"])


def _cold_start(repeat: int) -> list[dict[str, Any]]:
    """Each package server's first open, unlocked and locked, medians of ``repeat`` interleaved samples."""
    import shutil

    # uv comes with the project's test extra, into this interpreter's environment.
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    missing = [c for c in ("uvx", "npx", "node") if shutil.which(c) is None]
    if missing:
        _log(f"cold start: {', '.join(missing)} not on PATH; the figure is skipped")
        return []
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        env = {**os.environ, "LOVIA_MCP_CACHE_DIR": os.path.join(tmp, "cache")}
        unlocked, locked = Path(tmp, "unlocked", ".mcp.json"), Path(tmp, "locked", ".mcp.json")
        for config in (unlocked, locked):
            config.parent.mkdir()
            inherit = [name for name in COLD_INHERIT if name in os.environ]
            servers = {name: {**entry, "inherit_env": inherit} for name, entry in COLD_SERVERS.items()}
            config.write_text(json.dumps({"mcpServers": servers}))
        t0 = time.monotonic()
        done = _cli("lock", "--config", str(locked), env=env)
        if done.returncode != 0:
            _log(
                f"cold start: lovia-mcp lock failed (no registry here?); the figure is skipped:\n{done.stderr[-1000:]}"
            )
            return []
        _log(f"cold start: locked both servers in {time.monotonic() - t0:.1f} s")
        # The server itself: the lock's own launch, as a plain command (no lock, no cache check).
        direct = Path(tmp, "direct", ".mcp.json")
        direct.parent.mkdir()
        os.environ["LOVIA_MCP_CACHE_DIR"] = env["LOVIA_MCP_CACHE_DIR"]
        from lovia_mcp import load_servers

        servers = load_servers(locked)
        launched = {s.name: {"command": s.command, "args": s.args, "env": s.env or {}} for s in servers}  # type: ignore[attr-defined]
        direct.write_text(json.dumps({"mcpServers": launched}))
        configs = {"unlocked": unlocked, "locked": locked, "direct": direct}
        for server in COLD_SERVERS:
            _cold_open(unlocked, server, env)  # warms uvx's and npx's own caches
            samples: dict[str, list[float]] = {kind: [] for kind in configs}
            for i in range(repeat):
                for kind in _rotated(tuple(configs), i):
                    samples[kind].append(_cold_open(configs[kind], server, env))
            u, k, d = (statistics.median(samples[kind]) for kind in configs)
            check, files = _stamp_check(next(s for s in servers if s.name == server))
            rows.append(
                {
                    "server": server,
                    "unlocked": u,
                    "locked": k,
                    "direct": d,
                    "ratio": k / u,
                    "stamp_ms": check * 1000,
                    "files": files,
                    "samples": samples,
                }
            )
            _log(
                f"cold start: {server}: unlocked {u:.3f} s, locked {k:.3f} s, direct {d:.3f} s (median of {repeat}); "
                f"the stamp check before each start {check * 1000:.2f} ms ({files} entries)"
            )
    return rows


# Samples of the stamp check a locked server's every start makes (a walk of metadata, milliseconds).
STAMP_SAMPLES: Final = 21


def _stamp_check(server: Any) -> tuple[float, int]:
    """The worker's check of a locked tree before a start (a restart, say), when nothing changed: median seconds, entries."""
    from lovia_mcp_worker.wire.sealed import stamp

    from lovia_mcp.lock import packages

    package = server.locked.entry.package
    root = str(packages.covered(packages.entry_dir(package), package.ecosystem))
    seconds = []
    for _ in range(STAMP_SAMPLES):
        t0 = time.perf_counter()
        stamp(root)
        seconds.append(time.perf_counter() - t0)
    entries = sum(len(dirs) + len(files) for _, dirs, files in os.walk(root))
    return statistics.median(seconds), entries


# The part of the lock page (docs/lock.md) that ``--cold-start --markdown`` writes.
COLD_BEGIN: Final = "<!-- bench.py --cold-start --markdown: generated table, begin -->"
COLD_END: Final = "<!-- bench.py --cold-start --markdown: generated table, end -->"


def _cold_markdown(rows: list[dict[str, Any]], repeat: int, load_before: tuple[float, float, float]) -> str:
    """The cold-start figures as a markdown table, with the run's conditions above it."""
    lines = [
        f"Measured by `.venv/bin/python scripts/bench.py --cold-start --markdown docs/lock.md` on "
        f"{os.cpu_count()} CPUs; load average {load_before[0]:.2f} before and {os.getloadavg()[0]:.2f} after; "
        f"medians of {repeat} interleaved samples.",
        "",
        "| server | unlocked (caches warm) | locked | locked / unlocked | the server itself "
        "| the check before each start (entries) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        command = " ".join([COLD_SERVERS[r["server"]]["command"], *COLD_SERVERS[r["server"]]["args"]])
        lines.append(
            f"| `{command}` | {r['unlocked']:.2f} s | {r['locked']:.2f} s | {r['ratio']:.2f} | {r['direct']:.2f} s "
            f"| {r['stamp_ms']:.1f} ms ({r['files']:,}) |"
        )
    return "\n".join(lines)


def _cold_table(rows: list[dict[str, Any]]) -> str:
    lines = ["server  first open unlocked  locked    locked / unlocked  the server itself"]
    for r in rows:
        lines.append(
            f"{r['server']:<6}  {r['unlocked']:>17.3f} s  {r['locked']:>6.3f} s  {r['ratio']:>17.2f}"
            f"  {r['direct']:>15.3f} s"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- #
# Parent: orchestration, table, JSON
# --------------------------------------------------------------------------- #
def _rotated(items: tuple[str, ...], k: int) -> list[str]:
    k %= len(items)
    return list(items[k:] + items[:k])


def _run_child(client: str, servers: list[str], groups: set[str], p: Params) -> dict[str, list[float]]:
    with tempfile.NamedTemporaryFile("r", suffix=".json", prefix="bench-") as f:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            client,
            "--child-servers",
            ",".join(servers),
            "--child-groups",
            ",".join(sorted(groups)),
            "--child-params",
            json.dumps(p.__dict__),
            "--child-out",
            f.name,
        ]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"child for {client} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        data: dict[str, list[float]] = json.load(f)
        return data


def _machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions: dict[str, str] = {}
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("lovia", "mcp", "lovia-mcp", "msgspec", "psutil"):
        with contextlib.suppress(PackageNotFoundError):
            versions[dist] = version(dist)
    import importlib.util

    source = {}
    for name in ("lovia_mcp", "lovia_mcp_worker"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None and spec.origin else ""
        folder = os.path.dirname(os.path.dirname(origin))
        commit = ""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            commit = subprocess.run(
                ["git", "-C", folder, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        source[name] = f"{origin} ({'git ' + commit if commit else 'not a git checkout'})"
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "nproc": nproc,
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "source": source,
    }


def _label(fig: Figure, server: str, p: Params) -> str:
    text = fig.label.format(
        conc=p.conc,
        big=_human_bytes(p.big),
        n=p.n_conns,
        five=FIVE,
        inflight=SOAK_IN_FLIGHT,
        soak_calls=f"{p.soak_calls:,}",
        soak_cycles=f"{p.soak_cycles:,}",
    )
    return f"{text} [{server}]"


def _summarise(samples: dict[str, dict[str, list[float]]], p: Params, wanted: set[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for fig in FIGURES:
        if fig.key not in wanted:
            continue
        for server in fig.servers:
            key = f"{fig.key}[{server}]"
            values: dict[str, float | None] = {}
            counts: dict[str, int] = {}
            for client in CLIENTS:
                got = samples.get(client, {}).get(key, [])
                counts[client] = len(got)
                values[client] = statistics.median(got) * fig.scale if got else None
            base, iso = values["lovia"], values["process"]
            ratio = iso / base if iso is not None and base else None
            met: bool | None = None
            none = values["none"]
            if server != fig.servers[0]:
                pass  # reported, not judged
            elif fig.goal_kind == "ratio" and ratio is not None:
                met = ratio <= fig.goal  # type: ignore[operator]
            elif fig.goal_kind == "ratio_none" and iso is not None and none:
                met = iso / none <= fig.goal  # type: ignore[operator]
            elif fig.goal_kind == "abs" and iso is not None:
                met = iso <= fig.goal  # type: ignore[operator]
            goal = None
            if server != fig.servers[0]:
                pass
            elif fig.goal_kind == "ratio":
                goal = f"ratio <= {fig.goal:g}"
            elif fig.goal_kind == "ratio_none":
                goal = f"<= {fig.goal:g}x none"
            elif fig.goal_kind == "abs":
                goal = f"<= {fig.goal:g} {fig.unit}"
            rows.append(
                {
                    "figure": fig.key,
                    "server": server,
                    "key": key,
                    "label": _label(fig, server, p),
                    "unit": fig.unit,
                    "values": values,
                    "samples": counts,
                    "ratio": ratio,
                    "goal": goal,
                    "met": met,
                }
            )
    return rows


def _fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _table(rows: list[dict[str, Any]]) -> str:
    head = ["figure", "unit", *(CLIENT_LABELS[c] for c in CLIENTS), "ratio process/in-process", "goal", "met?"]
    body = []
    for r in rows:
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        body.append(
            [
                r["label"],
                r["unit"],
                *(_fmt(r["values"][c]) for c in CLIENTS),
                "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}",
                r["goal"] or "-",
                met,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(head, widths)), "-+-".join("-" * w for w in widths)]
    for row in body:
        lines.append(
            " | ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
        )
    return "\n".join(lines)


def _wanted(only: list[str] | None) -> set[str]:
    if not only:
        return {f.key for f in FIGURES}
    out: set[str] = set()
    for item in only:
        for name in item.split(","):
            name = name.strip()
            if name in FIGURE_BY_KEY:
                out.add(name)
            elif name in GROUPS or name in ("stall", "memory", "rss", "uss"):
                group = {"stall": "big", "rss": "memory", "uss": "memory"}.get(name, name)
                out.update(f.key for f in FIGURES if f.group == group)
            else:
                raise SystemExit(f"unknown figure {name!r}; choose from {', '.join([*FIGURE_BY_KEY, *GROUPS])}")
    return out


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, few repetitions, the clients side by side (smoke run, ~13 s; judges nothing)",
    )
    ap.add_argument("--repeat", type=int, default=None, help="samples per figure per client (default 12; quick 1)")
    ap.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds of child processes (default 3; quick 1)"
    )
    ap.add_argument(
        "--only",
        action="append",
        help="figure or group (repeatable, comma-separated): " + ", ".join([*FIGURE_BY_KEY, *GROUPS]),
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument(
        "--markdown",
        metavar="PAGE",
        help="also write the table into PAGE (docs/performance.md), between its generated-table markers",
    )
    ap.add_argument(
        "--otel",
        action="store_true",
        help="configure an OpenTelemetry SDK (a tracer provider, spans batched and dropped) in every client",
    )
    ap.add_argument(
        "--big", type=int, default=None, help="bytes of the big result (default 10_000_000; quick 1_000_000)"
    )
    ap.add_argument("--conc", type=int, default=None, help="concurrent calls (default 300; quick 100)")
    ap.add_argument("--conns", type=int, default=None, help="extra connections for the RSS figure (default 5; quick 2)")
    ap.add_argument(
        "--refills-in-run",
        action="store_true",
        help="refills start while a run goes on, as before issue 19 (for run5_spares_model)",
    )
    ap.add_argument(
        "--cold-start",
        action="store_true",
        help="only the first open of a real uvx and npx server, unlocked against locked (needs the registries once)",
    )
    ap.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    ap.add_argument("--child-servers", help=argparse.SUPPRESS)
    ap.add_argument("--child-groups", help=argparse.SUPPRESS)
    ap.add_argument("--child-params", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        p = Params(**json.loads(args.child_params))
        groups = set(args.child_groups.split(","))
        data = asyncio.run(_child_main(args.child, args.child_servers.split(","), groups, p))
        Path(args.child_out).write_text(json.dumps(data))
        return 0

    if args.cold_start:
        repeat = args.repeat or (1 if args.quick else 5)
        load_before = os.getloadavg()
        rows = _cold_start(repeat)
        print(json.dumps(rows, indent=2) if args.json else _cold_table(rows))
        if args.markdown and rows:
            write_between(Path(args.markdown), COLD_BEGIN, COLD_END, _cold_markdown(rows, repeat, load_before))
            _log(f"wrote the cold-start table into {args.markdown}")
        return 0

    if args.otel:
        os.environ[OTEL_ENV] = "1"  # the children inherit it
    quick = args.quick
    repeat = args.repeat or (1 if quick else 12)
    p = Params(
        rounds=args.rounds or (1 if quick else 3),
        repeat=repeat,
        small_calls=30 if quick else 600,
        conc=args.conc or (100 if quick else 300),
        big=args.big or (1_000_000 if quick else 10_000_000),
        n_conns=args.conns or (2 if quick else 5),
        sdk_open_repeat=1 if quick else max(3, repeat // 2),
        open_repeat=1 if quick else 3 * repeat,
        refills_in_run=args.refills_in_run,
        spare_idle=SPARE_IDLE_SECONDS_QUICK if quick else SPARE_IDLE_SECONDS,
        spare_settle=SPARE_SETTLE_SECONDS_QUICK if quick else SPARE_SETTLE_SECONDS,
        run_gap=0.0 if quick else RUN_GAP,
        launch_repeat=10 if quick else LAUNCH_REPEAT,
        soak_calls=2_000 if quick else 100_000,
        soak_cycles=20 if quick else 300,
    )
    wanted = _wanted(args.only)
    groups = {FIGURE_BY_KEY[k].group for k in wanted}
    child_groups = groups - {"first_open"}
    servers = sorted({s for k in wanted for s in FIGURE_BY_KEY[k].servers if FIGURE_BY_KEY[k].group != "first_open"})

    if "everything" in servers and not (os.path.exists(SERVER_SCRIPTS["everything"]) and _command(".js")[0] != "node"):
        _log("server-everything is not installed (scripts/thirdparty.sh) or node is missing: its figure is skipped")
        servers.remove("everything")
    started = time.monotonic()
    load_before = os.getloadavg()
    samples: dict[str, dict[str, list[float]]] = {c: {} for c in CLIENTS}

    def child(r: int, client: str) -> dict[str, list[float]]:
        t0 = time.monotonic()
        got = _run_child(client, servers, child_groups, p)
        _log(
            f"round {r + 1}/{p.rounds}: {client} ({', '.join(sorted(child_groups))} on {', '.join(servers)}) "
            f"in {time.monotonic() - t0:.1f} s"
        )
        return got

    if child_groups:
        for r in range(p.rounds):
            clients = _rotated(CLIENTS, r)
            if quick:
                # A smoke run judges no figure: the clients' children run side by side.
                with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
                    results = list(pool.map(lambda c: child(r, c), clients))
            else:
                results = [child(r, c) for c in clients]  # one at a time: each measured on a quiet machine
            for client, got in zip(clients, results):
                for k, v in got.items():
                    samples[client].setdefault(k, []).extend(v)
    if "first_open" in groups:
        _compile_bytecode()
        n = p.repeat if not quick else 1
        for i in range(n):
            t0 = time.monotonic()
            for client in _rotated(CLIENTS, i):
                samples[client].setdefault("first_open[raw]", []).append(_first_open_sample(client))
            _log(f"first open {i + 1}/{n} in {time.monotonic() - t0:.1f} s")
    rows = _summarise(samples, p, wanted)
    report = {
        "command": ("PYTHONPATH=" + os.environ["PYTHONPATH"] + " " if os.environ.get("PYTHONPATH") else "")
        + " ".join(
            [
                os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable,
                os.path.relpath(__file__, ROOT),
                *(sys.argv[1:] if argv is None else argv),
            ]
        ),
        "machine": _machine(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "seconds": round(time.monotonic() - started, 1),
        "params": p.__dict__,
        "clients": CLIENT_LABELS,
        "figures": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        m = report["machine"]
        print(f"command: {report['command']}")
        print(
            f"machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}; "
            + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        )
        print(
            f"load average before/after: {load_before[0]:.2f} / {report['load_average']['after'][0]:.2f}; "
            f"{report['seconds']} s; medians of {p.repeat} samples per figure ({p.small_calls} small calls, "
            f"{p.open_repeat} warm opens of the raw server and five-server runs without spares) "
            f"over {p.rounds} interleaved round(s)"
        )
        print("source: " + "; ".join(m["source"].values()))
        print()
        print(_table(rows))
    if args.markdown:
        _write_markdown(Path(args.markdown), report)
        _log(f"wrote the table into {args.markdown}")
    return 0


# The part of the performance page this script writes; everything else on
# the page is prose kept by hand.
MARK_BEGIN: Final = "<!-- bench.py --markdown: generated table, begin -->"
MARK_END: Final = "<!-- bench.py --markdown: generated table, end -->"


def _markdown(report: dict[str, Any]) -> str:
    """The figures as a markdown table, with the run's conditions (machine, load, samples) above it."""
    m, p = report["machine"], report["params"]
    load = report["load_average"]
    lines = [
        f"Measured by `{report['command']}` on {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}, "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + f"; load average {load['before'][0]:.2f} before and {load['after'][0]:.2f} after; medians of "
        f"{p['repeat']} samples per figure over {p['rounds']} interleaved round(s) ({p['open_repeat']} for the raw "
        "server's warm open and the five-server runs without spares). The ratio is lovia-mcp `process` / lovia's "
        "in-process plugin in the same run.",
        "",
        "| figure | unit | " + " | ".join(CLIENT_LABELS[c] for c in CLIENTS) + " | ratio | target | met |",
        "|---|---|" + "---|" * len(CLIENTS) + "---|---|---|",
    ]
    for r in report["figures"]:
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        values = " | ".join("" if r["values"][c] is None else _fmt(r["values"][c]) for c in CLIENTS)
        lines.append(f"| {r['label']} | {r['unit']} | {values} | {ratio} | {r['goal'] or ''} | {met} |")
    return "\n".join(lines)


def write_between(page: Path, begin: str, end: str, table: str) -> None:
    """Put ``table`` between a page's generated-table markers (bench_gateway.py writes its tables with it too)."""
    text = page.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{page} has no generated-table markers; add the two lines:\n{begin}\n{end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{begin}\n{table}\n{end}{tail}")


def _write_markdown(page: Path, report: dict[str, Any]) -> None:
    write_between(page, MARK_BEGIN, MARK_END, _markdown(report))


if __name__ == "__main__":
    sys.exit(main())
