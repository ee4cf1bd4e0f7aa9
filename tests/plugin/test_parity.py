"""Surface parity with ``lovia.plugins.mcp.MCPConnection`` (issue 13, item 6).

Code written against lovia's connection reads its public fields and calls
``refresh_tools()``; ours offers the same names with the same values for the
same configuration (filters as sets, as lovia builds them), read-only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from helpers import ISOLATIONS, PY, SERVERS, run
from lovia.plugins import mcp as lovia_mcp_plugin

from lovia_mcp import MCPServerStdio

RAW = str(SERVERS / "raw_server.py")


def approve(args: dict[str, Any], ctx: Any) -> bool:
    return False


def render(result: Any, ctx: Any) -> str:
    return "rendered"


OPTIONS: dict[str, Any] = {
    "name": "raw",
    "include_tools": ["echo", "add"],
    "exclude_tools": ["add"],
    "needs_approval": approve,
    "retries": 2,
    "timeout": 7.5,
    "max_output_chars": 1234,
    "result_renderer": render,
    "auto_reconnect": False,
    "defer": True,
}
# lovia's MCPConnection fields that a caller reads (the private ones and the
# transport factory aside).
FIELDS = [
    f.name
    for f in dataclasses.fields(lovia_mcp_plugin.MCPConnection)
    if not f.name.startswith("_") and f.name != "transport"
]


@pytest.mark.unit
def test_the_fields_compared_are_lovias_public_connection_fields() -> None:
    assert sorted(FIELDS) == sorted(
        [
            "prefix",
            "include_tools",
            "exclude_tools",
            "needs_approval",
            "retries",
            "timeout",
            "max_output_chars",
            "result_renderer",
            "auto_reconnect",
            "close_after_run",
            "defer",
        ]
    )


@ISOLATIONS
def test_our_connection_offers_lovias_fields_with_the_same_values(isolation: str) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
        async with lovia_mcp_plugin.MCPServerStdio(command=PY, args=[RAW], **OPTIONS).session() as theirs:
            expected = {f: getattr(theirs, f) for f in FIELDS}
            their_tools = [t.name for t in await theirs.refresh_tools()]
        ours_server = MCPServerStdio(command=PY, args=[RAW], isolation=isolation, **OPTIONS)  # type: ignore[arg-type]
        async with ours_server.session() as ours:
            got = {f: getattr(ours, f) for f in FIELDS}
            our_tools = [t.name for t in await ours.refresh_tools()]
            for f in FIELDS:
                if f == "prefix":
                    continue  # a plain attribute, as before
                with pytest.raises(AttributeError):
                    setattr(ours, f, None)  # read-only: the config is frozen
        return expected, got, their_tools, our_tools

    expected, got, their_tools, our_tools = run(main())
    print(got)
    assert got == expected
    assert got["include_tools"] == {"echo", "add"} and got["close_after_run"] is False
    assert our_tools == their_tools == ["raw__echo"]


def test_empty_filters_read_as_none_as_in_lovia() -> None:
    async def main() -> tuple[Any, Any]:
        async with MCPServerStdio(command=PY, args=[RAW], include_tools=[], isolation="none").session() as ours:
            return ours.include_tools, ours.exclude_tools

    assert run(main()) == (None, None)
