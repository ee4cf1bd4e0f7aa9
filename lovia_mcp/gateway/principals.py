"""Who a request is: the principal its bearer token names, from the token file's ``PRINCIPAL TOKEN`` lines.

The token file holds one token a line; a line of two fields names its
principal first::

    # alice's agents, and the build bot
    alice  3f9c...e1
    ci     77ab...04
    0d1e...9a

The bare token is principal ``default``, so a file of bare tokens (one a
line) serves every client as one principal. A principal is what access
rules (:mod:`.access`), per-principal servers, the audit log
(:mod:`.audit`) and the optional metrics label speak of. A principal may
hold several tokens (rotation: the old and the new one side by side); a
token names one principal. Sessions stay bound to the token that opened
them, which is stricter than the principal.

Without a token file every request is principal ``default``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lovia.exceptions import UserError

DEFAULT_PRINCIPAL: Final = "default"
# Short enough for a log field and a metrics label; the characters a
# Prometheus label value, a JSON string and a shell all carry unquoted.
PRINCIPAL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
# A token shorter than this can be guessed over the network.
MIN_TOKEN_CHARS: Final = 16
# Where the gateway leaves a request's principal in its ASGI scope.
SCOPE_KEY: Final = "lovia_mcp.principal"


def principal_of(scope: Any) -> str:
    """The principal the gateway's authorisation left in a request's ASGI ``scope``; ``""`` (a name no rule
    allows) if it set none."""
    value = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Credential:
    """One line of the token file: the principal and its bearer token."""

    principal: str
    token: str


def share(cap: int, principals: int) -> int:
    """One principal's share of a cap that ``principals`` principals share: the cap split evenly, at least one.

    Each principal may hold at most its share, so that no principal can
    fill a cap the others need. With one principal the share is the cap.
    """
    return max(1, cap // max(1, principals))


def read_token_file(path: str) -> list[Credential]:
    """The credentials in ``path``: ``PRINCIPAL TOKEN`` or bare ``TOKEN`` lines; blank lines and ``#`` comments skipped."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(
            f"cannot read the token file {path!r}: {reason}",
            hint="Pass a readable file with one token a line (a Kubernetes Secret mounted as a file).",
        ) from None
    out: list[Credential] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        where = f"the token file {path!r}, line {number}"
        if len(fields) > 2:
            raise UserError(
                f"{where} has {len(fields)} fields",
                hint="Write `PRINCIPAL TOKEN` (alice 3f9c...) or a bare TOKEN (principal 'default'), one a line.",
            )
        principal, token = (DEFAULT_PRINCIPAL, fields[0]) if len(fields) == 1 else (fields[0], fields[1])
        if not PRINCIPAL_NAME.fullmatch(principal):
            raise UserError(
                f"{where}: {principal[:80]!r} is not a principal name",
                hint="Name principals with letters, digits and _ . @ - (at most 64 characters), "
                "starting with a letter or digit.",
            )
        if len(token) < MIN_TOKEN_CHARS:
            raise UserError(
                f"{where} holds a token shorter than {MIN_TOKEN_CHARS} characters",
                hint="Use long random tokens: `openssl rand -hex 32`.",
            )
        if token in seen:
            raise UserError(
                f"{where} repeats the token of line {seen[token]}",
                hint="Give each line a token of its own: a token names one principal.",
            )
        seen[token] = number
        out.append(Credential(principal, token))
    if not out:
        raise UserError(
            f"the token file {path!r} holds no token",
            hint='Put one `PRINCIPAL TOKEN` a line in it: `echo "alice $(openssl rand -hex 32)" > tokens`, say.',
        )
    return out


__all__ = [
    "DEFAULT_PRINCIPAL",
    "MIN_TOKEN_CHARS",
    "PRINCIPAL_NAME",
    "SCOPE_KEY",
    "Credential",
    "principal_of",
    "read_token_file",
    "share",
]
