"""Who a request is: its principal, the name access rules, shares, per-principal servers and the audit log speak of.

The authentication scheme (:mod:`.auth`) names a request's principal: the
token file's ``PRINCIPAL TOKEN`` line its bearer token matches, or a claim
of its OAuth access token; without credentials every request is principal
``default``. The gateway leaves it in the request's ASGI scope
(:data:`SCOPE_KEY`) and everything after reads it from there
(:func:`principal_of`), whichever scheme named it.
"""

from __future__ import annotations

import re
from typing import Any, Final

DEFAULT_PRINCIPAL: Final = "default"
# Short enough for a log field and a metrics label; the characters a
# Prometheus label value, a JSON string and a shell all carry unquoted.
PRINCIPAL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
# Where the gateway leaves a request's principal in its ASGI scope.
SCOPE_KEY: Final = "lovia_mcp.principal"


def principal_of(scope: Any) -> str:
    """The principal the gateway's authentication left in a request's ASGI ``scope``; ``""`` (a name no rule
    allows) if it set none."""
    value = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return value if isinstance(value, str) else ""


def share(cap: int, principals: int) -> int:
    """One principal's share of a cap that ``principals`` principals share: the cap split evenly, at least one.

    Each principal may hold at most its share, so that no principal can
    fill a cap the others need. With one principal the share is the cap.
    """
    return max(1, cap // max(1, principals))


__all__ = ["DEFAULT_PRINCIPAL", "PRINCIPAL_NAME", "SCOPE_KEY", "principal_of", "share"]
