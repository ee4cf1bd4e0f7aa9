"""An OAuth 2.1 resource server: JWT access tokens an authorization server issued, checked against its keys.

The MCP authorization spec's resource-server half, for ``lovia-mcp serve
--oauth-issuer URL --oauth-resource URL``. A request's bearer token must
be a JWT that:

- is signed by a key of the issuer's JWK Set (:mod:`.jwks`), with an
  asymmetric algorithm (:data:`ALGORITHMS`: never ``none``, never HMAC,
  whatever the token's header asks; a published key set is public, so an
  HMAC "key" in it, or the public key used as an HMAC secret, would let
  anyone sign);
- names the configured issuer (``iss``) and audience (``aud``: the
  gateway's resource URL unless ``--oauth-audience`` says otherwise), and
  is within its ``exp`` and ``nbf`` (:data:`CLOCK_LEEWAY` for clocks apart);
- carries the principal claim (``sub`` unless ``--oauth-principal-claim``
  names another), a plain principal name, and every scope
  ``--oauth-scope`` requires (``scope``, space-separated, or ``scp``).

A token that fails any of these is a 401 (``error="invalid_token"``), one
without a required scope a 403 (``error="insufficient_scope"``); both carry
``WWW-Authenticate: Bearer resource_metadata="..."`` naming the RFC 9728
metadata the gateway serves at ``/.well-known/oauth-protected-resource``,
where a client finds the authorization server.

A session is bound to the token's client (``client_id`` or ``azp``) and
subject (``sub``), not to the token: it survives the token's refresh, and
no other subject's token reaches it.

:class:`JWTVerifier` is the MCP SDK's ``TokenVerifier`` (a token in, an
``AccessToken`` out), usable with the SDK's own servers too;
:class:`OAuth` is the gateway's :class:`~.authenticator.Authenticator` around it.

Non-goals: opaque tokens (RFC 7662 introspection), the authorization
server's side (the gateway issues nothing), DPoP.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import jwt
from mcp.server.auth.provider import AccessToken

from ..principals import PRINCIPAL_NAME
from .authenticator import INSUFFICIENT_SCOPE, Headers, Identity, Refusal, bearer_token, challenge
from .jwks import JWKS, KeysUnavailable, UnknownKey

# Asymmetric signatures only: the verifying key is public, so a symmetric
# (HMAC) one could sign as well as verify, and "none" signs nothing.
ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
# Clocks of the issuer and the gateway a little apart: a token seconds
# past its exp (or before its nbf) is still taken.
CLOCK_LEEWAY: Final = 30
WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"
DEFAULT_PRINCIPAL_CLAIM: Final = "sub"
_WHERE: Final = "an access token from the authorization server named in /.well-known/oauth-protected-resource"


class TokenRefused(Exception):
    """A token that does not pass, with what to do in ``hint``."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The token's scopes: ``scope`` (RFC 9068, space-separated) or ``scp`` (a list, or a string as ``scope``)."""
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


class JWTVerifier:
    """The MCP SDK's ``TokenVerifier`` for JWT access tokens of one issuer, for one audience."""

    def __init__(self, *, issuer: str, audience: str, keys: JWKS, principal_claim: str = DEFAULT_PRINCIPAL_CLAIM):
        self.issuer = issuer
        self.audience = audience
        self.keys = keys
        self.principal_claim = principal_claim

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's contract: the token's access info, or ``None`` if it does not pass."""
        try:
            return await self.verify(token)
        except (TokenRefused, KeysUnavailable):
            return None

    async def verify(self, token: str) -> AccessToken:
        """The token's access info; :class:`TokenRefused` saying why it does not pass, :class:`KeysUnavailable`
        when the issuer's keys cannot be read."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise TokenRefused(
                "the bearer token is not a JWT",
                f"Send {_WHERE} (a JWT signed by {self.issuer}).",
            ) from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise TokenRefused(
                f"the token's algorithm {str(algorithm)[:20]!r} is not accepted",
                f"The issuer must sign access tokens with an asymmetric algorithm ({', '.join(sorted(ALGORITHMS))}).",
            )
        kid = header.get("kid")
        try:
            key = await self.keys.key(kid if isinstance(kid, str) else None)
        except UnknownKey as exc:
            raise TokenRefused(
                f"the token's signing key is not the issuer's: {exc}",
                f"Send a token {self.issuer} issued (the gateway reads its keys from {self.keys.where}).",
            ) from None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=CLOCK_LEEWAY,
                options={
                    "require": ["exp", "iss", "aud", self.principal_claim],
                    # PyJWT's defaults, written out: each is a rule kept here.
                    "verify_signature": True,
                    "verify_aud": True,
                    "verify_iss": True,
                    "verify_exp": True,
                    "verify_nbf": True,
                },
            )
        except jwt.PyJWTError as exc:
            raise self._refused(exc) from None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", claims.get("azp", ""))),
            scopes=sorted(scopes_of(claims)),
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=str(claims["sub"]) if "sub" in claims else None,
            claims=claims,
        )

    def _refused(self, exc: jwt.PyJWTError) -> TokenRefused:
        fresh = "Get a fresh access token from the authorization server (the client's refresh)."
        if isinstance(exc, jwt.ExpiredSignatureError):
            return TokenRefused("the token has expired", fresh)
        if isinstance(exc, jwt.ImmatureSignatureError):
            return TokenRefused(
                "the token is not valid yet (its nbf or iat is in the future)",
                "Check the clocks of the issuer and the gateway (NTP), or wait a moment and retry.",
            )
        if isinstance(exc, jwt.InvalidAudienceError):
            return TokenRefused(
                f"the token is not for this gateway (its audience is not {self.audience})",
                f"Request the token for this gateway: resource={self.audience} (RFC 8707).",
            )
        if isinstance(exc, jwt.InvalidIssuerError):
            return TokenRefused(
                f"the token was not issued by {self.issuer}",
                f"Send a token from {self.issuer}, the authorization server this gateway trusts.",
            )
        if isinstance(exc, jwt.MissingRequiredClaimError):
            return TokenRefused(
                f"the token has no {exc.claim!r} claim",
                f"Send an access token with exp, iss, aud and {self.principal_claim} (the operator names the "
                "principal's claim with --oauth-principal-claim).",
            )
        if isinstance(exc, jwt.InvalidSignatureError):
            return TokenRefused("the token's signature does not verify", fresh)
        if isinstance(exc, jwt.InvalidKeyError):
            return TokenRefused(
                "the token's algorithm does not fit its signing key",
                "The issuer must sign with the algorithm its key is for (an RSA key: RS256, an EC P-256 key: ES256).",
            )
        return TokenRefused(f"the token does not pass: {exc}", fresh)


