"""The stdio transport: one server process, its three pipes, and how it ends.

- :mod:`.lines` cuts stdout into lines under the ``max_result_bytes`` cap
  and keeps and forwards stderr lines (pure, tested without processes).
- :class:`StdioSession` owns the process (an ``asyncio.SubprocessProtocol``
  of our own, so the exit status is known the moment the process exits,
  whoever still holds its pipes) and the JSON-RPC client on top, and says
  once why the server ended: its exit status, or a closed stdout or stdin
  while it lives on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final

from ..containment.launch import spawn, wrapper_exec_error
from ..wire import failures
from ..wire.failures import HostError, RemoteError
from ..wire.framing import BATCH_BYTES
from ..wire.mcpjson import ContentBlock, ToolSpec
from ..wire.messages import ServerSpec
from . import era
from ._jsonscan import MISSING
from .jsonrpc import Client, Trace
from .lines import LineFramer, StderrLines
from .protocol import OnProgress, OnRequest

# After stdout or stdin closes, how long to wait for the exit status before
# saying the server closed the pipe and lives on (it is then stopped).
EXIT_STATUS_WAIT: Final = 1.0
# Bytes kept of what a server writes on stdout before the handshake that is
# not JSON-RPC (a banner, a usage text): quoted when it turns out not to be
# an MCP server.
STDOUT_HEAD_BYTES: Final = 512
# After the server exits, how long its last stderr lines may take to arrive;
# a grandchild can keep stderr open, so this is bounded and short.
STDERR_FLUSH_WAIT: Final = 0.2


class _Pipes(asyncio.SubprocessProtocol):
    def __init__(self, owner: StdioSession) -> None:
        self._owner = owner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Before spawn() returns: a server that fails at once (a bad #! line)
        # can exit before the coroutine that started it resumes.
        assert isinstance(transport, asyncio.SubprocessTransport)
        self._owner.transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._owner.framer.feed(data)
        elif fd == 2:
            self._owner.stderr.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._owner.pipe_lost(fd)

    def process_exited(self) -> None:
        self._owner.process_exited()


class StdioSession:
    """One launched stdio server and its JSON-RPC client.

    ``on_end(reason)`` is called once the server is gone or unusable (the
    generation then stops); ``log(level, message, stderr)`` reaches the
    agent's logging; ``on_garbage(line)`` counts lines that are not JSON-RPC;
    ``explain(reason)`` may name a better reason for an ending (the kernel's
    OOM kill behind a SIGKILL) before the calls in flight are failed with it;
    ``on_tools_changed()`` is told of the server's ``tools/list_changed``,
    ``on_notification(method, params)`` (the relay) of its other notifications.
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        on_end: Callable[[HostError], None],
        log: Callable[[int, str, bool], None],
        on_garbage: Callable[[bytes], None],
        explain: Callable[[HostError], HostError] | None = None,
        on_tools_changed: Callable[[], None] | None = None,
        on_notification: Callable[[str, bytes | None], None] | None = None,
        on_request: OnRequest | None = None,
    ) -> None:
        self.spec = spec
        self._explain = explain
        self._on_end = on_end
        self._log = log
        self._on_garbage = on_garbage
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.framer = LineFramer(spec.limits.max_result_bytes, self._line, self._oversize)
        self.stderr = StderrLines(lambda level, text: log(level, text, True), later=loop.call_later)
        self.client = Client(
            self._write,
            on_garbage=self._garbage,
            log=lambda level, text: log(level, text, False),
            server_log=lambda level, text: log(level, text, True),
            on_echo=self._echoed,
            on_tools_changed=on_tools_changed,
            on_notification=on_notification,
            on_request=on_request,
        )
        # What the server wrote on stdout before the handshake that was not
        # JSON-RPC (its first STDOUT_HEAD_BYTES).
        self._head = bytearray()
        self.transport: asyncio.SubprocessTransport | None = None
        # The sandbox backend the launch used (None: no sandbox).
        self.sandbox: str | None = None
        self.exited: asyncio.Future[int] = loop.create_future()
        self._stderr_closed = asyncio.Event()
        self._stdout_closed = asyncio.Event()
        self.initialized = False
        self._ended = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Lines held in this loop iteration (see _write): they go in one write
        # at its end, or once they reach BATCH_BYTES (None: none held).
        self._lines: list[bytes] | None = None
        self._batched = 0

    @property
    def pid(self) -> int | None:
        return None if self.transport is None else self.transport.get_pid()

    @property
    def stderr_tail(self) -> list[str]:
        return list(self.stderr.tail)

    @property
    def stdout_head(self) -> bytes:
        """The first bytes of non-JSON-RPC output the server wrote before its handshake."""
        return bytes(self._head)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Spawn the server (raises LaunchError); the host tears the tree down after."""
        self.transport, _, self.sandbox = await spawn(self.spec, lambda: _Pipes(self))
        yield

    @property
    def protocol_version(self) -> str | None:
        return self.client.protocol_version

    @property
    def listing_ttl(self) -> float | None:
        return self.client.listing_ttl

    @property
    def capabilities(self) -> object:
        return self.client.capabilities

    @property
    def listed_at(self) -> float:
        return self.client.listed_at

    async def start(self, trace: Trace = None) -> list[ToolSpec]:
        """Negotiate the protocol (:mod:`.era`) and list the tools. Raises HostError."""
        what = "initialize" if self.spec.protocol == "legacy" else "the protocol negotiation"
        try:
            await self.client.negotiate(self.spec.protocol, trace)
            self.initialized = True
            what = "tools/list"
            tools = await self.client.list_tools(self._warn, trace)
        except RemoteError as exc:
            raise failures.start_failed(f"{what} was answered with an error: {exc}", list(self.stderr.tail)) from None
        if self.client.modern and (self.client.discovered is None or era.lists_changes(self.client.discovered)):
            self._spawn_task(era.follow_changes(self.client, self._log))
        return tools

    async def list_tools(self, trace: Trace = None) -> list[ToolSpec]:
        try:
            return await self.client.list_tools(self._warn, trace)
        except RemoteError as exc:
            raise failures.remote("tools/list", exc) from None

    def _warn(self, text: str) -> None:
        self._log(logging.WARNING, text, False)

    async def ping(self) -> None:
        """Returns once the server answers a ping (an error object is an answer too: it is alive)."""
        with contextlib.suppress(RemoteError):
            await self.client.request("ping", None, what="ping")

    async def relay(self, method: str, params: bytes | None) -> tuple[bytes | None, bytes | None]:
        return await self.client.relay(method, params)

    async def call(
        self, name: str, arguments: bytes, on_progress: OnProgress | None = None, trace: Trace = None
    ) -> tuple[list[ContentBlock], bool, bytes | None]:
        try:
            return await self.client.call_tool(name, arguments, on_progress, trace)
        except RemoteError as exc:
            raise failures.remote(name, exc) from None

    # -- the process's side -------------------------------------------------- #
    def _write(self, line: bytes) -> None:
        """Write a line to the server: at once, or with the others of this loop iteration at its end.

        Held while other requests are in flight (concurrent calls start in
        one iteration: a write each would wake the server once per request,
        and its answers the worker once per answer); held lines go in one
        write at the iteration's end or once they reach BATCH_BYTES, and a
        line written meanwhile joins them, in order. A lone request is
        written at once and costs no callback.
        """
        lines = self._lines
        if lines is None:
            if self.client.in_flight <= 1:
                self._write_now(line)
                return
            lines = self._lines = []
            self._loop.call_soon(self._flush)
        lines.append(line)
        self._batched += len(line)
        if self._batched >= BATCH_BYTES:
            self._write_lines()

    def _write_lines(self) -> None:
        lines, self._lines, self._batched = self._lines, [], 0
        if lines:
            self._write_now(b"".join(lines))

    def _flush(self) -> None:
        """Write the lines held in this loop iteration (see :meth:`_write`)."""
        self._write_lines()
        self._lines = None

    def _write_now(self, data: bytes) -> None:
        if self.transport is None:
            return
        stdin = self.transport.get_pipe_transport(0)
        if stdin is not None and not stdin.is_closing():
            stdin.write(data)  # type: ignore[attr-defined]

    def _line(self, line: bytes) -> None:
        self.client.feed(line)

    def _garbage(self, line: bytes) -> None:
        if not self.initialized and len(self._head) < STDOUT_HEAD_BYTES:
            self._head += line[: STDOUT_HEAD_BYTES - len(self._head)] + b"\n"
        self._on_garbage(line)

    def _echoed(self, method: str, line: bytes) -> None:
        self.end(failures.echoed(method, line, list(self.stderr.tail)))

    def _oversize(self, rid: object, size: int, complete: bool) -> None:
        cap = self.spec.limits.max_result_bytes
        if rid is not MISSING and self.client.fail(rid, failures.too_large(cap, size, complete=complete)):
            return
        if complete:
            # A whole JSON object that answers nothing of ours (a notification,
            # a stale reply): dropped, the stream is intact.
            self._log(
                logging.WARNING,
                f"dropped a {size:,}-byte message over max_result_bytes={cap:,} that answered no pending request",
                False,
            )
            return
        self.end(failures.unattributable(cap, size, list(self.stderr.tail)))

    def pipe_lost(self, fd: int) -> None:
        if fd == 1:
            self.framer.eof()
            self._stdout_closed.set()
            self._spawn_task(self._closed_pipe("stdout"))
        elif fd == 0:
            self._spawn_task(self._closed_pipe("stdin"))
        elif fd == 2:
            self.stderr.eof()
            self._stderr_closed.set()

    async def _closed_pipe(self, which: str) -> None:
        # Usually the process is exiting: its exit status is the better reason.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), EXIT_STATUS_WAIT)
        if not self.exited.done():
            self.end(failures.pipe_closed(which, list(self.stderr.tail)))

    def process_exited(self) -> None:
        assert self.transport is not None
        rc = self.transport.get_returncode()
        self._spawn_task(self._report_exit(-1 if rc is None else rc))

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        # asyncio keeps only weak references to tasks: hold them until done.
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report_exit(self, rc: int) -> None:
        # Let the last stderr lines and stdout bytes arrive (what it wrote
        # explains an exit before the handshake; a grandchild may hold a pipe open).
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(self._stderr_closed.wait(), self._stdout_closed.wait()), STDERR_FLUSH_WAIT
            )
        if not self.exited.done():
            self.exited.set_result(rc)
        tail = list(self.stderr.tail)
        exec_error = wrapper_exec_error(rc, tail, self.sandbox) if not self.initialized else None
        if exec_error is not None:
            self.end(failures.exec_failed(self.spec.command, exec_error, rc))
        elif not self.initialized:
            boxed = self.spec.command if self.spec.sandbox is not None else None
            self.end(failures.exited_before_handshake(rc, bytes(self._head), tail, self.spec.limits, boxed))
        else:
            self.end(failures.exited(rc, tail, self.spec.limits))

    def end(self, reason: HostError) -> None:
        """The server is gone or unusable: fail what is in flight, tell the owner once."""
        if self._explain is not None and not self._ended:
            reason = self._explain(reason)
        self.client.close(reason)
        if not self._ended:
            self._ended = True
            self._on_end(reason)

    def has_exited(self) -> bool:
        return self.exited.done()

    async def wait_exited(self, timeout: float) -> bool:
        if self.transport is None:
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), timeout)
        return self.exited.done()

    def close_transport(self) -> None:
        if self.transport is not None:
            self._flush()  # a cancel notification written just before goes too
            with contextlib.suppress(Exception):
                stdin = self.transport.get_pipe_transport(0)
                if stdin is not None:
                    stdin.close()
            self.transport.close()
        self.stderr.flush_note()


__all__ = [
    "EXIT_STATUS_WAIT",
    "STDOUT_HEAD_BYTES",
    "StdioSession",
]
