"""``load_servers`` / ``MCP.from_config``: the mcp.json files users already have.

Pure parsing is tested on dicts and files in ``tmp_path``; the last tests open
a real server (tests/servers/raw_server.py) described by a file, once
directly and once through a lovia ``Agent``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import PY, RAW_SERVER, copy_raw_server, drive, outputs, run
from lovia.testing import call

import lovia_mcp.opening.config_file.loader as config_file
from lovia_mcp import MCP, Limits, MCPServerStdio, MCPServerStreamableHTTP, Sandbox, UserError, load_servers
from lovia_mcp.opening.config_file.loader import strip_jsonc

pytestmark = pytest.mark.timeout(30)


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def error(source: Any, **overrides: Any) -> UserError:
    with pytest.raises(UserError) as info:
        load_servers(source, **overrides)
    return info.value


# --------------------------------------------------------------------------- #
# the two shapes
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_claude_style_mcpservers_and_vscode_style_servers_give_the_same_configs() -> None:
    entries = {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}, "cwd": "/srv"},
        "api": {"type": "http", "url": "https://example.com/mcp", "headers": {"X-Key": "k"}},
    }
    vscode = {"servers": {"time": {"type": "stdio", **entries["time"]}, "api": entries["api"]}, "inputs": []}

    claude = load_servers({"mcpServers": entries})

    assert claude == load_servers(vscode)
    assert claude == [
        MCPServerStdio(name="time", command="uvx", args=["mcp-server-time"], env={"TZ": "UTC"}, cwd="/srv"),
        MCPServerStreamableHTTP(name="api", url="https://example.com/mcp", headers={"X-Key": "k"}),
    ]


@pytest.mark.unit
def test_an_entry_with_a_url_and_no_type_is_http_and_the_other_spellings_of_http_are_accepted() -> None:
    servers = load_servers(
        {
            "mcpServers": {
                "a": {"url": "http://127.0.0.1:1/mcp"},
                "b": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp"},
                "c": {"transport": "streamableHttp", "url": "http://127.0.0.1:1/mcp"},
            }
        }
    )
    assert [type(s) for s in servers] == [MCPServerStreamableHTTP] * 3


@pytest.mark.unit
def test_jsonc_comments_and_trailing_commas_are_accepted_and_bad_json_is_located(tmp_path: Path) -> None:
    text = '{\n  // VS Code writes these\n  "servers": {"a": {"command": "x", /* inline */ "args": ["//not a comment",],},},\n}'
    assert json.loads(strip_jsonc(text))["servers"]["a"]["args"] == ["//not a comment"]
    assert load_servers(write(tmp_path / "mcp.json", text))[0].args == ["//not a comment"]

    message = str(error(write(tmp_path / "bad.json", '{"mcpServers": {"a": {"command": "x" "args": []}}}')))
    assert "not valid JSON" in message and "line 1 column" in message and "hint:" in message


# --------------------------------------------------------------------------- #
# ${VAR}
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_variables_are_expanded_in_command_args_env_url_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CF_BIN", "/opt/bin")
    monkeypatch.setenv("CF_TOKEN", "s3cret")
    monkeypatch.setenv("CF_EMPTY", "")
    monkeypatch.delenv("CF_UNSET", raising=False)
    stdio, http = load_servers(
        {
            "mcpServers": {
                "s": {
                    "command": "${CF_BIN}/server",
                    "args": ["--token=${CF_TOKEN}", "${CF_UNSET:-fallback}"],
                    "env": {"TOKEN": "${env:CF_TOKEN}", "LEVEL": "${CF_EMPTY:-info}", "KEEP": "${CF_EMPTY}"},
                },
                "h": {
                    "url": "https://${CF_UNSET:-example.com}/mcp",
                    "headers": {"Authorization": "Bearer ${CF_TOKEN}"},
                },
            }
        }
    )
    assert isinstance(stdio, MCPServerStdio) and isinstance(http, MCPServerStreamableHTTP)
    assert stdio.command == "/opt/bin/server"
    assert stdio.args == ["--token=s3cret", "fallback"]
    assert stdio.env == {"TOKEN": "s3cret", "LEVEL": "info", "KEEP": ""}
    assert http.url == "https://example.com/mcp"
    assert http.headers == {"Authorization": "Bearer s3cret"}


@pytest.mark.unit
def test_an_undefined_variable_without_a_default_is_an_error_naming_it_never_an_empty_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CF_MISSING_TOKEN", raising=False)
    e = error(
        {"mcpServers": {"api": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${CF_MISSING_TOKEN}"}}}}
    )
    assert "CF_MISSING_TOKEN is not set" in str(e) and "'api'" in str(e) and "headers" in str(e)
    assert e.hint and "${CF_MISSING_TOKEN:-" in e.hint
    assert "is a VS Code prompt" in str(error({"servers": {"a": {"command": "x", "env": {"K": "${input:key}"}}}}))
    assert "not a variable reference" in str(error({"mcpServers": {"a": {"command": "x", "args": ["${1BAD}"]}}}))


def _docs_example(tmp_path: Path) -> Path:
    """docs/config-files.md's example: "api" needs API_TOKEN, the others need nothing."""
    return write(
        tmp_path / ".mcp.json",
        {
            "mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"], "timeout": 30},
                "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]},
                "api": {
                    "type": "http",
                    "url": "https://example.com/mcp",
                    "headers": {"Authorization": "Bearer ${API_TOKEN}"},
                },
            }
        },
    )