class OAuth:
    """The gateway's scheme for OAuth 2.1 access tokens: :class:`JWTVerifier`, the principal claim, the
    required scopes, and the RFC 9728 metadata."""

    required = True
    principals: frozenset[str] | None = None

    def __init__(self, verifier: JWTVerifier, *, resource: str, scopes: Sequence[str] = ()) -> None:
        """``resource``: the gateway's public URL (RFC 9728's resource identifier); ``scopes``: those every
        token must carry."""
        self.verifier = verifier
        self.resource = resource
        self.scopes = tuple(scopes)
        self.metadata_url = metadata_url(resource)
        self._metadata = {
            "resource": resource,
            "authorization_servers": [verifier.issuer],
            "scopes_supported": list(self.scopes),
            "bearer_methods_supported": ["header"],
            "resource_name": "lovia-mcp gateway",
        }

    async def authenticate(self, headers: Headers) -> Identity | Refusal:
        token = bearer_token(headers, _WHERE)
        if isinstance(token, Refusal):
            return token
        try:
            access = await self.verifier.verify(token)
        except TokenRefused as exc:
            return Refusal(status=401, message=str(exc), hint=exc.hint)
        except KeysUnavailable as exc:
            return Refusal(
                status=503,
                message=f"the gateway cannot check tokens now: {exc}",
                hint="Retry shortly; if it lasts, the operator: " + exc.hint,
                error=None,
            )
        claims = access.claims or {}
        claim = self.verifier.principal_claim
        principal = claims.get(claim)
        if not isinstance(principal, str) or not PRINCIPAL_NAME.fullmatch(principal):
            return Refusal(
                status=401,
                message=f"the token's {claim!r} claim is not a principal name",
                hint=f"The operator names a claim holding a plain name (letters, digits, _ . @ -, at most 64) "
                f"with --oauth-principal-claim; {claim!r} holds {str(principal)[:40]!r}.",
            )
        missing = [s for s in self.scopes if s not in access.scopes]
        if missing:
            return Refusal(
                status=403,
                message=f"the token lacks the scope{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                hint=f"Request the token with scope={' '.join(self.scopes)}.",
                error=INSUFFICIENT_SCOPE,
                scope=" ".join(self.scopes),
            )
        # The client and subject, not the token: a session survives a refresh.
        owner = json.dumps([access.client_id, access.subject or principal])
        return Identity(principal, owner=owner, scopes=frozenset(access.scopes))

    def challenge(self, refusal: Refusal) -> str:
        return challenge({"resource_metadata": self.metadata_url}, refusal)

    def document(self, path: str) -> Mapping[str, Any] | None:
        # The plain well-known path and RFC 9728's path-inserted forms (a
        # client of /servers/<name>/mcp may ask there): one resource, one answer.
        if path == WELL_KNOWN or path.startswith(WELL_KNOWN + "/"):
            return self._metadata
        return None


def metadata_url(resource: str) -> str:
    """Where RFC 9728 puts ``resource``'s metadata: the well-known path inserted before the resource's path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", ""))


__all__ = [
    "ALGORITHMS",
    "CLOCK_LEEWAY",
    "DEFAULT_PRINCIPAL_CLAIM",
    "WELL_KNOWN",
    "JWTVerifier",
    "OAuth",
    "TokenRefused",
    "metadata_url",
    "scopes_of",
]
