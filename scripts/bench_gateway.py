#!/usr/bin/env python3
"""Benchmark (not a test): ``lovia-mcp serve`` against a direct isolated call, under load, and behind a load balancer.

Three parts, each against real ``lovia-mcp serve`` processes on loopback:

1. **overhead**: one small ``echo`` call, median, interleaved rounds:
   - ``direct``: ``MCPConnection.call_tool`` on an isolated connection (the
     worker and the same raw server, no HTTP);
   - ``gateway_http``: a stateless MCP 2026-07-28 request through the gateway
     (``httpx``, keep-alive, JSON response): the gateway's overhead is this
     minus ``direct``; ``http_floor`` (``GET /healthz`` on the same client)
     says how much of it is the HTTP round trip itself;
   - ``gateway_sdk``: the same call with the MCP SDK's ``Client`` (what an
     agent pays, client included).
2. **throughput**: 100 concurrent sessions (2025 handshake, a minimal HTTP
   client) calling ``echo`` on one shared server for ``--seconds``; calls
   per second, latency percentiles and the gateway's CPU. Then the same
   with 100 SDK clients (the SDK's client is the bottleneck there), and
   with 100 concurrent stateless clients (raw 2026-07-28 requests).
   **audit**: calls per second and the gateway's CPU per call with
   ``--audit-log`` off and on (two replicas, started twice with the roles
   swapped, interleaved rounds of 20 stateless clients, medians), and what
   one line costs alone.
3. **failover**: two ``serve`` replicas behind HAProxy (Debian's package,
   installed with apt-get if missing; ``--no-lb`` skips this part) with
   sticky sessions learnt from the ``Mcp-Session-Id`` response header,
   health checks on ``/readyz`` and retries of failed connections. Stateless
   clients call a shared server; session-bound clients (2025 sessions) call a
   per-session server. One replica is SIGKILLed mid-load (``--kill term``:
   SIGTERM, the drain). Reported: calls and failures for each kind, and for
   session-bound clients the sessions broken, what they saw, and whether a
   new session worked (their per-session state, the server's pid, is lost).

4. **peers**: ``lovia-mcp serve`` beside mcp-proxy (PyPI ``mcp-proxy``,
   pinned and installed by ``scripts/thirdparty.sh`` into a venv of its own
   under ``.cache/thirdparty/``; the part is skipped when it is not there),
   both fronting the same stdio server (``echo`` on ``bench_server.py``, one
   process shared by all sessions) in this one process, alternating, 2025
   sessions with the same minimal HTTP client: per-call p50 and p99 on one
   session, calls per second with 16 sessions, each whole process tree's CPU
   per call, and the RSS (and PSS) of each whole process tree (the proxy
   and its server; serve, its forkserver, workers and server) after the
   load, and each process's RSS, PSS, USS and CPU per call, and what a
   fresh interpreter holds after each front's imports alone. A third column is the gateway's own 2026-07-28 stateless path (its
   JSON fast path; mcp-proxy's SDK has no such era), in the same rotation.
   ``--markdown FILE`` writes this part's table into ``FILE`` between its
   generated markers (docs/performance.md).

The machine is shared and noisy: read ratios and orders of magnitude, not
absolute times. Usage::

    .venv/bin/python scripts/bench_gateway.py            # all three, a table
    .venv/bin/python scripts/bench_gateway.py --quick    # small sizes
    .venv/bin/python scripts/bench_gateway.py --json --only overhead
    .venv/bin/python scripts/bench_gateway.py --only audit --quick   # about 15 s
    .venv/bin/python scripts/bench_gateway.py --only peers --markdown docs/performance.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

# bench.py beside this script (its directory is first on the path when run as a script).
from bench import write_between

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
BENCH_SERVER = str(ROOT / "scripts" / "bench_server.py")
RAW_SERVER = str(ROOT / "tests" / "servers" / "raw_server.py")
TOKEN = "bench-token-0123456789abcdef0123"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
# Start-up of a serve process (imports, uvicorn, servers) on a loaded machine.
START_WAIT = 60.0
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def _modern_call(rid: int, name: str, arguments: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        **HEADERS,
        "content-type": "application/json",
        "accept": ACCEPT,
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": name,
    }
    return headers, json.dumps(body).encode()


class Http:
    """A minimal HTTP/1.1 keep-alive client on one connection.

    The load generator: httpx (and the SDK's httpx2) slow to a few dozen
    requests a second with a hundred concurrent connections in one process,
    on any server (a bare uvicorn app included), so they cannot drive the
    gateway hard. This speaks just enough HTTP for the gateway's answers
    (Content-Length bodies).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
        status, _, payload = await self.exchange(method, path, headers, body)
        return status, payload

    async def exchange(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        self.writer.write(head.encode() + body)
        try:
            status_line = await self.reader.readuntil(b"\r\n")
            if not status_line:
                raise ConnectionError("connection closed")
            got: dict[str, str] = {}
            while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
                key, _, value = line.decode("latin-1").partition(":")
                got[key.strip().lower()] = value.strip()
            close = "close" in got.get("connection", "").lower()
            if got.get("transfer-encoding") == "chunked":
                # An SSE answer (2025 sessions): the stream ends after the response.
                parts = []
                while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
                    parts.append(await self.reader.readexactly(size))
                    await self.reader.readuntil(b"\r\n")
                await self.reader.readuntil(b"\r\n")
                payload = b"".join(parts)
            else:
                payload = await self.reader.readexactly(int(got.get("content-length", "0")))
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            raise ConnectionError("connection closed") from None
        if close:
            self.close()
        return int(status_line.split()[1]), got, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _split(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split("/")[0].rsplit(":", 1)
    return host, int(port)


# --------------------------------------------------------------------------- #
# serve processes
# --------------------------------------------------------------------------- #
class Replica:
    def __init__(self, folder: Path, servers: dict[str, Any], port: int = 0, extra: tuple[str, ...] = ()) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
        (folder / "tokens").write_text(TOKEN + "\n")
        self.stderr = open(folder / "stderr", "wb")
        self.proc = subprocess.Popen(
            [
                PY,
                "-m",
                "lovia_mcp",
                "serve",
                "--config",
                str(folder / "mcp.json"),
                "--listen",
                f"127.0.0.1:{port}",
                "--token-file",
                str(folder / "tokens"),
                "--log-format",
                "text",
                "--max-http-sessions",
                "5000",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=ROOT,
            start_new_session=True,
        )
        self.url = self._line()
        self.base = self.url.removesuffix("/mcp")
        self.port = int(self.base.rsplit(":", 1)[1])
        if self._line() != "ready":
            raise SystemExit(f"serve did not get ready; see {folder / 'stderr'}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(START_WAIT):
                raise SystemExit("serve printed nothing")
        return self.proc.stdout.readline().decode().strip()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if sig == signal.SIGKILL:
            # Its workers see their pipe close and take their servers with
            # them; anything slower than that is swept here.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.stderr.close()


@contextlib.contextmanager
def replicas(n: int, servers: dict[str, Any], extra: list[tuple[str, ...]] | None = None) -> Iterator[list[Replica]]:
    """``n`` serve processes; ``extra``: each one's further flags (``{folder}`` is its own folder)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    started: list[Replica] = []
    try:
        for i in range(n):
            flags = tuple(f.format(folder=folder / f"r{i}") for f in (extra[i] if extra else ()))
            started.append(Replica(folder / f"r{i}", servers, extra=flags))
        yield started
    finally:
        for r in started:
            r.stop()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.asynccontextmanager
async def sdk_client(url: str, mode: str = "legacy") -> AsyncIterator[Any]:
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=HEADERS, timeout=30.0) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# --------------------------------------------------------------------------- #
# 1. overhead
# --------------------------------------------------------------------------- #
async def overhead(calls: int, rounds: int) -> dict[str, float]:
    from lovia_mcp import MCPServerStdio

    samples: dict[str, list[float]] = {"direct": [], "gateway_http": [], "http_floor": [], "gateway_sdk": []}
    with replicas(1, {"raw": {"command": PY, "args": [BENCH_SERVER]}}) as (g,):
        http = Http(*_split(g.base))
        async with (
            MCPServerStdio(command=PY, args=[BENCH_SERVER], name="raw").session() as conn,
            sdk_client(g.url, mode="auto") as sdk,
        ):

            async def direct() -> None:
                await conn.call_tool("echo", {"text": "x"})

            async def via_http(i: int = 0) -> None:
                headers, body = _modern_call(i, "raw__echo", {"text": "x"})
                status, payload = await http.request("POST", "/mcp", headers, body)
                assert status == 200 and b'"isError":false' in payload, payload

            async def floor() -> None:
                assert (await http.request("GET", "/healthz", {}))[0] == 200

            async def via_sdk() -> None:
                r = await sdk.call_tool("raw__echo", {"text": "x"})
                assert not r.is_error

            kinds = {"direct": direct, "gateway_http": via_http, "http_floor": floor, "gateway_sdk": via_sdk}
            for fn in kinds.values():  # warm-up
                for _ in range(50):
                    await fn()
            gateway = psutil.Process(g.proc.pid)
            cpu: dict[str, float] = {k: 0.0 for k in kinds}
            # This process's CPU in the direct rounds: what a caller of the
            # isolated connection spends itself (the gateway spends it too).
            here = psutil.Process()
            direct_cpu = 0.0
            for r in range(rounds):
                order = list(kinds)[r % 4 :] + list(kinds)[: r % 4]
                for kind in order:
                    fn = kinds[kind]
                    used, used_here = sum(gateway.cpu_times()[:2]), sum(here.cpu_times()[:2])
                    for _ in range(calls):
                        t = time.perf_counter()
                        await fn()
                        samples[kind].append(time.perf_counter() - t)
                    cpu[kind] += sum(gateway.cpu_times()[:2]) - used
                    if kind == "direct":
                        direct_cpu += sum(here.cpu_times()[:2]) - used_here
    med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    return {
        **{f"{k}_ms": round(v, 3) for k, v in med.items()},
        "overhead_http_ms": round(med["gateway_http"] - med["direct"], 3),
        "overhead_beyond_http_floor_ms": round(med["gateway_http"] - med["direct"] - med["http_floor"], 3),
        "overhead_sdk_client_ms": round(med["gateway_sdk"] - med["direct"], 3),
        # CPU the serve process spent per call (its workers not included):
        # steadier than wall time on a loaded machine.
        "gateway_cpu_per_call_ms": round(cpu["gateway_http"] / (calls * rounds) * 1000, 3),
        "gateway_cpu_per_sdk_call_ms": round(cpu["gateway_sdk"] / (calls * rounds) * 1000, 3),
        # The caller's own CPU for a direct call (timing loop included): the
        # gateway's CPU per call minus this is its CPU overhead.
        "direct_caller_cpu_per_call_ms": round(direct_cpu / (calls * rounds) * 1000, 3),
        "gateway_cpu_overhead_per_call_ms": round((cpu["gateway_http"] - direct_cpu) / (calls * rounds) * 1000, 3),
        "samples_each": calls * rounds,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


# --------------------------------------------------------------------------- #
# 2. throughput
# --------------------------------------------------------------------------- #
async def throughput(sessions: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"sessions": sessions, "seconds": seconds}
    with replicas(1, {"raw": {"command": PY, "args": [BENCH_SERVER]}}) as (g,):
        latencies: list[float] = []
        stop = asyncio.Event()

        async def session_loop(ready: asyncio.Event, opened: list[int]) -> None:
            async with sdk_client(g.url, mode="legacy") as client:
                opened.append(1)
                if len(opened) == sessions:
                    ready.set()
                await ready.wait()
                while not stop.is_set():
                    t = time.perf_counter()
                    await client.call_tool("raw__echo", {"text": "x"})
                    latencies.append(time.perf_counter() - t)

        ready, opened = asyncio.Event(), []
        tasks = [asyncio.ensure_future(session_loop(ready, opened)) for _ in range(sessions)]
        await ready.wait()
        started = time.perf_counter()
        await asyncio.sleep(seconds)  # the measuring window, not synchronisation
        stop.set()
        done = len(latencies)
        elapsed = time.perf_counter() - started
        await asyncio.gather(*tasks)
        # The SDK's client costs more CPU per call than the gateway does: with
        # a hundred in this one process, the client is the bottleneck.
        out["sdk_sessions_calls_per_s"] = round(done / elapsed, 1)
        out["sdk_sessions_p50_ms"] = round(pct(latencies, 0.5) * 1000, 2)
        out["sdk_sessions_p99_ms"] = round(pct(latencies, 0.99) * 1000, 2)

        latencies.clear()
        stop.clear()
        ready, opened = asyncio.Event(), []
        gateway = psutil.Process(g.proc.pid)

        async def raw_session_loop() -> None:
            http = Http(*_split(g.base))
            base = {**HEADERS, "content-type": "application/json", "accept": ACCEPT}
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            }
            status, got, _ = await http.exchange("POST", "/mcp", base, json.dumps(init).encode())
            assert status == 200, status
            session = {**base, "mcp-session-id": got["mcp-session-id"], "mcp-protocol-version": LEGACY}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.request("POST", "/mcp", session, json.dumps(note).encode()))[0] == 202
            opened.append(1)
            if len(opened) == sessions:
                ready.set()
            await ready.wait()
            i = 0
            while not stop.is_set():
                i += 1
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": "raw__echo", "arguments": {"text": "x"}},
                    }
                ).encode()
                t = time.perf_counter()
                status, payload = await http.request("POST", "/mcp", session, body)
                assert status == 200 and b'"isError":false' in payload, payload
                latencies.append(time.perf_counter() - t)
            await http.request("DELETE", "/mcp", session)
            http.close()

        tasks = [asyncio.ensure_future(raw_session_loop()) for _ in range(sessions)]
        await ready.wait()
        used = sum(gateway.cpu_times()[:2])
        started = time.perf_counter()
        await asyncio.sleep(seconds)  # the measuring window
        stop.set()
        done = len(latencies)
        elapsed = time.perf_counter() - started
        out["sessions_gateway_cpu_percent"] = round((sum(gateway.cpu_times()[:2]) - used) / elapsed * 100)
        await asyncio.gather(*tasks)
        out["sessions_calls_per_s"] = round(done / elapsed, 1)
        out["sessions_p50_ms"] = round(pct(latencies, 0.5) * 1000, 2)
        out["sessions_p99_ms"] = round(pct(latencies, 0.99) * 1000, 2)

        latencies.clear()
        stop.clear()

        async def stateless_loop() -> None:
            http = Http(*_split(g.base))
            i = 0
            while not stop.is_set():
                i += 1
                headers, body = _modern_call(i, "raw__echo", {"text": "x"})
                t = time.perf_counter()
                status, _ = await http.request("POST", "/mcp", headers, body)
                assert status == 200, status
                latencies.append(time.perf_counter() - t)
            http.close()

        used = sum(gateway.cpu_times()[:2])
        started = time.perf_counter()
        tasks = [asyncio.ensure_future(stateless_loop()) for _ in range(sessions)]
        await asyncio.sleep(seconds)  # the measuring window
        stop.set()
        done = len(latencies)
        elapsed = time.perf_counter() - started
        out["stateless_gateway_cpu_percent"] = round((sum(gateway.cpu_times()[:2]) - used) / elapsed * 100)
        await asyncio.gather(*tasks)
        out["stateless_calls_per_s"] = round(done / elapsed, 1)
        out["stateless_p50_ms"] = round(pct(latencies, 0.5) * 1000, 2)
        out["stateless_p99_ms"] = round(pct(latencies, 0.99) * 1000, 2)
    return out


# --------------------------------------------------------------------------- #
# 2b. the audit log's cost
# --------------------------------------------------------------------------- #
async def audit(clients: int, seconds: float, rounds: int) -> dict[str, Any]:
    """Calls per second and the gateway's CPU per call, ``--audit-log`` off and on: interleaved rounds, medians.

    Two replicas of the same config, one writing an audit log; each round
    loads one, then the other (the idle one costs nothing meanwhile), with
    ``clients`` concurrent stateless clients calling ``echo`` on a shared
    server. Two replicas of one config differ by more than an audit line on
    a shared machine (which one lands where), so the pair is started twice,
    with the roles swapped, and each role's median spans both.
    """
    out: dict[str, Any] = {"clients": clients, "seconds_per_round": seconds, "rounds": rounds}
    servers = {"raw": {"command": PY, "args": [BENCH_SERVER]}}
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    per_layout = max(1, (rounds + 1) // 2)

    async def load(g: Replica, window: float) -> tuple[int, float, float]:
        """Calls served in ``window`` seconds, their rate, and the gateway's CPU seconds a call."""
        stop = asyncio.Event()
        done = [0]
        proc = psutil.Process(g.proc.pid)

        async def client() -> None:
            http = Http(*_split(g.base))
            i = 0
            while not stop.is_set():
                i += 1
                headers, body = _modern_call(i, "raw__echo", {"text": "x"})
                status, _ = await http.request("POST", "/mcp", headers, body)
                assert status == 200, status
                done[0] += 1
            http.close()

        tasks = [asyncio.ensure_future(client()) for _ in range(clients)]
        used = sum(proc.cpu_times()[:2])
        started = time.perf_counter()
        await asyncio.sleep(window)  # the measuring window
        stop.set()
        counted, elapsed = done[0], time.perf_counter() - started
        spent = sum(proc.cpu_times()[:2]) - used
        await asyncio.gather(*tasks)
        return done[0], counted / elapsed, spent / max(counted, 1)

    lines = 0
    for layout in (("off", "on"), ("on", "off")):
        flags = [("--audit-log", "{folder}/audit.log") if role == "on" else () for role in layout]
        with replicas(2, servers, flags) as pair:
            roles = dict(zip(layout, pair))
            served = 0
            for role, g in roles.items():  # warm-up: first connections, first calls
                n, _, _ = await load(g, seconds / 2)
                served += n if role == "on" else 0
            for r in range(per_layout):
                # Alternating which goes first: neither always meets the other's leftovers.
                for role in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    n, rate, per_call = await load(roles[role], seconds)
                    served += n if role == "on" else 0
                    rates[role].append(rate)
                    cpu[role].append(per_call)
            # The log was on: a line for every call the audited replica served.
            written = (Path(roles["on"].stderr.name).parent / "audit.log").read_bytes().count(b"\n")
            if written != served:
                raise SystemExit(f"the audit log holds {written} lines for {served} calls")
            lines += written
    out["audit_lines_written"] = lines
    for role in ("off", "on"):
        out[f"audit_{role}_calls_per_s"] = round(statistics.median(rates[role]), 1)
        out[f"audit_{role}_gateway_cpu_us_per_call"] = round(statistics.median(cpu[role]) * 1e6, 1)
    out["audit_on_over_off_calls_per_s"] = round(statistics.median(rates["on"]) / statistics.median(rates["off"]), 3)
    out["audit_on_minus_off_cpu_us_per_call"] = round(
        (statistics.median(cpu["on"]) - statistics.median(cpu["off"])) * 1e6, 1
    )
    # What a line costs the gateway's loop, alone (the rates above are noisy on a shared machine).
    from lovia_mcp.gateway.audit import AuditLog

    with tempfile.TemporaryDirectory() as folder:
        log = AuditLog(os.path.join(folder, "audit.log"))
        per_line = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(2000):
                log.write(
                    principal="p", endpoint="/mcp", server="raw", tool="echo", outcome="ok", seconds=0.001, trace=None
                )
            per_line.append((time.perf_counter() - t) / 2000)
        log.close()
    out["audit_line_us"] = round(statistics.median(per_line) * 1e6, 1)
    return out


# --------------------------------------------------------------------------- #
# 3. failover behind HAProxy
# --------------------------------------------------------------------------- #
def haproxy_binary() -> str:
    found = shutil.which("haproxy")
    if found:
        return found
    print("installing haproxy from Debian's packages (apt-get)...", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "-q", "haproxy"], env=env, stdout=subprocess.DEVNULL).returncode:
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-q", "haproxy"], check=True, env=env, stdout=subprocess.DEVNULL)
    found = shutil.which("haproxy") or "/usr/sbin/haproxy"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HAPROXY_CFG = """
global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout check 3s
    timeout client 60s
    timeout server 60s
    retries 2
    option redispatch 1
    # A new session refused by a draining replica (503) is opened on another.
    retry-on conn-failure empty-response 503
frontend mcp
    bind 127.0.0.1:{port}
    default_backend gateways
backend gateways
    balance roundrobin
    option httpchk GET /readyz
    # Down after two failed checks (a loaded replica may answer one check late).
    default-server inter 500ms fall 2 rise 1
    # Sticky 2025-era sessions: learn each session id from the replica's
    # answer, route the session's later requests to that replica.
    stick-table type string len 64 size 100k expire 30m
    stick on req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
{servers}
"""


async def failover(seconds: float, kill: str, stateless_n: int, bound_n: int) -> dict[str, Any]:
    binary = haproxy_binary()
    servers = {
        "raw": {"command": PY, "args": [BENCH_SERVER]},
        "ps": {"command": PY, "args": [RAW_SERVER], "session": "per-session", "max_sessions": 64, "spares": 2},
    }
    with replicas(2, servers) as reps, tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cfg = Path(tmp) / "haproxy.cfg"
        cfg.write_text(
            HAPROXY_CFG.format(
                port=port, servers="\n".join(f"    server r{i} 127.0.0.1:{r.port} check" for i, r in enumerate(reps))
            )
        )
        lb = subprocess.Popen([binary, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                # HAProxy up and a replica healthy: one answered request.
                for _ in range(200):
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)  # HAProxy's start; polled, bounded
            return await _load(url, reps, seconds, kill, stateless_n, bound_n)
        finally:
            lb.terminate()
            lb.wait(10)


async def _load(
    url: str, reps: list[Replica], seconds: float, kill: str, stateless_n: int, bound_n: int
) -> dict[str, Any]:
    stop = asyncio.Event()
    warm = asyncio.Event()
    warmed: set[int] = set()
    stateless: dict[str, Any] = {"calls": 0, "failed": 0, "errors": {}}
    bound: dict[str, Any] = {
        "calls": 0,
        "failed_calls": 0,
        "sessions_broken": 0,
        "new_session_ok": 0,
        "state_lost": 0,
        "errors": {},
    }
    current_pid: dict[int, int] = {}

    def is_warm(who: int) -> None:
        warmed.add(who)
        if len(warmed) == stateless_n + bound_n:
            warm.set()

    def note(where: dict[str, Any], exc: BaseException) -> None:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        text = f"{type(exc).__name__}: {exc}"
        key = (
            "404 session not found"
            if "Session not found" in text or "404" in text
            else "connection closed"
            if "closed" in text.lower() or "ConnectError" in text or "RemoteProtocol" in text
            else text[:100]
        )
        where["errors"][key] = where["errors"].get(key, 0) + 1

    async def stateless_loop(who: int) -> None:
        http = Http(*_split(url))
        i = 0
        while not stop.is_set():
            i += 1
            headers, body = _modern_call(i, "raw__echo", {"text": "x"})
            try:
                status, payload = await http.request("POST", "/mcp", headers, body)
                if status != 200 or b'"isError":false' not in payload:
                    raise RuntimeError(f"HTTP {status}: {payload[:60]!r}")
                stateless["calls"] += 1
                is_warm(who)
            except Exception as exc:  # noqa: BLE001 - counted: what a stateless client loses
                stateless["failed"] += 1
                note(stateless, exc)
        http.close()

    async def bound_loop(who: int) -> None:
        pid: int | None = None
        while not stop.is_set():
            try:
                async with sdk_client(url, mode="legacy") as client:
                    while not stop.is_set():
                        r = await client.call_tool("ps__pid", {})
                        now = int(json.loads(r.content[0].text)["pid"])
                        if pid is not None and now != pid:
                            # A new session after a broken one: a new server, its state gone.
                            bound["state_lost"] += 1
                            bound["new_session_ok"] += 1
                        pid = current_pid[who] = now
                        bound["calls"] += 1
                        is_warm(who)
            except BaseException as exc:  # noqa: BLE001 - the SDK raises exception groups; counted
                if isinstance(exc, asyncio.CancelledError):
                    raise
                bound["failed_calls"] += 1
                bound["sessions_broken"] += 1
                note(bound, exc)

    tasks = [asyncio.ensure_future(stateless_loop(i)) for i in range(stateless_n)]
    tasks += [asyncio.ensure_future(bound_loop(stateless_n + i)) for i in range(bound_n)]
    await asyncio.wait_for(warm.wait(), START_WAIT)
    await asyncio.sleep(seconds / 3)  # load before the kill: the measuring window
    victim = reps[0]
    victim_pids = {p.pid for p in psutil.Process(victim.proc.pid).children(recursive=True)}
    on_victim = sum(1 for pid in current_pid.values() if pid in victim_pids)
    before = {"stateless": stateless["calls"], "bound": bound["calls"]}
    if kill == "kill":
        # A pod killed outright: the whole process group, workers and servers too.
        os.killpg(victim.proc.pid, signal.SIGKILL)
    else:
        victim.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(seconds * 2 / 3)  # load after the kill
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    if kill == "term":
        victim.proc.wait(30)
    return {
        "kill": kill,
        "stateless_clients": stateless_n,
        "session_clients": bound_n,
        "sessions_on_killed_replica": on_victim,
        "calls_before_kill": before,
        "stateless": stateless,
        "session_bound": bound,
    }


# --------------------------------------------------------------------------- #
# 4. peers: mcp-proxy beside lovia-mcp serve
# --------------------------------------------------------------------------- #
MCP_PROXY = ROOT / ".cache" / "thirdparty" / "mcp-proxy" / "bin" / "mcp-proxy"
# The part of docs/performance.md that ``--only peers --markdown`` writes.
PEERS_BEGIN = "<!-- bench_gateway.py --only peers --markdown: generated table, begin -->"
PEERS_END = "<!-- bench_gateway.py --only peers --markdown: generated table, end -->"
PEER_SESSIONS = 16


class Peer:
    """mcp-proxy fronting a stdio server on a free port of 127.0.0.1."""

    def __init__(self, folder: Path, command: list[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.stderr = open(folder / "stderr", "wb")
        # WARNING: no line per request (uvicorn's access log), as serve writes none.
        self.proc = subprocess.Popen(
            # Through its venv's python: the script's shebang names the path the venv was made at.
            [
                str(MCP_PROXY.parent / "python"),
                str(MCP_PROXY),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "WARNING",
                "--",
                *command,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            start_new_session=True,
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_WAIT
        while True:  # it says nothing when ready at WARNING: its port answers (polled, bounded)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mcp-proxy did not start; see {folder / 'stderr'}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.stderr.close()


def _tree(pid: int) -> list[psutil.Process]:
    top = psutil.Process(pid)
    return [top, *top.children(recursive=True)]


def _tree_memory(pid: int) -> tuple[int, int, int]:
    """The tree's summed RSS and PSS in bytes, and its process count."""
    rss = pss = 0
    procs = _tree(pid)
    for p in procs:
        info = p.memory_full_info()
        rss += info.rss
        pss += info.pss
    return rss, pss, len(procs)


def _tree_cpu(pid: int) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in _tree(pid))


# What each front imports, measured alone: (its python, [(what, statement)]).
IMPORTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "lovia-mcp serve": (
        PY,
        [
            ("nothing", ""),
            ("lovia", "import lovia"),
            ("mcp", "import mcp"),
            ("serve", "import lovia_mcp.gateway.serve"),
        ],
    ),
    "mcp-proxy": (
        str(MCP_PROXY.parent / "python"),
        [("nothing", ""), ("mcp", "import mcp"), ("mcp-proxy", "import mcp_proxy.__main__")],
    ),
}


def _import_rss(python: str, statement: str) -> float:
    """A fresh interpreter's RSS in MB after ``statement`` (an import): what a front pays before serving.

    Read from /proc (VmRSS): the peak rusage reports would count the pages of the process it was forked from.
    """
    probe = f"{statement}\nprint(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, timeout=60).stdout
    return round(int(out.split()[-1]) / 1024, 1)


def _role(p: psutil.Process, top: int) -> str:
    """What a process of a front's tree is: the front, lovia-mcp's forkserver (its child running the forkserver
    module), a worker the forkserver forked (idle: no server under it yet), or the stdio server."""
    if p.pid == top:
        return "front"
    try:
        parent = p.parent()
        if parent is None:
            return "server"
        if parent.pid == top:
            return "forkserver" if "lovia_mcp_worker.forkserver" in " ".join(p.cmdline()) else "server"
        if _role(parent, top) == "forkserver":
            return "worker" if p.children() else "idle worker"
    except psutil.Error:
        pass
    return "server"


def _processes(pid: int) -> dict[int, tuple[str, float]]:
    """Each process of the tree: its role and its user+system CPU seconds so far."""
    return {p.pid: (_role(p, pid), sum(p.cpu_times()[:2])) for p in _tree(pid)}


def _by_process(
    pid: int, cpu_before: dict[int, tuple[str, float]], cpu_after: dict[int, tuple[str, float]], calls: int
) -> list[dict[str, Any]]:
    """The tree's processes now, by role: RSS and PSS, and the CPU each spent per call between the two readings."""
    rows = []
    for p in _tree(pid):
        try:
            info = p.memory_full_info()
        except psutil.Error:
            continue
        role = cpu_after.get(p.pid, (_role(p, pid), 0.0))[0]
        spent = cpu_after.get(p.pid, ("", 0.0))[1] - cpu_before.get(p.pid, ("", 0.0))[1]
        rows.append(
            {
                "role": role,
                "rss_mb": round(info.rss / 2**20, 1),
                "pss_mb": round(info.pss / 2**20, 1),
                "uss_mb": round(info.uss / 2**20, 1),
                "cpu_us_per_call": round(spent / max(calls, 1) * 1e6, 1),
            }
        )
    order = ["front", "forkserver", "worker", "idle worker", "server"]
    return sorted(rows, key=lambda r: order.index(r["role"]))


class Session:
    """A 2025 streamable HTTP session on one keep-alive connection; ``modern``: 2026-07-28 stateless requests."""

    def __init__(self, base: str, path: str, headers: dict[str, str], modern: bool = False) -> None:
        self.http = Http(*_split(base))
        self.path = path
        self.headers = {**headers, "content-type": "application/json", "accept": ACCEPT}
        self.modern = modern
        self.i = 0

    async def open(self) -> None:
        if self.modern:
            return
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
        }
        status, got, payload = await self.http.exchange("POST", self.path, self.headers, json.dumps(init).encode())
        assert status == 200, (status, payload)
        version = json.loads(payload[payload.index(b"{") :].split(b"\n")[0])["result"]["protocolVersion"]
        self.headers |= {"mcp-session-id": got["mcp-session-id"], "mcp-protocol-version": version}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.http.request("POST", self.path, self.headers, json.dumps(note).encode()))[0] == 202

    async def call(self) -> None:
        self.i += 1
        if self.modern:
            headers, data = _modern_call(self.i, "echo", {"text": "x"})
        else:
            body = {"jsonrpc": "2.0", "id": self.i, "method": "tools/call"}
            body["params"] = {"name": "echo", "arguments": {"text": "x"}}
            headers, data = self.headers, json.dumps(body).encode()
        status, payload = await self.http.request("POST", self.path, headers, data)
        assert status == 200 and b'"isError":false' in payload, payload

    async def resume(self) -> None:
        """One untimed call, on a new connection if the server closed the idle one (uvicorn's keep-alive: 5 s)."""
        try:
            await self.call()
        except ConnectionError:
            await self.call()

    async def close(self) -> None:
        if not self.modern:
            with contextlib.suppress(ConnectionError):
                await self.http.request("DELETE", self.path, self.headers)
        self.http.close()


async def peers(calls: int, rounds: int, seconds: float) -> dict[str, Any]:
    """lovia-mcp serve and mcp-proxy on the same stdio server, alternating: latency, throughput, CPU, memory."""
    if not MCP_PROXY.exists():
        raise SystemExit(f"mcp-proxy is not installed at {MCP_PROXY}: run `bash scripts/thirdparty.sh`")
    load_before = os.getloadavg()[0]
    command = [PY, BENCH_SERVER]
    folder = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    peer: Peer | None = None
    out: dict[str, Any] = {"calls_per_round": calls, "rounds": rounds, "seconds_per_round": seconds}
    try:
        with replicas(1, {"raw": {"command": command[0], "args": command[1:]}}) as (g,):
            peer = Peer(folder / "mcp-proxy", command)
            # (base, path, headers, 2026-07-28 stateless, the tree's top pid)
            targets = {
                "lovia-mcp": (g.base, "/servers/raw/mcp", HEADERS, False, g.proc.pid),
                "mcp-proxy": (peer.base, "/mcp", {}, False, peer.proc.pid),
                # What the gateway's own fast path gives a 2026-07-28 client; mcp-proxy's SDK has no such era.
                "lovia-mcp-2026": (g.base, "/servers/raw/mcp", HEADERS, True, g.proc.pid),
            }
            names = list(targets)
            latencies: dict[str, list[float]] = {n: [] for n in names}
            rates: dict[str, list[float]] = {n: [] for n in names}
            cpu: dict[str, list[float]] = {n: [] for n in names}
            # Each window's per-process CPU readings (before, after) and its calls.
            windows: dict[str, list[tuple[dict[int, tuple[str, float]], dict[int, tuple[str, float]], int]]] = {
                n: [] for n in names
            }
            one = {n: Session(*targets[n][:4]) for n in names}
            many = {n: [Session(*targets[n][:4]) for _ in range(PEER_SESSIONS)] for n in names}
            for n in names:
                await one[n].open()
                await asyncio.gather(*(s.open() for s in many[n]))
                for _ in range(100):  # warm-up: first calls, the server started
                    await one[n].call()

            async def window(n: str) -> None:
                """``PEER_SESSIONS`` sessions calling for ``seconds``: the rate and the tree's CPU per call."""
                stop = asyncio.Event()
                done = [0]

                async def loop(s: Session) -> None:
                    while not stop.is_set():
                        await s.call()
                        done[0] += 1

                await asyncio.gather(*(s.resume() for s in many[n]))
                pid = targets[n][4]
                before = _processes(pid)
                used = _tree_cpu(pid)
                started = time.perf_counter()
                tasks = [asyncio.ensure_future(loop(s)) for s in many[n]]
                await asyncio.sleep(seconds)  # the measuring window
                stop.set()
                counted, elapsed = done[0], time.perf_counter() - started
                spent = _tree_cpu(pid) - used
                after = _processes(pid)
                await asyncio.gather(*tasks)
                rates[n].append(counted / elapsed)
                cpu[n].append(spent / max(counted, 1))
                windows[n].append((before, after, counted))

            for r in range(rounds):
                # Alternating which goes first: neither always meets the other's leftovers.
                order = names[r % len(names) :] + names[: r % len(names)]
                for n in order:
                    await one[n].resume()
                    for _ in range(calls):
                        t = time.perf_counter()
                        await one[n].call()
                        latencies[n].append(time.perf_counter() - t)
                for n in order:
                    await window(n)
            for n in names:
                for s in [one[n], *many[n]]:
                    await s.close()
                out[n] = {
                    "p50_ms": round(pct(latencies[n], 0.5) * 1000, 3),
                    "p99_ms": round(pct(latencies[n], 0.99) * 1000, 3),
                    "calls_per_s": round(statistics.median(rates[n]), 1),
                    "tree_cpu_us_per_call": round(statistics.median(cpu[n]) * 1e6, 1),
                }
                if n != "lovia-mcp-2026":  # the same tree as lovia-mcp's
                    rss, pss, count = _tree_memory(targets[n][4])
                    # The window with the median rate: where each process's CPU went.
                    middle = sorted(windows[n], key=lambda w: w[2])[len(windows[n]) // 2]
                    out[n] |= {
                        "tree_rss_mb": round(rss / 2**20, 1),
                        "tree_pss_mb": round(pss / 2**20, 1),
                        "tree_processes": count,
                        "processes": _by_process(targets[n][4], *middle),
                    }
    finally:
        if peer is not None:
            peer.stop()
        shutil.rmtree(folder, ignore_errors=True)
    ours, theirs = out["lovia-mcp"], out["mcp-proxy"]
    out["ratios"] = {
        "p50": round(ours["p50_ms"] / theirs["p50_ms"], 2),
        "p99": round(ours["p99_ms"] / theirs["p99_ms"], 2),
        "calls_per_s": round(ours["calls_per_s"] / theirs["calls_per_s"], 2),
        "tree_cpu_per_call": round(ours["tree_cpu_us_per_call"] / theirs["tree_cpu_us_per_call"], 2),
        "tree_rss": round(ours["tree_rss_mb"] / theirs["tree_rss_mb"], 2),
        "tree_pss": round(ours["tree_pss_mb"] / theirs["tree_pss_mb"], 2),
    }
    out["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    out["imports_rss_mb"] = {
        front: {what: _import_rss(python, statement) for what, statement in probes}
        for front, (python, probes) in IMPORTS.items()
    }
    return out


def _peer_versions() -> str:
    """mcp-proxy's version and its mcp's, from its own venv."""
    python = MCP_PROXY.parent / "python"
    probe = "from importlib.metadata import version as v; print(v('mcp-proxy'), v('mcp'))"
    proxy, mcp = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    from importlib.metadata import version

    return f"lovia-mcp {version('lovia-mcp')} (mcp {version('mcp')}), mcp-proxy {proxy} (mcp {mcp})"


def _peers_markdown(figures: dict[str, Any]) -> str:
    """The peers part as a markdown table, with the run's conditions above it."""
    ours, theirs, modern, ratio = (
        figures["lovia-mcp"],
        figures["mcp-proxy"],
        figures["lovia-mcp-2026"],
        figures["ratios"],
    )
    before, after = figures["load_average_1m"]
    lines = [
        f"Measured by `.venv/bin/python scripts/bench_gateway.py --only peers --markdown docs/performance.md` on "
        f"{os.cpu_count()} CPUs; load average {before:.2f} before and {after:.2f} after; {_peer_versions()}; "
        f"{figures['rounds']} rounds of {figures['calls_per_round']} calls on one session and "
        f"{figures['seconds_per_round']:g} s with {PEER_SESSIONS} sessions, the three columns' turns rotating; "
        f"latencies over all calls, rates medians of rounds.",
        "",
        "| figure | lovia-mcp serve | mcp-proxy | lovia-mcp / mcp-proxy | target "
        "| lovia-mcp serve, 2026-07-28 stateless (no peer) |",
        "|---|---|---|---|---|---|",
        f"| p50 per call, one session | {ours['p50_ms']:.3f} ms | {theirs['p50_ms']:.3f} ms | {ratio['p50']:.2f} "
        f"| <= 1 | {modern['p50_ms']:.3f} ms |",
        f"| p99 per call, one session | {ours['p99_ms']:.3f} ms | {theirs['p99_ms']:.3f} ms | {ratio['p99']:.2f} "
        f"| | {modern['p99_ms']:.3f} ms |",
        f"| calls per second, {PEER_SESSIONS} sessions | {ours['calls_per_s']:,.0f} | {theirs['calls_per_s']:,.0f} "
        f"| {ratio['calls_per_s']:.2f} | >= 1 | {modern['calls_per_s']:,.0f} |",
        f"| CPU per call, whole tree | {ours['tree_cpu_us_per_call']:.0f} us | {theirs['tree_cpu_us_per_call']:.0f} us "
        f"| {ratio['tree_cpu_per_call']:.2f} | | {modern['tree_cpu_us_per_call']:.0f} us |",
        f"| RSS of the whole tree after the load (processes) | {ours['tree_rss_mb']:.1f} MB ({ours['tree_processes']}) "
        f"| {theirs['tree_rss_mb']:.1f} MB ({theirs['tree_processes']}) | {ratio['tree_rss']:.2f} | <= 1.5 | (the same tree) |",
        f"| PSS of the whole tree after the load | {ours['tree_pss_mb']:.1f} MB | {theirs['tree_pss_mb']:.1f} MB "
        f"| {ratio['tree_pss']:.2f} | | (the same tree) |",
        "",
        f"Each tree by process, after the load (CPU: per call in the {PEER_SESSIONS}-session window with the median "
        "rate; USS: the pages no other process shares).",
        "",
        "| front | process | RSS | PSS | USS | CPU per call |",
        "|---|---|---|---|---|---|",
    ]
    for front, figures_of in (("lovia-mcp serve", ours), ("mcp-proxy", theirs)):
        for row in figures_of["processes"]:
            lines.append(
                f"| {front} | {row['role']} | {row['rss_mb']:.1f} MB | {row['pss_mb']:.1f} MB | {row['uss_mb']:.1f} MB "
                f"| {row['cpu_us_per_call']:.0f} us |"
            )
    imports = "; ".join(
        f"{front}'s python: "
        + ", ".join(f"{what} {mb:.1f} MB" for what, mb in figures["imports_rss_mb"][front].items())
        for front in IMPORTS
    )
    lines += ["", f"A fresh interpreter's RSS after each import alone: {imports}."]
    return "\n".join(lines)


# --------------------------------------------------------------------------- #
def main(argv: list[str] | None = None) -> int:
    import logging

    # The SDK warns of every session it could not end on a replica that is gone.
    logging.getLogger("mcp").setLevel(logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (about 30 s in all)")
    ap.add_argument("--only", action="append", choices=["overhead", "throughput", "audit", "failover", "peers"])
    ap.add_argument("--calls", type=int, default=None, help="calls per round in the overhead part (default 300)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    ap.add_argument("--sessions", type=int, default=100, help="concurrent sessions in the throughput part")
    ap.add_argument("--seconds", type=float, default=None, help="each load's duration (default 6)")
    ap.add_argument("--kill", choices=["kill", "term"], default="kill", help="how the replica is stopped")
    ap.add_argument("--no-lb", action="store_true", help="skip the failover part (no HAProxy)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", metavar="FILE", help="with the peers part: write its table into FILE's markers")
    ns = ap.parse_args(argv)
    calls = ns.calls or (100 if ns.quick else 300)
    rounds = ns.rounds or (2 if ns.quick else 5)
    seconds = ns.seconds or (3.0 if ns.quick else 6.0)
    parts = ns.only or ["overhead", "throughput", "audit"] + ([] if ns.no_lb else ["failover"])
    if not ns.only and MCP_PROXY.exists():
        parts.append("peers")
    if ns.markdown and "peers" not in parts:
        ap.error("--markdown writes the peers part's table: add --only peers")
    report: dict[str, Any] = {}
    if "overhead" in parts:
        report["overhead"] = asyncio.run(overhead(calls, rounds))
    if "throughput" in parts:
        report["throughput"] = asyncio.run(throughput(ns.sessions, seconds))
    if "audit" in parts:
        report["audit"] = asyncio.run(audit(20, 1.0 if ns.quick else 2.0, rounds))
    if "failover" in parts:
        report["failover"] = asyncio.run(failover(max(seconds, 6.0), ns.kill, 20, 10))
    if "peers" in parts:
        report["peers"] = asyncio.run(peers(calls, rounds, seconds / 2))
        if ns.markdown:
            write_between(Path(ns.markdown), PEERS_BEGIN, PEERS_END, _peers_markdown(report["peers"]))
            print(f"wrote the peers table into {ns.markdown}", file=sys.stderr)
    if ns.json:
        print(json.dumps(report, indent=2))
    else:
        for part, figures in report.items():
            print(f"== {part}")
            for key, value in figures.items():
                print(f"  {key:32} {json.dumps(value) if isinstance(value, dict) else value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