@pytest.mark.unit
def test_an_unset_variable_fails_only_the_entry_that_uses_it_when_others_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("API_TOKEN", raising=False)
    path = _docs_example(tmp_path)
    (time,) = load_servers(path, names=["time"])
    assert isinstance(time, MCPServerStdio) and (time.name, time.args) == ("time", ["mcp-server-time"])
    for names in ([], ["api"], ["time", "api"]):
        e = error(path, names=names)
        assert "server 'api': headers.Authorization: the environment variable API_TOKEN is not set" in str(e)
    # In the file's order, whatever the order asked; the plugin takes names= too.
    assert [s.name for s in load_servers(path, names=["fs", "time"])] == ["time", "fs"]
    assert [s.name for s in MCP.from_config(path, names=["fs"]).servers] == ["fs"]  # type: ignore[attr-defined]


@pytest.mark.unit
def test_naming_an_entry_the_file_lacks_or_has_disabled_is_an_error_with_a_hint(tmp_path: Path) -> None:
    path = _docs_example(tmp_path)
    e = error(path, names=["time", "clock"])
    assert "has no server 'clock'" in str(e) and e.hint == "Its servers: 'time', 'fs', 'api'."
    e = error(path, names="time")
    assert "names= as a list" in str(e) and e.hint == "load_servers(path, names=['time'])"
    e = error({"mcpServers": {"a": {"command": "x"}, "b": {"command": "y", "disabled": True}}}, names=["b"])
    assert "server 'b' is disabled in the file" in str(e) and e.hint and '"disabled": false' in e.hint


# --------------------------------------------------------------------------- #
# keys
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_an_unknown_key_is_an_error_with_a_hint_that_suggests_the_closest() -> None:
    e = error({"mcpServers": {"a": {"command": "x", "timout": 5}}})
    assert "server 'a': unknown key 'timout'" in str(e)
    assert e.hint and "Did you mean 'timeout'?" in e.hint
    e = error({"mcpServers": {"a": {"command": "x"}}, "settings": {}})
    assert "unknown top-level key 'settings'" in str(e) and e.hint
    assert "does not apply to a server started from a command" in str(
        error({"mcpServers": {"a": {"command": "x", "headers": {}}}})
    )


@pytest.mark.unit
def test_other_clients_keys_are_ignored_with_a_note_and_disabled_entries_are_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lovia_mcp.config")
    servers = load_servers(
        {
            "mcpServers": {
                "a": {"command": "x", "autoApprove": ["echo"], "description": "for people", "disabled": False},
                "b": {"command": "y", "disabled": True},
            }
        }
    )
    assert [s.name for s in servers] == ["a"]
    notes = [r.getMessage() for r in caplog.records if r.name == "lovia_mcp.config"]
    assert any("ignoring 'autoApprove'" in n for n in notes)
    assert any("ignoring 'description'" in n for n in notes)
    assert any("server 'b' is disabled" in n for n in notes)


@pytest.mark.unit
def test_missing_or_conflicting_transport_keys_and_sse_are_errors_with_hints() -> None:
    for entry, expected in (
        ({}, "neither 'command' nor 'url'"),
        ({"command": "x", "url": "http://h/mcp"}, "both 'command' and 'url'"),
        ({"type": "http", "command": "x"}, "an HTTP server needs a 'url'"),
        ({"type": "sse", "url": "http://h/sse"}, "SSE servers are not supported"),
        ({"type": "websocket", "url": "ws://h"}, "unknown type 'websocket'"),
    ):
        e = error({"mcpServers": {"a": entry}})
        assert expected in str(e) and e.hint, (entry, str(e))
    assert "no 'mcpServers' or 'servers'" in str(error({"tools": {}}))
    assert "non-empty object" in str(error({"mcpServers": {}}))


