"""Supervision: servers that abuse the protocol, fail to start, or talk too much.

Garbage lines are skipped and counted; an unterminated giant line is cut off
in the worker with memory bounded on both sides and a clear error; start-up
failures are clear errors at open time with the stderr tail and a hint;
stderr is always drained, forwarded to ``lovia_mcp.server.<name>``, bounded,
and its last lines are attached to errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
import threading
import time

import psutil
import pytest
from helpers import ISOLATIONS, PY, raw_args, run

from lovia_mcp import Limits, MCPError, MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

MB = 1024 * 1024


@ISOLATIONS
def test_non_json_and_invalid_utf8_lines_are_skipped_and_counted(isolation: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            pid = conn.server_pid
            assert str(await conn.call_tool("garbage")) == "after garbage"
            stats = await conn.stats()
            # "not json", invalid UTF-8, and JSON that is not JSON-RPC.
            assert stats.garbage_lines == 3
            assert stats.server_pid == pid and stats.restarts == 0
            assert str(await conn.call_tool("echo", {"text": "still fine"})) == "still fine"

    run(main())


class _PeakRSS:
    """Sample a process's RSS on a thread until stopped; keep the peak."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            self._stop.wait(0.005)

    def __enter__(self) -> _PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.mark.timeout(30)
def test_unterminated_100_mb_line_is_cut_off_with_bounded_memory_a_clear_error_and_recovery() -> None:
    cap = Limits().max_result_bytes  # the default, 32 MB
    flood = 100 * MB

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            old = conn.server_pid
            worker_before = psutil.Process(worker).memory_info().rss
            agent_before = psutil.Process().memory_info().rss
            started = time.monotonic()
            with _PeakRSS(worker) as peak, _PeakRSS(os.getpid()) as agent_peak:
                with pytest.raises(MCPError) as info:
                    await asyncio.wait_for(conn.call_tool("flood", {"size": flood}), 20)
            elapsed = time.monotonic() - started
            err = info.value
            assert err.kind == "protocol", err
            assert f"larger than max_result_bytes={cap:,}" in str(err)
            assert "Raise Limits(max_result_bytes=...)" in str(err)
            worker_growth = (peak.peak - worker_before) / MB
            agent_growth = (agent_peak.peak - agent_before) / MB
            # The worker holds at most about one cap's worth of the line (plus
            # a read chunk and allocator slack), never the 100 MB; the agent
            # never sees it.
            assert worker_growth < 1.5 * cap / MB, worker_growth
            assert agent_growth < 16, agent_growth
            worker_after = psutil.Process(worker).memory_info().rss
            # Recovery: a fresh server, same worker, memory handed back.
            assert str(await conn.call_tool("echo", {"text": "recovered"})) == "recovered"
            assert conn.server_pid != old or (await conn.stats()).server_pid != old
            assert conn.worker_pid == worker
            print(
                f"flood: error after {elapsed:.3f} s; worker RSS {worker_before / MB:.1f} MB -> peak "
                f"{peak.peak / MB:.1f} MB -> {worker_after / MB:.1f} MB; agent peak growth {agent_growth:.1f} MB"
            )

    run(main())


@pytest.mark.timing
def test_missing_command_fails_at_open_with_a_hint() -> None:
    async def main() -> None:
        server = MCPServerStdio(command="no-such-mcp-server-xyz", name="ghost")
        started = time.monotonic()
        with pytest.raises(MCPError) as info:
            await server.open()
        assert time.monotonic() - started < 5
        err = info.value
        assert err.kind == "open"
        assert "command not found: 'no-such-mcp-server-xyz'" in str(err)
        assert "Install it or fix PATH" in (err.hint or "")

    run(main())


def test_command_that_is_not_executable_fails_at_open_with_a_chmod_hint(tmp_path: object) -> None:
    script = os.path.join(str(tmp_path), "server.py")
    with open(script, "w") as f:
        f.write("print('hi')\n")
    os.chmod(script, stat.S_IRUSR | stat.S_IWUSR)

    async def main() -> None:
        with pytest.raises(MCPError) as info:
            await MCPServerStdio(command=script, name="noexec").open()
        err = info.value
        assert err.kind == "open"
        assert "not executable" in str(err)
        assert "chmod +x" in (err.hint or "")

    run(main())


def test_script_with_a_missing_interpreter_fails_at_open_naming_the_interpreter_line(tmp_path: object) -> None:
    script = os.path.join(str(tmp_path), "server")
    with open(script, "w") as f:
        f.write("#!/nonexistent/python3\nprint('hi')\n")
    os.chmod(script, 0o755)

    async def main() -> None:
        with pytest.raises(MCPError) as info:
            await MCPServerStdio(command=script, name="badshebang").open()
        err = info.value
        assert err.kind == "open"
        assert "could not start" in str(err) and "No such file or directory" in str(err)
        assert "interpreter line" in (err.hint or "")

    run(main())


