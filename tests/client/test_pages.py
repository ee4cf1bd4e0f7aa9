"""An idle worker copies ahead the forkserver's pages an open writes (``lovia_mcp_worker.forkserver.pages``).

Real forks: a process shares its pages with its parent until it writes to
them, one page fault each. What a child wrote is learned from its pagemap;
a later child that copies those pages ahead writes them without faults.
The forkserver's side (keep the first usable report) and the worker's side
(report only a successful open) are checked on real socket pairs.
"""

from __future__ import annotations

import array
import mmap
import platform
import selectors
import socket
import sys
from pathlib import Path

import pytest
from helpers import script_json
from lovia_mcp_worker.forkserver import pages
from lovia_mcp_worker.forkserver.server import _Idle, _Pool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc/self/pagemap")

PAGE = mmap.PAGESIZE


def _kernel_at_least(major: int, minor: int) -> bool:
    release = platform.release().split(".")
    try:
        return (int(release[0]), int(release[1].split("-")[0])) >= (major, minor)
    except (IndexError, ValueError):
        return False


# pagemap's "exclusively mapped" flag came with Linux 4.2, MADV_POPULATE_WRITE with 5.14:
# on kernels that have them, the tests must not skip.
FLAGS = _kernel_at_least(4, 2)
POPULATE = _kernel_at_least(5, 14)


def _private(n: int) -> mmap.mmap:
    """``n`` fresh pages of a private anonymous mapping (what a heap is; mmap's default is shared)."""
    return mmap.mmap(-1, n * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


WORKER = str(Path(__file__).parents[2] / "worker")

# The parent fills 300 pages; child A writes them after noting its own pages
# (its report); child B copies the report's pages ahead, then writes them;
# child C writes them without. Each child reports its faults while writing.
FORKS = (
    r"""
import array, json, os, resource, sys
sys.path.insert(0, %r)
from lovia_mcp_worker.forkserver import pages
from lovia_mcp_worker.forkserver.server import _Idle, _Pool
N = 300
buf = bytearray(os.urandom(N * 4096))

def in_child(body):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = body()
        os.write(w, out)
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data

def write_all():
    for i in range(0, N * 4096, 4096):
        buf[i] ^= 0xFF

def learn():
    before = pages.snapshot()
    if before is None:
        return b""
    write_all()
    return pages.written_since(before)

def faults_writing(copy_ahead, report):
    def body():
        copied = pages.populate(report) if copy_ahead else 0
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        write_all()
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        return json.dumps([copied, f1 - f0]).encode()
    return json.loads(in_child(body))

report = in_child(learn)
pairs = array.array("Q", report)
print(json.dumps({
    "reported": sum(pairs[1::2]),
    "usable": pages.checked(report) is not None,
    "with": faults_writing(True, report),
    "without": faults_writing(False, report),
}))
"""
    % WORKER
)


@pytest.mark.timeout(60)
def test_pages_a_child_wrote_are_learned_and_a_later_child_that_copies_them_ahead_writes_them_without_faults() -> None:
    seen = script_json(FORKS)
    if seen["reported"] == 0 and not FLAGS:
        pytest.skip("this kernel's pagemap does not say which pages a process has its own copy of")
    assert seen["usable"]
    assert seen["reported"] >= 300  # every page written (and whatever else the child wrote)
    copied, faults_with = seen["with"]
    _, faults_without = seen["without"]
    if copied == 0 and not POPULATE:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
    assert copied >= 300
    assert faults_without >= 300  # one copy per page written
    assert faults_with < 30  # copied ahead: the writes find their own pages


def _report(*pairs: tuple[int, int]) -> bytes:
    return array.array("Q", [x for pair in pairs for x in pair]).tobytes()


def test_a_report_is_used_only_if_it_is_whole_page_aligned_pairs_within_the_cap() -> None:
    here = _private(8)
    at = _address(here)
    try:
        good = _report((at, 3), (at + 4 * PAGE, 1))
        assert pages.checked(good) == good
        assert pages.checked(b"") is None
        assert pages.checked(good[:-1]) is None  # cut inside a number
        assert pages.checked(good[:24]) is None  # cut inside a pair
        assert pages.checked(_report((at + 8, 3))) is None  # not a page's address
        assert pages.checked(_report((at, 0))) is None  # an empty run
        assert pages.checked(_report((at, pages.MAX_PAGES + 1))) is None  # over the cap
        assert pages.checked(_report(*(((i + 1) * 8 * PAGE, 1) for i in range(pages.MAX_PAGES + 1)))) is None
    finally:
        here.close()


def test_a_report_is_cut_to_private_writable_mappings_and_copying_ahead_skips_what_is_unmapped_since() -> None:
    """Mapped shared here (a write there would reach others) or not at all: cut from the report; the rest is kept."""
    here = _private(4)
    shared = mmap.mmap(-1, 4 * PAGE)  # MAP_SHARED
    gone = _private(4)
    gone_at = _address(gone)
    gone.close()  # unmapped: madvise fails with ENOMEM there
    try:
        assert pages.checked(_report((gone_at, 4), (_address(shared), 4), (_address(here), 4))) == _report(
            (_address(here), 4)
        )
        # A range unmapped after the check (the forkserver's heap shrank) is skipped, not the end.
        copied = pages.populate(_report((gone_at, 4), (_address(here), 4)))
        if copied == 0 and not POPULATE:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
        assert copied == 4
    finally:
        here.close()
        shared.close()


def _address(m: mmap.mmap) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(m))


