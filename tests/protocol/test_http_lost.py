"""An HTTP server that dies under a live connection: the next call fails cleanly.

The SDK's transport can end (its streams break) a moment before the worker's
generation learns of it; a call arriving then found no SDK session and failed
as an ``internal`` AttributeError. It now fails as a lost connection
(``server_exited``, retried once under ``auto_reconnect``) or, once the
generation has ended, as a failed reconnect (``open``).
"""

from __future__ import annotations

import subprocess

import pytest
from helpers import ISOLATIONS, PY, SERVERS, run

from lovia_mcp import MCPError, MCPServerStreamableHTTP

# Bound on the server's start-up (the SDK's import, uvicorn) and its exit.
SERVER_WAIT = 30.0


@ISOLATIONS
def test_a_call_after_the_http_server_died_fails_as_a_lost_connection_never_as_internal(isolation: str) -> None:
    proc = subprocess.Popen([PY, str(SERVERS / "http_server.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline().split()[1])

        async def main() -> list[MCPError]:
            errors: list[MCPError] = []
            server = MCPServerStreamableHTTP(url=f"http://127.0.0.1:{port}/mcp", name="web", isolation=isolation)  # type: ignore[arg-type]
            async with server.session() as conn:
                assert str(await conn.call_tool("echo", {"text": "x"})) == "x"
                proc.kill()
                proc.wait(SERVER_WAIT)
                for _ in range(2):
                    with pytest.raises(MCPError) as info:
                        await conn.call_tool("echo", {"text": "x"})
                    errors.append(info.value)
            return errors

        errors = run(main())
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(SERVER_WAIT)
        proc.stdout.close()
    print(f"[{isolation}] {[(e.kind, str(e).splitlines()[0][:90]) for e in errors]}")
    assert [e.kind for e in errors if e.kind not in ("server_exited", "open")] == [], [str(e) for e in errors]
    assert all("AttributeError" not in str(e) for e in errors)
