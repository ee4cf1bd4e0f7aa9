"""Server configs: frozen, keyword-only, validated up front with a hint.

Plus what a config means at open time: which isolation applies, and what a
command that does not exist gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, raw_args, run
from lovia import Agent, Runner
from lovia.run_context import RunContext
from lovia.testing import ScriptedProvider, call, text

from lovia_mcp import MCP, Limits, MCPError, MCPServer, MCPServerStdio, MCPServerStreamableHTTP, UserError

STDIO = {"command": "npx"}
HTTP = {"url": "http://127.0.0.1:8000/mcp"}


@pytest.mark.unit
def test_a_positional_command_is_refused_so_it_cannot_silently_become_a_name() -> None:
    with pytest.raises(TypeError, match="positional"):
        MCPServerStdio("npx")  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional"):
        MCPServerStreamableHTTP("http://127.0.0.1:8000/mcp")  # type: ignore[misc]


@pytest.mark.unit
def test_the_shared_base_config_cannot_be_instantiated() -> None:
    with pytest.raises(UserError, match="shared base") as info:
        MCPServer()
    assert "MCPServerStdio(command=...)" in (info.value.hint or "")


@pytest.mark.unit
def test_a_config_is_frozen() -> None:
    server = MCPServerStdio(command="npx", args=["-y", "pkg"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        server.command = "uvx"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("cls", "options", "message", "hint"),
    [
        (
            MCPServerStdio,
            {"command": "npx", "args": "-y pkg"},
            "args must be a list of strings",
            "args=['--root', '/tmp']",
        ),
        (
            MCPServerStdio,
            {"command": "npx", "args": ["-y", 3]},
            "args must be a list of strings",
            "Split the arguments",
        ),
        (MCPServerStdio, {"command": ""}, "command must be a non-empty string", "MCPServerStdio(command="),
        (MCPServerStdio, {"command": "   "}, "command must be a non-empty string", "MCPServerStdio(command="),
        (MCPServerStdio, {"command": "npx", "env": {"TOKEN": 1}}, "env must map names to string values", "env={"),
        (MCPServerStdio, {**STDIO, "isolation": "thread"}, "unknown isolation 'thread'", "isolation='process'"),
        (MCPServerStreamableHTTP, {**HTTP, "isolation": "subprocess"}, "unknown isolation", "'none'"),
        (MCPServerStreamableHTTP, {"url": "127.0.0.1:8000/mcp"}, "url must be an http(s) URL", "url='http://"),
        (MCPServerStreamableHTTP, {"url": "ftp://example.com/mcp"}, "url must be an http(s) URL", "url='http://"),
        (MCPServerStreamableHTTP, {"url": ""}, "url must be an http(s) URL", "url='http://"),
        (MCPServerStdio, {**STDIO, "limits": {"memory_mb": 512}}, "limits must be a Limits", "Limits(memory_mb=512)"),
        (MCPServerStreamableHTTP, {**HTTP, "limits": 512}, "limits must be a Limits", "from lovia_mcp import Limits"),
        (MCPServerStdio, {**STDIO, "limits": Limits(memory_mb=-1)}, "memory_mb=-1", "for no limit"),
        (MCPServerStdio, {**STDIO, "limits": Limits(max_processes=0)}, "max_processes=0", "for no limit"),
        (MCPServerStdio, {**STDIO, "limits": Limits(max_result_bytes=0)}, "max_result_bytes=0", "positive byte count"),
        (
            MCPServerStdio,
            {**STDIO, "include_tools": "echo"},
            "include_tools must be a list of names",
            "include_tools=['echo']",
        ),
        (MCPServerStdio, {**STDIO, "exclude_tools": [1]}, "exclude_tools must be a list of names", "list of strings"),
        (
            MCPServerStdio,
            {**STDIO, "inherit_env": "HOME"},
            "inherit_env must be a list of names",
            "inherit_env=['HOME']",
        ),
        (MCPServerStdio, {**STDIO, "timeout": 0}, "timeout must be a positive number", "timeout=30"),
        (MCPServerStdio, {**STDIO, "open_timeout": -1}, "open_timeout must be a positive number", "open_timeout=30"),
        (MCPServerStdio, {**STDIO, "on_timeout": "ignore"}, "unknown on_timeout 'ignore'", "'cancel'"),
        (MCPServerStdio, {**STDIO, "restart_limit": 0}, "restart_limit >= 1", "defaults"),
        (MCPServerStdio, {**STDIO, "name": ""}, "name must be a non-empty string", "name='github'"),
    ],
)
@pytest.mark.unit
def test_bad_input_is_a_user_error_with_a_hint(cls: type, options: dict[str, Any], message: str, hint: str) -> None:
    with pytest.raises(UserError) as info:
        cls(**options)

    assert message in str(info.value)
    assert hint in (info.value.hint or "")


@pytest.mark.unit
def test_the_plugin_refuses_an_unknown_isolation_and_anything_that_is_not_a_server() -> None:
    with pytest.raises(UserError, match="unknown isolation 'fork'") as info:
        MCP(MCPServerStdio(command="npx"), isolation="fork")  # type: ignore[arg-type]
    assert "'process' or 'none'" in (info.value.hint or "")

    with pytest.raises(UserError, match="takes server configs or connections, got str") as info:
        MCP("npx")  # type: ignore[arg-type]
    assert "MCPServerStdio(command=" in (info.value.hint or "")


@pytest.mark.unit
def test_valid_limits_and_options_are_accepted() -> None:
    server = MCPServerStdio(
        command="uvx",
        args=["mcp-server-time"],
        env={"TZ": "UTC"},
        cwd="/tmp",
        limits=Limits(memory_mb=256, cpu_seconds=10, max_processes=8, max_open_files=64),
        timeout=30,
        open_timeout=10,
        on_timeout="cancel",
        include_tools=["now"],
        inherit_env=["HOME"],
    )
    assert server.limits == Limits(memory_mb=256, cpu_seconds=10, max_processes=8, max_open_files=64)


# --------------------------------------------------------------------------- #
# At open time
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    ("plugin_isolation", "server_isolation", "in_a_worker"),
    [("process", None, True), ("none", None, False), ("none", "process", True), ("process", "none", False)],
)
def test_a_servers_own_isolation_wins_over_the_plugins_default(
    plugin_isolation: str, server_isolation: str | None, in_a_worker: bool
) -> None:
    seen: list[int | None] = []

    def renderer(result: Any, ctx: RunContext[Any]) -> str:
        (conn,) = plugin.connections()
        seen.append(conn.worker_pid)
        return str(result)

    server = MCPServerStdio(command=PY, args=raw_args(), isolation=server_isolation, result_renderer=renderer)  # type: ignore[arg-type]
    plugin = MCP(server, isolation=plugin_isolation)  # type: ignore[arg-type]
    model = ScriptedProvider([call("echo", {"text": "where"}), text("done")])
    run(Runner.run(Agent(name="tester", model=model, plugins=[plugin]), "go"))

    (worker_pid,) = seen
    assert (worker_pid is not None) is in_a_worker


@ISOLATIONS
def test_a_command_that_does_not_exist_fails_at_open_time_with_a_hint(isolation: str) -> None:
    server = MCPServerStdio(command="no-such-mcp-server-xyz", isolation=isolation)  # type: ignore[arg-type]
    model = ScriptedProvider([text("never reached")])

    with pytest.raises(MCPError, match="command not found: 'no-such-mcp-server-xyz'") as info:
        run(Runner.run(Agent(name="tester", model=model, plugins=[MCP(server)]), "go"))

    assert "PATH" in (info.value.hint or "")
    assert model.calls == []


@pytest.mark.unit
@pytest.mark.parametrize("cls", [MCPServerStdio, MCPServerStreamableHTTP])
def test_a_configs_defaults_and_the_wires_defaults_agree_field_by_field(cls: type[MCPServer]) -> None:
    import msgspec
    from lovia_mcp_worker.wire.messages import ServerSpec

    wire = {f.name: f.default for f in msgspec.structs.fields(ServerSpec) if f.default is not msgspec.NODEFAULT}
    config = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    shared = sorted(set(wire) & set(config) - {"limits"})  # limits: None in the config means Limits()
    assert {"open_timeout", "kill_grace", "on_timeout", "protocol"} <= set(shared)
    assert {name: config[name] for name in shared} == {name: wire[name] for name in shared}
