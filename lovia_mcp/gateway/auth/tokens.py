"""The token file: ``PRINCIPAL TOKEN`` lines, each a bearer token and the principal it names.

The token file holds one token a line; a line of two fields names its
principal first::

    # alice's agents, and the build bot
    alice  3f9c...e1
    ci     77ab...04
    0d1e...9a

The bare token is principal ``default``, so a file of bare tokens (one a
line) serves every client as one principal. A principal may hold several
tokens (rotation: the old and the new one side by side); a token names one
principal. Sessions stay bound to the token (the line) that opened them,
which is stricter than the principal.

A given token is compared with every known one, each in constant time
(``hmac.compare_digest``): neither a match nor its position shows in the
timing.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lovia.exceptions import UserError

from ..principals import DEFAULT_PRINCIPAL, PRINCIPAL_NAME
from .authenticator import Headers, Identity, Refusal, bearer_token, challenge

# A token shorter than this can be guessed over the network.
MIN_TOKEN_CHARS: Final = 16
_CHALLENGE: Final = {"realm": "lovia-mcp"}
_WHERE: Final = "a token from the gateway's --token-file"


@dataclass(frozen=True)
class Credential:
    """One line of the token file: the principal and its bearer token."""

    principal: str
    token: str


class TokenFile:
    """The scheme of a token file's credentials."""

    required = True

    def __init__(self, credentials: list[Credential], *, path: str = "the token file") -> None:
        self.path = path
        self._tokens = [c.token.encode() for c in credentials]
        # Who each line is; its owner (what its sessions are bound to) is
        # the line, never the token.
        self._identities = [Identity(c.principal, owner=f"token-{i + 1}") for i, c in enumerate(credentials)]
        self.principals: frozenset[str] | None = frozenset(c.principal for c in credentials)

    @classmethod
    def read(cls, path: str) -> TokenFile:
        return cls(read_token_file(path), path=path)

    async def authenticate(self, headers: Headers) -> Identity | Refusal:
        return self.check(headers)

    def check(self, headers: Headers) -> Identity | Refusal:
        """:meth:`authenticate`, without the event loop."""
        token = bearer_token(headers, _WHERE)
        if isinstance(token, Refusal):
            return token
        given = token.encode("latin-1")
        match = -1
        # Every token compared, each in constant time: neither the match nor
        # its position shows in the timing.
        for i, known in enumerate(self._tokens):
            if hmac.compare_digest(given, known):
                match = i
        if match < 0:
            return Refusal(
                status=401,
                message="the bearer token is not one of this gateway's",
                hint=f"Send 'Authorization: Bearer <token>' with {_WHERE}.",
            )
        return self._identities[match]

    def challenge(self, refusal: Refusal) -> str:
        return challenge(_CHALLENGE, refusal)

    def document(self, path: str) -> Mapping[str, Any] | None:
        return None


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


__all__ = ["MIN_TOKEN_CHARS", "Credential", "TokenFile", "read_token_file"]
