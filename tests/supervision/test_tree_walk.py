"""Finding a server's tree by each task's ``children`` file, not a walk of all of ``/proc``.

Real processes: a root whose second thread forks a child (listed only in
that thread's ``children`` file) and whose main thread forks a child that
forks a grandchild. The walk must find what psutil's machine-wide parent
map finds, and the kill must reach all of it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest
from lovia_mcp_worker.containment import proctree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc")

# The root prints its three descendants' pids once they all exist, then waits.
ROOT = r"""
import subprocess, sys, threading
kids = []
def fork_in_thread():
    kids.append(subprocess.Popen(["sleep", "60"]))
t = threading.Thread(target=fork_in_thread)
t.start(); t.join()
# That thread is gone: its child is listed under another of the process's
# threads now. A thread that stays has its own child in its own list.
made, held = threading.Event(), threading.Event()
def fork_and_stay():
    kids.append(subprocess.Popen(["sleep", "60"]))
    made.set()
    held.wait()
threading.Thread(target=fork_and_stay, daemon=True).start()
made.wait()
middle = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; g = subprocess.Popen(['sleep', '60']); print(g.pid, flush=True); sys.stdin.read()"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
grand = middle.stdout.readline().strip()
print(kids[0].pid, kids[1].pid, middle.pid, grand, flush=True)
sys.stdin.read()
"""


Family = tuple["subprocess.Popen[str]", set[int]]


@pytest.fixture
def family() -> Iterator[Family]:
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None
    pids = {int(x) for x in root.stdout.readline().split()}
    try:
        yield root, pids
    finally:
        proctree.kill_tree(root.pid, None, include_root=True, term_grace=0.0)
        root.wait(timeout=10)


@pytest.mark.timeout(30)
def test_the_walk_finds_what_psutils_parent_map_finds_children_of_other_threads_and_grandchildren(
    family: Family,
) -> None:
    root, pids = family
    assert len(pids) == 4
    expected = {p.pid for p in psutil.Process(root.pid).children(recursive=True)}
    found = proctree.descendants(root.pid)
    assert found is not None, "this kernel lists each task's children (CONFIG_PROC_CHILDREN)"
    assert set(found) == expected >= pids
    assert {p.pid for p in proctree.tree(root.pid)} == expected
    assert [p.pid for p in proctree.tree(root.pid, include_root=True)][0] == root.pid


@pytest.mark.timeout(30)
def test_without_the_kernels_lists_the_tree_comes_from_psutil(family: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    root, pids = family
    monkeypatch.setattr(proctree, "_TASK_CHILDREN", False)
    assert proctree.descendants(root.pid) is None
    assert {p.pid for p in proctree.tree(root.pid)} >= pids


@pytest.mark.timeout(30)
def test_a_tree_kill_reaches_a_threads_child_and_a_grandchild(family: Family) -> None:
    root, pids = family
    proctree.kill_tree(root.pid, None, include_root=True, term_grace=0.0)
    root.wait(timeout=10)
    # kill_tree returns once each is gone or a zombie (reparented, left for its reaper).
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive
