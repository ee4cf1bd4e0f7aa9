"""close() when the worker dies meanwhile: it returns at once, not after CLOSE_WAIT.

The worker answers ``Close`` only after killing its server tree; a worker
that dies first never answers, and close used to wait the whole CLOSE_WAIT
(8 s) for that reply. It now waits for the reply or the channel's loss,
whichever comes first.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import pytest
from helpers import PY, RAW_SERVER, alive_after, run

from lovia_mcp import MCPError, MCPServerStdio
from lovia_mcp.client.core import CLOSE_WAIT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

# Generous for a loaded machine; the figure is milliseconds when idle.
CLOSE_WITHIN = 4.0


@pytest.mark.timeout(30)
@pytest.mark.timing
def test_close_returns_at_once_when_the_worker_is_killed_while_closing() -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[RAW_SERVER], name="raw", auto_reconnect=False)
        conn = await server.open()
        worker = conn.worker_pid
        assert worker is not None
        server_pid = json.loads(str(await conn.call_tool("pid")))["pid"]
        # "hang" makes the server ignore SIGTERM: the worker's close then
        # spends its TERM grace on it, a window in which to die.
        in_flight = asyncio.ensure_future(conn.call_tool("hang"))
        while not conn.core.in_flight:  # noqa: SLF001 - the call is in flight once it is pending
            await asyncio.sleep(0)
        started = time.monotonic()
        closing = asyncio.ensure_future(conn.close())
        # Close is pending (and so sent) next to the call.
        while conn.core.in_flight < 2 and not closing.done():  # noqa: SLF001
            await asyncio.sleep(0)
        os.kill(worker, signal.SIGKILL)
        await asyncio.wait_for(closing, CLOSE_WAIT + 5)
        took = time.monotonic() - started
        print(f"close with the worker killed meanwhile: {took * 1000:.1f} ms (CLOSE_WAIT {CLOSE_WAIT} s)")
        assert took < CLOSE_WITHIN, took
        with pytest.raises(MCPError) as info:
            await asyncio.wait_for(in_flight, 1.0)
        assert info.value.kind == "closed"
        # The server went with its worker (parent-death signal, then its group).
        assert (await alive_after([worker, server_pid], 2.0))[0] == []

    run(main())
