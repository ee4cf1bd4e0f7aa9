"""End to end: a sandboxed server on a network whose only way out is a proxy (``Sandbox(upstream_proxy=...)``).

The "corporate proxy" is :class:`helpers.LocalUpstream` on the host's
loopback, which tunnels whatever name it is asked for to a service on the
loopback: the allowed name resolves nowhere, so only the upstream can reach
it. A real sandboxed server (``escape_server.py``'s ``proxy_get``, a program
honouring the proxy variables) fetches a page by that name, on each backend;
a name outside the allowlist is refused by the sandbox's proxy and never
reaches the upstream. Nothing leaves the loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ESCAPE_SERVER, PY, LocalHTTP, LocalUpstream, run
from lovia_mcp_worker.sandbox import registry

from lovia_mcp import MCPServerStdio, Sandbox, load_servers

pytestmark = pytest.mark.linux_only

NAME = "pypi.corp-only.test"


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_an_allowed_name_is_reached_through_the_upstream_proxy_and_another_is_refused_before_it(backend: str) -> None:
    why = registry.get(backend).unavailable(Sandbox(network=[NAME]))
    if why is not None:
        pytest.skip(f"the {backend} backend is not available here: {why}")

    async def main() -> tuple[str, str, str, list[list[str]], list[str]]:
        async with LocalHTTP(answer=lambda lines: f"the index, asked {lines[0]}") as origin:
            async with LocalUpstream(origin.port) as upstream:
                box = Sandbox(
                    network=[NAME, "localhost", "127.0.0.1"],
                    upstream_proxy=upstream.url,
                    no_proxy=["localhost"],
                    backend=backend,  # type: ignore[arg-type]
                )
                server = MCPServerStdio(command=PY, args=[ESCAPE_SERVER], name="corp", sandbox=box)
                async with server.session() as conn:
                    fetched = str(await conn.call_tool("proxy_get", {"url": f"http://{NAME}/simple/"}))
                    refused = str(await conn.call_tool("proxy_get", {"url": "http://elsewhere.test/"}))
                    # no_proxy: reached directly, past the upstream.
                    direct = str(await conn.call_tool("proxy_get", {"url": f"http://localhost:{origin.port}/direct"}))
                return fetched, refused, direct, upstream.requests, origin.paths

    fetched, refused, direct, asked, paths = run(main())
    print(fetched, refused, direct, asked, paths, sep="\n")
    assert fetched.startswith("ok 200 the index, asked GET /simple/ HTTP/1.1")
    assert [r[0] for r in asked] == [f"CONNECT {NAME}:80 HTTP/1.1"]
    assert refused.startswith("ok 403 ") and "elsewhere.test is not in the sandbox's network allowlist" in refused
    assert direct.startswith("ok 200 the index, asked GET /direct HTTP/1.1"), direct
    assert paths == ["/simple/", "/direct"]


def test_a_config_file_takes_upstream_proxy_and_refuses_it_without_an_allowlist_or_with_a_bad_url(
    tmp_path: Path,
) -> None:
    def load(sandbox: dict[str, object]) -> object:
        path = tmp_path / "mcp.json"
        path.write_text(json.dumps({"mcpServers": {"s": {"command": PY, "args": ["x.py"], "sandbox": sandbox}}}))
        [server] = load_servers(path)
        return server.sandbox  # type: ignore[attr-defined]

    box = load({"network": [NAME], "upstream_proxy": "http://proxy.internal:3128", "no_proxy": ["*.corp.test"]})
    assert isinstance(box, Sandbox) and box.upstream_proxy == "http://proxy.internal:3128"
    assert box.no_proxy == ["*.corp.test"]
    for sandbox, said in (
        ({"network": False, "upstream_proxy": "http://proxy.internal:3128"}, "needs a network allowlist"),
        ({"network": True, "upstream_proxy": "http://proxy.internal:3128"}, "needs a network allowlist"),
        ({"network": [NAME], "upstream_proxy": "https://proxy.internal:3128"}, "only an http:// proxy"),
        ({"network": [NAME], "no_proxy": ["db.corp.test"]}, "no_proxy names what is reached without the upstream"),
        (
            {"network": [NAME], "upstream_proxy": "http://proxy.internal:3128", "no_proxy": ["*.*.test"]},
            "sandbox no_proxy entry '*.*.test' is invalid",
        ),
        ({"network": [NAME], "upstream_proxy": "http://proxy.internal:3128", "no_proxy": "x.test"}, "list of"),
    ):
        with pytest.raises(Exception) as bad:
            load(sandbox)
        assert said in str(bad.value) and getattr(bad.value, "hint", ""), bad.value
