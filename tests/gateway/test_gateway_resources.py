"""``lovia-mcp serve`` relays resources, prompts and completion, per server, under the access rules.

One gateway serves the module: ``catalog_server.py`` (the SDK's MCPServer)
twice, as ``cat`` (reached in the handshake era: subscriptions) and ``sec``
(2026-07-28 between worker and server), and ``log_server.py`` (no
resources). Principals: ``alice`` sees ``cat`` and ``log``, ``bob`` only
``sec``, ``carol`` both catalogs. The SDK's client, both eras.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from _gateway import Serve, raised_within, sdk_client, server
from conftest import run

pytestmark = pytest.mark.timeout(120)

# A relayed notification travels server -> worker -> gateway -> client: milliseconds unloaded.
RELAY_WAIT = 30.0
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
CAROL = "carol-token-0123456789abcdef"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    from _gateway import shared_by_module

    catalog = server("catalog_server.py")
    g = Serve(
        tmp_path_factory.mktemp("resources"),
        {
            "cat": {**catalog, "args": [*catalog["args"], "cat"], "protocol": "legacy"},
            "sec": {**catalog, "args": [*catalog["args"], "sec"]},
            "log": server("log_server.py"),
        },
        token_lines=f"alice {ALICE}\nbob {BOB}\ncarol {CAROL}\n",
        gateway={"access": {"alice": ["cat", "log"], "bob": ["sec"], "carol": ["cat", "sec"]}},
    )
    with shared_by_module(g):
        yield g


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _texts(messages: Any) -> list[str]:
    return [m.content.text for m in messages]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("name", ["cat", "sec"])
def test_a_servers_resources_prompts_and_completion_are_relayed_on_its_own_endpoint_in_both_eras(
    gateway: Serve, mode: str, name: str
) -> None:
    async def main() -> dict[str, Any]:
        async with sdk_client(f"{gateway.base}/servers/{name}/mcp", _auth(CAROL), mode=mode) as client:
            caps = client.server_capabilities
            from mcp_types import PromptReference

            return {
                "caps": (caps.resources is not None, caps.prompts is not None, caps.completions is not None),
                "resources": [str(r.uri) for r in (await client.list_resources()).resources],
                "templates": [t.uri_template for t in (await client.list_resource_templates()).resource_templates],
                "note": (await client.read_resource(f"{name}://note")).contents[0].text,
                "item": (await client.read_resource(f"{name}://item/7")).contents[0].text,
                "prompts": [p.name for p in (await client.list_prompts()).prompts],
                "hello": _texts((await client.get_prompt("hello", {"who": "you"})).messages),
                "completed": (
                    await client.complete(
                        PromptReference(type="ref/prompt", name="hello"), {"name": "who", "value": "a"}
                    )
                ).completion.values,
            }

    got = run(main())
    assert got == {
        "caps": (True, True, True),
        "resources": [f"{name}://note"],
        "templates": [f"{name}://item/{{id}}"],
        "note": f"note of {name}",
        "item": f"item 7 of {name}",
        "prompts": ["hello"],
        "hello": [f"hello you from {name}"],
        "completed": ["alpha"],
    }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_on_mcp_each_list_is_the_union_of_the_servers_a_principal_sees_resources_keep_their_uris_prompts_get_the_prefix(
    gateway: Serve, mode: str
) -> None:
    async def main() -> dict[str, Any]:
        from mcp_types import PromptReference, ResourceTemplateReference

        async with sdk_client(gateway.url, _auth(CAROL), mode=mode) as client:
            return {
                "resources": sorted(str(r.uri) for r in (await client.list_resources()).resources),
                "templates": sorted(
                    t.uri_template for t in (await client.list_resource_templates()).resource_templates
                ),
                "prompts": sorted(p.name for p in (await client.list_prompts()).prompts),
                "sec note": (await client.read_resource("sec://note")).contents[0].text,
                "cat item": (await client.read_resource("cat://item/3")).contents[0].text,
                "sec hello": _texts((await client.get_prompt("sec__hello", {"who": "me"})).messages),
                "by prompt": (
                    await client.complete(
                        PromptReference(type="ref/prompt", name="cat__hello"), {"name": "who", "value": "b"}
                    )
                ).completion.values,
                "by template": (
                    await client.complete(
                        ResourceTemplateReference(type="ref/resource", uri="sec://item/{id}"),
                        {"name": "id", "value": ""},
                    )
                ).completion.values,
            }

    got = run(main())
    assert got == {
        "resources": ["cat://note", "sec://note"],
        "templates": ["cat://item/{id}", "sec://item/{id}"],
        "prompts": ["cat__hello", "sec__hello"],
        "sec note": "note of sec",
        "cat item": "item 3 of cat",
        "sec hello": ["hello me from sec"],
        "by prompt": ["beta"],
        "by template": ["alpha", "beta"],
    }


def test_a_principal_neither_lists_nor_reads_nor_gets_a_prompt_of_a_server_it_may_not_see(gateway: Serve) -> None:
    """The attack: bob may see only ``sec``; he asks for ``cat``'s note and prompt by name on /mcp."""
    from mcp.shared.exceptions import MCPError

    async def main() -> dict[str, Any]:
        async with sdk_client(gateway.url, _auth(BOB), mode="legacy") as client:
            got: dict[str, Any] = {
                "resources": [str(r.uri) for r in (await client.list_resources()).resources],
                "prompts": [p.name for p in (await client.list_prompts()).prompts],
            }
            for what, attempt in [
                ("read", client.read_resource("cat://note")),
                ("prompt", client.get_prompt("cat__hello", {"who": "bob"})),
            ]:
                try:
                    got[what] = await attempt
                except Exception as exc:  # noqa: BLE001 - the SDK raises the JSON-RPC error (in a group)
                    got[what] = raised_within(exc, MCPError).error.message
            return got

    got = run(main())
    assert got["resources"] == ["sec://note"]
    assert got["prompts"] == ["sec__hello"]
    # Asked of the only server bob sees, which has no such resource: its error, never cat's note.
    assert got["read"] == "Unknown resource: cat://note"
    assert got["prompt"] == "unknown prompt 'cat__hello': prompts here are named <server>__<prompt>"


