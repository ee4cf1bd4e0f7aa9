"""The seccomp filter, in real processes: each refused call is refused, ordinary work still runs.

A child Python process tries each call in a forked grandchild of its own (so a
call that succeeds, unshare say, changes nothing for the next) and reports the
errno, with the filter installed or not. Unfiltered, the same calls succeed or
fail for another reason (bad arguments, chosen so that nothing happens): the
filter, not the machine, is what refuses them.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import platform
import re
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import ESCAPE_SERVER, EscapePlace, as_nobody, run
from lovia_mcp_worker.sandbox import bwrap, landlock, seccomp

from lovia_mcp import Sandbox

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"),
    reason="seccomp filters: Linux on x86_64 or aarch64",
)

# Bound on one child run: ~60 forked calls and an interpreter start, on a loaded 2-core CI.
CHILD_TIMEOUT = 30.0

# The child: argv[1] is "none", "network", "offline", "offline_unix" or "offline_nolisten" (which
# filter to install; the last is the Landlock backend's with the network closed).
CHILD = r"""
import ctypes, errno, json, mmap, os, platform, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
mode = sys.argv[1]
calls = json.loads(sys.argv[2])
if mode != "none":
    from lovia_mcp_worker.sandbox import seccomp
    seccomp.install(seccomp.program(network=mode == "network", allow_unix=mode == "offline_unix",
                                    allow_listen=mode != "offline_nolisten"))

def int80_getpid():
    # i386 getpid (20) through int 0x80, from machine code: the foreign-ABI path.
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
    m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    ret = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
    return -ret if ret < 0 else 0

def do(name, nr, args):
    if name == "int80_getpid":
        return int80_getpid()
    ret = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return ctypes.get_errno() if ret == -1 else 0

