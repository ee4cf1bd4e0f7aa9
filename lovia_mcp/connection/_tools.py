"""A server's listing as lovia tools, under one config's options.

Pure but for the log: names are made unique and prefixed over the whole
listing (:mod:`.._names`), then filtered, so a tool's visible name never
depends on which other tools a filter keeps; each tool takes the config's
approval, retries, timeout, output cap and renderer, and its hints decide
approval and parallelism (:mod:`..config.annotations`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from lovia.tools import Tool
from lovia_mcp_worker.wire.mcpjson import ToolSpec

from .._names import tool_names
from ..config import annotations as policy
from ..render import normalize_schema

if TYPE_CHECKING:
    from ..config.server import ServerConfig

logger = logging.getLogger("lovia_mcp")

_json_decode = msgspec.json.decode


def build_tools(
    server: ServerConfig,
    prefix: str | None,
    specs: list[ToolSpec],
    make_invoke: Callable[[str], Any],
    renderer: Any,
    *,
    reported: set[str],
    server_name: str,
    withheld: frozenset[str] = frozenset(),
) -> tuple[list[Tool], dict[str, str]]:
    """The tools, and each visible name's raw name; ``reported`` holds the duplicates already warned of.

    ``withheld`` raw names (quarantined by the lock) are left out after naming, as a filter is.
    """
    # An empty include list means "no filter", as in lovia's plugin.
    include = set(server.include_tools) if server.include_tools else None
    exclude = set(server.exclude_tools or ())
    # Named over the whole listing, before filtering: a tool's visible
    # name must not change when a filter keeps or drops another tool.
    visible = tool_names(prefix, [spec.name for spec in specs])
    trusted = server.trust_annotations
    tools: list[Tool] = []
    raw_names: dict[str, str] = {}
    for spec, name in zip(specs, visible):
        if name is None:
            # lovia fails every run on two tools of one name, and a call
            # names its tool, so a second listing was unreachable anyway.
            if spec.name not in reported:
                reported.add(spec.name)
                logger.warning(
                    "%s: the server lists the tool %r more than once; the first listing is used",
                    server_name,
                    spec.name,
                )
            continue
        if (include is not None and spec.name not in include) or spec.name in exclude or spec.name in withheld:
            continue
        try:
            schema = _json_decode(spec.input_schema)
        except msgspec.DecodeError:
            schema = None
        raw_names[name] = spec.name
        hints = spec.annotations
        tools.append(
            policy.MCPTool(
                name=name,
                description=spec.description or "",
                parameters=normalize_schema(schema),
                invoke=make_invoke(spec.name),
                needs_approval=policy.approval(server.needs_approval, hints, trusted=trusted),
                retries=server.retries,
                timeout=server.timeout,
                max_output_chars=server.max_output_chars,
                result_renderer=renderer,
                parallel=policy.parallel(server.parallel, hints, trusted=trusted),
                annotations=hints,
                meta=policy.meta_object(spec.meta),
                raw_name=spec.name,
            )
        )
    return tools, raw_names


__all__ = ["build_tools"]
