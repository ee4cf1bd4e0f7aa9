"""The session host: one server connection, supervised.

Runs the MCP SDK's ``ClientSession`` against a server it launches (stdio) or
reaches (streamable HTTP), answers the agent's requests and turns every way a
server can fail into a typed :class:`~lovia_mcp_worker.protocol.Failure`.
The same code runs inside a worker process (``isolation="process"``) and
inside the agent process (``isolation="none"``); only the channel differs.

Lifecycle: a *generation* is one launched server plus its session. Requests
use the current generation, starting one on demand (single flight). A
generation ends when the server exits, passes a limit, breaks the protocol, or
a timed-out call's tree is killed; the next request starts a fresh one. Two
generations never overlap, so "the tree" is always one server's tree.

Caveats: restarts are counted in a sliding window; past ``restart_limit`` the
host fails fast (``circuit_open``) until the window has passed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import functools
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import msgspec

from . import guard
from .launch import READ_CHUNK, LaunchError, spawn, wrapper_exec_error, wait_exit
from .protocol import (
    AgentMessage,
    CallTool,
    Cancel,
    Close,
    Closed,
    ContentBlock,
    Failure,
    GetStats,
    ListTools,
    Log,
    Open,
    Opened,
    Resource,
    Result,
    ServerSpec,
    Stats,
    StatsReply,
    ToolSpec,
    Tools,
    WorkerMessage,
)

# Lines of server stderr kept for error messages.
STDERR_TAIL_LINES: Final = 20
# Longest stderr line kept or forwarded; the rest of a longer line is dropped.
STDERR_LINE_MAX: Final = 2000
# Stderr lines forwarded to the agent's logging per second; a chatty server
# must not flood the agent, and the pipe is drained either way.
STDERR_LOG_RATE: Final = 200
# How often the guard samples the tree when a memory, CPU or process limit is
# set. 0.1 s bounds overshoot while costing ~1 % of a core.
GUARD_INTERVAL: Final = 0.1
# How often a worker without limits reaps the orphans it inherited (exited
# double-forked helpers). Zombies hold only a pid each, so this can be slow;
# one reap costs a few /proc reads.
REAP_INTERVAL: Final = 1.0
# After the server closes stdout, how long to wait for its exit status before
# reporting the end without one (a server can close stdout and linger).
EXIT_STATUS_WAIT: Final = 1.0
# Bound on a whole shutdown of one generation: kill escalation plus slack.
SHUTDOWN_WAIT: Final = guard.TERM_GRACE + guard.KILL_WAIT + 1.0
# After the server exits, how long its last stderr lines may take to arrive;
# a grandchild can keep stderr open, so this is bounded and short.
STDERR_FLUSH_WAIT: Final = 0.2
# Prefix of an over-long stdout line searched for the JSON-RPC id.
ID_SCAN_BYTES: Final = 4096
# Request id of the unsolicited ``Opened`` sent when a generation starts; the
# agent numbers its requests from 1.
ANNOUNCE_ID: Final = 0
# The MCP SDK's JSON-RPC code for "the connection closed" (mcp_types.CONNECTION_CLOSED).
CONNECTION_CLOSED: Final = -32000
# JSON-RPC error code the host uses for a result over max_result_bytes.
TOO_LARGE_CODE: Final = -32099

_ID_RE = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')
_json = msgspec.json.Decoder()
_json_encode = msgspec.json.Encoder().encode


class _Envelope(msgspec.Struct):
    """A JSON-RPC message's id and method; msgspec skips the rest unparsed."""

    id: int | str | None = None
    method: str | None = None  # set on the server's own requests: never a reply


_envelope = msgspec.json.Decoder(_Envelope)


class HostError(Exception):
    """A request failure with everything the agent needs to explain it."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        hint: str | None = None,
        exit_code: int | None = None,
        signal_name: str | None = None,
        stderr_tail: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint
        self.exit_code = exit_code
        self.signal_name = signal_name
        self.stderr_tail = stderr_tail or []

    def failure(self, request_id: int) -> Failure:
        return Failure(
            id=request_id,
            kind=self.kind,
            message=self.message,
            hint=self.hint,
            exit_code=self.exit_code,
            signal=self.signal_name,
            stderr_tail=self.stderr_tail,
        )


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class Generation:
    """One launched server and its session."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.proc: asyncio.subprocess.Process | None = None
        self.session: Any = None
        self.tools: list[ToolSpec] = []
        self.reason: HostError | None = None
        self.retiring = False
        self.stop = asyncio.Event()
        self.exited = asyncio.Event()
        self.down = asyncio.Event()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    @property
    def server_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def retire(self, reason: HostError) -> None:
        """End this generation; the first reason given is the one reported."""
        if self.reason is None:
            self.reason = reason
        self.retiring = True
        self.stop.set()


