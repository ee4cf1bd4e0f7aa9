"""``lovia-mcp serve`` as an OAuth 2.1 resource server, against an issuer made here.

The issuer is this module's: its keys generated here (``cryptography``),
its tokens signed with PyJWT, its JWK Set served on loopback (a small HTTP
server in the test's loop) or written to a file. The units check each rule
a token must pass, the key set's refresh and the options; the process
tests run a real ``lovia-mcp serve --oauth-issuer`` reached by the MCP
SDK's client with bearer tokens.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from _gateway import Serve, raised_within, raw, sdk_client, shared_by_module
from conftest import run
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from helpers import LocalHTTP, bounded
from lovia.exceptions import UserError

from lovia_mcp.gateway.auth.authenticator import AUTH_REFUSED, Identity, Refusal
from lovia_mcp.gateway.auth.jwks import JWKS, MIN_REFRESH, KeysUnavailable
from lovia_mcp.gateway.auth.oauth import JWTVerifier, OAuth, TokenRefused
from lovia_mcp.gateway.auth.registry import authenticator_for

pytestmark = pytest.mark.timeout(120)

ISSUER = "https://issuer.test.example"
RESOURCE = "https://mcp.test.example"
SCOPE = "mcp:tools"
HOUR = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """An authorization server's signing half: keys by id, their JWK Set, tokens signed with them."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []
        self.extra: list[dict[str, Any]] = []  # JWKs published beside the issuer's own (an HMAC one...)
        self.add("rsa-1", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def add(self, kid: str, key: Any) -> None:
        self.keys[kid] = key
        self.published.append(kid)

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in self.published:
            public = self.keys[kid].public_key()
            algorithm = (
                jwt.algorithms.RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else jwt.algorithms.ECAlgorithm
            )
            out.append({**json.loads(algorithm.to_jwk(public)), "kid": kid, "use": "sig"})
        return {"keys": out + self.extra}

    def public_pem(self, kid: str = "rsa-1") -> bytes:
        return bytes(
            self.keys[kid]
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )

    def claims(self, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        base: dict[str, Any] = {
            "iss": ISSUER,
            "aud": RESOURCE,
            "sub": "u-1001",
            "preferred_username": "alice",
            "client_id": "agent-app",
            "scope": f"{SCOPE} profile",
            "iat": now,
            "nbf": now,
            "exp": now + HOUR,
        }
        base.update(changes)
        return {k: v for k, v in base.items() if v is not None}

    def token(self, kid: str = "rsa-1", algorithm: str | None = None, **changes: Any) -> str:
        key = self.keys[kid]
        algorithm = algorithm or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(self.claims(**changes), key, algorithm=algorithm, headers={"kid": kid})


def hmac_token(secret: bytes, kid: str, claims: dict[str, Any]) -> str:
    """A token HMAC-signed with ``secret``, by hand: PyJWT refuses to sign with a PEM key, an attacker does not."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


class Clock:
    """A monotonic clock the test moves (the key set's refresh rules read it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _verifier(keys: JWKS, claim: str = "preferred_username") -> JWTVerifier:
    return JWTVerifier(issuer=ISSUER, audience=RESOURCE, keys=keys, principal_claim=claim)


def _file_keys(issuer: Issuer, folder: Path, clock: Clock | None = None) -> JWKS:
    path = folder / "jwks.json"
    path.write_text(json.dumps(issuer.jwks()))
    return JWKS(str(path), issuer=ISSUER, **({"clock": clock} if clock else {}))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


# --------------------------------------------------------------------------- #
# Units: what a token must be
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_a_valid_token_passes_and_its_principal_is_the_configured_claim(tmp_path: Path) -> None:
    issuer = Issuer()
    auth = OAuth(_verifier(_file_keys(issuer, tmp_path)), resource=RESOURCE, scopes=[SCOPE])
    got = run(auth.authenticate(_bearer(issuer.token())))
    assert isinstance(got, Identity), got
    assert got.principal == "alice" and got.scopes == {SCOPE, "profile"}
    # The default claim is sub.
    by_sub = OAuth(_verifier(_file_keys(issuer, tmp_path), claim="sub"), resource=RESOURCE)
    got = run(by_sub.authenticate(_bearer(issuer.token())))
    assert isinstance(got, Identity) and got.principal == "u-1001", got


@pytest.mark.unit
def test_the_verifier_is_the_sdks_token_verifier_and_gives_none_for_a_refused_token(tmp_path: Path) -> None:
    from mcp.server.auth.provider import TokenVerifier

    issuer = Issuer()
    verifier: TokenVerifier = _verifier(_file_keys(issuer, tmp_path))
    access = run(verifier.verify_token(issuer.token()))
    assert access is not None and access.subject == "u-1001" and access.client_id == "agent-app"
    assert access.resource == RESOURCE and SCOPE in access.scopes
    assert run(verifier.verify_token(issuer.token(aud="https://elsewhere.example"))) is None


@pytest.mark.unit
@dataclass(frozen=True)
class FromNow:
    """A time claim this many seconds from when the test runs (not from collection, minutes earlier in a full run)."""

    seconds: int


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"exp": FromNow(-120)}, "the token has expired"),
        ({"nbf": FromNow(120)}, "not valid yet"),
        ({"aud": "https://other-gateway.example"}, "not for this gateway"),
        ({"aud": None}, "no 'aud' claim"),
        ({"iss": "https://impostor.example"}, f"not issued by {ISSUER}"),
        ({"exp": None}, "no 'exp' claim"),
        ({"preferred_username": None}, "no 'preferred_username' claim"),
    ],
)
def test_a_token_outside_its_times_or_for_another_audience_or_issuer_is_refused(
    tmp_path: Path, changes: dict[str, Any], reason: str
) -> None:
    issuer = Issuer()
    verifier = _verifier(_file_keys(issuer, tmp_path))
    claims = {k: int(time.time()) + v.seconds if isinstance(v, FromNow) else v for k, v in changes.items()}
    with pytest.raises(TokenRefused) as caught:
        run(verifier.verify(issuer.token(**claims)))
    assert reason in str(caught.value) and caught.value.hint, caught.value