# --------------------------------------------------------------------------- #
# lovia-mcp's own options per entry
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_lovia_mcp_options_per_entry_are_converted_to_their_types() -> None:
    (server,) = load_servers(
        {
            "servers": {
                "fs": {
                    "command": "npx",
                    "args": ["-y", "server-filesystem"],
                    "timeout": 30,
                    "open_timeout": 10,
                    "defer": True,
                    "include_tools": ["read_file"],
                    "isolation": "none",
                    "limits": {"memory_mb": 512, "max_processes": 16},
                    "sandbox": {"filesystem": {"allowWrite": ["/srv/data"]}, "network": {"allowedDomains": []}},
                    "on_timeout": "cancel",
                    "needs_approval": True,
                }
            }
        }
    )
    assert isinstance(server, MCPServerStdio)
    assert (server.timeout, server.open_timeout, server.defer, server.isolation) == (30.0, 10.0, True, "none")
    assert server.include_tools == ["read_file"] and server.on_timeout == "cancel" and server.needs_approval is True
    assert server.limits == Limits(memory_mb=512, max_processes=16)
    assert server.sandbox == Sandbox(network=False, writable=["/srv/data"])


@pytest.mark.unit
def test_wrong_option_values_are_errors_naming_the_option() -> None:
    for value, expected in (
        ({"timeout": "30"}, "timeout must be a number"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"defer": "yes"}, "defer must be true or false"),
        ({"isolation": "proc"}, 'isolation must be "process" or "none"'),
        ({"limits": {"memory": 512}}, "limits: unknown key(s) 'memory'"),
        ({"limits": {"memory_mb": "lots"}}, "limits.memory_mb must be a number"),
        ({"include_tools": "echo"}, "include_tools must be a list of strings"),
        ({"result_renderer": "render"}, "only code can give"),
        ({"sandbox": {"filesystem": {"allowWrite": "/srv"}}}, "sandbox filesystem.allowWrite must be a list"),
    ):
        e = error({"mcpServers": {"a": {"command": "x", **value}}})
        assert "server 'a'" in str(e) and expected in str(e) and e.hint, (value, str(e))


@pytest.mark.unit
def test_vscode_sandbox_enabled_turns_the_sandbox_on_or_off() -> None:
    on, off = load_servers(
        {
            "servers": {
                "on": {"command": "x", "sandboxEnabled": True},
                "off": {"command": "x", "sandboxEnabled": False, "sandbox": {"network": {"allowedDomains": []}}},
            }
        }
    )
    assert isinstance(on, MCPServerStdio) and isinstance(off, MCPServerStdio)
    assert (on.sandbox, off.sandbox) == (Sandbox(), None)


@pytest.mark.unit
def test_a_field_added_to_the_config_class_is_accepted_without_touching_the_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithWarmups(MCPServerStdio):
        warmups: int = 0

    assert "warmups" not in {f.name for f in dataclasses.fields(MCPServerStdio)}
    monkeypatch.setattr(config_file, "MCPServerStdio", WithWarmups)
    (server,) = load_servers({"mcpServers": {"a": {"command": "x", "warmups": 2}}})
    assert isinstance(server, WithWarmups) and server.warmups == 2
    assert "warmups must be an integer" in str(error({"mcpServers": {"a": {"command": "x", "warmups": 1.5}}}))


@pytest.mark.unit
def test_overrides_apply_to_every_server_and_win_over_the_file() -> None:
    servers = load_servers(
        {"mcpServers": {"a": {"command": "x", "timeout": 5}, "b": {"url": "http://h/mcp"}}},
        timeout=30,
        isolation="none",
    )
    assert [(s.timeout, s.isolation) for s in servers] == [(30, "none"), (30, "none")]
    e = error({"mcpServers": {"a": {"command": "x"}}}, timeot=3)
    assert "unknown option(s): timeot" in str(e) and e.hint


