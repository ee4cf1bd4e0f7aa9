"""Tool-list changes reach the gateway's clients (:mod:`lovia_mcp.gateway.notify`, :mod:`lovia_mcp.gateway.sessions`).

A shared server's change is told to every 2025 session listing it and to a
2026-07-28 client's listen stream; a per-session server's to its own
session only, also when its idle expiry brings back the first listing. The
notifier and the session table are also checked on their own, as are the
principals a change is told to. On the shared gateway (tests/_gateway.py);
a per-principal server's change is test_gateway_principals.py.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from _gateway import IDLE_EXPIRY_WAIT, NOTIFY_WAIT, Heard, Serve, sdk_client
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from conftest import run

pytestmark = pytest.mark.timeout(120)


def _fresh() -> str:
    # The shared server keeps every tool added: each test adds its own.
    return f"t{os.urandom(4).hex()}"


@pytest.mark.parametrize("path", ["/mcp", "/servers/grow/mcp"])
def test_a_2025_session_is_told_when_a_shared_servers_tools_change_and_then_lists_the_new_tool(
    gateway: Serve, path: str
) -> None:
    name = _fresh()
    prefix = "grow__" if path == "/mcp" else ""

    async def main() -> tuple[Any, int, set[str], set[str]]:
        heard = Heard()
        async with sdk_client(
            gateway.base + path, gateway.headers, mode="legacy", message_handler=heard, stream_open=heard.stream_open
        ) as listener:
            before = {t.name for t in (await listener.list_tools()).tools}
            await asyncio.wait_for(heard.stream_open.wait(), NOTIFY_WAIT)
            # Another client changes the list: every session listing the server hears of it.
            async with sdk_client(gateway.url, gateway.headers) as other:
                added = await other.call_tool("grow__add_tool", {"text": name})
                assert added.content[0].text == f"added {name}"
            await heard.next()
            after = {t.name for t in (await listener.list_tools()).tools}
            return listener.server_capabilities, heard.count, before, after

    capabilities, count, before, after = run(main())
    assert capabilities.tools.list_changed is True
    assert count == 1
    assert prefix + name not in before
    assert after == before | {prefix + name}


def test_a_2026_client_listening_for_tool_list_changes_gets_the_event_and_then_lists_the_new_tool(
    gateway: Serve,
) -> None:
    from mcp.client.subscriptions import ToolsListChanged

    name = _fresh()

    async def main() -> tuple[str, Any, Any, set[str]]:
        async with sdk_client(gateway.url, gateway.headers) as client:
            async with client.listen(tools_list_changed=True) as sub:
                # The stream is acknowledged: a change from now on is delivered.
                await client.call_tool("grow__add_tool", {"text": name})
                events = aiter(sub)
                event = await asyncio.wait_for(anext(events), NOTIFY_WAIT)
                after = {t.name for t in (await client.list_tools()).tools}
            return client.protocol_version, client.server_capabilities, event, after

    version, capabilities, event, after = run(main())
    assert version == "2026-07-28"
    assert capabilities.tools.list_changed is True
    assert isinstance(event, ToolsListChanged)
    assert f"grow__{name}" in after


def test_a_per_session_servers_tool_list_change_is_told_to_its_own_session_only(gateway: Serve) -> None:
    mine, theirs = _fresh(), _fresh()

    async def main() -> tuple[Heard, Heard, set[str], set[str]]:
        a, b = Heard(), Heard()
        async with (
            sdk_client(
                gateway.url, gateway.headers, mode="legacy", message_handler=a, stream_open=a.stream_open
            ) as one,
            sdk_client(
                gateway.url, gateway.headers, mode="legacy", message_handler=b, stream_open=b.stream_open
            ) as two,
        ):
            await asyncio.wait_for(asyncio.gather(a.stream_open.wait(), b.stream_open.wait()), NOTIFY_WAIT)
            await one.call_tool("growps__add_tool", {"text": mine})
            await a.next()
            # b's own change is told after anything a's change could have sent
            # it (the same stream, in order): b hearing exactly one means a's
            # change was not told to b.
            await two.call_tool("growps__add_tool", {"text": theirs})
            await b.next()
            return (
                a,
                b,
                {t.name for t in (await one.list_tools()).tools},
                {t.name for t in (await two.list_tools()).tools},
            )

    a, b, one_lists, two_lists = run(main())
    assert (a.count, b.count) == (1, 1)
    assert f"growps__{mine}" in one_lists and f"growps__{theirs}" not in one_lists
    assert f"growps__{theirs}" in two_lists and f"growps__{mine}" not in two_lists


def test_a_session_whose_per_session_server_expired_is_told_its_tools_are_the_first_listing_again(
    gateway: Serve,
) -> None:
    name = _fresh()

    async def main() -> tuple[int, set[str]]:
        heard = Heard()
        async with sdk_client(
            gateway.url, gateway.headers, mode="legacy", message_handler=heard, stream_open=heard.stream_open
        ) as client:
            await asyncio.wait_for(heard.stream_open.wait(), NOTIFY_WAIT)
            await client.call_tool("growbrief__add_tool", {"text": name})
            await heard.next()
            # The server's idle expiry closes it: the session lists the first open's tools again, and is told.
            await heard.next(IDLE_EXPIRY_WAIT)
            return heard.count, {t.name for t in (await client.list_tools()).tools}

    count, after = run(main())
    assert count == 2
    assert "growbrief__read" in after and f"growbrief__{name}" not in after


class _Ears:
    """Stands in for the SDK's ServerSession: counts the notifications sent on it."""

    def __init__(self) -> None:
        self.sent = 0

    async def send_tool_list_changed(self) -> None:
        self.sent += 1


