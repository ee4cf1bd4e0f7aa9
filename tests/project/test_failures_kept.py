"""A test run that is stopped half-way keeps the failures it had: each is written to a file as it happens.

CI's time limit, a ^C or a hung test killed from outside end a run before
pytest's own summary; the report of what had failed must survive that. The
run here has a failing test and then one that blocks for ever; once the
failure is on file the run is killed outright, and the file still says what
failed and why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import POLL, ROOT

pytestmark = pytest.mark.timeout(120)

# Bound on the inner run reaching its first failure (an interpreter, pytest and the suite's conftest).
FIRST_FAILURE_WAIT = 60.0

TESTS = """
import os


def test_that_fails():
    assert 1 == 2, "the failure that must be kept"


def test_that_hangs():
    open(os.environ["HOLD_FIFO"]).read()  # no writer ever comes: the run is killed here
"""


def test_a_run_killed_half_way_keeps_the_failures_it_had(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(TESTS)
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    failures = tmp_path / "failures.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "tests"),
        "HOLD_FIFO": str(fifo),
        "LOVIA_MCP_TEST_FAILURES": str(failures),
    }
    inner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + FIRST_FAILURE_WAIT
        while "the failure that must be kept" not in (failures.read_text() if failures.exists() else ""):
            assert inner.poll() is None, f"the inner run ended (exit {inner.returncode}) before it failed"
            assert time.monotonic() < deadline, "no failure was written within the bound"
            time.sleep(POLL)  # only polling can tell: the file is written by another process
    finally:
        os.killpg(inner.pid, signal.SIGKILL)
        inner.wait(timeout=10)
    kept = failures.read_text()
    print(kept)
    assert inner.returncode == -signal.SIGKILL
    assert "FAILED test_inner.py::test_that_fails (call)" in kept
    assert "AssertionError: the failure that must be kept" in kept
    assert "test_that_hangs" not in kept
