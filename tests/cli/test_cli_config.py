"""``lovia-mcp tools|call|check --config FILE``: the command on a config file, run as a user runs it.

The servers are tests/servers/raw_server.py (starts in milliseconds) and a
command that does not exist; every run is bounded by ``CLI_TIMEOUT`` and
pytest-timeout, and ``no_leaks`` checks nothing is left behind.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ESCAPE_SERVER, PY, RAW_SERVER, error_of, lovia_mcp, lovia_mcp_all

pytestmark = pytest.mark.timeout(40)

RAW = {"command": PY, "args": [RAW_SERVER]}


def config(tmp_path: Path, servers: dict[str, Any], key: str = "mcpServers") -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({key: servers}), encoding="utf-8")
    return str(path)


def test_tools_with_config_lists_every_servers_tools_under_its_entry_name(tmp_path: Path) -> None:
    path = config(tmp_path, {"one": RAW, "two": {**RAW, "include_tools": ["add"]}})
    both, picked = lovia_mcp_all(
        ["tools", "--json", "--config", path], ["tools", "--json", "--config", path, "--server", "two"]
    )
    assert both.returncode == 0, both.stderr
    names = [t["name"] for t in json.loads(both.stdout)]
    assert "one__echo" in names and "two__add" in names and "two__echo" not in names
    assert picked.returncode == 0, picked.stderr
    assert [t["name"] for t in json.loads(picked.stdout)] == ["two__add"]


def test_call_with_config_finds_the_server_by_the_tools_prefix_or_by_server(tmp_path: Path) -> None:
    path = config(tmp_path, {"one": RAW, "two": {**RAW, "env": {"WHO": "two"}}}, key="servers")
    prefixed, named, unclear = lovia_mcp_all(
        ["call", "two__pid", "--config", path],
        ["call", "pid", "--config", path, "--server", "one"],
        ["call", "pid", "--config", path],
    )
    assert prefixed.returncode == 0, prefixed.stderr
    assert json.loads(prefixed.stdout)["env"].get("WHO") == "two"
    assert named.returncode == 0, named.stderr
    assert "WHO" not in json.loads(named.stdout)["env"]
    assert unclear.returncode == 2
    assert "which one has the tool 'pid'" in error_of(unclear) and "--server NAME (one of one, two)" in unclear.stderr


def test_check_prints_a_row_per_server_and_exits_three_when_one_fails(tmp_path: Path) -> None:
    path = config(tmp_path, {"good": RAW, "bad": {"command": "no-such-mcp-server-command"}})
    r = lovia_mcp("check", "--config", path)
    print(r.stdout)
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "TOOLS", "OPEN", "ERROR"]
    good = next(line.split() for line in lines if line.startswith("good "))
    bad = next(line for line in lines if line.startswith("bad "))
    assert good[1] == "ok" and int(good[2]) >= 20 and good[4] == "s" and float(good[3]) > 0
    assert bad.split()[1:3] == ["failed", "-"] and "command not found: 'no-such-mcp-server-command'" in bad
    # The whole error, hint included, on stderr.
    assert "error: MCP server 'bad' failed: command not found" in error_of(r) and "hint:" in r.stderr


def test_check_json_and_a_config_where_all_servers_work_exits_zero(tmp_path: Path) -> None:
    path = config(tmp_path, {"a": RAW, "b": RAW})
    r = lovia_mcp("check", "--json", "--config", path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(row["name"], row["status"], row["error"]) for row in rows] == [("a", "ok", None), ("b", "ok", None)]
    assert all(row["tools"] >= 20 and row["open_seconds"] > 0 for row in rows)
    print("open seconds:", [row["open_seconds"] for row in rows])


def test_command_line_flags_override_the_file_timeout(tmp_path: Path) -> None:
    path = config(tmp_path, {"raw": {**RAW, "timeout": 60}})
    r = lovia_mcp("call", "hang", "--timeout", "0.5", "--config", path)
    assert r.returncode == 3
    assert "timed out after 0.5 s" in error_of(r)


def test_config_mistakes_exit_two_with_a_message_naming_the_flag_or_the_entry(tmp_path: Path) -> None:
    path = config(tmp_path, {"raw": {**RAW, "timout": 5}})
    (tmp_path / "ok").mkdir()
    good = config(tmp_path / "ok", {"raw": RAW})
    cases = {
        "server 'raw': unknown key 'timout'": ["tools", "--config", path],
        "no config file at": ["tools", "--config", str(tmp_path / "missing.json")],
        "--cwd cannot be combined with --config": ["tools", "--config", good, "--cwd", "/"],
        "a command after '--' cannot be combined with --config": ["tools", "--config", good, "--", PY, RAW_SERVER],
        "has no server 'nope'": ["check", "--config", good, "--server", "nope"],
        "--server applies to --config only": ["tools", "--server", "raw", "--", PY, RAW_SERVER],
    }
    results = lovia_mcp_all(*cases.values())
    for (expected, args), r in zip(cases.items(), results):
        assert (r.returncode, r.stdout) == (2, ""), (args, r.stdout, r.stderr)
        assert expected in error_of(r) and "hint:" in r.stderr, (args, r.stderr)


def test_check_server_opens_its_entry_while_another_uses_an_unset_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/config-files.md's example, "time" being the raw server: "api" needs API_TOKEN.
    monkeypatch.delenv("API_TOKEN", raising=False)
    api = {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}}
    path = config(tmp_path, {"time": RAW, "api": api})
    time, every, named = lovia_mcp_all(
        ["check", "--json", "--config", path, "--server", "time"],
        ["check", "--config", path],
        ["check", "--config", path, "--server", "api"],
    )
    assert time.returncode == 0, time.stderr
    assert [(row["name"], row["status"]) for row in json.loads(time.stdout)] == [("time", "ok")]
    for r in (every, named):
        assert (r.returncode, r.stdout) == (2, ""), r.stderr
        assert "server 'api': headers.Authorization: the environment variable API_TOKEN is not set" in error_of(r)
        assert "hint: Set API_TOKEN" in r.stderr


def _sandbox_backend_here() -> bool:
    from lovia_mcp_worker.sandbox import bwrap, landlock

    from lovia_mcp import Sandbox

    namespaces = bwrap.BWRAP is not None and bwrap.userns_refused() is None
    return namespaces or not landlock.unavailable(Sandbox(backend="landlock"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_a_vscode_sandbox_path_under_workspace_folder_is_the_projects_folder(tmp_path: Path) -> None:
    if not _sandbox_backend_here():
        pytest.skip("no sandbox backend can run here")
    project = tmp_path / "proj"
    for folder in ("srv", "out", "other", ".vscode"):
        (project / folder).mkdir(parents=True)
    entry = {
        "command": PY,
        "args": [ESCAPE_SERVER],
        "cwd": "${workspaceFolder}/srv",
        "sandbox": {"filesystem": {"allowWrite": ["${workspaceFolder}/out"]}},
    }
    path = config(project / ".vscode", {"fs": entry}, key="servers")
    into_out, into_other = lovia_mcp_all(
        ["call", "write", json.dumps({"path": str(project / "out" / "made")}), "--config", path],
        ["call", "write", json.dumps({"path": str(project / "other" / "made")}), "--config", path],
    )
    print(into_out.stdout, into_out.stderr, into_other.stdout, into_other.stderr)
    assert (into_out.returncode, into_out.stdout.split()[0]) == (0, "ok"), into_out.stderr
    assert (project / "out" / "made").exists()
    # The box is real: the folder beside it stays read-only.
    assert into_other.stdout.startswith("denied") and not (project / "other" / "made").exists()


def test_keys_of_other_clients_are_noted_on_stderr_and_the_server_still_runs(tmp_path: Path) -> None:
    path = config(tmp_path, {"raw": {**RAW, "autoApprove": ["echo"]}})
    r = lovia_mcp("call", "raw__echo", '{"text": "hi"}', "--config", path)
    assert (r.returncode, r.stdout) == (0, "hi\n"), r.stderr
    assert "lovia-mcp: note:" in r.stderr and "ignoring 'autoApprove'" in r.stderr


def test_a_command_on_an_entry_with_spares_starts_the_server_once(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(
        "import os, sys\n"
        f"with open({str(starts)!r}, 'a') as f: f.write('start\\n')\n"
        f"os.execv(sys.executable, [sys.executable, {RAW_SERVER!r}])\n",
        encoding="utf-8",
    )
    path = config(tmp_path, {"raw": {"command": PY, "args": [str(wrapper)], "spares": 1}})
    # A call that hangs for a second: time enough for a standby to start, were one asked for.
    r = lovia_mcp("call", "hang", "--timeout", "1", "--config", path)
    assert r.returncode == 3 and "timed out" in error_of(r)
    assert starts.read_text(encoding="utf-8").splitlines() == ["start"]


def test_tools_json_help_mentions_annotations() -> None:
    r = lovia_mcp("tools", "--help")
    assert r.returncode == 0 and "annotations" in r.stdout, r.stdout
