"""What this machine lets the worker box and contain: the kernel's facts, as ``lovia-mcp doctor`` reports them.

Each fact is read the way the sandbox and the cgroup layout read it (the
same probes, so the report cannot disagree with what an open does), plus the
reasons an operator needs when something is refused:

- each sandbox backend's own facts (``Backend.facts``, from the registry:
  bwrap's user namespaces and binary, Landlock's ABI), so this module names
  no backend;
- :func:`seccomp_facts`: whether this process already runs under a filter
  (a container's profile), and whether one more can be installed;
- :func:`cgroups`: the cgroup version, the controllers a generation may
  use, and so how each limit would be enforced (the kernel, or the watch).

Everything is plain JSON data (dicts of str, int, bool, lists, None).

Caveats: the facts are the calling process's. The worker that runs a server
is a fork of a forkserver the agent started, with the same cgroup, filters
and environment, so the two agree unless the agent changed them since.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

from ..sandbox import registry, seccomp
from ..sandbox.backend import JSON
from . import cgroup_layout

# The limits a cgroup makes the kernel's: the option and the controller that enforces it.
CGROUP_LIMITS: Final = {"memory_mb": "memory", "max_processes": "pids"}


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _status() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (_read("/proc/self/status") or "").splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _can_install_filter() -> str | None:
    """None if a seccomp filter can be installed here (tried in a forked child), else why not."""
    allow = seccomp.RET_ALLOW.to_bytes(4, "little")
    prog = (0x06).to_bytes(2, "little") + b"\0\0" + allow  # one instruction: return ALLOW
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child installs the filter on itself and reports the errno
        code = 0
        try:
            os.close(r)
            seccomp.install(prog)
        except OSError as exc:
            code = exc.errno or 1
        finally:
            os.write(w, bytes([min(code, 255)]))
            os._exit(0)
    os.close(w)
    try:
        data = os.read(r, 1)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    err = data[0] if data else 1
    return None if err == 0 else f"prctl(PR_SET_SECCOMP): {os.strerror(err)}"


def seccomp_facts() -> JSON:
    status = _status()
    modes = {"0": "none", "1": "strict", "2": "filter"}
    why = _can_install_filter()
    return {
        "available": why is None,
        "reason": why,
        "this_process": modes.get(status.get("Seccomp", ""), "unknown"),
        "filters_on_this_process": int(status.get("Seccomp_filters", "0") or 0),
        "no_new_privs": status.get("NoNewPrivs") == "1",
    }


def _version() -> str | None:
    """``cgroup2``, ``cgroup1``, ``hybrid`` (both mounted), or None (neither)."""
    kinds = set()
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        tail = line.partition(" - ")[2].split()
        if tail:
            kinds.add(tail[0])
    if {"cgroup", "cgroup2"} <= kinds:
        return "hybrid"
    return "cgroup2" if "cgroup2" in kinds else "cgroup1" if "cgroup" in kinds else None


def cgroups() -> JSON:
    """The cgroup version, where a generation's cgroup would go, its controllers, and each limit's enforcement."""
    where = cgroup_layout.layout()
    controllers: list[str] = []
    reason: str | None = None
    if where is None:
        reason = (
            f"turned off ({cgroup_layout.ENV_SWITCH}=0)"
            if not cgroup_layout.enabled()
            else "this process may not make child cgroups with memory and pids (its own cgroup is not writable, "
            "or cgroup v2 does not delegate memory and pids to it: cgroup.subtree_control)"
        )
    elif where.version == 2:
        assert where.unified is not None
        delegated = set((_read(os.path.join(where.unified, "cgroup.subtree_control")) or "").split())
        controllers = sorted(delegated & {"memory", "pids", "cpu"})
    else:
        controllers = sorted(c for c in ("memory", "pids", "cpuacct") if getattr(where, c) is not None)
    usable = set(controllers)
    limits = {option: "kernel" if controller in usable else "watch" for option, controller in CGROUP_LIMITS.items()}
    # RLIMIT_CPU binds each process; the tree's total is read from the cgroup or psutil and watched.
    limits["cpu_seconds"] = "rlimit+watch"
    limits["max_open_files"] = "rlimit"
    return {
        "version": _version(),
        "usable": where is not None,
        "where": where.describe() if where is not None else None,
        "controllers": controllers,
        "reason": reason,
        "limits": limits,
    }


def facts(backends: Iterable[str] | None = None) -> JSON:
    """Every fact, keyed as ``lovia-mcp doctor --json`` reports them under ``kernel``.

    The machine's, then each backend's own (``Backend.facts``: the registry's
    order, or ``backends``), then seccomp's.
    """
    out: JSON = {"release": os.uname().release, "machine": os.uname().machine, "euid": os.geteuid()}
    for backend in registry.registered() if backends is None else map(registry.get, backends):
        for key, fact in backend.facts().items():
            if key in out:
                raise ValueError(
                    f"the {backend.name} sandbox backend reports the kernel fact {key!r}, which is reported already; "
                    "give its fact a key of its own"
                )
            out[key] = fact
    out["seccomp"] = seccomp_facts()
    return out


__all__ = ["CGROUP_LIMITS", "cgroups", "facts", "seccomp_facts"]
