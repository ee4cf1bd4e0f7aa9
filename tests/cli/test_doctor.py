"""``lovia-mcp doctor``: the kernel's facts, and the escape probes run inside each backend's real box.

Real runs of the command (``python -m lovia_mcp doctor`` in a subprocess)
on this machine, and on a machine that refuses user namespaces, simulated
as the sandbox tests do (``tests/sandbox/test_backends.py``): a seccomp
filter on the agent process, inherited by its forkserver, workers and
servers, refuses ``unshare(CLONE_NEWUSER)``. Then the check's own failure:
a backend whose plan is weakened on purpose, and one that boxes nothing,
must make the report fail, naming each probe that escaped.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import msgspec
import pytest
from helpers import CLI_TIMEOUT, PY, RAW_SERVER, ROOT, nobody_python
from lovia_mcp_worker.sandbox import bwrap, landlock, registry
from lovia_mcp_worker.sandbox.backend import LaunchPlan
from lovia_mcp_worker.wire.messages import ServerSpec

from lovia_mcp import Sandbox
from lovia_mcp.cli.doctor import EXIT_HELD, EXIT_NOT_HELD, render, status
from lovia_mcp.doctor.report import diagnose
from lovia_mcp.doctor.suite import DESCRIPTIONS

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
    pytest.mark.skipif(landlock.ABI < landlock.NETWORK_ABI, reason="needs Landlock ABI 4 (a closed network)"),
]

# Bound on one doctor run: two boxes, a Python start in each, eight probes;
# about a second unloaded, generous for a loaded 2-core machine.
DOCTOR_WAIT = 90.0
PROBES = set(DESCRIPTIONS)

# The simulated machine: Docker's default profile refuses new user namespaces
# to the agent and everything it starts; then the command runs as usual.
REFUSED = """
import sys
from lovia_mcp_worker.sandbox import seccomp
seccomp.install(seccomp.deny_new_user_namespaces())
from lovia_mcp.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """The doctor's planted targets go here: outside /tmp, as they would in a user's ~/.cache."""
    where = ROOT / ".cache" / f"doctor-{os.getpid()}-{tmp_path.name}"
    where.mkdir(parents=True)
    yield where
    leftovers = [p for p in (where / "lovia-mcp").glob("doctor-*")] if (where / "lovia-mcp").exists() else []
    shutil.rmtree(where, ignore_errors=True)
    assert leftovers == [], f"the doctor left its targets behind: {leftovers}"


def _doctor(cache: Path, *args: str, refused: bool = False) -> tuple[int, dict[str, object], str, str]:
    """Run the command; its status, its --json report (else {}), its stdout and stderr."""
    argv = [PY, "-c", REFUSED] if refused else [PY, "-m", "lovia_mcp"]
    proc = subprocess.run(
        [*argv, "doctor", *args],
        capture_output=True,
        text=True,
        timeout=DOCTOR_WAIT,
        cwd=ROOT,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if "--json" in args else {}, proc.stdout, proc.stderr


def _config(tmp_path: Path, backend: str = "auto") -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "boxed": {
                        "command": PY,
                        "args": [RAW_SERVER],
                        "sandbox": {"backend": backend},
                        "limits": {"memory_mb": 256, "cpu_seconds": 30},
                    },
                    "bare": {"command": PY, "args": [RAW_SERVER]},
                    "remote": {"url": "http://127.0.0.1:9/mcp"},
                }
            }
        )
    )
    return path


def _backends(report: dict[str, object]) -> dict[str, dict[str, object]]:
    backends = report["backends"]
    assert isinstance(backends, dict)
    return backends


