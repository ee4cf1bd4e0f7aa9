"""System calls that enter or make namespaces, for a single-threaded process; and the program that runs them afresh.

Usage (as a program of its own)::

    python -I -S _namespaces.py listen NETNS_FD PORT SOCKET_FD
    python -I -S _namespaces.py userns PIPE_FD

Standard library only, no package imports: besides being imported, this
file runs as a fresh program. Entering or making a user namespace takes a
single-threaded process, so the worker forks a child for it, and a fork
can come out with threads: at-fork handlers start them (an OpenTelemetry
tracer provider re-detects the process's resource on a short-lived thread
pool in every child). Such a child cannot do the work
(the kernel answers EINVAL); it executes this file instead
(:func:`execute`), which drops every thread, and the fresh program does the
same work.

- ``listen``: the deny-all helper of an ordinary user's worker
  (:mod:`.netbridge`). A thread of such a worker cannot enter the box's
  network namespace (that takes CAP_SYS_ADMIN in its own user namespace),
  so the helper enters the box's user namespace first, which the box's
  owner may, then its network namespace, and sends the listener back over
  ``SOCKET_FD`` with ``SCM_RIGHTS``, or one line saying which step failed.
- ``userns``: whether a user namespace, and a mount namespace inside it,
  can be made here (:mod:`.bwrap`); two bytes on ``PIPE_FD``, the step that
  failed (0: none) and its errno.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import sys
from typing import Final

# setns(2) and unshare(2) flags, the ioctl that names a namespace's owning user namespace
# (linux/nsfs.h: _IO(0xb7, 0x1)), IP_FREEBIND (linux/in.h: the box's
# loopback is not up yet when the listener is made, so its address is not
# local yet).
CLONE_NEWNET: Final = 0x40000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWNS: Final = 0x00020000
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
    """Whether this process has more than one thread (it then cannot enter a user namespace).

    Without ``/proc`` it cannot tell, and answers False: the work is tried
    in place, and a refusal is reported as it comes.
    """
    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        return False


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


def try_userns(libc: ctypes.CDLL) -> bytes:
    """Make a user namespace, then a mount namespace in it (this process changes for good): the step that failed and its errno."""
    for step, flag in enumerate((CLONE_NEWUSER, CLONE_NEWNS), 1):
        if libc.unshare(flag) != 0:
            return bytes([step, min(ctypes.get_errno() or 1, 255)])
    return bytes([0, 0])


def execute(*argv: str) -> None:
    """Become this file as a fresh program (a forked child with threads); the descriptors named in ``argv`` must be inheritable."""
    os.execv(sys.executable, [sys.executable, "-I", "-S", __file__, *argv])


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if argv[:1] == ["listen"]:
        netns, port, back = (int(arg) for arg in argv[1:])
        return serve(libc, netns, port, socket.socket(fileno=back))
    if argv[:1] == ["userns"]:
        os.write(int(argv[1]), try_userns(libc))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
