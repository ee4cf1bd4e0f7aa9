"""Warm spares: opened per-run connections waiting for the next run of the same config.

A config with ``spares=N`` (process isolation) keeps up to N connections
opened ahead of time: worker started, server spawned, handshaken, tools
listed. A per-run open takes one and starts a replacement in the
background; with none ready it opens as it always did, so runs starting at
once beyond the pool get fresh opens of their own. A spare is handed out
once: from then on it is that run's connection and closes with it, so
per-run freshness stays (no run ever sees a server another run used).

Sharing rule: spares are pooled per event loop, keyed by what the worker
would be told (the encoded ``ServerSpec``: command, args, env, cwd, limits,
sandbox, ...) and the agent's environment. Equal configs in several ``MCP``
plugins or agents on one loop share one pool; what is not in the spec (tool
filters, approval, renderer, retries, timeouts) is the taker's own, applied
when the spare is handed over. Bounds: ``spares`` per key (the latest
taker's value) and :data:`MAX_SPARES` in the process.

Lifecycle: a spare nobody took for ``spare_idle`` seconds is closed and not
replaced until the next run takes or asks for one. :func:`close_spares` and
``MCP.aclose()`` close spares at once. A connection belongs to the loop that
made it, so a pool serves its own loop only; when that loop shuts down
(``asyncio.run`` cancels the pool's keeper task) the keeper closes its
spares (a loop closed without cancelling its tasks, unlike ``asyncio.run``,
gets asyncio's "task was destroyed" warning for the keeper instead, and the
spares' workers exit when their pipes close). After an agent SIGKILL, each spare's worker sees its pipe close and
kills its tree, as for every connection.

Caveats: a spare is checked when taken (worker alive, server still serving,
as the worker last told: it reports its server's end, and the agent sees its
pipe close; with something from the worker not yet read, one ``GetStats``
round trip instead); a spare that fails it is closed, never handed out. A
server that dies after the check, or before its worker noticed, is like any
server dying during a run (the usual reconnect). A worker alive but not
answering is not caught at the take (the call's backstop gives it up).
Spares cost a worker and a server tree each while they wait
(docs/spares.md).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Iterable
from typing import Final

import msgspec
from lovia.exceptions import UserError

from ..client import closing
from ..client.worker_link import IN_BACKGROUND
from ..config.server import MAX_SPARES, ServerConfig
from ..connection.live import MCPConnection

logger = logging.getLogger("lovia_mcp")

# Bound on the check of a spare being taken when it takes a round trip
# (something unread from the worker): a healthy worker answers in about a
# millisecond; one that cannot within 2 s is not a warm spare.
CHECK_WAIT: Final = 2.0

# How long after a run took its spares (or opened its own) their
# replacements start: a run's setup takes all of its servers within a few
# milliseconds, and a replacement forked meanwhile would compete with it for
# the CPU (measured: 5 spares taken in 9 ms with immediate replacements).
REFILL_DELAY: Final = 0.05

# While a run of an MCP plugin is in progress on the loop, refills wait for
# its end (a refill is a fork and a server start, tens of milliseconds of
# CPU each: issue 19 measured five of them doubling a run's close). A run
# that goes on longer than this is waiting for its model most of the time,
# and a concurrent run starting then should find spares: they start anyway.
REFILL_MAX_DEFER: Final = 1.0

_encode = msgspec.msgpack.Encoder().encode


def spare_key(server: ServerConfig) -> bytes:
    """What makes two configs' servers interchangeable: the worker's spec and the environment it inherits."""
    return _encode((server._spec(), sorted(os.environ.items())))


class _Entry:
    """One key's spares: ready ones (with when they became ready) and starting ones."""

    def __init__(self, server: ServerConfig) -> None:
        self.server = server
        self.ready: collections.deque[tuple[MCPConnection, float]] = collections.deque()
        self.starting: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None