class Host:
    """Serves one connection's requests; replies through ``emit``."""

    def __init__(self, emit: Callable[[WorkerMessage], None], *, subreaper: bool) -> None:
        self._emit = emit
        self._subreaper = subreaper
        self.spec: ServerSpec | None = None
        self.current: Generation | None = None
        self._starting: asyncio.Task[Generation] | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._generations = 0
        self._restart_times: collections.deque[float] = collections.deque()
        self._created = time.monotonic()
        # Strong references to this host's generation tasks (asyncio keeps
        # only weak ones); aclose waits for them.
        self._runners: set[asyncio.Future[None]] = set()
        self._closing = False
        self.calls = 0
        self.errors = 0
        self.timeouts = 0
        self.restarts = 0
        self.last_restart_reason: str | None = None
        self.garbage_lines = 0
        # Direct tools/call requests in flight, by their string id.
        self._direct: dict[str, asyncio.Future[bytes]] = {}
        self._direct_ids = itertools.count(1)

    # -- dispatch ------------------------------------------------------------ #
    def handle(self, msg: AgentMessage) -> None:
        """Start handling one request; never blocks."""
        if isinstance(msg, Cancel):
            self._cancel(msg)
            return
        if isinstance(msg, GetStats):
            self._emit(StatsReply(id=msg.id, stats=self.stats()))
            return
        if self._closing and not isinstance(msg, Close):
            self._emit(Failure(id=msg.id, kind="closed", message="the connection is closing"))
            return
        task = asyncio.ensure_future(self._serve(msg))
        self._tasks[msg.id] = task
        task.add_done_callback(functools.partial(self._forget, msg.id))

    def _forget(self, request_id: int, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)

    async def _serve(self, msg: AgentMessage) -> None:
        try:
            if isinstance(msg, Open):
                self.spec = msg.spec
                gen = await self._live()
                self._emit(Opened(id=msg.id, server_pid=gen.server_pid, tools=gen.tools))
            elif isinstance(msg, ListTools):
                gen = await self._live()
                gen.tools = await self._list_tools(gen)
                self._emit(Tools(id=msg.id, tools=gen.tools))
            elif isinstance(msg, CallTool):
                self._emit(await self._call(msg))
            elif isinstance(msg, Close):
                await self.aclose()
                self._emit(Closed(id=msg.id))
        except HostError as exc:
            if isinstance(msg, CallTool):
                self.errors += 1
            self._emit(exc.failure(msg.id))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a worker bug must still answer the request
            self._log(logging.ERROR, f"internal error serving {type(msg).__name__}: {exc!r}")
            self._emit(Failure(id=msg.id, kind="internal", message=f"{type(exc).__name__}: {exc}"))

    def _cancel(self, msg: Cancel) -> None:
        task = self._tasks.get(msg.id)
        if task is None:
            return
        # Cancelling the task abandons the SDK request, which sends the
        # server `notifications/cancelled`.
        task.cancel()
        if msg.timed_out:
            self.timeouts += 1
            gen = self.current
            spec = self.spec
            if gen is not None and spec is not None and spec.on_timeout == "kill":
                reason = HostError(
                    "timeout",
                    "the server was killed after a call passed its timeout",
                    hint="Raise the tool timeout, or use on_timeout='cancel' for servers that honour cancellation.",
                )
                # New requests wait for a fresh server from now on.
                gen.retiring = True
                asyncio.get_running_loop().call_later(spec.kill_grace, gen.retire, reason)

    # -- generations --------------------------------------------------------- #
    async def _live(self) -> Generation:
        while True:
            gen = self.current
            if gen is not None and not gen.retiring and gen.session is not None:
                return gen
            if gen is not None:
                await gen.down.wait()
                if self.current is gen:
                    self.current = None
                continue
            if self._closing:
                raise HostError("closed", "the connection is closing")
            if self._starting is None:
                self._starting = asyncio.ensure_future(self._start())
                self._starting.add_done_callback(self._started)
            return await asyncio.shield(self._starting)

    def _started(self, task: asyncio.Task[Generation]) -> None:
        self._starting = None
        if not task.cancelled() and task.exception() is None:
            self.current = task.result()

    async def _start(self) -> Generation:
        spec = self.spec
        if spec is None:
            raise HostError("internal", "no server spec: Open was never sent")
        now = time.monotonic()
        if self._generations > 0:
            while self._restart_times and now - self._restart_times[0] > spec.restart_window:
                self._restart_times.popleft()
            if len(self._restart_times) >= spec.restart_limit:
                wait = spec.restart_window - (now - self._restart_times[0])
                raise HostError(
                    "circuit_open",
                    f"server {spec.name!r} restarted {len(self._restart_times)} times in "
                    f"{spec.restart_window:g} s (last: {self.last_restart_reason}); failing fast",
                    hint=f"Fix the server; calls are tried again in {wait:.0f} s.",
                )
            self._restart_times.append(now)
            self.restarts += 1
        self._generations += 1
        gen = Generation(self._generations)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        runner = asyncio.ensure_future(self._run(gen, ready))
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)
        try:
            await asyncio.wait_for(asyncio.shield(ready), spec.open_timeout)
        except asyncio.TimeoutError:
            gen.retire(
                HostError(
                    "open",
                    f"server {spec.name!r} did not finish start-up (spawn, handshake, tool listing) "
                    f"within open_timeout={spec.open_timeout:g} s",
                    hint="Check that the command is an MCP server speaking stdio, or raise open_timeout.",
                    stderr_tail=list(gen.stderr_tail),
                )
            )
            await self._wait_down(gen)
            assert gen.reason is not None
            raise gen.reason from None
        except asyncio.CancelledError:
            gen.retire(HostError("closed", "start-up was cancelled"))
            raise
        except HostError:
            await self._wait_down(gen)
            raise
        self._log(logging.INFO, f"server {spec.name!r} started (pid {gen.server_pid}, generation {gen.number})")
        # Announce the new pid (id 0 is never a request id; tools are not
        # repeated): if this worker dies, the agent kills the server's process
        # group itself, and that must be this generation's group.
        self._emit(Opened(id=ANNOUNCE_ID, server_pid=gen.server_pid, tools=[]))
        return gen

    async def _wait_down(self, gen: Generation) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gen.down.wait(), SHUTDOWN_WAIT)

    async def _run(self, gen: Generation, ready: asyncio.Future[None]) -> None:
        """Own one generation from launch to teardown (anyio needs one task for both)."""
        spec = self.spec
        assert spec is not None
        try:
            try:
                from mcp import ClientSession
            except ImportError as exc:
                raise HostError(
                    "missing_mcp",
                    "MCP support requires the 'mcp' package, which is not installed",
                    hint="Install it with: pip install 'mcp>=2.3'",
                ) from exc
            async with self._transport(gen, spec) as (read, write):
                async with ClientSession(read, write) as session:
                    try:
                        await self._race(gen, session.initialize())
                        gen.session = session
                        gen.tools = await self._race(gen, self._list_tools(gen))
                    except Exception as exc:  # noqa: BLE001 - recorded before teardown, re-raised
                        # Record the real cause now: the teardown below kills
                        # the server, and its exit must not be what is reported.
                        if gen.reason is None:
                            gen.retire(self._failed(gen, spec, exc, opened=False))
                        raise
                    if not ready.done():
                        ready.set_result(None)
                    await gen.stop.wait()
        except HostError as exc:
            gen.retire(exc)
        except LaunchError as exc:
            gen.retire(HostError("open", str(exc), hint=exc.hint))
        except BaseException as exc:  # noqa: BLE001 - every ending is reported, cancellation re-raised below
            if gen.reason is None:
                gen.retire(self._failed(gen, spec, exc, opened=ready.done()))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            gen.session = None
            gen.retiring = True
            gen.down.set()
            if self.current is gen:
                self.current = None
            if not ready.done():
                assert gen.reason is not None
                ready.set_exception(gen.reason)
                ready.exception()  # mark retrieved: _start may have stopped waiting
            elif gen.reason is not None and not self._closing:
                self.last_restart_reason = gen.reason.message
                self._log(logging.WARNING, f"server {spec.name!r} generation {gen.number} ended: {gen.reason.message}")

    async def _race(self, gen: Generation, aw: Any) -> Any:
        """Await ``aw`` unless the generation stops first (exit during handshake)."""
        work = asyncio.ensure_future(aw)
        stop = asyncio.ensure_future(gen.stop.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not work.done():
                # Cancelled from outside (the session's task group failing):
                # the work's own exception is then the caller's to ignore.
                work.cancel()
                work.add_done_callback(_retrieve)
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        assert gen.reason is not None
        raise gen.reason

    def _failed(self, gen: Generation, spec: ServerSpec, exc: BaseException, *, opened: bool) -> HostError:
        """The HostError for an exception that ended a generation."""
        if isinstance(exc, HostError):
            return exc
        leaf = _leaf(exc)
        detail = f"{type(leaf).__name__}: {leaf}"
        if spec.transport == "http":
            return HostError(
                "server_exited" if opened else "open",
                f"could not talk to {spec.url}: {detail}",
                hint="Check the URL and that the server is running and reachable.",
            )
        if not opened:
            return HostError(
                "open",
                f"the server failed during start-up (handshake or tool listing): {detail}",
                hint="Check that the command is an MCP server speaking stdio (stderr tail below).",
                stderr_tail=list(gen.stderr_tail),
            )
        return self._lost(gen, detail)

    def _lost(self, gen: Generation, detail: str) -> HostError:
        return HostError(
            "server_exited",
            f"lost the connection to the server: {detail}",
            hint="Check the server's log.",
            stderr_tail=list(gen.stderr_tail),
        )

    # -- transports ---------------------------------------------------------- #
    @contextlib.asynccontextmanager
    async def _transport(self, gen: Generation, spec: ServerSpec) -> AsyncIterator[tuple[Any, Any]]:
        if spec.transport == "http":
            async with _http_streams(spec) as streams:
                yield streams
            return
        async with self._stdio_streams(gen, spec) as streams:
            yield streams

    @contextlib.asynccontextmanager
    async def _stdio_streams(self, gen: Generation, spec: ServerSpec) -> AsyncIterator[tuple[Any, Any]]:
        import anyio
        from mcp.shared.message import SessionMessage

        proc = await spawn(spec)
        gen.proc = proc
        read_writer, read_stream = anyio.create_memory_object_stream[Any](64)
        write_stream, write_reader = anyio.create_memory_object_stream[Any](64)
        stderr_pump = asyncio.ensure_future(self._stderr_pump(gen, spec, proc))
        pumps: list[asyncio.Future[None]] = [
            stderr_pump,
            asyncio.ensure_future(self._stdout_pump(gen, spec, proc, read_writer, SessionMessage)),
            asyncio.ensure_future(self._stdin_pump(proc, write_reader)),
            asyncio.ensure_future(self._exit_watch(gen, spec, proc, stderr_pump)),
        ]
        limits = spec.limits
        if limits.memory_mb is not None or limits.cpu_seconds is not None or limits.max_processes is not None:
            pumps.append(asyncio.ensure_future(self._guard(gen, spec, proc)))
        if self._subreaper:
            # Inherited orphans that exit must not stay zombies until close.
            pumps.append(asyncio.ensure_future(self._reaper(gen, proc)))
        try:
            yield read_stream, write_stream
        finally:
            await asyncio.shield(self._teardown(gen, proc, pumps, read_writer, write_stream))

    async def _teardown(
        self,
        gen: Generation,
        proc: asyncio.subprocess.Process,
        pumps: list[asyncio.Future[None]],
        *streams: Any,
    ) -> None:
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        if proc.returncode is None:
            root, include_root = self._tree_root(proc.pid)
            grace = 0.0 if gen.reason is not None and gen.reason.kind in ("limit", "protocol", "timeout") else guard.TERM_GRACE
            await asyncio.to_thread(guard.kill_tree, root, proc.pid, include_root=include_root, term_grace=grace)
        else:
            # The server is gone; its orphans (if any) are still in the tree.
            root, include_root = self._tree_root(proc.pid)
            if include_root is False and guard.tree(root):
                await asyncio.to_thread(guard.kill_tree, root, proc.pid, include_root=False, term_grace=0.0)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gen.exited.wait(), SHUTDOWN_WAIT)
        if self._subreaper:
            guard.reap_orphans(keep=set())
        for p in pumps:
            p.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for s in streams:
            with contextlib.suppress(Exception):
                await s.aclose()

    def _tree_root(self, server_pid: int) -> tuple[int, bool]:
        # In a worker (a subreaper with no other children) the tree is all of
        # the worker's descendants, orphans included; in the agent process it
        # is the server and what it still parents.
        return (os.getpid(), False) if self._subreaper else (server_pid, True)

    async def _stdout_pump(
        self,
        gen: Generation,
        spec: ServerSpec,
        proc: asyncio.subprocess.Process,
        out: Any,
        session_message: Any,
    ) -> None:
        import mcp_types as types

        adapter = types.jsonrpc_message_adapter
        stdout = proc.stdout
        assert stdout is not None
        cap = spec.limits.max_result_bytes
        buf = bytearray()
        skipping = False  # inside an over-long line: drop bytes until its newline
        prefix = b""  # the start of an over-long line, searched for its request id

        async def deliver(line: bytes | bytearray) -> None:
            if not line.strip():
                return
            if self._direct:
                try:
                    envelope = _envelope.decode(line)
                    rid = envelope.id if envelope.method is None else None
                except msgspec.DecodeError:
                    rid = None
                if isinstance(rid, str):
                    fut = self._direct.pop(rid, None)
                    if fut is not None:
                        if not fut.done():
                            fut.set_result(bytes(line))
                        return
            try:
                msg = adapter.validate_json(line, by_name=False)
            except ValueError:
                self.garbage_lines += 1
                if self.garbage_lines <= 10 or self.garbage_lines % 1000 == 0:
                    shown = bytes(line[:200]).decode("utf-8", "replace")
                    self._log(logging.WARNING, f"skipped a non-JSON-RPC line from the server ({self.garbage_lines} so far): {shown!r}", stderr=True)
                return
            await out.send(session_message(msg))

        async def oversize(total: int, *, complete: bool) -> None:
            match = _ID_RE.search(prefix)
            size = f"{total:,} bytes" if complete else f"{total:,} bytes or more"
            message = (
                f"the server's message was larger than max_result_bytes={cap:,} "
                f"({size}); it was dropped in the worker"
            )
            if match is None:
                gen.retire(
                    HostError(
                        "protocol",
                        message + " and carried no readable request id, so the server was restarted",
                        hint="Raise Limits(max_result_bytes=...) or make the tool return less.",
                        stderr_tail=list(gen.stderr_tail),
                    )
                )
                return
            raw_id = _json.decode(match.group(1))
            direct = self._direct.pop(raw_id, None) if isinstance(raw_id, str) else None
            if direct is not None:
                if not direct.done():
                    direct.set_exception(
                        HostError("too_large", message, hint="Raise Limits(max_result_bytes=...) or ask the tool for less.")
                    )
                return
            error = types.JSONRPCError(
                jsonrpc="2.0", id=raw_id, error=types.ErrorData(code=TOO_LARGE_CODE, message=message)
            )
            await out.send(session_message(error))

        try:
            while True:
                chunk = await stdout.read(READ_CHUNK)
                if not chunk:
                    break
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    end = len(chunk) if nl < 0 else nl
                    if skipping:
                        pass  # the rest of a line already reported: drop it
                    elif len(buf) + end - start > cap:
                        # Report the moment the cap is passed, not at the line's
                        # end: an unterminated line may never end.
                        head = bytes(buf[:ID_SCAN_BYTES])
                        prefix = head + chunk[start : start + ID_SCAN_BYTES - len(head)]
                        size = len(buf) + end - start
                        buf = bytearray()
                        skipping = True
                        await oversize(size, complete=nl >= 0)
                    elif nl < 0:
                        buf += chunk[start:]
                    elif buf:
                        buf += chunk[start:nl]
                        line, buf = buf, bytearray()
                        await deliver(line)
                    else:
                        await deliver(chunk[start:nl])
                    if nl < 0:
                        break
                    skipping = False
                    start = nl + 1
            # EOF: report the exit status, not a bare "connection closed".
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(gen.exited.wait(), EXIT_STATUS_WAIT)
            if gen.reason is None:
                gen.retire(
                    HostError(
                        "server_exited",
                        "the server closed its stdout",
                        hint="Check the server's log; an MCP stdio server must keep stdout open.",
                        stderr_tail=list(gen.stderr_tail),
                    )
                )
        finally:
            with contextlib.suppress(Exception):
                await out.aclose()

    async def _stdin_pump(self, proc: asyncio.subprocess.Process, source: Any) -> None:
        stdin = proc.stdin
        assert stdin is not None
        try:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(data.encode() + b"\n")
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the exit watch reports why the server went away

    async def _stderr_pump(self, gen: Generation, spec: ServerSpec, proc: asyncio.subprocess.Process) -> None:
        stderr = proc.stderr
        assert stderr is not None
        loop = asyncio.get_running_loop()
        pending = b""
        cutting = False  # past STDERR_LINE_MAX of a line: drop the rest of it
        window_start = time.monotonic()
        sent = suppressed = 0
        note: asyncio.TimerHandle | None = None

        def report_suppressed() -> None:
            # Said when the window ends (by timer, or by the next line), so a
            # server that goes quiet after a burst still gets its count logged.
            nonlocal suppressed, note
            if note is not None:
                note.cancel()
                note = None
            if suppressed:
                self._log(logging.WARNING, f"{suppressed} stderr lines not forwarded (over {STDERR_LOG_RATE}/s)", stderr=True)
                suppressed = 0

        def take(raw: bytes) -> None:
            nonlocal sent, suppressed, note
            text = raw[:STDERR_LINE_MAX].decode("utf-8", "replace").rstrip("\r")
            gen.stderr_tail.append(text)
            if sent < STDERR_LOG_RATE:
                sent += 1
                self._emit(Log(level=logging.INFO, message=text, stderr=True))
            else:
                suppressed += 1
                if note is None:
                    note = loop.call_later(max(0.0, window_start + 1.0 - time.monotonic()), report_suppressed)

        try:
            while True:
                chunk = await stderr.read(READ_CHUNK)
                if not chunk:
                    break
                now = time.monotonic()
                if now - window_start >= 1.0:
                    report_suppressed()
                    window_start, sent = now, 0
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    piece = chunk[start:] if nl < 0 else chunk[start:nl]
                    if not cutting:
                        pending += piece
                        if nl >= 0 or len(pending) > STDERR_LINE_MAX:
                            take(pending)
                            cutting = nl < 0
                            pending = b""
                    if nl < 0:
                        break
                    cutting = False
                    start = nl + 1
            if pending:
                take(pending)
        finally:
            report_suppressed()

    async def _exit_watch(
        self,
        gen: Generation,
        spec: ServerSpec,
        proc: asyncio.subprocess.Process,
        stderr_pump: asyncio.Future[None],
    ) -> None:
        rc = await wait_exit(proc)
        # Let the stderr pump take the last lines the server wrote (a
        # grandchild may hold stderr open, hence the bound).
        await asyncio.wait({stderr_pump}, timeout=STDERR_FLUSH_WAIT)
        if gen.reason is None and not self._closing:
            tail = list(gen.stderr_tail)
            exec_error = wrapper_exec_error(rc, tail) if gen.session is None else None
            if exec_error is not None:
                gen.reason = HostError(
                    "open",
                    f"could not start {spec.command!r}: {exec_error}",
                    hint="Check the command, its interpreter line and cwd.",
                    exit_code=rc,
                )
            elif rc < 0 and -rc == getattr(signal, "SIGXCPU", -1):
                gen.reason = HostError(
                    "limit",
                    f"the server passed its CPU limit (cpu_seconds={spec.limits.cpu_seconds:g}) and was killed by SIGXCPU",
                    hint="Raise Limits(cpu_seconds=...) or make the tool do less work.",
                    signal_name="SIGXCPU",
                    stderr_tail=tail,
                )
            elif rc < 0:
                name = _signal_name(-rc)
                gen.reason = HostError(
                    "server_exited",
                    f"the server was killed by {name}",
                    hint="Check the server's log (stderr tail below).",
                    signal_name=name,
                    stderr_tail=tail,
                )
            else:
                gen.reason = HostError(
                    "server_exited",
                    f"the server exited with code {rc}",
                    hint="Check the server's log (stderr tail below).",
                    exit_code=rc,
                    stderr_tail=tail,
                )
        gen.exited.set()
        gen.retire(gen.reason or HostError("closed", "the connection was closed"))

    async def _guard(self, gen: Generation, spec: ServerSpec, proc: asyncio.subprocess.Process) -> None:
        limits = spec.limits
        root, include_root = self._tree_root(proc.pid)
        base_cpu = _children_cpu()
        while not gen.stop.is_set():
            use = await asyncio.to_thread(_tree_usage, root, include_root)
            # CPU of descendants that already exited and were reaped by us.
            cpu = use.cpu_seconds + (_children_cpu() - base_cpu if self._subreaper else 0.0)
            mb = use.rss_bytes / (1024 * 1024)
            reason: HostError | None = None
            if limits.memory_mb is not None and mb > limits.memory_mb:
                reason = HostError(
                    "limit",
                    f"the server passed its memory limit: {mb:.1f} MB resident in its process tree "
                    f"(memory_mb={limits.memory_mb:g}); it was killed",
                    hint="Raise Limits(memory_mb=...) or make the tool use less memory.",
                )
            elif limits.max_processes is not None and use.processes > limits.max_processes:
                reason = HostError(
                    "limit",
                    f"the server passed its process limit: {use.processes} processes in its tree "
                    f"(max_processes={limits.max_processes}); it was killed",
                    hint="Raise Limits(max_processes=...) or stop the server from forking.",
                )
            elif limits.cpu_seconds is not None and cpu > limits.cpu_seconds:
                reason = HostError(
                    "limit",
                    f"the server passed its CPU limit: {cpu:.1f} s of CPU in its process tree "
                    f"(cpu_seconds={limits.cpu_seconds:g}); it was killed",
                    hint="Raise Limits(cpu_seconds=...) or make the tool do less work.",
                )
            if reason is not None:
                reason.stderr_tail = list(gen.stderr_tail)
                self._log(logging.WARNING, f"server {spec.name!r}: {reason.message}")
                gen.retire(reason)
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(gen.stop.wait(), GUARD_INTERVAL)

    async def _reaper(self, gen: Generation, proc: asyncio.subprocess.Process) -> None:
        while not gen.stop.is_set():
            guard.reap_orphans(keep={proc.pid})
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(gen.stop.wait(), REAP_INTERVAL)

    # -- requests ------------------------------------------------------------ #
    async def _raw(self, gen: Generation, request: Any) -> dict[str, Any]:
        """Send a request through the session and return the raw result dict.

        ``ClientSession.send_request`` validates every result against the
        protocol models (and ``call_tool`` re-lists tools to validate output
        schemas), so one loose schema from the server would fail the whole
        listing and every call. This is its front half (stamping, the
        ``Mcp-Name`` header) without the validation; results are checked
        field by field where they are used.
        """
        from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

        session = gen.session
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        opts: dict[str, Any] = {}
        session._stamp(data, opts)
        headers = opts.setdefault("headers", {})
        key = type(request).name_param
        name = (data.get("params") or {}).get(key) if key is not None else None
        if isinstance(name, str) and MCP_NAME_HEADER not in headers:
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        raw = await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)
        if not isinstance(raw, dict):
            raise HostError("remote", f"the server answered {data['method']} with a non-object result",
                            hint="The server is not speaking MCP correctly.")
        return raw

    async def _list_tools(self, gen: Generation) -> list[ToolSpec]:
        """List every page of tools, raw: one loose schema must not sink the list."""
        import mcp_types as types

        out: list[ToolSpec] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await self._raw(gen, types.ListToolsRequest(params=params))
            except HostError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below
                raise self._classify(gen, exc, "tools/list") from exc
            for entry in page.get("tools") or []:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    self._log(logging.WARNING, f"skipped a malformed tool entry: {str(entry)[:200]!r}")
                    continue
                desc = entry.get("description")
                out.append(
                    ToolSpec(
                        name=entry["name"],
                        description=desc if isinstance(desc, str) else None,
                        input_schema=msgspec.json.encode(entry.get("inputSchema")),
                    )
                )
            cursor = page.get("nextCursor")
            if not cursor or not isinstance(cursor, str):
                return out

    async def _call(self, msg: CallTool) -> Result:
        import mcp_types as types

        gen = await self._live()
        self.calls += 1
        if gen.proc is not None:
            return await self._call_direct(gen, msg)
        arguments = _json.decode(msg.arguments) if msg.arguments else {}
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=msg.name, arguments=arguments))
        try:
            raw = await self._raw(gen, request)
        except (asyncio.CancelledError, HostError):
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            raise self._classify(gen, exc, msg.name) from exc
        structured = raw.get("structuredContent")
        return Result(
            id=msg.id,
            content=_blocks(raw.get("content")),
            is_error=bool(raw.get("isError")),
            structured_content=None if structured is None else msgspec.json.encode(structured),
        )

    async def _call_direct(self, gen: Generation, msg: CallTool) -> Result:
        """``tools/call`` on a stdio server without the SDK's per-call machinery.

        The SDK path (dispatcher, tracing spans, cancel scopes, pydantic
        models each way) costs the worker ~0.3 ms of CPU per call, more than
        the whole call in process. Here the request line is built around the
        agent's argument bytes (stamped by the session, so the negotiated
        protocol's ``_meta`` is the SDK's), and the stdout pump hands back the
        reply line by its string id (``lm-N``; the SDK's ids are integers)
        after a msgspec decode of the id alone. Handshake, listing,
        notifications and server requests stay on the SDK session. Like
        :meth:`_raw`, results are not validated against output schemas.
        """
        proc = gen.proc
        assert proc is not None and proc.stdin is not None
        rid = f"lm-{next(self._direct_ids)}"
        data: dict[str, Any] = {"method": "tools/call", "params": {"name": msg.name}}
        gen.session._stamp(data, {})
        params = _json_encode(data["params"])
        line = b"".join((
            b'{"jsonrpc":"2.0","id":"', rid.encode(), b'","method":"tools/call","params":',
            params[:-1], b',"arguments":', msg.arguments or b"{}", b"}}\n",
        ))
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._direct[rid] = fut
        stop: asyncio.Future[Any] = asyncio.ensure_future(gen.stop.wait())
        try:
            proc.stdin.write(line)
            await asyncio.wait((fut, stop), return_when=asyncio.FIRST_COMPLETED)
            if not fut.done():
                raise gen.reason or self._lost(gen, "the server stopped")
            raw = fut.result()
        except asyncio.CancelledError:
            # The SDK's courtesy cancel, by hand: the call was abandoned.
            with contextlib.suppress(Exception):
                proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"'
                                 + rid.encode() + b'","reason":"cancelled by the client"}}\n')
            raise
        finally:
            stop.cancel()
            self._direct.pop(rid, None)
        reply = _json.decode(raw)
        error = reply.get("error")
        if isinstance(error, dict):
            raise HostError(
                "remote",
                f"the server answered {msg.name} with an error: {error.get('message')} (code {error.get('code')})",
                hint="Check the tool's name and arguments against its schema.",
            )
        result = reply.get("result")
        if not isinstance(result, dict):
            raise HostError("remote", f"the server answered {msg.name} with a non-object result",
                            hint="The server is not speaking MCP correctly.")
        structured = result.get("structuredContent")
        return Result(
            id=msg.id,
            content=_blocks(result.get("content")),
            is_error=bool(result.get("isError")),
            structured_content=None if structured is None else _json_encode(structured),
        )

    def _classify(self, gen: Generation, exc: Exception, what: str) -> HostError:
        """Turn an SDK failure into the most specific HostError, in one place."""
        code = getattr(getattr(exc, "error", None), "code", None)
        if code == TOO_LARGE_CODE:
            return HostError(
                "too_large",
                str(exc),
                hint="Raise Limits(max_result_bytes=...) or ask the tool for less.",
            )
        if gen.reason is not None or gen.stop.is_set():
            return gen.reason or self._lost(gen, str(exc))
        if code == CONNECTION_CLOSED:
            # The transport reports the loss before the exit status is known.
            return HostError("server_exited", f"{what} failed: the connection to the server closed",
                             hint="Check the server's log.", stderr_tail=list(gen.stderr_tail))
        if code is not None:
            return HostError("remote", f"the server answered {what} with an error: {exc} (code {code})",
                             hint="Check the tool's name and arguments against its schema.")
        # A failure on this side with the server alive: not a lost
        # connection, so never retried on a fresh server.
        return HostError("internal", f"{what} failed in the MCP client: {type(exc).__name__}: {exc}",
                         hint="This looks like a bug in lovia-mcp or the MCP SDK; please report it.")

    # -- stats, logs, close -------------------------------------------------- #
    def stats(self) -> Stats:
        gen = self.current
        pid = gen.server_pid if gen is not None and not gen.retiring else None
        use = guard.TreeUsage(0, 0.0, 0)
        if pid is not None:
            root, include_root = self._tree_root(pid)
            use = _tree_usage(root, include_root)
        return Stats(
            worker_pid=os.getpid(),
            server_pid=pid,
            rss_bytes=use.rss_bytes,
            cpu_seconds=use.cpu_seconds,
            processes=use.processes,
            calls=self.calls,
            errors=self.errors,
            timeouts=self.timeouts,
            restarts=self.restarts,
            last_restart_reason=self.last_restart_reason,
            uptime_seconds=time.monotonic() - self._created,
            garbage_lines=self.garbage_lines,
        )

    def _log(self, level: int, message: str, *, stderr: bool = False) -> None:
        self._emit(Log(level=level, message=message, stderr=stderr))

    async def aclose(self) -> None:
        """Stop the server tree (bounded) and fail what is still in flight."""
        self._closing = True
        for task in list(self._tasks.values()):
            if task is not asyncio.current_task():
                task.cancel()
        if self._starting is not None:
            self._starting.cancel()
        gen = self.current
        if gen is not None:
            gen.retire(HostError("closed", "the connection was closed"))
            await self._wait_down(gen)
        # This host's generations only: in isolation="none" several hosts
        # share the agent's loop, and one closing must not wait on another's.
        for runner in list(self._runners):
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(runner), SHUTDOWN_WAIT)