@pytest.mark.skipif(bwrap.BWRAP is None, reason="bubblewrap is not available")
def test_doctor_json_reports_both_backends_holding_every_probe_and_each_servers_plan(
    cache: Path, tmp_path: Path
) -> None:
    if bwrap.userns_refused() is not None:
        pytest.skip(f"this machine refuses user namespaces: {bwrap.userns_refused()}")
    code, report, _, stderr = _doctor(cache, "--json", "--config", str(_config(tmp_path)))
    backends = _backends(report)
    assert set(backends) == {"bwrap", "landlock"}
    for name, backend in backends.items():
        assert backend["available"] is True and backend["reason"] is None, (name, backend)
        assert backend["probes"] == {probe: "held" for probe in PROBES}, (name, backend)
    kernel = report["kernel"]
    assert isinstance(kernel, dict)
    assert kernel["user_namespaces"]["allowed"] is True and kernel["landlock"]["abi"] == landlock.ABI
    assert kernel["bwrap"]["path"] == bwrap.BWRAP
    cgroup = report["cgroup"]
    assert isinstance(cgroup, dict) and set(cgroup["limits"]) >= {"memory_mb", "max_processes", "cpu_seconds"}
    servers = report["servers"]
    assert isinstance(servers, dict)
    assert servers["boxed"]["sandbox"] == "bwrap" and servers["boxed"]["ok"] is True
    assert servers["boxed"]["limits"] == {
        "memory_mb": cgroup["limits"]["memory_mb"],
        "cpu_seconds": cgroup["limits"]["cpu_seconds"],
    }
    assert servers["bare"]["sandbox"] is None and servers["remote"]["transport"] == "http"
    assert code == EXIT_HELD and report["ok"] is True, stderr


def test_where_user_namespaces_are_refused_doctor_reports_bwrap_unavailable_with_the_reason_and_landlock_holding(
    cache: Path, tmp_path: Path
) -> None:
    code, report, _, stderr = _doctor(cache, "--json", refused=True)
    backends = _backends(report)
    bw, ll = backends["bwrap"], backends["landlock"]
    assert bw["available"] is False and "user namespaces are refused" in str(bw["reason"]), bw
    assert set(bw["probes"].values()) == {"skipped"}  # type: ignore[attr-defined]
    assert ll["available"] is True and ll["probes"] == {probe: "held" for probe in PROBES}, ll
    userns = report["kernel"]["user_namespaces"]  # type: ignore[index]
    assert userns["allowed"] is False and any("seccomp filter" in c for c in userns["causes"]), userns
    assert code == EXIT_HELD, stderr

    # A server that insists on bwrap cannot start here: the command fails, naming it.
    code, report, _, stderr = _doctor(cache, "--json", "--config", str(_config(tmp_path, "bwrap")), refused=True)
    servers = report["servers"]
    assert isinstance(servers, dict)
    assert servers["boxed"]["ok"] is False and "user namespaces" in servers["boxed"]["error"]
    assert code == EXIT_NOT_HELD
    assert "server 'boxed': its sandbox cannot start here" in stderr


def test_doctor_text_says_what_refuses_user_namespaces_and_how_each_probe_ended(cache: Path) -> None:
    code, _, text, stderr = _doctor(cache, refused=True)
    assert "user namespaces  refused: user namespaces are refused here" in text
    assert "because of: a seccomp filter on this process" in text
    assert "backend bwrap: not available: user namespaces are refused" in text
    assert "backend landlock: available, held every probe" in text
    for probe, tries in DESCRIPTIONS.items():
        assert f"held     {probe:<13}  {tries}" in text, probe
    assert text.rstrip().endswith("ok: every available backend held every probe")
    assert code == EXIT_HELD and stderr == "", stderr


# --- the check can fail: boxes that leak -------------------------------------


class OpenBackend:
    """A backend that boxes nothing: the server runs as given (what every probe must catch)."""

    name = "open"
    guarantees = {"filesystem": "none (a test backend)"}

    def unavailable(self, box: Sandbox) -> str | None:
        return None

    def hint(self) -> str:
        return "Register the open backend."

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        return LaunchPlan(self.name, argv)

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return None

    def facts(self) -> dict[str, dict[str, object]]:
        return {"open_box": {"walls": 0}}

    def describe(self, facts: Mapping[str, object]) -> list[tuple[str, str]]:
        walls = facts["open_box"]
        assert isinstance(walls, dict)
        return [("open box", f"{walls['walls']} walls")]

    def cleanup(self) -> None:
        pass


