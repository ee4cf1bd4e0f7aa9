"""An output cap keeps a big result's middle in the worker (issue 19).

Under an output cap (the server's ``max_output_chars``, else the agent's
``max_tool_output_chars``) with the default renderer, a text longer than
twice the cap plus ``KEEP_SLACK`` loses its middle in the worker; what the
model sees is lovia's own cut (``truncate_tool_output``) of the *whole*
rendered text, at a room that fits the cap together with its marker.
Shorter results, custom renderers and direct ``call_tool`` calls get the
whole result (test_plugin.py checks the exact parity with lovia there).
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from helpers import ISOLATIONS, drive, outputs, raw, results, run
from lovia.plugins.mcp import render_mcp_content
from lovia.run_context import RunContext
from lovia.testing import call
from lovia.tools.base import truncate_tool_output
from lovia_mcp_worker.session.cut import KEEP_SLACK, cut_middle, keeps_structured
from lovia_mcp_worker.wire.mcpjson import ContentBlock, Resource

from lovia_mcp import MCP, MCPToolResult
from lovia_mcp.render import FIT_MIN, truncate_to_fit

KEPT = re.compile(r"\[\.\.\. tool output truncated: kept ([\d,]+) of ([\d,]+) chars \.\.\.\]")
# The longest marker lovia writes for texts under ~10^12 characters: the room
# a fitted cut gives up beside the cap.
MARKER_MAX = 80


def lovia_cut_at_its_room(whole: str, shown: str, cap: int) -> None:
    """``shown`` fits ``cap`` and is lovia's own cut of ``whole`` at the room its marker leaves."""
    found = KEPT.search(shown)
    assert found is not None, shown[:200]
    kept, of = (int(g.replace(",", "")) for g in found.groups())
    assert of == len(whole)
    assert cap - MARKER_MAX <= kept < cap
    assert len(shown) <= cap
    assert shown == truncate_tool_output(whole, kept)