def _tree_usage(root: int, include_root: bool) -> guard.TreeUsage:
    return guard.usage(guard.tree(root, include_root=include_root))


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _str(d: dict[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _blocks(raw: object) -> list[ContentBlock]:
    """Copy raw content blocks into wire structs with the SDK's attribute names.

    Field by field and lenient: a malformed field becomes ``None`` rather than
    failing the result; an unknown block type keeps its JSON in ``extra``.
    """
    if not isinstance(raw, list):
        return []
    out: list[ContentBlock] = []
    for b in raw:
        if not isinstance(b, dict):
            out.append(ContentBlock(type="unknown", extra=msgspec.json.encode(b)))
            continue
        btype = _str(b, "type") or "unknown"
        if btype == "text":
            out.append(ContentBlock(type="text", text=_str(b, "text") or ""))
        elif btype in ("image", "audio"):
            out.append(ContentBlock(type=btype, data=_str(b, "data"), mime_type=_str(b, "mimeType")))
        elif btype == "resource_link":
            out.append(
                ContentBlock(
                    type=btype,
                    uri=_str(b, "uri") or "",
                    name=_str(b, "name"),
                    title=_str(b, "title"),
                    description=_str(b, "description"),
                    mime_type=_str(b, "mimeType"),
                )
            )
        elif btype == "resource" and isinstance(b.get("resource"), dict):
            res = b["resource"]
            out.append(
                ContentBlock(
                    type=btype,
                    resource=Resource(
                        uri=_str(res, "uri") or "",
                        mime_type=_str(res, "mimeType"),
                        text=_str(res, "text"),
                        blob=_str(res, "blob"),
                    ),
                )
            )
        else:
            out.append(ContentBlock(type=btype, extra=msgspec.json.encode(b)))
    return out


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


@contextlib.asynccontextmanager
async def _http_streams(spec: ServerSpec) -> AsyncIterator[tuple[Any, Any]]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert spec.url is not None
    async with create_mcp_http_client(headers=dict(spec.headers) or None) as http_client:
        async with streamable_http_client(spec.url, http_client=http_client) as streams:
            yield streams[0], streams[1]


__all__ = ["ANNOUNCE_ID", "Generation", "Host", "HostError", "TOO_LARGE_CODE"]