@pytest.mark.unit
def test_a_token_a_few_seconds_past_its_expiry_passes_within_the_clock_leeway(tmp_path: Path) -> None:
    issuer = Issuer()
    verifier = _verifier(_file_keys(issuer, tmp_path))
    assert run(verifier.verify(issuer.token(exp=int(time.time()) - 5))).subject == "u-1001"


@pytest.mark.unit
def test_an_unsigned_alg_none_token_is_refused(tmp_path: Path) -> None:
    issuer = Issuer()
    verifier = _verifier(_file_keys(issuer, tmp_path))
    unsigned = jwt.encode(issuer.claims(), None, algorithm="none", headers={"kid": "rsa-1"})
    with pytest.raises(TokenRefused) as caught:
        run(verifier.verify(unsigned))
    assert "algorithm 'none' is not accepted" in str(caught.value)


@pytest.mark.unit
def test_an_hmac_token_signed_with_the_issuers_public_key_is_refused(tmp_path: Path) -> None:
    # The classic RS/HS confusion: the public key (anyone has it) as an HMAC secret.
    issuer = Issuer()
    verifier = _verifier(_file_keys(issuer, tmp_path))
    forged = hmac_token(issuer.public_pem(), "rsa-1", issuer.claims(preferred_username="mallory"))
    with pytest.raises(TokenRefused) as caught:
        run(verifier.verify(forged))
    assert "algorithm 'HS256' is not accepted" in str(caught.value)


@pytest.mark.unit
def test_an_hmac_token_signed_with_a_secret_the_key_set_publishes_is_refused(tmp_path: Path) -> None:
    # A key set is public: an HMAC key in it (a misconfigured issuer) is a
    # secret everyone holds. PyJWT loads it as an HS256 key; only the
    # gateway's algorithm list stands between it and a forged token.
    issuer = Issuer()
    secret = b"published-for-all-to-see-0123456789"
    issuer.extra.append({"kty": "oct", "kid": "shared", "k": _b64(secret)})
    verifier = _verifier(_file_keys(issuer, tmp_path))
    forged = hmac_token(secret, "shared", issuer.claims(preferred_username="mallory"))
    assert jwt.decode(forged, secret, algorithms=["HS256"], audience=RESOURCE)["preferred_username"] == "mallory"
    with pytest.raises(TokenRefused) as caught:
        run(verifier.verify(forged))
    assert "algorithm 'HS256' is not accepted" in str(caught.value)


@pytest.mark.unit
def test_a_token_signed_by_another_key_with_the_issuers_key_id_is_refused(tmp_path: Path) -> None:
    issuer, impostor = Issuer(), Issuer()
    verifier = _verifier(_file_keys(issuer, tmp_path))
    with pytest.raises(TokenRefused) as caught:
        run(verifier.verify(impostor.token()))
    assert "signature does not verify" in str(caught.value)