def test_resources_and_prompts_are_advertised_only_where_a_server_has_them(gateway: Serve) -> None:
    from mcp.shared.exceptions import MCPError

    async def main() -> tuple[Any, str]:
        async with sdk_client(f"{gateway.base}/servers/log/mcp", _auth(ALICE), mode="legacy") as client:
            caps = client.server_capabilities
            try:
                await client.list_resources()
                refused = ""
            except Exception as exc:  # noqa: BLE001 - the SDK raises the JSON-RPC error (in a group)
                refused = raised_within(exc, MCPError).error.message
            return (caps.resources, caps.prompts, caps.completions), refused

    caps, refused = run(main())
    assert caps == (None, None, None)
    assert refused == "Method not found"


def test_a_subscribed_session_hears_its_resources_updates_and_every_session_hears_list_changes(
    gateway: Serve,
) -> None:
    import mcp_types

    async def main() -> tuple[list[Any], list[Any]]:
        heard: dict[str, list[Any]] = {"a": [], "b": []}
        arrived = {k: asyncio.Event() for k in heard}
        streams = {k: asyncio.Event() for k in heard}

        def handler(key: str) -> Any:
            async def handle(message: Any) -> None:
                if isinstance(message, mcp_types.ServerNotification.__args__):  # type: ignore[attr-defined]
                    heard[key].append(message)
                    arrived[key].set()

            return handle

        url = f"{gateway.base}/servers/cat/mcp"
        async with (
            sdk_client(url, _auth(ALICE), mode="legacy", message_handler=handler("a"), stream_open=streams["a"]) as a,
            sdk_client(url, _auth(CAROL), mode="legacy", message_handler=handler("b"), stream_open=streams["b"]) as b,
        ):
            await asyncio.wait_for(asyncio.gather(streams["a"].wait(), streams["b"].wait()), RELAY_WAIT)
            await a.subscribe_resource("cat://note")
            await b.call_tool("touch", {"uri": "cat://note"})
            await asyncio.wait_for(arrived["a"].wait(), RELAY_WAIT)
            await a.unsubscribe_resource("cat://note")
            arrived["a"].clear()
            await b.call_tool("change", {})
            # Each session is awaited on its own count: a gather over both events, cleared together,
            # lost the wakeup when one session had all its messages before the other's last one.
            for key, count in (("a", 3), ("b", 2)):
                while len(heard[key]) < count:
                    arrived[key].clear()
                    if len(heard[key]) < count:
                        await asyncio.wait_for(arrived[key].wait(), RELAY_WAIT)
        return heard["a"], heard["b"]

    a, b = run(main())
    assert [type(m).__name__ for m in a] == [
        "ResourceUpdatedNotification",
        "ResourceListChangedNotification",
        "PromptListChangedNotification",
    ]
    assert a[0].params.uri == "cat://note"
    # b never subscribed: only the list changes.
    assert [type(m).__name__ for m in b] == ["ResourceListChangedNotification", "PromptListChangedNotification"]
    assert "SUBSCRIBE cat://note" in gateway.stderr() and "UNSUBSCRIBE cat://note" in gateway.stderr()


def test_a_gateway_whose_servers_are_all_shared_tells_its_forkserver_to_keep_one_idle_worker(gateway: Serve) -> None:
    # Every server here is shared and open: no open is to come but a crashed
    # worker's replacement. That the forkserver then keeps that many is
    # tests/client/test_forkserver.py's; this is that serve asks it.
    kept = [line for line in gateway.stderr().splitlines() if "idle workers kept" in line]
    print(kept)
    assert len(kept) == 1 and kept[0].endswith("idle workers kept: 1"), kept