# --------------------------------------------------------------------------- #
# paths
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_relative_cwd_command_and_env_file_are_relative_to_the_files_folder(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    write(folder / ".env", "# secrets\nexport API_KEY='from file'\nLEVEL=debug # trailing\nSHARED=file\n")
    path = write(
        folder / "mcp.json",
        {
            "mcpServers": {
                "local": {"command": "./bin/server", "cwd": "work", "envFile": ".env", "env": {"SHARED": "entry"}},
                "onpath": {"command": "npx", "cwd": "/abs"},
                "home": {"command": "~/bin/server", "cwd": "~/work"},
            }
        },
    )
    local, onpath, home = load_servers(path)
    assert isinstance(local, MCPServerStdio) and isinstance(onpath, MCPServerStdio)
    assert local.command == str(folder.resolve() / "bin" / "server")
    assert local.cwd == str(folder.resolve() / "work")
    # The entry's env wins over the envFile's, as in VS Code.
    assert local.env == {"API_KEY": "from file", "LEVEL": "debug", "SHARED": "entry"}
    assert (onpath.command, onpath.cwd) == ("npx", "/abs")
    assert isinstance(home, MCPServerStdio)
    assert (home.command, home.cwd) == (str(Path.home() / "bin" / "server"), str(Path.home() / "work"))
    assert "cannot read envFile" in str(
        error(write(folder / "m2.json", {"mcpServers": {"a": {"command": "x", "envFile": "missing.env"}}}))
    )


@pytest.mark.unit
def test_workspace_folder_is_the_folder_above_dot_vscode(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".vscode" / "mcp.json", {"servers": {"fs": {"command": "npx", "args": ["${workspaceFolder}/data"]}}}
    )
    (server,) = load_servers(path)
    assert isinstance(server, MCPServerStdio) and server.args == [f"{tmp_path.resolve()}/data"]


@pytest.mark.unit
def test_vscode_variables_are_filled_in_in_every_expanded_field_the_sandbox_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, home = tmp_path / "proj", tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CF_LEVEL", "debug")
    path = write(
        project / ".vscode" / "mcp.json",
        {
            "servers": {
                "fs": {
                    "command": "${workspaceFolder}/bin/server",
                    "args": ["--name=${workspaceFolderBasename}", "${userHome}/data", "a${/}b${pathSeparator}c"],
                    "cwd": "${workspaceFolder}/srv",
                    "env": {"LEVEL": "${env:CF_LEVEL}", "ROOT": "${workspaceFolder}"},
                    "sandbox": {
                        "filesystem": {"allowWrite": ["${workspaceFolder}/out"], "denyRead": ["${userHome}/.keys"]},
                        "network": {"allowedDomains": []},
                    },
                },
                "own": {
                    "command": "x",
                    "sandbox": {"writable": ["${workspaceFolder}/out"], "readable": ["${userHome}"]},
                },
            }
        },
    )
    fs, own = load_servers(path)
    root = project.resolve()
    assert isinstance(fs, MCPServerStdio) and isinstance(own, MCPServerStdio)
    assert fs.command == f"{root}/bin/server" and fs.cwd == f"{root}/srv"
    assert fs.args == ["--name=proj", f"{home}/data", "a/b/c"]
    assert fs.env == {"LEVEL": "debug", "ROOT": str(root)}
    assert isinstance(fs.sandbox, Sandbox) and fs.sandbox.writable == [f"{root}/out"]
    assert fs.sandbox.hidden is not None and f"{home}/.keys" in fs.sandbox.hidden
    assert isinstance(own.sandbox, Sandbox)
    assert (own.sandbox.writable, own.sandbox.readable) == ([f"{root}/out"], [str(home)])


@pytest.mark.unit
def test_outside_dot_vscode_the_workspace_folder_is_the_files_own_folder(tmp_path: Path) -> None:
    path = write(
        tmp_path / "repo" / ".mcp.json", {"mcpServers": {"a": {"command": "x", "args": ["${workspaceFolder}"]}}}
    )
    assert load_servers(path)[0].args == [str((tmp_path / "repo").resolve())]
    e = error({"servers": {"a": {"command": "x", "args": ["${workspaceFolderBasename}"]}}})
    assert "needs a config file to be relative to" in str(e) and e.hint


@pytest.mark.parametrize(
    "variable, said, hinted",
    [
        ("${input:api-token}", "is a VS Code prompt", "${API_TOKEN}"),
        ("${config:python.defaultInterpreterPath}", "is a VS Code setting", "environment variable"),
        ("${command:pickFolder}", "the result of a VS Code command", "environment variable"),
        ("${workspaceFolder:web}", "a folder of a VS Code multi-root workspace", "${workspaceFolder}"),
        ("${file}", "VS Code's variable for the editor's own state", "${userHome}"),
        ("${selectedText}", "VS Code's variable for the editor's own state", "${env:NAME}"),
        ("${workspacefolder}", "the environment variable workspacefolder is not set", "${workspaceFolder}?"),
        ("${work space}", "is not a variable reference", "${workspaceFolder}"),
    ],
)
@pytest.mark.unit
def test_a_vscode_variable_lovia_mcp_cannot_fill_in_is_an_error_with_a_hint_not_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, said: str, hinted: str
) -> None:
    monkeypatch.delenv("workspacefolder", raising=False)
    path = write(
        tmp_path / ".vscode" / "mcp.json",
        {"servers": {"fs": {"command": "x", "sandbox": {"filesystem": {"allowWrite": [f"{variable}/out"]}}}}},
    )
    e = error(path)
    assert said in str(e) and "server 'fs': sandbox.filesystem.allowWrite" in str(e)
    assert e.hint and hinted in e.hint


