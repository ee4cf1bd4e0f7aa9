"""Helpers for tests that run ``lovia-mcp serve`` as a real process and reach it as clients do."""

from __future__ import annotations

import asyncio
import json
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


__all__ = [
    "MODERN_META",
    "NOTIFY_WAIT",
    "OTHER_TOKEN",
    "Heard",
    "PY",
    "SERVERS",
    "START_WAIT",
    "STOP_WAIT",
    "TOKEN",
    "Serve",
    "gated",
    "modern_call",
    "raised_within",
    "raw",
    "samples",
    "sdk_client",
    "sdk_http_server",
    "server",
    "shared_by_module",
]
