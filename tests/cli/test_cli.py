"""The ``lovia-mcp`` command, run as a user runs it: ``python -m lovia_mcp`` in a subprocess.

Against the raw JSON-RPC server (tests/servers/raw_server.py), which starts in
milliseconds, and the demo (the SDK's ``MCPServer``). Every run is bounded by
``CLI_TIMEOUT`` and by pytest-timeout; the autouse ``no_leaks`` fixture checks
that the command left no worker or server behind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import CLI_TIMEOUT, PY, RAW_SERVER, ROOT, error_of, lovia_mcp, lovia_mcp_all
from lovia_mcp_worker.wire import failures
from lovia_mcp_worker.wire.messages import OPTIONS

from lovia_mcp.cli._args import OPTION_FLAGS, build_parser
from lovia_mcp.cli._servers import servers_from
from lovia_mcp.cli.main import cli_words, parameter_lines, tools_table
from lovia_mcp.connection._errors import reworded, to_error

pytestmark = pytest.mark.timeout(30)

RAW = ["--", PY, RAW_SERVER]


# --------------------------------------------------------------------------- #
# tools
# --------------------------------------------------------------------------- #
def test_tools_prints_a_table_of_names_parameters_and_descriptions() -> None:
    r = lovia_mcp("tools", *RAW)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "PARAMETERS", "DESCRIPTION"]
    assert any(line.split()[:4] == ["echo", "text?:", "string", "Echo"] for line in lines)
    add = next(i for i, line in enumerate(lines) if line.startswith("add "))
    assert "a?: number" in lines[add] and "b?: number" in lines[add + 1]
    assert r.stderr == ""


def test_tools_json_gives_each_tool_with_the_schema_the_model_receives() -> None:
    r = lovia_mcp("tools", "--json", *RAW)
    assert r.returncode == 0, r.stderr
    tools = {t["name"]: t for t in json.loads(r.stdout)}
    assert tools["add"]["description"] == "Add two numbers."
    assert tools["add"]["parameters"] == {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    }
    assert tools["fail"]["parameters"] == {"type": "object", "properties": {}}


def test_name_prefixes_the_tools_as_an_agent_sees_them_and_call_takes_the_prefixed_name() -> None:
    listed, called = lovia_mcp_all(
        ["tools", "--json", "--name", "raw", *RAW],
        ["call", "raw__echo", '{"text": "hi"}', "--name", "raw", *RAW],
    )
    assert listed.returncode == 0, listed.stderr
    assert "raw__echo" in {t["name"] for t in json.loads(listed.stdout)}
    assert (called.returncode, called.stdout) == (0, "hi\n"), called.stderr


def _tool(name: str, description: str, parameters: dict[str, object]) -> SimpleNamespace:
    """The three attributes of a lovia Tool the table reads."""
    return SimpleNamespace(name=name, description=description, parameters=parameters)


FORECAST_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "units": {"enum": ["metric", "imperial"], "default": "metric"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city"],
}


@pytest.mark.unit
def test_parameters_read_as_name_type_with_optional_marks_and_defaults() -> None:
    assert parameter_lines(FORECAST_SCHEMA) == [
        "city: string",
        "days?: integer|null = null",
        'units?: "metric"|"imperial" = "metric"',
        "tags?: string[]",
    ]
    assert parameter_lines({"type": "object", "properties": {}}) == []


@pytest.mark.unit
def test_the_table_wraps_descriptions_to_the_width_and_falls_back_to_blocks_when_narrow() -> None:
    tools = [
        _tool("forecast", "Today's weather forecast for a city, from canned data.", FORECAST_SCHEMA),
        _tool("ping", "", {"type": "object", "properties": {}}),
    ]
    wide = tools_table(tools, 80).splitlines()
    assert wide[0].split() == ["NAME", "PARAMETERS", "DESCRIPTION"]
    assert wide[1].split()[:3] == ["forecast", "city:", "string"]
    assert all(len(line) <= 80 for line in wide)
    assert any(line.startswith("ping") and line.split()[1:] == ["-", "-"] for line in wide)
    narrow = tools_table(tools, 40).splitlines()
    assert narrow[0] == "forecast" and "    city: string" in narrow


# --------------------------------------------------------------------------- #
# call
# --------------------------------------------------------------------------- #
def test_call_prints_the_result_as_the_model_reads_it_and_exits_zero() -> None:
    r = lovia_mcp("call", "mixed", *RAW)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "hello",
        "[image: image/png, 11 B]",
        "[audio: audio/wav, 3 B]",
        "inline text",
        "[resource: file:///b.bin, application/octet-stream, 6 B]",
        "[resource link: file:///c.txt]",
    ]
    assert r.stderr == ""


def test_an_is_error_result_is_printed_as_tool_error_and_exits_one() -> None:
    r = lovia_mcp("call", "fail", "{}", *RAW)
    assert (r.returncode, r.stdout, r.stderr) == (1, "[tool error] something went wrong\n", "")


def test_call_json_with_arguments_from_stdin_shows_content_error_flag_and_structured_content() -> None:
    r = lovia_mcp("call", "add", "-", "--json", *RAW, stdin='{"a": 2, "b": 3}')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "content": [{"type": "text", "text": "5"}],
        "is_error": False,
        "structured_content": {"sum": 5},
    }


@pytest.mark.unit
def test_header_takes_curls_name_colon_value_form_and_name_equals_value() -> None:
    from lovia_mcp.cli._args import _header

    assert _header("Authorization: Bearer abc==") == ("Authorization", "Bearer abc==")
    assert _header("X-Test=yes") == ("X-Test", "yes")
    assert _header("X-Url=http://a:b") == ("X-Url", "http://a:b")
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        _header("no separator")


def test_url_reaches_a_streamable_http_server_with_headers() -> None:
    pytest.importorskip("uvicorn")
    script = ROOT / "tests" / "servers" / "http_server.py"
    if not script.exists():
        pytest.skip("tests/servers/http_server.py is not there")
    server = subprocess.Popen([PY, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "PORT <n>" once it serves; bounded by pytest-timeout
        assert line.startswith("PORT "), line
        url = f"http://127.0.0.1:{line.split()[1]}/mcp"
        listed, called = lovia_mcp_all(
            ["tools", "--url", url],
            ["call", "add", '{"a": 1, "b": 2}', "--json", "--url", url, "--header", "X-Test=yes"],
        )
    finally:
        server.terminate()
        server.wait(CLI_TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:] if line[:1].strip()] == [
        "echo",
        "add",
        "pixel",
        "pid",
        "look",
        "add_tool",
    ]
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["structured_content"] == {"sum": 3.0}


# --------------------------------------------------------------------------- #
# server options
# --------------------------------------------------------------------------- #
def test_cwd_env_and_inherit_env_shape_the_server_process() -> None:
    # The script path is relative to --cwd: the server only starts if the cwd was applied.
    r = lovia_mcp(
        "call",
        "pid",
        "--cwd",
        str(ROOT / "tests" / "servers"),
        "--env",
        "GREETING=hello=world",
        "--inherit-env",
        "CLI_TEST_PASSED",
        "--",
        PY,
        "raw_server.py",
        env={"CLI_TEST_PASSED": "yes", "CLI_TEST_SECRET": "no"},
    )
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["env"]
    assert env["GREETING"] == "hello=world"
    assert env["CLI_TEST_PASSED"] == "yes"
    assert "CLI_TEST_SECRET" not in env


def test_isolation_none_runs_the_same_server_in_the_command_process() -> None:
    r = lovia_mcp("call", "echo", '{"text": "in process"}', "--isolation", "none", *RAW)
    assert (r.returncode, r.stdout) == (0, "in process\n"), r.stderr


def test_passing_the_memory_limit_fails_the_call_naming_the_limit() -> None:
    r = lovia_mcp("call", "alloc", '{"mb": 300}', "--memory-mb", "100", *RAW)
    assert r.returncode == 3
    message = error_of(r)
    # Said with the flag the user typed, not the library's option name.
    assert "memory limit" in message and "--memory-mb 100" in message and "memory_mb" not in r.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--upstream-proxy", "http://proxy.internal:3128"], "upstream_proxy needs a network allowlist"),
        (["--network", "a.test", "--upstream-proxy", "https://alice:s3cret@proxy:1"], "only an http:// proxy"),
        (["--network", "a.test", "--no-proxy", "a.test"], "no_proxy names what is reached without the upstream"),
    ],
)
def test_an_upstream_proxy_without_a_network_list_or_with_another_scheme_is_refused_before_anything_starts(
    flags: list[str], said: str
) -> None:
    r = lovia_mcp("tools", *flags, *RAW)
    assert r.returncode == 2 and said in error_of(r) and "s3cret" not in r.stderr


def test_max_result_bytes_caps_the_result_and_the_hint_names_the_flag() -> None:
    r = lovia_mcp("call", "big", '{"size": 200000}', "--max-result-bytes", "100000", *RAW)
    assert r.returncode == 3
    message = error_of(r)
    # The cap the flag set is the one the worker applied, and the hint says the flag to raise.
    assert "larger than max_result_bytes=100,000" in message, message
    assert "hint: Raise --max-result-bytes" in message and "Limits(" not in message, message


def test_kill_grace_and_max_result_bytes_set_the_options_of_a_command_a_url_and_a_config(tmp_path: Path) -> None:
    flags = ["--kill-grace", "0", "--max-result-bytes", "4096"]
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"raw": {"command": PY, "args": [RAW_SERVER], "kill_grace": 5}}}))
    parser = build_parser()
    command = servers_from(parser.parse_args(["tools", *flags]), [PY, RAW_SERVER])
    url = servers_from(parser.parse_args(["tools", *flags, "--url", "http://127.0.0.1:1/mcp"]), None)
    config = servers_from(parser.parse_args(["tools", *flags, "--config", str(path)]), None)
    for [server] in (command, url, config):
        assert server.kill_grace == 0 and server.limits is not None and server.limits.max_result_bytes == 4096
    with pytest.raises(SystemExit):
        parser.parse_args(["tools", "--kill-grace", "-1"])


def test_a_wedged_servers_hint_names_the_kill_grace_flag_on_the_command_line() -> None:
    failure = failures.wedged(0.5).failure(1)
    assert "raise kill_grace." in (failure.hint_text() or "")
    assert "raise --kill-grace." in (failure.hint_text(cli_words) or "")


def test_timeout_stops_a_hung_call_and_exits_three() -> None:
    r = lovia_mcp("call", "hang", "--timeout", "0.5", *RAW)
    assert r.returncode == 3
    assert "MCP tool 'hang' timed out after 0.5 s" in error_of(r)
    assert "hint: Raise --timeout" in r.stderr


# --------------------------------------------------------------------------- #
# failures: one message with a hint, never a traceback
# --------------------------------------------------------------------------- #
def test_a_server_crash_mid_call_exits_three_with_the_exit_code_and_stderr_tail() -> None:
    r = lovia_mcp("call", "stderr_then_exit", '{"lines": 2, "code": 7}', *RAW)
    assert r.returncode == 3
    message = error_of(r)
    assert "MCP tool 'stderr_then_exit' failed: the server exited with code 7" in message
    assert "hint:" in message and "stderr line 1" in message
    assert r.stdout == ""


def test_a_missing_command_fails_at_open_with_a_hint() -> None:
    r = lovia_mcp("tools", "--", "no-such-mcp-server-command")
    assert r.returncode == 3
    message = error_of(r)
    assert "command not found: 'no-such-mcp-server-command'" in message and "hint:" in message


MISTAKES = {
    "the tool arguments are not valid JSON": ["call", "echo", "{not json", *RAW],
    "the tool arguments must be a JSON object, got list": ["call", "echo", "[1, 2]", *RAW],
    "no server given": ["call", "echo"],
    "no command after '--'": ["tools", "--"],
    "both a command and --url given": ["tools", "--url", "http://127.0.0.1:1/mcp", *RAW],
    "--cwd apply to a server started from a command": ["tools", "--url", "http://127.0.0.1:1/mcp", "--cwd", "/"],
    "--header applies to --url only": ["tools", "--header", "A=b", *RAW],
    "url must be an http(s) URL": ["tools", "--url", "ftp://example.com"],
    "put the server's own command and its options after '--'": ["tools", "python", "server.py"],
    "expected NAME=VALUE": ["tools", "--env", "NOVALUE", *RAW],
    "expected a positive float": ["call", "echo", "--timeout", "-1", *RAW],
}


def test_command_line_mistakes_exit_two_with_a_message_and_start_nothing() -> None:
    results = lovia_mcp_all(*MISTAKES.values())
    for (expected, args), r in zip(MISTAKES.items(), results):
        assert (r.returncode, r.stdout) == (2, ""), (args, r.stdout, r.stderr)
        assert expected in error_of(r), (args, r.stderr)


def test_an_unknown_tool_exits_two_and_suggests_the_closest_names() -> None:
    r = lovia_mcp("call", "ech", '{"text": "x"}', *RAW)
    assert r.returncode == 2
    message = error_of(r)
    assert "the server has no tool 'ech'" in message
    assert "Did you mean 'echo'?" in message and "lovia-mcp tools --" in message


# --------------------------------------------------------------------------- #
# logging, help, demo
# --------------------------------------------------------------------------- #
def test_the_servers_stderr_is_silent_by_default_and_shown_with_verbose() -> None:
    quiet, loud = lovia_mcp_all(
        ["call", "chatty", '{"lines": 3}', *RAW],
        ["call", "chatty", '{"lines": 3}', "-v", *RAW],
    )
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "done chatting\n", "")
    assert loud.returncode == 0, loud.stderr
    assert "lovia_mcp.server.python: INFO: chatty line 2" in loud.stderr
    assert "connected (process isolation" in loud.stderr


def test_help_is_there_for_every_command_and_documents_the_exit_statuses() -> None:
    top, tools, call, demo = lovia_mcp_all(["--help"], ["tools", "--help"], ["call", "-h"], ["demo", "--help"])
    for r, usage in (
        (top, "lovia-mcp [-h]"),
        (tools, "lovia-mcp tools"),
        (call, "lovia-mcp call TOOL"),
        (demo, "lovia-mcp demo"),
    ):
        assert (r.returncode, r.stderr) == (0, "")
        assert r.stdout.startswith(f"usage: {usage}")
    for r in (top, call):
        assert "exit status:" in r.stdout and "1    call: the tool answered with an error result (isError)" in r.stdout
    assert "--memory-mb" in tools.stdout and "--inherit-env" in call.stdout


def test_demo_exits_zero_and_shows_the_agent_survived_the_server_crash() -> None:
    r = lovia_mcp("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "[tool error] Error executing tool forecast: no forecast for 'Atlantis'" in out
    assert "MCP tool 'crash' failed: the server exited with code 1" in out
    assert "a fresh server answered" in out
    assert "the agent process never imported mcp ('mcp' in sys.modules is False)" in out
    assert "no worker or server process is left behind" in out
    assert "FAIL" not in out and "demo passed" in out


def test_an_open_timeout_error_names_the_open_timeout_flag() -> None:
    # A command that never answers the MCP handshake; `tools` says it as an
    # error, `check` in its table's row.
    silent = ["--open-timeout", "0.5", "--", PY, "-c", "import time; time.sleep(30)"]
    tools, check = lovia_mcp_all(["tools", *silent], ["check", "--json", *silent])
    assert tools.returncode == 3, tools.stderr
    assert "within --open-timeout 0.5 s" in tools.stderr and "raise --open-timeout." in tools.stderr, tools.stderr
    assert "open_timeout" not in tools.stderr, tools.stderr
    assert check.returncode == 3, check.stderr
    (row,) = json.loads(check.stdout)
    assert "--open-timeout 0.5" in row["error"] and "open_timeout" not in row["error"], row


def test_every_option_a_failure_can_name_is_a_flag_of_each_server_command() -> None:
    assert set(OPTION_FLAGS) == set(OPTIONS)
    parser = build_parser()
    for option, flag in OPTION_FLAGS.items():
        for command in (["tools"], ["call", "echo"], ["check"]):
            ns, extra = parser.parse_known_args([*command, flag, "7"])
            # The flag sets the option of the same name: what the error says to raise is what it raises.
            assert (extra, getattr(ns, option)) == ([], 7), (command, flag)


def test_a_failure_naming_an_option_is_worded_by_each_front_end_from_the_same_data() -> None:
    failure = failures.open_timed_out("slow", 0.5, ["booting"], head=b"").failure(1)
    assert (failure.option, failure.value) == ("open_timeout", "0.5")
    library = str(to_error(failure, None, "slow"))
    assert "within open_timeout=0.5 s" in library and "or raise open_timeout." in library, library
    cli = str(reworded(to_error(failure, None, "slow"), cli_words))
    assert "within --open-timeout 0.5 s" in cli and "or raise --open-timeout." in cli, cli
    assert "open_timeout" not in cli and "booting" in cli, cli
    limit = failures.limit(failures.Breach("memory", "300.0 MB", "memory_mb", "100"), []).failure(2)
    assert "(memory_mb=100)" in limit.text() and "Raise Limits(memory_mb=...)" in (limit.hint_text() or "")
    assert "(--memory-mb 100)" in limit.text(cli_words) and "Raise --memory-mb" in (limit.hint_text(cli_words) or "")


def test_tools_json_gives_each_tools_annotations_under_their_mcp_names() -> None:
    r = lovia_mcp("tools", "--json", "--", PY, str(ROOT / "tests" / "servers" / "annotated_server.py"))

    assert r.returncode == 0, r.stderr
    tools = {t["name"]: t for t in json.loads(r.stdout)}
    assert tools["read"]["annotations"] == {"title": "Read it", "readOnlyHint": True}
    assert tools["put"]["annotations"] == {"idempotentHint": True, "destructiveHint": False}
    assert "annotations" not in tools["plain"]
