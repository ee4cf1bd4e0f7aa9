"""The one place a worker :class:`~lovia_mcp_worker.wire.messages.Failure` becomes a lovia error.

Every kind becomes an ``MCPError`` carrying the kind, exit code, signal and
stderr tail (the tail's last lines also in the hint), except ``missing_mcp``:
a missing optional package is the user's to fix, a ``UserError``.

A failure may name the setting that changes its outcome (``Failure.option``).
The error is worded in the library's words and keeps the failure, its
``tool_name`` and server name, so another front end words it again in its
own (:func:`reworded`; the command line says ``--open-timeout`` where the
library says ``open_timeout=``).
"""

from __future__ import annotations

from typing import Final

from lovia.exceptions import MCPError, UserError
from lovia_mcp_worker.wire.messages import Failure, Spelling, library_words

# Stderr lines quoted in an error's hint.
HINT_STDERR_LINES: Final = 8


def to_error(failure: Failure, tool_name: str | None, server_name: str, words: Spelling = library_words) -> Exception:
    """The lovia error for ``failure`` of a call of ``tool_name`` (``None``: of the server itself)."""
    hint = failure.hint_text(words) or "Check that the MCP server is running and reachable."
    if failure.stderr_tail:
        lines = [line[:300] for line in failure.stderr_tail[-HINT_STDERR_LINES:]]
        hint += "\n  last stderr lines:\n    " + "\n    ".join(lines)
    # Kept on the error for reworded(); LoviaError sets keyword extras as attributes.
    kept = {"failure": failure, "server_name": server_name}
    if failure.kind == "missing_mcp":
        user_error: Exception = UserError(failure.text(words), hint=failure.hint_text(words), **kept)
        return user_error
    subject = f"MCP tool {tool_name!r}" if tool_name else f"MCP server {server_name!r}"
    error: Exception = MCPError(
        f"{subject} failed: {failure.text(words)}",
        hint=hint,
        tool_name=tool_name,
        kind=failure.kind,
        exit_code=failure.exit_code,
        signal=failure.signal,
        stderr_tail=list(failure.stderr_tail),
        **kept,
    )
    return error


def reworded(error: BaseException, words: Spelling) -> BaseException:
    """``error`` in a front end's ``words`` when it came from a worker failure; otherwise ``error`` itself."""
    failure = getattr(error, "failure", None)
    server_name = getattr(error, "server_name", None)
    if not isinstance(failure, Failure) or not isinstance(server_name, str):
        return error
    return to_error(failure, getattr(error, "tool_name", None), server_name, words)


__all__ = ["HINT_STDERR_LINES", "reworded", "to_error"]
