"""The ``lovia-mcp`` command's tables: a server's tools, and ``check``'s one row per server.

Every cell is one line of what a server chose (names, parameters,
descriptions, errors), escaped by :func:`._terminal.terminal_line` before
it is measured, so the columns stay aligned and the terminal is never driven.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..lock.pins import Drift
from ._terminal import terminal_json, terminal_line

# Narrowest description column before the table falls back to one block per tool.
MIN_DESCRIPTION_WIDTH: Final = 24
# Widest parameter column; longer parameter lines wrap.
MAX_PARAMETER_WIDTH: Final = 40
# Narrowest error column in the check table before it stops being cut.
MIN_ERROR_WIDTH: Final = 20


def _type_label(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "$ref" in schema and isinstance(schema["$ref"], str):
        return schema["$ref"].rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return "|".join(dict.fromkeys(_type_label(o) for o in options))
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array":
        return f"{_type_label(schema.get('items'))}[]"
    return str(kind) if isinstance(kind, str) else "any"


def parameter_lines(schema: dict[str, Any]) -> list[str]:
    """``name: type``, ``name?: type = default`` for each top-level property."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return []
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    lines = []
    for name, prop in props.items():
        line = f"{name}{'' if name in required else '?'}: {_type_label(prop)}"
        if isinstance(prop, dict) and "default" in prop:
            line += f" = {terminal_json(prop['default'], indent=None)}"
        lines.append(terminal_line(line))
    return lines


def tools_table(tools: Sequence[Any], width: int) -> str:
    """A table of NAME / PARAMETERS / DESCRIPTION, wrapped to ``width`` columns."""
    rows = []
    for t in tools:
        params = parameter_lines(t.parameters) or ["-"]
        description = terminal_line(" ".join((t.description or "").split())) or "-"
        rows.append((terminal_line(t.name), params, description))
    name_w = max(len("NAME"), *(len(r[0]) for r in rows))
    param_w = min(MAX_PARAMETER_WIDTH, max(len("PARAMETERS"), *(len(p) for r in rows for p in r[1])))
    desc_w = width - name_w - param_w - 4
    if desc_w < MIN_DESCRIPTION_WIDTH:
        # Too narrow for columns: one block per tool.
        blocks = []
        for name, params, description in rows:
            block = [name]
            block += textwrap.wrap(
                description, max(20, width - 4), initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
            )
            block += [f"    {p}" for p in params if p != "-"]
            blocks.append("\n".join(block))
        return "\n\n".join(blocks)
    lines = [f"{'NAME':<{name_w}}  {'PARAMETERS':<{param_w}}  DESCRIPTION"]
    for name, params, description in rows:
        left = [name]
        mid = [piece for p in params for piece in (textwrap.wrap(p, param_w, subsequent_indent="  ") or [p])]
        right = textwrap.wrap(description, desc_w, break_on_hyphens=False) or [""]
        for i in range(max(len(left), len(mid), len(right))):
            cells = (
                left[i] if i < len(left) else "",
                mid[i] if i < len(mid) else "",
                right[i] if i < len(right) else "",
            )
            lines.append(f"{cells[0]:<{name_w}}  {cells[1]:<{param_w}}  {cells[2]}".rstrip())
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class CheckRow:
    """One server's line in ``lovia-mcp check``."""

    name: str
    ok: bool
    tools: int | None
    open_seconds: float
    error: str | None = None
    # A failed row's status when it is not "failed": "drift", tools that differ from the lock.
    status: str | None = None
    drift: tuple[Drift, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": "ok" if self.ok else self.status or "failed",
            "tools": self.tools,
            "open_seconds": round(self.open_seconds, 3),
            "error": self.error,
            **({"drift": [_drift_json(d) for d in self.drift]} if self.drift else {}),
        }


def _drift_json(drift: Drift) -> dict[str, Any]:
    if drift.old is None:
        return {"tool": drift.name, "reason": drift.reason(), "new": drift.new}
    return {
        "tool": drift.name,
        "reason": drift.reason(),
        "fields": {f: {"old": drift.old.get(f), "new": drift.new.get(f)} for f in drift.fields},
    }


def drift_lines(row: CheckRow) -> list[str]:
    """What changed in each of a row's drifted tools: old against new, field by field."""
    lines: list[str] = []
    for drift in row.drift:
        lines.append(f"{row.name}: tool {drift.name!r}: {drift.reason()}")
        lines.extend(drift.lines())
    return lines


def _error_cell(row: CheckRow) -> str:
    if not row.error:
        return ""
    first = row.error.splitlines()[0]
    # The row already names the server.
    lead = f"MCP server {row.name!r} failed: "
    return first[len(lead) :] if first.startswith(lead) else first


def check_table(rows: Sequence[CheckRow], width: int) -> str:
    """NAME / STATUS / TOOLS / OPEN / ERROR; the error's first line, cut to ``width``."""
    cells = [
        (
            terminal_line(r.name),
            "ok" if r.ok else r.status or "failed",
            "-" if r.tools is None else str(r.tools),
            f"{r.open_seconds:.2f} s",
            terminal_line(_error_cell(r)),
        )
        for r in rows
    ]
    head = ("NAME", "STATUS", "TOOLS", "OPEN", "ERROR")
    widths = [max(len(head[i]), *(len(c[i]) for c in cells)) for i in range(4)]
    room = max(MIN_ERROR_WIDTH, width - sum(widths) - 2 * len(widths))
    lines = []
    for row in (head, *cells):
        error = row[4] if len(row[4]) <= room else row[4][: room - 1] + "…"
        lines.append(
            "  ".join(
                [
                    row[0].ljust(widths[0]),
                    row[1].ljust(widths[1]),
                    row[2].rjust(widths[2]),
                    row[3].rjust(widths[3]),
                    error,
                ]
            ).rstrip()
        )
    return "\n".join(lines)


__all__ = ["CheckRow", "check_table", "drift_lines", "parameter_lines", "tools_table"]
