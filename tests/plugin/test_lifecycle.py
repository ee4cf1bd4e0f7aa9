"""Connection lifecycle end to end, in both isolation modes.

Per run: a config is opened in setup and closed when the run ends, worker and
server processes included. Persistent: a connection from ``server.session()``
is never closed by a run, is reused across runs and serves concurrent runs.
Crashes: with ``auto_reconnect`` the next call works, and the call that
crashed is retried once on a fresh server; lovia's own in-process plugin does
not recover. And the agent process never needs ``mcp`` in process mode.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, ROOT, drive, outputs, pid_alive, raw, raw_args, run
from lovia import Agent, Runner
from lovia.plugins import mcp as lovia_mcp_plugin
from lovia.run_context import RunContext
from lovia.runtime.result import RunResult
from lovia.testing import ScriptedProvider, batch, call, text

from lovia_mcp import MCP, MCPError


# --------------------------------------------------------------------------- #
# Per run and persistent
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_a_config_is_opened_per_run_and_its_worker_and_server_are_gone_when_the_run_returns(
    isolation: str,
) -> None:
    during: list[tuple[int | None, int]] = []

    def renderer(result: Any, ctx: RunContext[Any]) -> str:
        (conn,) = plugin.connections()
        server_pid = json.loads(result.content[0].text)["pid"]
        assert pid_alive(server_pid)
        if conn.worker_pid is not None:
            assert pid_alive(conn.worker_pid)
        during.append((conn.worker_pid, server_pid))
        return "seen"

    plugin = MCP(raw(isolation, result_renderer=renderer))

    for _ in range(2):
        result, _ = run(drive(plugin, call("raw__pid", {})))
        assert outputs(result) == ["seen"]
        worker_pid, server_pid = during[-1]
        assert not pid_alive(server_pid)
        assert worker_pid is None if isolation == "none" else not pid_alive(worker_pid)  # type: ignore[arg-type]
        assert plugin.connections() == []

    (first_worker, first_server), (second_worker, second_server) = during
    assert first_server != second_server  # a fresh server per run
    if isolation == "process":
        assert first_worker != second_worker


@ISOLATIONS
def test_a_persistent_connection_is_not_closed_by_runs_and_is_reused_across_them(isolation: str) -> None:
    async def main() -> tuple[list[str], int, int]:
        async with raw(isolation).session() as conn:
            first, _ = await drive(MCP(conn), call("raw__counter", {}), call("raw__pid", {}))
            second, _ = await drive(MCP(conn), call("raw__counter", {}), call("raw__pid", {}))
            after = await conn.call_tool("counter")
            pids = {json.loads(out)["pid"] for out in outputs(first)[1::2] + outputs(second)[1::2]}
            (server_pid,) = pids  # one server served both runs
            worker_pid = conn.worker_pid or 0
            assert pid_alive(server_pid)
            return [*outputs(first)[::2], *outputs(second)[::2], str(after)], server_pid, worker_pid

    counters, server_pid, worker_pid = run(main())

    assert counters == ["1", "3", "5"]  # counter, pid, counter, pid, counter: one process
    assert not pid_alive(server_pid)
    assert not worker_pid or not pid_alive(worker_pid)


@ISOLATIONS
def test_a_persistent_connection_refuses_calls_once_its_session_has_ended(isolation: str) -> None:
    async def main() -> RunResult:
        async with raw(isolation).session() as conn:
            pass
        with pytest.raises(MCPError, match="MCP connection is closed") as info:
            await conn.call_tool("echo", {"text": "late"})
        assert "session()" in (info.value.hint or "")
        result, _ = await drive(MCP(conn), call("raw__echo", {"text": "late"}))
        return result

    (output,) = outputs(run(main()))
    assert output.startswith("Tool error: MCP connection is closed.")


@ISOLATIONS
def test_a_persistent_connection_serves_concurrent_runs_each_getting_its_own_results(isolation: str) -> None:
    runs = 8

    async def one(conn: Any, i: int) -> list[str]:
        result, _ = await drive(
            MCP(conn),
            batch(("raw__echo", {"text": f"run {i}"}), ("raw__add", {"a": i, "b": 1000})),
            call("raw__echo", {"text": f"again {i}"}),
        )
        return outputs(result)

    async def main() -> tuple[list[list[str]], str]:
        async with raw(isolation).session() as conn:
            got = await asyncio.gather(*(one(conn, i) for i in range(runs)))
            return got, str(await conn.call_tool("counter"))

    got, counter = run(main())

    assert got == [[f"run {i}", str(i + 1000), f"again {i}"] for i in range(runs)]
    assert counter == str(3 * runs + 1)  # every call went to the one shared server


@ISOLATIONS
def test_a_setup_that_fails_half_way_closes_the_servers_it_already_opened(isolation: str) -> None:
    plugin = MCP(raw(isolation, name="opened"), raw(isolation, "--exit-on-start", "3", name="broken"))
    model = ScriptedProvider([text("never reached")])

    with pytest.raises(MCPError, match="exited with code 3") as info:
        run(Runner.run(Agent(name="tester", model=model, plugins=[plugin]), "go"))

    assert "refusing to start: bad configuration" in str(info.value)  # the stderr tail, in the hint
    assert plugin.connections() == []
    assert model.calls == []
    # The no-leak fixture checks that the "opened" server's processes are gone.


@ISOLATIONS
def test_a_setup_that_fails_half_way_leaves_a_persistent_connection_open(isolation: str) -> None:
    async def main() -> str:
        async with raw(isolation, name="kept").session() as kept:
            plugin = MCP(kept, raw(isolation, "--exit-on-start", "3", name="broken"))
            agent = Agent(name="tester", model=ScriptedProvider([text("never reached")]), plugins=[plugin])
            with pytest.raises(MCPError, match="exited with code 3"):
                await Runner.run(agent, "go")
            assert plugin.connections() == [kept]
            return str(await kept.call_tool("echo", {"text": "still open"}))

    assert run(main()) == "still open"


# --------------------------------------------------------------------------- #
# Crashes and auto_reconnect
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_the_call_that_crashed_the_server_is_retried_once_on_a_fresh_server_and_succeeds(isolation: str) -> None:
    async def main() -> tuple[RunResult, Any]:
        # Every server process crashes on its second tools/call: the retry
        # lands on a fresh server, where it is the first.
        async with raw(isolation, "--crash-after", "2").session() as conn:
            result, _ = await drive(
                MCP(conn),
                call("raw__echo", {"text": "one"}),
                call("raw__echo", {"text": "two"}),
            )
            return result, await conn.stats()

    result, stats = run(main())

    assert outputs(result) == ["one", "two"]
    assert stats.restarts == 1 and "exited with code 3" in (stats.last_restart_reason or "")


@ISOLATIONS
def test_without_auto_reconnect_the_crash_reaches_the_model_and_the_next_call_gets_a_fresh_server(
    isolation: str,
) -> None:
    result, _ = run(
        drive(
            MCP(raw(isolation, "--crash-after", "2", auto_reconnect=False)),
            call("raw__echo", {"text": "one"}),
            call("raw__echo", {"text": "two"}),
            call("raw__counter", {}),
        )
    )

    one, two, counter = outputs(result)
    assert one == "one"
    assert two.startswith("Tool error: MCP tool 'echo' failed: the server exited with code 3")
    assert "crashing on call 2" in two  # the stderr tail is in the hint
    assert counter == "1"


@ISOLATIONS
def test_a_call_that_crashes_every_server_is_retried_only_once_and_the_next_call_recovers(
    isolation: str, tmp_path: Path
) -> None:
    crash_file = tmp_path / "crash"
    crash_file.touch()

    async def main() -> tuple[list[str], Any, Any]:
        async with raw(isolation, "--crash-if-exists", str(crash_file)).session() as conn:
            crashed, _ = await drive(MCP(conn), call("raw__echo", {"text": "doomed"}))
            after_crash = await conn.stats()
            crash_file.unlink()
            recovered, _ = await drive(MCP(conn), call("raw__echo", {"text": "back"}))
            return outputs(crashed) + outputs(recovered), after_crash, await conn.stats()

    (doomed, back), after_crash, final = run(main())

    assert doomed.startswith("Tool error: MCP tool 'echo' failed: the server exited with code 4")
    assert (after_crash.calls, after_crash.restarts) == (2, 1)  # the call and its one retry
    assert back == "back"
    assert (final.calls, final.restarts) == (3, 2)


@ISOLATIONS
def test_a_retry_that_finds_the_crash_condition_gone_succeeds_within_the_same_call(
    isolation: str, tmp_path: Path
) -> None:
    crash_file = tmp_path / "crash"
    crash_file.touch()

    class ClearBeforeRetry(logging.Handler):
        """Removes the crash file when the connection announces its retry."""

        def emit(self, record: logging.LogRecord) -> None:
            if "retrying" in record.getMessage():
                crash_file.unlink(missing_ok=True)

    handler = ClearBeforeRetry(logging.WARNING)
    logger = logging.getLogger("lovia_mcp")
    logger.addHandler(handler)
    try:
        result, _ = run(
            drive(
                MCP(raw(isolation, "--crash-if-exists", str(crash_file))),
                call("raw__echo", {"text": "survived"}),
                call("raw__counter", {}),
            )
        )
    finally:
        logger.removeHandler(handler)

    assert not crash_file.exists()  # the first attempt did crash, and the retry was announced
    assert outputs(result) == ["survived", "2"]  # served by one fresh server


@ISOLATIONS
def test_lovias_own_in_process_plugin_never_recovers_after_a_server_crash_while_ours_does(isolation: str) -> None:
    script = [
        call("raw__exit", {"code": 1}),
        call("raw__echo", {"text": "after"}),
        call("raw__echo", {"text": "again"}),
    ]
    theirs, _ = run(
        drive(lovia_mcp_plugin.MCP(lovia_mcp_plugin.MCPServerStdio(command=PY, args=raw_args(), name="raw")), *script)
    )
    ours, _ = run(drive(MCP(raw(isolation)), *script))

    assert [o.split("\n")[0] for o in outputs(theirs)] == [
        "Tool error: MCP tool 'exit' failed: Connection closed",
        "Tool error: MCP tool 'echo' failed: Connection closed",
        "Tool error: MCP tool 'echo' failed: Connection closed",
    ]
    exit_result, *rest = outputs(ours)
    assert exit_result.startswith("Tool error: MCP tool 'exit' failed: the server exited with code 1")
    assert rest == ["after", "again"]


# --------------------------------------------------------------------------- #
# In-process close (isolation="none")
# --------------------------------------------------------------------------- #
@pytest.mark.timing
def test_closing_an_in_process_connection_does_not_wait_for_another_that_stays_open() -> None:
    async def main() -> float:
        async with raw("none", name="stays").session():
            leaving = await raw("none", name="leaves").open()
            started = time.monotonic()
            await leaving.close()
            return time.monotonic() - started

    # A close is a SIGTERM and a reap: tens of milliseconds. The bound is
    # far above that and far below the 3.5 s the bug costs.
    assert run(main()) < 1.5


# --------------------------------------------------------------------------- #
# The agent process and `mcp`
# --------------------------------------------------------------------------- #
def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def test_import_lovia_mcp_never_imports_mcp_and_an_isolated_run_leaves_it_unloaded() -> None:
    proc = _python(f"""
        import asyncio, sys
        import lovia_mcp
        from lovia_mcp import MCP, MCPServerStdio
        assert "mcp" not in sys.modules, "import lovia_mcp imported mcp"
        from lovia import Agent, Runner
        from lovia.testing import ScriptedProvider, call, text

        async def main():
            server = MCPServerStdio(command=sys.executable, args={raw_args()!r}, name="raw")
            model = ScriptedProvider([call("raw__echo", {{"text": "isolated"}}), text("done")])
            result = await Runner.run(Agent(name="a", model=model, plugins=[MCP(server)]), "go")
            print(result.entries[-2].output)

        asyncio.run(main())
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types"))
        print("loaded:", loaded)
    """)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["isolated", "loaded: []"]


def test_stdio_servers_never_need_mcp_and_an_http_server_without_it_is_a_user_error_with_the_install_hint() -> None:
    proc = _python(f"""
        import asyncio, sys
        sys.modules["mcp"] = None  # `import mcp` now raises ImportError
        from lovia import Agent, Runner
        from lovia.exceptions import UserError
        from lovia.testing import ScriptedProvider, call, text
        from lovia_mcp import MCP, MCPServerStdio, MCPServerStreamableHTTP

        async def main():
            # The host runs in this process: the stdio path is the worker's own client.
            server = MCPServerStdio(command=sys.executable, args={raw_args()!r}, name="raw", isolation="none")
            model = ScriptedProvider([call("raw__echo", {{"text": "no sdk"}}), text("done")])
            result = await Runner.run(Agent(name="a", model=model, plugins=[MCP(server)]), "go")
            print(result.entries[-2].output)
            http = MCPServerStreamableHTTP(url="http://127.0.0.1:9/mcp", isolation="none")
            model = ScriptedProvider([text("never reached")])
            try:
                await Runner.run(Agent(name="a", model=model, plugins=[MCP(http)]), "go")
            except UserError as exc:
                print("UserError:", str(exc).replace("\\n", " | "))
            print("model calls:", len(model.calls))

        asyncio.run(main())
    """)

    assert proc.returncode == 0, proc.stderr
    echoed, first, second = proc.stdout.splitlines()
    assert echoed == "no sdk"
    assert first.startswith("UserError: MCP over HTTP requires the 'mcp' package")
    assert "hint: Install it with: pip install" in first
    assert second == "model calls: 0"
