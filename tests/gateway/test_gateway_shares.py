"""Each principal's share of the gateway's caps: no principal can fill one for the others.

The caps a client fills by holding things open: an endpoint's 2025 sessions
(``--max-http-sessions``), its 2026-07-28 listen streams (as many), and a
per-session server's servers (``max_sessions``). With several principals in
the token file each may hold at most the cap split evenly among them
(:func:`lovia_mcp.gateway.principals.share`). Each test is the attack: alice
tries to take the whole cap, then bob must still get his share. Without the
shares alice takes it all and bob is refused.

One gateway serves the module: two principals, alice with two tokens (a
share is a principal's, whichever of its tokens it uses), ``--max-http-sessions 4``
(a share of 2 each) and a per-session server with ``max_sessions`` 2 (1 each).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _gateway import Serve, raw, sdk_client, shared_by_module
from conftest import run

from lovia_mcp.gateway.principals import share

pytestmark = pytest.mark.timeout(120)

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
# alice's second token (rotation: the old and the new side by side).
ALICE_NEW = "alice-new-token-0123456789ab"
CAP = 4  # --max-http-sessions: a share of 2 for each of the two principals
SLOTS = 2  # the per-session server's max_sessions: a share of 1
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    g = Serve(
        tmp_path_factory.mktemp("shares"),
        {"raw": raw(), "ps": raw(session="per-session", max_sessions=SLOTS)},
        "--max-http-sessions",
        str(CAP),
        token_lines=f"alice {ALICE}\nbob {BOB}\nalice {ALICE_NEW}\n",
    )
    with shared_by_module(g):
        yield g


def _auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _refusals(g: Serve, cap: str) -> int:
    """``lovia_mcp_share_refusals_total`` for ``cap`` on ``/mcp``, from the gateway's /metrics."""
    text = httpx.get(g.base + "/metrics", headers=_auth(ALICE), timeout=30.0).text
    line = f'lovia_mcp_share_refusals_total{{endpoint="/mcp",cap="{cap}"}} '
    return sum(int(s.removeprefix(line)) for s in text.splitlines() if s.startswith(line))


async def _initialize(http: httpx.AsyncClient, token: str) -> tuple[int, str | None, str]:
    """A 2025 initialize by hand: the status, the session id the SDK answered (if any), and the body."""
    r = await http.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        },
        headers={**_auth(token), "accept": ACCEPT},
    )
    return r.status_code, r.headers.get("mcp-session-id"), r.text


def test_no_principal_can_hold_more_than_its_share_of_an_endpoints_sessions(gateway: Serve) -> None:
    counted = _refusals(gateway, "sessions")

    async def main() -> tuple[list[tuple[int, str | None, str]], list[tuple[int, str | None, str]]]:
        opened: list[tuple[str, str]] = []
        async with httpx.AsyncClient(base_url=gateway.base, timeout=30.0) as http:
            try:
                # The whole endpoint, if she could, all at once: a session is
                # counted from its request, not from the SDK's answer.
                alice = list(await asyncio.gather(*(_initialize(http, ALICE) for _ in range(CAP))))
                opened += [(ALICE, sid) for _, sid, _ in alice if sid is not None]
                bob = []
                for _ in range(share(CAP, 2)):
                    bob.append(answer := await _initialize(http, BOB))
                    if answer[1] is not None:
                        opened.append((BOB, answer[1]))
                return alice, bob
            finally:
                for token, sid in opened:
                    await http.delete("/mcp", headers={**_auth(token), "mcp-session-id": sid})

    alice, bob = run(main())
    print("alice:", [(s, sid is not None) for s, sid, _ in alice], "bob:", [(s, sid is not None) for s, sid, _ in bob])
    assert sorted(sid is not None for _, sid, _ in alice) == [False, False, True, True], alice
    for status, _, body in (a for a in alice if a[1] is None):
        assert status == 503, body
        assert "principal 'alice' already holds 2 sessions on /mcp, its share of the endpoint's 4" in body, body
        assert "hint" in body
    assert all(status == 200 and sid is not None for status, sid, _ in bob), bob
    assert _refusals(gateway, "sessions") - counted == 2  # the operator sees each refusal