@pytest.mark.unit
@pytest.mark.parametrize("value", ["alice|admin", "alice\nforged log line", "", "x" * 65])
def test_a_principal_claim_that_is_not_a_plain_principal_name_is_refused(tmp_path: Path, value: str) -> None:
    issuer = Issuer()
    auth = OAuth(_verifier(_file_keys(issuer, tmp_path)), resource=RESOURCE)
    got = run(auth.authenticate(_bearer(issuer.token(preferred_username=value))))
    assert isinstance(got, Refusal) and got.status == 401 and "--oauth-principal-claim" in got.hint, got


@pytest.mark.unit
def test_a_token_without_a_required_scope_gets_403_insufficient_scope(tmp_path: Path) -> None:
    issuer = Issuer()
    auth = OAuth(_verifier(_file_keys(issuer, tmp_path)), resource=RESOURCE, scopes=[SCOPE])
    got = run(auth.authenticate(_bearer(issuer.token(scope="profile"))))
    assert isinstance(got, Refusal) and (got.status, got.error, got.scope) == (403, "insufficient_scope", SCOPE)
    challenge = auth.challenge(got)
    assert 'error="insufficient_scope"' in challenge and f'scope="{SCOPE}"' in challenge, challenge
    # scp (a list) counts as scope does.
    assert isinstance(run(auth.authenticate(_bearer(issuer.token(scope=None, scp=[SCOPE])))), Identity)


# --------------------------------------------------------------------------- #
# Units: the key set, from a URL
# --------------------------------------------------------------------------- #
class IssuerHTTP(LocalHTTP):
    """The issuer on loopback: its RFC 8414 metadata and its JWK Set at /jwks (any other path)."""

    def __init__(self, issuer: Issuer, claimed: str | None = None) -> None:
        """``claimed``: the issuer the metadata names (default: this server's own URL)."""
        super().__init__(answer=self._answer)
        self.issuer = issuer
        self.claimed = claimed

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _answer(self, lines: list[str]) -> str:
        if lines[0].split(" ")[1] == "/.well-known/oauth-authorization-server":
            return json.dumps({"issuer": self.claimed or self.url, "jwks_uri": f"{self.url}/jwks"})
        return json.dumps(self.issuer.jwks())


@pytest.mark.unit
def test_a_new_key_in_the_fetched_set_is_picked_up_on_its_first_token_and_made_up_ids_fetch_at_most_once_a_period() -> (
    None
):
    issuer = Issuer()
    clock = Clock()

    async def main() -> None:
        async with IssuerHTTP(issuer) as web:
            keys = JWKS(f"http://127.0.0.1:{web.port}/jwks", issuer=ISSUER, clock=clock)
            verifier = _verifier(keys)
            assert (await verifier.verify(issuer.token())).subject == "u-1001"
            assert keys.reads == 1
            # Known key: no fetch per token.
            await verifier.verify(issuer.token())
            assert keys.reads == 1
            # Rotation: the issuer publishes a new key and signs with it.
            issuer.add("ec-2", ec.generate_private_key(ec.SECP256R1()))
            clock.now += MIN_REFRESH
            assert (await verifier.verify(issuer.token("ec-2"))).subject == "u-1001"
            assert keys.reads == 2
            # Tokens naming made-up key ids: refused, and the issuer asked at
            # most once per MIN_REFRESH, however many come.
            for i in range(20):
                forged = jwt.encode(issuer.claims(), issuer.keys["rsa-1"], algorithm="RS256", headers={"kid": f"x{i}"})
                with pytest.raises(TokenRefused, match="not the issuer's"):
                    await verifier.verify(forged)
            assert keys.reads == 2, "made-up key ids within MIN_REFRESH of the last read fetched again"
            clock.now += MIN_REFRESH
            with pytest.raises(TokenRefused, match="no key of the issuer's set has the id 'late'"):
                await verifier.verify(
                    jwt.encode(issuer.claims(), issuer.keys["rsa-1"], algorithm="RS256", headers={"kid": "late"})
                )
            assert keys.reads == 3  # an unknown id after the period: asked again, still unknown
            assert len(web.requests) == 3

    bounded(main())