@ISOLATIONS
@pytest.mark.timing
def test_server_that_never_answers_the_handshake_fails_at_open_within_open_timeout_with_stderr_tail(
    isolation: str,
) -> None:
    open_timeout = 1.0

    async def main() -> None:
        # Writes to stderr, then sits there (in a grandchild) without a word on stdout.
        server = MCPServerStdio(
            command="sh",
            args=["-c", "echo 'listening on port 8080' >&2; echo 'waiting for config' >&2; sleep 300"],
            name="mute",
            open_timeout=open_timeout,
            isolation=isolation,  # type: ignore[arg-type]
        )
        started = time.monotonic()
        with pytest.raises(MCPError) as info:
            await server.open()
        elapsed = time.monotonic() - started
        err = info.value
        assert err.kind == "open"
        assert "did not finish start-up" in str(err) and "open_timeout=1" in str(err)
        assert "waiting for config" in err.stderr_tail
        assert "waiting for config" in (err.hint or "")
        assert "MCP server speaking stdio" in (err.hint or "")
        # open_timeout, then the tree kill (the sleep ignores nothing: SIGTERM works).
        assert elapsed < open_timeout + 1.5, elapsed
        print(f"[{isolation}] no handshake: error after {elapsed:.3f} s")

    run(main())


def test_raw_server_that_never_answers_initialize_fails_at_open() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args("--no-handshake"), name="raw", open_timeout=0.5)
        with pytest.raises(MCPError) as info:
            await server.open()
        assert info.value.kind == "open"

    run(main())


@pytest.mark.timing
def test_server_exiting_at_start_fails_at_open_with_exit_code_and_stderr() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args("--exit-on-start", "2"), name="raw")
        started = time.monotonic()
        with pytest.raises(MCPError) as info:
            await server.open()
        assert time.monotonic() - started < 2
        err = info.value
        assert err.exit_code == 2
        assert "refusing to start: bad configuration" in err.stderr_tail
        assert "refusing to start: bad configuration" in str(err)

    run(main())


def test_chatty_stderr_never_blocks_the_server_and_is_forwarded_bounded(caplog: pytest.LogCaptureFixture) -> None:
    lines = 20000  # ~2.3 MB: far more than a pipe buffer
    name = "lovia_mcp.server.talker"

    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="talker")
        async with server.session() as conn:
            with caplog.at_level(logging.INFO, logger=name):
                started = time.monotonic()
                reply = await asyncio.wait_for(conn.call_tool("chatty", {"lines": lines}), 10)
                elapsed = time.monotonic() - started
                assert str(reply) == "done chatting"
                # What was not forwarded is counted and said once the rate
                # window (1 s) ends, even though the server has gone quiet.
                deadline = time.monotonic() + 3.0
                while not any("not forwarded" in r.getMessage() for r in caplog.records):
                    assert time.monotonic() < deadline, "no note of the suppressed lines"
                    await asyncio.sleep(0.02)
            forwarded = [r for r in caplog.records if r.name == name]
            chatty = [r.getMessage() for r in forwarded if r.getMessage().startswith("chatty line")]
            assert chatty[0].startswith("chatty line 0 ")
            assert len(chatty) <= 200 * (1 + int(time.monotonic() - started)), len(chatty)
            [note] = [r.getMessage() for r in forwarded if "not forwarded" in r.getMessage()]
            assert int(note.split()[0]) == lines - len(chatty), note
            print(f"chatty: {lines} lines in {elapsed:.3f} s, {len(chatty)} forwarded, then: {note!r}")

    run(main())


def test_an_endless_stderr_line_is_cut_to_one_bounded_line() -> None:
    code = "import sys; sys.stderr.write('a' * 1_000_000 + '\\nlast words\\n'); sys.exit(5)"

    async def main() -> None:
        with pytest.raises(MCPError) as info:
            await MCPServerStdio(command=PY, args=["-c", code], name="long").open()
        err = info.value
        assert err.exit_code == 5
        assert err.stderr_tail == ["a" * 2000, "last words"]
        assert len(str(err)) < 4000

    run(main())


def test_last_stderr_lines_are_attached_to_errors_and_the_tail_is_bounded() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", auto_reconnect=False)
        async with server.session() as conn:
            with pytest.raises(MCPError) as info:
                await conn.call_tool("stderr_then_exit", {"lines": 50, "code": 9})
            err = info.value
            assert err.exit_code == 9
            # The tail is bounded and ends with the last lines written.
            assert 1 <= len(err.stderr_tail) <= 20
            assert err.stderr_tail[-1] == "stderr line 49"
            assert "stderr line 0" not in err.stderr_tail
            # The hint quotes the last few.
            assert "stderr line 49" in (err.hint or "")
            assert "stderr line 30" not in (err.hint or "")

    run(main())
