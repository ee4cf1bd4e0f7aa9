"""Supervision: resource limits on the server's tree (docs/failures.md).

Memory (RSS of the whole tree), CPU seconds and process count: passing one
kills the tree and fails the call with an ``MCPError`` naming the limit and
the figure; the next call gets a fresh server. A result over
``max_result_bytes`` never crosses the pipe; the model gets a short message.

Every greedy tool used here never answers, so a call can only end by the
supervisor stepping in. Allocations and forks are bounded so a 2-core CI
machine stays healthy. Each limit is tested under both enforcement paths
(the ``enforcement`` fixture): the kernel's, through a cgroup per server
generation, and the watch's (cgroups turned off).
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from helpers import ISOLATIONS, alive_after, limit_hit, raw, run, sup
from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry

from lovia_mcp import MCP, Limits
from lovia_mcp.client import worker_link

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")


# The guard samples every 0.1 s; killing takes one SIGKILL round.
LIMIT_REACTION = 1.5
# The call fails as soon as the guard retires the server; the tree kill
# (SIGKILL, no grace after a limit) completes right after.
KILL_DONE_WITHIN = 1.0


@ISOLATIONS
@pytest.mark.timing
def test_memory_over_the_limit_kills_the_tree_with_an_error_naming_limit_and_figure(
    isolation: str, enforcement: str
) -> None:
    async def main() -> None:
        server = sup(isolation, limits=Limits(memory_mb=60))
        async with server.session() as conn:
            old = int(str(await conn.call_tool("pid")))
            err, elapsed = await limit_hit(conn, "hold", {"mb": 150})
            assert err.tool_name == "hold"
            match = re.search(
                r"memory limit: ([\d.]+) MB (resident|in its process tree, where the kernel's OOM "
                r"killer stopped it) .*\(memory_mb=60\)",
                str(err),
            )
            assert match, str(err)
            figure = float(match.group(1))
            if enforcement == "cgroup":
                # The kernel's peak charge: never above the limit.
                assert 0 < figure <= 60, figure
            else:
                # Above the limit, and bounded by the allocation (150 MB plus the
                # interpreter, when the guard's sample comes after the last MB).
                assert 60 < figure <= 190, figure
            assert "Raise Limits(memory_mb=...)" in str(err)
            assert elapsed < LIMIT_REACTION + 1.0, elapsed
            assert (await alive_after([old], KILL_DONE_WITHIN))[0] == []
            new = int(str(await conn.call_tool("pid")))
            assert new != old
            assert str(await conn.call_tool("echo", {"text": "ok"})) == "ok"
            print(f"[{isolation}, {enforcement}] memory limit: killed at {figure:.1f} MB, error after {elapsed:.3f} s")

    run(main())


@ISOLATIONS
@pytest.mark.timing
def test_process_count_over_the_limit_is_killed_even_as_root(isolation: str, enforcement: str) -> None:
    # RLIMIT_NPROC does not bind root (CI runs as root); the guard's count does.
    n = 40

    async def main() -> None:
        server = sup(isolation, limits=Limits(max_processes=5))
        async with server.session() as conn:
            old = int(str(await conn.call_tool("pid")))
            # One fork every 20 ms: uncontained, 40 children in 0.8 s.
            err, elapsed = await limit_hit(conn, "fork", {"n": n, "interval": 0.02})
            match = re.search(r"process limit: (\d+) (processes|tasks) in its tree.* \(max_processes=5\)", str(err))
            assert match, str(err)
            figure = int(match.group(1))
            if enforcement == "cgroup":
                assert figure == 5, figure  # pids.max: the sixth fork was refused
            else:
                assert 5 < figure < n + 1, figure  # contained before the loop finished
            assert elapsed < LIMIT_REACTION, elapsed
            assert (await alive_after([old], KILL_DONE_WITHIN))[0] == []
            assert int(str(await conn.call_tool("pid"))) != old
            # Every forked child went with it: the tree is the fresh server alone.
            assert (await conn.stats()).processes == 1
            print(
                f"[{isolation}, {enforcement}, uid {os.getuid()}] process limit: killed at {figure} after {elapsed:.3f} s"
            )

    run(main())


@pytest.mark.timing
def test_cpu_over_the_limit_is_killed_and_reported_as_a_cpu_limit(enforcement: str) -> None:
    async def main() -> None:
        server = raw(auto_reconnect=False, limits=Limits(cpu_seconds=1))
        async with server.session() as conn:
            old = json.loads(str(await conn.call_tool("pid")))["pid"]
            err, elapsed = await limit_hit(conn, "burn", {"seconds": 10})
            assert "CPU limit" in str(err) and "cpu_seconds=1" in str(err)
            assert "Raise Limits(cpu_seconds=...)" in str(err)
            # 1 s of CPU is more than 1 s of wall time on a busy machine.
            assert elapsed < 1.0 + LIMIT_REACTION + 2.0, elapsed
            assert (await alive_after([old], KILL_DONE_WITHIN))[0] == []
            assert json.loads(str(await conn.call_tool("pid")))["pid"] != old
            print(f"CPU limit: {err.args[0]!r} after {elapsed:.3f} s")

    run(main())


def test_result_over_max_result_bytes_never_crosses_the_pipe_and_the_model_gets_a_short_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received = [0]
    original = worker_link.FrameReader.buffer_updated

    def counting(self: worker_link.FrameReader, nbytes: int) -> None:
        received[0] += nbytes
        original(self, nbytes)

    monkeypatch.setattr(worker_link.FrameReader, "buffer_updated", counting)
    size = 20 * 1024 * 1024
    cap = 1024 * 1024

    async def main() -> None:
        server = raw(limits=Limits(max_result_bytes=cap))
        async with server.session() as conn:
            pid = json.loads(str(await conn.call_tool("pid")))["pid"]
            provider = ScriptedProvider([call("raw__big", {"size": size}), text("done")])
            agent = Agent(name="a", model=provider, plugins=[MCP(conn)])
            before = received[0]
            result = await Runner.run(agent, "big please")
            during = received[0] - before
            [output] = [e.output for e in result.entries if isinstance(e, ToolResultEntry)]
            assert output.startswith(
                "Tool error: MCP tool 'big' failed: the server's message was larger than max_result_bytes=1,048,576"
            )
            assert "Raise Limits(max_result_bytes=...)" in output
            assert len(output) < 1000, output
            assert during < 64 * 1024, during  # the 20 MB result stayed in the worker
            # The connection stays alive: same server.
            assert json.loads(str(await conn.call_tool("pid")))["pid"] == pid
            print(f"too large: {len(output)} chars to the model, {during} bytes over the pipe")

    run(main())


def test_memory_limit_counts_the_whole_tree_not_one_process(enforcement: str) -> None:
    # Four children of 25 MB each: none is over 60 MB, the tree is.
    async def main() -> None:
        server = sup(limits=Limits(memory_mb=60))
        async with server.session() as conn:
            err, _ = await limit_hit(conn, "hold_in_children", {"n": 4, "mb": 25})
            assert "memory limit" in str(err) and "in its process tree" in str(err)
            assert str(await conn.call_tool("echo", {"text": "ok"})) == "ok"
            assert (await conn.stats()).processes == 1

    run(main())


@pytest.mark.timeout(20)
@ISOLATIONS
@pytest.mark.timing
def test_cpu_of_short_lived_subprocesses_counts_toward_the_cpu_limit(isolation: str, enforcement: str) -> None:
    # Five children of 0.4 s CPU each, run one after another and reaped by the
    # server: each stays under RLIMIT_CPU, and none is alive for long; their
    # 2 s together pass cpu_seconds=1.
    async def main() -> None:
        server = sup(isolation, limits=Limits(cpu_seconds=1))
        async with server.session() as conn:
            err, elapsed = await limit_hit(conn, "burn_in_subprocesses", {"n": 5, "seconds": 0.4})
            match = re.search(r"CPU limit: ([\d.]+) s of CPU in its process tree \(cpu_seconds=1\)", str(err))
            assert match, err
            # Stopped near the limit, well before the 2 s of work were done
            # (had it finished, the call would have answered "done").
            assert 1.0 <= float(match.group(1)) < 1.8, match.group(1)
            print(f"[{isolation}] {err.args[0]!r} after {elapsed:.3f} s")

    run(main())