# The forkserver's side (_Pool.heard) in this process; each "worker" a fork
# that shares 8 written pages of a buffer with it, notes them, writes them
# in its "open" and tells the pool socket how the open went.
POOL = (
    r"""
import array, json, mmap, os, selectors, socket, sys
sys.path.insert(0, %r)
from lovia_mcp_worker.forkserver import pages
from lovia_mcp_worker.forkserver.server import _Idle, _Pool
from lovia_mcp_worker.forkserver.server import _Idle, _Pool
from lovia_mcp_worker.forkserver.start import PoolSocket
PAGE = mmap.PAGESIZE
ctrl, ctrl_peer = socket.socketpair()
pool = _Pool(ctrl)
sel = selectors.DefaultSelector()

def serve_one(opened):
    buf = bytearray(os.urandom(8 * PAGE))  # there, and shared with the fork below
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        before = pages.snapshot()
        for i in range(0, 8 * PAGE, PAGE):
            buf[i] ^= 0xFF
        PoolSocket(theirs, before).done(opened)
        os._exit(0 if theirs.fileno() == -1 else 3)  # closed in every case: the forkserver's "answered"
    theirs.close()
    ours.setblocking(False)
    idle = _Idle(pid, ours)
    pool.opening.append(idle)
    sel.register(ours, selectors.EVENT_READ, idle)
    while idle in pool.opening:  # what the forkserver's loop does: the report, then the end
        for key, _ in sel.select(5.0):
            pool.heard(key.data, sel)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(buf)), buf  # the buffer kept: its address stays its

def covers(at):
    learned = array.array("Q", pool.learned)
    first, last = at // PAGE * PAGE + PAGE, (at + 8 * PAGE) // PAGE * PAGE  # the pages wholly inside
    return any(a <= first and last <= a + n * PAGE for a, n in zip(learned[::2], learned[1::2]))

seen = {}
serve_one(False)  # a failed open: no model
seen["after_a_failed_open"] = pool.learned is not None
at, kept = serve_one(True)
seen["learned"] = pool.learned is not None and covers(at)
first = pool.learned
serve_one(True)  # a later report changes nothing
seen["kept_the_first"] = pool.learned is first
print(json.dumps(seen))
"""
    % WORKER
)


@pytest.mark.timeout(60)
def test_the_forkserver_keeps_the_first_usable_report_of_a_successful_open() -> None:
    """A worker reports only an open that succeeded; the forkserver keeps the first report it can use."""
    seen = script_json(POOL)
    if not seen["learned"] and not FLAGS:
        pytest.skip("this kernel's pagemap does not say which pages a process has its own copy of")
    assert seen == {"after_a_failed_open": False, "learned": True, "kept_the_first": True}


def test_a_report_the_forkserver_cannot_use_ends_its_learning() -> None:
    """Not whole pairs: nothing to copy, and no later worker notes its pages again (``learned`` is ``b""``)."""
    ctrl, ctrl_peer = socket.socketpair()
    ours, theirs = socket.socketpair()
    sel = selectors.DefaultSelector()
    try:
        pool = _Pool(ctrl)
        ours.setblocking(False)
        idle = _Idle(0, ours)
        pool.opening.append(idle)
        sel.register(ours, selectors.EVENT_READ, idle)
        theirs.sendall(_report((16 * PAGE, 3))[:-1])  # cut inside a number
        theirs.close()
        while idle in pool.opening:
            for key, _ in sel.select(5.0):
                pool.heard(key.data, sel)
        assert pool.learned == b""
        assert pages.populate(pool.learned) == 0
    finally:
        sel.close()
        ctrl.close()
        ctrl_peer.close()
        theirs.close()
