"""The server's seccomp filter: a classic-BPF program built here, installed by bwrap or by :func:`install`.

Both sandbox backends put the same filter on the server (bwrap takes it with
``--seccomp FD``; the Landlock backend and the network bridge call
:func:`install` just before the exec). Everything is allowed except what a
tool server never needs and an escape does (Docker's default profile and
anthropic's sandbox-runtime were the reading), refused with ``EPERM``:

- ``socket(AF_UNIX, ...)``: a read-only bind does not stop ``connect()`` to a
  pathname socket (the Docker socket, a session bus, an ssh-agent), and with
  the host's network an abstract one is reachable too. ``socketpair()`` stays
  allowed for stream pairs: they are connected to each other and reach
  nothing (``connect()`` and ``sendto()`` get ``EISCONN``), and asyncio's
  self-pipe, Node's child-process stdio and most runtimes need them. Other
  pairs are refused: ``sendto()`` from a datagram pair (``SOCK_RAW`` is one
  too, for AF_UNIX) or even a seqpacket pair reaches any datagram socket on
  the host (syslog, the journal, chronyd's control socket). Chromium's
  zygote, which uses seqpacket pairs, therefore does not start in the box;
- namespaces and mounts: ``mount``, ``umount2``, ``pivot_root``, ``setns``,
  ``unshare``, ``chroot``, the new mount API (``fsopen``, ``open_tree``...),
  and ``clone`` with any ``CLONE_NEW*`` flag; ``clone3`` gets ``ENOSYS``,
  since its flags sit in memory a filter cannot read, and libc then falls
  back to ``clone`` (Docker does the same);
- the keyring (``keyctl``, ``add_key``, ``request_key``): the server cannot
  read the user's session keyring, so no fresh one is needed;
- other processes: ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
  ``pidfd_getfd``;
- kernel attack surface: ``io_uring_*``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``ioctl(TIOCSTI)`` and ``ioctl(TIOCLINUX)`` (terminal
  injection), modules, ``kexec``, ``open_by_handle_at`` (the "shocker"
  escape; ``name_to_handle_at`` stays, as in Docker: a handle opens nothing
  without it), the clock, swap, reboot, quota, acct, syslog;
- files that outlive the box with more rights than it had: a mode with
  ``S_ISUID`` or ``S_ISGID`` in ``chmod``, ``fchmod``, ``fchmodat``,
  ``fchmodat2``, ``creat``, ``mkdir``, ``mkdirat``, ``mknod``, ``mknodat``,
  and in ``open``/``openat`` when they create (``O_CREAT``, ``O_TMPFILE``):
  a setuid root shell left in a writable folder is root for any host user
  who reaches it later, ``nosuid`` in the box notwithstanding. ``mknod`` of
  anything but a regular file (FIFOs, devices, sockets; a whiteout, the
  character device 0:0, needs no capability) and ``renameat2`` with
  ``RENAME_WHITEOUT`` too: a host program that opens such a path blocks or
  reaches a device. ``openat2`` gets ``ENOSYS``: its mode sits in memory,
  and libc falls back to ``openat``.

With ``network=False`` (the backends pass it for every setting but ``True``)
the only sockets left are TCP (``AF_INET``/``AF_INET6``, ``SOCK_STREAM``,
protocol 0 or TCP) and ``NETLINK_ROUTE`` (interface listing): UDP, raw,
SCTP, MPTCP, vsock, every other family, and the other netlink families
(``NETLINK_SOCK_DIAG`` lists every TCP socket of the network namespace,
which on Landlock is the host's) are refused, since the Landlock backend's
network rules cover TCP only. ``allow_listen=False`` also refuses
``listen``, for the Landlock backend with the network closed: ``listen()``
on a socket never bound binds it to an ephemeral port on every interface,
and Landlock's bind rule does not see that implicit bind.

Architectures: x86_64 and aarch64. A system call from another ABI (i386
through ``int 0x80``, x32 on x86_64) gets ``ENOSYS`` as a whole, as its
numbers differ and it would bypass the rules.

Caveats: argument checks read registers, so only integer arguments are
filtered (domain, flags, ioctl request, file mode), never memory; they are
compared on their low 32 bits, which is all the kernel reads of them (of a
mode, the low 16). The mode checks run the filter on every ``openat``
(before, the kernel answered it from its cache of calls whose answer does
not depend on their arguments), so ``openat`` comes first in the program:
its path through it is a few instructions.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# No typing or platform at run time: the network bridge loads this file
# inside the sandbox on every start, where each millisecond counts.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

# BPF opcodes (linux/bpf_common.h).
_LD_W_ABS: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JMP_JEQ_K: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JMP_JGE_K: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JMP_JSET_K: Final = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_ALU_AND_K: Final = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET_K: Final = 0x06  # BPF_RET | BPF_K

# Return values (linux/seccomp.h).
RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_OFF_NR: Final = 0
_OFF_ARCH: Final = 4


def _arg_low(i: int) -> int:
    # Both supported architectures are little-endian: the low word comes first.
    return 16 + 8 * i


_AUDIT_ARCH: Final = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT: Final = 0x40000000

# System call numbers: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl) and
# aarch64 (asm-generic/unistd.h). tests/sandbox/test_seccomp.py checks them against
# the headers where they are installed.
SYSCALLS: Final[dict[str, dict[str, int]]] = {
    "x86_64": {
        "ioctl": 16,
        "socket": 41,
        "socketpair": 53,
        "clone": 56,
        "ptrace": 101,
        "syslog": 103,
        "uselib": 134,
        "chroot": 161,
        "acct": 163,
        "settimeofday": 164,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "iopl": 172,
        "ioperm": 173,
        "init_module": 175,
        "delete_module": 176,
        "quotactl": 179,
        "lookup_dcookie": 212,
        "clock_settime": 227,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "perf_event_open": 298,
        "fanotify_init": 300,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "clock_adjtime": 305,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kcmp": 312,
        "finit_module": 313,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
        "adjtimex": 159,
        "pivot_root": 155,
        "open": 2,
        "listen": 50,
        "mkdir": 83,
        "creat": 85,
        "chmod": 90,
        "fchmod": 91,
        "mknod": 133,
        "openat": 257,
        "mkdirat": 258,
        "mknodat": 259,
        "fchmodat": 268,
        "renameat2": 316,
    },
    "aarch64": {
        "lookup_dcookie": 18,
        "ioctl": 29,
        "umount2": 39,
        "mount": 40,
        "pivot_root": 41,
        "chroot": 51,
        "quotactl": 60,
        "acct": 89,
        "unshare": 97,
        "kexec_load": 104,
        "init_module": 105,
        "delete_module": 106,
        "clock_settime": 112,
        "syslog": 116,
        "ptrace": 117,
        "reboot": 142,
        "settimeofday": 170,
        "adjtimex": 171,
        "socket": 198,
        "socketpair": 199,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "clone": 220,
        "swapon": 224,
        "swapoff": 225,
        "perf_event_open": 241,
        "fanotify_init": 262,
        "name_to_handle_at": 264,
        "open_by_handle_at": 265,
        "clock_adjtime": 266,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "kcmp": 272,
        "finit_module": 273,
        "bpf": 280,
        "userfaultfd": 282,
        "kexec_file_load": 294,
        "mknodat": 33,
        "mkdirat": 34,
        "fchmod": 52,
        "fchmodat": 53,
        "openat": 56,
        "listen": 201,
        "renameat2": 276,
    },
}
# Numbered alike on every architecture since the 5.x unification (from 424 on).
_COMMON: Final = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "openat2": 437,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
    "quotactl_fd": 443,
    "fchmodat2": 452,
}
for _table in SYSCALLS.values():
    _table.update(_COMMON)

# Refused outright, with EPERM, whatever the arguments.
DENIED: Final = (
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
    "keyctl",
    "add_key",
    "request_key",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
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
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
)

AF_UNIX: Final = 1
AF_INET: Final = 2
AF_INET6: Final = 10
AF_NETLINK: Final = 16
_SOCK_TYPE_MASK: Final = 0xF  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
_SOCK_STREAM: Final = 1
_IPPROTO_TCP: Final = 6
TIOCSTI: Final = 0x5412
TIOCLINUX: Final = 0x541C
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET. Not
# CLONE_NEWTIME (0x80): in clone() those bits are the exit signal.
CLONE_NAMESPACES: Final = 0x7E020000
CLONE_NEWUSER: Final = 0x10000000
NETLINK_ROUTE: Final = 0
S_ISUID: Final = 0o4000
S_ISGID: Final = 0o2000
_S_IFMT: Final = 0o170000
_S_IFREG: Final = 0o100000
# The open flags that make it create a file: O_CREAT, and __O_TMPFILE (part of
# O_TMPFILE, which the kernel refuses without it). The same on both architectures.
O_CREATES: Final = 0o100 | 0o20000000
RENAME_WHITEOUT: Final = 4
# The calls that take a file mode: the argument holding it, and for open the
# argument holding the flags without which the mode is ignored. openat first:
# the most frequent call the filter now reads arguments of, so the shortest path.
MODE_ARGS: Final = {
    "openat": (3, 2),
    "open": (2, 1),
    "creat": (1, None),
    "mkdir": (1, None),
    "mkdirat": (2, None),
    "chmod": (1, None),
    "fchmod": (1, None),
    "fchmodat": (2, None),
    "fchmodat2": (2, None),
}
# mknod's mode also holds the file type: only regular files may be made.
MKNOD_ARGS: Final = {"mknod": 1, "mknodat": 2}


class _Asm:
    """A straight-line BPF program with forward jumps to named labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def ret(self, value: int) -> None:
        self.op(_RET_K, value)

    def assemble(self) -> bytes:
        out = bytearray()
        for pc, (code, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                off = target if isinstance(target, int) else self.labels[target] - pc - 1
                if not 0 <= off <= 255:
                    raise ValueError(f"BPF jump out of range at {pc}: {target!r}")
                offsets.append(off)
            out += struct.pack("<HBBI", code, offsets[0], offsets[1], k & 0xFFFFFFFF)
        return bytes(out)


def errno_ret(err: int) -> int:
    """The filter's return value that fails the call with ``err``."""
    return _RET_ERRNO | (err & 0xFFFF)


def _machine(machine: str | None) -> str:
    name = machine or os.uname().machine
    name = {"amd64": "x86_64", "arm64": "aarch64"}.get(name.lower(), name.lower())
    if name not in _AUDIT_ARCH:
        raise OSError(errno.ENOTSUP, f"no seccomp filter for the {name} architecture (x86_64 and aarch64 only)")
    return name


def _prologue(asm: _Asm, machine: str) -> None:
    """Foreign ABIs get ENOSYS; leaves the system call number in the accumulator."""
    asm.op(_LD_W_ABS, _OFF_ARCH)
    asm.op(_JMP_JEQ_K, _AUDIT_ARCH[machine], 1, 0)
    asm.ret(errno_ret(errno.ENOSYS))
    asm.op(_LD_W_ABS, _OFF_NR)
    if machine == "x86_64":
        asm.op(_JMP_JGE_K, _X32_SYSCALL_BIT, 0, 1)
        asm.ret(errno_ret(errno.ENOSYS))


def _deny_clone_flags(asm: _Asm, nr: dict[str, int], mask: int, block: str) -> None:
    """clone() with any of ``mask`` in its flags (argument 0) fails; clone3 gets ENOSYS."""
    asm.op(_JMP_JEQ_K, nr["clone3"], 0, 1)
    asm.ret(errno_ret(errno.ENOSYS))
    asm.op(_JMP_JEQ_K, nr["clone"], 0, f"{block}.end")
    asm.op(_LD_W_ABS, _arg_low(0))
    asm.op(_JMP_JSET_K, mask, 0, 1)
    asm.ret(errno_ret(errno.EPERM))
    asm.ret(RET_ALLOW)
    asm.label(f"{block}.end")


def _deny_setid_modes(asm: _Asm, nr: dict[str, int]) -> None:
    """A mode with S_ISUID or S_ISGID fails with EPERM (open's only when it creates); mknod of
    anything but a regular file too; renameat2's whiteout too; openat2 gets ENOSYS."""
    eperm = errno_ret(errno.EPERM)
    for name, (mode_arg, flags_arg) in MODE_ARGS.items():
        if name not in nr:  # aarch64 has only the *at calls
            continue
        asm.op(_JMP_JEQ_K, nr[name], 0, f"{name}.end")
        if flags_arg is not None:
            asm.op(_LD_W_ABS, _arg_low(flags_arg))
            asm.op(_JMP_JSET_K, O_CREATES, 0, f"{name}.allow")
        asm.op(_LD_W_ABS, _arg_low(mode_arg))
        asm.op(_JMP_JSET_K, S_ISUID | S_ISGID, 0, f"{name}.allow")
        asm.ret(eperm)
        asm.label(f"{name}.allow")
        asm.ret(RET_ALLOW)
        asm.label(f"{name}.end")
    for name, mode_arg in MKNOD_ARGS.items():
        if name not in nr:
            continue
        asm.op(_JMP_JEQ_K, nr[name], 0, f"{name}.end")
        asm.op(_LD_W_ABS, _arg_low(mode_arg))
        asm.op(_JMP_JSET_K, S_ISUID | S_ISGID, f"{name}.deny", 0)
        asm.op(_ALU_AND_K, _S_IFMT)
        asm.op(_JMP_JEQ_K, 0, f"{name}.allow", 0)  # type 0 is a regular file
        asm.op(_JMP_JEQ_K, _S_IFREG, f"{name}.allow", f"{name}.deny")
        asm.label(f"{name}.deny")
        asm.ret(eperm)
        asm.label(f"{name}.allow")
        asm.ret(RET_ALLOW)
        asm.label(f"{name}.end")
    asm.op(_JMP_JEQ_K, nr["renameat2"], 0, "renameat2.end")
    asm.op(_LD_W_ABS, _arg_low(4))
    asm.op(_JMP_JSET_K, RENAME_WHITEOUT, 0, 1)
    asm.ret(eperm)
    asm.ret(RET_ALLOW)
    asm.label("renameat2.end")
    asm.op(_JMP_JEQ_K, nr["openat2"], 0, 1)
    asm.ret(errno_ret(errno.ENOSYS))


def program(*, network: bool, allow_unix: bool = False, allow_listen: bool = True, machine: str | None = None) -> bytes:
    """The server's filter as an array of struct sock_filter (8 bytes each), for bwrap's
    --seccomp FD or install(). network=False also refuses AF_INET/AF_INET6 sockets that are not
    SOCK_STREAM (UDP, raw) -- TCP is left to the namespace or Landlock -- every other
    family but AF_NETLINK, and every netlink protocol but NETLINK_ROUTE. ``machine`` defaults
    to this one; raises OSError on another.

    ``allow_unix=True`` leaves ``socket(AF_UNIX)`` alone: for the network
    bridge and bwrap's init, which must reach the proxy's socket; the server
    gets the full filter stacked on top (filters stack: the strictest wins).
    ``allow_listen=False`` refuses ``listen`` (the Landlock backend without the
    host's network: an implicit bind escapes its rules)."""
    arch = _machine(machine)
    nr = SYSCALLS[arch]
    eperm = errno_ret(errno.EPERM)
    asm = _Asm()
    _prologue(asm, arch)
    _deny_setid_modes(asm, nr)
    for name in DENIED + (() if allow_listen else ("listen",)):
        if name in nr:
            asm.op(_JMP_JEQ_K, nr[name], 0, 1)
            asm.ret(eperm)
    _deny_clone_flags(asm, nr, CLONE_NAMESPACES, "clone")

    asm.op(_JMP_JEQ_K, nr["ioctl"], 0, "ioctl.end")
    asm.op(_LD_W_ABS, _arg_low(1))
    asm.op(_JMP_JEQ_K, TIOCSTI, "deny", 0)
    asm.op(_JMP_JEQ_K, TIOCLINUX, "deny", "allow")
    asm.label("ioctl.end")

    asm.op(_JMP_JEQ_K, nr["socketpair"], 0, "socketpair.end")
    asm.op(_LD_W_ABS, _arg_low(1))
    asm.op(_ALU_AND_K, _SOCK_TYPE_MASK)
    asm.op(_JMP_JEQ_K, _SOCK_STREAM, "allow", "deny")
    asm.label("socketpair.end")

    asm.op(_JMP_JEQ_K, nr["socket"], 0, "allow")
    asm.op(_LD_W_ABS, _arg_low(0))
    asm.op(_JMP_JEQ_K, AF_UNIX, "allow" if allow_unix else "deny", 0)
    if not network:
        asm.op(_JMP_JEQ_K, AF_NETLINK, "netlink", 0)
        asm.op(_JMP_JEQ_K, AF_INET, "inet", 0)
        asm.op(_JMP_JEQ_K, AF_INET6, "inet", "deny")
        asm.label("netlink")
        asm.op(_LD_W_ABS, _arg_low(2))
        asm.op(_JMP_JEQ_K, NETLINK_ROUTE, "allow", "deny")
        asm.label("inet")
        asm.op(_LD_W_ABS, _arg_low(1))
        asm.op(_ALU_AND_K, _SOCK_TYPE_MASK)
        asm.op(_JMP_JEQ_K, _SOCK_STREAM, 0, "deny")
        asm.op(_LD_W_ABS, _arg_low(2))
        asm.op(_JMP_JEQ_K, 0, "allow", 0)
        asm.op(_JMP_JEQ_K, _IPPROTO_TCP, "allow", "deny")
    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("deny")
    asm.ret(eperm)
    return asm.assemble()


def deny_new_user_namespaces(*, machine: str | None = None) -> bytes:
    """A filter refusing ``clone``/``unshare`` with CLONE_NEWUSER (EPERM) and ``clone3`` (ENOSYS).

    What Docker's default profile and Kubernetes' RuntimeDefault amount to for
    bubblewrap: a machine where user namespaces cannot be made. For tests.
    """
    arch = _machine(machine)
    nr = SYSCALLS[arch]
    asm = _Asm()
    _prologue(asm, arch)
    asm.op(_JMP_JEQ_K, nr["unshare"], 0, "unshare.end")
    asm.op(_LD_W_ABS, _arg_low(0))
    asm.op(_JMP_JSET_K, CLONE_NEWUSER, 0, 1)
    asm.ret(errno_ret(errno.EPERM))
    asm.ret(RET_ALLOW)
    asm.label("unshare.end")
    _deny_clone_flags(asm, nr, CLONE_NEWUSER, "clone")
    asm.ret(RET_ALLOW)
    return asm.assemble()


_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_prctl() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: install() says so
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    prctl: Callable[..., int] = fn
    return prctl


# Resolved at import, so that install() between fork and exec only calls.
_prctl: Final = _load_prctl()


def install(prog: bytes) -> None:
    """PR_SET_NO_NEW_PRIVS, then seccomp(SECCOMP_SET_MODE_FILTER) in the calling process
    (safe between fork and exec: ctypes calls only, no allocation-heavy work). Raises OSError.

    The filter binds the calling thread and what it starts; call it before
    threads exist (between fork and exec, or in a single-threaded launcher).
    """
    if not prog or len(prog) % 8:
        raise OSError(
            errno.EINVAL, f"a seccomp program is a non-empty array of 8-byte instructions, not {len(prog)} bytes"
        )
    if _prctl is None:
        raise OSError(errno.ENOSYS, "seccomp filters are Linux-only")
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.addressof(buf))
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(err, err)}")
    if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")


__all__ = [
    "AF_INET",
    "AF_INET6",
    "AF_NETLINK",
    "AF_UNIX",
    "CLONE_NAMESPACES",
    "CLONE_NEWUSER",
    "DENIED",
    "MKNOD_ARGS",
    "MODE_ARGS",
    "NETLINK_ROUTE",
    "O_CREATES",
    "RENAME_WHITEOUT",
    "RET_ALLOW",
    "SYSCALLS",
    "S_ISGID",
    "S_ISUID",
    "TIOCLINUX",
    "TIOCSTI",
    "deny_new_user_namespaces",
    "errno_ret",
    "install",
    "program",
]
