"""An issuer's signing keys (a JWK Set): read from a file or fetched from a URL, cached, refreshed with care.

Lifecycle: the keys are read on first need (a file at once, at start-up,
so a wrong path stops ``lovia-mcp serve``), then kept. They are read
again when a token names a key id (``kid``) the set does not hold (the
issuer rotated its keys: the new one is picked up) and when they are older
than :data:`MAX_AGE`; never twice within :data:`MIN_REFRESH`, so tokens
with made-up key ids cannot make the gateway hammer the issuer. Without a
JWKS location the URL is the ``jwks_uri`` of the issuer's metadata
(RFC 8414's ``/.well-known/oauth-authorization-server``, then OpenID
Connect's ``/.well-known/openid-configuration``), whose ``issuer`` must be
the one configured.

Caveats: a fetch runs ``urllib`` in a thread (bounded by
:data:`FETCH_TIMEOUT`), with the proxy the environment names. Plain
``http://`` is refused except on loopback: a key slipped into the set over
the network would let its holder sign any token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import jwt
from lovia.exceptions import UserError
from lovia_mcp_worker.wire.hostport import is_loopback

logger = logging.getLogger("lovia_mcp.gateway")

# An issuer answers in milliseconds; a few seconds rides out a slow one
# without holding the requests that wait for the keys for long.
FETCH_TIMEOUT: Final = 5.0
# Between two reads of the set (a failed one included): an unknown key id
# refreshes at most this often, so made-up ids cost the issuer nothing,
# and a key the issuer just published is picked up within this long.
MIN_REFRESH: Final = 30.0
# Keys are read again when this old, so a key the issuer withdrew (one it
# believes compromised) stops being accepted within the hour.
MAX_AGE: Final = 3600.0
# A JWK Set is a few kilobytes; anything much larger is not one.
MAX_BYTES: Final = 1024 * 1024


class KeysUnavailable(Exception):
    """The keys could not be read (the URL unreachable, the file unreadable, not a JWK Set): no token can be
    checked. ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class UnknownKey(Exception):
    """No key of the set has the token's key id, even after a refresh."""


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def checked_url(url: str, what: str, option: str) -> str:
    """``url`` if it may be fetched: ``https://``, or ``http://`` to a loopback host; else a :class:`UserError`."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return url
    raise UserError(
        f"{option}: {what} {url!r} is not an https:// URL",
        hint="Use the issuer's https:// URL (plain http:// only on loopback): keys fetched in the clear "
        "could be replaced on the way, and the replacement would sign any token.",
    )


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be: RFC 8414's path-inserted form, then OpenID Connect's appended one."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return [
        urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-authorization-server" + path, "", "")),
        urlunsplit((parts.scheme, parts.netloc, path + "/.well-known/openid-configuration", "", "")),
    ]


def _fetch_json(url: str) -> Any:
    """GET ``url`` as JSON (blocking: run in a thread)."""
    request = urllib.request.Request(url, headers={"accept": "application/json"})
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as response:  # noqa: S310 - http(s) only, checked
        body = response.read(MAX_BYTES + 1)
    if len(body) > MAX_BYTES:
        raise ValueError(f"the answer is over {MAX_BYTES} bytes")
    return json.loads(body)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    if isinstance(exc, TimeoutError):
        return f"no answer within {FETCH_TIMEOUT:g} s"
    return str(exc) or type(exc).__name__


class JWKS:
    """One issuer's key set, from ``location`` (a file or a URL), or found through ``issuer``'s metadata."""

    def __init__(
        self,
        location: str | None,
        *,
        issuer: str,
        option: str = "--oauth-jwks",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``option`` names the setting in errors; ``clock`` is the monotonic clock the refresh rules read."""
        self.issuer = issuer
        self.option = option
        self._clock = clock
        self._url: str | None = None
        self._file: str | None = None
        if location is None:
            checked_url(issuer, "the issuer", "--oauth-issuer")
        elif is_url(location):
            self._url = checked_url(location, "the JWKS URL", option)
        else:
            self._file = location
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._read_at: float | None = None  # when the set was last read, or tried
        self._loaded_at: float | None = None  # when it was last read successfully
        self._failure: KeysUnavailable | None = None
        self._lock = asyncio.Lock()
        self.reads = 0
        if self._file is not None:
            try:
                self._install(self._read_file(), self._clock())
            except KeysUnavailable as exc:
                raise UserError(str(exc), hint=exc.hint) from None

    @property
    def where(self) -> str:
        return self._url or self._file or f"the metadata of {self.issuer}"

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key ``kid`` names (a token without one: the set's only key); the set refreshed first if it lacks it
        or is old, at most once per :data:`MIN_REFRESH`."""
        now = self._clock()
        if self._needs_read(kid, now):
            await self._refresh()
        found = self._lookup(kid)
        if found is not None:
            return found
        if not self._keys and self._failure is not None:
            raise self._failure
        raise UnknownKey(
            f"no key of the issuer's set has the id {kid!r}" if kid is not None else "the token names no key id"
        )

    def _needs_read(self, kid: str | None, now: float) -> bool:
        stale = self._loaded_at is None or now - self._loaded_at >= MAX_AGE
        if not stale and self._lookup(kid) is not None:
            return False
        return self._read_at is None or now - self._read_at >= MIN_REFRESH

    def _lookup(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid) if kid is not None else None

    async def _refresh(self) -> None:
        reads = self.reads
        async with self._lock:
            if self.reads != reads:
                return  # another request read the set meanwhile
            self.reads += 1
            now = self._clock()
            self._read_at = now
            try:
                data = await asyncio.to_thread(self._read_file) if self._file else await self._fetch()
                self._install(data, now)
            except KeysUnavailable as exc:
                self._failure = exc
                logger.warning("cannot read the issuer's keys", extra={"jwks": self.where, "error": str(exc)})

    def _install(self, data: Any, now: float) -> None:
        try:
            keys = jwt.PyJWKSet.from_dict(data).keys
        except (jwt.PyJWKSetError, jwt.InvalidKeyError, TypeError, AttributeError, KeyError) as exc:
            raise KeysUnavailable(
                f"{self.where} holds no usable JWK Set: {exc}",
                hint=f'Point {self.option} at the issuer\'s JWK Set (a JSON object {{"keys": [...]}}).',
            ) from None
        self._keys = {k.key_id: k for k in keys}
        self._loaded_at = now
        self._failure = None

    def _read_file(self) -> Any:
        assert self._file is not None
        try:
            return json.loads(Path(self._file).expanduser().read_bytes()[: MAX_BYTES + 1])
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise KeysUnavailable(
                f"cannot read the JWK Set file {self._file!r}: {reason}",
                hint=f"Pass {self.option} a readable file holding the issuer's JWK Set, or its https:// URL.",
            ) from None

    async def _fetch(self) -> Any:
        url = self._url or await self._discover()
        try:
            return await asyncio.to_thread(_fetch_json, url)
        except (OSError, ValueError) as exc:
            raise KeysUnavailable(
                f"cannot fetch the issuer's keys from {url}: {_reason(exc)}",
                hint=f"Check that {url} answers from the gateway's network (proxy settings included), "
                f"or pass {self.option} a file holding the JWK Set.",
            ) from None

    async def _discover(self) -> str:
        """The ``jwks_uri`` of the issuer's metadata (remembered once found)."""
        reasons = []
        for url in metadata_urls(self.issuer):
            try:
                meta = await asyncio.to_thread(_fetch_json, url)
            except (OSError, ValueError) as exc:
                reasons.append(f"{url}: {_reason(exc)}")
                continue
            if not isinstance(meta, dict) or meta.get("issuer") != self.issuer:
                got = meta.get("issuer") if isinstance(meta, dict) else None
                raise KeysUnavailable(
                    f"the metadata at {url} is for the issuer {got!r}, not {self.issuer!r}",
                    hint="Pass --oauth-issuer exactly as the issuer writes it in its tokens' iss claim.",
                )
            jwks_uri = meta.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise KeysUnavailable(
                    f"the metadata at {url} names no jwks_uri",
                    hint=f"Pass {self.option} the issuer's JWK Set URL or file.",
                )
            try:
                self._url = checked_url(jwks_uri, "the metadata's jwks_uri", "--oauth-issuer")
            except UserError as exc:
                raise KeysUnavailable(str(exc.args[0]), hint=exc.hint or "") from None
            return self._url
        raise KeysUnavailable(
            f"cannot fetch the issuer's metadata: {'; '.join(reasons)}",
            hint=f"Check that the issuer answers from the gateway's network, or pass {self.option} "
            "the issuer's JWK Set URL or file.",
        )


__all__ = [
    "FETCH_TIMEOUT",
    "JWKS",
    "MAX_AGE",
    "MAX_BYTES",
    "MIN_REFRESH",
    "KeysUnavailable",
    "UnknownKey",
    "checked_url",
    "is_url",
    "metadata_urls",
]
