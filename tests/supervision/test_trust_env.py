"""Package servers behind a TLS-intercepting proxy: the trust and proxy variables a server gets by default.

A local HTTPS server with a certificate from a CA of the test's own, on the
loopback (no traffic leaves the machine), stands in for the registry seen
through a TLS-intercepting proxy. ``tests/servers/tls_start_server.py``
fetches from it before it answers anything, as ``uvx`` asks its registry,
trusting the system's store and ``SSL_CERT_FILE`` only: it starts when the
agent's environment names the CA in ``SSL_CERT_FILE`` and nothing else, and
fails with a hint naming the variable when it does not.

Proxy variables pass when they carry no credentials; one that does stays
out (it is a secret) and a network error then names ``inherit_env``. Inside a
sandbox with a network allowlist the user's proxy variables never replace
the sandbox's own.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.server
import io
import json
import os
import shutil
import ssl
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ISOLATIONS, PY, ROOT, SERVERS, raw_args, run
from lovia_mcp_worker.sandbox import bwrap, landlock
from lovia_mcp_worker.wire import environment
from lovia_mcp_worker.wire.environment import PROXY, TRUST

from lovia_mcp import MCPError, MCPServerStdio, Sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

TLS_SERVER = str(SERVERS / "tls_start_server.py")
# What the fake registry answers.
BODY = "hello from the registry"


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for localhost/127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> object:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("lovia-mcp test interception CA"))
        .issuer_name(name("lovia-mcp test interception CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital_signature, key_cert_sign, crl_sign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    import ipaddress

    leaf = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


# A package index's one project: a stdio MCP server in a wheel, as uvx installs it.
PROJECT = "lovia-mcp-tls-probe"
WHEEL_SERVER = """
import json, sys
def main():
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        method = msg.get("method")
        if method == "initialize":
            res = {"protocolVersion": msg["params"].get("protocolVersion"), "capabilities": {"tools": {}},
                   "serverInfo": {"name": "tls-probe", "version": "1.0"}}
        elif method == "tools/list":
            res = {"tools": [{"name": "hello", "description": "Say hello.", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            res = {"content": [{"type": "text", "text": "hello from the wheel"}]}
        else:
            res = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) + "\\n")
        sys.stdout.flush()
"""


def _wheel() -> tuple[str, bytes]:
    """The project's wheel, built by hand (a zip with its metadata): its file name and bytes."""
    module, version = PROJECT.replace("-", "_"), "1.0"
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}.py": WHEEL_SERVER,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: lovia-mcp tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{PROJECT} = {module}:main\n",
    }

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},{digest(text.encode())},{len(text.encode())}\n" for path, text in files.items())
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return f"{module}-{version}-py3-none-any.whl", out.getvalue()


class Registry:
    """An HTTPS server on the loopback whose certificate only the test's CA vouches for.

    ``/simple/`` answers :data:`BODY`; ``/simple/lovia-mcp-tls-probe/`` is a
    package index page (PEP 503) linking the project's one wheel.
    """

    def __init__(self, folder: Path) -> None:
        self.ca, cert, key = _certificates(folder)
        wheel_name, wheel = _wheel()
        sha = hashlib.sha256(wheel).hexdigest()
        pages = {
            "/simple/": BODY.encode(),
            f"/simple/{PROJECT}/": f'<html><body><a href="/files/{wheel_name}#sha256={sha}">{wheel_name}</a>'
            "</body></html>".encode(),
            f"/files/{wheel_name}": wheel,
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self) -> bytes:
                page = pages.get(self.path, b"")
                self.send_response(200 if self.path in pages else 404)
                kind = "application/octet-stream" if self.path.endswith(".whl") else "text/html"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                return page

            def do_GET(self) -> None:
                self.wfile.write(self.do_HEAD())

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.index = f"https://localhost:{self.httpd.server_address[1]}/simple/"
        self.url = self.index
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    reg = Registry(tmp_path_factory.mktemp("tls"))
    yield reg
    reg.close()