class _Pool:
    """One event loop's spares."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.entries: dict[bytes, _Entry] = {}
        self.closing = False
        self.changed = asyncio.Event()
        self.closers: set[asyncio.Task[None]] = set()
        # Plugin runs in progress on this loop (setup done, close not yet
        # started), and the refills waiting for them to end.
        self.runs = 0
        self.deferred: dict[bytes, _Entry] = {}
        self.defer_timer: asyncio.TimerHandle | None = None
        # Runs while the pool has spares (ready or starting), so a loop
        # closed without asyncio.run's clean-up finds no task of ours pending.
        self.keeper: asyncio.Task[None] | None = None

    def entry(self, server: ServerConfig) -> tuple[bytes, _Entry]:
        key = spare_key(server)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(server)
        entry.server = server
        return key, entry

    def count(self) -> int:
        # A copy: the cap counts the pools of loops in other threads too.
        return sum(len(e.ready) + len(e.starting) for e in list(self.entries.values()))

    def refill_soon(self, key: bytes, entry: _Entry) -> None:
        self.loop.call_later(REFILL_DELAY, self.refill_when_idle, key, entry)

    def refill_when_idle(self, key: bytes, entry: _Entry) -> None:
        """Refill now if no run is in progress (or the oldest waiting refill waited long enough)."""
        if self.runs:
            if self.defer_timer is None:
                self.defer_timer = self.loop.call_later(REFILL_MAX_DEFER, self.refill_deferred)
            self.deferred[key] = entry
            return
        self.refill(key, entry)

    def refill_deferred(self) -> None:
        """Start the refills that waited for the runs in progress (they ended, or waited long enough)."""
        deferred, self.deferred = self.deferred, {}
        if self.defer_timer is not None:
            self.defer_timer.cancel()
            self.defer_timer = None
        for key, entry in deferred.items():
            self.refill(key, entry)

    def refill(self, key: bytes, entry: _Entry) -> None:
        if self.entries.get(key) is not entry:
            return  # closed (close_spares, MCP.aclose) after this refill was scheduled
        while (
            not self.closing and len(entry.ready) + len(entry.starting) < entry.server.spares and _total() < MAX_SPARES
        ):
            task = self.loop.create_task(self._start(key, entry))
            entry.starting.add(task)
            task.add_done_callback(entry.starting.discard)
            self.wake()

    def wake(self) -> None:
        """Tell the keeper the pool changed; start it if it is not running."""
        if (self.keeper is None or self.keeper.done()) and not self.closing and self.count():
            self.keeper = self.loop.create_task(self._keep(), name="lovia-mcp-spares")
        self.changed.set()

    async def _start(self, key: bytes, entry: _Entry) -> None:
        server = entry.server
        conn = MCPConnection(server, isolation="process", close_after_run=True)
        IN_BACKGROUND.set(True)  # this task's own context: no run waits for a spare's open
        try:
            await conn.connect()  # closes what it started when it fails or is cancelled
        except Exception as exc:  # noqa: BLE001 - reported by the next run's own open, and to warm_spares
            entry.failure = exc
            logger.warning("%s: a warm spare failed to open: %s", conn.name, exc)
            return
        entry.failure = None
        if self.closing or self.entries.get(key) is not entry or spare_key(server) != key:
            # Closed meanwhile, or the environment changed while it started.
            self.discard(conn)
            return
        entry.ready.append((conn, time.monotonic()))
        self.wake()
        logger.debug("%s: a warm spare is ready (worker pid %s)", conn.name, conn.worker_pid)

    def discard(self, conn: MCPConnection) -> None:
        task = self.loop.create_task(conn.close())
        self.closers.add(task)
        task.add_done_callback(self.closers.discard)

    def _expire(self) -> float | None:
        """Close the spares idle past their ``spare_idle``; seconds until the next one expires."""
        now = time.monotonic()
        soonest: float | None = None
        for entry in self.entries.values():
            idle = entry.server.spare_idle
            kept: collections.deque[tuple[MCPConnection, float]] = collections.deque()
            for conn, since in entry.ready:
                left = since + idle - now
                if left <= 0:
                    logger.debug("%s: a warm spare idle for %.0f s is closed", conn.name, now - since)
                    self.discard(conn)
                else:
                    kept.append((conn, since))
                    soonest = left if soonest is None else min(soonest, left)
            entry.ready = kept
        return soonest

    async def _keep(self) -> None:
        """Idle expiry while the loop runs; every spare closed when the loop shuts down."""
        try:
            while True:
                self.changed.clear()
                wait = self._expire()
                if not self.count():
                    return  # started again by the next spare (wake)
                try:
                    await asyncio.wait_for(self.changed.wait(), wait)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            # asyncio.run cancels every task left when its main coroutine
            # ends, then waits for them: the spares go with the loop.
            self.closing = True
            await self.aclose(self.entries)
            raise

    async def aclose(self, keys: Iterable[bytes]) -> None:
        # Dropped from the pool: a refill scheduled before the close finds its
        # entry gone and starts nothing; a later open makes a fresh entry.
        entries = [self.entries.pop(k) for k in list(keys) if k in self.entries]
        starting: list[asyncio.Task[None]] = []
        for entry in entries:
            starting += entry.starting
            for task in entry.starting:
                # One already being cancelled (by asyncio.run, at the loop's
                # end) is closing what it started: a second cancel would
                # abandon that close half-way.
                if not task.cancelling():
                    task.cancel()
            while entry.ready:
                self.discard(entry.ready.popleft()[0])
        await asyncio.gather(*starting, *self.closers, return_exceptions=True)
        self.changed.set()  # the keeper ends once the pool is empty


# Pools by loop; a closed loop's pool is dropped at the next use (its
# spares were closed by its keeper when the loop shut down). Loops in other
# threads use it too: every walk over it is over a copy.
_pools: dict[asyncio.AbstractEventLoop, _Pool] = {}


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    for other in [other for other in list(_pools) if other.is_closed()]:
        _pools.pop(other, None)
    pool = _pools.get(loop)
    # A pool whose keeper closed it (the loop is shutting down) stays: it
    # starts nothing more.
    if pool is None:
        pool = _pools[loop] = _Pool(loop)
    return pool


def _total() -> int:
    return sum(p.count() for p in list(_pools.values()) if not p.loop.is_closed())


async def take(server: ServerConfig, *, close_after_run: bool) -> MCPConnection | None:
    """A ready spare of ``server``'s key, now the caller's; ``None`` when none is ready.

    A taken spare's replacement starts in the background after
    ``REFILL_DELAY``. With none
    ready, the caller opens its own and then calls :func:`refill`: a spare
    starting beside that open would slow it down (they compete for the CPU).
    """
    pool = _pool()
    key, entry = pool.entry(server)
    taken = False
    try:
        while entry.ready:
            # Out of the pool before the first await: no one else can take it.
            conn, _ = entry.ready.popleft()
            try:
                healthy = await conn.check(CHECK_WAIT)
            except BaseException:
                pool.discard(conn)
                raise
            if healthy:
                conn.adopt(server, close_after_run=close_after_run)
                # A spare reuses its listing while the server's ttlMs says it is fresh.
                try:
                    fresh = await conn.freshen()
                except BaseException:
                    pool.discard(conn)
                    raise
                if fresh:
                    taken = True
                    return conn
            logger.info("%s: a warm spare's server or worker ended while it waited; it is replaced", conn.name)
            pool.discard(conn)
        return None
    finally:
        if taken:
            pool.refill_soon(key, entry)
        pool.wake()


def run_began() -> None:
    """A plugin's run began on this loop: refills wait for it to end (up to :data:`REFILL_MAX_DEFER`)."""
    _pool().runs += 1


