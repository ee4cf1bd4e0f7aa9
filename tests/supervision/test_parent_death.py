"""A server's parent-death signal: a server dies with its worker, even after a SIGKILL.

Where no pre-exec hook is needed, util-linux's ``setpriv --pdeathsig KILL``
sets the signal and execs the server; where rlimits or Landlock need the
hook, the hook sets it. Either way the server gets SIGKILL as its
parent-death signal, its argv and environment unchanged and no descriptor
of ours, and a failed exec reads back as the exec's own error. No program of
the project's own is executed from memory (a source check below).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import GONE_WAIT, ISOLATIONS, PY, ROOT, alive_after, raw_args, reap_zombies, run, wait_gone
from lovia_mcp_worker.containment import launch
from lovia_mcp_worker.wire.confinement import Limits as WireLimits

from lovia_mcp import Limits, MCPServerStdio

pytestmark = pytest.mark.linux_only

# What a launched Python reports of itself: its parent-death signal and
# where each of its descriptors above 2 leads.
REPORT = (
    "import ctypes, json, os, sys\n"
    "v = ctypes.c_int(-1)\n"
    "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0)\n"  # PR_GET_PDEATHSIG
    "fds = {}\n"
    "for fd in os.listdir('/proc/self/fd'):\n"
    "    try: fds[fd] = os.readlink('/proc/self/fd/' + fd)\n"
    "    except OSError: pass\n"
    "print(json.dumps({'pdeathsig': v.value, 'fds': fds, 'argv': sys.argv[1:], 'env': os.environ.get('X')}))\n"
)

needs_setpriv = pytest.mark.skipif(launch._SETPRIV is None, reason="no setpriv on this machine")  # noqa: SLF001 - the module's own choice


def _planned(limits: WireLimits, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the worker would launch it under ``limits`` (setpriv, or the pre-exec hook)."""
    planned, preexec = launch._launch_plan(limits, argv)  # noqa: SLF001 - the plan under test
    return subprocess.run(planned, preexec_fn=preexec, env={"X": "y z"}, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("limits", [WireLimits(), WireLimits(max_open_files=256)], ids=["setpriv", "pre-exec"])
def test_a_launched_process_has_its_parent_death_signal_and_its_argv_and_env(limits: WireLimits) -> None:
    out = _planned(limits, [PY, "-c", REPORT, "a b", ""])
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    print(seen)
    assert seen["pdeathsig"] == signal.SIGKILL
    assert seen["argv"] == ["a b", ""] and seen["env"] == "y z"


@needs_setpriv
def test_a_failed_exec_through_setpriv_reads_back_as_the_exec_error(tmp_path: Path) -> None:
    script = tmp_path / "server"
    script.write_text("#!/nonexistent/python3\n")
    script.chmod(0o755)
    for target, code in ((str(tmp_path / "absent"), errno.ENOENT), (str(script), errno.ENOENT)):
        out = _planned(WireLimits(), [target])
        tail = out.stderr.splitlines()
        print(target, out.returncode, tail)
        assert launch.wrapper_exec_error(out.returncode, tail) == os.strerror(code)
    # A server's own exit with the same code and other last words is not setpriv's.
    assert launch.wrapper_exec_error(127, ["usage: server [-h]"]) is None


# A parent (a fresh interpreter, not a subreaper) starts a sleeper as the
# worker would, or plainly, prints its pid and waits to be killed. The
# sleeper says "up" on the same pipe once it runs (setpriv has set the
# signal by then): a parent killed before that is a race no launcher closes.
PARENT = (
    "import subprocess, sys\n"
    "sys.path.insert(0, %r)\n"
    "from lovia_mcp_worker.containment import launch\n"
    "from lovia_mcp_worker.wire.confinement import Limits\n"
    "argv = [sys.executable, '-c', 'import time; print(\"up\", flush=True); time.sleep(120)']\n"
    "if sys.argv[1] == 'plain':\n"
    "    child = subprocess.Popen(argv)\n"
    "else:\n"
    "    limits = Limits() if sys.argv[1] == 'setpriv' else Limits(max_open_files=256)\n"
    "    argv, preexec = launch._launch_plan(limits, argv)\n"
    "    child = subprocess.Popen(argv, preexec_fn=preexec)\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.mark.parametrize("how", ["setpriv", "pre-exec", "plain"])
def test_a_launched_process_dies_with_its_parent_killed_by_sigkill_and_a_plain_one_does_not(how: str) -> None:
    if how == "setpriv" and launch._SETPRIV is None:  # noqa: SLF001
        pytest.skip("no setpriv on this machine")
    worker = str(Path(launch.__file__).parents[2])
    parent = subprocess.Popen(
        [PY, "-c", PARENT % worker, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    child = -1
    try:
        assert parent.stdout is not None
        # With setpriv the pid is setpriv's, which becomes the sleeper by exec.
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "up"
        parent.kill()
        parent.wait(timeout=30)
        # A launched one goes within milliseconds; the plain one is given a second to show it stays.
        alive, took = run(alive_after([child], GONE_WAIT if how != "plain" else 1.0))
        print(f"{how}: the child is {'alive' if alive else 'gone'} {took * 1000:.0f} ms after its parent's SIGKILL")
        assert bool(alive) == (how == "plain")
    finally:
        parent.kill()
        parent.wait(timeout=30)
        if child > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            reap_zombies()
            wait_gone(child)


@pytest.mark.parametrize("limits", [None, Limits(max_open_files=256)], ids=["setpriv", "pre-exec"])
@ISOLATIONS
def test_a_server_opened_by_lovia_mcp_gets_sigkill_as_its_parent_death_signal(
    tmp_path: Path, isolation: str, limits: Limits | None
) -> None:
    report = tmp_path / "report.json"
    server = tmp_path / "server.py"
    # It reports itself to a file (its stdout is the protocol's), then becomes the raw server.
    server.write_text(
        f"import sys\nsys.stdout = open({str(report)!r}, 'w')\n"
        + REPORT
        + f"sys.stdout.close()\nos.execv(sys.executable, [sys.executable, *{raw_args()!r}])\n"
    )

    async def main() -> None:
        config = MCPServerStdio(
            command=PY,
            args=[str(server)],
            name="r",
            isolation=isolation,  # type: ignore[arg-type]
            limits=limits or Limits(),
        )
        async with config.session() as conn:
            assert conn.tools()

    run(main())
    seen = json.loads(report.read_text())
    print(seen)
    assert seen["pdeathsig"] == signal.SIGKILL


@pytest.mark.unit
def test_no_package_module_executes_a_program_from_memory() -> None:
    # Runtime security tools flag an exec from a memfd as fileless execution.
    sources = [*(ROOT / "lovia_mcp").rglob("*.py"), *(ROOT / "worker" / "lovia_mcp_worker").rglob("*.py")]
    found = [
        str(path.relative_to(ROOT))
        for path in sources
        if re.search(r"MFD_EXEC|\\x7fELF|/proc/self/fd/\{", path.read_text())
    ]
    assert found == []