@pytest.mark.unit
def test_the_key_set_is_found_through_the_issuers_metadata_when_no_location_is_given() -> None:
    issuer = Issuer()

    async def main() -> None:
        async with IssuerHTTP(issuer) as web:
            keys = JWKS(None, issuer=web.url)
            verifier = JWTVerifier(issuer=web.url, audience=RESOURCE, keys=keys)
            assert (await verifier.verify(issuer.token(iss=web.url))).subject == "u-1001"
            assert web.paths == ["/.well-known/oauth-authorization-server", "/jwks"]

    bounded(main())


@pytest.mark.unit
def test_metadata_naming_another_issuer_is_refused_and_its_keys_never_fetched() -> None:
    issuer = Issuer()

    async def main() -> None:
        async with IssuerHTTP(issuer, claimed="https://someone-else.example") as web:
            auth = OAuth(
                JWTVerifier(issuer=web.url, audience=RESOURCE, keys=JWKS(None, issuer=web.url)), resource=RESOURCE
            )
            got = await auth.authenticate(_bearer(issuer.token(iss=web.url)))
            assert isinstance(got, Refusal) and got.status == 503, got
            assert "is for the issuer 'https://someone-else.example'" in got.message, got
            assert web.paths == ["/.well-known/oauth-authorization-server"]

    bounded(main())


@pytest.mark.unit
def test_an_unreachable_key_set_url_is_a_clear_503_naming_the_url(tmp_path: Path) -> None:
    issuer = Issuer()
    url = f"http://127.0.0.1:{_closed_port()}/jwks"
    auth = OAuth(_verifier(JWKS(url, issuer=ISSUER)), resource=RESOURCE)
    got = run(auth.authenticate(_bearer(issuer.token())))
    assert isinstance(got, Refusal) and got.status == 503, got
    assert f"cannot fetch the issuer's keys from {url}" in got.message and "refused" in got.message.lower(), got
    assert "--oauth-jwks" in got.hint
    with pytest.raises(KeysUnavailable):
        run(_verifier(JWKS(url, issuer=ISSUER)).verify(issuer.token()))


@pytest.mark.unit
def test_a_rotated_key_file_is_read_again_for_an_unknown_key_id(tmp_path: Path) -> None:
    issuer = Issuer()
    clock = Clock()
    keys = _file_keys(issuer, tmp_path, clock)
    verifier = _verifier(keys)
    issuer.add("rsa-2", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    (tmp_path / "jwks.json").write_text(json.dumps(issuer.jwks()))
    assert run(verifier.verify(issuer.token("rsa-2"))).subject == "u-1001"


# --------------------------------------------------------------------------- #
# Units: the options
# --------------------------------------------------------------------------- #
def _ns(**options: Any) -> argparse.Namespace:
    return argparse.Namespace(
        **{
            "token_file": None,
            "oauth_issuer": None,
            "oauth_resource": None,
            "oauth_audience": None,
            "oauth_jwks": None,
            "oauth_principal_claim": None,
            "oauth_scope": None,
            **options,
        }
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"oauth_issuer": ISSUER}, "--oauth-issuer needs --oauth-resource"),
        ({"oauth_issuer": ISSUER, "oauth_resource": RESOURCE, "token_file": "tokens"}, "both given"),
        ({"oauth_resource": RESOURCE}, "--oauth-resource without --oauth-issuer"),
        (
            {"oauth_issuer": ISSUER, "oauth_resource": RESOURCE, "oauth_jwks": "http://keys.example/jwks"},
            "is not an https:// URL",
        ),
        ({"oauth_issuer": "http://issuer.example", "oauth_resource": RESOURCE}, "is not an https:// URL"),
        ({"oauth_issuer": ISSUER, "oauth_resource": RESOURCE, "oauth_jwks": "/nonexistent/jwks.json"}, "cannot read"),
    ],
)
def test_oauth_options_that_do_not_fit_stop_serve_with_a_hint(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(UserError) as caught:
        authenticator_for(_ns(**options))
    assert expected in str(caught.value.args[0]) and caught.value.hint, caught.value


@pytest.mark.unit
def test_the_key_set_may_be_fetched_over_plain_http_only_from_loopback() -> None:
    assert isinstance(
        authenticator_for(_ns(oauth_issuer=ISSUER, oauth_resource=RESOURCE, oauth_jwks="http://127.0.0.1:9/jwks")),
        OAuth,
    )


# --------------------------------------------------------------------------- #
# A real gateway
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, issuer: Issuer) -> Iterator[Serve]:
    folder = tmp_path_factory.mktemp("oauth")
    jwks = folder / "jwks.json"
    jwks.write_text(json.dumps(issuer.jwks()))
    g = Serve(
        folder,
        {"raw": raw(), "ps": raw(session="per-session")},
        "--oauth-issuer",
        ISSUER,
        "--oauth-resource",
        RESOURCE,
        "--oauth-jwks",
        str(jwks),
        "--oauth-principal-claim",
        "preferred_username",
        "--oauth-scope",
        SCOPE,
        "--audit-log",
        str(folder / "audit.log"),
        token=False,
        gateway={"access": {"alice": ["raw", "ps"], "bob": ["ps"]}},
    )
    with shared_by_module(g):
        yield g


