"""The forkserver's pages an open writes, copied by an idle worker while it waits.

A worker forked from the forkserver shares its pages until it writes to
them; the first write to each one copies it (a page fault: ~3.5 µs of the
worker's CPU here). An open writes ~390 of them, mostly reference counts of
the code and objects it touches: ~1.5 ms of the worker's CPU on the open's
path. Which pages those are hardly changes in one forkserver (its objects
stay where they are), so they are learned once and copied ahead:

- The first workers of a forkserver (forked before it has learned) note,
  while they wait, which pages they still share (:func:`snapshot`:
  ``/proc/self/pagemap``'s "exclusively mapped" bit). Once a worker's open
  has succeeded, those it has copied since are its report
  (:func:`written_since`), sent to the forkserver on the pool socket.
- The forkserver keeps the first report it can use (:func:`checked`).
  Every idle worker forked after that copies those pages while it waits
  (:func:`populate`: ``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+, which
  breaks the sharing as a write would, without writing).

Caveats: addresses differ between forkservers (address-space layout
randomization), so nothing is kept across them. An idle worker holds the
copies (~1.8 MB for the raw bench server's open) that its open would have
made anyway, and makes them at a higher cost than the open's faults (~2 ms
of CPU, one call a run of pages, against ~1.5 ms saved on the open's
path: idle time, not the open's). Where the kernel has neither (no pagemap flags, no
``MADV_POPULATE_WRITE``), nothing is learned or copied and opens copy the
pages as before.
"""

from __future__ import annotations

import array
import bisect
import ctypes
import errno
import os
import re
import sys
from collections.abc import Callable
from typing import Final

# What an idle worker copies ahead at most: a report over this is not used.
MAX_PAGES: Final = 4096  # 16 MiB of 4 KiB pages; an open's report is ~470
# A report: pairs of (first page's address, number of pages), native uint64s.
_PAIR: Final = 2 * array.array("Q").itemsize
MAX_REPORT: Final = MAX_PAGES * _PAIR
_MADV_POPULATE_WRITE: Final = 23
_PAGE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# A pagemap entry's flags byte (the eighth, little-endian): bit 63 "present",
# bit 56 "exclusively mapped". One byte per page, 1 where the page is there
# and this process's own copy (_MINE), or there and still shared (_SHARED).
_MINE: Final = bytes(1 if (b & 0x81) == 0x81 else 0 for b in range(256))
_SHARED: Final = bytes(1 if (b & 0x81) == 0x80 else 0 for b in range(256))
_RUN: Final = re.compile(rb"\x01+")

Snapshot = dict[int, bytes]  # a private writable mapping's start: a byte per page, 1 where the page is still shared


def _private_writable() -> list[tuple[int, int]] | None:
    """This process's private writable mappings but its main stack, (start, end) in order; ``None``: unreadable."""
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            fields = line.split()
            if len(fields) >= 5 and fields[1] == b"rw-p" and fields[-1] != b"[stack]":
                start, end = fields[0].split(b"-")
                out.append((int(start, 16), int(end, 16)))
        return out
    except (OSError, ValueError):
        return None