@pytest.fixture(autouse=True)
def no_trust_or_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an agent environment without any of them (the machine's own left out)."""
    for name in (*TRUST, *PROXY):
        monkeypatch.delenv(name, raising=False)


def _tls_server(registry: Registry, isolation: str = "process") -> MCPServerStdio:
    return MCPServerStdio(
        command=PY, args=[TLS_SERVER, registry.url], name="tls", isolation=isolation, auto_reconnect=False
    )  # type: ignore[arg-type]


@ISOLATIONS
def test_a_server_that_trusts_its_registry_through_ssl_cert_file_alone_starts_with_it_set_in_the_agent(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(registry.ca))

    async def main() -> str:
        async with _tls_server(registry, isolation).session() as conn:
            return str(await conn.call_tool("fetched"))

    assert run(main()) == BODY


def test_without_the_trust_variable_the_open_fails_with_a_hint_naming_ssl_cert_file(registry: Registry) -> None:
    async def main() -> MCPError:
        with pytest.raises(MCPError) as info:
            await _tls_server(registry).open()
        return info.value

    error = run(main())
    print(error, "|", error.hint)
    assert "certificate verify failed" in str(error.hint) or "CERTIFICATE_VERIFY_FAILED" in str(error), error
    assert "TLS certificate error" in str(error.hint) and "Set SSL_CERT_FILE" in str(error.hint), error.hint
    assert str(error.hint).count("TLS certificate error") == 1, error.hint


def test_a_certificate_error_with_the_variable_passed_says_to_check_the_file(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wrong = tmp_path / "other-ca.pem"
    wrong.write_text(Path(ssl.get_default_verify_paths().cafile or registry.ca).read_text())  # not the test's CA
    monkeypatch.setenv("SSL_CERT_FILE", str(wrong))

    async def main() -> MCPError:
        with pytest.raises(MCPError) as info:
            await _tls_server(registry).open()
        return info.value

    error = run(main())
    print(error.hint)
    assert f"although SSL_CERT_FILE={wrong} is passed" in str(error.hint), error.hint


SANDBOX_BACKENDS = [
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(
            bwrap.BWRAP is None or bwrap.userns_refused() is not None, reason="no user namespaces"
        ),
    ),
    pytest.param(
        "landlock", marks=pytest.mark.skipif(landlock.ABI < landlock.NETWORK_ABI, reason="needs Landlock ABI 4")
    ),
]


UVX = shutil.which("uvx", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))


def _uvx_server(registry: Registry, cache: Path) -> MCPServerStdio:
    """``uvx lovia-mcp-tls-probe`` from the test's index, with a cold cache of its own, never fetching a Python."""
    return MCPServerStdio(
        command=str(UVX),
        args=["--index-url", registry.index, PROJECT],
        name="uvx",
        env={
            "UV_CACHE_DIR": str(cache),
            "UV_PYTHON": sys.executable,
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_NO_CONFIG": "1",
        },
        auto_reconnect=False,
        open_timeout=UVX_OPEN_WAIT,
    )


# Bound on uvx's first open: resolve, download and install one small wheel
# from the loopback, make an environment; about a second, generous for CI.
UVX_OPEN_WAIT = 60.0