out = {}
for name, nr, args in calls:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, str(do(name, nr, args)).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    out[name] = int(data) if data else -1
print(json.dumps(out))
"""

MACHINE = platform.machine()
NR = seccomp.SYSCALLS[MACHINE]
HIGH = 1 << 32  # high bits the kernel drops from an int argument
ONE = 1  # an address that is never mapped: EFAULT where it is read
# A flag combination clone() rejects with EINVAL before doing anything (CLONE_FS with a new user namespace).
CLONE_FS = 0x200
AT_FDCWD = -100
SETUID, SETGID = 0o4000, 0o2000
O_TMPFILE = os.O_TMPFILE if hasattr(os, "O_TMPFILE") else 0o20200000
S_IFREG, S_IFIFO, S_IFCHR, S_IFSOCK = 0o100000, 0o010000, 0o020000, 0o140000
RENAME_NOREPLACE = 1
NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT = 4, 9, 15

# name -> (system call, arguments, errno under the filter). Arguments are
# harmless unfiltered: invalid pointers or descriptors, or a no-op.
CALLS: dict[str, tuple[str, list[int], int]] = {
    "mount": ("mount", [0, 0, 0, 0, 0], errno.EPERM),
    "umount2": ("umount2", [0, 0], errno.EPERM),
    "pivot_root": ("pivot_root", [0, 0], errno.EPERM),
    "setns": ("setns", [-1, 0], errno.EPERM),
    "unshare_user": ("unshare", [seccomp.CLONE_NEWUSER], errno.EPERM),
    "unshare_net": ("unshare", [0x40000000], errno.EPERM),
    "chroot": ("chroot", [ONE], errno.EPERM),
    "open_tree": ("open_tree", [-1, 0, 0], errno.EPERM),
    "move_mount": ("move_mount", [-1, 0, -1, 0, 0], errno.EPERM),
    "fsopen": ("fsopen", [0, 0], errno.EPERM),
    "fsmount": ("fsmount", [-1, 0, 0], errno.EPERM),
    "fsconfig": ("fsconfig", [-1, 0xFF, 0, 0, 0], errno.EPERM),  # an unknown command
    "fspick": ("fspick", [-1, ONE, 0xFFFF], errno.EPERM),
    "mount_setattr": ("mount_setattr", [-1, 0, 1, 0, 0], errno.EPERM),  # an unknown flag
    "clone_newuser": ("clone", [seccomp.CLONE_NEWUSER | CLONE_FS, 0, 0, 0, 0], errno.EPERM),
    "clone_newns": ("clone", [0x00020000 | CLONE_FS, 0, 0, 0, 0], errno.EPERM),
    "clone3": ("clone3", [0, 0], errno.ENOSYS),
    "keyctl_read_session": ("keyctl", [0, -3, 0], errno.EPERM),  # KEYCTL_GET_KEYRING_ID
    "add_key": ("add_key", [0, 0, 0, 0, 0], errno.EPERM),
    "request_key": ("request_key", [0, 0, 0, 0], errno.EPERM),
    "ptrace": ("ptrace", [0x4206, 0, 0, 0], errno.EPERM),  # PTRACE_SEIZE of pid 0
    "process_vm_readv": ("process_vm_readv", [0, 0, 0, 0, 0, 0], errno.EPERM),
    "process_vm_writev": ("process_vm_writev", [0, 0, 0, 0, 0, 1], errno.EPERM),  # flags must be 0
    "kcmp": ("kcmp", [0, 0, 0, 0, 0], errno.EPERM),
    "pidfd_getfd": ("pidfd_getfd", [-1, 0, 0], errno.EPERM),
    "io_uring_setup": ("io_uring_setup", [1, 0], errno.EPERM),
    "io_uring_enter": ("io_uring_enter", [-1, 0, 0, 0, 0, 0], errno.EPERM),
    "io_uring_register": ("io_uring_register", [-1, 0, 0, 0], errno.EPERM),
    # FAN_REPORT_FID, which an ordinary user may ask for, with event flags the kernel rejects.
    "fanotify_init": ("fanotify_init", [0x200, 0xFFFFFFFF], errno.EPERM),
    "bpf": ("bpf", [0xFFFF, 0, 0], errno.EPERM),
    "perf_event_open": ("perf_event_open", [0, 0, -1, -1, 0], errno.EPERM),
    "userfaultfd": ("userfaultfd", [0xFFFF], errno.EPERM),
    "init_module": ("init_module", [0, 0, 0], errno.EPERM),
    "finit_module": ("finit_module", [-1, 0, 0], errno.EPERM),
    "delete_module": ("delete_module", [0, 0], errno.EPERM),
    "kexec_load": ("kexec_load", [0, 0, 0, 0xFFFF0000], errno.EPERM),
    "kexec_file_load": ("kexec_file_load", [-1, -1, 0, 0, 0xFFFF0000], errno.EPERM),
    "open_by_handle_at": ("open_by_handle_at", [-1, 0, 0], errno.EPERM),
    "lookup_dcookie": ("lookup_dcookie", [0, 0, 0], errno.EPERM),
    "quotactl": ("quotactl", [0xFF, 0, 0, 0], errno.EPERM),  # quota type 255: there are 3
    "quotactl_fd": ("quotactl_fd", [-1, 0xFF, 0, 0], errno.EPERM),
    "reboot": ("reboot", [0, 0, 0, 0], errno.EPERM),
    # Invalid flags: refused before the capability check, so not EPERM unfiltered even without one.
    "swapon": ("swapon", [0, 0x100000], errno.EPERM),
    "swapoff": ("swapoff", [0], errno.EPERM),
    "acct": ("acct", [ONE], errno.EPERM),
    "clock_settime": ("clock_settime", [0, 0], errno.EPERM),
    "clock_adjtime": ("clock_adjtime", [0, ONE], errno.EPERM),
    "adjtimex": ("adjtimex", [ONE], errno.EPERM),
    "settimeofday": ("settimeofday", [ONE, 0], errno.EPERM),
    "syslog": ("syslog", [10, 0, 0], errno.EPERM),  # SYSLOG_ACTION_SIZE_BUFFER: reads a number
    "ioctl_tiocsti": ("ioctl", [-1, seccomp.TIOCSTI, 0], errno.EPERM),
    "ioctl_tiocsti_high_bits": ("ioctl", [-1, seccomp.TIOCSTI | HIGH, 0], errno.EPERM),
    "ioctl_tioclinux": ("ioctl", [-1, seccomp.TIOCLINUX, 0], errno.EPERM),
    "socket_unix": ("socket", [socket.AF_UNIX, socket.SOCK_STREAM, 0], errno.EPERM),
    "socket_unix_high_bits": ("socket", [socket.AF_UNIX | HIGH, socket.SOCK_DGRAM, 0], errno.EPERM),
    # A datagram pair can sendto() any datagram socket on the host; AF_UNIX makes SOCK_RAW one too.
    "socketpair_dgram": ("socketpair", [socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, 0, ONE], errno.EPERM),
    "socketpair_raw": ("socketpair", [socket.AF_UNIX, socket.SOCK_RAW, 0, ONE], errno.EPERM),
    # A connected seqpacket socket still sendto()s any datagram socket.
    "socketpair_seqpacket": ("socketpair", [socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, ONE], errno.EPERM),
    # Files that outlive the box with more rights than it had (the path is never mapped: EFAULT unfiltered).
    "fchmod_setuid": ("fchmod", [-1, 0o4755], errno.EPERM),
    "fchmodat_setgid": ("fchmodat", [AT_FDCWD, ONE, SETGID | 0o755], errno.EPERM),
    "fchmodat2_setuid": ("fchmodat2", [AT_FDCWD, ONE, 0o6755, 0], errno.EPERM),
    "openat_creat_setuid": ("openat", [AT_FDCWD, ONE, os.O_CREAT | os.O_WRONLY, 0o4755], errno.EPERM),
    "openat_tmpfile_setgid": ("openat", [AT_FDCWD, ONE, O_TMPFILE | os.O_RDWR, 0o2600], errno.EPERM),
    "mkdirat_setgid": ("mkdirat", [AT_FDCWD, ONE, 0o2777], errno.EPERM),
    "mknodat_setuid_regular": ("mknodat", [AT_FDCWD, ONE, S_IFREG | 0o4755, 0], errno.EPERM),
    "mknodat_fifo": ("mknodat", [AT_FDCWD, ONE, S_IFIFO | 0o644, 0], errno.EPERM),
    "mknodat_char_device": ("mknodat", [AT_FDCWD, ONE, S_IFCHR | 0o644, 0], errno.EPERM),  # a whiteout at 0:0
    "mknodat_socket": ("mknodat", [AT_FDCWD, ONE, S_IFSOCK | 0o644, 0], errno.EPERM),
    "renameat2_whiteout": ("renameat2", [AT_FDCWD, ONE, AT_FDCWD, ONE, seccomp.RENAME_WHITEOUT], errno.EPERM),
    "openat2": ("openat2", [AT_FDCWD, ONE, ONE, 24], errno.ENOSYS),  # its mode is in memory
}
if MACHINE == "x86_64":  # aarch64 has only the *at calls
    CALLS.update(
        {
            "chmod_setuid": ("chmod", [ONE, 0o4755], errno.EPERM),
            "open_creat_setgid": ("open", [ONE, os.O_CREAT | os.O_WRONLY, 0o2644], errno.EPERM),
            "creat_setuid": ("creat", [ONE, 0o4755], errno.EPERM),
            "mkdir_setuid": ("mkdir", [ONE, 0o4777], errno.EPERM),
            "mknod_fifo": ("mknod", [ONE, S_IFIFO | 0o644, 0], errno.EPERM),
            "mknod_setgid_regular": ("mknod", [ONE, 0o2755, 0], errno.EPERM),
            "uselib": ("uselib", [ONE], errno.EPERM),
            "iopl": ("iopl", [4], errno.EPERM),  # levels are 0 to 3
            "ioperm": ("ioperm", [0, 0, 1], errno.EPERM),  # an empty range
        }
    )
# Every call the filter refuses whatever its arguments: this test's own list, not the code's
# (seccomp.DENIED), so that a name dropped there fails here. Each has a probe in CALLS, run
# with the filter alone above and inside each backend's box below.
DENY_LIST: tuple[str, ...] = (
    # namespaces and mounts
    "mount",
    "umount2",
    "pivot_root",
    "setns",
    "unshare",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # the keyring
    "keyctl",
    "add_key",
    "request_key",
    # other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    # the kernel's attack surface
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "fanotify_init",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "open_by_handle_at",
    "lookup_dcookie",
    "uselib",
    "quotactl",
    "quotactl_fd",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "syslog",
    # the clock, and I/O ports (x86_64 only)
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
)
# The probe of each listed call that this machine has (aarch64 has no uselib, iopl, ioperm).
# Reversed: the first probe of a call is the one kept.
PROBE_OF: dict[str, str] = {sc: label for label, (sc, _, _) in reversed(CALLS.items()) if sc in DENY_LIST}
# Refused only with the network off.
OFFLINE_CALLS: dict[str, tuple[str, list[int], int]] = {
    "socket_udp": ("socket", [socket.AF_INET, socket.SOCK_DGRAM, 0], errno.EPERM),
    "socket_udp6": ("socket", [socket.AF_INET6, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, 0], errno.EPERM),
    "socket_raw": ("socket", [socket.AF_INET, socket.SOCK_RAW, 1], errno.EPERM),
    "socket_sctp": ("socket", [socket.AF_INET, socket.SOCK_STREAM, 132], errno.EPERM),
    "socket_packet": ("socket", [17, socket.SOCK_RAW, 0], errno.EPERM),  # AF_PACKET
    "socket_vsock": ("socket", [40, socket.SOCK_STREAM, 0], errno.EPERM),  # AF_VSOCK
    # Netlink is for listing interfaces (NETLINK_ROUTE): sock_diag lists every TCP socket of the namespace.
    "socket_netlink_sock_diag": ("socket", [socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG], errno.EPERM),
    "socket_netlink_audit": (
        "socket",
        [socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_AUDIT],
        errno.EPERM,
    ),
    "socket_netlink_uevent": ("socket", [socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT], errno.EPERM),
}
# Refused only by the Landlock backend's filter with the network closed: a listen() on a socket never
# bound binds it to every interface, which Landlock's bind rule does not see.
NOLISTEN_CALLS: dict[str, tuple[str, list[int], int]] = {
    "listen": ("listen", [-1, 0], errno.EPERM),
}
# Allowed in every mode: ordinary calls (these must not fail with EPERM).
ALLOWED: dict[str, tuple[str, list[int]]] = {
    "socket_tcp": ("socket", [socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, 0]),
    "socket_tcp6": ("socket", [socket.AF_INET6, socket.SOCK_STREAM, 6]),
    "socket_netlink": ("socket", [socket.AF_NETLINK, socket.SOCK_RAW, 0]),
    "ioctl_fionread": ("ioctl", [-1, 0x541B, 0]),  # EBADF, not EPERM
    "getpid": ("getpid", []),
    "socketpair_stream": ("socketpair", [socket.AF_UNIX, socket.SOCK_STREAM, 0, ONE]),  # EFAULT, not EPERM
    # The mode counts only when open creates; plain modes and the sticky bit pass; a regular mknod passes.
    "openat_read_setuid_mode": ("openat", [AT_FDCWD, ONE, os.O_RDONLY, 0o4755]),
    "openat_creat_plain": ("openat", [AT_FDCWD, ONE, os.O_CREAT | os.O_WRONLY, 0o644]),
    "fchmodat_sticky": ("fchmodat", [AT_FDCWD, ONE, 0o1777]),
    "fchmod_plain": ("fchmod", [-1, 0o755]),
    "mkdirat_plain": ("mkdirat", [AT_FDCWD, ONE, 0o777]),
    "mknodat_regular": ("mknodat", [AT_FDCWD, ONE, S_IFREG | 0o644, 0]),
    "mknodat_no_type": ("mknodat", [AT_FDCWD, ONE, 0o644, 0]),
    "renameat2_noreplace": ("renameat2", [AT_FDCWD, ONE, AT_FDCWD, ONE, RENAME_NOREPLACE]),
    "listen": ("listen", [-1, 0]),  # EBADF; refused only by the no-listen filter
}


def _nr(name: str) -> int:
    if name == "getpid":
        return {"x86_64": 39, "aarch64": 172}[MACHINE]
    return NR[name]


def _run(mode: str, calls: dict[str, tuple[str, list[int]]]) -> dict[str, int]:
    payload = [[name, _nr(sc), args] for name, (sc, args) in calls.items()]
    if MACHINE == "x86_64":
        payload.append(["int80_getpid", 0, []])
        payload.append(["x32_getpid", 0x40000000 | 39, []])
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, json.dumps(payload)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, int] = json.loads(proc.stdout)
    return result


def _denied_calls(network: bool) -> dict[str, tuple[str, list[int]]]:
    table = dict(CALLS) if network else {**CALLS, **OFFLINE_CALLS}
    return {name: (sc, args) for name, (sc, args, _) in table.items()}


@pytest.mark.unit
def test_the_code_denies_every_call_this_test_lists() -> None:
    dropped = sorted(set(DENY_LIST) - set(seccomp.DENIED))
    assert not dropped, f"on this test's deny list but no longer in seccomp.DENIED: {dropped}"


@pytest.mark.unit
def test_every_call_the_code_denies_is_listed_and_probed_here() -> None:
    unlisted = sorted(set(seccomp.DENIED) - set(DENY_LIST))
    assert not unlisted, f"denied by seccomp.DENIED but not on DENY_LIST (add it, and a probe to CALLS): {unlisted}"
    unprobed = sorted(name for name in DENY_LIST if name in NR and name not in PROBE_OF)
    assert not unprobed, f"no probe in CALLS for {unprobed}"


MODES = ("none", "network", "offline", "offline_unix", "offline_nolisten")


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, int]]:
    every = {**_denied_calls(False), **{n: v for n, v in ALLOWED.items()}}
    return {mode: _run(mode, every) for mode in MODES}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_filter_refuses_the_call_in_every_network_mode(results: dict[str, dict[str, int]], name: str) -> None:
    expected = CALLS[name][2]
    print(name, {mode: errno.errorcode.get(r[name], r[name]) for mode, r in results.items()})
    assert results["network"][name] == expected
    assert results["offline"][name] == expected
    assert results["offline_nolisten"][name] == expected


@pytest.mark.parametrize("name", sorted(OFFLINE_CALLS) + sorted(NOLISTEN_CALLS))
def test_the_landlock_filter_without_network_also_refuses_listen(results: dict[str, dict[str, int]], name: str) -> None:
    expected = {**OFFLINE_CALLS, **NOLISTEN_CALLS}[name][2]
    print(name, {mode: errno.errorcode.get(r[name], r[name]) for mode, r in results.items()})
    assert results["offline_nolisten"][name] == expected
    assert results["none"][name] != expected, f"{name}: unfiltered, the machine already says {expected}"


@pytest.mark.parametrize("name", sorted(CALLS) + sorted(OFFLINE_CALLS))
def test_the_bridges_filter_allows_unix_sockets_and_refuses_the_rest(
    results: dict[str, dict[str, int]], name: str
) -> None:
    # allow_unix: bwrap's init and the network bridge, which must reach the proxy's socket.
    if name.startswith("socket_unix"):
        assert results["offline_unix"][name] == results["none"][name] == 0
    else:
        assert results["offline_unix"][name] == {**CALLS, **OFFLINE_CALLS}[name][2]


@pytest.mark.parametrize("name", sorted(CALLS) + sorted(OFFLINE_CALLS))
def test_without_the_filter_the_call_is_not_refused_that_way(results: dict[str, dict[str, int]], name: str) -> None:
    """What makes the tests above mean something: the machine itself answers otherwise."""
    expected = {**CALLS, **OFFLINE_CALLS}[name][2]
    assert results["none"][name] != expected, f"{name}: unfiltered, the machine already says {expected}"


@pytest.mark.parametrize("name", sorted(OFFLINE_CALLS))
def test_network_off_refuses_udp_raw_and_other_families_but_network_on_allows_them(
    results: dict[str, dict[str, int]], name: str
) -> None:
    assert results["offline"][name] == errno.EPERM
    assert results["network"][name] == results["none"][name]


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_ordinary_calls_pass_the_filter_unchanged(results: dict[str, dict[str, int]], name: str) -> None:
    print(name, {mode: errno.errorcode.get(r[name], r[name]) for mode, r in results.items()})
    for mode in ("network", "offline", "offline_unix") + (() if name == "listen" else ("offline_nolisten",)):
        assert results[mode][name] == results["none"][name]


@pytest.mark.skipif(MACHINE != "x86_64", reason="foreign ABIs: x86_64's i386 and x32")
def test_foreign_abi_system_calls_get_enosys(results: dict[str, dict[str, int]]) -> None:
    print({mode: (r["int80_getpid"], r["x32_getpid"]) for mode, r in results.items()})
    for mode in ("network", "offline", "offline_nolisten"):
        assert results[mode]["int80_getpid"] == errno.ENOSYS
        assert results[mode]["x32_getpid"] == errno.ENOSYS


WORK = r"""
import asyncio, os, socket, subprocess, sys, threading
from lovia_mcp_worker.sandbox import seccomp
seccomp.install(seccomp.program(network=False))
listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
def serve():
    conn, _ = listener.accept()
    conn.sendall(conn.recv(10).upper())
    conn.close()
