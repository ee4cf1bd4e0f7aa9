"""End to end: a sandboxed server cannot turn an allowed wildcard inward.

The attack: ``Sandbox(network=["*.allowed-api.test"])``, and a name under it,
``inside.allowed-api.test``, resolves to 127.0.0.1; the server asks the
proxy for a page of a service on the host's loopback. The name is mapped the
way a resolver really sees it: the agent runs in a mount namespace of its own
(``unshare --mount``) where ``/etc/hosts`` is a file this test wrote, so the
worker's proxy resolves it with the system's resolver (nothing else is
changed, and the host's ``/etc/hosts`` is untouched). Everything stays on
the loopback.

Run without the address check (the proxy as it was), the first fetch gets
``200 hello from the host`` and the service sees the connection: this test
fails there.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
from helpers import ESCAPE_SERVER, PY, LocalHTTP, run
from lovia_mcp_worker.sandbox import bwrap as sandbox_mod

pytestmark = [
    pytest.mark.skipif(sandbox_mod.BWRAP is None, reason="bubblewrap is not available (Linux only)"),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None,
        reason="needs root and unshare(1) to give the agent an /etc/hosts of its own",
    ),
]

# Bound on the agent's whole run: a forkserver start and three sandboxed
# servers, each opened and called once (about 2 s here; CI is slower).
AGENT_WAIT = 60.0

AGENT = textwrap.dedent("""
    import asyncio, json, logging, sys
    from lovia_mcp import MCPServerStdio, Sandbox

    port, escape_server, work = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    logged = []

    class Keep(logging.Handler):
        def emit(self, record):
            logged.append(record.getMessage())

    logging.getLogger("lovia_mcp").addHandler(Keep())

    async def fetch(network, path):
        server = MCPServerStdio(command=sys.executable, args=[escape_server], name="egress", cwd=work,
                                sandbox=Sandbox(network=network))
        async with server.session() as conn:
            url = f"http://inside.allowed-api.test:{port}{path}"
            return str(await conn.call_tool("proxy_get", {"url": url}))

    async def main():
        answers = {
            "wildcard": await fetch(["*.allowed-api.test"], "/wildcard"),
            "address": await fetch(["*.allowed-api.test", "127.0.0.1"], "/address"),
            "range": await fetch(["*.allowed-api.test", "127.0.0.0/8"], "/range"),
        }
        print(json.dumps({"answers": answers, "logged": [m for m in logged if "proxy refused" in m]}))

    asyncio.run(main())
""")


def test_a_name_under_an_allowed_wildcard_mapped_to_the_loopback_is_refused_until_its_address_is_listed(
    tmp_path: Path,
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 localhost\n127.0.0.1 inside.allowed-api.test\n")
    work = tmp_path / "work"
    work.mkdir()

    async def main() -> tuple[dict[str, str], list[str], LocalHTTP]:
        # The host's loopback service the attack aims at.
        async with LocalHTTP(answer=lambda _: "hello from the host") as service:
            agent = await asyncio.create_subprocess_exec(
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount --bind "$0" /etc/hosts && exec "$@"',
                str(hosts),
                PY,
                "-c",
                AGENT,
                str(service.port),
                ESCAPE_SERVER,
                str(work),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(agent.communicate(), AGENT_WAIT)
            assert agent.returncode == 0, err.decode()
            report = json.loads(out)
            return report["answers"], report["logged"], service

    answers, logged, service = run(main())
    print(answers, logged, f"connections: {service.accepted} {service.paths}")

    body = (
        "lovia-mcp sandbox: inside.allowed-api.test resolves to 127.0.0.1, a loopback address, "
        "which the sandbox refuses unless it is listed. To allow it, add '127.0.0.1' (or "
        f"'127.0.0.1:{service.port}', or a range holding it) to Sandbox(network=[...]).\n"
    )
    assert answers["wildcard"] == "ok 403 " + body[:200]  # the server's tool shows 200 characters
    assert logged == [
        (
            f"egress: lovia_mcp.netproxy: sandbox proxy refused inside.allowed-api.test:{service.port} "
            "(resolves to 127.0.0.1, a loopback address)"
        )
    ]
    assert answers["address"] == answers["range"] == "ok 200 hello from the host"
    # The refused fetch never reached the service: only the two listed ones did.
    assert (service.accepted, service.paths) == (2, ["/address", "/range"])