def _post(g: Serve, token: str | None, path: str = "/mcp", **headers: str) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    auth = {} if token is None else {"authorization": f"Bearer {token}"}
    return httpx.post(
        g.base + path,
        json=body,
        headers={"accept": "application/json, text/event-stream", **auth, **headers},
        timeout=30,
    )


def test_the_gateway_publishes_its_protected_resource_metadata_without_a_token(gateway: Serve) -> None:
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/servers/raw/mcp"):
        answer = httpx.get(gateway.base + path, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "resource": RESOURCE,
            "authorization_servers": [ISSUER],
            "scopes_supported": [SCOPE],
            "bearer_methods_supported": ["header"],
            "resource_name": "lovia-mcp gateway",
        }


def test_a_request_without_a_token_gets_401_naming_the_metadata_and_a_json_rpc_error(gateway: Serve) -> None:
    answer = _post(gateway, None)
    assert answer.status_code == 401
    # No credentials at all: the challenge names the metadata and no error (RFC 6750 3.1).
    challenge = answer.headers["www-authenticate"]
    assert challenge == f'Bearer resource_metadata="{RESOURCE}/.well-known/oauth-protected-resource"', challenge
    error = answer.json()
    assert error["jsonrpc"] == "2.0" and error["id"] is None and error["error"]["code"] == AUTH_REFUSED, error
    assert "hint" in error["error"]["data"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [({"exp": int(time.time()) - 600}, "the token has expired"), ({"aud": "https://x.example"}, "not for this")],
)
def test_a_refused_token_gets_401_invalid_token_with_its_reason(
    gateway: Serve, issuer: Issuer, changes: dict[str, Any], reason: str
) -> None:
    answer = _post(gateway, issuer.token(**changes))
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith('Bearer resource_metadata="') and 'error="invalid_token"' in challenge, challenge
    assert reason in answer.json()["error"]["message"], answer.text


def test_a_token_without_the_required_scope_gets_403_with_the_scope_in_its_challenge(
    gateway: Serve, issuer: Issuer
) -> None:
    answer = _post(gateway, issuer.token(scope="profile"))
    assert answer.status_code == 403, answer.text
    challenge = answer.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and f'scope="{SCOPE}"' in challenge, challenge
    assert "resource_metadata=" in challenge


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_with_a_valid_token_lists_and_calls_as_the_claims_principal(
    gateway: Serve, issuer: Issuer, mode: str
) -> None:
    async def main() -> tuple[list[str], list[str], str]:
        headers = {"Authorization": f"Bearer {issuer.token()}"}
        async with sdk_client(gateway.url, headers, mode=mode) as client:
            alice = sorted(t.name for t in (await client.list_tools()).tools)
            echoed = await client.call_tool("raw__echo", {"text": "hi"})
        bob = {"Authorization": f"Bearer {issuer.token(sub='u-2002', preferred_username='bob')}"}
        async with sdk_client(gateway.url, bob, mode=mode) as client:
            bobs = sorted(t.name for t in (await client.list_tools()).tools)
        return alice, bobs, echoed.content[0].text  # type: ignore[union-attr]

    alice, bob, echoed = run(main())
    assert "raw__echo" in alice and any(n.startswith("ps__") for n in alice), alice
    assert bob and all(n.startswith("ps__") for n in bob), bob  # the access section: bob sees ps only
    assert "hi" in echoed
    audit = [json.loads(line) for line in (gateway.stderr_path.parent / "audit.log").read_text().splitlines()]
    assert any(line["principal"] == "alice" and line["tool"] == "echo" for line in audit), audit


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_with_an_expired_token_raises_the_gateways_reason_and_hint(
    gateway: Serve, issuer: Issuer, mode: str
) -> None:
    from mcp.shared.exceptions import MCPError

    async def main() -> None:
        headers = {"Authorization": f"Bearer {issuer.token(exp=int(time.time()) - 600)}"}
        async with sdk_client(gateway.url, headers, mode=mode) as client:
            await client.list_tools()

    with pytest.raises(BaseException) as caught:
        run(main())
    error = raised_within(caught.value, MCPError)
    assert error.error.code == AUTH_REFUSED and error.error.message == "the token has expired", error
    assert isinstance(error.error.data, dict) and "fresh access token" in error.error.data["hint"], error.error