t = threading.Thread(target=serve)
t.start()
with socket.create_connection(("127.0.0.1", port)) as c:
    c.sendall(b"tcp")
    assert c.recv(10) == b"TCP"
t.join()
r, w = os.pipe(); os.write(w, b"pipe"); assert os.read(r, 4) == b"pipe"
import tempfile
with tempfile.TemporaryDirectory() as d:  # files made the ordinary way: open, chmod, mkdir, O_TMPFILE
    path = os.path.join(d, "f")
    with open(path, "w") as f:
        f.write("x")
    os.chmod(path, 0o755)
    os.mkdir(path + ".d", 0o700)
    os.close(os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600))
a, b = socket.socketpair(); a.sendall(b"pair"); assert b.recv(4) == b"pair"
assert subprocess.run([sys.executable, "-c", "print(6*7)"], capture_output=True, text=True).stdout == "42\n"
async def main():
    p = await asyncio.create_subprocess_exec(sys.executable, "-c", "import sys; print(sys.stdin.read())",
                                             stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate(b"asyncio")
    assert out == b"asyncio\n", out
asyncio.run(main())
print("all ok")
"""

NODE = r"""
const { execFileSync, spawn } = require("child_process");
const net = require("net");
const out = execFileSync(process.execPath, ["-e", "process.stdout.write('child')"]).toString();
const server = net.createServer((c) => { c.end("hi"); });
server.listen(0, "127.0.0.1", () => {
  net.connect(server.address().port, "127.0.0.1").on("data", (d) => {
    console.log(out + " " + d.toString() + " ok");
    server.close();
  });
});
"""


def test_python_threads_pipes_tcp_subprocesses_and_asyncio_run_under_the_filter() -> None:
    proc = subprocess.run([sys.executable, "-c", WORK], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "all ok"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_starts_spawns_and_serves_tcp_under_the_filter() -> None:
    launcher = (
        "import os, sys\n"
        "from lovia_mcp_worker.sandbox import seccomp\n"
        "seccomp.install(seccomp.program(network=False))\n"
        "os.execvp('node', ['node', '-e', sys.argv[1]])\n"
    )
    proc = subprocess.run([sys.executable, "-c", launcher, NODE], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "child hi ok"


def test_deny_new_user_namespaces_refuses_only_new_user_namespaces() -> None:
    code = (
        "import ctypes, os, sys\n"
        "from lovia_mcp_worker.sandbox import seccomp\n"
        "seccomp.install(seccomp.deny_new_user_namespaces())\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "user = libc.unshare(0x10000000) == -1 and ctypes.get_errno()\n"
        "uts = libc.unshare(0) == -1 and ctypes.get_errno()\n"
        "pid = os.fork()\n"
        "os._exit(0) if pid == 0 else os.waitpid(pid, 0)\n"
        "print(user, uts)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(errno.EPERM), "False"]


def test_install_refuses_a_malformed_program_with_a_clear_error() -> None:
    with pytest.raises(OSError, match="8-byte instructions"):
        seccomp.install(b"\x00" * 12)


def test_program_refuses_an_unsupported_architecture() -> None:
    with pytest.raises(OSError, match="x86_64 and aarch64 only"):
        seccomp.program(network=True, machine="riscv64")


def test_aarch64_program_assembles_with_its_own_numbers() -> None:
    prog = seccomp.program(network=False, machine="aarch64")
    assert len(prog) % 8 == 0 and prog != seccomp.program(network=False, machine="x86_64")
    landlock_prog = seccomp.program(network=False, allow_listen=False, machine="aarch64")
    assert len(landlock_prog) == len(prog) + 16  # one comparison and one return for listen


# linux/audit.h: AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def _bpf(prog: bytes, arch: str, nr: int, args: list[int]) -> int:
    """Run a filter on one call as the kernel would (the opcodes seccomp.py emits): errno, 0 if allowed."""
    data = struct.pack("<iI8x", nr, AUDIT_ARCH[arch]) + b"".join(
        struct.pack("<Q", a & 0xFFFFFFFFFFFFFFFF) for a in (args + [0] * 6)[:6]
    )
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = struct.unpack_from("<HBBI", prog, 8 * pc)
        pc += 1
        if code == 0x20:  # LD W ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # ALU AND K
            acc &= k
        elif code in (0x15, 0x35, 0x45):  # JEQ, JGE, JSET
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:  # RET K
            return 0 if k == seccomp.RET_ALLOW else k & 0xFFFF
        else:
            raise AssertionError(f"opcode {code:#x} at {pc - 1}")


EMULATED_MODES: dict[str, dict[str, bool]] = {
    "network": {"network": True},
    "offline": {"network": False},
    "offline_unix": {"network": False, "allow_unix": True},
    "offline_nolisten": {"network": False, "allow_listen": False},
}


def test_the_filter_as_emulated_answers_as_the_kernel_did(results: dict[str, dict[str, int]]) -> None:
    """The emulator below checks aarch64's program; here it is held against this machine's kernel."""
    calls = {**_denied_calls(False), **ALLOWED}
    compared = 0
    for mode, kw in EMULATED_MODES.items():
        prog = seccomp.program(**kw)
        for name, (sc, args) in calls.items():
            got = _bpf(prog, MACHINE, _nr(sc), args)
            kernel = results[mode][name]
            # The emulator says allowed (0) where the kernel ran the call and it failed for its own reason.
            assert got == kernel or (got == 0 and kernel == results["none"][name]), (mode, name, got, kernel)
            compared += 1
    print("compared", compared)


@pytest.mark.parametrize("mode", sorted(EMULATED_MODES))
def test_the_aarch64_filter_refuses_and_allows_the_same_calls_by_its_own_numbers(mode: str) -> None:
    prog = seccomp.program(**EMULATED_MODES[mode], machine="aarch64")
    nr = seccomp.SYSCALLS["aarch64"]
    expected = {
        **CALLS,
        **(OFFLINE_CALLS if mode != "network" else {}),
        **(NOLISTEN_CALLS if mode == "offline_nolisten" else {}),
    }
    if mode == "offline_unix":
        expected = {n: v for n, v in expected.items() if not n.startswith("socket_unix")}
    checked = 0
    for name, (sc, args, err) in expected.items():
        if sc in nr:  # aarch64 has no open, creat, chmod, mkdir, mknod
            assert _bpf(prog, "aarch64", nr[sc], args) == err, (name, sc)
            checked += 1
    for name, (sc, args) in ALLOWED.items():
        if sc in nr and not (name in NOLISTEN_CALLS and mode == "offline_nolisten"):
            assert _bpf(prog, "aarch64", nr[sc], args) == 0, (name, sc)
            checked += 1
    assert _bpf(prog, "x86_64", nr["openat"], []) == errno.ENOSYS  # another ABI's call
    print(mode, "checked", checked)
    assert checked > 40


HEADERS = {
    "x86_64": [Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), Path("/usr/include/asm/unistd_64.h")],
    "aarch64": [Path("/usr/include/asm-generic/unistd.h")],
}


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_system_call_numbers_match_the_kernel_headers(arch: str) -> None:
    header = next((p for p in HEADERS[arch] if p.is_file()), None)
    if header is None:
        pytest.skip(f"no {arch} unistd header installed")
    text = header.read_text()
    found: dict[str, int] = {}
    for name, value in re.findall(r"#define __NR3?2?_(\w+)\s+(\d+)", text):
        found.setdefault(name, int(value))
    checked: list[Any] = []
    for name, number in seccomp.SYSCALLS[arch].items():
        if name in found:
            assert found[name] == number, (arch, name, found[name], number)
            checked.append(name)
    print(arch, "checked", len(checked), "of", len(seccomp.SYSCALLS[arch]))
    assert len(checked) >= len(seccomp.SYSCALLS[arch]) - 4


def _bridge(seccomp_fd: int | None, command: list[str]) -> subprocess.CompletedProcess[str]:
    from lovia_mcp_worker.sandbox.egress import netbridge

    # The bridge's port is on the host's loopback here: a free one, taken from the kernel.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = netbridge.bridge_argv(command, socket_path="/nonexistent/proxy.sock", port=port, seccomp_fd=seccomp_fd)
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        pass_fds=() if seccomp_fd is None else (seccomp_fd,),
    )


STATUS = "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status"


def test_the_network_bridge_installs_the_filter_on_the_server_it_becomes() -> None:
    from lovia_mcp_worker.sandbox import bwrap

    from lovia_mcp import Sandbox

    fd = bwrap.filter_fd(Sandbox())
    try:
        proc = _bridge(fd, ["/bin/sh", "-c", STATUS])
    finally:
        os.close(fd)
    bare = _bridge(None, ["/bin/sh", "-c", STATUS])
    print(proc.stdout, "|", bare.stdout)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["NoNewPrivs:", "1", "Seccomp:", "2"]
    assert bare.stdout.split() == ["NoNewPrivs:", "0", "Seccomp:", "0"]


def test_the_network_bridge_refuses_to_run_the_server_without_its_filter() -> None:
    r, w = os.pipe()
    os.close(w)  # an empty program: nothing to install
    try:
        proc = _bridge(r, ["/bin/sh", "-c", "echo the server ran"])
    finally:
        os.close(r)
    print(proc.stderr)
    assert proc.returncode == 127 and "the server ran" not in proc.stdout
    assert "seccomp" in proc.stderr


# --- inside the box -----------------------------------------------------------
#
# The same probes, one per call on DENY_LIST, run by a server in each
# backend's box (the escape server's "syscalls" probe: each call in a forked
# child), as root and as an ordinary user, and by the same server unboxed.
# What the box answers is the filter's EPERM; what the unboxed server answers
# shows the machine itself would say otherwise.

# The calls the kernel refuses with EPERM to a process without the capability
# before it looks at any argument (may_mount(), CAP_SYS_BOOT, CAP_SYS_PACCT,
# CAP_SYS_MODULE, CAP_SYS_ADMIN, and syslog under kernel.dmesg_restrict=1).
# In a box nothing holds a capability, so their EPERM there would come
# without the filter too: the filter alone is held to them above, as root.
CAPABILITY_FIRST: frozenset[str] = frozenset(
    {
        "pivot_root",
        "move_mount",
        "fsopen",
        "fsmount",
        "fspick",
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "swapoff",
        "reboot",
        "acct",
        "syslog",
    }
)
BOX_BACKENDS: dict[str, str | None] = {
    "bwrap": None if bwrap.BWRAP is not None else "bubblewrap is not available",
    "landlock": None
    if landlock.ABI >= landlock.NETWORK_ABI
    else "needs Landlock ABI 4 (Linux 6.7+) to close the network",
}
# Bound on one probe call: about fifty forks; the rest is margin for a loaded 2-core machine.
PROBE_WAIT = 30.0


def _box_calls() -> list[list[Any]]:
    """[name, number, arguments] of each listed call's probe, for the escape server's "syscalls" probe."""
    return [[name, _nr(name), CALLS[label][1]] for name, label in sorted(PROBE_OF.items())]


def _sides() -> list[str]:
    return ["bare"] + [b for b, why in BOX_BACKENDS.items() if why is None]


async def _probe_sides(place: EscapePlace, sides: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    args = {"name": "syscalls", "args": {"calls": _box_calls()}}
    for side in sides:
        box = None if side == "bare" else Sandbox(backend=side)  # type: ignore[arg-type]
        async with place.server(box).session() as conn:
            text = str(await asyncio.wait_for(conn.call_tool("probe", args), PROBE_WAIT))
        assert text.startswith("ok "), (side, text)
        out[side] = json.loads(text[3:])
    return out


# As an ordinary user: the escape server unboxed, then in each box; its answers as JSON.
NOBODY_SYSCALLS = r"""
import asyncio, json, sys
from lovia_mcp import MCPServerStdio, Sandbox
from lovia_mcp.doctor import probes as doctor_probes
cwd, escape, calls, sides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
async def main():
    out = {}
    for side in sides:
        box = None if side == "bare" else Sandbox(backend=side)
        server = MCPServerStdio(command=sys.executable, args=[escape, doctor_probes.__file__], cwd=cwd, sandbox=box)
        async with server.session() as c:
            out[side] = str(await c.call_tool("probe", {"name": "syscalls", "args": {"calls": calls}}))
    print(json.dumps(out))
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, dict[str, int]]]:
    """``answers(user)``: each side's errno for each listed call ("bare" and each backend available)."""
    seen: dict[str, dict[str, dict[str, int]]] = {}

    def get(user: str) -> dict[str, dict[str, int]]:
        if user not in seen:
            if user == "root":
                if os.geteuid() != 0:
                    pytest.skip("runs as root")
                place = EscapePlace(tmp_path_factory.mktemp("denylist"), f"denylist-{os.getpid()}")
                try:
                    seen[user] = run(_probe_sides(place, _sides()))
                finally:
                    place.close()
            else:
                proc = as_nobody(NOBODY_SYSCALLS, ESCAPE_SERVER, json.dumps(_box_calls()), *_sides())
                texts: dict[str, str] = json.loads(proc.stdout)
                for side, text in texts.items():
                    assert text.startswith("ok "), (side, text)
                seen[user] = {side: json.loads(text[3:]) for side, text in texts.items()}
        return seen[user]

    return get