def test_a_principal_with_two_tokens_holds_one_principals_share_of_sessions_across_them(gateway: Serve) -> None:
    counted = _refusals(gateway, "sessions")

    async def main() -> tuple[list[tuple[int, str | None, str]], list[tuple[int, str | None, str]]]:
        opened: list[tuple[str, str]] = []
        async with httpx.AsyncClient(base_url=gateway.base, timeout=30.0) as http:
            try:
                # A share's worth with each token, all at once.
                tokens = [ALICE] * share(CAP, 2) + [ALICE_NEW] * share(CAP, 2)
                alice = list(await asyncio.gather(*(_initialize(http, token) for token in tokens)))
                opened += [(token, sid) for token, (_, sid, _) in zip(tokens, alice) if sid is not None]
                bob = []
                for _ in range(share(CAP, 2)):
                    bob.append(answer := await _initialize(http, BOB))
                    if answer[1] is not None:
                        opened.append((BOB, answer[1]))
                return alice, bob
            finally:
                for token, sid in opened:
                    await http.delete("/mcp", headers={**_auth(token), "mcp-session-id": sid})

    alice, bob = run(main())
    print("alice:", [(s, sid is not None) for s, sid, _ in alice], "bob:", [(s, sid is not None) for s, sid, _ in bob])
    assert sum(sid is not None for _, sid, _ in alice) == share(CAP, 2), alice
    for status, _, body in (a for a in alice if a[1] is None):
        assert status == 503 and "principal 'alice' already holds 2 sessions on /mcp" in body, body
    assert all(status == 200 and sid is not None for status, sid, _ in bob), bob
    assert _refusals(gateway, "sessions") - counted == 2


def _listen(token: str) -> dict[str, Any]:
    return {
        "json": {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "subscriptions/listen",
            "params": {
                "notifications": {"toolsListChanged": True},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        },
        "headers": {
            **_auth(token),
            "accept": ACCEPT,
            "mcp-protocol-version": MODERN,
            "mcp-method": "subscriptions/listen",
        },
    }


def test_no_principal_can_hold_more_than_its_share_of_an_endpoints_listen_streams(gateway: Serve) -> None:
    counted = _refusals(gateway, "listen_streams")

    async def main() -> tuple[list[bytes], list[bytes]]:
        async with contextlib.AsyncExitStack() as streams, httpx.AsyncClient(base_url=gateway.base) as http:
            # The streams' readers, kept: one dropped closes its stream.
            readers: list[Any] = []

            async def listen(token: str) -> bytes:
                """The stream's first bytes: its acknowledgement, or the refusal. An open stream stays open."""
                r = await streams.enter_async_context(http.stream("POST", "/mcp", timeout=30.0, **_listen(token)))
                readers.append(reader := r.aiter_bytes())
                return await asyncio.wait_for(anext(reader), 30.0)

            alice = [await listen(ALICE) for _ in range(CAP)]
            bob = [await listen(BOB) for _ in range(share(CAP, 2))]
            return alice, bob

    alice, bob = run(main())
    print("alice:", [b[:90] for b in alice], "bob:", [b[:90] for b in bob])
    acknowledged = [b"notifications/subscriptions/acknowledged" in first for first in alice]
    assert acknowledged == [True, True, False, False], alice
    for first in alice[2:]:
        assert b"principal 'alice' holds 2 listen streams here, its share of 4" in first, first
    assert all(b"notifications/subscriptions/acknowledged" in first for first in bob), bob
    assert _refusals(gateway, "listen_streams") - counted == 2


def test_no_principal_can_hold_more_than_its_share_of_a_per_session_servers_slots(gateway: Serve) -> None:
    from mcp.shared.exceptions import MCPError as SDKError

    counted = _refusals(gateway, "server_slots")

    async def main() -> tuple[str, str, str]:
        async with (
            sdk_client(gateway.url, _auth(ALICE), mode="legacy") as first,
            sdk_client(gateway.url, _auth(ALICE), mode="legacy") as second,
            sdk_client(gateway.url, _auth(BOB), mode="legacy") as bobs,
        ):
            served = (await first.call_tool("ps__echo", {"text": "alice 1"})).content[0].text
            try:
                await second.call_tool("ps__echo", {"text": "alice 2"})
                refused = "served"
            except SDKError as exc:
                refused = str(exc)
            bob = (await bobs.call_tool("ps__echo", {"text": "bob"})).content[0].text
            return served, refused, bob

    served, refused, bob = run(main())
    print(f"alice's second session: {refused}")
    assert served == "alice 1"
    assert "server 'ps' already serves 1 sessions of principal 'alice', its share of the server's max_sessions" in (
        refused
    ), refused
    assert bob == "bob"
    assert _refusals(gateway, "server_slots") - counted == 1


@pytest.mark.unit
@pytest.mark.parametrize(
    ("cap", "principals", "expected"),
    [(16, 1, 16), (16, 0, 16), (4, 2, 2), (16, 5, 3), (2, 3, 1), (1, 1, 1)],
)
def test_a_principals_share_is_the_cap_split_evenly_and_at_least_one(cap: int, principals: int, expected: int) -> None:
    assert share(cap, principals) == expected
    # Evenly: the shares together never pass the cap unless each is the minimum of one.
    assert expected * max(1, principals) <= cap or expected == 1


__all__: list[str] = []