def _pages(table: bytes) -> Snapshot | None:
    """Each private writable mapping's pages, a byte each by ``table`` from its flags; ``None``: unreadable."""
    maps = _private_writable() if sys.byteorder == "little" else None
    if maps is None:
        return None
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return None
    out: Snapshot = {}
    try:
        for start, end in maps:
            entries = os.pread(fd, (end - start) // _PAGE * 8, start // _PAGE * 8)
            out[start] = entries[7::8].translate(table)
    except OSError:
        return None
    finally:
        os.close(fd)
    return out


def snapshot() -> Snapshot | None:
    """The pages this process still shares (with the forkserver) now; ``None``: the kernel does not say."""
    return _pages(_SHARED)


def written_since(before: Snapshot) -> bytes:
    """A report of the pages shared at ``before`` that are this process's own copies now; empty if none or too many.

    Only copies: a page first allocated since (a fresh heap page) is
    cheaper to fault in than a copy, and need not be where the next
    worker allocates.
    """
    now = _pages(_MINE)
    if now is None:
        return b""
    olds = sorted(before.items())
    report = array.array("Q")
    pages = 0
    for start, bits in now.items():
        for run in _RUN.finditer(_copied(start, bits, olds)):
            count = run.end() - run.start()
            report.extend((start + run.start() * _PAGE, count))
            pages += count
    if pages > MAX_PAGES:
        return b""
    return report.tobytes()


def _copied(start: int, mine: bytes, olds: list[tuple[int, bytes]]) -> bytes:
    """``mine`` (a mapping at ``start``) where the page was shared in ``olds`` too, by address; 0 elsewhere.

    Mappings merge and grow (a heap, an arena mapped next to another), so
    the same pages may have been under another mapping's start before.
    """
    end = start + len(mine) * _PAGE
    out = []
    at = start  # where the part of ``mine`` not yet in ``out`` starts
    for old_start, old in olds[max(0, bisect.bisect_right(olds, (start,)) - 1) :]:
        old_end = old_start + len(old) * _PAGE
        if old_start >= end:
            break
        lo, hi = max(at, old_start), min(end, old_end)
        if lo >= hi:
            continue
        i, j, n = (lo - start) // _PAGE, (lo - old_start) // _PAGE, (hi - lo) // _PAGE
        out.append(bytes(i - (at - start) // _PAGE))
        both = int.from_bytes(mine[i : i + n], "big") & int.from_bytes(old[j : j + n], "big")
        out.append(both.to_bytes(n, "big"))
        at = hi
    out.append(bytes(len(mine) - (at - start) // _PAGE))
    return b"".join(out)


def checked(report: bytes) -> bytes | None:
    """``report`` if it is one (whole pairs, page-aligned, at most :data:`MAX_PAGES`), cut to this process's private writable mappings; else ``None``.

    Called in the forkserver: the pages a worker copied were shared with it,
    so they lie in its mappings, which every idle worker forked after
    inherits; what lies elsewhere (a range unmapped since, or mapped
    otherwise) is cut here, once, not in every idle worker.
    """
    if not report or len(report) % _PAIR or len(report) > MAX_REPORT:
        return None
    pairs = array.array("Q", report)
    counts = pairs[1::2]
    if any(a % _PAGE for a in pairs[::2]) or min(counts) < 1 or sum(counts) > MAX_PAGES:
        return None
    maps = _private_writable()
    if not maps:
        return None
    starts = [start for start, _ in maps]
    out = array.array("Q")
    for i in range(0, len(pairs), 2):
        lo, hi = pairs[i], pairs[i] + pairs[i + 1] * _PAGE
        k = max(0, bisect.bisect_right(starts, lo) - 1)
        while k < len(maps) and maps[k][0] < hi:
            a, b = max(lo, maps[k][0]), min(hi, maps[k][1])
            k += 1
            if a < b:
                out.extend((a, (b - a) // _PAGE))
    return out.tobytes() or None


def populate(report: bytes) -> int:
    """Copy the pages of a :func:`checked` report into this process now; how many pages were.

    A range no longer mapped here is skipped; a kernel without
    ``MADV_POPULATE_WRITE`` (before 5.14) ends it at the first.
    """
    madvise = _madvise() if report else None
    if madvise is None:
        return 0
    pairs = array.array("Q", report)
    done = 0
    for i in range(0, len(pairs), 2):
        if madvise(pairs[i], pairs[i + 1] * _PAGE, _MADV_POPULATE_WRITE) == 0:
            done += pairs[i + 1]
        elif ctypes.get_errno() == errno.EINVAL:
            break  # the kernel has no MADV_POPULATE_WRITE
    return done


def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


__all__ = ["MAX_PAGES", "MAX_REPORT", "Snapshot", "checked", "populate", "snapshot", "written_since"]