def _named(result: dict[str, int]) -> dict[str, str]:
    return {name: errno.errorcode.get(err, str(err)) for name, err in sorted(result.items())}


@pytest.mark.parametrize("user", ["root", "nobody"])
@pytest.mark.parametrize("backend", sorted(BOX_BACKENDS))
def test_every_call_on_the_deny_list_is_refused_inside_the_box(
    answers: Callable[[str], dict[str, dict[str, int]]], backend: str, user: str
) -> None:
    why = BOX_BACKENDS[backend]
    if why is not None:
        pytest.skip(why)
    boxed = answers(user)[backend]
    print(user, backend, _named(boxed))
    assert sorted(boxed) == sorted(PROBE_OF)
    let_through = {name: err for name, err in _named(boxed).items() if err != "EPERM"}
    assert not let_through, f"{user} in the {backend} box: not refused by the filter: {let_through}"


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_without_the_box_the_machine_answers_those_calls_otherwise(
    answers: Callable[[str], dict[str, dict[str, int]]], user: str
) -> None:
    """What makes the test above mean something: unboxed, the kernel does not say EPERM (as root,
    to none of them; as an ordinary user, to none but those it checks a capability for first)."""
    bare = answers(user)["bare"]
    print(user, "bare", _named(bare))
    excused = CAPABILITY_FIRST if user == "nobody" else frozenset()
    eperm = sorted(name for name, err in bare.items() if err == errno.EPERM and name not in excused)
    assert not eperm, f"{user}, unboxed: the kernel already refuses {eperm} with EPERM; choose other arguments"
