"""The server's launcher: a 298-byte program that gives it its parent-death signal.

A server must die with its worker even when the worker is SIGKILLed, so it
is started with ``PR_SET_PDEATHSIG``. Setting that between fork and exec
takes a Python pre-exec hook, which makes subprocess ``fork`` the whole
worker (~4 ms for its ~65 MB) instead of ``vfork``ing it; util-linux's
``setpriv --pdeathsig KILL`` does it in an exec of its own, ~1 ms more of the
server's start (it loads libc and libcap-ng). This launcher does it in
~0.05 ms: it has no libc and no dynamic loading, only three system calls.

What it runs, x86-64 Linux (``argv[0]`` is its own path, ``argv[1:]`` the
server's command, the path absolute)::

    prctl(PR_SET_PDEATHSIG, SIGKILL)
    close(FD)                          # its own descriptor: the server gets none of ours
    execve(argv[1], &argv[1], envp)
    write(2, MARK, len(MARK))          # only if the exec failed
    exit_group(errno)

It lives in a sealed memfd made once per process (the forkserver makes it
before its first fork, so every worker has it at the same descriptor) and
is executed as ``/proc/self/fd/FD``, the descriptor passed to the child.
The seals forbid writes, so its code is what this module wrote. Before its
first use it is run once, to exec nothing, and must exit with ``EFAULT``:
where memfds may not be executed (``vm.memfd_noexec=2``, an LSM) or on
another architecture there is no launcher (:func:`current` is ``None``)
and the spawn uses ``setpriv``, or the pre-exec hook.

The program's bytes below were assembled with GNU ``as`` from the listing
beside them; ``tests/test_launcher.py`` runs them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import platform
import struct
import subprocess
import sys
import threading
from typing import Final

# What it writes to stderr when the exec failed; its exit code is the errno.
MARK: Final = b"lovia-mcp launcher: exec failed\n"

_BASE: Final = 0x400000  # where it is loaded (above vm.mmap_min_addr)
_EHDR: Final = struct.Struct("<4sBBBBB7xHHIQQQIHHHHHH")  # the ELF header, 64 bytes
_PHDR: Final = struct.Struct("<IIQQQQQQ")  # a program header, 56 bytes
_PT_LOAD: Final = 1
_PT_GNU_STACK: Final = 0x6474E551  # no executable stack
_PF_X, _PF_W, _PF_R = 1, 2, 4


def _code(fd: int) -> bytes:
    """The x86-64 program, with the descriptor it closes (``FD``) in its ``close``."""
    return b"".join([
        b"\xb8\x9d\x00\x00\x00",          # mov  $157, %eax        prctl
        b"\xbf\x01\x00\x00\x00",          # mov  $1, %edi          PR_SET_PDEATHSIG
        b"\xbe\x09\x00\x00\x00",          # mov  $9, %esi          SIGKILL
        b"\x0f\x05",                      # syscall
        b"\xb8\x03\x00\x00\x00",          # mov  $3, %eax          close
        b"\xbf" + struct.pack("<I", fd),  # mov  $FD, %edi
        b"\x0f\x05",                      # syscall
        b"\x48\x8b\x0c\x24",              # mov  (%rsp), %rcx      argc
        b"\x48\x8d\x74\x24\x10",          # lea  16(%rsp), %rsi    &argv[1]
        b"\x48\x8b\x3e",                  # mov  (%rsi), %rdi      argv[1]
        b"\x48\x8d\x54\xcc\x10",          # lea  16(%rsp,%rcx,8), %rdx   envp
        b"\xb8\x3b\x00\x00\x00",          # mov  $59, %eax         execve
        b"\x0f\x05",                      # syscall
        b"\xf7\xd8",                      # neg  %eax              errno
        b"\x89\xc3",                      # mov  %eax, %ebx
        b"\xb8\x01\x00\x00\x00",          # mov  $1, %eax          write
        b"\xbf\x02\x00\x00\x00",          # mov  $2, %edi          stderr
        b"\x48\x8d\x35\x10\x00\x00\x00",  # lea  MARK(%rip), %rsi  (16 bytes on)
        b"\xba" + struct.pack("<I", len(MARK)),  # mov $len, %edx
        b"\x0f\x05",                      # syscall
        b"\x89\xdf",                      # mov  %ebx, %edi
        b"\xb8\xe7\x00\x00\x00",          # mov  $231, %eax        exit_group
        b"\x0f\x05",                      # syscall
        MARK,
    ])


def image(fd: int) -> bytes:
    """The launcher as an ELF executable that closes ``fd``: two headers, then the code."""
    start = _EHDR.size + 2 * _PHDR.size
    code = _code(fd)
    size = start + len(code)
    header = _EHDR.pack(
        b"\x7fELF", 2, 1, 1, 0, 0,  # 64-bit, little-endian, version 1, System V ABI
        2, 62, 1,  # an executable, x86-64, version 1
        _BASE + start, _EHDR.size, 0,  # entry, program headers, no section headers
        0, _EHDR.size, _PHDR.size, 2, 0, 0, 0,
    )
    load = _PHDR.pack(_PT_LOAD, _PF_R | _PF_X, 0, _BASE, _BASE, size, size, 0x1000)
    stack = _PHDR.pack(_PT_GNU_STACK, _PF_R | _PF_W, 0, 0, 0, 0, 0, 16)
    return header + load + stack + code


def supported() -> bool:
    """Whether this machine can run the launcher: x86-64 Linux."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64") and sys.maxsize > 2**32


