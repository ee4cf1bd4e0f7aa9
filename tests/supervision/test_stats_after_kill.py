"""Stats after a limit kill (issue 13, item 8): the counters agree with what happened.

A limit kill ends the server's generation; the fresh server starts with the
next request. Until then no restart has happened, so stats show none and no
restart reason, and neither ``stats().server_pid`` nor ``conn.server_pid``
names the dead process. Once the next call has restarted the server, both
name the fresh one, ``restarts`` is 1 and the reason is the limit.
"""

from __future__ import annotations

import sys

import pytest
from helpers import ISOLATIONS, pid_alive, run, sup

from lovia_mcp import Limits, MCPError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")


@ISOLATIONS
def test_stats_after_a_limit_kill_show_no_restart_yet_and_no_dead_pid_then_one_restart_with_its_reason(
    isolation: str,
) -> None:
    async def main() -> None:
        server = sup(isolation, limits=Limits(max_processes=5))
        async with server.session() as conn:
            old = int(str(await conn.call_tool("pid")))
            assert conn.server_pid == old
            with pytest.raises(MCPError) as info:
                await conn.call_tool("fork", {"n": 20})
            assert info.value.kind == "limit"
            after_kill = await conn.stats()
            print(
                f"[{isolation}] after the kill: restarts={after_kill.restarts} "
                f"reason={after_kill.last_restart_reason!r} server_pid={after_kill.server_pid} "
                f"conn.server_pid={conn.server_pid}"
            )
            assert after_kill.restarts == 0
            assert after_kill.last_restart_reason is None
            assert after_kill.server_pid is None
            assert conn.server_pid is None, (conn.server_pid, old, pid_alive(old))

            new = int(str(await conn.call_tool("pid")))
            after_restart = await conn.stats()
            assert new != old
            assert after_restart.restarts == 1
            assert "process limit" in (after_restart.last_restart_reason or ""), after_restart.last_restart_reason
            assert after_restart.server_pid == new == conn.server_pid

    run(main())
