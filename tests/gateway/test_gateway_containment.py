"""Each server behind the gateway keeps lovia-mcp's containment: its upstream is an ordinary connection.

A crash, a timeout or a memory limit is that call's error result and the
next call gets a fresh server; a sandboxed server can neither write outside
nor connect out, and a host it was refused is told to the client and
counted. On the shared gateway (tests/_gateway.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from _gateway import SANDBOX, Serve, sdk_client
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from _gateway import metrics_of as _samples
from _gateway import pid_of as _pid
from conftest import run
from lovia_mcp_worker.sandbox import bwrap as sandbox_mod

pytestmark = pytest.mark.timeout(120)


def test_a_server_crash_mid_call_is_that_calls_error_and_the_next_call_is_served(gateway: Serve) -> None:
    async def main() -> tuple[Any, Any, Any]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            before = json.loads((await client.call_tool("raw__pid", {})).content[0].text)["pid"]
            crashed = await client.call_tool("raw__exit", {"code": 3})
            after = json.loads((await client.call_tool("raw__pid", {})).content[0].text)["pid"]
            return before, crashed, after

    before, crashed, after = run(main())
    assert crashed.is_error is True
    assert "exited with code 3" in crashed.content[0].text
    assert crashed.meta["lovia-mcp/error"] == "server_exited"
    assert after != before and not psutil.pid_exists(before)
    assert httpx.get(gateway.base + "/readyz").status_code == 200


def test_a_call_past_its_timeout_is_an_error_result_and_its_server_is_replaced(gateway: Serve) -> None:
    async def main() -> tuple[int, Any, float, int]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            before = json.loads((await client.call_tool("slow__pid", {})).content[0].text)["pid"]
            started = time.monotonic()
            hung = await client.call_tool("slow__hang", {})
            took = time.monotonic() - started
            after = json.loads((await client.call_tool("slow__pid", {})).content[0].text)["pid"]
            return before, hung, took, after

    before, hung, took, after = run(main())
    print(f"timeout 0.5 s answered after {took:.2f} s")
    assert hung.is_error is True and hung.meta["lovia-mcp/error"] == "timeout"
    assert "timeout" in hung.content[0].text and "killed" in hung.content[0].text
    assert after != before


def test_a_server_past_its_memory_limit_is_killed_and_the_call_says_which_limit(gateway: Serve) -> None:
    async def main() -> tuple[int, Any, int]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            before = _pid(await client.call_tool("capped__pid", {}))
            over = await client.call_tool("capped__alloc", {"mb": 150})
            return before, over, _pid(await client.call_tool("capped__pid", {}))

    before, over, after = run(main())
    assert over.is_error is True and over.meta["lovia-mcp/error"] == "limit"
    assert "memory limit" in over.content[0].text and "memory_mb=60" in over.content[0].text
    assert after != before and not psutil.pid_exists(before)


@pytest.mark.skipif(not SANDBOX, reason="bubblewrap is not available (Linux only)")
def test_a_sandboxed_server_behind_the_gateway_can_neither_write_outside_nor_connect_out(gateway: Serve) -> None:
    # Outside /tmp (private in the sandbox) and outside the server's cwd.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="lovia-gateway-"))
    # A loopback listener that greets each connection (the tool reads a greeting).
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def greet() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"hello")

    threading.Thread(target=greet, daemon=True).start()

    async def main() -> dict[str, str]:
        out = {}
        async with sdk_client(gateway.url, gateway.headers) as client:
            for name in ("bare", "jail"):
                wrote = await client.call_tool(f"{name}__write", {"path": str(outside / f"{name}.txt")})
                reached = await client.call_tool(f"{name}__connect", {"host": "127.0.0.1", "port": port})
                out[name] = f"{wrote.content[0].text} | {reached.content[0].text}"
        return out

    try:
        out = run(main())
    finally:
        listener.close()
        shutil.rmtree(outside, ignore_errors=True)
    print(out)
    assert out["bare"].startswith("ok") and out["bare"].endswith("| ok hello")
    assert out["jail"].startswith("denied") and "| denied" in out["jail"]


@pytest.mark.skipif(not SANDBOX or sandbox_mod.userns_refused() is not None, reason="needs the bwrap backend")
def test_a_sandboxed_call_refused_a_host_tells_the_client_in_its_result_and_meta_and_metrics_count_it(
    gateway: Serve,
) -> None:
    """With the network off, the box's deny-all listener sees the attempt; the gateway's client reads it."""
    key = 'lovia_mcp_sandbox_denials_total{server="jail",tool="proxy_get",kind="network_off"}'
    before = _samples(gateway).get(key, 0.0)

    async def main() -> Any:
        async with sdk_client(gateway.url, gateway.headers) as client:
            return await client.call_tool("jail__proxy_get", {"url": "http://evil.example/x"})

    result = run(main())
    texts = [block.text for block in result.content]
    print(texts, result.meta)
    assert texts[0].startswith("ok 403 lovia-mcp sandbox: this server has no network access")
    assert texts[-1] == "[sandbox] blocked a connection to evil.example:80 (this server has no network access)"
    assert result.meta is not None
    [denied] = result.meta["lovia-mcp/sandbox_denied"]
    assert (denied["kind"], denied["target"], denied["count"]) == ("network_off", "evil.example:80", 1)
    assert _samples(gateway)[key] == before + 1