def blocks(rng: random.Random) -> list[ContentBlock]:
    out: list[ContentBlock] = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(["text", "text", "resource", "image", "link"])
        size = rng.choice([0, 5, 300, 40_000, 200_000])
        body = "".join(rng.choice("abcé€😀\n") for _ in range(min(size, 50))) * max(1, size // 50)
        if kind == "text":
            out.append(ContentBlock(type="text", text=body))
        elif kind == "resource":
            out.append(ContentBlock(type="resource", resource=Resource(uri="file:///r", text=body)))
        elif kind == "image":
            out.append(ContentBlock(type="image", data="aGVsbG8=", mime_type="image/png"))
        else:
            out.append(ContentBlock(type="resource_link", uri="file:///l"))
    return out


@pytest.mark.unit
def test_a_cut_in_the_worker_then_a_fitted_cut_is_lovias_cut_of_the_whole_text() -> None:
    rng = random.Random(19)
    cut_cases = 0
    for _ in range(300):
        content = blocks(rng)
        is_error = rng.random() < 0.3
        cap = rng.choice([FIT_MIN, 1000, 10_000, 100_000])
        whole = render_mcp_content(content, is_error=is_error)
        kept, omitted = cut_middle(content, cap)
        crossed = render_mcp_content(kept, is_error=is_error)
        assert len(crossed) + omitted == len(whole)
        assert [b.type for b in kept] == [b.type for b in content]
        if omitted:
            cut_cases += 1
            assert len(whole) > 2 * cap + KEEP_SLACK
            lovia_cut_at_its_room(whole, truncate_to_fit(crossed, cap, omitted=omitted), cap)
        else:
            assert kept is content
    print(f"{cut_cases} of 300 random results were cut in the worker")
    assert cut_cases > 30


@pytest.mark.unit
def test_a_fitted_cut_of_a_whole_text_is_lovias_cut_at_a_smaller_room() -> None:
    text = "".join(f"{i:09d}\n" for i in range(5000))
    for cap in (FIT_MIN, 1000, 49_999):
        lovia_cut_at_its_room(text, truncate_to_fit(text, cap), cap)
    assert truncate_to_fit(text, len(text)) == text


@pytest.mark.unit
def test_structured_content_crosses_under_a_cap_only_while_small() -> None:
    small, large = b'{"a":1}', b"x" * (2 * 1000 + KEEP_SLACK + 1)
    assert keeps_structured(small, 1000) == small
    assert keeps_structured(large, 1000) is None
    assert keeps_structured(None, 1000) is None


BIG = {"size": 300_000, "blocks": 2}  # 750,000 characters of text: over 2 x 10,000 + 64 Ki


async def whole_text(isolation: str, arguments: dict[str, Any]) -> str:
    async with raw(isolation).session() as conn:
        result = await conn.call_tool("long", arguments)
        return str(render_mcp_content(result.content, is_error=result.is_error))


@ISOLATIONS
@pytest.mark.parametrize("error", [False, True])
def test_under_the_servers_cap_the_model_sees_lovias_cut_of_the_whole_result_and_the_middle_never_crossed(
    isolation: str,
    error: bool,
) -> None:
    arguments = {**BIG, "error": error, "structured": 500_000}
    whole = run(whole_text(isolation, arguments))
    result, _ = run(drive(MCP(raw(isolation, max_output_chars=10_000)), call("raw__long", arguments)))

    (entry,) = results(result)
    lovia_cut_at_its_room(whole, entry.output, 10_000)
    assert entry.output.startswith("[tool error] 0é0000000" if error else "0é0000000")
    # What crossed: about twice the cap of text, nothing of the middle, and
    # no structuredContent (the default renderer never shows it).
    crossed = entry.raw
    assert isinstance(crossed, MCPToolResult)
    crossed_chars = sum(len(b.text or "") + len(getattr(b.resource, "text", None) or "") for b in crossed.content)
    print(f"whole text {len(whole):,} chars; crossed {crossed_chars:,}; left in the worker {crossed.omitted:,}")
    assert len(render_mcp_content(crossed.content, is_error=error)) + crossed.omitted == len(whole)
    assert crossed_chars == 2 * 10_000
    assert crossed.structured_content is None


@ISOLATIONS
def test_the_agents_cap_applies_when_the_server_sets_none(isolation: str) -> None:
    whole = run(whole_text(isolation, BIG))
    result, _ = run(drive(MCP(raw(isolation)), call("raw__long", BIG), max_tool_output_chars=50_000))

    (entry,) = results(result)
    lovia_cut_at_its_room(whole, entry.output, 50_000)


@ISOLATIONS
def test_a_custom_renderer_and_a_direct_call_get_the_whole_result(isolation: str) -> None:
    seen: list[int] = []

    def renderer(result: Any, ctx: RunContext[Any]) -> str:
        seen.append(sum(len(getattr(b, "text", None) or "") for b in result.content))
        return "rendered"

    plugin = MCP(raw(isolation, max_output_chars=10_000, result_renderer=renderer))
    result, _ = run(drive(plugin, call("raw__long", BIG)))

    assert outputs(result) == ["rendered"]
    assert seen == [2 * 300_000]
    whole = run(whole_text(isolation, BIG))
    assert len(whole) == 2 * 300_000 + 150_000 + len("[image: image/png, 11 B]") + 3


@ISOLATIONS
def test_a_deferred_tool_under_a_cap_is_cut_to_fit_too(isolation: str) -> None:
    whole = run(whole_text(isolation, BIG))
    plugin = MCP(raw(isolation, max_output_chars=10_000, defer=True))
    result, _ = run(drive(plugin, call("call_mcp_tool", {"tool": "raw__long", "arguments": BIG})))

    (shown,) = outputs(result)
    lovia_cut_at_its_room(whole, shown, 10_000)
