"""A sandboxed call's egress: connections and bytes per destination host, on its usage and in ``stats()``.

A real sandboxed server (``escape_server.py``'s ``proxy_get``, which goes
through the proxy as a program honouring the proxy variables does) fetches
a page from a service on the host's loopback, listed as an address in
``Sandbox(network=[...])``. Nothing leaves the loopback.
"""

from __future__ import annotations

import pytest
from helpers import ESCAPE_SERVER, PY, LocalHTTP, run
from lovia_mcp_worker.sandbox import registry

from lovia_mcp import CallUsage, MCPServerStdio, Sandbox

pytestmark = pytest.mark.linux_only

# What the loopback service answers every request with.
BODY = "x" * 5000


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_sandboxed_calls_egress_is_counted_per_host_on_its_usage_and_in_stats(backend: str) -> None:
    why = registry.get(backend).unavailable(Sandbox(network=["127.0.0.1"]))
    if why is not None:
        pytest.skip(f"the {backend} backend is not available here: {why}")

    async def main() -> tuple[str, CallUsage, CallUsage, object]:
        async with LocalHTTP(answer=lambda lines: BODY) as service:
            server = MCPServerStdio(
                command=PY,
                args=[ESCAPE_SERVER],
                name="egress",
                sandbox=Sandbox(network=["127.0.0.1"], backend=backend),  # type: ignore[arg-type]
            )
            async with server.session() as conn:
                fetched = await conn.call_tool("proxy_get", {"url": f"http://127.0.0.1:{service.port}/page"})
                quiet = await conn.call_tool("proxy_get", {"url": "http://evil.example:80/"})
                stats = await conn.stats()
        assert fetched.usage is not None and quiet.usage is not None
        return str(fetched), fetched.usage, quiet.usage, stats

    text, fetched, refused, stats = run(main())
    print(text, fetched, refused, stats)
    assert text.startswith("ok 200 ")
    [egress] = fetched.egress
    assert egress.host == "127.0.0.1" and egress.connections == 1
    # The body, its response head and the forwarded request head.
    assert len(BODY) < egress.bytes < len(BODY) + 2000
    assert fetched.egress_connections == 1 and fetched.egress_bytes == egress.bytes
    # A refused destination is a denial, not egress: nothing went out.
    assert refused.egress == []
    assert stats.egress_connections == 1  # type: ignore[attr-defined]
    assert stats.egress_bytes == egress.bytes  # type: ignore[attr-defined]
