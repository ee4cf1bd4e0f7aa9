"""Watch and kill a server's process tree.

The tree is every descendant of the process that launched the server. In a
worker that process is the worker itself, made a *child subreaper* so that
grandchildren whose parent already exited are re-parented to it rather than
to init: ``psutil.Process(worker).children(recursive=True)`` then is the whole
tree, orphans included. The server also runs in its own session (process
group), so a group signal reaches descendants that stayed in it even before
the subreaper walk sees them.

Caveats: a descendant that calls ``setsid`` *and* is orphaned before a worker
became subreaper escapes both nets; in ``isolation="none"`` the agent process
is not made a subreaper (that would change the host application), so orphans
there are found only through the process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import psutil

from .protocol import Limits

# How long the tree gets between SIGTERM and SIGKILL. Short: by the time we
# escalate the server already ignored a cancel notification or passed a limit.
TERM_GRACE: Final = 0.5

# Bound on waiting for killed processes to disappear. SIGKILL cannot be
# ignored, so only an uninterruptible (D-state) process takes this long.
KILL_WAIT: Final = 2.0

# Poll period while waiting for signalled processes to exit. The wait must
# not reap (psutil's wait does, for children): the server's exit status
# belongs to asyncio's child watcher, which otherwise reports 255.
EXIT_POLL: Final = 0.01

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


@dataclass(frozen=True)
class TreeUsage:
    rss_bytes: int
    cpu_seconds: float
    processes: int


def tree(root_pid: int, *, include_root: bool = False) -> list[psutil.Process]:
    """Live descendants of ``root_pid`` (zombies excluded)."""
    try:
        root = psutil.Process(root_pid)
        procs = root.children(recursive=True)
        if include_root:
            procs.insert(0, root)
    except psutil.Error:
        return []
    out: list[psutil.Process] = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def usage(procs: list[psutil.Process]) -> TreeUsage:
    rss = 0
    cpu = 0.0
    n = 0
    for p in procs:
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                t = p.cpu_times()
                # children_*: descendants this process already reaped. A
                # server that runs short-lived subprocesses would otherwise
                # escape the CPU limit (each one under RLIMIT_CPU, and gone
                # before the next sample). Live processes are never in
                # another's children_*, so nothing is counted twice.
                cpu += t.user + t.system + t.children_user + t.children_system
            n += 1
        except psutil.Error:
            continue
    return TreeUsage(rss_bytes=rss, cpu_seconds=cpu, processes=n)


def _child_pids() -> list[int]:
    """This process's direct children, cheaply where Linux allows.

    ``/proc/self/task/*/children`` lists them without walking every process
    on the machine (what ``psutil.Process().children()`` does).
    """
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(x) for x in f.read().split())
        return pids
    except (OSError, ValueError):
        try:
            return [p.pid for p in psutil.Process().children()]
        except psutil.Error:
            return []


def reap_orphans(keep: set[int]) -> None:
    """Collect exited children of this process that nobody else waits for.

    As a subreaper the worker inherits orphans; when they exit they would stay
    zombies. Only pids not in ``keep`` are reaped, so the server's own exit
    status still reaches the code waiting for it.
    """
    for pid in _child_pids():
        if pid in keep:
            continue
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                os.waitpid(pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError, OSError):
            continue


def _signal_all(pgid: int | None, procs: list[psutil.Process], sig: int) -> None:
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            continue


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` for ``procs`` to exit (zombies count); return the rest.

    Unlike ``psutil.wait_procs`` this never reaps a child, so whoever waits
    for the server (asyncio) still gets its real exit status.
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(EXIT_POLL)


def kill_tree(
    root_pid: int,
    pgid: int | None,
    *,
    include_root: bool,
    term_grace: float = TERM_GRACE,
) -> None:
    """SIGTERM the group and every descendant, wait ``term_grace``, then SIGKILL.

    Blocking and bounded (at most ``term_grace + KILL_WAIT`` plus the walks);
    callers on an event loop run it in a thread. Repeats the SIGKILL walk until
    nothing is left, so a tree that forks while being killed is still emptied.
    """
    procs = tree(root_pid, include_root=include_root)
    if term_grace > 0:
        _signal_all(pgid, procs, signal.SIGTERM)
        procs = wait_gone(procs, term_grace)
    deadline = time.monotonic() + KILL_WAIT
    while True:
        _signal_all(pgid, procs, signal.SIGKILL)
        wait_gone(procs, 0.2)
        procs = tree(root_pid, include_root=include_root)
        if not procs or time.monotonic() > deadline:
            break
        pgid = None  # the group is gone or done; walk the stragglers only





# --------------------------------------------------------------------------- #
# The watch: limits the kernel does not enforce for us, sampled
# --------------------------------------------------------------------------- #
Breach = Callable[[str, str, str, str], None]


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


async def watch_limits(
    limits: Limits,
    root: int,
    *,
    include_root: bool,
    subreaper: bool,
    stop: asyncio.Event,
    on_breach: Breach,
    interval: float,
) -> None:
    """Sample the tree every ``interval`` s until ``stop``; report the first limit passed.

    ``on_breach(what, figure, setting, hint)`` is called once, then the watch
    ends (the caller kills the tree).
    """
    base_cpu = _children_cpu()
    while not stop.is_set():
        use = await asyncio.to_thread(lambda: usage(tree(root, include_root=include_root)))
        # CPU of descendants that already exited and were reaped by this process.
        cpu = use.cpu_seconds + (_children_cpu() - base_cpu if subreaper else 0.0)
        mb = use.rss_bytes / (1024 * 1024)
        if limits.memory_mb is not None and mb > limits.memory_mb:
            on_breach("memory", f"{mb:.1f} MB resident in its process tree", f"memory_mb={limits.memory_mb:g}",
                      "Raise Limits(memory_mb=...) or make the tool use less memory.")
            return
        if limits.max_processes is not None and use.processes > limits.max_processes:
            on_breach("process", f"{use.processes} processes in its tree", f"max_processes={limits.max_processes}",
                      "Raise Limits(max_processes=...) or stop the server from forking.")
            return
        if limits.cpu_seconds is not None and cpu > limits.cpu_seconds:
            on_breach("CPU", f"{cpu:.1f} s of CPU in its process tree", f"cpu_seconds={limits.cpu_seconds:g}",
                      "Raise Limits(cpu_seconds=...) or make the tool do less work.")
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def reap_loop(keep: int, stop: asyncio.Event, interval: float) -> None:
    """Reap exited orphans (not ``keep``, the server) every ``interval`` s until ``stop``."""
    while not stop.is_set():
        reap_orphans(keep={keep})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


def limits_watched(limits: Limits) -> bool:
    return limits.memory_mb is not None or limits.cpu_seconds is not None or limits.max_processes is not None


__all__ = [
    "KILL_WAIT",
    "TERM_GRACE",
    "TreeUsage",
    "become_subreaper",
    "die_with_parent",
    "kill_tree",
    "limits_watched",
    "reap_loop",
    "reap_orphans",
    "tree",
    "usage",
    "wait_gone",
    "watch_limits",
]