class NetworkLeak:
    """The Landlock backend with one deliberate weakness: it plans every box as if network=True."""

    name = "leaky"
    guarantees = {"network": "the host's (a test backend)"}

    def unavailable(self, box: Sandbox) -> str | None:
        return landlock.LandlockBackend().unavailable(box)

    def hint(self) -> str:
        return "Register the leaky backend."

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        weak = msgspec.structs.replace(box, network=True)
        plan = await landlock.LandlockBackend().plan(spec, weak, argv, env)
        plan.backend = self.name
        return plan

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return None

    def facts(self) -> dict[str, dict[str, object]]:
        return {}

    def describe(self, facts: Mapping[str, object]) -> list[tuple[str, str]]:
        return []

    def cleanup(self) -> None:
        pass


@pytest.fixture
def leaky() -> Iterator[None]:
    for backend in (OpenBackend(), NetworkLeak()):
        registry.register(backend)
    try:
        yield
    finally:
        for name in ("open", "leaky"):
            registry.unregister(name)


@pytest.mark.skipif(os.geteuid() != 0, reason="every escape unboxed needs root's means (mount, reading the secret)")
def test_a_backend_that_boxes_nothing_lets_every_probe_escape_and_the_command_fails(
    leaky: None, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    # In the agent's process: the registered backends exist only here, not in a forkserver's.
    report = asyncio.run(asyncio.wait_for(diagnose(backends=["open"], isolation="none"), DOCTOR_WAIT))
    text = render(report)
    print(text, report.failures())
    backend = report.backends["open"]
    assert {p: r.outcome for p, r in backend.probes.items()} == {probe: "escaped" for probe in PROBES}
    # Its kernel facts are its own, and worded by it: the doctor names no backend.
    assert report.kernel["open_box"] == {"walls": 0} and "\n  open box         0 walls\n" in text, text
    assert "user_namespaces" not in report.kernel and "user namespaces" not in text
    assert not backend.held and "DID NOT HOLD" in text
    assert len(report.failures()) == len(PROBES) and all("escaped the box" in f for f in report.failures())
    assert status(report) == EXIT_NOT_HELD


def test_a_weakened_landlock_plan_lets_the_loopback_probe_escape_and_only_that_one(
    leaky: None, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    report = asyncio.run(asyncio.wait_for(diagnose(backends=["leaky"], isolation="none"), DOCTOR_WAIT))
    print(render(report))
    outcomes = {p: r.outcome for p, r in report.backends["leaky"].probes.items()}
    assert outcomes == {probe: "escaped" if probe == "loopback" else "held" for probe in PROBES}, outcomes
    assert report.failures() == [
        f"backend leaky: probe loopback escaped the box ({report.backends['leaky'].probes['loopback'].reason})"
    ]
    assert status(report) == EXIT_NOT_HELD


def test_doctor_with_an_unreadable_config_exits_2_with_a_hint(cache: Path, tmp_path: Path) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text("{not json")
    proc = subprocess.run(
        [PY, "-m", "lovia_mcp", "doctor", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        cwd=ROOT,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )
    print(proc.stderr)
    assert proc.returncode == 2 and "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


NOBODY = 65534


@pytest.mark.skipif(bwrap.BWRAP is None, reason="bubblewrap is not available")
def test_doctor_as_an_ordinary_user_reports_both_backends_holding(cache: Path) -> None:
    """The command as nobody: what a deployment without root gets (the probes then try nobody's means)."""
    python, site = nobody_python()
    home = Path(os.path.realpath(cache)) / "nobody"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "worker"), str(site)]),
    }
    proc = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-m", "lovia_mcp"]
        + ["doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=DOCTOR_WAIT,
        env=env,
        cwd=home,
    )
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    report = json.loads(proc.stdout)
    assert report["kernel"]["euid"] == NOBODY
    for name, backend in _backends(report).items():
        if name == "bwrap" and not backend["available"]:
            continue  # this machine refuses user namespaces to ordinary users: said, not a failure
        assert backend["probes"] == {probe: "held" for probe in PROBES}, (name, backend)
    assert proc.returncode == EXIT_HELD, proc.stderr
