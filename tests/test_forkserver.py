"""lovia-mcp's own forkserver (lovia_mcp_worker.forkserver.server), through real agent processes.

A worker never re-imports the agent's ``__main__`` (an unguarded script's
top level runs once, however many workers start), and the forkserver goes
with the agent, even one killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PY, RAW_SERVER, alive_after_sync, end_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

# An agent process reports once its workers run: seconds on a loaded machine.
REPORT_WAIT = 15.0


def _agent_script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "agent.py"
    script.write_text(
        "import asyncio, json, sys\n"
        "from lovia_mcp import MCPServerStdio\n"
        "from lovia_mcp.client.forkserver import helper_pids\n"
        f"open({str(tmp_path / 'imports.log')!r}, 'a').write('imported\\n')  # unguarded\n"
        "async def main():\n"
        f"    server = MCPServerStdio(command={PY!r}, args=[{RAW_SERVER!r}], name='raw')\n"
        f"{body}"
        "asyncio.run(main())\n"
    )
    return str(script)


@pytest.mark.timeout(30)
def test_an_unguarded_agent_script_runs_once_however_many_workers_start(tmp_path: Path) -> None:
    script = _agent_script(
        tmp_path,
        "    conns = [await server.open() for _ in range(3)]\n"
        "    print(json.dumps([c.worker_pid for c in conns]), flush=True)\n"
        "    assert str(await conns[0].call_tool('echo', {'text': 'hi'})) == 'hi'\n"
        "    for c in conns:\n"
        "        await c.close()\n",
    )
    done = subprocess.run([PY, script], capture_output=True, text=True, timeout=25)
    assert done.returncode == 0, done.stderr
    workers = json.loads(done.stdout.splitlines()[-1])
    assert len(set(workers)) == 3
    assert (tmp_path / "imports.log").read_text() == "imported\n"


@pytest.mark.timeout(30)
def test_the_forkserver_goes_with_an_agent_killed_by_sigkill(tmp_path: Path) -> None:
    script = _agent_script(
        tmp_path,
        "    conn = await server.open()\n"
        "    print(json.dumps({'forkserver': sorted(helper_pids()), 'worker': conn.worker_pid}), flush=True)\n"
        "    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)\n",
    )
    agent = subprocess.Popen([PY, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert agent.stdout is not None
        ready, _, _ = select.select([agent.stdout], [], [], REPORT_WAIT)
        assert ready, "the agent process did not report its pids"
        report = json.loads(agent.stdout.readline())
        # The forkserver, and the idle worker it forked ahead of the next open.
        helpers = report["forkserver"]
        assert 1 <= len(helpers) <= 2 and not set(helpers) & {agent.pid, report["worker"]}
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(5)
        alive, took = alive_after_sync([*helpers, report["worker"]], 2.0)
        assert alive == [], f"still alive {took:.2f} s after the agent's SIGKILL: {alive}"
    finally:
        end_process(agent)


@pytest.mark.timeout(30)
def test_a_workers_exit_status_reaches_the_agent_through_the_forkserver() -> None:
    # The worker is the forkserver's child: the agent learns how it ended
    # from the status socket, not from waitpid.
    import asyncio

    from lovia_mcp.client.channel import ProcessChannel
    from lovia_mcp_worker.wire.framing import frame_cap
    from lovia_mcp_worker.wire.messages import Close, Closed

    async def main() -> None:
        loop = asyncio.get_running_loop()
        killed = ProcessChannel(frame_cap(0))
        why: asyncio.Future[str] = loop.create_future()
        await killed.start(lambda m: None, why.set_result)
        await killed.started()  # the pid comes while Open would be on its way
        assert killed.pid is not None
        os.kill(killed.pid, signal.SIGKILL)
        assert await asyncio.wait_for(why, 10) == "the worker process was killed by SIGKILL"
        await asyncio.wait_for(killed.wait_lost(), 1)
        await killed.aclose()

        closed = ProcessChannel(frame_cap(0))
        replied: asyncio.Future[object] = loop.create_future()
        await closed.start(lambda m: replied.set_result(m) if isinstance(m, Closed) else None, lambda w: None)
        await closed.started()
        closed.send(Close(id=1))
        assert await asyncio.wait_for(replied, 10) == Closed(id=1)
        await closed.aclose()
        assert closed._proc is not None and closed._proc.exitcode == 0  # noqa: SLF001

    asyncio.run(main())
