"""Helpers for tests that run ``lovia-mcp serve`` as a real process and reach it as clients do.

Also the ``gateway`` fixture: one gateway, with a server for each behaviour
under test, shared by the modules of tests/gateway/ that import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Final, Iterator, TypeVar

import httpx
import psutil
import pytest
from lovia_mcp_worker.sandbox import bwrap

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "tests" / "servers"
PY = sys.executable
TOKEN: Final = "test-token-0123456789abcdef"
# A second client's token (the gateway takes both).
OTHER_TOKEN: Final = "other-token-fedcba9876543210"

# A loaded 2-core machine can take seconds to import the SDK's server side,
# start uvicorn and open a few servers; the bound only stops a hung test.
START_WAIT: Final = 60.0
# SIGTERM to exit: the drain is immediate without calls in flight, and
# closing a handful of servers takes well under a second unloaded.
STOP_WAIT: Final = 30.0
# A tool-list change travels server -> worker -> gateway -> client's stream:
# milliseconds unloaded. Generous for a loaded machine.
NOTIFY_WAIT: Final = 30.0
# An idle expiry of 0.5 s is swept every 0.25 s; the server's close is
# bounded by the connection's own close wait. Generous for a loaded machine.
IDLE_EXPIRY_WAIT: Final = 20.0

# Whether bubblewrap runs here: the shared gateway's sandboxed server, and
# the tests of it, only where it does.
SANDBOX: Final = bwrap.BWRAP is not None


MODERN_META: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def raw(*flags: str, **options: Any) -> dict[str, Any]:
    return {"command": PY, "args": [str(SERVERS / "raw_server.py"), *flags], **options}


def server(script: str, **options: Any) -> dict[str, Any]:
    return {"command": PY, "args": [str(SERVERS / script)], **options}


def gated(gate: Path, *flags: str, **options: Any) -> dict[str, Any]:
    """raw_server.py (with ``flags``) that starts only once a line is written to the FIFO ``gate``."""
    return {"command": PY, "args": [str(SERVERS / "gated_server.py"), str(gate), *flags], **options}


def samples(text: str) -> dict[str, float]:
    """A /metrics body's samples: the series (name and labels) to its value."""
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


