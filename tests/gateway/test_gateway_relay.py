"""``lovia-mcp serve`` as a whole MCP proxy: what a server says besides tools reaches the client it belongs to.

One gateway serves the module; real servers (raw JSON-RPC scripts and the
SDK's) behind it, the MCP SDK's client (both protocol eras, both
endpoints) and raw HTTP where the bytes matter.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _gateway import MODERN_META, Serve, sdk_client, server, shared_by_module
from conftest import run

pytestmark = pytest.mark.timeout(120)

# A relayed message travels server -> worker -> gateway -> client: milliseconds
# unloaded; generous for a loaded machine. A failing test waits this long.
RELAY_WAIT = 30.0


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    g = Serve(
        tmp_path_factory.mktemp("relay"),
        {"prog": server("progress_server.py")},
    )
    with shared_by_module(g):
        yield g


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """A FIFO the ``paced`` tool reads a line from after each step."""
    path = tmp_path / "gate"
    os.mkfifo(path)
    return path


class Pacer:
    """A progress callback that records each update and lets the server send the next one."""

    def __init__(self, gate: Path) -> None:
        self.gate = gate
        self.got: list[tuple[float, float | None, str | None]] = []
        self._fd: int | None = None

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.got.append((progress, total, message))
        if self._fd is None:
            # The server opens the FIFO's read end after its first update.
            self._fd = await asyncio.to_thread(os.open, self.gate, os.O_WRONLY)
        os.write(self._fd, b"\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


STEPS = [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


# --------------------------------------------------------------------------- #
# Progress
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("path", ["/mcp", "/servers/prog/mcp"])
def test_a_calls_progress_reaches_the_client_that_made_it_in_both_eras_on_both_endpoints(
    gateway: Serve, gate: Path, mode: str, path: str
) -> None:
    tool = "prog__paced" if path == "/mcp" else "paced"

    async def main() -> tuple[str, list[tuple[float, float | None, str | None]], Any]:
        pacer = Pacer(gate)
        try:
            async with sdk_client(gateway.base + path, gateway.headers, mode=mode) as client:
                # The SDK calls the callback only for updates bearing the token it sent.
                call = client.call_tool(tool, {"steps": 3, "gate": str(gate)}, progress_callback=pacer)
                result = await asyncio.wait_for(call, RELAY_WAIT)
                return client.protocol_version, pacer.got, result
        finally:
            pacer.close()

    version, got, result = run(main())
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert result.content[0].text == "paced"
    # Every step, in order, before the answer (the next step waits for the one before).
    assert got == STEPS


def test_a_2026_call_asking_for_progress_is_answered_as_an_event_stream_carrying_its_own_token(
    gateway: Serve, gate: Path
) -> None:
    """Raw HTTP: the JSON-mode fast path would drop the updates; such a call is streamed, its token as sent."""
    token = "tok-\u00e9-7"
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {
            "name": "paced",
            "arguments": {"steps": 3, "gate": str(gate)},
            "_meta": {**MODERN_META, "progressToken": token},
        },
    }
    headers = {
        **gateway.headers,
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "paced",
    }

    async def main() -> tuple[str, list[dict[str, Any]]]:
        events: list[dict[str, Any]] = []
        fd: int | None = None
        try:
            async with httpx.AsyncClient(timeout=RELAY_WAIT) as http:
                url = f"{gateway.base}/servers/prog/mcp"
                async with http.stream("POST", url, content=json.dumps(body).encode(), headers=headers) as response:
                    kind = response.headers["content-type"]
                    async for line in response.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        event = json.loads(line.removeprefix("data: "))
                        events.append(event)
                        if event.get("method") == "notifications/progress":
                            if fd is None:
                                fd = await asyncio.to_thread(os.open, gate, os.O_WRONLY)
                            os.write(fd, b"\n")
            return kind, events
        finally:
            if fd is not None:
                os.close(fd)

    kind, events = run(asyncio.wait_for(main(), RELAY_WAIT))
    assert kind.startswith("text/event-stream")
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"], p["total"], p["message"]) for p in progress] == [
        (token, *step) for step in STEPS
    ]
    assert events[-1]["id"] == 5 and events[-1]["result"]["content"][0]["text"] == "paced"


def test_a_2026_call_asking_for_no_progress_is_still_answered_as_plain_json(gateway: Serve) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tools/call",
        "params": {"name": "meta", "arguments": {}, "_meta": MODERN_META},
    }
    response = httpx.post(
        f"{gateway.base}/servers/prog/mcp",
        content=json.dumps(body).encode(),
        headers={
            **gateway.headers,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "meta",
        },
        timeout=RELAY_WAIT,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["id"] == 6
