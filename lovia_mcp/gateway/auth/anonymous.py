"""No credentials: every request is principal ``default`` (a gateway on loopback without a token file).

``lovia-mcp serve`` refuses to listen beyond loopback with this scheme
(:attr:`Anonymous.required` is false). No session is bound to anyone: any
local client that learns a session id may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..principals import DEFAULT_PRINCIPAL
from .authenticator import Headers, Identity, Refusal

_ANYONE = Identity(DEFAULT_PRINCIPAL)


class Anonymous:
    """The scheme without credentials."""

    principals: frozenset[str] | None = frozenset({DEFAULT_PRINCIPAL})
    required = False

    async def authenticate(self, headers: Headers) -> Identity | Refusal:
        return _ANYONE

    def challenge(self, refusal: Refusal) -> str:  # it refuses nothing; the protocol asks for one
        return "Bearer"

    def document(self, path: str) -> Mapping[str, Any] | None:
        return None


__all__ = ["Anonymous"]
