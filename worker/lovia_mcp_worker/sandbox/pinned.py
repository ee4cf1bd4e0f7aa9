"""A sandbox's paths, granted as they were configured (:func:`hold`).

The agent pins the server's cwd and each ``writable`` and ``readable`` path
when it opens the server (``Sandbox.pins``: resolved, with device and inode);
every start opens each one again without following any symlink
(:func:`open_unfollowed`), checks that it is the same file, and hands the
backends *that descriptor* (Landlock rules on it, bwrap's ``--bind-fd``). A
path swapped since, for a symlink or anything else, refuses the start with
:data:`PATH_CHANGED`; it is never followed. A spec that comes without pins
(one built by hand) is pinned by the first start in this worker.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from typing import Final

from ..wire.confinement import PathPin, Sandbox
from .backend import SandboxError

# Loaded at import (in the forkserver), as every start opens its paths through it.
_libc: Final = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# openat2(2) (Linux 5.6+): the same number on x86_64 and aarch64.
_OPENAT2: Final = 437 if platform.machine() in ("x86_64", "aarch64") else None
_RESOLVE_NO_SYMLINKS: Final = 0x04
_AT_FDCWD: Final = -100


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


# False once openat2 turned out missing here (an old kernel, or a container
# profile that refuses it): the component walk then serves every open.
_has_openat2 = _OPENAT2 is not None


def open_unfollowed(path: str) -> int:
    """An ``O_PATH`` descriptor (close-on-exec) of absolute ``path``, following no symlink anywhere in it.

    ``openat2(RESOLVE_NO_SYMLINKS)``; where that call is missing (ENOSYS, or
    EPERM from a seccomp profile), a walk from ``/`` that opens each
    component with ``O_NOFOLLOW``. A symlink on the way raises
    ``OSError(ELOOP)``; a missing component, ENOENT.
    """
    global _has_openat2
    if _has_openat2 and _OPENAT2 is not None:
        how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS)
        fd = int(
            _libc.syscall(
                ctypes.c_long(_OPENAT2),
                ctypes.c_int(_AT_FDCWD),
                os.fsencode(path),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EPERM):
            raise OSError(err, os.strerror(err), path)
        _has_openat2 = False
    return _walk_unfollowed(path)


def _walk_unfollowed(path: str) -> int:
    if not path.startswith("/"):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in path.split("/"):
            if not name:
                continue
            nxt = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


# The start refused because a pinned path is no longer the file it was.
PATH_CHANGED: Final = "sandbox path changed since configuration"
PATH_CHANGED_HINT: Final = (
    "A sandboxed server's cwd, writable and readable paths are resolved once, when it is opened, and "
    "a later start never follows one that was replaced: a server that swaps a path for a symlink would "
    "otherwise get the link's target. Look at what replaced it (a server of this connection could have); "
    "if you replaced it yourself, put it back or open the server again (from a new agent process if the "
    "path now resolves elsewhere)."
)

# Pins this worker made itself, for a spec that came without them: the first start's.
_first_sight: dict[str, PathPin] = {}


class Held:
    """The sandbox's pinned paths, each open (``O_PATH``): configured path -> (resolved path, descriptor).

    The caller passes the descriptors to the spawn and closes them after it
    (:meth:`close`).
    """

    def __init__(self) -> None:
        self.paths: dict[str, tuple[str, int]] = {}

    def fds(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(fd for _, fd in self.paths.values()))

    def close(self) -> None:
        for fd in self.fds():
            os.close(fd)
        self.paths.clear()


def _pin_now(path: str) -> PathPin:
    pin = _first_sight.get(path)
    if pin is None:
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
            pin = PathPin(real, st.st_dev, st.st_ino)
        except OSError:
            pin = PathPin(real)
        _first_sight[path] = pin
    return pin


def _changed(path: str, why: str) -> SandboxError:
    return SandboxError(f"{PATH_CHANGED}: {path} ({why})", hint=PATH_CHANGED_HINT)


def hold(box: Sandbox, cwd: str | None) -> Held:
    """Open ``cwd`` and the ``writable`` and ``readable`` paths as pinned; raises SandboxError.

    A writable path (or cwd) that did not exist when it was pinned is refused
    as missing; a readable one is left out (it is not granted, even if it
    exists now: nothing pinned it).
    """
    held = Held()
    opened: dict[str, int] = {}  # resolved path -> descriptor: one each
    try:
        wanted = [(p, True) for p in ([cwd] if cwd else []) + list(box.writable)] + [(p, False) for p in box.readable]
        for path, needed in wanted:
            if path in held.paths:
                continue
            pin = box.pins.get(path) or _pin_now(path)
            if pin.dev == 0 and pin.ino == 0:
                if needed:
                    raise SandboxError(
                        f"a writable sandbox path does not exist: {path!r}",
                        hint="Create it first, then open the server again; or leave it out of Sandbox(writable=[...]).",
                    )
                continue
            fd = opened.get(pin.real)
            if fd is None:
                try:
                    fd = open_unfollowed(pin.real)
                except OSError as exc:
                    why = {errno.ELOOP: "a symlink is in it now", errno.ENOENT: "it is gone"}.get(
                        exc.errno or 0, exc.strerror or str(exc)
                    )
                    raise _changed(path, why) from None
                opened[pin.real] = fd
            held.paths[path] = (pin.real, fd)  # closed with the others if the check below fails
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
                raise _changed(path, "another file is there now")
    except BaseException:
        held.close()
        raise
    return held


__all__ = ["PATH_CHANGED", "PATH_CHANGED_HINT", "Held", "hold", "open_unfollowed"]
