"""Sandbox denials attributed to the call: the model reads what the box refused, and why.

A real sandboxed server (``tests/servers/escape_server.py``) fetches a URL
through the proxy named by its ``HTTP_PROXY``, as any client honouring the
proxy variables does; the destination is outside its allowlist (or its
network is off), so the sandbox refuses it. Nothing leaves the loopback: the
refused names are never resolved, and the one real destination is a
listener of this test's on 127.0.0.1.

The agent runs in a fresh interpreter (``AGENT``), with an in-memory
OpenTelemetry exporter as its provider and a lovia ``Agent`` driven by a
``ScriptedProvider``: the model's view of the call, its span's events, the
result's ``meta`` and ``stats()`` come back as JSON. The same script runs as
root and as nobody, on each backend.

Without the attribution (the session host's hooks taken out), the proxy
still refuses and logs, but the call's result carries no denial: the model
reads only the server's own text, and these tests fail on the missing line.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ESCAPE_SERVER, PY, SERVERS, as_nobody, run
from lovia_mcp_worker.sandbox import bwrap, landlock
from lovia_mcp_worker.sandbox.egress import netbridge, reporter
from lovia_mcp_worker.session import denials as session_denials
from lovia_mcp_worker.session.denials import MAX_DISTINCT, Attribution
from lovia_mcp_worker.wire.messages import Denied
from lovia_mcp_worker.wire.refusals import EgressRefusal

from lovia_mcp import MCPServerStdio, Sandbox
from lovia_mcp.gateway.app import result_json
from lovia_mcp.gateway.metrics import Metrics
from lovia_mcp.render import DENIED_META, MCPToolResult, default_renderer, denial_meta

# Bound on one agent's whole run: an interpreter, a forkserver, a sandboxed
# server opened twice and called twice (about 2 s here; CI is slower).
AGENT_WAIT = 60.0

OVERLAP_SERVER = str(SERVERS / "overlap_server.py")
# Bound on a read the sandbox refuses at once (generous: a loaded CI).
READ_WAIT = 20.0

AGENT = r"""
import asyncio, json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from lovia import Agent, Runner
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import ToolResultEntry
from lovia_mcp import MCP, MCPServerStdio, Sandbox

cwd, escape, backend, network, url = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]

def server():
    return MCPServerStdio(command=sys.executable, args=[escape], name="egress", cwd=cwd,
                          sandbox=Sandbox(backend=backend, network=network))

async def main():
    model = ScriptedProvider([call("egress__proxy_get", {"url": url}), text("done")])
    agent = Agent(name="fetcher", model=model, plugins=[MCP(server())])
    run = await Runner.run(agent, "fetch it")
    seen = [e.output for e in run.entries if isinstance(e, ToolResultEntry)]
    events = [
        {"name": e.name, **dict(e.attributes or {})}
        for s in exporter.get_finished_spans() if s.name == "tools/call proxy_get" for e in s.events
    ]
    async with server().session() as conn:
        result = await conn.call_tool("proxy_get", {"url": url})
        stats = await conn.stats()
    print(json.dumps({"model": seen, "events": events, "meta": result.meta, "text": str(result),
                      "denials": stats.sandbox_denials, "backend": stats.sandbox}))