@pytest.mark.skipif(UVX is None, reason="uv is not installed")
def test_an_unlocked_uvx_server_opens_when_the_agent_trusts_its_registry_through_ssl_cert_file_alone(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async def main() -> str:
        async with _uvx_server(registry, tmp_path / "uv-cache").session() as conn:
            return str(await conn.call_tool("hello"))

    async def refused() -> MCPError:
        with pytest.raises(MCPError) as info:
            await _uvx_server(registry, tmp_path / "uv-cache-refused").open()
        return info.value

    error = run(refused())
    print(error, "|", error.hint)
    assert "Set SSL_CERT_FILE" in str(error.hint), error.hint

    monkeypatch.setenv("SSL_CERT_FILE", str(registry.ca))
    assert run(main()) == "hello from the wheel"


@pytest.mark.parametrize("backend", SANDBOX_BACKENDS)
def test_a_sandboxed_server_reads_the_ca_bundle_ssl_cert_file_names_and_trusts_its_registry(
    backend: str, registry: Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CA outside the system's folders (and outside /tmp, private in a bwrap box), as a user's own would be."""
    folder = ROOT / ".cache" / f"trust-{os.getpid()}-{backend}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        ca = folder / "corp-ca.pem"
        shutil.copyfile(registry.ca, ca)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        box = Sandbox(network=True, backend=backend)  # type: ignore[arg-type]

        async def main() -> str:
            server = MCPServerStdio(
                command=PY, args=[TLS_SERVER, registry.url], cwd=str(tmp_path), sandbox=box, auto_reconnect=False
            )
            async with server.session() as conn:
                return str(await conn.call_tool("fetched"))

        assert run(main()) == BODY
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _server_env(server: MCPServerStdio) -> dict[str, str]:
    async with server.session() as conn:
        env = json.loads(str(await conn.call_tool("pid")))["env"]
    assert isinstance(env, dict)
    return env


def test_proxy_variables_pass_without_credentials_and_stay_out_with_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("https_proxy", "http://alice:s3cret@proxy.corp.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.corp.example")
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", "/etc/ssl/corp-ca.pem")

    env = run(_server_env(MCPServerStdio(command=PY, args=raw_args())))
    assert env["HTTP_PROXY"] == "http://proxy.corp.example:3128" and env["NO_PROXY"] == "localhost,.corp.example"
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/corp-ca.pem"
    assert "https_proxy" not in env and "s3cret" not in json.dumps(env)

    # Named in inherit_env, the user's own decision, it passes.
    env = run(_server_env(MCPServerStdio(command=PY, args=raw_args(), inherit_env=["https_proxy"])))
    assert env["https_proxy"] == "http://alice:s3cret@proxy.corp.example:3128"


def test_a_network_error_with_a_withheld_proxy_names_inherit_env_in_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s3cret@proxy.corp.example:3128")

    # What npx writes when its registry cannot be reached for want of the proxy.
    fails = "import sys; print('npm error code ECONNREFUSED', file=sys.stderr); sys.exit(1)"

    async def main() -> MCPError:
        with pytest.raises(MCPError) as info:
            await MCPServerStdio(command=PY, args=["-c", fails], auto_reconnect=False).open()
        return info.value

    error = run(main())
    print(error.hint)
    assert "HTTPS_PROXY" in str(error.hint) and "inherit_env" in str(error.hint), error.hint
    assert "s3cret" not in str(error.hint)


@pytest.mark.parametrize("backend", SANDBOX_BACKENDS)
def test_in_a_sandbox_with_an_allowlist_the_users_proxy_variables_never_replace_the_sandboxs(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = "http://proxy.corp.example:3128"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, user)
    monkeypatch.setenv("NO_PROXY", "*")  # would send every request around the allowlist proxy
    monkeypatch.setenv("no_proxy", "*")
    box = Sandbox(network=["pypi.org"], backend=backend)  # type: ignore[arg-type]

    env = run(_server_env(MCPServerStdio(command=PY, args=raw_args(), sandbox=box, env={"HTTPS_PROXY": user})))
    print({k: v for k, v in env.items() if "proxy" in k.lower()})
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[name].startswith("http://127.0.0.1:") and env[name] != user, (name, env[name])
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


@pytest.mark.parametrize(
    ("stderr", "variable"),
    [
        ("npm error code UNABLE_TO_GET_ISSUER_CERT_LOCALLY", "NODE_EXTRA_CA_CERTS"),
        ("npm error code SELF_SIGNED_CERT_IN_CHAIN", "NODE_EXTRA_CA_CERTS"),
        ("  cause: invalid peer certificate: UnknownIssuer", "SSL_CERT_FILE"),
        ("curl: (60) SSL certificate problem: unable to get local issuer certificate", "CURL_CA_BUNDLE"),
        ("ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", "SSL_CERT_FILE"),
    ],
)
def test_each_tls_stacks_certificate_error_names_the_variable_that_gives_it_trust(stderr: str, variable: str) -> None:
    said = environment.hint(["starting", stderr], {})
    assert said is not None and f"Set {variable} to the CA bundle" in said, said
    assert environment.hint(["starting", "listening on stdio"], {}) is None


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("http://proxy:3128", False),
        ("proxy.corp:3128", False),
        ("http://alice:s3cret@proxy:3128", True),
        ("http://token@proxy:3128", True),
        ("alice:s3cret@proxy:3128", True),
        ("localhost,.corp.example", False),
    ],
)
def test_a_proxy_value_carries_credentials_only_with_a_user_or_password(value: str, secret: bool) -> None:
    assert environment.carries_credentials(value) is secret
