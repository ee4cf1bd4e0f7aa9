"""Watch and kill one server generation's process tree.

A generation's tree is a :class:`Tree`. Where the worker could make a cgroup
for the generation, that is :class:`~lovia_mcp_worker.containment.cgroup.CgroupTree`:
membership, limits and kills by the kernel. Elsewhere it is
:class:`WatchTree`: the server's descendants, found by parentage, and the
orphans the worker adopted (it is a *child subreaper*, so grandchildren whose
parent exited are re-parented to it rather than to init), attributed to one
generation each; limits are sampled with psutil. The server also runs in its
own session (process group), so a group signal reaches descendants that
stayed in it even before a walk sees them.

Caveats (watch only): a descendant that calls ``setsid`` *and* is orphaned
while two generations overlap may be attributed to the newer one; in
``isolation="none"`` the agent process is not made a subreaper (that would
change the host application), so orphans there are found only through the
process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, Final, Protocol

import psutil

from ..wire.confinement import Limits
from ..wire.failures import Breach
from .proctree import TreeUsage, child_pids, kill_walk, reap_orphans, tree, usage

# The resolution of psutil's create_time (the kernel counts start times in
# clock ticks): a child may seem born a tick before its server.
CLOCK_TICK: Final = 1 / os.sysconf("SC_CLK_TCK")

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_CHILD_SUBREAPER: Final = 36


def _load_prctl() -> Any:
    """libc's prctl, resolved once at import (the forkserver preloads this).

    ``ctypes.util.find_library`` would run ``ldconfig`` in a subprocess on
    every call: milliseconds per worker start, and a fork inside the server's
    pre-exec hook. The running program's own symbols already include libc.
    """
    if not sys.platform.startswith("linux"):
        return None
    for name in (None, "libc.so.6"):
        try:
            return ctypes.CDLL(name, use_errno=True).prctl
        except (OSError, AttributeError):
            continue
    return None


_PRCTL = _load_prctl()


def _prctl(option: int, value: int) -> bool:
    if _PRCTL is None:
        return False
    return int(_PRCTL(option, value, 0, 0, 0)) == 0


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux only)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent thread exits (Linux only)."""
    return _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# --------------------------------------------------------------------------- #
# One generation's tree, and the watch over it
# --------------------------------------------------------------------------- #
OnBreach = Callable[[Breach], None]


class Tree(Protocol):
    """One generation's processes: how they are found, measured, limited and killed.

    :class:`WatchTree` (psutil, sampled) here; :class:`~.cgroup.CgroupTree`
    (the kernel) where a cgroup could be made. Every method but
    :meth:`attach` may block briefly (``/proc`` or cgroup file reads); the
    host calls the slow ones from a thread.
    """

    enforcement: str  # "cgroup" or "watch", as reported by stats()

    def attach(self, server_pid: int) -> None: ...
    def pids(self) -> list[int]: ...
    def usage(self) -> TreeUsage: ...
    def check(self, limits: Limits) -> Breach | None: ...
    def kill(self, term_grace: float) -> None: ...
    def oom_kills(self) -> int: ...
    def close(self) -> None: ...


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


