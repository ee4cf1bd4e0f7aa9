"""``lovia-mcp serve`` as a whole MCP proxy: what a server says besides tools reaches the client it belongs to.

One gateway serves the module; real servers (raw JSON-RPC scripts and the
SDK's) behind it, the MCP SDK's client (both protocol eras, both
endpoints) and raw HTTP where the bytes matter.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from _gateway import MODERN_META, Serve, sdk_client, server, shared_by_module, speak_while_held
from conftest import run

pytestmark = pytest.mark.timeout(120)

# A relayed message travels server -> worker -> gateway -> client: milliseconds
# unloaded; generous for a loaded machine. A failing test waits this long.
RELAY_WAIT = 30.0


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    g = Serve(
        tmp_path_factory.mktemp("relay"),
        {
            "prog": server("progress_server.py"),
            "log": server("log_server.py"),
            "logps": server("log_server.py", session="per-session"),
            # Shared, its level set by the one test that sets it.
            "loglv": server("log_server.py"),
        },
    )
    with shared_by_module(g):
        yield g


ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"


@pytest.fixture(scope="module")
def principals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """Two principals, alice and bob, both allowed every server; shared servers only."""
    g = Serve(
        tmp_path_factory.mktemp("relay-principals"),
        {"shlog": server("log_server.py")},
        token_lines=f"alice {ALICE}\nbob {BOB}\n",
    )
    with shared_by_module(g):
        yield g


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


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


# --------------------------------------------------------------------------- #
# Logging
# --------------------------------------------------------------------------- #
class Logs:
    """A logging callback: the (level, data) of each message the client got."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []
        self.arrived = asyncio.Event()

    async def __call__(self, params: Any) -> None:
        self.got.append((params.level, params.data))
        self.arrived.set()


@asynccontextmanager
async def logging_client(
    url: str,
    headers: dict[str, str],
    logs: Logs,
    mode: str = "legacy",
    stream_open: asyncio.Event | None = None,
    **options: Any,
) -> AsyncIterator[Any]:
    """The SDK's client with a logging callback (``options``: the Client's, log_level for 2026-07-28);
    ``stream_open`` is set once a 2025 session's standalone stream is open."""
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async def seen(response: Any) -> None:
        if stream_open is not None and response.request.method == "GET" and response.status_code == 200:
            stream_open.set()

    async with httpx2.AsyncClient(headers=headers, timeout=RELAY_WAIT, event_hooks={"response": [seen]}) as http:
        async with Client(
            streamable_http_client(url, http_client=http), mode=mode, logging_callback=logs, **options
        ) as client:
            yield client


def test_logging_is_advertised_where_a_server_has_it_and_only_there(gateway: Serve) -> None:
    async def main() -> dict[str, Any]:
        found = {}
        for path in ["/mcp", "/servers/log/mcp", "/servers/prog/mcp"]:
            for mode in ["legacy", "auto"]:
                async with sdk_client(gateway.base + path, gateway.headers, mode=mode) as client:
                    found[path, mode] = client.server_capabilities.logging
        return found

    found = run(main())
    for mode in ["legacy", "auto"]:
        assert found["/mcp", mode] is not None and found["/servers/log/mcp", mode] is not None
        assert found["/servers/prog/mcp", mode] is None


@pytest.mark.parametrize("path", ["/mcp", "/servers/log/mcp"])
def test_a_2025_sessions_call_gets_the_servers_log_messages_on_its_own_stream(gateway: Serve, path: str) -> None:
    tool = "log__log" if path == "/mcp" else "log"

    async def main() -> tuple[list[tuple[str, Any]], Any]:
        logs = Logs()
        async with logging_client(gateway.base + path, gateway.headers, logs) as client:
            result = await client.call_tool(tool, {"text": "hello from the server", "level": "warning"})
        return logs.got, result

    got, result = run(main())
    assert result.content[0].text == "logged"
    # Sent before the answer, on the call's own stream: already here when the call returns.
    assert got == [("warning", "hello from the server")]


