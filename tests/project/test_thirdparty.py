"""MCP servers nobody on this project wrote, run through process isolation.

- PyPI: ``mcp-server-time``, ``mcp-server-git`` (the MCP SDK's ``MCPServer``);
- npm: ``@modelcontextprotocol/server-everything`` and
  ``@modelcontextprotocol/server-filesystem`` (the TypeScript SDK).

``scripts/thirdparty.sh`` installs them, at pinned versions, into
``.cache/thirdparty/`` (never into the project's ``.venv``); ``scripts/test.sh``
runs it before pytest. These tests find the installs by path and skip, with
the reason, only when node is absent or the script has not been run.

One connection to server-everything is shared by the tests that do not test
isolation between connections. Tests are plain functions and a connection
is bound to its event loop, so the shared connection lives on one
module-scoped loop running in a background thread; tests submit coroutines
to it. Tests that need a server of their own (its own cwd, environment or
agent run) open it on that loop too and close it before they return, which
the ``no_leaks`` fixture checks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from helpers import ROOT
from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, batch, text
from lovia.transcript import ToolResultEntry
from lovia_mcp_worker.containment.launch import ENV_ALLOWLIST

from lovia_mcp import MCP, MCPConnection, MCPServerStdio, MCPToolResult, Sandbox
from lovia_mcp.render import default_renderer

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")

INSTALL = ROOT / ".cache" / "thirdparty"
VENV_BIN = INSTALL / "venv" / "bin"
NPM_SCOPE = INSTALL / "npm" / "node_modules" / "@modelcontextprotocol"
EVERYTHING_JS = NPM_SCOPE / "server-everything" / "dist" / "index.js"
FILESYSTEM_JS = NPM_SCOPE / "server-filesystem" / "dist" / "index.js"
TIME_BIN = VENV_BIN / "mcp-server-time"
GIT_BIN = VENV_BIN / "mcp-server-git"
NODE = shutil.which("node")

# Bound on one submitted coroutine: a cold Python server's start-up (importing
# mcp) is ~1 s, a node server's ~0.5 s; pytest-timeout is the outer bound.
RUN_WAIT = 30.0
# Bound on the loop thread finishing after it is told to stop.
JOIN_WAIT = 5.0
# Bound on a closed connection's worker and server being gone.
GONE_WAIT = 5.0

# In the agent's environment, never meant for a server.
SECRET_NAME = "LOVIA_MCP_THIRDPARTY_SECRET"
# Allowlisted by its LC_ prefix: the control showing that the agent's
# environment, as the test set it, did reach the worker.
PROBE_NAME = "LC_LOVIA_MCP_THIRDPARTY_PROBE"


def _need_node() -> None:
    if NODE is None:
        pytest.skip("node is not on PATH: the npm MCP servers cannot run here")


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is missing: run `bash scripts/thirdparty.sh` (scripts/test.sh does)")


def everything(**options: Any) -> MCPServerStdio:
    _need_node()
    _need(EVERYTHING_JS)
    assert NODE is not None
    return MCPServerStdio(command=NODE, args=[str(EVERYTHING_JS), "stdio"], name="everything", **options)


class LoopThread:
    """An event loop on a daemon thread; ``run`` submits a coroutine and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="thirdparty-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = RUN_WAIT) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(JOIN_WAIT)
        if not self.thread.is_alive():
            self.loop.close()


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    lt = LoopThread()
    try:
        yield lt
    finally:
        lt.close()


def _assert_gone(pids: list[int | None]) -> None:
    procs = []
    for pid in pids:
        if pid is None:
            continue
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=GONE_WAIT)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still running after close: {alive}"


@pytest.fixture(scope="module")
def every(loop: LoopThread) -> Iterator[MCPConnection]:
    """One server-everything connection shared across the module's tests."""
    server = everything(close_after_run=False)
    conn = loop.run(server.open())
    pids = [conn.worker_pid, conn.server_pid]
    try:
        yield conn
    finally:
        loop.run(conn.close())
        _assert_gone(pids)


def rendered(result: MCPToolResult) -> str:
    return default_renderer(result, None)


# --------------------------------------------------------------------------- #
# server-everything (npm)
# --------------------------------------------------------------------------- #
def test_everything_server_runs_in_a_worker_process_and_lists_its_tools_with_schemas(
    loop: LoopThread, every: MCPConnection
) -> None:
    assert every.isolation == "process"
    worker_pid, server_pid = every.worker_pid, every.server_pid
    assert worker_pid is not None and worker_pid != os.getpid()
    assert server_pid is not None and psutil.Process(server_pid).ppid() == worker_pid
    assert psutil.Process(server_pid).name() == "node"

    tools = {t.name: t for t in every.tools()}
    for name in ("echo", "get-sum", "get-env", "get-tiny-image", "get-structured-content"):
        assert f"everything__{name}" in tools, sorted(tools)
    sum_schema = tools["everything__get-sum"].parameters
    assert sum_schema["type"] == "object"
    assert set(sum_schema["properties"]) == {"a", "b"}
    assert sum_schema["properties"]["a"]["type"] == "number"
    assert sorted(sum_schema["required"]) == ["a", "b"]
    # An input schema with no properties still reaches the provider as an object.
    assert tools["everything__get-tiny-image"].parameters["type"] == "object"
    assert tools["everything__get-sum"].description

    stats = loop.run(every.stats())
    assert stats.worker_pid == worker_pid and stats.server_pid == server_pid


