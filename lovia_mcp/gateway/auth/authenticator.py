"""The contract every authentication scheme keeps: request headers in, an identity or a refusal out.

The gateway asks its :class:`Authenticator` once per request (every route
but ``/healthz`` and ``/readyz``) and learns either who the client is (an
:class:`Identity`: the principal the access rules, shares, per-principal
servers and the audit log speak of, and what its sessions are bound to) or
why not (a :class:`Refusal`: the HTTP status, what happened and a hint,
rendered by the gateway as a JSON-RPC error with the scheme's
``WWW-Authenticate`` challenge). Nothing else in the gateway knows which
scheme is in use.

Each scheme is one module beside this one: ``anonymous`` (no credentials:
loopback only), ``tokens`` (the token file), ``oauth`` (an OAuth 2.1
resource server); ``registry`` picks one from the command's options.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Protocol

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

# The JSON-RPC error code of an authentication refusal (the
# implementation-defined band; the SDK's own codes are -32000 and -32001).
AUTH_REFUSED: Final = -32010
# RFC 6750's error codes, sent in the WWW-Authenticate challenge.
INVALID_REQUEST: Final = "invalid_request"
INVALID_TOKEN: Final = "invalid_token"
INSUFFICIENT_SCOPE: Final = "insufficient_scope"

Headers = Iterable[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Identity:
    """Who a request is: its ``principal``, and the ``owner`` its sessions are bound to.

    ``owner`` is stricter than the principal where the scheme can tell more
    (a token file's line: a session answers only to the token that opened
    it; an OAuth token's client and subject: a session survives the token's
    refresh); ``None`` binds nothing (no credentials at all).
    """

    principal: str
    owner: str | None = None
    scopes: frozenset[str] = field(default=frozenset())

    @cached_property
    def user(self) -> AuthenticatedUser | None:
        """The SDK's user for the request's scope: its session manager binds a session to it (``owner`` alone,
        never a token)."""
        if self.owner is None:
            return None
        return AuthenticatedUser(AccessToken(token=self.owner, client_id=self.owner, scopes=sorted(self.scopes)))


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """Why a request may not pass: HTTP ``status`` (401: who you are is unknown; 403: known, not allowed;
    503: the scheme cannot tell now), what happened, what to do, and RFC 6750's ``error`` code for the
    challenge (``None`` when no credentials came at all, or no challenge fits)."""

    status: int
    message: str
    hint: str
    error: str | None = INVALID_TOKEN
    # insufficient_scope: the scopes the request needs, for the challenge.
    scope: str | None = None


class Authenticator(Protocol):
    """One authentication scheme.

    ``principals``: every principal the scheme can name, when it knows them
    in advance (a token file); ``None`` for an open set (OAuth subjects).
    The caps' shares and the start-up check of the access section read it.
    """

    @property
    def principals(self) -> frozenset[str] | None: ...

    @property
    def required(self) -> bool:
        """True if a request needs credentials (the gateway may then listen beyond loopback)."""
        ...

    async def authenticate(self, headers: Headers) -> Identity | Refusal:
        """Who the request with these ``headers`` is, or why it may not pass."""
        ...

    def challenge(self, refusal: Refusal) -> str:
        """The ``WWW-Authenticate`` value sent with ``refusal``."""
        ...

    def document(self, path: str) -> Mapping[str, Any] | None:
        """A JSON document the scheme publishes at ``path`` to anyone (OAuth: its RFC 9728 metadata); else ``None``."""
        ...


def bearer_token(headers: Headers, where: str) -> str | Refusal:
    """The token of the request's ``Authorization: Bearer`` header, or the refusal when there is none;
    ``where`` says where a client gets a token, for the hint.

    Only the Bearer scheme carries a token (case-insensitive, RFC 7235): a
    valid token sent under ``Basic`` is no token. The last ``Authorization``
    header counts, as Starlette reads it.
    """
    given: bytes | None = None
    for key, value in headers:
        if key == b"authorization":
            given = value
    if given is None:
        return Refusal(
            status=401,
            message="this gateway needs a bearer token",
            hint=f"Send 'Authorization: Bearer <token>' with {where}.",
            error=None,
        )
    scheme, _, token = given.partition(b" ")
    token = token.strip()
    if scheme.lower() != b"bearer" or not token:
        return Refusal(
            status=401,
            message="the Authorization header holds no bearer token",
            hint=f"Send 'Authorization: Bearer <token>' with {where} (only the Bearer scheme carries a token).",
            error=INVALID_REQUEST,
        )
    return token.decode("latin-1")


def quoted(value: str) -> str:
    """``value`` as an RFC 7235 quoted-string (the characters a header value cannot hold left out)."""
    clean = "".join(c for c in value if c == "\t" or " " <= c <= "~")
    return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


def challenge(params: Mapping[str, str | None], refusal: Refusal) -> str:
    """A ``Bearer`` challenge: the scheme's own ``params``, then the refusal's ``error``, its description and,
    for ``insufficient_scope``, the scopes needed (RFC 6750, section 3)."""
    parts = [f"{k}={quoted(v)}" for k, v in params.items() if v is not None]
    if refusal.error is not None:
        parts += [f"error={quoted(refusal.error)}", f"error_description={quoted(refusal.message)}"]
        if refusal.scope is not None:
            parts.append(f"scope={quoted(refusal.scope)}")
    return "Bearer " + ", ".join(parts)


__all__ = [
    "AUTH_REFUSED",
    "INSUFFICIENT_SCOPE",
    "INVALID_REQUEST",
    "INVALID_TOKEN",
    "Authenticator",
    "Headers",
    "Identity",
    "Refusal",
    "bearer_token",
    "challenge",
    "quoted",
]
