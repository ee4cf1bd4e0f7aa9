"""Where generation cgroups may be made, and cleaning up after dead workers.

:func:`layout` detects, once per process, which cgroup hierarchies this
process may create children in (cgroup v2 with ``memory`` and ``pids``
delegated, else cgroup v1's ``memory``/``pids``/``cpuacct``), and sweeps empty
leftovers of dead workers. :func:`kill_leftovers` / :func:`remove_leftovers`
are for the forkserver, which outlives its workers. One generation's own cgroup
is :mod:`.cgroup`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

# Environment switch: "0", "off", "no" or "false" keeps every worker on the watch.
ENV_SWITCH: Final = "LOVIA_MCP_CGROUPS"
PREFIX: Final = "lovia-mcp."

_OFF: Final = frozenset({"0", "off", "no", "false"})


@dataclass(frozen=True)
class Layout:
    """Where this process may create generation cgroups.

    ``version`` 2: ``unified`` is the worker's own cgroup, with memory and
    pids delegated to children. Version 1: the worker's own cgroup in the
    ``memory``, ``pids`` and (optional) ``cpuacct`` hierarchies.
    """

    version: int
    unified: str | None = None
    memory: str | None = None
    pids: str | None = None
    cpuacct: str | None = None

    @property
    def parents(self) -> list[str]:
        dirs = [self.unified] if self.version == 2 else [self.memory, self.pids, self.cpuacct]
        return [d for d in dirs if d is not None]

    def describe(self) -> str:
        if self.version == 2:
            return f"cgroup v2 ({self.unified})"
        return f"cgroup v1 (memory {self.memory}, pids {self.pids}, cpuacct {self.cpuacct or 'not mounted'})"


_detected: tuple[tuple[int, bool], Layout | None] | None = None
_token = ""


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() not in _OFF


def layout() -> Layout | None:
    """The cgroup layout this process may use, detected once per process."""
    global _detected, _token
    # Once per worker: a worker forked from the forkserver detects anew (and
    # so does a process whose switch changed, e.g. a test in the agent's).
    key = (os.getpid(), enabled())
    if _detected is None or _detected[0] != key:
        _token = secrets.token_hex(3)
        found = _detect() if key[1] else None
        if found is not None:
            _sweep(found)
        _detected = (key, found)
    return _detected[1]


def disable() -> None:
    """Use the watch for the rest of this process (creating a cgroup failed)."""
    global _detected
    _detected = ((os.getpid(), enabled()), None)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _mounts() -> Iterator[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of each cgroup mount."""
    for line in read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        yield tail[0], _unescape(fields[3]), _unescape(fields[4]), set(tail[2].split(","))


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _own_dir(mount_root: str, mount_point: str, path: str) -> str | None:
    if mount_root != "/" and not (path == mount_root or path.startswith(mount_root + "/")):
        return None  # our cgroup is not visible through this mount
    rel = path[len(mount_root) :] if mount_root != "/" else path
    return os.path.join(mount_point, rel.lstrip("/")).rstrip("/") or mount_point


def _usable(path: str | None) -> bool:
    return path is not None and os.path.isdir(path) and os.access(path, os.W_OK)


def _detect() -> Layout | None:
    try:
        own: dict[str, str] = {}
        for line in read("/proc/self/cgroup").splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
        mounts = list(_mounts())
    except (OSError, ValueError):
        return None
    if "" in own:
        for fstype, root, point, _ in mounts:
            if fstype != "cgroup2":
                continue
            mine = _own_dir(root, point, own[""])
            if not _usable(mine):
                continue
            assert mine is not None
            try:
                delegated = set(read(os.path.join(mine, "cgroup.subtree_control")).split())
            except OSError:
                continue
            if {"memory", "pids"} <= delegated:
                return Layout(version=2, unified=mine)
    v1: dict[str, str] = {}
    for fstype, root, point, options in mounts:
        if fstype != "cgroup":
            continue
        for controller in ("memory", "pids", "cpuacct"):
            if controller in options and controller in own and controller not in v1:
                mine = _own_dir(root, point, own[controller])
                if _usable(mine):
                    assert mine is not None
                    v1[controller] = mine
    if "memory" not in v1 or "pids" not in v1:
        return None
    return Layout(version=1, memory=v1["memory"], pids=v1["pids"], cpuacct=v1.get("cpuacct"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(found: Layout) -> None:
    """Remove empty generation cgroups left by workers that died (only ours, by name)."""
    for parent in found.parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not name.startswith(PREFIX):
                continue
            try:
                owner = int(name.split(".")[1])
            except (IndexError, ValueError):
                continue
            if owner != os.getpid() and not _pid_alive(owner):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(parent, name))  # fails (EBUSY) unless empty


def token() -> str:
    """This process's random token in its cgroups' names (set by :func:`layout`)."""
    return _token


def write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def kill_leftovers(worker_pid: int) -> int:
    """SIGKILL every process left in the cgroups of a worker that died; returns how many.

    For the forkserver, which outlives its workers: a worker killed by SIGKILL
    leaves its generations' cgroups behind, escapees (``setsid``, orphans)
    included. Only cgroups named for that worker are touched; the next
    worker removes them once empty.
    """
    found = layout()
    if found is None:
        return 0
    killed: set[int] = set()
    mark = f"{PREFIX}{worker_pid}."
    for parent in found.parents:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(mark)]
        except OSError:
            continue
        for name in names:
            path = os.path.join(parent, name)
            with contextlib.suppress(OSError):
                if os.path.exists(os.path.join(path, "pids.max")):
                    write(os.path.join(path, "pids.max"), "0")
            try:
                pids = [int(x) for x in read(os.path.join(path, "cgroup.procs")).split()]
            except (OSError, ValueError):
                continue
            for pid in set(pids) - killed:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
    return len(killed)


def remove_leftovers(worker_pid: int) -> int:
    """Remove the empty cgroups named for a worker that died; returns how many are left."""
    found = layout()
    if found is None:
        return 0
    left = 0
    mark = f"{PREFIX}{worker_pid}."
    for parent in found.parents:
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                if name.startswith(mark):
                    try:
                        os.rmdir(os.path.join(parent, name))
                    except OSError:
                        left += 1
    return left


__all__ = [
    "ENV_SWITCH",
    "PREFIX",
    "Layout",
    "disable",
    "enabled",
    "kill_leftovers",
    "layout",
    "read",
    "remove_leftovers",
    "token",
    "write",
]
