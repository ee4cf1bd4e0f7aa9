"""Who a request to ``lovia-mcp serve`` is, by its token file (:mod:`lovia_mcp.gateway.auth.tokens`).

Every protected route refuses a request without one of the file's bearer
tokens (the probes need none), the SDK's client raises the refusal's
message and hint, and each token is compared in constant time. On the
shared gateway (tests/_gateway.py); the OAuth resource server is
test_gateway_oauth.py, principals named in the token file
test_gateway_principals.py.
"""

from __future__ import annotations

import httpx
import pytest
from _gateway import INITIALIZE, TOKEN, Serve, raised_within, sdk_client
from _gateway import gateway as gateway  # the fixture: one gateway shared by the modules that import it
from conftest import run

from lovia_mcp.gateway.auth.authenticator import AUTH_REFUSED

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    "authorization",
    # The token itself under another scheme: only Bearer carries it.
    [None, "Bearer wrong-token-0123456789abcdef", "Basic dGVzdA==", "Bearer", f"Basic {TOKEN}", TOKEN],
)
def test_a_request_without_the_right_bearer_token_gets_401_on_every_protected_route(
    gateway: Serve, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    for path in ("/mcp", "/servers/raw/mcp", "/metrics"):
        response = httpx.post(
            gateway.base + path, json=INITIALIZE, headers={"accept": "application/json, text/event-stream", **headers}
        )
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"].startswith("Bearer")
        error = response.json()["error"]
        assert error["code"] == AUTH_REFUSED and "--token-file" in error["data"]["hint"], error
    # Probes carry no token (Kubernetes' httpGet cannot read a Secret).
    assert httpx.get(gateway.base + "/healthz").status_code == 200
    assert httpx.get(gateway.base + "/readyz").text == "ready\n"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_with_a_wrong_token_raises_the_gateways_message_and_hint(gateway: Serve, mode: str) -> None:
    from mcp.shared.exceptions import MCPError

    async def main() -> None:
        async with sdk_client(gateway.url, {"Authorization": "Bearer wrong-token-0123456789abcdef"}, mode=mode):
            pass

    with pytest.raises(BaseException) as caught:
        run(main())
    error = raised_within(caught.value, MCPError)
    assert error.error.code == AUTH_REFUSED, error
    assert error.error.message == "the bearer token is not one of this gateway's", error
    assert isinstance(error.error.data, dict) and "--token-file" in error.error.data["hint"], error.error


@pytest.mark.unit
def test_bearer_tokens_are_each_compared_in_constant_time_and_never_with_equality(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ast
    import hmac
    import inspect
    import textwrap

    from lovia_mcp.gateway.auth import tokens as scheme
    from lovia_mcp.gateway.auth.authenticator import Identity

    # Behaviour: every known token goes through hmac.compare_digest, whether
    # the given one matches the first, the last or none (no early exit).
    tokens = ["first-token-0123456789", "second-token-0123456789", "third-token-0123456789"]
    auth = scheme.TokenFile([scheme.Credential("default", t) for t in tokens])
    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(scheme.hmac, "compare_digest", spy)
    for given, allowed in ((tokens[0], True), (tokens[2], True), ("wrong-token-0123456789", False)):
        compared.clear()
        headers = [(b"authorization", f"Bearer {given}".encode())]
        assert isinstance(auth.check(headers), Identity) is allowed
        assert compared == [t.encode() for t in tokens]
    # Source: no == / != / in anywhere in the check (a weakening the
    # behaviour above would also catch, kept as the issue asks).
    tree = ast.parse(textwrap.dedent(inspect.getsource(scheme.TokenFile.check)))
    weak = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
        and "token" in ast.unparse(node)
    ]
    assert weak == []