asyncio.run(main())
"""


def _bwrap_works() -> str | None:
    return bwrap.BwrapBackend().unavailable(_box())


def _box() -> Any:
    from lovia_mcp_worker.wire.confinement import Sandbox as WireSandbox

    return WireSandbox(network=["allowed.test"])


BACKENDS = [
    pytest.param(
        "bwrap", marks=pytest.mark.skipif(bool(_bwrap_works()), reason=f"bwrap unavailable: {_bwrap_works()}")
    ),
    pytest.param(
        "landlock",
        marks=pytest.mark.skipif(
            bool(landlock.unavailable(_box())), reason=f"Landlock unavailable: {landlock.unavailable(_box())}"
        ),
    ),
]


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts (none must come)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        # shutdown wakes the accept; the thread then ends on its own.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(timeout=AGENT_WAIT)


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    try:
        yield found
    finally:
        found.close()


def run_agent(backend: str, network: object, url: str, work: Path, *, nobody: bool = False) -> dict[str, Any]:
    """The agent's report (``AGENT``); as nobody in a folder of nobody's own, else in ``work``."""
    args = (ESCAPE_SERVER, backend, json.dumps(network), url)
    if nobody:
        proc = as_nobody(AGENT, *args)
    else:
        proc = subprocess.run([PY, "-c", AGENT, str(work), *args], capture_output=True, text=True, timeout=AGENT_WAIT)
        print(proc.stdout, proc.stderr[-3000:])
        assert proc.returncode == 0, proc.stderr[-3000:]
    seen: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return seen


def check_refused(
    seen: dict[str, Any], *, backend: str, refusal: EgressRefusal, reason: str, why: str, server_says: str
) -> None:
    kind, target = refusal.kind, refusal.target
    line = f"[sandbox] blocked a connection to {target} ({why})"
    # The model reads the server's own answer, then one plain line naming the host.
    [output] = seen["model"]
    assert output.startswith("ok 403 " + server_says), output
    assert output.endswith("\n" + line), output
    assert seen["text"].startswith("ok 403 ")
    [entry] = seen["meta"][DENIED_META]
    assert entry == {
        "kind": kind,
        "target": target,
        "reason": reason,
        "count": 1,
        "shared": False,
        "host": refusal.host,
        "port": refusal.port,
        "why": refusal.why,
    }
    [event] = [e for e in seen["events"] if e["name"] == "lovia_mcp.sandbox.denied"]
    assert event["lovia_mcp.denial.target"] == target and event["lovia_mcp.denial.kind"] == kind, event
    # One refusal per connection: the agent's run, then the session's call.
    assert seen["denials"] == 1 and seen["backend"] == backend, seen


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_a_request_to_a_host_outside_the_allowlist_is_named_as_blocked_in_the_result_the_model_reads(
    backend: str, nobody: bool, tmp_path: Path
) -> None:
    seen = run_agent(backend, ["allowed.test"], "http://evil.example/secrets", tmp_path, nobody=nobody)
    check_refused(
        seen,
        backend=backend,
        refusal=EgressRefusal(kind="allowlist", host="evil.example", port=80, why="host"),
        reason="not in the network allowlist",
        why="not in this server's network allowlist",
        server_says="lovia-mcp sandbox: evil.example is not in the sandbox's network allowlist.",
    )


@pytest.mark.skipif(bool(_bwrap_works()), reason="bubblewrap with user namespaces is needed")
@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_with_the_network_off_a_proxy_aware_client_is_refused_by_a_deny_all_proxy_and_nothing_leaves_the_box(
    listener: Listener, nobody: bool, tmp_path: Path
) -> None:
    # The host's own loopback service: the deny-all listener must not reach it
    # (no route out), whatever the request names.
    seen = run_agent("bwrap", False, f"http://127.0.0.1:{listener.port}/", tmp_path, nobody=nobody)
    check_refused(
        seen,
        backend="bwrap",
        refusal=EgressRefusal(kind="network_off", host="127.0.0.1", port=listener.port, why="off"),
        reason="the network is off for this server",
        why="this server has no network access",
        server_says="lovia-mcp sandbox: this server has no network access",
    )
    assert listener.accepted == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_refusal_during_two_overlapping_calls_is_given_to_both_each_saying_it_may_be_the_others(
    backend: str, tmp_path: Path
) -> None:
    """One server, two calls in flight: ``hold`` waits on a FIFO while ``proxy_get`` is refused."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)

    async def main() -> tuple[MCPToolResult, MCPToolResult]:
        server = MCPServerStdio(
            command=PY,
            args=[OVERLAP_SERVER],
            name="overlap",
            cwd=str(tmp_path),
            sandbox=Sandbox(backend=backend, network=["allowed.test"]),
        )
        async with server.session() as conn:
            held = asyncio.ensure_future(conn.call_tool("hold", {"path": str(gate)}))
            fetched = await conn.call_tool("proxy_get", {"url": "http://evil.example/"})
            # The held call is still in flight (it answers only after the gate opens).
            assert not held.done()
            await asyncio.to_thread(gate.write_text, "go\n")
            return await held, fetched

    held, fetched = run(asyncio.wait_for(main(), AGENT_WAIT))
    print(held.meta, fetched.meta)
    assert str(held).startswith("ok released") and str(fetched).startswith("ok 403")
    for result in (held, fetched):
        assert result.meta is not None
        [entry] = result.meta[DENIED_META]
        assert (entry["target"], entry["shared"]) == ("evil.example:80", True), entry
        assert default_renderer(result, None).endswith(  # type: ignore[arg-type]
            "[sandbox] blocked a connection to evil.example:80 (not in this server's network allowlist); "
            "other calls were in flight on this server, so it may have been theirs"
        )


