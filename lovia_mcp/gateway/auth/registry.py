"""The authentication scheme ``lovia-mcp serve``'s options pick: one line per scheme.

- ``--token-file FILE``: :class:`~.tokens.TokenFile`;
- ``--oauth-issuer URL --oauth-resource URL [...]``: :class:`~.oauth.OAuth`;
- neither: :class:`~.anonymous.Anonymous` (loopback only).

The two schemes are exclusive: a gateway trusts one kind of credential.
OAuth's modules are imported only when it is the scheme: PyJWT is about
2 MB of the gateway's memory that a token file or loopback does not use.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Final

from lovia.exceptions import UserError

from .anonymous import Anonymous
from .authenticator import Authenticator
from .tokens import TokenFile

if TYPE_CHECKING:
    from .oauth import OAuth

# Options that mean something only with --oauth-issuer.
_OAUTH_ONLY: Final = ("oauth_resource", "oauth_audience", "oauth_jwks", "oauth_principal_claim", "oauth_scope")


def authenticator_for(ns: argparse.Namespace) -> Authenticator:
    """The scheme the command's options ask for; a :class:`UserError` with a hint for options that do not fit."""
    token_file: str | None = getattr(ns, "token_file", None)
    issuer: str | None = getattr(ns, "oauth_issuer", None)
    if token_file and issuer:
        raise UserError(
            "--token-file and --oauth-issuer both given",
            hint="Pick one: a token file of `PRINCIPAL TOKEN` lines, or access tokens from an OAuth issuer.",
        )
    if issuer:
        return _oauth(ns, issuer)
    stray = [name for name in _OAUTH_ONLY if getattr(ns, name, None)]
    if stray:
        raise UserError(
            f"{', '.join('--' + s.replace('_', '-') for s in stray)} without --oauth-issuer",
            hint="Add --oauth-issuer URL (the authorization server whose tokens the gateway accepts).",
        )
    if token_file:
        return TokenFile.read(token_file)
    return Anonymous()


def _oauth(ns: argparse.Namespace, issuer: str) -> OAuth:
    from .jwks import JWKS, checked_url
    from .oauth import DEFAULT_PRINCIPAL_CLAIM, JWTVerifier, OAuth

    resource: str | None = getattr(ns, "oauth_resource", None)
    if not resource:
        raise UserError(
            "--oauth-issuer needs --oauth-resource",
            hint="Pass --oauth-resource with the gateway's public URL as clients reach it "
            "(https://mcp.example.com): the resource its tokens are issued for.",
        )
    checked_url(resource, "the resource", "--oauth-resource")
    claim: str = getattr(ns, "oauth_principal_claim", None) or DEFAULT_PRINCIPAL_CLAIM
    keys = JWKS(getattr(ns, "oauth_jwks", None), issuer=issuer)
    verifier = JWTVerifier(
        issuer=issuer,
        audience=getattr(ns, "oauth_audience", None) or resource,
        keys=keys,
        principal_claim=claim,
    )
    return OAuth(verifier, resource=resource, scopes=getattr(ns, "oauth_scope", None) or [])


__all__ = ["authenticator_for"]
