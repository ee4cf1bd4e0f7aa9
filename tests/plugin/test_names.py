"""Model-visible tool names: valid for every provider, unique within a server,
and the server still called by its raw name.

The naming itself is pure logic (``lovia_mcp._names``), tested directly; then
end to end against ``tests/servers/names_server.py``, a server whose tool
names no provider accepts as they are, through a connection, a real lovia
Agent and the ``lovia-mcp call`` command.
"""

from __future__ import annotations

import logging
import random
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import ISOLATIONS, PY, SERVERS, drive, lovia_mcp, outputs, run
from lovia.testing import call

from lovia_mcp import MCP, MCPServerStdio
from lovia_mcp._names import MAX_NAME, is_valid, prefix_head, sanitize, tool_names

NAMES_SERVER = str(SERVERS / "names_server.py")
# What names_server.py lists, "dup" twice.
RAW_NAMES = ["get weather", "héllo", "a.b", "a_b", "x" * 300, "dup", "dup", "ok_name"]
PROVIDER_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def names_server(isolation: str = "process", **options: object) -> MCPServerStdio:
    return MCPServerStdio(command=PY, args=[NAMES_SERVER], name="srv", isolation=isolation, **options)  # type: ignore[arg-type]


def visible(raw: str, prefix: str | None = "srv") -> str:
    """The visible name of one of names_server's tools."""
    name = tool_names(prefix, RAW_NAMES)[RAW_NAMES.index(raw)]
    assert name is not None
    return name


# --------------------------------------------------------------------------- #
# The naming rule
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_names_that_are_already_valid_and_unique_are_kept_exactly_with_or_without_a_prefix() -> None:
    raw = ["echo", "add", "get-weather", "A_b-9", "x" * 64]

    assert tool_names(None, raw) == raw
    assert tool_names("git", raw[:4]) == ["git__echo", "git__add", "git__get-weather", "git__A_b-9"]


@pytest.mark.unit
def test_spaces_dots_and_unicode_become_valid_names_with_a_stable_suffix_of_the_raw_name() -> None:
    raw = ["get weather", "a.b", "café", "日本語", "", "tab\there", "emoji 🙂"]

    names = tool_names("srv", raw)

    assert all(n is not None and PROVIDER_RULE.match(n) for n in names), names
    # The suffix is sha1 of the raw name: pinned, because a change would
    # rename every such tool under every deployed agent.
    assert names[0] == "srv__get_weather_225750"
    assert names[2] is not None and names[2].startswith("srv__cafe_")  # accents fold, not "_"
    assert names[4] is not None and names[4].startswith("srv__tool_")  # empty gets a word
    assert sanitize("héllo wörld") == "hello_world"


@pytest.mark.unit
def test_a_300_character_name_is_cut_to_64_characters_keeping_the_whole_prefix() -> None:
    long_name = "very_long_tool_name_" * 15

    [name] = tool_names("my-server", [long_name])

    assert name is not None and len(name) == MAX_NAME and PROVIDER_RULE.match(name)
    assert name.startswith("my-server__very_long_tool_name_")
    assert tool_names(None, ["y" * 300]) != tool_names(None, ["y" * 301])  # same cut, different suffix


@pytest.mark.unit
def test_a_prefix_too_long_on_its_own_is_cut_too_and_still_leaves_room_for_the_tool() -> None:
    prefix = "a-server-with-a-name-far-too-long-for-any-provider-to-accept" * 2

    names = tool_names(prefix, ["echo", "add", "z" * 80])

    assert all(n is not None and PROVIDER_RULE.match(n) for n in names), names
    head = prefix_head(prefix)
    assert all(n is not None and n.startswith(head) for n in names)
    assert names[0] == head + "echo" and names[1] == head + "add"
    # Two long names that share the first characters still differ.
    assert prefix_head(prefix + "-a") != prefix_head(prefix + "-b")


@pytest.mark.unit
def test_two_raw_names_that_would_map_to_one_visible_name_get_distinct_names() -> None:
    dotted = "a.b"
    # A valid raw name chosen to equal the dotted name's suffixed form.
    lookalike = tool_names(None, [dotted])[0]
    assert lookalike is not None

    names = tool_names(None, ["a_b", dotted, lookalike])

    assert names[0] == "a_b"  # valid and unique: untouched
    assert len(set(names)) == 3 and all(n is not None and PROVIDER_RULE.match(n) for n in names)
    # Which of the colliding pair gets which suffix does not depend on order.
    assert tool_names(None, [lookalike, dotted, "a_b"]) == names[::-1]


@pytest.mark.unit
def test_a_raw_name_listed_twice_keeps_its_first_listing_and_the_repeat_is_none() -> None:
    assert tool_names("srv", ["dup", "ok", "dup", "dup"]) == ["srv__dup", "srv__ok", None, None]


@pytest.mark.unit
def test_the_names_are_the_same_on_every_call_and_in_any_listing_order() -> None:
    unique = list(dict.fromkeys(RAW_NAMES))
    first = dict(zip(unique, tool_names("srv", unique)))

    assert dict(zip(unique, tool_names("srv", list(unique)))) == first
    for seed in range(5):
        shuffled = list(unique)
        random.Random(seed).shuffle(shuffled)
        assert dict(zip(shuffled, tool_names("srv", shuffled))) == first


