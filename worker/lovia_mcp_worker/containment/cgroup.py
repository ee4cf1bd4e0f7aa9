"""A cgroup per server generation: containment and kernel-enforced limits.

Why cgroups: a generation's processes must be identifiable and killable on
their own while another generation of the same worker already serves calls
(a timed-out tree gets its grace in the background). Parentage cannot say
that once processes are orphaned or call ``setsid``; a cgroup can, because
membership is inherited at fork and cannot be left without write access to
the cgroup tree. The same cgroup lets the kernel enforce ``memory_mb``
(``memory.limit_in_bytes`` / ``memory.max``: the tree is never above it) and
``max_processes`` (``pids.max``: a fork storm fails at the limit instead of
being sampled), and reports exact CPU time and OOM kills.

Where: a child of the worker's *own* cgroup in each hierarchy, named
``lovia-mcp.<worker pid>.<token>-<serial>.<generation>`` (the token is the
process's, the serial keeps the connections of one process apart). The worker itself is never
moved, and no cgroup this process did not create is written to. cgroup v2
is used where the worker's cgroup delegates ``memory`` and ``pids`` to its
children; otherwise cgroup v1's ``memory`` and ``pids`` hierarchies (with
``cpuacct`` when mounted). Where neither can be made (an ordinary user, a
read-only mount), :func:`layout` returns ``None`` and the worker keeps the
rlimits and the psutil watch (:mod:`.guard`).

Lifecycle: :func:`layout` (:mod:`.cgroup_layout`) detects once per process
(cheap: two ``/proc`` reads, and a sweep of empty leftovers of dead workers);
:meth:`GenerationCgroup.create` makes the cgroup and writes the limits before
the server is spawned; :meth:`~GenerationCgroup.enter` moves the server in
right after the spawn, beside the handshake, and the generation serves no
call before it is done; :meth:`~GenerationCgroup.kill` empties it;
:meth:`~GenerationCgroup.remove` deletes it once empty. ``LOVIA_MCP_CGROUPS=0``
turns the whole module off.

Why after the spawn, not before the exec: a cgroup move waits for an RCU
grace period, 6-10 ms on an idle machine (measured here; the kernel's
``favordynmods`` mount option would avoid it, but the mount is not ours).
Done by a shell before exec (or a pre-exec hook), that is added to every
server start; done beside the handshake, it is hidden by the server's own
start-up. The price is a window of those milliseconds in which the server
runs outside its cgroup: its children from then are moved too (found by
parentage), the kernel limits apply from the move on, and the watch's
checks read the cgroup.

Caveats: under cgroups ``max_processes`` counts tasks as the kernel does
(threads included), and ``memory_mb`` counts what the kernel charges the
tree (resident memory, page cache and kernel memory), not an RSS sum. A
process orphaned *and* moved to its own session within the first
milliseconds of a server's life stays outside the cgroup (the worker, a
subreaper, still adopts it and kills it when it exits). A worker killed by
SIGKILL cannot remove its cgroups; the forkserver, which outlives its
workers, kills what is left in them (:func:`kill_leftovers`) and removes
them once empty (:mod:`lovia_mcp_worker.forkserver.server`).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import time
from typing import Final

from ..wire.confinement import Limits
from ..wire.failures import Breach
from .cgroup_layout import (
    PREFIX,
    Layout,
    layout,
    token,
)
from .cgroup_layout import read as _read
from .cgroup_layout import write as _write
from .proctree import TreeUsage, descendants, kill_tree

# Bound on waiting for a cgroup's processes to exit after SIGKILL; only an
# uninterruptible (D-state) process takes this long.
KILL_WAIT: Final = 2.0
# Poll period while waiting for members to exit (a read of cgroup.procs).
EXIT_POLL: Final = 0.005
# Bound on retrying rmdir while the last members finish exiting.
REMOVE_WAIT: Final = 1.0

_MIB: Final = 1024 * 1024
_serial = itertools.count(1)  # this process's cgroups, in the order made


def _field(text: str, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file (``oom_kill 3``)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


class GenerationCgroup:
    """One generation's cgroup (one directory per hierarchy in v1)."""

    def __init__(self, where: Layout, dirs: dict[str, str]) -> None:
        self.layout = where
        self._dirs = dirs  # role ("memory", "pids", "cpuacct", or "unified") -> path, while it exists
        # Every path ever made, kept after removal: a figure read from a
        # removed cgroup is an OSError its reader handles, never a KeyError.
        self._made: dict[str, str] = dict(dirs)
        self.removed = False
        self.entered = False  # the server was moved in

    @classmethod
    def create(cls, where: Layout, generation: int, limits: Limits) -> GenerationCgroup:
        """Make the cgroup with ``limits`` written (or take the one made ahead); raises OSError (nothing is left behind)."""
        global _premade
        ahead = _premade
        if generation == 1 and ahead is not None and ahead[0] == os.getpid() and ahead[1].layout is where:
            _premade = None
            try:
                ahead[1]._limit(limits)
            except OSError:
                ahead[1].remove(wait=0.0)
                raise
            return ahead[1]
        # The serial keeps two hosts of one process apart (isolation="none":
        # every connection's generation 1 in the agent's process).
        name = f"{PREFIX}{os.getpid()}.{token()}-{next(_serial)}.{generation}"
        roles = (
            {"unified": where.unified}
            if where.version == 2
            else {
                "memory": where.memory,
                "pids": where.pids,
                "cpuacct": where.cpuacct,
            }
        )
        made = cls(where, {})
        try:
            for role, parent in roles.items():
                if parent is None:
                    continue
                path = os.path.join(parent, name)
                os.mkdir(path)
                made._dirs[role] = made._made[role] = path
            made._limit(limits)
        except OSError:
            made.remove(wait=0.0)
            raise
        return made

    def _limit(self, limits: Limits) -> None:
        mem, pids = self._path("memory"), self._path("pids")
        if limits.memory_mb is not None:
            value = str(max(1, int(limits.memory_mb * _MIB)))
            if self.layout.version == 2:
                _write(os.path.join(mem, "memory.max"), value)
                # No swap: the limit is on memory, not on memory plus swap.
                with contextlib.suppress(OSError):
                    _write(os.path.join(mem, "memory.swap.max"), "0")
            else:
                _write(os.path.join(mem, "memory.limit_in_bytes"), value)
                with contextlib.suppress(OSError):  # absent without swap accounting
                    _write(os.path.join(mem, "memory.memsw.limit_in_bytes"), value)
        if limits.max_processes is not None:
            _write(os.path.join(pids, "pids.max"), str(int(limits.max_processes)))

    def _path(self, role: str) -> str:
        if self.layout.version == 2:
            return self._made["unified"]
        return self._made[role]

    def _file(self, role: str, v1: str, v2: str) -> str:
        return os.path.join(self._path(role), v2 if self.layout.version == 2 else v1)

    def file(self, role: str, v1: str, v2: str) -> str:
        """The path of a figure's file, ``v2`` or ``v1`` by the layout; "" where that v1 hierarchy is not mounted."""
        if self.layout.version != 2 and role not in self._made:
            return ""
        return self._file(role, v1, v2)

    # -- membership ---------------------------------------------------------- #
    def enter(self, pid: int) -> int:
        """Move the server, then any descendant it already has, into the cgroup; returns how many moved.

        Blocking: a cgroup move waits for an RCU grace period (about 6-10 ms
        on an idle machine), so the host runs this in a thread while the
        handshake goes on, and serves no call before it is done. Children
        are inherited from then on; those the server forked meanwhile are
        found by parentage and moved too. Raises OSError if the server
        itself cannot be moved.
        """
        self._move(pid)
        self.entered = True
        moved = 1
        for child in descendants(pid) or []:
            with contextlib.suppress(ProcessLookupError, OSError):
                self._move(child)
                moved += 1
        return moved

    def _move(self, pid: int) -> None:
        for d in self._dirs.values():
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def members(self) -> list[int]:
        """Pids of the generation's live processes (zombies are not members)."""
        try:
            return [int(x) for x in _read(os.path.join(self._path("pids"), "cgroup.procs")).split()]
        except (OSError, ValueError):
            return []

    # -- figures ------------------------------------------------------------- #
    def _int(self, path: str) -> int:
        try:
            return int(_read(path).split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def memory_bytes(self) -> int:
        return self._int(self._file("memory", "memory.usage_in_bytes", "memory.current"))

    def memory_peak_bytes(self) -> int:
        peak = self._int(self._file("memory", "memory.max_usage_in_bytes", "memory.peak"))
        return peak or self.memory_bytes()

    def oom_kills(self) -> int:
        """Processes of this generation the kernel's OOM killer took (its memory limit)."""
        try:
            text = _read(self._file("memory", "memory.oom_control", "memory.events"))
        except OSError:
            return 0
        return _field(text, "oom_kill")

    def tasks(self) -> int:
        return self._int(os.path.join(self._path("pids"), "pids.current"))

    def tasks_peak(self) -> int:
        peak = self._int(os.path.join(self._path("pids"), "pids.peak"))
        return peak or self.tasks()

    def forks_refused(self) -> int:
        """Forks (and thread creations) the kernel refused at ``pids.max``."""
        try:
            return _field(_read(os.path.join(self._path("pids"), "pids.events")), "max")
        except OSError:
            return 0

    def cpu_seconds(self) -> float | None:
        """CPU time of every process the generation ever ran; ``None`` if not accounted."""
        if self.layout.version == 2:
            try:
                return _field(_read(os.path.join(self._path("unified"), "cpu.stat")), "usage_usec") / 1e6
            except OSError:
                return None
        if "cpuacct" not in self._made:
            return None
        return self._int(os.path.join(self._made["cpuacct"], "cpuacct.usage")) / 1e9

    # -- ending -------------------------------------------------------------- #
    def _signal(self, sig: int) -> list[int]:
        pids = self.members()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return pids

    def wait_empty(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.members():
            if time.monotonic() >= deadline:
                return False
            time.sleep(EXIT_POLL)
        return True

    def kill(self, term_grace: float) -> bool:
        """SIGTERM every member, wait ``term_grace``, then SIGKILL until empty.

        Blocking and bounded (``term_grace + KILL_WAIT``); run it in a thread.
        Forks are refused first (``pids.max`` 0), so a tree forking while it
        is killed still empties. Returns whether the cgroup is empty.
        """
        if term_grace > 0 and self._signal(signal.SIGTERM):
            self.wait_empty(term_grace)
        with contextlib.suppress(OSError):
            _write(os.path.join(self._path("pids"), "pids.max"), "0")
        if self.layout.version == 2:
            with contextlib.suppress(OSError):  # Linux >= 5.14: one write kills them all
                _write(os.path.join(self._path("unified"), "cgroup.kill"), "1")
        deadline = time.monotonic() + KILL_WAIT
        while self._signal(signal.SIGKILL):
            if self.wait_empty(0.05) or time.monotonic() >= deadline:
                break
        return not self.members()

    def remove(self, wait: float = REMOVE_WAIT) -> bool:
        """Delete the cgroup (every hierarchy); retries while members finish exiting."""
        deadline = time.monotonic() + wait
        for role, path in list(self._dirs.items()):
            while True:
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno == errno.EBUSY and time.monotonic() < deadline:
                        time.sleep(EXIT_POLL)
                        continue
                    break  # left for the worker's exit (or the next worker's sweep)
                del self._dirs[role]
                break
        self.removed = not self._dirs
        return self.removed


# The first generation's cgroup, made by an idle worker while it waits
# (premake), with the pid that made it; its limits come with the open.
_premade: tuple[int, GenerationCgroup] | None = None


def premake() -> None:
    """An idle worker makes its first generation's cgroup ahead (one ``mkdir`` per hierarchy, ~0.1 ms each).

    Raises OSError. Taken by :meth:`GenerationCgroup.create` for generation
    1 in the same layout; otherwise removed by :func:`discard_premade` as
    the worker ends. A worker killed first leaves it to the forkserver
    (:func:`kill_leftovers`, then removal), or to the next worker's sweep.
    """
    global _premade
    where = layout()
    if where is None or _premade is not None:
        return
    _premade = (os.getpid(), GenerationCgroup.create(where, 1, Limits()))


def discard_premade() -> None:
    """Remove the cgroup made ahead if no generation took it (the worker is ending)."""
    global _premade
    ahead, _premade = _premade, None
    if ahead is not None and ahead[0] == os.getpid():
        with contextlib.suppress(OSError):
            ahead[1].remove(wait=0.0)


class CgroupTree:
    """A generation's tree as its cgroup (:class:`~.guard.Tree`): the kernel counts and limits it."""

    enforcement = "cgroup"

    def __init__(self, cgroup: GenerationCgroup) -> None:
        self.cgroup = cgroup
        self.server_pid: int | None = None

    def attach(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def pids(self) -> list[int]:
        return self.cgroup.members()

    def usage(self) -> TreeUsage:
        cpu = self.cgroup.cpu_seconds()
        members = self.cgroup.members()
        if cpu is None:  # no cpuacct hierarchy: the live members' own CPU
            cpu = _psutil_cpu(members)
        # Resident memory as psutil reads it, like the watch: the cgroup's own
        # charge leaves out what the server touched before it was moved in
        # (its interpreter's start-up), since current kernels no longer move
        # charges with a task (v1 move_charge_at_immigrate is refused here).
        return TreeUsage(rss_bytes=_psutil_rss(members), cpu_seconds=cpu, processes=len(members))

    def check(self, limits: Limits) -> Breach | None:
        # Memory and processes are enforced by the kernel; what is checked
        # here is whether it had to step in, so the call learns why.
        if limits.memory_mb is not None and self.cgroup.oom_kills():
            mb = self.cgroup.memory_peak_bytes() / _MIB
            return Breach(
                "memory",
                f"{mb:.1f} MB in its process tree, where the kernel's OOM killer stopped it",
                "memory_mb",
                f"{limits.memory_mb:g}",
            )
        if limits.max_processes is not None and self.cgroup.forks_refused():
            return Breach(
                "process",
                f"{self.cgroup.tasks_peak()} tasks in its tree, where the kernel refused a fork",
                "max_processes",
                f"{limits.max_processes}",
            )
        if limits.cpu_seconds is not None:
            cpu = self.cgroup.cpu_seconds()
            if cpu is None:
                cpu = _psutil_cpu(self.cgroup.members())
            if cpu > limits.cpu_seconds:
                return Breach(
                    "CPU", f"{cpu:.1f} s of CPU in its process tree", "cpu_seconds", f"{limits.cpu_seconds:g}"
                )
        return None

    def kill(self, term_grace: float) -> None:
        if not self.cgroup.entered and self.server_pid is not None:
            # Never moved in (the move failed): its tree by parentage.
            kill_tree(self.server_pid, self.server_pid, include_root=True, term_grace=term_grace)
        self.cgroup.kill(term_grace)

    def oom_kills(self) -> int:
        return self.cgroup.oom_kills()

    def close(self) -> None:
        self.cgroup.remove()


def _psutil_rss(pids: list[int]) -> int:
    import psutil

    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def _psutil_cpu(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


__all__ = [
    "KILL_WAIT",
    "REMOVE_WAIT",
    "CgroupTree",
    "GenerationCgroup",
    "discard_premade",
    "premake",
]