def test_a_2026_request_hears_log_messages_only_at_or_above_its_own_opt_in(gateway: Serve) -> None:
    async def main() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
        heard, deaf = Logs(), Logs()
        async with logging_client(gateway.url, gateway.headers, heard, mode="auto", log_level="warning") as client:
            assert client.protocol_version == "2026-07-28"
            await client.call_tool("log__log", {"text": "too low", "level": "info"})
            await client.call_tool("log__log", {"text": "loud enough", "level": "error"})
        async with logging_client(gateway.url, gateway.headers, deaf, mode="auto") as client:
            await client.call_tool("log__log", {"text": "nobody asked", "level": "error"})
        return heard.got, deaf.got

    heard, deaf = run(main())
    assert heard == [("error", "loud enough")]
    assert deaf == []


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")  # the SDK's, for 2026-07-28
def test_logging_set_level_is_answered_forwarded_to_the_sessions_own_server_and_applied(gateway: Serve) -> None:
    async def main() -> tuple[str, str, list[tuple[str, Any]]]:
        logs = Logs()
        async with logging_client(f"{gateway.base}/servers/logps/mcp", gateway.headers, logs) as client:
            before = (await client.call_tool("level", {})).content[0].text  # the session's server, taken
            await client.set_logging_level("error")
            after = (await client.call_tool("level", {})).content[0].text
            await client.call_tool("log", {"text": "below the level", "level": "warning"})
            await client.call_tool("log", {"text": "at the level", "level": "error"})
        return before, after, logs.got

    before, after, got = run(main())
    assert (before, after) == ("none", "error")
    assert got == [("error", "at the level")]


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")  # the SDK's, for 2026-07-28
def test_a_shared_server_is_told_the_most_verbose_level_asked_and_each_session_hears_only_at_its_own(
    gateway: Serve,
) -> None:
    url = f"{gateway.base}/servers/loglv/mcp"

    async def main() -> tuple[str, list[tuple[str, Any]], list[tuple[str, Any]]]:
        chatty, terse = Logs(), Logs()
        async with logging_client(url, gateway.headers, chatty) as a, logging_client(url, gateway.headers, terse) as b:
            await a.set_logging_level("info")
            await b.set_logging_level("error")  # less verbose than the server was told: not forwarded
            told = (await a.call_tool("level", {})).content[0].text
            await a.call_tool("log", {"text": "for a", "level": "warning"})
            await b.call_tool("log", {"text": "for b", "level": "warning"})
        return told, chatty.got, terse.got

    told, chatty, terse = run(main())
    assert told == "info"
    assert chatty == [("warning", "for a")]
    # The server sent it (its level is info); the gateway kept it from b, below b's level.
    assert terse == []


def test_a_per_session_servers_message_outside_any_request_reaches_its_session_on_the_standalone_stream(
    gateway: Serve, gate: Path
) -> None:
    async def main() -> list[tuple[str, Any]]:
        logs = Logs()
        opened = asyncio.Event()
        async with logging_client(
            f"{gateway.base}/servers/logps/mcp", gateway.headers, logs, stream_open=opened
        ) as client:
            await asyncio.wait_for(opened.wait(), RELAY_WAIT)
            assert (await client.call_tool("after", {"text": "later on", "gate": str(gate)})).content[0].text == "later"
            fd = await asyncio.to_thread(os.open, gate, os.O_WRONLY)
            os.write(fd, b"\n")
            os.close(fd)
            await asyncio.wait_for(logs.arrived.wait(), RELAY_WAIT)
        return logs.got

    assert run(main()) == [("info", "later on")]


def test_a_shared_servers_words_reach_only_a_principal_that_alone_used_it_never_another(
    principals: Serve, tmp_path: Path
) -> None:
    """The attack: alice's request leaves work that speaks later, while bob's call is the one in flight."""
    speak, answer = tmp_path / "speak", tmp_path / "answer"
    os.mkfifo(speak)
    os.mkfifo(answer)
    url = f"{principals.base}/servers/shlog/mcp"

    async def main() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
        alice_logs, bob_logs = Logs(), Logs()
        async with logging_client(url, _auth(ALICE), alice_logs) as alice:
            # Only alice has used the server: what it says during her call is hers.
            await alice.call_tool("log", {"text": "alice alone", "level": "warning"})
            await alice.call_tool("after", {"text": "alice's secret", "gate": str(speak), "level": "warning"})
            async with logging_client(url, _auth(BOB), bob_logs) as bob:
                waiting = asyncio.ensure_future(bob.call_tool("wait", {"gate": str(answer)}))
                # Bob's call is at the server (it opened the FIFO's read end).
                # Only the gateway's log can tell the words arrived (while bob's call still runs).
                await speak_while_held(answer, speak, principals, "alice's secret", RELAY_WAIT)
                assert (await asyncio.wait_for(waiting, RELAY_WAIT)).content[0].text == "waited"
                # Both have used it now: nobody hears it, bob's own words included.
                await bob.call_tool("log", {"text": "bob now", "level": "warning"})
        return alice_logs.got, bob_logs.got

    alice, bob = run(main())
    assert alice == [("warning", "alice alone")]
    assert bob == []