@pytest.mark.unit
def test_any_set_of_names_gives_valid_unique_names_of_at_most_64_characters() -> None:
    rng = random.Random(1234)
    alphabet = "ab_-. /éü日🙂\t" + "xyz" * 3
    for _ in range(200):
        raw = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 90))) for _ in range(rng.randint(1, 30))]
        prefix = rng.choice([None, "srv", "my server", "p" * 70])
        names = tool_names(prefix, raw)
        kept = [n for n in names if n is not None]
        assert len(kept) == len(set(raw)) == len(set(kept)), (prefix, raw, names)
        assert all(is_valid(n) and len(n) <= MAX_NAME for n in kept), (prefix, raw, names)


# --------------------------------------------------------------------------- #
# A real server with unsafe names
# --------------------------------------------------------------------------- #
@ISOLATIONS
def test_a_server_with_unsafe_and_repeated_names_offers_valid_unique_tools_that_call_it_by_raw_name(
    isolation: str,
) -> None:
    async def main() -> tuple[list[str], dict[str, str], list[str]]:
        async with names_server(isolation).session() as conn:
            names = [t.name for t in conn.tools()]
            by_raw = await conn.call_tool("get weather", {})
            via_tool = await next(t for t in conn.tools() if t.name == visible("héllo")).invoke({}, None)
            texts = [by_raw.content[0].text, via_tool.content[0].text]
            return names, dict(conn.raw_names), texts

    names, raw_names, texts = run(main())

    assert all(PROVIDER_RULE.match(n) for n in names), names
    assert len(names) == len(set(names)) == 7  # "dup" once
    assert sorted(raw_names.values()) == sorted(set(RAW_NAMES))
    assert {"srv__a_b", "srv__dup", "srv__ok_name"} <= set(names)  # valid names unchanged
    assert texts == ["called get weather", "called héllo"]


@ISOLATIONS
def test_an_agent_calls_made_safe_tools_and_the_server_receives_their_raw_names(isolation: str) -> None:
    result, model = run(
        drive(
            MCP(names_server(isolation)),
            call(visible("get weather"), {}),
            call(visible("x" * 300), {}),
            call(visible("a.b"), {}),
            call("srv__a_b", {}),
        )
    )

    offered = set(model.offered[0])
    assert all(PROVIDER_RULE.match(n) for n in offered), offered
    assert outputs(result) == ["called get weather", f"called {'x' * 300}", "called a.b", "called a_b"]


def test_a_tool_the_server_lists_twice_is_offered_once_and_logged_once_naming_server_and_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="lovia_mcp")

    async def main() -> list[str]:
        async with names_server("none").session() as conn:
            await conn.refresh_tools()  # the same listing again: no second warning
            return [t.name for t in conn.tools()]

    names = run(main())

    assert names.count("srv__dup") == 1
    warnings = [r.getMessage() for r in caplog.records if "more than once" in r.getMessage()]
    assert warnings == ["srv: the server lists the tool 'dup' more than once; the first listing is used"]


def test_include_and_exclude_tools_match_the_raw_names_of_made_safe_tools() -> None:
    server = names_server("none", include_tools=["get weather", "a.b", "a_b", "dup"], exclude_tools=["a_b"])

    async def main() -> tuple[list[str], dict[str, str]]:
        async with server.session() as conn:
            return [t.name for t in conn.tools()], dict(conn.raw_names)

    names, raw_names = run(main())

    assert names == [visible("get weather"), visible("a.b"), "srv__dup"]
    assert raw_names == {visible("get weather"): "get weather", visible("a.b"): "a.b", "srv__dup": "dup"}


# --------------------------------------------------------------------------- #
# lovia-mcp call
# --------------------------------------------------------------------------- #
def _lovia_mcp(*args: str) -> subprocess.CompletedProcess[str]:
    return lovia_mcp(*args, "--name", "srv", "--", PY, NAMES_SERVER)


def test_lovia_mcp_call_takes_the_visible_name_or_the_raw_name_and_suggests_visible_names() -> None:
    invocations = [
        ["call", visible("get weather")],
        ["call", visible("get weather")[len("srv__") :]],  # without the --name prefix
        ["call", "héllo"],  # the server's own name
        ["call", "get wether"],
    ]
    with ThreadPoolExecutor(len(invocations)) as pool:
        full, unprefixed, raw, typo = pool.map(lambda a: _lovia_mcp(*a), invocations)

    assert (full.returncode, full.stdout) == (0, "called get weather\n"), full.stderr
    assert (unprefixed.returncode, unprefixed.stdout) == (0, "called get weather\n"), unprefixed.stderr
    assert (raw.returncode, raw.stdout) == (0, "called héllo\n"), raw.stderr
    assert typo.returncode == 2 and "Traceback" not in typo.stderr, typo.stderr
    assert f"Did you mean {visible('get weather')!r}" in typo.stderr, typo.stderr