class WatchTree:
    """A generation's tree found by parentage, with orphans attributed (no cgroup).

    Processes still parented by the server are its descendants. Orphans are
    re-parented to the worker (a subreaper) and attributed, in this order, to
    the generation whose server leads their session (servers start in their
    own session), else to the newest generation started before them. The
    one guess: an orphan that left its session (``setsid``) while an older
    and a newer generation overlap is counted with the newer one. Start
    times are the kernel's (psutil ``create_time``), compared with the
    server's own, never with the worker's clock. In the
    agent process (``isolation="none"``, no subreaper) the tree is the
    server's descendants; its process group is signalled too.
    """

    enforcement = "watch"

    def __init__(self, *, subreaper: bool, generations: Callable[[], list[WatchTree]]) -> None:
        self._subreaper = subreaper
        self._generations = generations
        self.server_pid: int | None = None
        # The server's start time (psutil's clock); None until attached, when
        # the generation is the newest one, still spawning.
        self.started: float | None = None
        self._base_cpu = 0.0

    def attach(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self._base_cpu = _children_cpu()
        try:
            self.started = psutil.Process(server_pid).create_time()
        except psutil.Error:
            self.started = 0.0  # already gone: no orphan is attributed by time

    def _owner(self, orphan: psutil.Process, trees: list[WatchTree]) -> WatchTree | None:
        sid = _sid(orphan.pid)
        for t in trees:
            if t.server_pid is not None and t.server_pid == sid:
                return t
        try:
            born = orphan.create_time()
        except psutil.Error:
            return None

        # A generation still spawning (no start time yet) is the newest.
        def start(t: WatchTree) -> float:
            return float("inf") if t.started is None else t.started

        # Born before every live generation's server: a retired generation's
        # orphan, still dying, never the newest one's (whose limit it would break).
        before = [t for t in trees if t.started is None or t.started <= born + CLOCK_TICK]
        return max(before, key=start) if before else None

    def procs(self) -> list[psutil.Process]:
        if self.server_pid is None:
            return []
        procs = tree(self.server_pid, include_root=True)
        if not self._subreaper:
            return procs
        # The worker's children first, then the generations: a generation is
        # listed before its server is spawned (the loop thread), so every
        # child read here has its generation in the list read next. The
        # other way round, a kill walk in a thread could find a fresh
        # generation's server spawned between the two reads and, its
        # generation unknown, take it for this one's orphan.
        children = child_pids()
        trees = self._generations()
        servers = {t.server_pid for t in trees if t.server_pid is not None}
        orphans: list[psutil.Process] = []
        for pid in children:
            if pid not in servers:
                with contextlib.suppress(psutil.Error):  # exited since the read
                    orphans.append(psutil.Process(pid))
        for orphan in orphans:
            if self._owner(orphan, trees) is self:
                procs.extend(p for p in tree(orphan.pid, include_root=True) if p.pid not in servers)
        return procs

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs()]

    def usage(self) -> TreeUsage:
        use = usage(self.procs())
        if self._subreaper:
            # CPU of orphans that exited and were reaped by the worker itself.
            use = TreeUsage(use.rss_bytes, use.cpu_seconds + _children_cpu() - self._base_cpu, use.processes)
        return use

    def check(self, limits: Limits) -> Breach | None:
        use = self.usage()
        mb = use.rss_bytes / (1024 * 1024)
        if limits.memory_mb is not None and mb > limits.memory_mb:
            return Breach("memory", f"{mb:.1f} MB resident in its process tree", "memory_mb", f"{limits.memory_mb:g}")
        if limits.max_processes is not None and use.processes > limits.max_processes:
            return Breach(
                "process", f"{use.processes} processes in its tree", "max_processes", f"{limits.max_processes}"
            )
        if limits.cpu_seconds is not None and use.cpu_seconds > limits.cpu_seconds:
            return Breach(
                "CPU", f"{use.cpu_seconds:.1f} s of CPU in its process tree", "cpu_seconds", f"{limits.cpu_seconds:g}"
            )
        return None

    def kill(self, term_grace: float) -> None:
        if self.server_pid is not None:
            kill_walk(self.procs, self.server_pid, term_grace=term_grace)

    def oom_kills(self) -> int:
        return 0

    def close(self) -> None:
        return None


async def watch_limits(
    box: Tree, limits: Limits, *, stop: asyncio.Event, on_breach: OnBreach, interval: float, in_thread: bool
) -> None:
    """Check ``box`` against ``limits`` every ``interval`` s until ``stop``; report the first breach.

    ``on_breach(breach)`` is called once, then the watch
    ends (the caller kills the tree). ``in_thread``: the check walks ``/proc``
    (psutil), too slow for the event loop; a cgroup's files are read inline.
    """
    while not stop.is_set():
        found = await asyncio.to_thread(box.check, limits) if in_thread else box.check(limits)
        if found is not None and not stop.is_set():
            on_breach(found)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def reap_loop(keep: Callable[[], set[int]], stop: asyncio.Event, interval: float) -> None:
    """Reap exited orphans (never a pid in ``keep()``, the live servers) every ``interval`` s until ``stop``.

    The first reap is an interval in: a generation that just started has no
    orphan yet (the last one's teardown reaped its own), and its start is
    the open's path.
    """
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if stop.is_set():
            return
        reap_orphans(keep=keep())


def limits_watched(limits: Limits) -> bool:
    return limits.memory_mb is not None or limits.cpu_seconds is not None or limits.max_processes is not None


__all__ = [
    "CLOCK_TICK",
    "Tree",
    "WatchTree",
    "become_subreaper",
    "die_with_parent",
    "limits_watched",
    "reap_loop",
    "watch_limits",
]
