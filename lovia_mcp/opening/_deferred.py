"""Deferred tools: the ``search_mcp_tools`` / ``call_mcp_tool`` pair and the
system-prompt section that names the deferred tools.

Copied from lovia 0.9.119's ``lovia/plugins/mcp.py``
(``_deferred_instructions``, ``_make_search_tool``, ``_make_call_tool``),
renamed without the underscore.
They are copied rather than imported because they are private to lovia: any
0.9.x release may rename or change them, and lovia-mcp must not break when
it does. Besides the names, the only edits are four ``# type: ignore``
comments (lovia ships no type information): the code, and so every
model-visible string (descriptions, parameter schemas, instructions, error
messages), is lovia's byte for byte, which ``tests/plugin/test_deferred.py`` checks
against the installed lovia.

Caveats: a later lovia may change its own copy (wording, scoring); this one
then differs until it is updated by hand. ``run_tool``,
``render_tool_result`` and ``truncate_tool_output`` are public names of the
public module ``lovia.tools.base`` (which ``lovia.tools`` documents as home
of the tool infrastructure) but are not re-exported by ``lovia.tools``.
"""

from __future__ import annotations

import difflib
import json
from typing import Annotated, Any

from lovia.exceptions import ToolError
from lovia.run_context import RunContext
from lovia.tools import Tool, tool
from lovia.tools.base import render_tool_result, run_tool, truncate_tool_output
from pydantic import Field


def deferred_instructions(by_server: list[tuple[str | None, list[str]]]) -> str:
    """System-prompt fragment: name every deferred tool, and nothing more.

    Names alone are enough for the model to know a capability exists (and to
    search for the exact one); the costly part — descriptions and parameter
    schemas — stays behind ``search_mcp_tools``.
    """
    lines = [
        "## Deferred MCP tools",
        "The MCP tools listed below exist but are not in your tool list. To "
        "use one: look it up with search_mcp_tools (keywords or its exact "
        "name) to get its description and parameters schema, then invoke it "
        "with call_mcp_tool. Search before concluding a capability is "
        "missing.",
    ]
    for prefix, names in by_server:
        label = prefix or "unnamed server"
        # Sorted: servers may list tools in varying order across runs, and an
        # unstable fragment would churn the provider's prompt cache for nothing.
        lines.append(f"- {label} ({len(names)} tools): {', '.join(sorted(names))}")
    return "\n".join(lines)


def make_search_tool(catalog: dict[str, Tool]) -> Tool:
    @tool(  # type: ignore[untyped-decorator]  # lovia ships no type information
        name="search_mcp_tools",
        description=(
            "Find deferred MCP tools and return their full definitions "
            "(name, description, parameters JSON schema).\n"
            "- Matches keywords against tool names and descriptions; an "
            "exact tool name ranks first.\n"
            "- Always fetch a tool's definition here before invoking it "
            "with call_mcp_tool, so the arguments match its schema."
        ),
    )
    async def search_mcp_tools(
        query: Annotated[
            str,
            Field(
                min_length=1,
                description="Keywords (or an exact tool name) to search for.",
            ),
        ],
        max_results: Annotated[
            int,
            Field(default=5, ge=1, le=20, description="Maximum matches returned."),
        ] = 5,
    ) -> str:
        tokens = query.lower().split()
        scored: list[tuple[int, str, Tool]] = []
        for name, target in catalog.items():
            name_l, desc_l = name.lower(), (target.description or "").lower()
            score = 0
            for tok in tokens:
                if tok == name_l:
                    score += 3
                elif tok in name_l:
                    score += 2
                if tok in desc_l:
                    score += 1
            if score:
                scored.append((-score, name, target))
        scored.sort(key=lambda item: (item[0], item[1]))
        if not scored:
            return (
                f"No deferred MCP tool matched {query!r} ({len(catalog)} "
                "available — the full name list is in your instructions; "
                "try other keywords)."
            )
        shown = scored[:max_results]
        text = json.dumps(
            [
                {
                    "name": name,
                    "description": target.description,
                    "parameters": target.parameters,
                }
                for _, name, target in shown
            ],
            ensure_ascii=False,
        )
        if len(scored) > len(shown):
            text += f"\n({len(scored) - len(shown)} more matches not shown; refine the query or raise max_results.)"
        return text

    return search_mcp_tools


def make_call_tool(catalog: dict[str, Tool]) -> Tool:
    def _needs(args: dict[str, Any], ctx: RunContext[Any]) -> bool:
        target = catalog.get(str(args.get("tool", "")))
        if target is None:
            return False  # the call fails with unknown-tool before running
        # Approval predicates see *raw* args — a model may send a non-object
        # ``arguments``. Judge that as {} rather than crash: the call itself
        # still fails argument validation with a correctable error.
        raw = args.get("arguments")
        return target.requires_approval(dict(raw) if isinstance(raw, dict) else {}, ctx)  # type: ignore[no-any-return]  # lovia ships no type information

    @tool(  # type: ignore[untyped-decorator]  # lovia ships no type information
        name="call_mcp_tool",
        description=(
            "Invoke a deferred MCP tool by its exact name.\n"
            "- arguments must match the parameters schema that "
            "search_mcp_tools returned for the tool.\n"
            "- Only deferred MCP tools are reachable here; regular tools "
            "are called directly."
        ),
        needs_approval=_needs,
    )
    async def call_mcp_tool(
        ctx: RunContext[Any],
        tool: Annotated[str, "Exact tool name, as returned by search_mcp_tools."],
        arguments: Annotated[
            dict[str, Any] | None,
            Field(
                default=None,
                description="Arguments matching the tool's parameters schema.",
            ),
        ] = None,
    ) -> str:
        target = catalog.get(tool)
        if target is None:
            near = difflib.get_close_matches(tool, list(catalog), n=3, cutoff=0.4)
            raise ToolError(
                f"unknown deferred MCP tool: {tool!r}",
                hint=(f"Did you mean: {', '.join(near)}?" if near else "Use search_mcp_tools to discover tools."),
                tool_name="call_mcp_tool",
            )
        # Full delegation: run_tool honors the underlying tool's retries and
        # timeout; rendering + truncation below honor its renderer and output
        # cap, so a deferred tool behaves like its exposed self. (Approval is
        # the runner's job and is delegated via ``_needs``.) The agent-level
        # default renderer is passed for exact parity with the runner's own
        # render call. One deliberate difference: the runner then also caps
        # this tool's (string) result by the agent's max_tool_output_chars, so
        # a deferred result is bounded by min(server cap, agent cap) — never
        # looser than either.
        raw = await run_tool(target, dict(arguments or {}), ctx)
        rendered = await render_tool_result(target, raw, ctx, default=getattr(ctx.agent, "tool_result_renderer", None))
        if target.max_output_chars is not None:
            rendered = truncate_tool_output(rendered, target.max_output_chars)
        return rendered  # type: ignore[no-any-return]  # lovia ships no type information

    return call_mcp_tool


__all__ = ["deferred_instructions", "make_call_tool", "make_search_tool"]
