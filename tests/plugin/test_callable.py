"""A connection calls only the tools it offers: a call by name outside them never reaches the server.

``include_tools`` / ``exclude_tools`` and the lock's quarantine decide
which of a server's tools a connection offers (``tools()``) and which raw
names ``call_tool`` takes (``callable_names``): one set. The raw server's
``pid`` tool answers its pid, so a hidden ``pid`` that were called would
answer instead of raising.

A tool's ``_meta`` is part of its pinned definition (a gateway forwards it
to clients that act on it): tests/servers/drift_server.py's ``shifty``
takes it from the config's ``env``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ISOLATIONS, PY, SERVERS, raw, run

from lovia_mcp import MCPConnection, MCPError, load_servers
from lovia_mcp.connection.live import UNKNOWN_TOOL_KIND
from lovia_mcp.opening.config_file.locking import lock_config


async def _refused(conn: MCPConnection, name: str) -> MCPError:
    try:
        result = await conn.call_tool(name, {})
    except MCPError as exc:
        return exc
    raise AssertionError(f"{name!r} was called: {result}")


@ISOLATIONS
@pytest.mark.parametrize("hides", [{"exclude_tools": ["pid"]}, {"include_tools": ["echo"]}])
def test_a_tool_the_filters_hide_is_refused_by_name_exactly_as_a_tool_the_server_does_not_have(
    isolation: str, hides: dict[str, list[str]]
) -> None:
    async def go() -> tuple[frozenset[str], list[str], MCPError, MCPError, str]:
        async with raw(isolation, **hides).session() as conn:
            hidden = await _refused(conn, "pid")
            absent = await _refused(conn, "nope")
            echoed = str(await conn.call_tool("echo", {"text": "still served"}))
            return conn.callable_names, [t.name for t in conn.tools()], hidden, absent, echoed

    callable_names, offered, hidden, absent, echoed = run(go())

    assert "pid" not in callable_names and "echo" in callable_names
    assert sorted(callable_names) == sorted(name.removeprefix("raw__") for name in offered)
    assert str(hidden).replace("pid", "NAME") == str(absent).replace("nope", "NAME")
    assert hidden.hint == absent.hint and hidden.hint
    assert getattr(hidden, "kind", None) == getattr(absent, "kind", None) == UNKNOWN_TOOL_KIND
    assert hidden.tool_name == "pid"
    assert echoed == "still served"


def _drift_config(folder: Path, meta: dict[str, object]) -> Path:
    path = folder / ".mcp.json"
    entry = {"command": PY, "args": [str(SERVERS / "drift_server.py")], "env": {"DRIFT_META": json.dumps(meta)}}
    path.write_text(json.dumps({"mcpServers": {"drift": entry}}), encoding="utf-8")
    return path


def test_a_tool_whose_meta_changed_after_the_lock_is_quarantined_and_refused_by_name(tmp_path: Path) -> None:
    run(lock_config(_drift_config(tmp_path, {"ui": {"resourceUri": "ui://drift/view.html"}})))
    path = _drift_config(tmp_path, {"ui": {"resourceUri": "ui://drift/elsewhere.html"}})

    async def go() -> tuple[list[str], frozenset[str], MCPError]:
        [server] = load_servers(path)
        async with server.session() as conn:
            return conn.quarantined, conn.callable_names, await _refused(conn, "shifty")

    quarantined, callable_names, refused = run(go())

    assert quarantined == ["shifty"] and callable_names == {"steady", "add_tool"}
    assert "_meta changed since the lock" in str(refused) and "lock --update" in str(refused)


__all__: list[str] = []
