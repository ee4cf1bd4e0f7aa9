"""The environment a stdio server gets by default, and what its stderr says is missing from it.

The launcher (:mod:`~lovia_mcp_worker.containment.launch`) builds a
server's environment from :func:`default_environment`; the failure texts
(:mod:`.failures`) read a server's stderr tail with :func:`hint` to say which
of these variables would have helped. Both need the same names, so they live
here, below both.

- :data:`BASE`: what any program expects (``PATH``, ``HOME``, the locale
  names and ``LC_*``...);
- :data:`TRUST`: where the machine's trusted certificates are, for each TLS
  stack a package runner uses (OpenSSL and Python's ``ssl``, uv, requests,
  curl, pip, Node, npm). They are paths and switches, not secrets: without
  them a server started through ``uvx`` or ``npx`` on a machine whose
  registry traffic goes through a TLS-intercepting proxy fails to start
  ("invalid peer certificate: UnknownIssuer");
- :data:`PROXY`: ``HTTP(S)_PROXY`` and ``NO_PROXY``, both spellings, passed
  when they carry no credentials (``http://user:pass@proxy:3128`` is a
  secret: it is passed only when named in ``inherit_env``).

Inside a sandbox the server may read the CA bundle files these name
(:func:`trust_files`: the Landlock backend grants each file, nothing
around it; under bwrap the root is readable already). With a network
allowlist the backend then sets its own
proxy variables over these (both spellings, ``NO_PROXY`` included): the
allowlist proxy is the box's only way out whatever the user's say.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import urlsplit

BASE: Final = ("PATH", "HOME", "LANG", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR")
TRUST: Final = (
    "SSL_CERT_FILE",  # OpenSSL, Python's ssl, uv, httpx, Go, Rust's rustls-native-certs
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",  # requests (and pip's vendored copy)
    "CURL_CA_BUNDLE",  # curl, and requests when REQUESTS_CA_BUNDLE is unset
    "NODE_EXTRA_CA_CERTS",  # Node, npx
    "NPM_CONFIG_CAFILE",  # npm's cafile setting (npm reads either spelling)
    "npm_config_cafile",
    "PIP_CERT",  # pip
    "UV_SYSTEM_CERTS",  # uv: use the system's store instead of its bundled roots
    "UV_NATIVE_TLS",  # the same, by its older name
)
# The trust variables that name one file (a CA bundle): a sandbox lets the server read exactly that file.
TRUST_FILES: Final = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "NPM_CONFIG_CAFILE",
    "npm_config_cafile",
    "PIP_CERT",
)
PROXY: Final = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def carries_credentials(value: str) -> bool:
    """True if a proxy URL holds a user name or password (``http://user:pass@proxy:3128``)."""
    if "@" not in value:
        return False
    try:
        parts = urlsplit(value if "://" in value else "http://" + value)
    except ValueError:
        return True  # unreadable, with an '@' in it: treated as a secret
    return parts.username is not None or parts.password is not None


def default_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` a server gets without asking: the base, ``LC_*``, trust, proxies without credentials."""
    return {
        name: value
        for name, value in environ.items()
        if name in BASE or name.startswith("LC_") or name in TRUST or (name in PROXY and not carries_credentials(value))
    }


def trust_files(env: Mapping[str, str]) -> list[str]:
    """The CA bundle files the server's environment names (:data:`TRUST_FILES`) that exist as regular files."""
    found = [env[name] for name in TRUST_FILES if env.get(name)]
    return [path for path in dict.fromkeys(found) if os.path.isfile(path)]


def withheld_proxies(environ: Mapping[str, str]) -> list[str]:
    """The proxy variables of ``environ`` that carry credentials, so are not passed by default."""
    return [name for name in PROXY if name in environ and carries_credentials(environ[name])]


# What a TLS stack writes when it does not trust the certificate it was shown,
# and the variable that gives it the trust, by stack (the first match names it).
_CERT_ERRORS: Final = (
    (
        re.compile(r"UNABLE_TO_GET_ISSUER_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE"),
        "NODE_EXTRA_CA_CERTS",
    ),
    (re.compile(r"invalid peer certificate|UnknownIssuer"), "SSL_CERT_FILE"),  # uv (rustls)
    (re.compile(r"SSL certificate problem"), "CURL_CA_BUNDLE"),
    (re.compile(r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|self[- ]signed certificate"), "SSL_CERT_FILE"),
    (
        re.compile(r"unable to get local issuer certificate|x509: certificate signed by unknown authority"),
        "SSL_CERT_FILE",
    ),
)
# What a failed connection through (or for want of) a proxy looks like on stderr.
NETWORK_ERRORS: Final = re.compile(
    r"\b407\b|Proxy Authentication Required|ECONNREFUSED|ENOTFOUND|ETIMEDOUT|EAI_AGAIN|getaddrinfo|"
    r"Connection refused|Network is unreachable|Name or service not known|Temporary failure in name resolution|"
    r"error sending request|Failed to fetch|Could not connect|dns error",
    re.IGNORECASE,
)


def hint(stderr_tail: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """What to pass, when a server's stderr shows a certificate or a proxy problem; None otherwise.

    ``environ`` is the agent's environment (the worker runs with it), which
    says whether the variable is set already.
    """
    text = "\n".join(stderr_tail)
    for pattern, name in _CERT_ERRORS:
        if pattern.search(text):
            if name in environ:
                return (
                    f"The server's stderr shows a TLS certificate error although {name}={environ[name]} is passed: "
                    "check that the file holds the certificate of the proxy or registry it talks to (and, in a "
                    "sandbox, that the box can read it)."
                )
            return (
                "The server's stderr shows a TLS certificate error: it does not trust the certificate it was shown "
                f"(a TLS-intercepting proxy's, or a private registry's). Set {name} to the CA bundle that does, in "
                "the agent's environment (servers get it by default) or in the server's env= "
                f"(the trust variables: {', '.join(TRUST)})."
            )
    withheld = withheld_proxies(environ)
    if withheld and NETWORK_ERRORS.search(text):
        names = ", ".join(withheld)
        return (
            f"{names} in the agent's environment carr{'ies' if len(withheld) == 1 else 'y'} credentials, so servers "
            f"do not get {'it' if len(withheld) == 1 else 'them'} by default: if this server must go through that "
            f"proxy, name {'it' if len(withheld) == 1 else 'them'} in inherit_env."
        )
    return None


__all__ = [
    "BASE",
    "NETWORK_ERRORS",
    "PROXY",
    "TRUST",
    "TRUST_FILES",
    "carries_credentials",
    "default_environment",
    "hint",
    "trust_files",
    "withheld_proxies",
]
