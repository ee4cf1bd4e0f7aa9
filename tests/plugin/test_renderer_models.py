"""A ``result_renderer`` written against lovia's plugin keeps working (issue 13, item 6).

lovia's plugin hands a custom renderer an ``MCPToolResult`` whose content is
the MCP SDK's models. Ours converts the wire blocks to those models at render
time (only then is ``mcp`` imported in the agent), keeping each block's
``annotations`` and ``_meta``. The same renderer, doing ``isinstance`` checks
against ``mcp.types`` and reading annotations and ``meta``, renders the same
string under lovia's own plugin and under ours in both isolation modes. The
default renderer still never imports ``mcp`` in the agent.
"""

from __future__ import annotations

import subprocess
import textwrap
from typing import Any

from helpers import ISOLATIONS, PY, SERVERS, run
from lovia import Agent, Runner
from lovia.plugins import mcp as lovia_mcp_plugin
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry
from mcp.types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent

from lovia_mcp import MCP, MCPServerStdio, MCPToolResult

BLOCKS = str(SERVERS / "blocks_server.py")
# Bound on the fresh interpreter's run (a worker start and one call).
FRESH_RUN_WAIT = 60.0


def sdk_renderer(result: Any, ctx: Any) -> str:
    """A renderer as one writes it against lovia's plugin (the SDK's models)."""
    _ = ctx
    parts: list[str] = []
    for b in result.content:
        if isinstance(b, TextContent):
            audience = ",".join(b.annotations.audience or []) if b.annotations else "-"
            parts.append(f"text:{b.text}|aud={audience}|meta={b.meta}")
        elif isinstance(b, ImageContent):
            priority = b.annotations.priority if b.annotations else None
            parts.append(f"image:{b.mime_type}|prio={priority}")
        elif isinstance(b, AudioContent):
            parts.append(f"audio:{b.mime_type}")
        elif isinstance(b, EmbeddedResource):
            res = b.resource
            body = getattr(res, "text", None) or f"{len(getattr(res, 'blob', '') or '')} b64 chars"
            parts.append(f"resource:{res.uri}|{body}|meta={b.meta}")
        elif isinstance(b, ResourceLink):
            audience = ",".join(b.annotations.audience or []) if b.annotations else "-"
            parts.append(f"link:{b.uri}|{b.name}|aud={audience}")
        else:
            parts.append(f"other:{getattr(b, 'type', '?')}")
    return " ; ".join(parts)


async def render_with(plugin: Any, **args: Any) -> str:
    model = ScriptedProvider([call("blk__blocks", args), text("done")])
    result = await Runner.run(Agent(name="tester", model=model, plugins=[plugin]), "go")
    outputs = [e.output for e in result.entries if isinstance(e, ToolResultEntry)]
    assert len(outputs) == 1, outputs
    return outputs[0]


def test_lovias_own_plugin_renders_the_reference_string() -> None:
    server = lovia_mcp_plugin.MCPServerStdio(command=PY, args=[BLOCKS], name="blk", result_renderer=sdk_renderer)
    rendered = run(render_with(lovia_mcp_plugin.MCP(server)))
    print(rendered)
    assert "text:hello|aud=user|meta={'example.com/trace': 't-1'}" in rendered
    assert "link:file:///c.txt|c.txt|aud=assistant" in rendered


@ISOLATIONS
def test_a_renderer_using_sdk_isinstance_checks_renders_as_under_lovias_plugin(isolation: str) -> None:
    reference = run(
        render_with(
            lovia_mcp_plugin.MCP(
                lovia_mcp_plugin.MCPServerStdio(command=PY, args=[BLOCKS], name="blk", result_renderer=sdk_renderer)
            )
        )
    )
    ours = run(
        render_with(
            MCP(
                MCPServerStdio(
                    command=PY,
                    args=[BLOCKS],
                    name="blk",
                    result_renderer=sdk_renderer,
                    isolation=isolation,  # type: ignore[arg-type]
                )
            )
        )
    )
    print(f"[{isolation}] {ours}")
    assert ours == reference
    assert "image:image/png|prio=0.1" in ours
    assert "resource:file:///a.txt|inline text|meta={'example.com/source': 'disk'}" in ours
    assert "resource:file:///b.bin|8 b64 chars|meta=None" in ours


@ISOLATIONS
def test_a_renderer_gets_our_result_class_with_sdk_blocks_and_unknown_blocks_as_wire_structs(isolation: str) -> None:
    seen: list[Any] = []

    def keep(result: Any, ctx: Any) -> str:
        seen.append(result)
        return "kept"

    assert (
        run(
            render_with(
                MCP(
                    MCPServerStdio(
                        command=PY,
                        args=[BLOCKS],
                        name="blk",
                        result_renderer=keep,
                        isolation=isolation,  # type: ignore[arg-type]
                    )
                ),
                unknown=True,
            )
        )
        == "kept"
    )
    (result,) = seen
    assert isinstance(result, MCPToolResult) and isinstance(result, lovia_mcp_plugin.MCPToolResult)
    assert result.is_error is False
    kinds = [type(b).__name__ for b in result.content]
    assert kinds == [
        "TextContent",
        "ImageContent",
        "AudioContent",
        "EmbeddedResource",
        "EmbeddedResource",
        "ResourceLink",
        "ContentBlock",
    ]
    widget = result.content[-1]
    assert widget.type == "widget" and widget.model_dump()["knobs"] == 3


def test_the_default_renderer_never_imports_mcp_in_the_agent_and_keeps_annotations_on_the_wire_blocks() -> None:
    script = textwrap.dedent(f"""
        import asyncio, sys
        from lovia_mcp import MCPServerStdio

        async def main():
            async with MCPServerStdio(command={PY!r}, args=[{BLOCKS!r}], name="blk").session() as conn:
                result = await conn.call_tool("blocks", {{"unknown": True}})
                first = result.content[0]
                print(first.annotations["audience"], first.meta["example.com/trace"], str(result).splitlines()[0])
                [tool] = conn.tools()
                print(tool.result_renderer(result, None).splitlines()[0])
            print("mcp" in sys.modules)

        asyncio.run(main())
    """)
    proc = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=FRESH_RUN_WAIT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["['user'] t-1 hello", "hello", "False"], proc.stdout