@pytest.mark.unit
def test_the_notifier_tells_the_endpoints_listing_a_server_and_the_session_table_forgets_sessions_as_the_sdk_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from lovia_mcp.gateway import notify, sessions
    from lovia_mcp.gateway.upstreams import SessionHolder

    now = [1000.0]
    monkeypatch.setattr(sessions, "time", SimpleNamespace(monotonic=lambda: now[0]))
    table = sessions.Sessions(idle=60.0)
    n = notify.Notifier({"/mcp": None, "/servers/a/mcp": "a", "/servers/b/mcp": "b"}, max_streams=4, sessions=table)
    published: dict[str, int] = {path: 0 for path in n.endpoints}
    for path, endpoint in n.endpoints.items():
        endpoint.bus("p").subscribe(lambda _event, path=path: published.__setitem__(path, published[path] + 1))
    ears = {sid: _Ears() for sid in ("all", "a", "b")}

    # A request naming an id the SDK never issued leaves nothing behind.
    table.began("stranger")
    table.ended("stranger")
    assert "stranger" not in table and len(table) == 0
    for sid, only in (("all", None), ("a", "a"), ("b", "b")):
        table.opened(sid, "token-1")
        table.began(sid)
        table.heard(sid, ears[sid], only, "p")  # type: ignore[arg-type]
        table.ended(sid)
    # A session is its opener's only: another token (or none) naming it finds nothing.
    assert table.owned("all", "token-1") is not None
    assert table.owned("all", "token-2") is None and table.owned("all", None) is None
    table.began("all")  # its GET stream: open from now on

    async def change(server: str, session: str | None) -> None:
        n.changed(server, None if session is None else SessionHolder(session))
        await asyncio.gather(*list(n._sending))  # noqa: SLF001 - every send of this change, done

    async def main() -> None:
        await change("a", None)
        assert {sid: e.sent for sid, e in ears.items()} == {"all": 1, "a": 1, "b": 0}
        assert published == {"/mcp": 1, "/servers/a/mcp": 1, "/servers/b/mcp": 0}
        # A per-session server's change: its session only, and no listen stream.
        await change("b", "b")
        assert {sid: e.sent for sid, e in ears.items()} == {"all": 1, "a": 1, "b": 1}
        assert published == {"/mcp": 1, "/servers/a/mcp": 1, "/servers/b/mcp": 0}
        # Past the SDK's idle time: the idle sessions are gone, the one whose GET stream is open is not.
        now[0] += 61.0
        await change("a", None)
        assert {sid: e.sent for sid, e in ears.items()} == {"all": 2, "a": 1, "b": 1}
        assert len(table) == 1 and table.owned("a", "token-1") is None
        # DELETE.
        table.forget("all")
        await change("a", None)
        assert ears["all"].sent == 2 and len(table) == 0

    run(main())


@pytest.mark.unit
def test_a_change_is_told_only_to_principals_that_may_see_the_server_and_a_per_principal_one_to_its_own() -> None:
    from lovia_mcp.gateway import notify, sessions
    from lovia_mcp.gateway.access import Access
    from lovia_mcp.gateway.upstreams import PrincipalHolder

    table = sessions.Sessions(idle=60.0)
    # alice sees every server, bob only "a".
    access = Access({"alice": ["*"], "bob": ["a"]})
    n = notify.Notifier({"/mcp": None}, max_streams=4, sessions=table, access=access)
    published = {who: 0 for who in ("alice", "bob")}
    for who in published:
        n.endpoints["/mcp"].bus(who).subscribe(lambda _event, who=who: published.__setitem__(who, published[who] + 1))
    ears = {who: _Ears() for who in published}
    for who, e in ears.items():
        table.opened(who, f"token-{who}")
        table.heard(who, e, None, who)  # type: ignore[arg-type]

    async def change(server: str, principal: str | None) -> dict[str, tuple[int, int]]:
        n.changed(server, None if principal is None else PrincipalHolder(principal))
        await asyncio.gather(*list(n._sending))  # noqa: SLF001 - every send of this change, done
        return {who: (ears[who].sent, published[who]) for who in ears}

    async def main() -> list[dict[str, tuple[int, int]]]:
        # (2025 session told, listen streams told) per principal, after each change:
        return [
            await change("a", None),  # a shared server both see
            await change("b", None),  # a shared server bob may not see
            await change("a", "alice"),  # alice's own per-principal server
            await change("a", "bob"),  # bob's own
        ]

    assert run(main()) == [
        {"alice": (1, 1), "bob": (1, 1)},
        {"alice": (2, 2), "bob": (1, 1)},
        {"alice": (3, 3), "bob": (1, 1)},
        {"alice": (3, 3), "bob": (2, 2)},
    ]
