"""Hostile and unusual stdio servers: how the worker's JSON-RPC client answers them.

Each test runs tests/servers/hostile_server.py, a raw JSON-RPC server that is
legal but unusual (ids typed as integers, ``id`` written last, an older
protocol version) or hostile (an oversized reply with its id last or a decoy
id nested before it, nesting 100,000 deep, a lone surrogate, a closed stdin, a
pagination cursor that never ends). The worker must use integer request ids,
find a reply's real id wherever it is, cap a reply without losing the server,
survive what it cannot decode, answer the server's own requests, and cancel by
the id it sent.

Every await on the server is bounded by ``BOUND``, so a hang fails as a clear
``TimeoutError`` rather than as the test's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Final, TypeVar

import pytest
from helpers import ISOLATIONS, PY, SERVERS, run

from lovia_mcp import Limits, MCPError, MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

HOSTILE: Final = str(SERVERS / "hostile_server.py")
# Bound on every await on the server: each answer here takes milliseconds, so
# anything near this is a hang, reported as TimeoutError.
BOUND: Final = 10.0
# An answer the worker can give as soon as the reply line has crossed the
# pipe (2 MB: milliseconds); well under BOUND, so waiting for a server restart
# or a timeout instead would show.
PROMPT: Final = 2.0
# Calls to last_cancel before giving up on the cancellation arriving: it is
# written before (or just after) the next request, so one or two suffice.
CANCEL_POLLS: Final = 20
# The server caps replies at this in the size tests; their results are twice it.
CAP: Final = 1_000_000
OVERSIZE: Final = 2 * CAP

T = TypeVar("T")


def hostile(*flags: str, **options: Any) -> MCPServerStdio:
    return MCPServerStdio(command=PY, args=[HOSTILE, *flags], name="hostile", **options)


async def bounded(aw: Awaitable[T]) -> T:
    return await asyncio.wait_for(aw, BOUND)


@contextlib.asynccontextmanager
async def session(server: MCPServerStdio) -> AsyncIterator[Any]:
    """``server.session()`` with its opening bounded too."""
    async with contextlib.AsyncExitStack() as stack:
        yield await bounded(stack.enter_async_context(server.session()))


async def text_of(conn: Any, tool: str, args: dict[str, Any] | None = None) -> str:
    return str(await bounded(conn.call_tool(tool, args or {})))


async def assert_same_server_answers(conn: Any, pid: int | None) -> None:
    """The connection lives on, on the server it had: no restart happened."""
    assert await text_of(conn, "echo", {"text": "still here"}) == "still here"
    stats = await bounded(conn.stats())
    assert conn.server_pid == pid and stats.server_pid == pid, (pid, conn.server_pid, stats.server_pid)
    assert stats.restarts == 0, stats.last_restart_reason


@pytest.mark.timeout(40)
@ISOLATIONS
def test_server_that_drops_non_integer_ids_opens_answers_and_sees_integer_ids(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile("--int-ids", isolation=isolation)) as conn:
            assert await text_of(conn, "echo", {"text": "hello"}) == "hello"
            shown = json.loads(await text_of(conn, "show_id"))
            print(f"[{isolation}] the server saw request id {shown['id']!r}")
            assert shown["type"] == "int", shown

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_replies_with_the_id_written_last_are_matched_to_their_calls(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile("--id-last", isolation=isolation)) as conn:
            assert await text_of(conn, "echo", {"text": "one"}) == "one"
            texts = [f"call {i}" for i in range(8)]
            replies = await bounded(asyncio.gather(*(conn.call_tool("echo", {"text": t}) for t in texts)))
            assert [str(r) for r in replies] == texts

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
@pytest.mark.timing
def test_oversized_reply_with_its_id_last_fails_that_call_as_too_large_and_keeps_the_server(isolation: str) -> None:
    async def main() -> None:
        server = hostile(isolation=isolation, limits=Limits(max_result_bytes=CAP))
        async with session(server) as conn:
            pid = conn.server_pid
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await bounded(conn.call_tool("big_id_last", {"size": OVERSIZE}))
            elapsed = time.monotonic() - started
            print(f"[{isolation}] {OVERSIZE:,}-byte reply, id last: {info.value.kind} after {elapsed * 1000:.1f} ms")
            assert info.value.kind == "too_large", info.value
            assert info.value.tool_name == "big_id_last"
            assert "max_result_bytes" in str(info.value)
            assert elapsed < PROMPT, elapsed
            await assert_same_server_answers(conn, pid)

    run(main())


def _id_after(seen: object, n: int) -> object:
    """The id the client gives the request ``n`` after one it numbered ``seen``."""
    return seen + n if isinstance(seen, int) and not isinstance(seen, bool) else 1


@pytest.mark.timeout(40)
@pytest.mark.parametrize("decoy", ["finished", "in_flight"])
@ISOLATIONS
@pytest.mark.timing
def test_oversized_reply_with_a_nested_decoy_id_fails_only_its_own_call_and_keeps_the_server(
    isolation: str, decoy: str
) -> None:
    # The decoy is an id the client really uses: 1 (a finished handshake
    # request), or the id of the echo sent right after the big call, still in
    # flight when the oversized reply arrives (the server answers in order).
    async def main() -> None:
        server = hostile(isolation=isolation, limits=Limits(max_result_bytes=CAP))
        async with session(server) as conn:
            pid = conn.server_pid
            seen = json.loads(await text_of(conn, "show_id"))["id"]
            # Sent next: echo "before", the big call, echo "after".
            decoy_id = 1 if decoy == "finished" else _id_after(seen, 3)
            started = time.monotonic()
            before, big, after = await bounded(
                asyncio.gather(
                    conn.call_tool("echo", {"text": "before"}),
                    conn.call_tool("big_nested_id", {"size": OVERSIZE, "decoy": decoy_id}),
                    conn.call_tool("echo", {"text": "after"}),
                    return_exceptions=True,
                )
            )
            elapsed = time.monotonic() - started
            outcomes = [f"{type(r).__name__} {getattr(r, 'kind', '')} {str(r)[:80]!r}" for r in (before, big, after)]
            print(
                f"[{isolation}] nested decoy id {decoy_id!r} (show_id saw {seen!r}): {outcomes} "
                f"after {elapsed * 1000:.1f} ms"
            )
            assert isinstance(big, MCPError), big
            assert big.kind == "too_large", big
            assert str(before) == "before"
            assert str(after) == "after"
            assert elapsed < PROMPT, elapsed
            await assert_same_server_answers(conn, pid)

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_reply_nested_100_000_deep_is_answered_within_the_bound_and_the_server_lives_on(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile(isolation=isolation)) as conn:
            pid = conn.server_pid
            started = time.monotonic()
            try:
                result = await bounded(conn.call_tool("deep", {"depth": 100_000}))
            except MCPError as exc:
                outcome = f"MCPError {exc.kind}: {exc}"
                assert exc.kind == "protocol", exc
                assert "decod" in str(exc).lower(), exc  # "could not be decoded"
            else:
                outcome = f"result {str(result)!r}"
                assert "deep" in str(result)
            elapsed = time.monotonic() - started
            print(f"[{isolation}] depth 100,000: {outcome[:300]} after {elapsed * 1000:.1f} ms")
            await assert_same_server_answers(conn, pid)

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_lone_surrogate_escape_in_a_reply_becomes_the_replacement_character(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile(isolation=isolation)) as conn:
            pid = conn.server_pid
            result = await bounded(conn.call_tool("surrogate"))
            print(f"[{isolation}] surrogate reply: {str(result)!r}")
            assert str(result) == "bad \ufffd char"
            await assert_same_server_answers(conn, pid)

    run(main())


@pytest.mark.timeout(40)
@pytest.mark.parametrize("auto_reconnect", [True, False], ids=["auto_reconnect", "no_reconnect"])
@ISOLATIONS
def test_server_that_closed_its_stdin_is_replaced_or_reported_as_exited_on_the_next_call(
    isolation: str, auto_reconnect: bool
) -> None:
    async def main() -> None:
        server = hostile(isolation=isolation, auto_reconnect=auto_reconnect)
        async with session(server) as conn:
            old = conn.server_pid
            assert await text_of(conn, "close_stdin") == "closing"
            started = time.monotonic()
            if auto_reconnect:
                assert await text_of(conn, "echo", {"text": "fresh"}) == "fresh"
                elapsed = time.monotonic() - started
                new = (await bounded(conn.stats())).server_pid
                print(
                    f"[{isolation}] after close_stdin: echo answered by pid {new} (was {old}) "
                    f"in {elapsed * 1000:.1f} ms"
                )
                assert conn.server_pid != old and new != old, (old, conn.server_pid, new)
            else:
                with pytest.raises(MCPError) as info:
                    await bounded(conn.call_tool("echo", {"text": "lost"}))
                elapsed = time.monotonic() - started
                print(f"[{isolation}] after close_stdin: {info.value.kind} in {elapsed * 1000:.1f} ms: {info.value}")
                assert info.value.kind == "server_exited", info.value

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
@pytest.mark.timing
def test_tool_listing_that_repeats_its_cursor_ends_at_once_with_a_warning(
    isolation: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lovia_mcp")

    async def main() -> None:
        server = hostile("--repeat-cursor", isolation=isolation, open_timeout=30)
        started = time.monotonic()
        async with session(server) as conn:
            elapsed = time.monotonic() - started
            names = [t.name for t in conn.tools()]
            print(f"[{isolation}] repeated cursor: open took {elapsed * 1000:.1f} ms, {len(names)} tools")
            assert elapsed < BOUND, elapsed
            assert "hostile__echo" in names, names
            assert await text_of(conn, "echo", {"text": "listed"}) == "listed"

    run(main())
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("lovia_mcp") and r.levelno >= logging.WARNING and "cursor" in r.getMessage().lower()
    ]
    print(f"[{isolation}] warnings: {warnings}")
    assert warnings, [r.getMessage() for r in caplog.records]


@pytest.mark.timeout(40)
@ISOLATIONS
def test_server_sampling_request_is_refused_with_method_not_found(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile(isolation=isolation)) as conn:
            response = json.loads(await text_of(conn, "ask_sampling"))
            print(f"[{isolation}] the server's sampling request got: {response}")
            assert response.get("jsonrpc") == "2.0" and response.get("id") == "s-1", response
            assert "result" not in response, response
            assert response["error"]["code"] == -32601, response

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_server_ping_request_is_answered_with_an_empty_result(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile(isolation=isolation)) as conn:
            response = json.loads(await text_of(conn, "ask_ping"))
            print(f"[{isolation}] the server's ping got: {response}")
            assert response.get("jsonrpc") == "2.0" and response.get("id") == 77, response
            assert "error" not in response, response
            assert response["result"] == {}, response

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_server_answering_an_older_supported_protocol_version_opens_and_works(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile("--version", "2024-11-05", isolation=isolation)) as conn:
            assert await text_of(conn, "echo", {"text": "old but fine"}) == "old but fine"

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_server_answering_an_unknown_protocol_version_fails_at_open_naming_it(isolation: str) -> None:
    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(MCPError) as info:
            async with session(hostile("--version", "1999-01-01", isolation=isolation)):
                pass
        elapsed = time.monotonic() - started
        print(f"[{isolation}] unknown version: {info.value.kind} after {elapsed * 1000:.1f} ms: {info.value}")
        assert info.value.kind == "open", info.value
        assert "1999-01-01" in str(info.value)

    run(main())


@pytest.mark.timeout(40)
@ISOLATIONS
def test_timed_out_call_is_cancelled_by_its_integer_request_id(isolation: str) -> None:
    async def main() -> None:
        async with session(hostile(isolation=isolation, on_timeout="cancel")) as conn:
            pid = conn.server_pid
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(conn.call_tool("wait_cancel", {}, timeout=0.5), 0.5)
            seen = None
            polls = 0
            while seen is None and polls < CANCEL_POLLS:
                polls += 1
                seen = json.loads(await text_of(conn, "last_cancel"))
            print(f"[{isolation}] cancellation seen after {polls} call(s): {seen}")
            assert seen is not None, f"no notifications/cancelled after {CANCEL_POLLS} calls"
            assert seen["type"] == "int", seen
            assert seen["names_waiting_call"], seen
            # on_timeout="cancel": the server was not killed.
            assert conn.server_pid == pid

    run(main())
