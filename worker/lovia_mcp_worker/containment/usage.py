"""A generation's tree read over a window: CPU seconds and peak memory, cheaply enough for every call.

The session's accounting (:mod:`lovia_mcp_worker.session.accounting`) reads
a :class:`Gauge` as a call starts and as it ends. One gauge per kind of tree:

- :class:`CgroupGauge`, the generation's cgroup: CPU from ``cpu.stat``
  ``usage_usec`` (v2) or ``cpuacct.usage`` (v1); the peak from ``memory.peak``
  (v2, which Linux 6.12+ resets for the one open file that writes to it) or
  ``memory.max_usage_in_bytes`` (v1, reset by writing to it). The files stay
  open for the generation's life and are re-read with ``pread``: one system
  call per figure.
- :class:`ProcGauge`, the tree by parentage (the watch): CPU from each
  process's ``/proc/PID/stat`` (its own and its reaped children's); the peak
  from ``VmHWM`` in ``/proc/PID/status``, the kernel's high-water mark of
  resident memory, reset by writing ``5`` to ``/proc/PID/clear_refs``
  (Linux 4.0+), summed over the tree. The server's own files stay open.

Where the peak cannot be reset (v2 before Linux 6.12, a ``clear_refs`` the
worker may not write), :meth:`Gauge.reset_peak` says so and the caller
samples :meth:`Gauge.current` instead.

Caveats: the cgroup's memory is the kernel's charge to it (anonymous memory,
page cache, kernel memory), which on current kernels leaves out what the
server touched before it was moved in (its runtime's start-up); the watch's
is resident memory, and its sum of per-process peaks can exceed the tree's
peak when processes peaked at different moments. The watch's CPU counts the
server, its live descendants and the children they reaped, in clock ticks
(10 ms on most systems); an orphan the worker adopted is not in the tree.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final, Protocol

from .cgroup import GenerationCgroup
from .proctree import descendants

_TICK: Final = 1 / os.sysconf("SC_CLK_TCK")
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
# Bytes read from a figure's file: /proc/PID/status is about 1.5 KB.
_READ: Final = 4096


class Gauge(Protocol):
    """One generation's tree, read at a window's ends (on the event loop: every read is a system call or a few).

    ``cheap_peak``: :meth:`peak` is one read (a cgroup's file), worth taking
    at the end of every call. ``resident``: the memory in use at the last
    :meth:`cpu` reading, where that reading gives it for free (0 elsewhere).
    """

    cheap_peak: bool
    resident: int

    def cpu(self) -> float | None:
        """CPU seconds the tree has used so far (a running total; ``None``: not readable)."""
        ...

    def reset_peak(self) -> bool:
        """Restart the kernel's peak from the memory in use now; ``False`` where it cannot be restarted."""
        ...

    def peak(self) -> int | None:
        """The kernel's peak in bytes since :meth:`reset_peak` (``None``: not readable)."""
        ...

    def current(self) -> int:
        """The memory in use now, in bytes (0 if not readable)."""
        ...

    def close(self) -> None: ...


def _open(path: str, flags: int = os.O_RDONLY) -> int:
    try:
        return os.open(path, flags | os.O_CLOEXEC)
    except OSError:
        return -1


def _pread(fd: int) -> bytes:
    if fd < 0:
        return b""
    try:
        return os.pread(fd, _READ, 0)
    except OSError:
        return b""


def _number(data: bytes) -> int | None:
    try:
        return int(data.split(None, 1)[0])
    except (ValueError, IndexError):
        return None


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


class CgroupGauge:
    """A generation's cgroup: the kernel's own counters, kept open."""

    cheap_peak = True
    resident = 0

    def __init__(self, cgroup: GenerationCgroup) -> None:
        self._v2 = cgroup.layout.version == 2
        if self._v2:
            self._cpu = _open(cgroup.file("unified", "", "cpu.stat"))
            peak_name, self._reset_bytes = "memory.peak", b"reset\n"
        else:
            where = cgroup.file("cpuacct", "cpuacct.usage", "")
            self._cpu = _open(where) if where else -1
            peak_name, self._reset_bytes = "memory.max_usage_in_bytes", b"0\n"
        self._peak = _open(cgroup.file("memory", peak_name, peak_name), os.O_RDWR)
        self._resettable = self._peak >= 0
        self._current = _open(cgroup.file("memory", "memory.usage_in_bytes", "memory.current"))
        self._cgroup = cgroup

    def cpu(self) -> float | None:
        if self._cpu < 0:
            # No cpuacct hierarchy (v1): the live members' own.
            return _tree_cpu(self._cgroup.members())
        try:
            data = os.pread(self._cpu, _READ, 0)
            if not self._v2:
                return int(data) / 1e9
            at = data.index(b"usage_usec ") + 11
            return int(data[at : data.index(b"\n", at)]) / 1e6
        except (OSError, ValueError):
            return None

    def reset_peak(self) -> bool:
        if not self._resettable:
            return False
        try:
            os.write(self._peak, self._reset_bytes)
        except OSError:
            self._resettable = False  # v2 before Linux 6.12: memory.peak is the cgroup's lifetime peak
            return False
        return True

    def peak(self) -> int | None:
        try:
            return int(os.pread(self._peak, _READ, 0))
        except (OSError, ValueError):
            return None

    def current(self) -> int:
        return _number(_pread(self._current)) or 0

    def close(self) -> None:
        _close(self._cpu, self._peak, self._current)
        self._cpu = self._peak = self._current = -1


class ProcGauge:
    """A tree by parentage under ``server_pid``: each process's own figures in ``/proc``.

    A one-thread server without children (the common case) costs two
    ``pread`` calls per CPU reading, on files held open; a tree is walked
    (:func:`~.proctree.descendants`) only where the server has children.
    The peak (``/proc/PID/status``, which the kernel writes out whole) costs
    about three such readings.
    """

    cheap_peak = False

    def __init__(self, server_pid: int) -> None:
        self._pid = server_pid
        self.resident = 0
        self._below: list[int] = []  # the descendants at the last reading
        base = f"/proc/{server_pid}"
        self._stat = _open(f"{base}/stat")
        self._children = _open(f"{base}/task/{server_pid}/children")
        self._status = _open(f"{base}/status")
        self._clear = _open(f"{base}/clear_refs", os.O_WRONLY)

    def _members(self) -> tuple[bytes, list[int]]:
        """The server's stat line, and its descendants' pids."""
        stat = _pread(self._stat)
        fields = _fields(stat)
        threads = int(fields[17]) if len(fields) > 17 else 1
        if threads == 1:
            if not _pread(self._children).strip():
                return stat, []
        return stat, descendants(self._pid) or []

    def cpu(self) -> float | None:
        stat, below = self._members()
        self._below = below
        if not stat:
            self.resident = 0
            return None
        fields = _fields(stat)
        total = 0.0
        resident = 0
        with contextlib.suppress(ValueError, IndexError):
            total = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) * _TICK
            resident = int(fields[21]) * _PAGE
        for pid in below:
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = _fields(f.read())
                total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) * _TICK
                resident += int(fields[21]) * _PAGE
        self.resident = resident
        return total

    def reset_peak(self) -> bool:
        """Restart the peak of the processes found at the last :meth:`cpu` reading."""
        if self._clear < 0:
            return False
        try:
            os.write(self._clear, b"5")
            for pid in self._below:
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # exited meanwhile
                    with open(f"/proc/{pid}/clear_refs", "wb", buffering=0) as f:
                        f.write(b"5")
        except OSError:
            return False  # not the worker's to write (another user's, or not dumpable)
        return True

    def peak(self) -> int | None:
        own = _hwm(_pread(self._status))
        if own is None:
            return None
        for pid in self._below:
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/status", "rb") as f:
                    own += _hwm(f.read()) or 0
        return own

    def current(self) -> int:
        stat, below = self._members()
        fields = _fields(stat)
        total = int(fields[21]) * _PAGE if len(fields) > 21 else 0
        for pid in below:
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/stat", "rb") as f:
                    total += int(_fields(f.read())[21]) * _PAGE
        return total

    def close(self) -> None:
        _close(self._stat, self._children, self._status, self._clear)
        self._stat = self._children = self._status = self._clear = -1


def _fields(stat: bytes) -> list[bytes]:
    """The fields of a ``/proc/PID/stat`` line after the command name (field 3, the state, first)."""
    return stat[stat.rfind(b")") + 2 :].split()


def _stat_cpu(stat: bytes) -> float:
    """utime, stime, cutime and cstime of a stat line, in seconds."""
    fields = _fields(stat)
    try:
        return sum(int(f) for f in fields[11:15]) * _TICK
    except ValueError:
        return 0.0


def _tree_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/stat", "rb") as f:
                total += _stat_cpu(f.read())
    return total


def _hwm(status: bytes) -> int | None:
    at = status.find(b"VmHWM:")
    if at < 0:
        return None
    found = _number(status[at + 6 : at + 40])
    return None if found is None else found * 1024


__all__ = ["CgroupGauge", "Gauge", "ProcGauge"]