def test_everything_server_answers_calls_through_the_worker(loop: LoopThread, every: MCPConnection) -> None:
    async def main() -> tuple[MCPToolResult, MCPToolResult, list[MCPToolResult], int]:
        before = (await every.stats()).calls
        echo = await every.call_tool("echo", {"message": "héllo, wörld"})
        total = await every.call_tool("get-sum", {"a": 2, "b": 3.5})
        many = await asyncio.gather(*(every.call_tool("get-sum", {"a": i, "b": i}) for i in range(10)))
        return echo, total, list(many), (await every.stats()).calls - before

    echo, total, many, calls = loop.run(main())
    assert not echo.is_error and rendered(echo) == "Echo: héllo, wörld"
    assert not total.is_error and "5.5" in rendered(total)
    assert [re.findall(r"is (\d+)", rendered(r)) for r in many] == [[str(2 * i)] for i in range(10)]
    assert calls == 12


def test_everything_tiny_image_renders_as_a_placeholder_without_base64(loop: LoopThread, every: MCPConnection) -> None:
    result = loop.run(every.call_tool("get-tiny-image", {}))
    images = [b for b in result.content if b.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    data = images[0].data
    assert data.startswith("iVBOR")  # base64 of the PNG signature: the image crossed the pipe whole

    out = rendered(result)
    assert re.search(r"\[image: image/png, [0-9.]+ [KM]?B\]", out), out
    assert data not in out and "iVBOR" not in out
    assert len(out) < 300, out


def test_everything_structured_content_arrives_parsed_alongside_its_text(
    loop: LoopThread, every: MCPConnection
) -> None:
    result = loop.run(every.call_tool("get-structured-content", {"location": "Chicago"}))
    assert not result.is_error
    structured = result.structured_content
    assert isinstance(structured, dict)
    assert {"temperature", "conditions", "humidity"} <= set(structured)
    # The text block is the same object, serialised by the server.
    assert json.loads(rendered(result)) == structured


def _server_env(loop: LoopThread, server: MCPServerStdio) -> tuple[dict[str, str], str]:
    """The server's environment as server-everything reports it, parsed and raw."""

    async def main() -> str:
        async with server.session() as conn:
            return rendered(await conn.call_tool("get-env", {}))

    out = loop.run(main())
    return json.loads(out), out


def test_agent_environment_variable_reaches_the_server_only_when_named_in_inherit_env(
    loop: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"s3cret-{secrets.token_hex(8)}"
    probe = f"probe-{secrets.token_hex(4)}"
    monkeypatch.setenv(SECRET_NAME, secret)
    monkeypatch.setenv(PROBE_NAME, probe)

    env, out = _server_env(loop, everything())
    # The probe, set together with the secret, arrived: the worker saw the
    # agent's environment as it is now, so the allowlist is what stopped the
    # secret (not an older snapshot that never had it).
    assert env.get(PROBE_NAME) == probe, sorted(env)
    assert SECRET_NAME not in env and secret not in out
    assert set(env) <= set(ENV_ALLOWLIST) | {k for k in env if k.startswith("LC_")}, sorted(env)

    env, out = _server_env(loop, everything(inherit_env=[SECRET_NAME], env={"EXPLICIT": "yes"}))
    assert env[SECRET_NAME] == secret
    assert env["EXPLICIT"] == "yes"


def test_lovia_agent_run_sees_image_placeholder_and_structured_tool_output(loop: LoopThread) -> None:
    """A real lovia run: MCP(config) opens server-everything for the run and closes it after."""
    server = everything()
    provider = ScriptedProvider(
        [
            batch(
                ("everything__get-tiny-image", {}),
                ("everything__get-structured-content", {"location": "New York"}),
                ("everything__get-sum", {"a": 40, "b": 2}),
            ),
            text("All done."),
        ]
    )
    agent = Agent(name="tester", model=provider, plugins=[MCP(server)])
    result = loop.run(Runner.run(agent, "show me the image, the weather and the sum"))

    assert result.output == "All done."
    outputs = {e.call_id: e for e in result.entries if isinstance(e, ToolResultEntry)}
    image = outputs["call_0_everything__get-tiny-image"]
    weather = outputs["call_1_everything__get-structured-content"]
    total = outputs["call_2_everything__get-sum"]
    assert not (image.is_error or weather.is_error or total.is_error)
    assert "[image: image/png," in image.output and "iVBOR" not in image.output
    assert isinstance(weather.raw, MCPToolResult)
    assert weather.raw.structured_content == json.loads(weather.output)
    assert "42" in total.output
    # What the model was sent on its second turn: the same rendered text, no base64.
    sent = [m.content for m in provider.calls[1] if m.role == "tool"]
    assert any("[image: image/png," in str(c) for c in sent)
    assert not any("iVBOR" in str(c) for c in sent)


# --------------------------------------------------------------------------- #
# server-filesystem (npm)
# --------------------------------------------------------------------------- #
def test_filesystem_server_is_confined_to_the_directory_given_by_cwd(loop: LoopThread, tmp_path: Path) -> None:
    _need_node()
    _need(FILESYSTEM_JS)
    assert NODE is not None
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("inside the root\n")
    (root / "sub" / "deep.txt").write_text("deeper inside\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside-secret\n")
    (root / "escape.txt").symlink_to(outside)

    # "." is resolved against cwd: the server's one allowed directory is root.
    server = MCPServerStdio(command=NODE, args=[str(FILESYSTEM_JS), "."], cwd=root, name="fs")

    async def main() -> dict[str, MCPToolResult]:
        async with server.session() as conn:
            assert conn.server_pid is not None
            assert Path(psutil.Process(conn.server_pid).cwd()) == root.resolve()
            calls = {
                "allowed": ("list_allowed_directories", {}),
                "relative": ("read_text_file", {"path": "notes.txt"}),
                "absolute": ("read_text_file", {"path": str(root / "sub" / "deep.txt")}),
                "listing": ("list_directory", {"path": "."}),
                "outside": ("read_text_file", {"path": str(outside)}),
                "dotdot": ("read_text_file", {"path": "../outside.txt"}),
                "symlink": ("read_text_file", {"path": "escape.txt"}),
                "etc": ("read_text_file", {"path": "/etc/passwd"}),
                "write_outside": ("write_file", {"path": str(tmp_path / "new.txt"), "content": "x"}),
            }
            return {k: await conn.call_tool(name, args) for k, (name, args) in calls.items()}

    r = loop.run(main())
    assert str(root.resolve()) in rendered(r["allowed"])
    assert rendered(r["relative"]).strip() == "inside the root"
    assert rendered(r["absolute"]).strip() == "deeper inside"
    assert "notes.txt" in rendered(r["listing"]) and "sub" in rendered(r["listing"])
    for key in ("outside", "dotdot", "symlink", "etc", "write_outside"):
        out = rendered(r[key])
        assert r[key].is_error, (key, out)
        assert out.startswith("[tool error]") and "denied" in out.lower(), (key, out)
        assert "outside-secret" not in out and "root:" not in out, (key, out)
    assert not (tmp_path / "new.txt").exists()


# --------------------------------------------------------------------------- #
# mcp-server-time, mcp-server-git (PyPI)
# --------------------------------------------------------------------------- #
def test_time_server_reports_the_current_time_in_the_requested_timezone(loop: LoopThread) -> None:
    _need(TIME_BIN)
    server = MCPServerStdio(command=str(TIME_BIN), name="time")

    async def main() -> tuple[list[str], MCPToolResult, MCPToolResult, MCPToolResult]:
        async with server.session() as conn:
            names = [t.name for t in conn.tools()]
            tokyo = await conn.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
            bad = await conn.call_tool("get_current_time", {"timezone": "Not/A_Zone"})
            # An isError answer leaves the connection usable.
            utc = await conn.call_tool("get_current_time", {"timezone": "Etc/UTC"})
            return names, tokyo, bad, utc

    names, tokyo, bad, utc = loop.run(main())
    assert {"time__get_current_time", "time__convert_time"} <= set(names)

    assert not tokyo.is_error
    data = tokyo.structured_content
    assert isinstance(data, dict) and data["timezone"] == "Asia/Tokyo"
    when = dt.datetime.fromisoformat(data["datetime"])
    assert when.utcoffset() == dt.timedelta(hours=9)
    assert abs((when - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 120
    assert json.loads(rendered(tokyo)) == data

    assert bad.is_error and rendered(bad).startswith("[tool error]") and "Not/A_Zone" in rendered(bad)
    assert not utc.is_error and utc.structured_content["timezone"] == "Etc/UTC"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=RUN_WAIT,
    )


def test_git_server_reports_status_and_log_of_a_temporary_repository(loop: LoopThread, tmp_path: Path) -> None:
    _need(GIT_BIN)
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH: mcp-server-git needs it")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "tracked.txt").write_text("one\n")
    _git(repo, "add", "tracked.txt")
    _git(repo, "commit", "-q", "-m", "first commit from the test")
    (repo / "tracked.txt").write_text("two\n")
    (repo / "untracked.txt").write_text("new\n")

    server = MCPServerStdio(command=str(GIT_BIN), name="git")

    async def main() -> tuple[list[str], MCPToolResult, MCPToolResult]:
        async with server.session() as conn:
            names = [t.name for t in conn.tools()]
            status = await conn.call_tool("git_status", {"repo_path": str(repo)})
            log = await conn.call_tool("git_log", {"repo_path": str(repo), "max_count": 5})
            return names, status, log

    names, status, log = loop.run(main())
    assert {"git__git_status", "git__git_log", "git__git_diff_unstaged"} <= set(names)
    out = rendered(status)
    assert not status.is_error, out
    assert re.search(r"modified:\s+tracked\.txt", out), out
    assert "Untracked files" in out and "untracked.txt" in out
    assert not log.is_error and "first commit from the test" in rendered(log)


# --------------------------------------------------------------------------- #
# The same servers inside the sandbox
# --------------------------------------------------------------------------- #
def _need_sandbox() -> None:
    from lovia_mcp_worker.sandbox.bwrap import BWRAP

    if BWRAP is None:
        pytest.skip("bubblewrap is not available (Linux only)")


def test_everything_server_works_in_a_sandbox_without_network(loop: LoopThread) -> None:
    _need_sandbox()
    server = everything(sandbox=Sandbox(network=False))

    async def main() -> str:
        async with server.session() as conn:
            assert len(conn.tools()) > 5
            return rendered(await conn.call_tool("echo", {"message": "boxed"}))

    assert "boxed" in loop.run(main())


def test_filesystem_server_in_a_sandbox_writes_only_its_directory_even_when_it_allows_everything(
    loop: LoopThread, tmp_path: Path
) -> None:
    _need_node()
    _need(FILESYSTEM_JS)
    _need_sandbox()
    assert NODE is not None
    root = tmp_path / "root"
    root.mkdir()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET KEY\n")
    outside = ROOT / ".cache" / f"fs-outside-{os.getpid()}"
    outside.mkdir(parents=True, exist_ok=True)
    # The server itself is told it may use the whole file system ("/"): the
    # sandbox is what keeps it to root.
    server = MCPServerStdio(
        command=NODE, args=[str(FILESYSTEM_JS), "/"], cwd=root, name="fs", env={"HOME": str(home)}, sandbox=Sandbox()
    )

    async def main() -> dict[str, MCPToolResult]:
        async with server.session() as conn:
            calls = {
                "inside": ("write_file", {"path": str(root / "in.txt"), "content": "ok"}),
                "read_back": ("read_text_file", {"path": str(root / "in.txt")}),
                "outside": ("write_file", {"path": str(outside / "escaped.txt"), "content": "x"}),
                "secret": ("read_text_file", {"path": str(home / ".ssh" / "id_rsa")}),
            }
            return {k: await conn.call_tool(name, args) for k, (name, args) in calls.items()}

    try:
        r = loop.run(main())
        assert not r["inside"].is_error and rendered(r["read_back"]).strip() == "ok"
        assert r["outside"].is_error, rendered(r["outside"])
        assert not (outside / "escaped.txt").exists()
        assert r["secret"].is_error and "SECRET" not in rendered(r["secret"])
        print("outside write:", rendered(r["outside"])[:120], "| secret:", rendered(r["secret"])[:120])
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_git_server_in_a_sandbox_commits_to_a_repository_passed_as_writable(loop: LoopThread, tmp_path: Path) -> None:
    _need(GIT_BIN)
    _need_sandbox()
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH: mcp-server-git needs it")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    ident = {
        "GIT_AUTHOR_NAME": "Boxed",
        "GIT_AUTHOR_EMAIL": "boxed@example.invalid",
        "GIT_COMMITTER_NAME": "Boxed",
        "GIT_COMMITTER_EMAIL": "boxed@example.invalid",
    }
    server = MCPServerStdio(command=str(GIT_BIN), name="git", env=ident, sandbox=Sandbox(writable=[str(repo)]))

    async def main() -> tuple[MCPToolResult, MCPToolResult]:
        async with server.session() as conn:
            added = await conn.call_tool("git_add", {"repo_path": str(repo), "files": ["a.txt"]})
            committed = await conn.call_tool("git_commit", {"repo_path": str(repo), "message": "from the sandbox"})
            return added, committed

    added, committed = loop.run(main())
    assert not added.is_error, rendered(added)
    assert not committed.is_error, rendered(committed)
    log = subprocess.run(["git", "log", "--format=%s %an"], cwd=repo, capture_output=True, text=True, timeout=RUN_WAIT)
    assert log.stdout.strip() == "from the sandbox Boxed"