# -- the deny-all listener ---------------------------------------------------- #
# Stands for the server behind the deny-all route: says which descriptors it
# holds besides its stdio and which children it has, then, told that the
# listener is there (a line on stdin, as a worker lets a call through), asks
# it for a tunnel.
CLOSED_CLIENT = r"""
import os, socket, sys
port = int(sys.argv[1])
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2)
children = open(f"/proc/self/task/{os.getpid()}/children").read().split()
print("fds", len(fds) - 1, "children", len(children), flush=True)  # less the listdir's own
sys.stdin.readline()
conn = socket.create_connection(("127.0.0.1", port), timeout=10)
conn.sendall(b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
answer = b""
while data := conn.recv(65536):
    answer += data
print(answer.decode())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Reported:
    """A reporter that keeps what it is told and wakes a waiter once ``last`` is among it."""

    def __init__(self, last: str) -> None:
        self.seen: list[EgressRefusal] = []
        self.last = last
        self.done = asyncio.Event()

    def __call__(self, refusal: EgressRefusal) -> None:
        self.seen.append(refusal)
        if refusal.target == self.last:
            self.done.set()


@pytest.mark.skipif(bool(_bwrap_works()), reason="bubblewrap with user namespaces is needed")
@pytest.mark.parametrize("entered_by", ["thread", "helper", "helper with threads at fork"])
def test_the_deny_all_listener_in_the_box_answers_403_reports_the_request_and_closes_when_the_box_ends(
    entered_by: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The worker's listener lives in the box's network namespace only; the server gets no descriptor or child of it.

    ``helper``: the forked helper an ordinary user's worker uses, here as root too.
    ``helper with threads at fork``: the helper's fork comes out with a
    thread, as in a process with an OpenTelemetry tracer provider; it
    cannot enter the box's user namespace and runs the helper program afresh.
    """
    from lovia_mcp_worker.wire.confinement import Sandbox as WireSandbox

    monkeypatch.setattr(netbridge, "_thread_enters", entered_by == "thread" and netbridge._thread_enters)
    if entered_by == "helper with threads at fork":
        request.getfixturevalue("threads_at_fork")

    reported = Reported("evil.example:443")
    box = WireSandbox(network=False)

    async def main() -> str:
        reporter.reporting(reported)
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        port = netbridge.BRIDGE_PORT
        status = netbridge.route_closed(env)
        seccomp_fd = bwrap.filter_fd(box)
        try:
            assert env["HTTP_PROXY"] == env["https_proxy"] == f"http://127.0.0.1:{port}"
            argv = bwrap.command(
                box, [PY, "-c", CLOSED_CLIENT, str(port)], cwd=None, env=env, seccomp_fd=seccomp_fd, status_fd=status
            )
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                pass_fds=(status, seccomp_fd),
            )
        finally:
            os.close(status)
            os.close(seccomp_fd)
        # The listener is made once bwrap names the box; only then may the server try.
        [ready] = reporter.taken()
        await ready
        [closed] = netbridge.boxes(reported)
        assert closed.refusing is not None
        # Not in this process's own network namespace: nothing listens on the port here.
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=READ_WAIT):
            pass
        out, _ = await proc.communicate(b"go\n")
        await reported.done.wait()
        # bwrap has ended: its status pipe's end of file closes the listener.
        await closed.ended.wait()
        assert netbridge.boxes(reported) == []
        return out.decode()

    out = run(asyncio.wait_for(main(), AGENT_WAIT))
    print(out)
    assert out.startswith("fds 0 children 0\n"), out
    assert "HTTP/1.1 403 Forbidden (the network is off for this server)\r\n" in out
    assert out.rstrip().endswith(
        "this server has no network access (its sandbox has network=False). "
        "To reach a host, list it in Sandbox(network=[...])."
    )
    assert reported.seen == [EgressRefusal(kind="network_off", host="evil.example", port=443, why="off")]


