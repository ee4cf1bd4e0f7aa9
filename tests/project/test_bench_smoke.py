"""Smoke test of the benchmark: ``scripts/bench.py --quick --json`` runs and reports every figure.

Not a timed test: the figures are not judged here (shared machines are too
noisy for that); it only proves the benchmark still runs against the current
code and that its JSON has a value for every figure and every client.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

BENCH = ROOT / "scripts" / "bench.py"
CLIENTS = ("lovia", "none", "process")
# figure -> servers it is measured on (as in scripts/bench.py's FIGURES).
EXPECTED = {
    "open": ("raw", "sdk"),
    "close": ("raw", "sdk"),
    "first_open": ("raw",),
    "small_call": ("raw", "sdk"),
    "concurrent": ("raw", "sdk"),
    "big": ("raw", "sdk"),
    "stall_max": ("raw", "sdk"),
    "stall_total": ("raw", "sdk"),
    "stall_cpu_max": ("raw", "sdk"),
    "loop_cpu": ("raw", "sdk"),
    "rss_per_server": ("raw",),
    "worker_uss": ("raw",),
    "sandbox_cost": ("raw",),
    "pdeathsig_setpriv": ("raw",),
    "pdeathsig_preexec": ("raw",),
    "run1": ("raw",),
    "run5": ("raw",),
    "run5_close": ("raw",),
}
# Figures that only exist for a worker process (the launch figures time the worker's launch code).
PROCESS_ONLY = {"worker_uss", "pdeathsig_setpriv", "pdeathsig_preexec"}
# Figures lovia's own plugin has nothing to compare with (it has no sandbox).
NOT_LOVIA = {"sandbox_cost"}
# Paired differences: noise can make a median slightly negative.
SIGNED = {"sandbox_cost", "pdeathsig_setpriv", "pdeathsig_preexec"}
# Bound on the quick run (it takes ~13 s on an idle 2-core machine).
BENCH_TIMEOUT = 150


@pytest.mark.timeout(BENCH_TIMEOUT + 30)
def test_quick_benchmark_exits_cleanly_and_reports_every_figure_for_every_client(tmp_path: Path) -> None:
    # The performance page's table is the script's: a copy of the page is rewritten too.
    page = tmp_path / "performance.md"
    page.write_text((ROOT / "docs" / "performance.md").read_text())
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", "--markdown", str(page)],
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    rows = {(r["figure"], r["server"]): r for r in report["figures"]}
    for figure, servers in EXPECTED.items():
        for server in servers:
            row = rows.get((figure, server))
            assert row is not None, f"missing figure {figure} [{server}]"
            for client in CLIENTS:
                assert client in row["values"], f"{figure} [{server}] has no entry for {client}"
                value = row["values"][client]
                if (
                    (figure in PROCESS_ONLY and client != "process")
                    or (figure in NOT_LOVIA and client == "lovia")
                    or (figure == "pdeathsig_setpriv" and shutil.which("setpriv") is None)
                ):
                    assert value is None
                else:
                    assert isinstance(value, (int, float)), (figure, server, client, value)
                    assert figure in SIGNED or value >= 0, (figure, server, client, value)
            if row["goal"] is not None:
                assert isinstance(row["met"], bool), row
    assert report["machine"]["nproc"] >= 1
    written = page.read_text()
    table = written.split("generated table, begin -->")[1].split("<!-- bench.py")[0]
    assert "| open (spawn, handshake, list), warm [raw] | ms |" in table
    assert table.count("\n| ") == len(report["figures"]) + 1  # the header and a row a figure
    outside = (ROOT / "docs" / "performance.md").read_text().split("<!-- bench.py")
    assert written.split("<!-- bench.py")[0] == outside[0]  # the prose before the table is untouched


# Bound on compiling a copy of both packages (~1 s on an idle 2-core machine).
COMPILE_TIMEOUT = 60


@pytest.mark.timeout(COMPILE_TIMEOUT + 30)
def test_first_open_imports_lovia_mcp_from_cached_bytecode_even_when_python_writes_none(tmp_path: Path) -> None:
    # A copy with no __pycache__, run as a tree is under PYTHONDONTWRITEBYTECODE=1:
    # lovia's modules come compiled from site-packages, so lovia-mcp's must be too.
    shutil.copytree(ROOT / "lovia_mcp", tmp_path / "lovia_mcp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "worker" / "lovia_mcp_worker",
        tmp_path / "worker" / "lovia_mcp_worker",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    sources = list(tmp_path.rglob("*.py"))
    assert sources and not list(tmp_path.rglob("__pycache__"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(tmp_path / "worker"), str(BENCH.parent)])
    proc = subprocess.run(
        [sys.executable, "-P", "-c", "import bench; bench._compile_bytecode()"],
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    missing = [
        str(p.relative_to(tmp_path)) for p in sources if not Path(importlib.util.cache_from_source(str(p))).exists()
    ]
    assert not missing, missing
