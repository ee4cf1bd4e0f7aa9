"""Warnings inside a worker go to the agent's logging, not to stderr (issue 13, item 7).

A worker's stderr is the agent's: a warning printed there would break
"nothing is printed by the library". ``serve`` routes Python warnings to
logging, which the worker forwards to the agent as ``Log`` messages (on the
``lovia_mcp`` logger). And a whole session under ``python -X dev`` (where
``ResourceWarning`` is shown), stdio and HTTP in process isolation, leaves
the agent's stderr empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import textwrap
import warnings

import pytest
from helpers import PY, SERVERS, run
from lovia_mcp_worker.forkserver import worker
from lovia_mcp_worker.wire.framing import FrameReader
from lovia_mcp_worker.wire.messages import Log, WorkerMessage, agent_decoder

# Bound on a Log frame reaching the test's end of the socket.
FRAME_WAIT = 10.0
# Bound on the -X dev session (two worker starts, the SDK's import, uvicorn).
SESSION_WAIT = 120.0


def test_a_warning_raised_in_the_worker_reaches_the_agent_as_a_log_message_not_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    before = list(logging.getLogger().handlers)

    async def scenario() -> list[WorkerMessage]:
        agent_end, worker_end = socket.socketpair()
        agent_end.setblocking(False)
        worker_end.setblocking(False)
        got: list[WorkerMessage] = []
        logged = asyncio.Event()

        def received(msg: WorkerMessage) -> None:
            got.append(msg)
            if isinstance(msg, Log) and "leaked on purpose" in msg.message:
                logged.set()

        reader: FrameReader[WorkerMessage] = FrameReader(
            agent_decoder(), received, lambda why: None, cap=1 << 20, peer="the worker"
        )
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(lambda: reader, sock=agent_end)
        serving = asyncio.ensure_future(worker.serve(worker_end))
        try:
            # serve() routes warnings to the agent once connected (before,
            # to stderr): yield to it until its log handler says so (loop
            # turns, not time).
            for _ in range(10_000):
                added = [h for h in logging.getLogger().handlers if h not in before]
                if serving.done() or any(getattr(h, "connected", False) for h in added):
                    break
                await asyncio.sleep(0)
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.warn("leaked on purpose", ResourceWarning, stacklevel=1)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(logged.wait(), FRAME_WAIT)
        finally:
            transport.close()  # EOF: the worker ends
            await asyncio.wait_for(serving, FRAME_WAIT)
            worker_end.close()
        return got

    got = run(scenario())
    err = capfd.readouterr().err
    logs = [m for m in got if isinstance(m, Log) and "leaked on purpose" in m.message]
    print(f"forwarded: {[m.message for m in logs][:1]}")
    assert "leaked on purpose" not in err, err
    assert logs and logs[0].level >= 30 and "ResourceWarning" in logs[0].message
    # The routing is the worker's own: once serve() returns, logging is as it was.
    assert logging.getLogger().handlers == before


def test_a_warning_in_a_worker_not_yet_connected_goes_to_stderr_as_without_the_handler(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # An idle worker installs its handlers ahead of its agent: until then a
    # warning must still reach stderr (the last-resort handler), not vanish.
    before = list(logging.getLogger().handlers)

    async def scenario() -> None:
        served = worker._Served()  # noqa: SLF001 - what an idle worker makes ahead
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.warn("warned before the agent", ResourceWarning, stacklevel=1)
        finally:
            served.undo()

    run(scenario())
    assert "warned before the agent" in capfd.readouterr().err
    assert logging.getLogger().handlers == before


# Above the session's own bound: the subprocess times out first and says so.
@pytest.mark.timeout(SESSION_WAIT + 60)
def test_a_session_under_dev_mode_prints_nothing_on_the_agents_stderr_for_stdio_and_http() -> None:
    script = textwrap.dedent(f"""
        import asyncio, subprocess, sys
        from lovia_mcp import MCPServerStdio, MCPServerStreamableHTTP

        async def main(url):
            for _ in range(2):
                async with MCPServerStdio(command={PY!r}, args=[{str(SERVERS / "raw_server.py")!r}], name="raw").session() as c:
                    await c.call_tool("echo", {{"text": "x"}})
                async with MCPServerStreamableHTTP(url=url, name="web").session() as c:
                    await c.call_tool("echo", {{"text": "x"}})

        server = subprocess.Popen([{PY!r}, {str(SERVERS / "http_server.py")!r}], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        try:
            port = int(server.stdout.readline().split()[1])
            asyncio.run(main(f"http://127.0.0.1:{{port}}/mcp"))
        finally:
            server.terminate()
            server.wait()
            server.stdout.close()
        print("ok")
    """)
    proc = subprocess.run([PY, "-X", "dev", "-c", script], capture_output=True, text=True, timeout=SESSION_WAIT)
    # asyncio's debug mode reports slow callbacks of the agent's own loop on
    # a loaded machine ("Executing <Task ...> took 0.2 seconds"): not ours.
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("Executing <")]
    print(
        f"exit {proc.returncode}; stderr lines: {len(proc.stderr.splitlines())}, not asyncio's slow-callback notes: {len(lines)}"
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert lines == [], "\n".join(lines[:20])