class Serve:
    """One ``lovia-mcp serve`` process: its URL, its stderr file, and how to stop it."""

    def __init__(
        self,
        folder: Path,
        servers: dict[str, Any],
        *extra: str,
        token: bool = True,
        log_format: str = "text",
        ready: bool = True,
        nofile: int | None = None,
        gateway: dict[str, Any] | None = None,
        token_lines: str | None = None,
    ) -> None:
        """Start it; with ``ready`` wait for its ``ready`` line. ``nofile``: its open-file limit (soft).

        ``gateway``: the config's top-level ``"gateway"`` section; ``token_lines``:
        the token file's text instead of :data:`TOKEN` and :data:`OTHER_TOKEN`.
        """
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "mcp.json"
        config.write_text(json.dumps({"mcpServers": servers, **({"gateway": gateway} if gateway else {})}))
        args = [
            PY,
            "-m",
            "lovia_mcp",
            "serve",
            "--config",
            str(config),
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            log_format,
            *extra,
        ]
        if token:
            tokens = folder / "tokens"
            tokens.write_text(token_lines if token_lines is not None else f"# test tokens\n{TOKEN}\n{OTHER_TOKEN}\n")
            args += ["--token-file", str(tokens)]
        self.stderr_path = folder / "stderr"
        self._stderr = open(self.stderr_path, "wb")
        if nofile is not None:
            # Set in the process itself, then exec'd into serve (the same pid).
            args = [
                PY,
                "-c",
                "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
                "(int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
                "os.execv(sys.executable, sys.argv[2:])",
                str(nofile),
                *args,
            ]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._stderr, cwd=ROOT)
        self.lines: list[str] = []
        self.headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
        self.url = self.line()
        self.base = self.url.removesuffix("/mcp")
        if ready:
            assert self.line() == "ready", self.stderr()

    def line(self) -> str:
        """The next stdout line, waiting at most START_WAIT."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_WAIT
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(deadline - time.monotonic()):
                    text = self.proc.stdout.readline().decode().strip()
                    if not text and self.proc.poll() is not None:
                        raise AssertionError(f"serve exited with {self.proc.returncode}: {self.stderr()}")
                    self.lines.append(text)
                    return text
        raise AssertionError(f"serve printed nothing within {START_WAIT} s: {self.stderr()}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def tree(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self) -> tuple[int, list[psutil.Process]]:
        """SIGTERM; the exit status and whatever of its tree is still alive after it exited."""
        tree = self.tree()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_WAIT)
        finally:
            self._stderr.close()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        _, alive = psutil.wait_procs(tree, timeout=5.0)
        return code, [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    def kill(self) -> None:
        if self.proc.poll() is None:
            for p in self.tree():
                try:
                    p.kill()
                except psutil.Error:
                    pass
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def modern_call(
    g: Serve, name: str, arguments: dict[str, Any], authorization: str, *, path: str = "/mcp", **headers: str
) -> httpx.Response:
    """A 2026-07-28 tools/call on ``path``, self-contained (no session, id 11), with any extra headers."""
    body = {
        "jsonrpc": "2.0",
        "id": 11,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": MODERN_META},
    }
    return httpx.post(
        g.base + path,
        content=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "authorization": authorization,
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": name,
            **headers,
        },
        timeout=30,
    )


@contextmanager
def shared_by_module(g: Serve) -> Iterator[Serve]:
    """``g`` shared by a module's tests: exempt from the leak check while it runs, then stopped, cleanly.

    Its workers and servers come and go (restarts, the forkserver's idle
    workers) within and across the tests; at the end it must exit 0 and
    leave no process behind.
    """
    from conftest import register_shared

    register_shared(g.proc.pid)
    try:
        yield g
    finally:
        code, alive = g.stop()
        assert code == 0, g.stderr()
        assert alive == [], f"serve left processes behind: {alive}"


@contextmanager
def sdk_http_server(script: str = "http_server.py", *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A server of tests/servers/ that prints ``PORT n`` once it serves over HTTP (by default http_server.py, the
    SDK's MCPServer on uvicorn): the process and its URL."""
    proc = subprocess.Popen([PY, str(SERVERS / script), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(START_WAIT):
                raise AssertionError(f"{script} printed no port within {START_WAIT} s")
        line = proc.stdout.readline().decode()
        assert line.startswith("PORT "), line
        yield proc, f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@asynccontextmanager
async def sdk_client(
    url: str, headers: dict[str, str], mode: str = "auto", *, message_handler: Any = None, stream_open: Any = None
) -> AsyncIterator[Any]:
    """The MCP SDK's own client on ``url``.

    ``message_handler``: the SDK's, for server notifications. ``stream_open``:
    an ``asyncio.Event`` set when the server answers the client's GET (the
    standalone stream a 2025 session hears server messages on); the server
    registers that stream before its answer's headers reach the client.
    """
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async def seen(response: Any) -> None:
        if stream_open is not None and response.request.method == "GET" and response.status_code == 200:
            stream_open.set()

    async with httpx2.AsyncClient(headers=headers, timeout=30.0, event_hooks={"response": [seen]}) as http:
        async with Client(
            streamable_http_client(url, http_client=http), mode=mode, message_handler=message_handler
        ) as client:
            yield client


E = TypeVar("E", bound=BaseException)


def raised_within(exc: BaseException, kind: type[E]) -> E:
    """The exception of ``kind`` in ``exc``: itself, or inside it (the SDK's task groups wrap what a client
    raises in exception groups)."""
    if isinstance(exc, kind):
        return exc
    for inner in [*getattr(exc, "exceptions", ()), exc.__cause__, exc.__context__]:
        if isinstance(inner, BaseException):
            try:
                return raised_within(inner, kind)
            except LookupError:
                pass
    raise LookupError(f"no {kind.__name__} in {exc!r}")


def mcp_post(g: Serve, body: Any, **headers: str) -> httpx.Response:
    """A POST to ``g``'s ``/mcp`` as any HTTP client sends it: ``body`` (bytes, or JSON to encode) and ``headers``."""
    return httpx.post(
        g.url,
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream", **headers},
        timeout=30,
    )


def answer(response: httpx.Response) -> Any:
    """A POST's JSON-RPC answer: its JSON body, or an event stream's last message event (either is MCP's)."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    return json.loads([line for line in response.text.splitlines() if line.startswith("data:")][-1][5:])


INITIALIZE: Final[dict[str, Any]] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class Session2025:
    """A 2025 session opened by hand (initialize), as any HTTP client can: its id, its calls, its end."""

    def __init__(self, g: Serve, authorization: str) -> None:
        self.g, self.authorization = g, authorization
        opened = mcp_post(g, INITIALIZE, authorization=authorization)
        assert opened.status_code == 200, opened.text
        self.id = opened.headers["mcp-session-id"]

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The call's first text block."""
        answered = mcp_post(
            self.g,
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
            authorization=self.authorization,
            **{"mcp-session-id": self.id, "mcp-protocol-version": "2025-11-25"},
        )
        result = answer(answered)["result"]
        assert result["isError"] is False, result
        return str(result["content"][0]["text"])

    def close(self) -> None:
        ended = httpx.delete(
            self.g.url, headers={"authorization": self.authorization, "mcp-session-id": self.id}, timeout=30
        )
        assert ended.status_code == 200, ended.text


def metrics_of(g: Serve) -> dict[str, float]:
    """``g``'s /metrics samples now (see :func:`samples`)."""
    return samples(httpx.get(g.base + "/metrics", headers=g.headers, timeout=30).text)


def pid_of(result: Any) -> int:
    """The pid a raw server's ``pid`` tool answered (a successful call's)."""
    assert result.is_error is False, result
    return int(json.loads(result.content[0].text)["pid"])


def _shared_servers(remote: str) -> dict[str, Any]:
    """The shared gateway's servers; ``remote``: the URL of an HTTP server to serve beside the stdio ones."""
    return {
        "remote": {"type": "http", "url": remote},
        "raw": raw(),
        "ann": server("annotated_server.py"),
        "ps": raw(session="per-session", max_sessions=2, idle=60),
        "store": server("store_server.py", session="per-session", max_sessions=4),
        "slow": raw(timeout=0.5, kill_grace=0.1),
        "capped": raw(limits={"memory_mb": 60}, auto_reconnect=False),
        "brief": raw(session="per-session", idle=0.5),
        "bare": server("escape_server.py"),
        "hdr": server("header_server.py"),
        "latch": server("latch_server.py"),
        # Tool lists that grow on demand (add_tool): one shared, one per session.
        "grow": server("annotated_server.py"),
        "growps": server("annotated_server.py", session="per-session"),
        "growbrief": server("annotated_server.py", session="per-session", idle=0.5),
        # Only where the sandbox can run (a server that cannot be sandboxed never opens).
        **({"jail": server("escape_server.py", sandbox=True)} if SANDBOX else {}),
    }


# The shared gateway while it runs, and what stops it (it, then the HTTP server behind it).
_shared: tuple[Serve, contextlib.ExitStack] | None = None


@pytest.fixture(scope="module")
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One gateway for every module that imports this fixture (the tests of tests/gateway/ by part).

    Starting a gateway with its servers takes seconds, most of those modules'
    time. A fixture imported into several modules is one per module in pytest
    (whatever its scope), so this module-scoped one hands each the same
    process: started for the first module that asks for it, stopped after the
    last one in the run's order that does (or at the session's end, if the run
    stops early), exiting 0 and leaving no process (:func:`shared_by_module`).
    Tests that stop or misconfigure a gateway start their own.
    """
    global _shared
    if _shared is None:
        from conftest import register_shared

        stack = contextlib.ExitStack()
        try:
            remote, url = stack.enter_context(sdk_http_server())
            register_shared(remote.pid)
            g = Serve(tmp_path_factory.mktemp("gateway"), _shared_servers(url), "--max-body-bytes", "65536")
            stack.enter_context(shared_by_module(g))
        except BaseException:
            stack.close()
            raise
        request.session.addfinalizer(stack.close)
        _shared = g, stack
    yield _shared[0]
    users = [item for item in request.session.items if "gateway" in getattr(item, "fixturenames", ())]
    last = [item.module for item in users if getattr(item.module, "gateway", None) is gateway][-1:]
    if last == [request.module]:
        stack = _shared[1]
        _shared = None
        stack.close()


class Heard:
    """A 2025 session's ears: its GET stream open, and the tools/list_changed notifications it got."""

    def __init__(self) -> None:
        import mcp_types

        self.kind = mcp_types.ToolListChangedNotification
        self.stream_open = asyncio.Event()
        self.count = 0
        self._changes: asyncio.Queue[None] = asyncio.Queue()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, self.kind):
            self.count += 1
            self._changes.put_nowait(None)

    async def next(self, wait: float = NOTIFY_WAIT) -> None:
        """The next notification (one that came already counts)."""
        await asyncio.wait_for(self._changes.get(), wait)


