"""``lovia-mcp serve`` relays a server's own requests (sampling, elicitation, roots) to the client they belong to.

``catalog_server.py`` (the SDK's MCPServer, reached in the handshake era)
behind a real serve; the SDK's client with sampling, elicitation and roots
callbacks, or without them. Principals ``alice`` and ``bob`` share the server.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _gateway import Serve, server, shared_by_module, speak_while_held
from conftest import run

pytestmark = pytest.mark.timeout(120)

# A server's request travels server -> worker -> gateway -> client and back: milliseconds unloaded.
RELAY_WAIT = 30.0
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    catalog = server("catalog_server.py", protocol="legacy")
    g = Serve(
        tmp_path_factory.mktemp("requests"),
        {
            "mine": {**catalog, "args": [*catalog["args"], "mine"]},
            "both": {**catalog, "args": [*catalog["args"], "both"]},
        },
        token_lines=f"alice {ALICE}\nbob {BOB}\n",
        gateway={"access": {"alice": ["mine", "both"], "bob": ["both"]}},
    )
    with shared_by_module(g):
        yield g


class Asked:
    """A client's callbacks: what the server asked of it, and its answers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []

    async def sampling(self, context: Any, params: Any) -> Any:
        import mcp_types

        self.asked.append(f"sampling {params.messages[0].content.text}")
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(type="text", text=f"{self.name}'s model"), model="m"
        )

    async def elicitation(self, context: Any, params: Any) -> Any:
        import mcp_types

        self.asked.append(f"elicitation {params.message}")
        return mcp_types.ElicitResult(action="accept", content={"answer": f"{self.name}'s answer"})

    async def roots(self, context: Any) -> Any:
        import mcp_types

        self.asked.append("roots")
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///work", name="work")])


EVERY = ("sampling", "elicitation", "roots")


@asynccontextmanager
async def client(url: str, token: str, asked: Asked | None, declares: tuple[str, ...] = EVERY) -> AsyncIterator[Any]:
    """The SDK's client (2025 session); with ``asked``, it declares the capabilities ``declares`` names."""
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    callbacks: dict[str, Any] = {}
    if asked is not None:
        every = {
            "sampling": ("sampling_callback", asked.sampling),
            "elicitation": ("elicitation_callback", asked.elicitation),
            "roots": ("list_roots_callback", asked.roots),
        }
        callbacks = dict(every[name] for name in declares)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=RELAY_WAIT) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy", **callbacks) as c:
            yield c


def _text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.parametrize("path", ["/mcp", "/servers/mine/mcp"])
def test_a_servers_sampling_elicitation_and_roots_during_a_call_are_asked_of_that_calls_client(
    gateway: Serve, path: str
) -> None:
    prefix = "mine__" if path == "/mcp" else ""

    async def main() -> tuple[list[str], list[str]]:
        asked = Asked("alice")
        async with client(gateway.base + path, ALICE, asked) as c:
            got = [
                _text(await c.call_tool(prefix + "sample", {"prompt": "write a haiku"})),
                _text(await c.call_tool(prefix + "elicit", {"message": "your name?"})),
                _text(await c.call_tool(prefix + "roots", {})),
            ]
        return got, asked.asked

    got, asked = run(main())
    assert got == ["sampled: alice's model", "accept alice's answer", "file:///work"]
    assert asked == ["sampling write a haiku", "elicitation your name?", "roots"]


@pytest.mark.parametrize("declares", EVERY)
def test_a_client_declaring_one_capability_still_gets_a_servers_request_for_it_mid_call(
    gateway: Serve, declares: str
) -> None:
    # Its session lives in the SDK's SSE-mode manager (the gateway's JSON mode
    # cannot carry a request to the client in the middle of a call).
    tool, arguments, want = {
        "sampling": ("sample", {"prompt": "a limerick"}, "sampled: alice's model"),
        "elicitation": ("elicit", {"message": "your name?"}, "accept alice's answer"),
        "roots": ("roots", {}, "file:///work"),
    }[declares]

    async def main() -> tuple[str, list[str]]:
        asked = Asked("alice")
        async with client(f"{gateway.base}/servers/mine/mcp", ALICE, asked, (declares,)) as c:
            return _text(await c.call_tool(tool, arguments)), asked.asked

    got, asked = run(main())
    assert got == want
    assert [a.split()[0] for a in asked] == [declares]


def test_a_client_that_did_not_declare_the_capability_is_not_asked_and_the_server_is_told_which(
    gateway: Serve,
) -> None:
    async def main() -> list[str]:
        async with client(f"{gateway.base}/servers/mine/mcp", ALICE, None) as c:
            return [
                _text(await c.call_tool("sample", {"prompt": "anything"})),
                _text(await c.call_tool("elicit", {"message": "anything"})),
            ]

    sampled, elicited = run(main())
    assert sampled.startswith("refused: ") and "did not declare the 'sampling' capability" in sampled
    assert elicited.startswith("refused: ") and "did not declare the 'elicitation' capability" in elicited


def test_a_shared_servers_request_never_reaches_another_principals_client(gateway: Serve, tmp_path: Path) -> None:
    """The attack: alice's call leaves work that asks for sampling later, while bob's call is the one in flight."""
    speak, answer = tmp_path / "speak", tmp_path / "answer"
    os.mkfifo(speak)
    os.mkfifo(answer)
    url = f"{gateway.base}/servers/both/mcp"

    async def main() -> tuple[list[str], list[str]]:
        alice_asked, bob_asked = Asked("alice"), Asked("bob")
        async with client(url, ALICE, alice_asked) as alice:
            assert _text(await alice.call_tool("later", {"gate": str(speak)})) == "later"
            async with client(url, BOB, bob_asked) as bob:
                waiting = asyncio.ensure_future(bob.call_tool("wait", {"gate": str(answer)}))
                # Bob's call is at the server (it opened the FIFO's read end).
                # The server writes what came of its request to its stderr (the gateway's log).
                await speak_while_held(answer, speak, gateway, "LATER ", RELAY_WAIT)
                assert _text(await asyncio.wait_for(waiting, RELAY_WAIT)) == "waited"
        return alice_asked.asked, bob_asked.asked

    alice, bob = run(main())
    assert bob == []
    assert alice == []
    line = next(line for line in gateway.stderr().splitlines() if "LATER " in line)
    assert "LATER refused" in line and "several principals" in line, line
