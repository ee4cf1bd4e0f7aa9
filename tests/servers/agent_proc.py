#!/usr/bin/env python3
"""An agent process for the die-with-the-agent test: reports pids, then waits to be killed.

Opens a process-isolated connection to ``raw_server.py``, has the server start
two grandchildren and one orphan, starts a call that never answers, prints
``{"worker", "server", "grandchildren"}`` as one JSON line on stdout and
waits (for SIGKILL) until stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

RAW_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_server.py")


async def main() -> None:
    from lovia_mcp import MCPServerStdio

    conn = await MCPServerStdio(command=sys.executable, args=[RAW_SERVER], name="raw").open()
    children = json.loads(str(await conn.call_tool("spawn", {"n": 2})))
    orphans = json.loads(str(await conn.call_tool("spawn", {"n": 1, "orphan": True})))
    server = json.loads(str(await conn.call_tool("pid")))["pid"]
    hang = asyncio.ensure_future(conn.call_tool("hang"))
    while not conn.core.in_flight:  # noqa: SLF001 - report once the call is in flight
        await asyncio.sleep(0)
    print(json.dumps({"worker": conn.worker_pid, "server": server, "grandchildren": children + orphans}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    hang.cancel()
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