def test_a_session_answers_only_to_its_subject_and_survives_a_refreshed_token(gateway: Serve, issuer: Issuer) -> None:
    opened = _post(gateway, issuer.token())
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}

    def as_(token: str) -> httpx.Response:
        return httpx.post(
            gateway.url,
            json=listing,
            headers={
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {token}",
                "mcp-session-id": session,
                "mcp-protocol-version": "2025-11-25",
            },
            timeout=30,
        )

    # Another subject's valid token (same client, and even the same principal
    # name) learns the id: the answer is an unknown session's.
    other = as_(issuer.token(sub="u-3003"))
    assert other.status_code == 404, other.text
    # The same subject's next token (a refresh: new iat and exp) is its session.
    later = int(time.time()) + 1
    refreshed = as_(issuer.token(iat=later, exp=later + HOUR))
    assert refreshed.status_code == 200 and "raw__echo" in refreshed.text, refreshed.text


def test_a_key_the_issuer_adds_to_its_key_file_is_taken_on_its_first_token(gateway: Serve, issuer: Issuer) -> None:
    issuer.add("ec-rotated", ec.generate_private_key(ec.SECP256R1()))
    token = issuer.token("ec-rotated")
    (gateway.stderr_path.parent / "jwks.json").write_text(json.dumps(issuer.jwks()))
    # The file was read at start; a token naming a key id it did not hold reads it again.
    answer = _post(gateway, token)
    assert answer.status_code == 200, answer.text


def test_a_client_session_as_the_manual_writes_it_lists_with_a_token_and_raises_the_hint_without_one(
    gateway: Serve, issuer: Issuer
) -> None:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    async def session(token: str) -> list[str]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http:
            async with streamable_http_client(gateway.url, http_client=http) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    return [t.name for t in (await client.list_tools()).tools]

    assert "raw__echo" in run(session(issuer.token()))
    with pytest.raises(BaseException) as caught:
        run(session(issuer.token(iss="https://impostor.example")))
    error = raised_within(caught.value, MCPError)
    assert error.error.message == f"the token was not issued by {ISSUER}", error
    assert isinstance(error.error.data, dict) and ISSUER in error.error.data["hint"], error.error


def test_a_sandboxed_server_cannot_put_a_key_of_its_own_into_the_issuers_key_file(
    tmp_path: Path, issuer: Issuer
) -> None:
    # A server that could write the key file would add its own key and sign
    # any principal's token at the next read (an unknown key id triggers one).
    from helpers import ESCAPE_SERVER, PY
    from lovia_mcp_worker.sandbox import registry
    from lovia_mcp_worker.sandbox.backend import SandboxError

    from lovia_mcp import Sandbox

    try:
        registry.pick(Sandbox())
    except SandboxError as exc:
        pytest.skip(f"no sandbox backend can run here: {exc}")
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "jwks.json").write_text(json.dumps(issuer.jwks()))
    (folder / "notes.txt").write_text("notes\n")
    entry = {
        "command": PY,
        "args": [ESCAPE_SERVER],
        "cwd": str(folder),
        "env": {"HOME": str(folder)},
        "sandbox": {"backend": "auto"},
        "pin": "off",
    }
    g = Serve(
        folder,
        {"escape": entry},
        *("--oauth-issuer", ISSUER, "--oauth-resource", RESOURCE, "--oauth-jwks", str(folder / "jwks.json")),
        token=False,
    )
    said = {}
    try:

        async def write(name: str) -> str:
            headers = {"Authorization": f"Bearer {issuer.token(kid='rsa-1')}"}
            async with sdk_client(g.url, headers) as client:
                result = await client.call_tool("escape__write", {"path": str(folder / name)})
                return str(result.content[0].text)  # type: ignore[union-attr]

        for name in ("jwks.json", "notes.txt"):
            said[name] = run(write(name))
    finally:
        code, alive = g.stop()
    assert code == 0 and alive == [], g.stderr()[-3000:]
    assert said["jwks.json"].startswith("denied"), said
    # The same box writes beside it: the key file alone is kept.
    assert said["notes.txt"].startswith("ok"), said
