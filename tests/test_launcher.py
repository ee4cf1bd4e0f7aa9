"""The server's launcher (``lovia_mcp_worker.containment.launcher``): its bytes, and what it does to real processes.

It must give the server its parent-death signal (a server outlives a
SIGKILLed parent without it), hand it none of its own descriptors, pass
argv and environment through unchanged, and report a failed exec as the
exec's error. Its memfd is sealed, and a descriptor reused by another file
is never run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import GONE_WAIT, PY, alive_after, raw_args, reap_zombies, run, wait_gone

from lovia_mcp import MCPServerStdio
from lovia_mcp_worker.containment import launch, launcher

pytestmark = pytest.mark.skipif(not launcher.supported(), reason="the launcher is x86-64 Linux's")

# The listing the module's bytes say they are, for GNU as (FD: 0x12345678).
LISTING = r"""
.globl _start
_start:
  mov $157, %eax
  mov $1, %edi
  mov $9, %esi
  syscall
  mov $3, %eax
  mov $0x12345678, %edi
  syscall
  mov (%rsp), %rcx
  lea 16(%rsp), %rsi
  mov (%rsi), %rdi
  lea 16(%rsp,%rcx,8), %rdx
  mov $59, %eax
  syscall
  neg %eax
  mov %eax, %ebx
  mov $1, %eax
  mov $2, %edi
  lea msg(%rip), %rsi
  mov $(end - msg), %edx
  syscall
  mov %ebx, %edi
  mov $231, %eax
  syscall
msg: .ascii "lovia-mcp launcher: exec failed\n"
end:
"""

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


def _ours() -> tuple[str, int]:
    found = launcher.current()
    assert found is not None, "no launcher on an x86-64 Linux machine"
    return found


def test_the_bytes_are_what_gnu_as_makes_of_the_listing(tmp_path: Path) -> None:
    if shutil.which("as") is None or shutil.which("objcopy") is None:
        pytest.skip("needs GNU as and objcopy")
    (tmp_path / "l.S").write_text(LISTING)
    subprocess.run(["as", "-o", str(tmp_path / "l.o"), str(tmp_path / "l.S")], check=True, timeout=30)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(tmp_path / "l.o"), str(tmp_path / "l.bin")],
                   check=True, timeout=30)
    assembled = (tmp_path / "l.bin").read_bytes()
    ours = launcher.image(0x12345678)
    print(f"code {len(assembled)} bytes, image {len(ours)} bytes")
    assert ours.endswith(assembled)
    assert len(ours) - len(assembled) == 64 + 2 * 56  # the ELF header and two program headers, nothing else


def test_a_launched_process_has_its_parent_death_signal_no_launcher_descriptor_and_its_argv_and_env() -> None:
    path, fd = _ours()
    out = subprocess.run([path, PY, "-c", REPORT, "a b", ""], pass_fds=(fd,), env={"X": "y z"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    print(seen)
    assert seen["pdeathsig"] == signal.SIGKILL
    assert not any("lovia-mcp-launcher" in target for target in seen["fds"].values())
    assert seen["argv"] == ["a b", ""] and seen["env"] == "y z"


def test_a_failed_exec_exits_with_its_errno_and_reads_back_as_the_exec_error(tmp_path: Path) -> None:
    path, fd = _ours()
    script = tmp_path / "server"
    script.write_text("#!/nonexistent/python3\n")
    script.chmod(0o755)
    for target, code in ((str(tmp_path / "absent"), errno.ENOENT), (str(script), errno.ENOENT),
                         (str(tmp_path), errno.EACCES)):
        out = subprocess.run([path, target], pass_fds=(fd,), capture_output=True, text=True, timeout=30)
        assert out.returncode == code, (target, out)
        tail = out.stderr.splitlines()
        assert launcher.exec_error(out.returncode, tail) == os.strerror(code)
        assert launch.wrapper_exec_error(out.returncode, tail) == os.strerror(code)
    # A server's own exit with the same code and other last words is not a launcher's.
    assert launcher.exec_error(2, ["usage: server [-h]"]) is None


# A parent (a fresh interpreter, not a subreaper) starts a sleeper through
# the launcher, or not, prints its pid and waits to be killed.
PARENT = (
    "import os, subprocess, sys, time\n"
    "sys.path.insert(0, %r)\n"
    "from lovia_mcp_worker.containment import launcher\n"
    "argv = [sys.executable, '-c', 'import time; time.sleep(120)']\n"
    "if sys.argv[1] == 'launcher':\n"
    "    path, fd = launcher.current()\n"
    "    child = subprocess.Popen([path, *argv], pass_fds=(fd,))\n"
    "else:\n"
    "    child = subprocess.Popen(argv)\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.mark.parametrize("how", ["launcher", "plain"])
def test_a_launched_process_dies_with_its_parent_killed_by_sigkill_and_a_plain_one_does_not(how: str) -> None:
    worker = str(Path(launcher.__file__).parents[2])
    parent = subprocess.Popen([PY, "-c", PARENT % worker, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = -1
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait(timeout=30)
        # The launched one goes within milliseconds; the plain one is given a second to show it stays.
        alive, took = run(alive_after([child], GONE_WAIT if how == "launcher" else 1.0))
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


def test_the_memfd_is_sealed_against_writes() -> None:
    _, fd = _ours()
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"\x90", 200)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)


def test_a_descriptor_closed_and_reused_for_another_file_is_never_run(tmp_path: Path) -> None:
    path, fd = _ours()
    opened = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT, 0o755)
    other = os.dup2(opened, fd)  # the launcher's descriptor closed, another file at its number
    os.close(opened)
    try:
        path2, fd2 = _ours()
        assert fd2 != other and path2 != path
        assert os.readlink(f"/proc/self/fd/{fd2}").startswith("/memfd:lovia-mcp-launcher")
        assert os.readlink(f"/proc/self/fd/{other}") == str(tmp_path / "other")
    finally:
        os.close(other)


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_a_server_opened_by_lovia_mcp_is_launched_by_it(tmp_path: Path, isolation: str) -> None:
    report = tmp_path / "report.json"
    server = tmp_path / "server.py"
    # It reports itself to a file (its stdout is the protocol's), then becomes the raw server.
    server.write_text(
        f"import sys\nsys.stdout = open({str(report)!r}, 'w')\n" + REPORT
        + f"sys.stdout.close()\nos.execv(sys.executable, [sys.executable, *{raw_args()!r}])\n"
    )

    async def main() -> None:
        config = MCPServerStdio(command=PY, args=[str(server)], name="r", isolation=isolation)  # type: ignore[arg-type]
        async with config.session() as conn:
            assert conn.tools()

    run(main())
    seen = json.loads(report.read_text())
    print(seen)
    assert seen["pdeathsig"] == signal.SIGKILL
    assert not any("lovia-mcp-launcher" in target for target in seen["fds"].values())
