"""Which commands ``lovia-mcp lock`` reads as package runners, and what it reads from them (pure: no process)."""

from __future__ import annotations

import pytest

from lovia_mcp.lock.ecosystems.ecosystem import Runner
from lovia_mcp.lock.ecosystems.registry import parse_runner


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        ("uvx", ["mcp-server-time"], Runner("uvx", "pypi", "mcp-server-time", None)),
        (
            "uvx",
            ["mcp-server-time@2026.10.19", "--local-timezone", "UTC"],
            Runner("uvx", "pypi", "mcp-server-time", "2026.10.19", args=("--local-timezone", "UTC")),
        ),
        ("/usr/local/bin/uvx", ["mcp-server-git==1.0"], Runner("uvx", "pypi", "mcp-server-git", "1.0")),
        (
            "uvx",
            ["--from", "mcp-server-git==1.0", "mcp-server-git", "--repository", "."],
            Runner("uvx", "pypi", "mcp-server-git", "1.0", command="mcp-server-git", args=("--repository", ".")),
        ),
        ("uv", ["tool", "run", "mcp-server-time@latest"], Runner("uv tool run", "pypi", "mcp-server-time", None)),
        (
            "pipx",
            ["run", "--spec", "mcp-server-time==2", "mcp-server-time"],
            Runner("pipx run", "pypi", "mcp-server-time", "2", command="mcp-server-time"),
        ),
        (
            "npx",
            ["-y", "@modelcontextprotocol/server-everything@2026.8.31", "stdio"],
            Runner("npx", "npm", "@modelcontextprotocol/server-everything", "2026.8.31", args=("stdio",)),
        ),
        ("npx", ["--yes", "some-server"], Runner("npx", "npm", "some-server", None)),
        (
            "npx",
            ["-p", "@scope/tools@1.2.3", "tool-a", "--flag"],
            Runner("npx", "npm", "@scope/tools", "1.2.3", command="tool-a", args=("--flag",)),
        ),
    ],
)
def test_a_package_runner_command_is_read_as_its_package_version_command_and_arguments(
    command: str, args: list[str], expected: Runner
) -> None:
    assert parse_runner(command, args) == expected


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("python", ["server.py"]),
        ("node", ["dist/index.js"]),
        ("uv", ["run", "server.py"]),  # a project's script, not a package
        ("uvx", ["--with", "extra", "mcp-server-time"]),  # an option the lock does not model
        ("uvx", ["mcp-server-time[cli]"]),  # extras
        ("npx", ["./local/folder"]),
        ("npx", ["github:owner/repo"]),
        ("npx", ["--node-options=--inspect", "some-server"]),
        ("pipx", ["install", "x"]),
        ("uvx", []),
    ],
)
def test_commands_that_are_not_a_covered_package_runner_are_left_as_the_config_says(
    command: str, args: list[str]
) -> None:
    assert parse_runner(command, args) is None
