"""A plugin's servers open at once: a run waits for the slowest, not the sum."""

from __future__ import annotations

import time

import pytest
from helpers import ISOLATIONS, PY, RAW_SERVER, drive, run
from lovia.testing import call

from lovia_mcp import MCP, MCPError, MCPServerStdio

# Each server waits this long before it starts (a slow npx/uvx start-up, say).
DELAY = 1.0
N = 4


def slow(name: str, *flags: str) -> MCPServerStdio:
    script = f"sleep {DELAY}; exec {PY} {RAW_SERVER} {' '.join(flags)}"
    return MCPServerStdio(command="sh", args=["-c", script], name=name)


@ISOLATIONS
@pytest.mark.timing
def test_servers_open_concurrently_so_a_run_waits_for_the_slowest_not_the_sum(isolation: str) -> None:
    plugin = MCP(*(slow(f"s{i}") for i in range(N)), isolation=isolation)  # type: ignore[arg-type]

    async def main() -> float:
        started = time.monotonic()
        result, _ = await drive(plugin, call("s3__echo", {"text": "last"}))
        assert str(result.entries[-2].output) == "last"
        return time.monotonic() - started

    elapsed = run(main())
    print(
        f"[{isolation}] {N} servers, each {DELAY:g} s to start: run took {elapsed:.2f} s (sequential >= {N * DELAY:g} s)"
    )
    assert elapsed < (N - 1) * DELAY, elapsed


def test_when_one_server_fails_to_open_the_error_names_it_and_the_others_are_closed() -> None:
    plugin = MCP(
        slow("good1"), MCPServerStdio(command=PY, args=[RAW_SERVER, "--exit-on-start", "3"], name="bad"), slow("good2")
    )

    async def main() -> None:
        with pytest.raises(MCPError) as info:
            await drive(plugin, call("good1__echo", {"text": "x"}))
        assert "'bad'" in str(info.value) and info.value.exit_code == 3
        assert plugin.connections() == []  # every opened or opening server was closed; no_leaks checks processes

    run(main())
