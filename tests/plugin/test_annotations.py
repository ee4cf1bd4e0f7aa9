"""Tool annotations: kept on the tools, and the policies built on them.

``tests/servers/annotated_server.py`` lists tools with every kind of hint.
Retries after a lost server are checked against the server's own log of the
calls it received; approval and parallelism through a real lovia ``Agent``
driven by a ``ScriptedProvider``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, SERVERS, drive, outputs, run
from lovia.testing import batch, call

from lovia_mcp import MCP, MCPError, MCPServerStdio, MCPTool, ToolAnnotations, UserError

SERVER = str(SERVERS / "annotated_server.py")
# How long a call waits for a peer that runs beside it: met at once when the
# runner runs both together; the barrier case waits it out, so it is short.
PEER_MET_WAIT = 30.0
PEER_ALONE_WAIT = 2.0


def annotated(log: Path | None = None, **options: Any) -> MCPServerStdio:
    args = [SERVER] + (["--log", str(log)] if log is not None else [])
    return MCPServerStdio(command=PY, args=args, **options)


def by_name(tools: list[Any]) -> dict[str, Any]:
    return {t.name: t for t in tools}


def received(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@ISOLATIONS
def test_each_tool_keeps_its_annotations_and_meta_under_the_sdk_attribute_names(isolation: str) -> None:
    async def go() -> dict[str, Any]:
        async with annotated(isolation=isolation).session() as conn:
            return by_name(conn.tools())

    tools = run(go())

    read = tools["read"]
    assert isinstance(read, MCPTool)
    assert read.annotations == ToolAnnotations(title="Read it", read_only_hint=True)
    assert read.annotations.read_only_hint is True and read.annotations.destructive_hint is None
    assert read.meta == {"example.com/ui": {"icon": "eye"}}
    assert read.raw_name == "read"
    assert tools["put"].annotations == ToolAnnotations(idempotent_hint=True, destructive_hint=False)
    assert tools["plain"].annotations is None and tools["plain"].meta is None


def test_untrusted_annotations_leave_parallel_as_set_and_destructive_approval_asks_for_every_tool() -> None:
    async def go() -> dict[str, Any]:
        async with annotated(needs_approval="destructive").session() as conn:
            return by_name(conn.tools())

    tools = run(go())

    assert {name: (t.parallel, t.needs_approval) for name, t in tools.items()} == {
        name: (True, True) for name in ("read", "write", "put", "sneaky", "plain", "add_tool")
    }


def test_trusted_annotations_make_only_read_only_tools_parallel_and_approval_free() -> None:
    async def go() -> dict[str, Any]:
        async with annotated(needs_approval="destructive", trust_annotations=True).session() as conn:
            return by_name(conn.tools())

    tools = run(go())

    # "sneaky" says read-only but also destructive: the stricter reading wins.
    assert {name: (t.parallel, t.needs_approval) for name, t in tools.items()} == {
        "read": (True, False),
        "write": (False, True),
        "put": (False, True),
        "sneaky": (False, True),
        "plain": (False, True),
        "add_tool": (False, True),
    }


def test_trusted_annotations_never_make_a_server_set_to_parallel_false_parallel() -> None:
    async def go() -> dict[str, Any]:
        async with annotated(trust_annotations=True, parallel=False, needs_approval=True).session() as conn:
            return by_name(conn.tools())

    tools = run(go())

    assert not any(t.parallel for t in tools.values())
    assert all(t.needs_approval is True for t in tools.values())


@ISOLATIONS
def test_safe_reconnect_does_not_retry_a_lost_call_of_a_tool_not_marked_read_only_or_idempotent(
    isolation: str, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"

    async def go() -> MCPError:
        async with annotated(log, isolation=isolation, auto_reconnect="safe").session() as conn:
            with pytest.raises(MCPError) as info:
                await conn.call_tool("write", {"crash_once": str(tmp_path / "w")})
            # The connection still works: a fresh server serves the next call.
            result = await conn.call_tool("plain", {})
            assert str(result) == "plain: ok"
            return info.value

    error = run(go())

    assert error.kind == "server_exited" and error.exit_code == 3
    assert received(log) == ["write", "plain"]


@ISOLATIONS
def test_safe_reconnect_retries_a_lost_call_of_an_idempotent_or_read_only_tool_once(
    isolation: str, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"

    async def go() -> list[str]:
        async with annotated(log, isolation=isolation, auto_reconnect="safe").session() as conn:
            put = await conn.call_tool("put", {"crash_once": str(tmp_path / "p")})
            read = await conn.call_tool("read", {"crash_once": str(tmp_path / "r")})
            return [str(put), str(read)]

    assert run(go()) == ["put: ok", "read: ok"]
    assert received(log) == ["put", "put", "read", "read"]


def test_reconnect_true_still_retries_every_tool_whatever_its_annotations(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"

    async def go() -> str:
        async with annotated(log, auto_reconnect=True).session() as conn:
            return str(await conn.call_tool("write", {"crash_once": str(tmp_path / "w")}))

    assert run(go()) == "write: ok"
    assert received(log) == ["write", "write"]


def _asked(asked: list[str]) -> Any:
    def handler(tool_call: Any, ctx: Any) -> bool:
        asked.append(tool_call.name)
        return True

    return handler


@pytest.mark.parametrize(("trusted", "expected"), [(True, ["write"]), (False, ["read", "write"])])
def test_destructive_approval_in_a_real_run_asks_only_for_tools_not_trusted_read_only(
    trusted: bool, expected: list[str]
) -> None:
    asked: list[str] = []
    server = annotated(needs_approval="destructive", trust_annotations=trusted)

    result, _ = run(
        drive(
            MCP(server),
            call("read", {}),
            call("write", {}),
            approval_handler=_asked(asked),
        )
    )

    assert asked == expected
    assert outputs(result) == ["read: ok", "write: ok"]


def test_denied_approval_under_destructive_stops_the_call_before_the_server_sees_it(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    server = annotated(log, needs_approval="destructive", trust_annotations=True)

    result, _ = run(drive(MCP(server), call("read", {}), call("write", {}), approval_handler=lambda c, x: False))

    assert outputs(result)[0] == "read: ok"
    assert "not approved" in outputs(result)[1]
    assert received(log) == ["read"]


def test_trusted_read_only_calls_of_one_turn_run_together() -> None:
    server = annotated(trust_annotations=True)

    result, _ = run(drive(MCP(server), batch(("read", {"peer": PEER_MET_WAIT}), ("read", {"peer": PEER_MET_WAIT}))))

    assert outputs(result) == ["met", "met"]


def test_trusted_annotations_make_other_tools_execution_barriers_that_run_alone() -> None:
    server = annotated(trust_annotations=True)

    result, _ = run(drive(MCP(server), batch(("write", {"peer": PEER_ALONE_WAIT}), ("put", {"peer": PEER_ALONE_WAIT}))))

    assert outputs(result) == ["alone", "alone"]


def test_untrusted_annotations_let_the_same_calls_run_together() -> None:
    server = annotated()

    result, _ = run(drive(MCP(server), batch(("write", {"peer": PEER_MET_WAIT}), ("put", {"peer": PEER_MET_WAIT}))))

    assert outputs(result) == ["met", "met"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("auto_reconnect", "always"),
        ("auto_reconnect", 1),
        ("needs_approval", "sometimes"),
        ("trust_annotations", "yes"),
    ],
)
@pytest.mark.unit
def test_an_unknown_policy_value_is_refused_with_a_hint(option: str, value: object) -> None:
    with pytest.raises(UserError) as info:
        annotated(**{option: value})

    assert option in str(info.value) and info.value.hint


@pytest.mark.unit
def test_hints_that_are_not_booleans_count_as_not_given_and_a_tool_without_hints_costs_no_wire_bytes() -> None:
    from lovia_mcp_worker.wire.mcpjson import ToolSpec, tools_page
    from lovia_mcp_worker.wire.messages import encoder

    warnings: list[str] = []
    specs, _ = tools_page(
        json.dumps(
            {
                "tools": [
                    {"name": "a", "annotations": {"readOnlyHint": "yes", "idempotentHint": 1}},
                    {
                        "name": "b",
                        "annotations": {"readOnlyHint": True, "destructiveHint": None},
                        "_meta": ["not", "an", "object"],
                    },
                    {"name": "c", "annotations": "nonsense"},
                ]
            }
        ),
        warnings.append,
    )

    assert [s.annotations for s in specs] == [None, ToolAnnotations(read_only_hint=True), None]
    assert [s.meta for s in specs] == [None, None, None]
    assert warnings == []
    bare = ToolSpec(name="a", input_schema=specs[0].input_schema)
    assert encoder().encode(specs[0]) == encoder().encode(bare)
    assert b"annotations" not in encoder().encode(specs[2]) and b"meta" not in encoder().encode(specs[2])
