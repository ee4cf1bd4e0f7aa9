"""Supervision: the server's launch environment (docs/operating.md, the environment).

The server runs in ``cwd=`` and sees a small allowlist of the agent's
environment (PATH, HOME, LANG, LC_*, TERM, USER, LOGNAME, SHELL, TMPDIR) plus
``env=``; anything else from the agent's environment (a secret) is passed only
when named in ``inherit_env``.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from helpers import ISOLATIONS, PY, raw_args, run

from lovia_mcp import MCPError, MCPServerStdio
from lovia_mcp.client import forkserver as _forkserver_mod

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")


async def _server_env(server: MCPServerStdio) -> dict[str, str]:
    async with server.session() as conn:
        env = json.loads(str(await conn.call_tool("pid")))["env"]
    assert isinstance(env, dict)
    return env


@ISOLATIONS
def test_server_runs_in_the_given_cwd(isolation: str, tmp_path: object) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", cwd=str(tmp_path), isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            assert os.path.realpath(str(await conn.call_tool("cwd"))) == os.path.realpath(str(tmp_path))

    run(main())


@ISOLATIONS
def test_relative_command_is_resolved_against_cwd(isolation: str, tmp_path: object) -> None:
    script = os.path.join(str(tmp_path), "server.sh")
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\nexec {PY} {raw_args()[0]} "$@"\n')
    os.chmod(script, 0o755)

    async def main() -> None:
        server = MCPServerStdio(command="./server.sh", name="raw", cwd=str(tmp_path), isolation=isolation)  # type: ignore[arg-type]
        async with server.session() as conn:
            assert str(await conn.call_tool("echo", {"text": "found"})) == "found"

    run(main())


def test_cwd_that_does_not_exist_fails_at_open_with_a_hint(tmp_path: object) -> None:
    async def main() -> None:
        missing = os.path.join(str(tmp_path), "missing")
        with pytest.raises(MCPError) as info:
            await MCPServerStdio(command=PY, args=raw_args(), name="raw", cwd=missing).open()
        assert info.value.kind == "open"
        assert "cwd is not a directory" in str(info.value)

    run(main())


@ISOLATIONS
def test_agent_secrets_are_invisible_to_the_server_unless_named_in_inherit_env(
    isolation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOVIA_TEST_SECRET", "hunter2")
    monkeypatch.setenv("LOVIA_TEST_SHARED", "shared-value")

    async def main() -> None:
        hidden = await _server_env(MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation))  # type: ignore[arg-type]
        assert "LOVIA_TEST_SECRET" not in hidden and "LOVIA_TEST_SHARED" not in hidden
        assert "hunter2" not in json.dumps(hidden)

        shared = await _server_env(
            MCPServerStdio(
                command=PY,
                args=raw_args(),
                name="raw",
                isolation=isolation,  # type: ignore[arg-type]
                inherit_env=["LOVIA_TEST_SHARED", "LOVIA_TEST_UNSET"],
                env={"API_URL": "http://example"},
            )
        )
        assert shared["LOVIA_TEST_SHARED"] == "shared-value"
        assert shared["API_URL"] == "http://example"
        assert "LOVIA_TEST_SECRET" not in shared
        assert "LOVIA_TEST_UNSET" not in shared  # named but not set: not invented

    run(main())


@ISOLATIONS
def test_allowlisted_variables_come_from_the_agent_environment_at_open_time(
    isolation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set after the forkserver has started: the worker must not hand the
    # server the forkserver's stale copy of the environment.
    _forkserver_mod.warm_up()
    allowed = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/tmp/lovia-home",
        "LANG": "C.UTF-8",
        "LC_MESSAGES": "C",
        "LC_LOVIA_PROBE": "probe",
        "TERM": "dumb",
        "USER": "lovia-user",
        "LOGNAME": "lovia-user",
        "SHELL": "/bin/sh",
        "TMPDIR": "/tmp",
    }
    for key, value in allowed.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NOT_ALLOWLISTED", "nope")

    async def main() -> None:
        env = await _server_env(MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation))  # type: ignore[arg-type]
        for key, value in allowed.items():
            assert env.get(key) == value, (key, env.get(key))
        assert "NOT_ALLOWLISTED" not in env

    run(main())


def test_the_worker_adopts_the_agents_environment_removals_changes_and_additions_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker applies only the difference (an open's path): what the
    # agent no longer has goes, what changed or is new is set.
    from lovia_mcp_worker.forkserver.channel import adopt_environment

    monkeypatch.setenv("LOVIA_TEST_GONE", "1")
    monkeypatch.setenv("LOVIA_TEST_CHANGED", "old")
    monkeypatch.delenv("LOVIA_TEST_NEW", raising=False)
    before = dict(os.environ)
    wanted = {k: v for k, v in before.items() if k != "LOVIA_TEST_GONE"}
    wanted["LOVIA_TEST_CHANGED"] = "new"
    wanted["LOVIA_TEST_NEW"] = "added"
    try:
        adopt_environment(wanted)
        assert dict(os.environ) == wanted
    finally:
        adopt_environment(before)
    assert dict(os.environ) == before


@ISOLATIONS
def test_env_overrides_allowlisted_variables(isolation: str) -> None:
    async def main() -> None:
        env = await _server_env(
            MCPServerStdio(
                command=PY,
                args=raw_args(),
                name="raw",
                isolation=isolation,  # type: ignore[arg-type]
                env={"HOME": "/srv/override", "LANG": "fr_FR.UTF-8"},
            )
        )
        assert env["HOME"] == "/srv/override" and env["LANG"] == "fr_FR.UTF-8"

    run(main())