@pytest.mark.unit
def test_a_missing_file_and_a_non_object_are_errors_with_hints(tmp_path: Path) -> None:
    e = error(tmp_path / "nope.json")
    assert "no config file at" in str(e) and e.hint
    assert "top level must be a JSON object" in str(error(write(tmp_path / "list.json", [1])))


# --------------------------------------------------------------------------- #
# a real server from a file
# --------------------------------------------------------------------------- #
def test_a_server_opened_from_a_file_answers_with_the_files_environment(tmp_path: Path) -> None:
    # cwd relative to the file, the script relative to that cwd: the server
    # only starts if cwd was resolved against the file's folder.
    folder = tmp_path / "repo"
    copy_raw_server(folder / "servers" / "raw_server.py")
    path = write(
        folder / "mcp.json",
        {
            "mcpServers": {
                "raw": {
                    "command": PY,
                    "args": ["raw_server.py"],
                    "cwd": "servers",
                    "env": {"GREETING": "${CF_GREETING:-hello from the file}"},
                    "timeout": 10,
                }
            }
        },
    )
    (server,) = load_servers(path)

    async def go() -> tuple[str, str]:
        async with server.session() as conn:
            assert "raw__pid" in {t.name for t in conn.tools()}
            pid = await conn.call_tool("pid", {})
            cwd = await conn.call_tool("cwd", {})
            return pid.content[0].text, cwd.content[0].text  # type: ignore[union-attr]

    pid_text, cwd_text = run(go())
    assert json.loads(pid_text)["env"]["GREETING"] == "hello from the file"
    assert Path(cwd_text) == (folder / "servers").resolve()


def test_mcp_from_config_mounts_the_files_servers_on_an_agent(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", {"mcpServers": {"raw": {"command": PY, "args": [RAW_SERVER]}}})
    plugin = MCP.from_config(path, timeout=10)
    assert [s.timeout for s in plugin.servers] == [10]  # type: ignore[attr-defined]
    result, _ = run(drive(plugin, call("raw__echo", {"text": "via the file"})))
    assert outputs(result) == ["via the file"]


@pytest.mark.unit
def test_an_env_file_value_in_quotes_followed_by_a_comment_loses_its_quotes(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", 'A="abc" # prod\nB=\'x y\'   #c\nC="keep # inside"\nD=plain # note\n')
    assert config_file.read_env_file(path) == {"A": "abc", "B": "x y", "C": "keep # inside", "D": "plain"}


@pytest.mark.unit
def test_a_dict_source_may_hold_paths_and_a_wrong_value_is_an_error_not_a_traceback() -> None:
    from pathlib import Path

    (server,) = load_servers(
        {"mcpServers": {"a": {"command": "python3", "args": [Path("/srv/s.py")], "cwd": Path("/srv")}}}
    )
    assert server.args == ["/srv/s.py"] and str(server.cwd) == "/srv"
    with pytest.raises(UserError, match="timeout must be a number"):
        load_servers({"mcpServers": {"a": {"command": "python3", "timeout": Path("/srv")}}})


@pytest.mark.parametrize(
    "source, overrides, match",
    [
        ({"mcpServers": {"a": {"command": "python3", "disabled": "true"}}}, {}, "'disabled' must be true or false"),
        ({"mcpServers": {"a": {"command": "python3", "name": "b"}}}, {}, "the entry's key is its name"),
        ({"mcpServers": {"a": {"command": "python3"}}}, {"name": "b"}, "each entry's key is its name"),
    ],
)
@pytest.mark.unit
def test_a_non_boolean_disabled_and_a_name_besides_the_entrys_key_are_refused(
    source: dict[str, Any], overrides: dict[str, Any], match: str
) -> None:
    with pytest.raises(UserError, match=match):
        load_servers(source, **overrides)
