"""lovia's own server configs handed to lovia-mcp's plugin: converted, isolated, closed."""

from __future__ import annotations

import pytest
from helpers import PY, drive, raw_args, run
from lovia.exceptions import UserError
from lovia.plugins import mcp as lovia_mcp_plugin
from lovia.testing import call

from lovia_mcp import MCP, MCPServerStdio


def test_a_lovia_stdio_config_is_converted_isolated_and_closed_after_the_run() -> None:
    lovia_config = lovia_mcp_plugin.MCPServerStdio(command=PY, args=raw_args(), name="raw", timeout=30)
    plugin = MCP(lovia_config)
    [converted] = plugin.servers
    assert isinstance(converted, MCPServerStdio) and converted.name == "raw" and converted.timeout == 30

    async def main() -> None:
        result, _ = await drive(plugin, call("raw__pid", {}))
        # The run reached the server (it used to fail: "unhashable type: 'MCPConnection'").
        assert '"pid"' in str(result.entries[-2].output)
        assert plugin.connections() == []  # closed at run end; the leak check proves the processes went

    run(main())


def test_a_live_lovia_connection_is_refused_before_anything_is_opened() -> None:
    async def main() -> None:
        conn = lovia_mcp_plugin.MCPConnection(transport=lambda: None)
        with pytest.raises(UserError) as info:
            MCP(conn)
        assert "lovia_mcp.MCPServerStdio" in (info.value.hint or "")

    run(main())
