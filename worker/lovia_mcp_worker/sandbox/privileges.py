"""Privileges a sandboxed server gives up before its exec: every capability, for good.

Run between fork and exec (the Landlock backend's pre-exec), so only plain
calls through ctypes, loaded at import: the bounding set emptied, securebits
locked so that uid 0 regains nothing at exec, the ambient and inheritable sets
cleared, effective and permitted emptied (capset), then ``no_new_privs``.
"""

from __future__ import annotations

import ctypes
import platform
import struct
from typing import Final

_PR_CAPBSET_DROP: Final = 24
_PR_SET_SECUREBITS: Final = 28
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, NO_CAP_AMBIENT_RAISE, each with its lock:
# uid 0 gains no capabilities at exec, and nothing can turn that back.
_SECUREBITS: Final = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CAP_LAST_FALLBACK: Final = 40
_SYS_CAPSET: Final = {"x86_64": 126, "aarch64": 91}.get(platform.machine())


def _cap_last() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return _CAP_LAST_FALLBACK


_CAP_LAST: Final = _cap_last()


_libc: Final = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _prctl(option: int, arg: int = 0) -> int:
    return int(
        _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    )


def drop_privileges() -> None:
    """Every capability gone for good (root included), and ``no_new_privs``.

    The bounding set and securebits need CAP_SETPCAP: for an ordinary user
    they fail, which is fine, as it has no capabilities to lose; the
    securebits are what stops uid 0 from regaining them at exec.
    """
    for cap in range(_CAP_LAST + 1):
        _prctl(_PR_CAPBSET_DROP, cap)
    _prctl(_PR_SET_SECUREBITS, _SECUREBITS)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    # capset(version 3, this thread): effective, permitted, inheritable all zero.
    header = struct.pack("Ii", 0x20080522, 0)
    data = bytes(24)
    if (
        _SYS_CAPSET is not None
        and _libc.syscall(ctypes.c_long(_SYS_CAPSET), ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0
    ):
        raise OSError(ctypes.get_errno(), "capset failed")
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


__all__ = ["drop_privileges"]