async def _ask(port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    answer = await reader.read()
    writer.close()
    return answer


def test_request_lines_a_box_sends_are_parsed_as_requests_and_anything_else_is_dropped() -> None:
    """The listener, served here on a free port: only a well-formed proxy request line reaches the reporter."""
    reported = Reported("last.example:443")
    heads = [
        b"GET / HTTP/1.1\r\n\r\n",  # origin form: not a proxy request
        b"CONNECT no-port.example HTTP/1.1\r\n\r\n",
        b"\xff\xfe garbage\r\n\r\n",
        # Too long, and its tail shaped like a request: dropped whole.
        b"x" * (netbridge.REPORT_LINE_MAX + 10) + b" CONNECT tail.example:443 HTTP/1.1\r\n\r\n",
        # Past the head's bound without an end: the first line is still all it reads.
        b"GET http://[::1]:8080/x HTTP/1.1\r\n" + b"X: " + b"y" * netbridge.HEAD_MAX,
        b"CONNECT last.example:443 HTTP/1.1\r\n\r\n",
    ]

    async def main() -> list[bytes]:
        listener = socket.create_server(("127.0.0.1", 0))
        refusing = netbridge.Refusing(listener, reported)
        try:
            port = listener.getsockname()[1]
            answers = [await _ask(port, head) for head in heads]
            await reported.done.wait()
            return answers
        finally:
            refusing.close()

    answers = run(asyncio.wait_for(main(), AGENT_WAIT))
    assert all(a.startswith(b"HTTP/1.1 403 Forbidden") for a in answers), answers
    assert [r.target for r in reported.seen] == ["[::1]:8080", "last.example:443"]


def test_a_box_holding_more_connections_than_the_bound_gets_the_extra_ones_closed_unanswered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server looping on connect() costs the worker at most MAX_CONNECTIONS connections; the held ones still get 403."""
    monkeypatch.setattr(netbridge, "MAX_CONNECTIONS", 2)
    reported = Reported("late.example:443")

    async def main() -> tuple[bytes, list[bytes]]:
        listener = socket.create_server(("127.0.0.1", 0))
        refusing = netbridge.Refusing(listener, reported)
        try:
            port = listener.getsockname()[1]
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                # It asks as well, and is not answered: closed at accept, unread.
                extra_writer.write(b"CONNECT extra.example:443 HTTP/1.1\r\n\r\n")
                extra = await extra_reader.read()
            except ConnectionResetError:
                extra = b""
            extra_writer.close()
            answers = []
            for reader, writer in held:
                writer.write(b"CONNECT late.example:443 HTTP/1.1\r\n\r\n")
                answers.append(await reader.read())
                writer.close()
            return extra, answers
        finally:
            refusing.close()

    extra, answers = run(asyncio.wait_for(main(), AGENT_WAIT))
    assert extra == b""
    assert all(a.startswith(b"HTTP/1.1 403 Forbidden") for a in answers), answers
    assert [r.target for r in reported.seen] == ["late.example:443"] * 2


# -- attribution (pure logic: which calls a refusal belongs to) -------------- #
def _refused(host: str = "evil.example", port: int = 443) -> EgressRefusal:
    return EgressRefusal(kind="allowlist", host=host, port=port, why="host")


def test_a_refusal_while_two_calls_are_in_flight_goes_to_both_marked_shared_and_a_later_one_to_the_one_left() -> None:
    attribution = Attribution(lambda _level, _message: None)
    attribution(_refused("before.example"))  # no call in flight: counted, attributed to none
    attribution.begin(1)
    attribution.begin(2)
    attribution(_refused())
    attribution(_refused())
    [first] = attribution.end(1)
    attribution(_refused("after.example", 80))
    second = attribution.end(2)
    assert (first.refusal.target, first.count, first.shared) == ("evil.example:443", 2, True)
    assert [(d.refusal.target, d.count, d.shared) for d in second] == [
        ("evil.example:443", 2, True),
        ("after.example:80", 1, False),
    ]
    assert attribution.total == 4
    assert attribution.end(3) == []


def test_calls_wait_for_the_helpers_a_launch_started_and_give_up_on_one_that_never_gets_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logged: list[str] = []
    attribution = Attribution(lambda _level, message: logged.append(message))

    async def main() -> tuple[int, int, bool]:
        attribution.launching()
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        reporter.expect(ready)
        attribution.adopt()
        waiting = len(attribution.starting)
        loop.call_soon(ready.set_result, None)
        await attribution.settled()
        after = len(attribution.starting)  # a ready helper holds no call
        never: asyncio.Future[None] = loop.create_future()
        reporter.expect(never)
        attribution.adopt()
        monkeypatch.setattr(session_denials, "HELPER_WAIT", 0.01)
        await asyncio.gather(attribution.settled(), attribution.settled())  # two calls, one wait
        return waiting, after, never.cancelled() and not attribution.starting

    assert run(main()) == (1, 0, True)
    assert len(logged) == 1 and "was not made within 0.01 s" in logged[0], logged


def test_a_call_lists_at_most_max_distinct_denials_and_still_counts_repeats_of_those_it_lists() -> None:
    attribution = Attribution(lambda _level, _message: None)
    attribution.begin(1)
    for i in range(MAX_DISTINCT + 5):
        attribution(_refused(f"h{i}.example"))
    attribution(_refused("h0.example"))
    listed = attribution.end(1)
    assert len(listed) == MAX_DISTINCT
    assert listed[0].count == 2
    assert attribution.total == MAX_DISTINCT + 6


# -- what the model, a gateway client and the metrics get ------------------ #
def _result(*denied: Denied) -> MCPToolResult:
    return MCPToolResult(content=[], meta={DENIED_META: [denial_meta(d) for d in denied]})


def test_each_distinct_denial_is_one_plain_line_saying_why_and_whether_another_call_may_own_it() -> None:
    inside = EgressRefusal(kind="internal_address", host="inside.test", port=80, why="loopback", address="127.0.0.1")
    result = _result(
        Denied(refusal=_refused()),
        Denied(refusal=EgressRefusal(kind="allowlist", host="api.x", port=8080, why="port"), count=3),
        Denied(refusal=inside, shared=True),
    )
    assert result.meta is not None
    assert [(e["target"], e["reason"]) for e in result.meta[DENIED_META]] == [
        ("evil.example:443", "not in the network allowlist"),
        ("api.x:8080", "port 8080 not in the network allowlist"),
        ("inside.test:80", "resolves to 127.0.0.1, a loopback address"),
    ]
    assert default_renderer(result, None).splitlines()[-3:] == [  # type: ignore[arg-type]
        "[sandbox] blocked a connection to evil.example:443 (not in this server's network allowlist)",
        "[sandbox] blocked a connection to api.x:8080 (port 8080 not in this server's network allowlist), 3 times",
        "[sandbox] blocked a connection to inside.test:80 (resolves to 127.0.0.1, a loopback address); "
        "other calls were in flight on this server, so it may have been theirs",
    ]


def test_a_meta_entry_without_a_refusals_facts_is_shown_with_its_own_reason() -> None:
    """A custom renderer's own entry (or one from elsewhere) is not reworded: its reason is all there is."""
    entry = {"kind": "allowlist", "target": "evil.example:443", "reason": "blocked upstream", "count": 1}
    result = MCPToolResult(content=[], meta={DENIED_META: [entry]})
    assert default_renderer(result, None).splitlines()[-1] == (  # type: ignore[arg-type]
        "[sandbox] blocked a connection to evil.example:443 (blocked upstream)"
    )


def test_the_gateway_gives_its_client_the_lines_and_the_meta_and_counts_denials_by_server_tool_and_kind() -> None:
    off = EgressRefusal(kind="network_off", host="evil.example", port=443, why="off")
    entry = {
        "kind": "network_off",
        "target": "evil.example:443",
        "reason": "the network is off for this server",
        "count": 2,
        "shared": False,
        "host": "evil.example",
        "port": 443,
        "why": "off",
    }
    body = result_json(_result(Denied(refusal=off, count=2)))
    assert body["_meta"] == {DENIED_META: [entry]}
    assert body["content"][-1] == {
        "type": "text",
        "text": "[sandbox] blocked a connection to evil.example:443 (this server has no network access), 2 times",
    }
    metrics = Metrics()
    metrics.sandbox_denied("web", "fetch", "network_off", 2)
    metrics.sandbox_denied("web", "fetch", "network_off", 1)
    metrics.sandbox_denied("web", "fetch", "anything a worker says", 1)
    text = metrics.render([])
    assert 'lovia_mcp_sandbox_denials_total{server="web",tool="fetch",kind="other"} 1' in text
    assert "# TYPE lovia_mcp_sandbox_denials_total counter" in text
    assert 'lovia_mcp_sandbox_denials_total{server="web",tool="fetch",kind="network_off"} 3' in text