async def speak_while_held(answer: Path, speak: Path, serve: Serve, shows: str, wait: float) -> None:
    """With a call held at the server on the FIFO ``answer``, let another call speak through the FIFO ``speak``;
    once the gateway's log ``shows`` what came of it (the only witness while the held call runs), release
    ``answer``."""
    held = await asyncio.wait_for(asyncio.to_thread(os.open, answer, os.O_WRONLY), wait)
    fd = await asyncio.wait_for(asyncio.to_thread(os.open, speak, os.O_WRONLY), wait)
    os.write(fd, b"\n")
    os.close(fd)
    deadline = time.monotonic() + wait
    while shows not in serve.stderr():
        assert time.monotonic() < deadline, serve.stderr()
        await asyncio.sleep(0.05)
    os.write(held, b"\n")
    os.close(held)


__all__ = [
    "IDLE_EXPIRY_WAIT",
    "INITIALIZE",
    "MODERN_META",
    "NOTIFY_WAIT",
    "OTHER_TOKEN",
    "SANDBOX",
    "Heard",
    "PY",
    "SERVERS",
    "START_WAIT",
    "STOP_WAIT",
    "TOKEN",
    "Serve",
    "Session2025",
    "answer",
    "gated",
    "gateway",
    "mcp_post",
    "metrics_of",
    "modern_call",
    "pid_of",
    "raised_within",
    "raw",
    "samples",
    "sdk_client",
    "sdk_http_server",
    "server",
    "shared_by_module",
    "speak_while_held",
]
