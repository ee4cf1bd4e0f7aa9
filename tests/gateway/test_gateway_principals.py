"""Principals in ``lovia-mcp serve``: identities from the token file, access rules, per-principal servers, the audit log.

One gateway serves the module's end-to-end tests: five principals (alice may
use everything and read /metrics, bob one server, carol one tool of it, dave
a per-principal server whose tool list grows, ``default`` nothing),
per-principal servers and a shared one, the audit log and the principal
label on /metrics. Real clients over loopback: the MCP
SDK's (both eras) and raw HTTP where bytes are compared.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from _gateway import NOTIFY_WAIT, PY, Heard, Serve, raw, samples, sdk_client, server, shared_by_module
from conftest import ROOT, run

from lovia_mcp.gateway.access import Access, access_options
from lovia_mcp.gateway.audit import AuditLog, Caller, trace_id
from lovia_mcp.gateway.auth.tokens import Credential, read_token_file

pytestmark = pytest.mark.timeout(120)

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
CAROL = "carol-token-0123456789abcdef"
DAVE = "dave-token-0123456789abcdef00"
BARE = "bare-token-0123456789abcdef0"
# A start refused for a bad token file or access section: imports, no server started.
REFUSAL_WAIT = 30.0
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SECRET = "an argument the audit log never holds"
# An idle expiry of 0.5 s is swept every 0.25 s; the server's close is
# bounded by the connection's own close wait. Generous for a loaded machine.
IDLE_EXPIRY_WAIT = 20.0


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    folder = tmp_path_factory.mktemp("principals")
    g = Serve(
        folder,
        # hdr: a tool whose schema declares an Mcp-Param header the SDK checks.
        {
            "mine": raw(session="per-principal", idle=60),
            "brief": raw(session="per-principal", idle=0.5),
            "other": raw(),
            "hdr": server("header_server.py"),
            # Its tool list grows on demand (add_tool), a principal's own.
            "growpp": server("annotated_server.py", session="per-principal"),
        },
        "--audit-log",
        str(folder / "audit.log"),
        "--metrics-principal",
        token_lines=f"# principals\nalice {ALICE}\nbob   {BOB}\ncarol\t{CAROL}\ndave {DAVE}\n{BARE}\n",
        gateway={"access": {"alice": ["*", "/metrics"], "bob": ["mine"], "carol": ["mine/ech?"], "dave": ["growpp"]}},
    )
    with shared_by_module(g):
        yield g


def _audit(g: Serve) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(g.stderr_path).parent / "audit.log").read_text().splitlines()]


def _listed(g: Serve, token: str, path: str = "/mcp", mode: str = "legacy") -> list[str]:
    async def main() -> list[str]:
        async with sdk_client(g.base + path, _auth(token), mode=mode) as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    return run(main())


def _modern(g: Serve, token: str, name: str, path: str = "/mcp", **meta: Any) -> httpx.Response:
    """A 2026-07-28 tools/call by hand (no session), id 7, so two answers compare byte for byte.

    Its ``Mcp-Param-Region`` header disagrees with its ``region`` argument: a
    tool that declares that header (hdr's) would be refused for it (HTTP 400)
    if the SDK were given the tool's schema.
    """
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"text": SECRET, "region": "eu"}, "_meta": {**MODERN_META, **meta}},
    }
    return httpx.post(
        g.base + path,
        content=json.dumps(body).encode(),
        headers={
            **_auth(token),
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": name,
            "mcp-param-region": "us",
        },
        timeout=30,
    )


def _pid(result: Any) -> int:
    assert result.is_error is False, result
    return int(json.loads(result.content[0].text)["pid"])


# --------------------------------------------------------------------------- #
# Access: what each principal sees
# --------------------------------------------------------------------------- #
def test_each_principal_lists_only_the_tools_its_access_rules_allow(gateway: Serve) -> None:
    everything = _listed(gateway, ALICE)
    assert "mine__pid" in everything and "other__pid" in everything
    assert _listed(gateway, BOB) == [t for t in everything if t.startswith("mine__")]
    assert _listed(gateway, CAROL) == ["mine__echo"]
    # A principal the access section does not name may use nothing.
    assert _listed(gateway, BARE) == []
    # The same on a per-server endpoint, and for a 2026-07-28 client.
    assert _listed(gateway, CAROL, "/servers/mine/mcp", mode="auto") == ["echo"]
    assert _listed(gateway, BOB, "/servers/mine/mcp") == [t.removeprefix("mine__") for t in _listed(gateway, BOB)]


def test_a_server_a_principal_may_not_see_has_no_endpoint_for_it_and_metrics_only_for_who_may_read_them(
    gateway: Serve,
) -> None:
    def get(path: str, token: str) -> httpx.Response:
        return httpx.post(gateway.base + path, json={}, headers=_auth(token), timeout=30)

    hidden, absent = get("/servers/other/mcp", BOB), get("/servers/nope/mcp", BOB)
    assert hidden.status_code == absent.status_code == 404
    assert hidden.content.replace(b"other", b"NAME") == absent.content.replace(b"nope", b"NAME")
    assert b"other" not in absent.content and b"mine" in absent.content
    # /metrics names every server: only a principal given "/metrics" reads it.
    assert httpx.get(gateway.base + "/metrics", headers=_auth(ALICE), timeout=30).status_code == 200
    denied = httpx.get(gateway.base + "/metrics", headers=_auth(BOB), timeout=30)
    assert denied.status_code == 404 and b"other" not in denied.content


# --------------------------------------------------------------------------- #
# Access: a forbidden call
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    ("token", "path", "forbidden", "absent"),
    [
        (BOB, "/mcp", "other__echo", "nope__echo"),  # a server it may not use
        (BOB, "/mcp", "hdr__route", "nope__route"),  # the same, where the schema would answer for the tool
        (CAROL, "/mcp", "mine__pid", "mine__nope"),  # a tool of its server that its glob leaves out
        (CAROL, "/servers/mine/mcp", "pid", "nope"),  # the same on the server's own endpoint
    ],
)
def test_a_forbidden_call_is_answered_byte_for_byte_as_an_unknown_tool_and_audited_as_denied(
    gateway: Serve, token: str, path: str, forbidden: str, absent: str
) -> None:
    traceparent = f"00-{TRACE}-00f067aa0ba902b7-01"
    refused = _modern(gateway, token, forbidden, path, traceparent=traceparent)
    unknown = _modern(gateway, token, absent, path)
    assert refused.status_code == unknown.status_code
    assert refused.json()["error"]["code"] == -32602, refused.text
    assert refused.content.replace(forbidden.encode(), b"NAME") == unknown.content.replace(absent.encode(), b"NAME")
    # The SDK's client in a 2025 session hears the same.
    from mcp.shared.exceptions import MCPError

    async def refusal(name: str) -> str:
        async with sdk_client(gateway.base + path, _auth(token), mode="legacy") as client:
            try:
                await client.call_tool(name, {"text": SECRET})
            except MCPError as exc:
                return repr(exc.error).replace(name, "NAME")
        raise AssertionError(f"{name} was served")

    errors = [run(refusal(forbidden)), run(refusal(absent))]
    assert errors[0] == errors[1] and "unknown tool" in errors[0], errors
    principal = {ALICE: "alice", BOB: "bob", CAROL: "carol"}[token]
    lines = [line for line in _audit(gateway) if line["principal"] == principal and line["endpoint"] == path]
    server, _, tool = forbidden.rpartition("__")
    assert {
        "principal": principal,
        "endpoint": path,
        "server": server or "mine",
        "tool": tool,
        "outcome": "denied",
        "trace_id": TRACE,
    }.items() <= lines[-4].items()
    assert [line["outcome"] for line in lines[-4:]] == ["denied", "unknown", "denied", "unknown"]
    assert SECRET not in (Path(gateway.stderr_path).parent / "audit.log").read_text()


def test_an_unknown_tools_error_names_only_the_servers_the_principal_may_see(gateway: Serve) -> None:
    def servers(token: str) -> list[str]:
        answer = _modern(gateway, token, "nope__echo")
        return list(answer.json()["error"]["data"]["servers"])

    assert servers(BOB) == servers(CAROL) == ["mine"]
    assert servers(BARE) == []
    assert {"mine", "other", "hdr"} <= set(servers(ALICE))


# A tool name as long as a client cares to send (within the body cap).
HUGE_NAME_CHARS = 1_000_000


def test_a_megabyte_tool_name_is_cut_in_its_audit_line(gateway: Serve) -> None:
    from mcp.shared.exceptions import MCPError

    from lovia_mcp.gateway.audit import MAX_NAME_CHARS

    log = Path(gateway.stderr_path).parent / "audit.log"
    name = "mine__" + "x" * HUGE_NAME_CHARS

    async def main() -> None:
        async with sdk_client(gateway.url, _auth(BOB), mode="legacy") as client:
            with pytest.raises(MCPError):
                await client.call_tool(name, {})

    before = log.stat().st_size
    run(main())
    grown = log.stat().st_size - before
    line = next(line for line in reversed(_audit(gateway)) if line["principal"] == "bob")
    print(f"the audit log grew by {grown} bytes for a {len(name):,}-character tool name")
    assert line["outcome"] == "unknown" and line["tool"] == name.removeprefix("mine__")[:MAX_NAME_CHARS]
    assert grown < 2 * MAX_NAME_CHARS + 1_000


# --------------------------------------------------------------------------- #
# Per-principal servers
# --------------------------------------------------------------------------- #
def test_each_principal_has_a_server_process_of_its_own_shared_by_its_sessions_and_stateless_requests(
    gateway: Serve,
) -> None:
    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with sdk_client(gateway.url, _auth(ALICE), mode="legacy") as alice:
            out["alice"] = _pid(await alice.call_tool("mine__pid", {}))
            out["shared"] = _pid(await alice.call_tool("other__pid", {}))
            async with sdk_client(gateway.url, _auth(BOB), mode="legacy") as bob1:
                async with sdk_client(gateway.url, _auth(BOB), mode="legacy") as bob2:
                    out["bob"] = [
                        _pid(await bob1.call_tool("mine__pid", {})),
                        _pid(await bob2.call_tool("mine__pid", {})),
                    ]
            # A 2026-07-28 client has no session: it reaches its principal's server all the same.
            async with sdk_client(gateway.url, _auth(BOB), mode="auto") as stateless:
                out["bob"].append(_pid(await stateless.call_tool("mine__pid", {})))
            out["alice_again"] = _pid(await alice.call_tool("mine__pid", {}))
        return out

    out = run(main())
    print(f"pids: {out}")
    assert out["bob"][0] == out["bob"][1] == out["bob"][2], "one principal's sessions and requests share a server"
    assert out["alice"] == out["alice_again"]
    assert len({out["alice"], out["bob"][0], out["shared"]}) == 3, "another principal's calls reached the server"
    served = {p.pid for p in gateway.tree()}
    assert out["alice"] in served and out["bob"][0] in served
    lines = [line for line in _audit(gateway) if line["tool"] == "pid" and line["outcome"] == "ok"]
    assert {line["principal"] for line in lines} >= {"alice", "bob"}
    # A trace id is there when the client sent trace context (the SDK client does once the test
    # process has a tracer provider, as after the tracing tests); it is never anything else.
    assert all(line["duration_ms"] >= 0 for line in lines)
    assert all(line["trace_id"] is None or re.fullmatch("[0-9a-f]{32}", line["trace_id"]) for line in lines)
    metrics = samples(httpx.get(gateway.base + "/metrics", headers=_auth(ALICE), timeout=30).text)
    assert metrics['lovia_mcp_calls_total{principal="bob",server="mine",tool="pid",outcome="ok"}'] >= 3
    assert metrics['lovia_mcp_sessions{server="mine"}'] >= 2


def test_a_principals_server_is_closed_after_its_idle_expiry_and_its_next_call_gets_a_fresh_one(
    gateway: Serve,
) -> None:
    async def main() -> tuple[int, int]:
        async with sdk_client(gateway.url, _auth(ALICE), mode="auto") as client:
            first = _pid(await client.call_tool("brief__pid", {}))
            _, alive = await asyncio.to_thread(psutil.wait_procs, [psutil.Process(first)], IDLE_EXPIRY_WAIT)
            assert alive == [], "the idle principal's server is still running"
            return first, _pid(await client.call_tool("brief__pid", {}))

    first, second = run(main())
    assert first != second and not psutil.pid_exists(first)


def test_a_per_principal_servers_tool_list_change_is_told_to_its_own_principals_clients_in_both_eras(
    gateway: Serve,
) -> None:
    # That no other principal is told is the notifier's unit test (tests/gateway/test_gateway_notify.py):
    # a notification's absence cannot be awaited here. This is the path through the real gateway.
    from mcp.client.subscriptions import ToolsListChanged

    mine, theirs = f"t{os.urandom(4).hex()}", f"t{os.urandom(4).hex()}"

    async def main() -> tuple[Any, set[str], set[str]]:
        a, d = Heard(), Heard()
        async with (
            sdk_client(gateway.url, _auth(ALICE), mode="legacy", message_handler=a, stream_open=a.stream_open) as alice,
            sdk_client(gateway.url, _auth(DAVE), mode="legacy", message_handler=d, stream_open=d.stream_open) as dave,
            sdk_client(gateway.url, _auth(DAVE), mode="auto") as modern,
        ):
            await asyncio.wait_for(asyncio.gather(a.stream_open.wait(), d.stream_open.wait()), NOTIFY_WAIT)
            async with modern.listen(tools_list_changed=True) as sub:
                await alice.call_tool("growpp__add_tool", {"text": mine})
                await a.next()
                await dave.call_tool("growpp__add_tool", {"text": theirs})
                await d.next()
                event = await asyncio.wait_for(anext(aiter(sub)), NOTIFY_WAIT)
            return (
                event,
                {t.name for t in (await alice.list_tools()).tools},
                {t.name for t in (await modern.list_tools()).tools},
            )

    event, alice_lists, dave_lists = run(main())
    assert isinstance(event, ToolsListChanged)
    assert f"growpp__{mine}" in alice_lists and f"growpp__{theirs}" not in alice_lists
    assert f"growpp__{theirs}" in dave_lists and f"growpp__{mine}" not in dave_lists
    assert all(name.startswith("growpp__") for name in dave_lists)


# --------------------------------------------------------------------------- #
# Units: the token file, the access section, the audit log
# --------------------------------------------------------------------------- #
@pytest.mark.unit
def test_the_token_file_names_principals_and_a_bare_token_is_principal_default(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# comment\n\nalice {ALICE}\n  {BARE}  \nalice\t{BOB}\n")
    assert read_token_file(str(path)) == [
        Credential("alice", ALICE),
        Credential("default", BARE),
        Credential("alice", BOB),
    ]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"alice {ALICE} extra\n", "line 1 has 3 fields"),
        (f"al/ice {ALICE}\n", "is not a principal name"),
        ("alice short\n", "shorter than 16"),
        (f"alice {ALICE}\nbob {ALICE}\n", "line 2 repeats the token of line 1"),
        ("# none\n", "holds no token"),
    ],
)
def test_a_bad_token_file_line_is_a_clear_error_with_a_hint(tmp_path: Path, text: str, expected: str) -> None:
    from lovia.exceptions import UserError

    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        read_token_file(str(path))
    assert expected in str(caught.value) and caught.value.hint, caught.value


@pytest.mark.unit
def test_access_rules_allow_whole_servers_tool_globs_everything_and_nothing_else() -> None:
    access = Access({"a": ["*"], "b": ["s1", "s2/read_*"], "c": ["s2/read_*", "s2"], "m": ["/metrics"]})
    assert access.allows("a", "s9", "anything") and not access.metrics("a")
    assert access.allows("b", "s1", "write") and access.allows("b", "s2", "read_file")
    assert not access.allows("b", "s2", "write_file") and not access.allows("b", "s3", "read_x")
    assert access.allows("c", "s2", "write_file"), "a whole-server rule wins over a glob of the same server"
    assert not access.sees("m", "s1") and access.metrics("m")
    assert not access.allows("nobody", "s1", "x") and not access.sees("nobody", "s1")
    everyone = Access(None)
    assert everyone.allows("nobody", "s1", "x") and everyone.sees("x", "s") and everyone.metrics("x")


@pytest.mark.unit
def test_a_tool_glob_matches_the_whole_tool_name_not_a_part_of_it() -> None:
    access = Access({"ci": ["shell/read_*", "shell/ls?"]})
    assert access.allows("ci", "shell", "read_all") and access.allows("ci", "shell", "lsx")
    assert not access.allows("ci", "shell", "unread_all")
    assert not access.allows("ci", "shell", "xlsx") and not access.allows("ci", "shell", "lsxx")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"access": {"a": ["nope"]}}, "names no configured server"),
        ({"access": {"a": ["s1/"]}}, "names no configured server"),
        ({"access": {"a": "s1"}}, "must have a list of rules"),
        ({"access": {"a b": ["s1"]}}, "is not a principal name"),
        ({"access": ["a"]}, "must be an object of principal"),
        ({"acess": {}}, "only key is 'access'"),
    ],
)
def test_a_bad_access_section_is_a_clear_error_with_a_hint(section: dict[str, Any], expected: str) -> None:
    from lovia.exceptions import UserError

    with pytest.raises(UserError) as caught:
        access_options({"mcpServers": {"s1": {}}, "gateway": section}, ["s1"])
    assert expected in str(caught.value) and caught.value.hint, caught.value


@pytest.mark.unit
def test_the_config_loader_lets_the_gateway_section_through_for_check_and_the_plugin() -> None:
    from lovia_mcp.opening.config_file.loader import load_servers

    config = {"mcpServers": {"s1": raw()}, "gateway": {"access": {"a": ["s1"]}}}
    assert [s.name for s in load_servers(config)] == ["s1"]
    assert access_options(config, ["s1"]).allows("a", "s1", "any")


@pytest.mark.unit
def test_the_audit_trace_id_is_the_w3c_trace_id_from_meta_first_then_the_header() -> None:
    header = f"00-{'a' * 32}-{'b' * 16}-01".encode()
    assert trace_id({"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}, header) == TRACE
    assert trace_id(None, header) == "a" * 32
    assert trace_id({"traceparent": "junk"}, None) is None
    assert trace_id({"traceparent": f"00-{'0' * 32}-{'b' * 16}-01"}, None) is None  # the invalid all-zero id


@pytest.mark.unit
def test_a_failed_audit_write_is_logged_once_a_minute_and_the_call_is_still_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lovia_mcp_worker.wire.mcpjson import ContentBlock

    from lovia_mcp import MCPServerStdio
    from lovia_mcp.gateway import app, options
    from lovia_mcp.gateway.upstreams import Upstream
    from lovia_mcp.render import MCPToolResult

    class Answering(Upstream):
        def tools(self, holder: Any = None) -> list[Any]:
            return []

        async def call(
            self,
            holder: Any,
            raw_name: str,
            arguments: dict[str, Any],
            principal: str = "",
            listener: Any = None,
        ) -> Any:
            return MCPToolResult(content=[ContentBlock(type="text", text="done")])

    backend = Answering(MCPServerStdio(name="b", command=sys.executable, args=["-c", ""]), options.Served())
    audit = AuditLog("/dev/full")  # every write fails: ENOSPC
    gateway = app.Gateway([backend], loopback=True, max_body_bytes=1024, max_sessions=1, session_idle=60.0, audit=audit)
    caller = Caller("alice", "/mcp")
    with caplog.at_level(logging.WARNING, logger="lovia_mcp.gateway"):
        for _ in range(3):
            result = run(gateway._call(backend, "t", {}, None, caller))  # noqa: SLF001 - the call path itself
            assert result["isError"] is False and result["content"][0]["text"] == "done"
    warnings = [r for r in caplog.records if "audit log" in r.getMessage()]
    assert len(warnings) == 1 and audit.failures == 3, caplog.text
    audit.close()


@pytest.mark.unit
def test_each_token_is_compared_in_constant_time_and_the_matching_ones_principal_is_the_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hmac

    from lovia_mcp.gateway import app
    from lovia_mcp.gateway.auth import tokens as scheme
    from lovia_mcp.gateway.principals import SCOPE_KEY

    tokens, principals = [ALICE, BOB, CAROL], ["alice", "bob", "alice"]
    gateway = app.Gateway(
        [],
        auth=scheme.TokenFile([scheme.Credential(p, t) for p, t in zip(principals, tokens)]),
        loopback=True,
        max_body_bytes=1024,
        max_sessions=1,
        session_idle=60.0,
    )
    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(scheme.hmac, "compare_digest", spy)
    for given, principal in ((ALICE, "alice"), (BOB, "bob"), (CAROL, "alice"), (BARE, None)):
        compared.clear()
        scope: dict[str, Any] = {"type": "http", "headers": [(b"authorization", f"Bearer {given}".encode())]}
        refused = run(gateway._authenticate(scope))  # noqa: SLF001 - the check itself is the point
        assert (refused is None) is (principal is not None)
        assert scope.get(SCOPE_KEY) == principal
        assert compared == [t.encode() for t in tokens]


# --------------------------------------------------------------------------- #
# Start-up refusals
# --------------------------------------------------------------------------- #
def test_an_access_section_naming_a_principal_no_token_has_stops_serve_with_a_hint(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"s": raw()}, "gateway": {"access": {"alcie": ["s"]}}}))
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\n")
    proc = subprocess.run(
        [
            PY,
            "-m",
            "lovia_mcp",
            "serve",
            "--config",
            str(config),
            "--token-file",
            str(tokens),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=REFUSAL_WAIT,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert "'alcie'" in proc.stderr and "alice" in proc.stderr and "hint" in proc.stderr and proc.stdout == ""
