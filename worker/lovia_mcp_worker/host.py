"""The session host: one server connection, supervised; request dispatch and generations.

The agent's requests (:data:`~lovia_mcp_worker.protocol.AgentMessage`) come
in through :meth:`Host.handle` and are answered through ``emit``. The same
code runs inside a worker process (``isolation="process"``) and inside the
agent process (``isolation="none"``); only the channel differs.

What lives where:

- :mod:`.generation`: one server's life as a state machine;
- :mod:`.stdio` and :mod:`.jsonrpc`: the stdio transport and our own
  JSON-RPC client; :mod:`.http`: the SDK for streamable HTTP;
- :mod:`.failures`: what every failure is called; :mod:`.content`: results
  and listings as wire structs; :mod:`.guard`: the process tree.

Lifecycle: requests use the current generation, starting one on demand
(single flight). A generation ends when the server exits, passes a limit,
breaks the protocol, or a timed-out call's tree is killed; the next request
starts a fresh one. Two generations never overlap, so "the tree" is always
one server's tree.

Caveats: restarts are counted in a sliding window; past ``restart_limit`` the
host fails fast (``circuit_open``) until the window has passed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Final

from . import failures, guard
from .failures import HostError
from .generation import Generation, Session, State
from .launch import LaunchError
from .protocol import (
    PROTOCOL_VERSION,
    AgentMessage,
    CallTool,
    Cancel,
    Close,
    Closed,
    Failure,
    GetStats,
    ListTools,
    Log,
    Open,
    Opened,
    Result,
    ServerSpec,
    Started,
    Stats,
    StatsReply,
    Tools,
    WorkerMessage,
)

# How often the guard samples the tree when a memory, CPU or process limit is
# set. 0.1 s bounds overshoot while costing ~1 % of a core.
GUARD_INTERVAL: Final = 0.1
# How often a worker without limits reaps the orphans it inherited (exited
# double-forked helpers). Zombies hold only a pid each, so this can be slow;
# one reap costs a few /proc reads.
REAP_INTERVAL: Final = 1.0
# Bound on a whole shutdown of one generation: kill escalation plus slack.
SHUTDOWN_WAIT: Final = guard.TERM_GRACE + guard.KILL_WAIT + 1.0
# Reasons after which the tree gets no SIGTERM grace: it already ignored a
# cancel, passed a limit, or broke the stream.
_NO_GRACE: Final = frozenset({"limit", "protocol", "timeout"})


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
            self._emit(failures.closed("the connection is closing").failure(msg.id))
            return
        task = asyncio.ensure_future(self._serve(msg))
        self._tasks[msg.id] = task
        task.add_done_callback(functools.partial(self._forget, msg.id))

    def _forget(self, request_id: int, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)

    async def _serve(self, msg: AgentMessage) -> None:
        try:
            if isinstance(msg, Open):
                self._open(msg)
                gen = await self._live()
                self._emit(Opened(id=msg.id, server_pid=gen.server_pid, tools=gen.tools))
            elif isinstance(msg, ListTools):
                gen = await self._live()
                assert gen.session is not None
                gen.tools = await gen.session.list_tools()
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

    def _open(self, msg: Open) -> None:
        if msg.protocol != PROTOCOL_VERSION:
            raise HostError(
                "internal",
                f"the worker speaks wire protocol {PROTOCOL_VERSION}, the agent {msg.protocol}",
                hint="The agent and its worker come from different lovia-mcp installs; restart the agent process.",
            )
        self.spec = msg.spec

    def _cancel(self, msg: Cancel) -> None:
        task = self._tasks.get(msg.id)
        if task is None:
            return
        # Cancelling the task abandons the request: the JSON-RPC client sends
        # the server notifications/cancelled.
        task.cancel()
        if msg.timed_out:
            self.timeouts += 1
            gen, spec = self.current, self.spec
            if gen is not None and spec is not None and spec.on_timeout == "kill":
                # New requests wait for a fresh server from now on.
                gen.drain(spec.kill_grace, failures.timed_out_kill())

    async def _call(self, msg: CallTool) -> Result:
        gen = await self._live()
        self.calls += 1
        assert gen.session is not None
        content, is_error, structured = await gen.session.call(msg.name, msg.arguments)
        return Result(id=msg.id, content=content, is_error=is_error, structured_content=structured)

    # -- generations --------------------------------------------------------- #
    async def _live(self) -> Generation:
        while True:
            gen = self.current
            if gen is not None and gen.serving:
                return gen
            if gen is not None and gen.state is not State.STARTING:
                await gen.down.wait()
                if self.current is gen:
                    self.current = None
                continue
            if self._closing:
                raise failures.closed("the connection is closing")
            if self._starting is None:
                self._starting = asyncio.ensure_future(self._start())
                self._starting.add_done_callback(self._started)
            return await asyncio.shield(self._starting)

    def _started(self, task: asyncio.Task[Generation]) -> None:
        self._starting = None
        if not task.cancelled() and task.exception() is None:
            self.current = task.result()

    def _count_restart(self, spec: ServerSpec) -> None:
        """The crash-loop circuit: raises once ``restart_limit`` restarts fall in the window."""
        now = time.monotonic()
        while self._restart_times and now - self._restart_times[0] > spec.restart_window:
            self._restart_times.popleft()
        if len(self._restart_times) >= spec.restart_limit:
            wait = spec.restart_window - (now - self._restart_times[0])
            raise failures.circuit_open(
                spec.name, len(self._restart_times), spec.restart_window, self.last_restart_reason, wait
            )
        self._restart_times.append(now)
        self.restarts += 1

    async def _start(self) -> Generation:
        spec = self.spec
        if spec is None:
            raise HostError("internal", "no server spec: Open was never sent")
        if self._generations > 0:
            self._count_restart(spec)
        self._generations += 1
        gen = Generation(self._generations)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        runner = asyncio.ensure_future(self._run(gen, spec, ready))
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)
        try:
            await asyncio.wait_for(asyncio.shield(ready), spec.open_timeout)
        except asyncio.TimeoutError:
            gen.stop(failures.open_timed_out(spec.name, spec.open_timeout, session_tail(gen)))
            await self._wait_down(gen)
            assert gen.reason is not None
            raise gen.reason from None
        except asyncio.CancelledError:
            gen.stop(failures.closed("start-up was cancelled"))
            raise
        except HostError:
            await self._wait_down(gen)
            raise
        self._log(logging.INFO, f"server {spec.name!r} started (pid {gen.server_pid}, generation {gen.number})")
        # If this worker dies, the agent kills the server's process group
        # itself, and that must be this generation's group.
        self._emit(Started(server_pid=gen.server_pid, generation=gen.number))
        return gen

    async def _wait_down(self, gen: Generation) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gen.down.wait(), SHUTDOWN_WAIT)

    def _session(self, gen: Generation, spec: ServerSpec) -> Session:
        if spec.transport == "http":
            from .http import HttpSession

            return HttpSession(spec, on_end=gen.stop, warn=lambda text: self._log(logging.WARNING, text))

        from .stdio import StdioSession

        return StdioSession(spec, on_end=gen.stop, log=self._log, on_garbage=self._garbage)

    async def _run(self, gen: Generation, spec: ServerSpec, ready: asyncio.Future[None]) -> None:
        """Own one generation from launch to teardown (anyio needs one task for both)."""
        session = self._session(gen, spec)
        gen.session = session
        watchers: list[asyncio.Future[None]] = []
        try:
            async with session.running():
                watchers = self._watch(gen, spec)
                tools = await session.start()
                if gen.state is State.STARTING:
                    gen.ready(tools)
                    ready.set_result(None)
                await gen.stopping.wait()
        except HostError as exc:
            gen.stop(exc)
        except LaunchError as exc:
            gen.stop(HostError("open", str(exc), hint=exc.hint))
        except BaseException as exc:  # noqa: BLE001 - every ending is reported, cancellation re-raised below
            if isinstance(exc, asyncio.CancelledError):
                gen.stop(failures.closed())
                raise
            opened = gen.state is not State.STARTING
            if spec.transport == "http":
                gen.stop(failures.http_failed(spec.url, failures.describe(exc), opened=opened))
            elif opened:
                gen.stop(failures.lost(failures.describe(exc), session.stderr_tail))
            else:
                gen.stop(failures.start_failed(failures.describe(exc), session.stderr_tail))
        finally:
            gen.stop(failures.closed())  # a no-op unless the body ended without a reason
            await asyncio.shield(self._teardown(gen, session, watchers))
            gen.finished()
            if self.current is gen:
                self.current = None
            if not ready.done():
                assert gen.reason is not None
                ready.set_exception(gen.reason)
                ready.exception()  # mark retrieved: _start may have stopped waiting
            elif gen.reason is not None and not self._closing and gen.reason.kind != "closed":
                self.last_restart_reason = gen.reason.message
                self._log(logging.WARNING, f"server {spec.name!r} generation {gen.number} ended: {gen.reason.message}")

    def _watch(self, gen: Generation, spec: ServerSpec) -> list[asyncio.Future[None]]:
        """The limit watch and the orphan reaper of a stdio generation."""
        pid = gen.server_pid
        if pid is None:
            return []
        tasks: list[asyncio.Future[None]] = []
        if guard.limits_watched(spec.limits):
            root, include_root = self._tree_root(pid)

            def breach(what: str, figure: str, setting: str, hint: str) -> None:
                reason = failures.limit(what, figure, setting, hint, session_tail(gen))
                self._log(logging.WARNING, f"server {spec.name!r}: {reason.message}")
                gen.stop(reason)

            tasks.append(asyncio.ensure_future(guard.watch_limits(
                spec.limits, root, include_root=include_root, subreaper=self._subreaper,
                stop=gen.stopping, on_breach=breach, interval=GUARD_INTERVAL,
            )))
        if self._subreaper:
            # Inherited orphans that exit must not stay zombies until close.
            tasks.append(asyncio.ensure_future(guard.reap_loop(pid, gen.stopping, REAP_INTERVAL)))
        return tasks

    async def _teardown(self, gen: Generation, session: Session, watchers: list[asyncio.Future[None]]) -> None:
        from .stdio import StdioSession

        if isinstance(session, StdioSession) and session.pid is not None:
            pid = session.pid
            root, include_root = self._tree_root(pid)
            if not session.exited.done():
                reason = gen.reason
                grace = 0.0 if reason is not None and reason.kind in _NO_GRACE else guard.TERM_GRACE
                await asyncio.to_thread(guard.kill_tree, root, pid, include_root=include_root, term_grace=grace)
            elif not include_root and guard.tree(root):
                # The server is gone; its orphans are still in the tree.
                await asyncio.to_thread(guard.kill_tree, root, pid, include_root=False, term_grace=0.0)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            await session.wait_exited(SHUTDOWN_WAIT)
            if self._subreaper:
                guard.reap_orphans(keep=set())
            session.close_transport()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)

    def _tree_root(self, server_pid: int) -> tuple[int, bool]:
        # In a worker (a subreaper with no other children) the tree is all of
        # the worker's descendants, orphans included; in the agent process it
        # is the server and what it still parents.
        return (os.getpid(), False) if self._subreaper else (server_pid, True)

    # -- stats, logs, close -------------------------------------------------- #
    def _garbage(self, line: bytes) -> None:
        self.garbage_lines += 1
        if self.garbage_lines <= 10 or self.garbage_lines % 1000 == 0:
            shown = line[:200].decode("utf-8", "replace")
            self._log(
                logging.WARNING,
                f"skipped a non-JSON-RPC line from the server ({self.garbage_lines} so far): {shown!r}",
                True,
            )

    def stats(self) -> Stats:
        gen = self.current
        pid = gen.server_pid if gen is not None and gen.serving else None
        use = guard.TreeUsage(0, 0.0, 0)
        if pid is not None:
            root, include_root = self._tree_root(pid)
            use = guard.usage(guard.tree(root, include_root=include_root))
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

    def _log(self, level: int, message: str, stderr: bool = False) -> None:
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
            gen.stop(failures.closed())
            await self._wait_down(gen)
        # This host's generations only: in isolation="none" several hosts
        # share the agent's loop, and one closing must not wait on another's.
        for runner in list(self._runners):
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(runner), SHUTDOWN_WAIT)


def session_tail(gen: Generation) -> list[str]:
    return gen.session.stderr_tail if gen.session is not None else []


__all__ = ["GUARD_INTERVAL", "REAP_INTERVAL", "SHUTDOWN_WAIT", "Host", "HostError"]
