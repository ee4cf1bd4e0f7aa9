from __future__ import annotations

from conftest import PY, raw_args, run

from lovia_mcp import MCPServerStdio


def test_raw_server_echo_through_a_worker_process() -> None:
    async def main() -> str:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw")
        async with server.session() as conn:
            assert conn.worker_pid is not None
            result = await conn.call_tool("echo", {"text": "hi"})
            return str(result)

    assert run(main()) == "hi"
