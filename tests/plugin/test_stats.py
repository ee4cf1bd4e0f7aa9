"""Operators' view: ``conn.stats()`` and the plugin's open connections."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest
from helpers import PY, SERVERS, raw_args, run, wait_gone

from lovia_mcp import MCP, MCPError, MCPServerStdio, Stats

SUP_SERVER = str(SERVERS / "sup_server.py")


def test_stats_report_the_processes_their_usage_and_every_counter() -> None:
    async def main() -> tuple[Stats, Stats, int | None, int | None]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False, timeout=0.5)
        async with server.session() as conn:
            await conn.call_tool("echo", {"text": "a"})
            await conn.call_tool("fail")  # isError: a result, not an error
            with pytest.raises(MCPError):
                await conn.call_tool("exit", {"code": 5})
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.call_tool("hang", timeout=0.5), 0.5)
            await conn.call_tool("echo", {"text": "b"})
            stats = await conn.stats()
            return stats, await conn.stats(), conn.worker_pid, conn.server_pid

    stats, again, worker_pid, server_pid = run(main())

    assert stats.worker_pid == worker_pid and worker_pid != os.getpid()
    assert stats.server_pid == server_pid
    assert stats.rss_bytes > 1_000_000 and stats.processes == 1
    assert stats.calls == 5 and stats.errors == 1 and stats.timeouts == 1
    # One restart after the exit, one after the timeout's kill.
    assert stats.restarts == 2
    assert stats.last_restart_reason is not None and "timeout" in stats.last_restart_reason
    assert 0 < stats.uptime_seconds <= again.uptime_seconds


def test_stats_count_a_replaced_worker_as_a_restart_with_its_reason() -> None:
    async def main() -> Stats:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw")
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            wait_gone(worker)
            await conn.call_tool("echo", {"text": "after"})
            return await conn.stats()

    stats = run(main())

    assert stats.restarts == 1
    assert stats.last_restart_reason is not None and "SIGKILL" in stats.last_restart_reason


def test_a_plugin_lists_the_connections_it_opened_for_a_run_until_they_close() -> None:
    async def main() -> tuple[int, list[int | None], int]:
        plugin = MCP(
            MCPServerStdio(command=PY, args=raw_args(), name="a"), MCPServerStdio(command=PY, args=raw_args(), name="b")
        )
        instance = await plugin.setup(None)
        during = plugin.connections()
        pids = [(await c.stats()).server_pid for c in during]
        await instance.aclose()
        return len(during), pids, len(plugin.connections())

    during, pids, after = run(main())

    assert during == 2 and all(pids) and len(set(pids)) == 2
    assert after == 0


def test_stats_and_refresh_after_a_worker_death_start_a_fresh_worker_or_raise_a_plain_mcp_error() -> None:
    async def main() -> tuple[int, int]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw")
        async with server.session() as conn:
            for _ in range(2):
                worker = conn.worker_pid
                assert worker is not None
                os.kill(worker, signal.SIGKILL)
                wait_gone(worker)
                # Whatever the timing, these never leak an internal exception.
                try:
                    tools = await conn.refresh_tools()
                except MCPError:
                    tools = await conn.refresh_tools()
            stats = await conn.stats()
            return len(tools), stats.restarts

    n_tools, restarts = run(main())

    assert n_tools > 10 and restarts == 2


def test_the_lovia_mcp_logger_reports_starts_exits_restarts_and_limit_kills(caplog: pytest.LogCaptureFixture) -> None:
    from lovia_mcp import Limits

    async def main() -> None:
        async with MCPServerStdio(command=PY, args=raw_args(), name="logged").session() as conn:
            with pytest.raises(MCPError):
                await conn.call_tool("exit", {"code": 9})  # retried once: two exits
            await conn.call_tool("echo", {"text": "still here"})
        limited = MCPServerStdio(command=PY, args=[SUP_SERVER], name="limited", limits=Limits(memory_mb=60))
        async with limited.session() as conn:
            with pytest.raises(MCPError):
                await conn.call_tool("hold", {"mb": 150})  # holds it until killed

    with caplog.at_level(logging.INFO, logger="lovia_mcp"):
        run(main())

    lines = [r.getMessage() for r in caplog.records if r.name == "lovia_mcp"]
    text = "\n".join(lines)
    assert "connected (process isolation, worker pid" in text
    assert "server 'logged' started (pid" in text
    assert "ended: the server exited with code 9" in text
    assert "retrying 'exit' once on a fresh server" in text
    assert "passed its memory limit" in text
