"""Shared test harness.

No process left behind: the pytest process makes itself a *child subreaper*
(Linux), so every process a test starts (workers, servers, grandchildren,
orphans whose parent already exited) stays a descendant of pytest. After each
test, the ``no_leaks`` fixture (autouse) waits a bounded time for the
descendants a test started to go, then fails the test and kills whatever is
left. The forkserver (shared by design) and processes registered as shared
session fixtures are exempt.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from lovia_mcp_worker.containment.guard import become_subreaper

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "tests" / "servers"
RAW_SERVER = str(SERVERS / "raw_server.py")
PY = sys.executable

# Bound on waiting, after a test, for its processes to finish exiting.
LEAK_WAIT = 5.0

T = TypeVar("T")

_shared_pids: set[int] = set()


def run(coro: Awaitable[T]) -> T:
    """Run a coroutine on a fresh event loop (tests are plain functions)."""
    return asyncio.run(coro)  # type: ignore[arg-type]


def raw_args(*flags: str) -> list[str]:
    return [RAW_SERVER, *flags]


def register_shared(pid: int) -> None:
    """Exempt a session-scoped process (and its descendants) from the leak check."""
    _shared_pids.add(pid)


def _shared_helper_pids() -> set[int]:
    """lovia-mcp's forkserver: one per agent process, shared by design."""
    from lovia_mcp.client.channel import helper_pids

    return helper_pids()


def _exempt() -> set[int]:
    out = set(_shared_pids)
    for pid in list(_shared_pids):
        try:
            out.update(p.pid for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    return out | _shared_helper_pids()


def _reap_zombies() -> None:
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for p in children:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, OSError):
            pass


def live_descendants() -> list[psutil.Process]:
    _reap_zombies()
    exempt = _exempt()
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid in exempt or p.status() == psutil.STATUS_ZOMBIE:
                continue
            out.append(p)
        except psutil.Error:
            continue
    return out


def pytest_configure(config: pytest.Config) -> None:
    become_subreaper()


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    before = {p.pid for p in live_descendants()}
    yield
    leftover = [p for p in live_descendants() if p.pid not in before]
    if leftover:
        _, alive = psutil.wait_procs(leftover, timeout=LEAK_WAIT)
        alive = [p for p in alive if p.pid not in _exempt()]
        alive = [p for p in alive if _alive(p)]
        if alive:
            described = [_describe(p) for p in alive]
            for p in alive:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(alive, timeout=LEAK_WAIT)
            _reap_zombies()
            pytest.fail(f"test left processes behind: {described}")
    _reap_zombies()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {' '.join(p.cmdline())[:120]}"
    except psutil.Error:
        return str(p.pid)


def pid_alive(pid: int) -> bool:
    try:
        return _alive(psutil.Process(pid))
    except psutil.Error:
        return False


__all__ = ["PY", "RAW_SERVER", "ROOT", "SERVERS", "live_descendants", "pid_alive", "raw_args", "register_shared", "run"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    if not sys.platform.startswith("linux"):
        skip = pytest.mark.skip(reason="process supervision tests need Linux")
        for item in items:
            if "linux_only" in item.keywords:
                item.add_marker(skip)
