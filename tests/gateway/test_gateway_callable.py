"""What a gateway client may call is what it is listed: a tool the config or the lock hides is an unknown tool.

One gateway serves the module, with no access section (every principal
may use every server) and an audit log: servers whose ``exclude_tools`` or
``include_tools`` hide ``pid`` (the raw server's tool that answers its
pid: served, it would show that the hidden tool ran), one of them per
session, and a locked drift server whose ``shifty`` tool's ``_meta``
changed after the lock. Each hidden tool is called by name on ``/mcp`` and
on its server's own endpoint, in both eras, and must be answered exactly
as a name that no server has.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _gateway import PY, SERVERS, Serve, modern_call, raw, sdk_client, shared_by_module
from conftest import run

from lovia_mcp.opening.config_file.locking import lock_config

pytestmark = pytest.mark.timeout(120)

DRIFT = str(SERVERS / "drift_server.py")
# shifty's _meta when locked, and as the server lists it when served: what a
# client acts on (an MCP App's UI resource) changed with no other field.
LOCKED_META = {"ui": {"resourceUri": "ui://drift/view.html"}}
SERVED_META = {"ui": {"resourceUri": "ui://drift/exfiltrate.html"}}


def _servers(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "exc": raw(exclude_tools=["pid"]),
        "inc": raw(include_tools=["echo"]),
        "ps": raw(session="per-session", exclude_tools=["pid"]),
        "drift": {"command": PY, "args": [DRIFT], "env": {"DRIFT_META": json.dumps(meta)}},
        # The same server, its _meta as locked.
        "same": {"command": PY, "args": [DRIFT], "env": {"DRIFT_META": json.dumps(LOCKED_META)}},
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    folder = tmp_path_factory.mktemp("callable")
    # Locked as Serve will write the config, then served with shifty's _meta changed.
    config = folder / "mcp.json"
    config.write_text(json.dumps({"mcpServers": _servers(LOCKED_META)}))
    _, outcomes = run(lock_config(config))
    assert all(o.action == "locked" for o in outcomes), outcomes
    g = Serve(folder, _servers(SERVED_META), "--audit-log", str(folder / "audit.log"))
    with shared_by_module(g):
        yield g


def _audit(g: Serve) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(g.stderr_path).parent / "audit.log").read_text().splitlines()]


def _listed(g: Serve, path: str) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        async with sdk_client(g.base + path, g.headers, mode="legacy") as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    return run(main())


def _refusal(g: Serve, path: str, name: str) -> str:
    """The SDK client's error for ``name`` in a 2025 session, the name replaced by NAME."""
    from mcp.shared.exceptions import MCPError

    async def main() -> str:
        async with sdk_client(g.base + path, g.headers, mode="legacy") as client:
            try:
                result = await client.call_tool(name, {"text": "x"})
            except MCPError as exc:
                return repr(exc.error).replace(name, "NAME")
        raise AssertionError(f"{name} was served: {result}")

    return run(main())


@pytest.mark.parametrize(
    ("path", "hidden", "absent", "shown"),
    [
        ("/mcp", "exc__pid", "exc__nope", "exc__echo"),  # exclude_tools
        ("/mcp", "inc__pid", "inc__nope", "inc__echo"),  # include_tools
        ("/mcp", "ps__pid", "ps__nope", "ps__echo"),  # a per-session server's
        ("/mcp", "drift__shifty", "drift__nope", "drift__steady"),  # quarantined: its _meta changed since the lock
        ("/servers/exc/mcp", "pid", "nope", "echo"),  # the server's own endpoint
        ("/servers/inc/mcp", "pid", "nope", "echo"),
        ("/servers/drift/mcp", "shifty", "nope", "steady"),
    ],
)
def test_a_tool_the_filters_or_the_lock_hide_is_not_listed_and_its_call_answers_as_an_unknown_tool(
    gateway: Serve, path: str, hidden: str, absent: str, shown: str
) -> None:
    listed = _listed(gateway, path)
    assert hidden not in listed and shown in listed, sorted(listed)
    # 2026-07-28, by hand: the same bytes as for a name no server has.
    mine = gateway.headers["Authorization"]
    refused = modern_call(gateway, hidden, {"text": "x"}, mine, path=path)
    unknown = modern_call(gateway, absent, {"text": "x"}, mine, path=path)
    assert refused.status_code == unknown.status_code
    assert refused.json()["error"]["code"] == -32602, refused.text
    assert refused.content.replace(hidden.encode(), b"NAME") == unknown.content.replace(absent.encode(), b"NAME")
    # A 2025 session, through the SDK's client: the same error.
    errors = [_refusal(gateway, path, hidden), _refusal(gateway, path, absent)]
    assert errors[0] == errors[1] and "unknown tool" in errors[0], errors
    # Audited as an unknown tool, as the name that does not exist.
    lines = [line for line in _audit(gateway) if line["endpoint"] == path][-4:]
    assert [line["outcome"] for line in lines] == ["unknown"] * 4, lines
    assert lines[0]["tool"] == hidden.rpartition("__")[2]


def test_a_tools_meta_is_pinned_a_changed_one_quarantines_the_tool_and_one_as_locked_is_forwarded(
    gateway: Serve,
) -> None:
    listed = _listed(gateway, "/mcp")
    assert "drift__shifty" not in listed and "drift__steady" in listed
    assert listed["same__shifty"].meta == LOCKED_META
    assert "'shifty' (_meta changed since the lock)" in gateway.stderr()
    served = modern_call(gateway, "same__shifty", {"text": "hi"}, gateway.headers["Authorization"])
    assert served.json()["result"]["content"][0]["text"] == "shifty: hi"


__all__: list[str] = []
