"""A package runner that a sandbox stops says so, and names the command that fixes it.

``uvx`` (and ``npx``) resolve and install the server at every start: in a
box they can neither write their cache nor reach the registry. The error
must say that and point at ``lovia-mcp lock``, whose locked server starts
from a verified cache with no package manager and no network; a plain
"check the server's log" leaves a newcomer with uv's own words.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers import run
from lovia.exceptions import MCPError
from lovia_mcp_worker.wire import failures
from lovia_mcp_worker.wire.confinement import Limits

from lovia_mcp import MCPServerStdio, Sandbox

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

UVX = shutil.which("uvx", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(UVX is None, reason="uvx is not installed (the test extra has uv)")
@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_uvx_stopped_by_the_box_is_told_to_lock_the_server(backend: str, tmp_path: Path) -> None:
    from lovia_mcp_worker.sandbox import bwrap, landlock

    if backend == "bwrap" and bwrap.userns_refused() is not None:
        pytest.skip("bubblewrap cannot make a user namespace here")
    if backend == "landlock" and landlock.unavailable(Sandbox(backend="landlock")):
        pytest.skip("Landlock is not available here")
    assert UVX is not None
    server = MCPServerStdio(
        command=UVX,
        args=["mcp-server-time"],
        name="time",
        cwd=tmp_path,
        # An index on loopback that nothing serves, tried once: no request leaves the machine, and
        # uv's retries do not stretch the test (where the box lets uv write its cache, as Landlock's
        # private home does, the index is what fails).
        env={"UV_DEFAULT_INDEX": "http://127.0.0.1:9/simple", "UV_HTTP_RETRIES": "0"},
        sandbox=Sandbox(network=False, backend=backend),
    )

    async def main() -> None:
        async with server.session():
            pass

    with pytest.raises(MCPError) as refused:
        run(main())
    said = f"{refused.value}\nhint: {refused.value.hint}"
    print(said)
    assert "before answering the MCP handshake" in said
    assert "uvx resolves and installs the server at every start" in said
    assert "lovia-mcp lock --config FILE" in said


@pytest.mark.unit
@pytest.mark.parametrize(
    ("command", "tail", "told"),
    [
        ("/usr/bin/npx", ["npm error code EROFS", "npm error syscall mkdir"], True),
        ("npx", ["npm error code EACCES", "npm error path /root/.npm/_cacache"], True),
        ("uvx", ["error: Failed to fetch: https://pypi.org/simple/x/", "cause: dns error"], True),
        ("uvx", ["Traceback (most recent call last):", "ValueError: bad config"], False),
        ("/usr/bin/python3", ["OSError: [Errno 30] Read-only file system: '/root/.cache'"], False),
        (None, ["npm error code EROFS"], False),
    ],
)
def test_the_lock_hint_is_given_only_to_a_package_runner_whose_box_refused_it(
    command: str | None, tail: list[str], told: bool
) -> None:
    error = failures.exited_before_handshake(2, b"", tail, Limits(), command)
    assert ("lovia-mcp lock" in (error.hint or "")) is told, error.hint
