"""The one place a worker :class:`~lovia_mcp_worker.wire.messages.Failure` becomes a lovia error.

Every kind becomes an ``MCPError`` carrying the kind, exit code, signal and
stderr tail (the tail's last lines also in the hint), except ``missing_mcp``:
a missing optional package is the user's to fix, a ``UserError``.
"""

from __future__ import annotations

from typing import Final

from lovia.exceptions import MCPError, UserError

from lovia_mcp_worker.wire.messages import Failure

# Stderr lines quoted in an error's hint.
HINT_STDERR_LINES: Final = 8


def to_error(failure: Failure, tool_name: str | None, server_name: str) -> Exception:
    """The lovia error for ``failure`` of a call of ``tool_name`` (``None``: of the server itself)."""
    hint = failure.hint or "Check that the MCP server is running and reachable."
    if failure.stderr_tail:
        lines = [line[:300] for line in failure.stderr_tail[-HINT_STDERR_LINES:]]
        hint += "\n  last stderr lines:\n    " + "\n    ".join(lines)
    if failure.kind == "missing_mcp":
        user_error: Exception = UserError(failure.message, hint=failure.hint)
        return user_error
    subject = f"MCP tool {tool_name!r}" if tool_name else f"MCP server {server_name!r}"
    error: Exception = MCPError(
        f"{subject} failed: {failure.message}",
        hint=hint,
        tool_name=tool_name,
        kind=failure.kind,
        exit_code=failure.exit_code,
        signal=failure.signal,
        stderr_tail=list(failure.stderr_tail),
    )
    return error


__all__ = ["HINT_STDERR_LINES", "to_error"]