_MFD_EXEC: Final = 0x0010  # Linux 6.3+: executable despite vm.memfd_noexec=1; older kernels refuse the flag
_SEALS: Final = getattr(fcntl, "F_SEAL_SEAL", 1) | getattr(fcntl, "F_SEAL_SHRINK", 2) | \
    getattr(fcntl, "F_SEAL_GROW", 4) | getattr(fcntl, "F_SEAL_WRITE", 8)

_lock = threading.Lock()
_made: tuple[int, int, int] | None = None  # the memfd, and its st_dev and st_ino (to know it is still ours)
_refused = False  # this process cannot have one: setpriv, or the pre-exec hook, instead


def current() -> tuple[str, int] | None:
    """The launcher's path and its descriptor (pass it to the child), made on first use; ``None`` if none can be."""
    made = _made
    if made is not None and _still_ours(made):
        return f"/proc/self/fd/{made[0]}", made[0]
    if _refused:
        return None
    with _lock:
        return _make()


def prepare() -> bool:
    """Make the launcher now (the forkserver, before it forks); whether there is one."""
    return current() is not None


def _still_ours(made: tuple[int, int, int]) -> bool:
    """Whether the descriptor still holds the launcher (not closed, and not reused for another file)."""
    try:
        st = os.fstat(made[0])
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == made[1:]


def _make() -> tuple[str, int] | None:
    global _made, _refused
    if _made is not None and _still_ours(_made):
        return f"/proc/self/fd/{_made[0]}", _made[0]
    _made = None  # closed or reused by someone else: never closed here
    if _refused or not supported() or not hasattr(os, "memfd_create"):
        _refused = True
        return None
    fd = -1
    try:
        flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
        try:
            fd = os.memfd_create("lovia-mcp-launcher", flags | _MFD_EXEC)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            fd = os.memfd_create("lovia-mcp-launcher", flags)
        data = image(fd)
        if os.write(fd, data) != len(data):
            raise OSError(errno.EIO, "short write")
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        # A rehearsal: with no command it execs nothing, and says so by EFAULT.
        path = f"/proc/self/fd/{fd}"
        ran = subprocess.run([path], pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, check=False, timeout=10)
        if ran.returncode != errno.EFAULT:
            raise OSError(errno.ENOEXEC, f"the launcher exited {ran.returncode}")
        st = os.fstat(fd)
    except (OSError, subprocess.SubprocessError):
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        _refused = True
        return None
    _made = (fd, st.st_dev, st.st_ino)
    return path, fd


def exec_error(returncode: int, stderr_tail: list[str]) -> str | None:
    """Why the launcher could not exec the server (its ``strerror``), if that is why it exited."""
    if not stderr_tail or stderr_tail[-1].strip() != MARK.decode().strip() or not 0 < returncode < 256:
        return None
    return os.strerror(returncode)


__all__ = ["MARK", "current", "exec_error", "image", "prepare", "supported"]
