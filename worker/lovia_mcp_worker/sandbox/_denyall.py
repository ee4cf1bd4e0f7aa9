"""Make the deny-all listener inside a box's network namespace: the system calls, and the helper program.

Usage (the helper as a program of its own)::

    python -I -S _denyall.py NETNS_FD PORT SOCKET_FD

Standard library only, no package imports: besides being imported by
:mod:`.netbridge`, this file runs as a fresh program. An ordinary user's
worker cannot enter the box's network namespace from a thread (that takes
CAP_SYS_ADMIN in its own user namespace), so it forks a helper that enters
the box's user namespace first, which the box's owner may. Entering a user
namespace takes a single-threaded process, and a fork can come out with
threads: at-fork handlers start them (OpenTelemetry's SDK restarts its
thread pool in every child). Such a child cannot enter; it executes this
file instead, which drops every thread, and the fresh program does the same
work. Either way the helper sends the listener back over ``SOCKET_FD`` with
``SCM_RIGHTS``, or one line saying which step failed, and exits.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import sys
from typing import Final

# setns(2) flags, the ioctl that names a namespace's owning user namespace
# (linux/nsfs.h: _IO(0xb7, 0x1)), IP_FREEBIND (linux/in.h: the box's
# loopback is not up yet when the listener is made, so its address is not
# local yet).
CLONE_NEWNET: Final = 0x40000000
CLONE_NEWUSER: Final = 0x10000000
NS_GET_USERNS: Final = 0xB701
IP_FREEBIND: Final = 15
BACKLOG: Final = 16
# Bound on the failure line a helper sends back.
MESSAGE_MAX: Final = 512


def setns(libc: ctypes.CDLL, fd: int, kind: int) -> None:
    if libc.setns(fd, kind) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def listener(port: int) -> socket.socket:
    """A listener on ``127.0.0.1:port`` in this thread's network namespace."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def threaded() -> bool:
    """Whether this process has more than one thread (it then cannot enter a user namespace)."""
    return len(os.listdir("/proc/self/task")) > 1


def serve(libc: ctypes.CDLL, netns: int, port: int, back: socket.socket) -> int:
    """The helper's work, in a single-threaded process: enter, listen, send the listener back; the exit code."""
    step = "reading the box's user namespace"
    try:
        userns = fcntl.ioctl(netns, NS_GET_USERNS)
        try:
            # The box's own user namespace: entering the one this process is
            # already in is refused (EINVAL), and needs no entering.
            if os.fstat(userns).st_ino != os.stat("/proc/self/ns/user").st_ino:
                step = "entering the box's user namespace"
                setns(libc, userns, CLONE_NEWUSER)
        finally:
            os.close(userns)
        step = "entering the box's network namespace"
        setns(libc, netns, CLONE_NEWNET)
        step = "listening in the box"
        made = listener(port)
        step = "sending the listener back"
        socket.send_fds(back, [b"1"], [made.fileno()])
        return 0
    except Exception as e:  # noqa: BLE001 - told to the worker, which logs it
        try:
            back.sendall(f"{step}: {type(e).__name__}: {e}".encode()[:MESSAGE_MAX])
        except OSError:
            pass
        return 1


def main(argv: list[str]) -> int:
    netns, port, back = (int(arg) for arg in argv)
    return serve(ctypes.CDLL(None, use_errno=True), netns, port, socket.socket(fileno=back))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