def run_ended() -> None:
    """A plugin's run ended on this loop: with none left, the refills that waited start."""
    pool = _pool()
    pool.runs = max(0, pool.runs - 1)
    if not pool.runs and pool.deferred:
        pool.refill_deferred()


def refill(server: ServerConfig) -> None:
    """Start ``server``'s missing spares in the background soon (on this loop, up to the bounds)."""
    pool = _pool()
    pool.refill_soon(*pool.entry(server))


async def warm_spares(*servers: ServerConfig) -> int:
    """Start the spares of ``servers`` now (on this loop) and wait until they are ready.

    Returns how many spares of these configs are ready. Raises the open
    error when a config has none ready because its spares failed to open.
    """
    pool = _pool()
    chosen: list[_Entry] = []
    for server in servers:
        if not server.spares:
            raise UserError(
                f"{server._label()!r} keeps no spares (spares=0)",
                hint="Set spares=1 on the config to keep a warm spare.",
            )
        if (server.isolation or "process") != "process":
            raise UserError(
                f"{server._label()!r} has isolation={server.isolation!r}; spares live in worker processes",
                hint="Use isolation='process' (the default) to keep warm spares.",
            )
        key, entry = pool.entry(server)
        pool.refill(key, entry)
        chosen.append(entry)
    await asyncio.gather(*(t for e in chosen for t in list(e.starting)), return_exceptions=True)
    for entry in chosen:
        if not entry.ready and entry.failure is not None:
            raise entry.failure
    return sum(len(e.ready) for e in {id(e): e for e in chosen}.values())


async def close_spares(*servers: ServerConfig) -> None:
    """Close the spares on this loop: those of ``servers`` (equal configs), or all of them.

    Then wait for every close a run's end started on this loop (every worker joined).
    """
    pool = _pools.get(asyncio.get_running_loop())
    if pool is None:
        await closing.wait_closed()
        return
    if not servers:
        keys = list(pool.entries)
    else:
        keys = [k for k, e in pool.entries.items() if any(e.server == s for s in servers)]
        for server in servers:
            try:
                keys.append(spare_key(server))
            except UserError:  # its cwd is gone: matched by equality above, if at all
                pass
    await pool.aclose(keys)
    await closing.wait_closed()


__all__ = [
    "CHECK_WAIT",
    "MAX_SPARES",
    "REFILL_DELAY",
    "REFILL_MAX_DEFER",
    "close_spares",
    "refill",
    "run_ended",
    "run_began",
    "spare_key",
    "take",
    "warm_spares",
]
