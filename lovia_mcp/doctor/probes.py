#!/usr/bin/env python3
"""The doctor's escape probes, and the MCP stdio server that runs them inside a box.

``lovia-mcp doctor`` starts this file as a stdio MCP server inside each
sandbox backend (``python probes.py``), then calls its one tool, ``probe
{name, args}``, once per probe. Each answers one line: ``escaped: WHAT``
(the box let it through), or ``held: WHY`` (the kernel refused, with the
refusal). What each probe aims at (a secret, a listener, a socket, another
process) is planted by the doctor outside the box; the probe gets its
coordinates in ``args``.

A probe tries the plain way first and, where it is blocked, tries to lift
the block as a hostile server with root's means would (unmount what covers
a path, remount ``/`` read-write, ``setns`` into the host's network), only
inside a mount namespace of its own (``LOVIA_MCP_HOST_MNT`` names the
doctor's), so a run outside any box never touches the host's mounts.

Standard library only, and one file: inside a Landlock box the server can
read its own folder and the Python runtime, nothing else of lovia-mcp's.
The test suite's escape probes (``tests/servers/escape_probes.py``) load
this file for its system-call table and helpers (``sys_call``, ``twice``,
``in_child``...) and add probes of their own.

:data:`PROBES` maps each name to its function and a line saying what it tries.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

# Bound on a connection to a listener the doctor opened: it answers at once when it is reachable.
CONNECT_WAIT = 5
MNT_DETACH = 2
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
PTRACE_SEIZE = 0x4206
# The system calls a probe makes by number (the doctor's, and the test suite's escape probes, which import these).
NR = {
    "x86_64": {
        "ptrace": 101,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "bpf": 321,
        "perf_event_open": 298,
        "keyctl": 250,
        "io_uring_setup": 425,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "renameat2": 316,
    },
    "aarch64": {
        "ptrace": 117,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "bpf": 280,
        "perf_event_open": 241,
        "keyctl": 219,
        "io_uring_setup": 425,
        "name_to_handle_at": 264,
        "open_by_handle_at": 265,
        "renameat2": 276,
    },
}.get(os.uname().machine, {})

# A probe's arguments: JSON from the doctor.
Args = dict[str, Any]

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def sys_call(name: str, *args: object) -> int:
    """System call ``name`` with ``args`` (integers, or ctypes values such as a pointer); OSError if it fails."""
    if name not in NR:
        raise OSError(38, f"{name}: not known on {os.uname().machine}")
    # Every integer as a long: a plain int in a variadic call leaves the register's high half undefined.
    wide = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return check(int(libc.syscall(ctypes.c_long(NR[name]), *wide)), name)


def own_mount_ns() -> bool:
    mine = os.readlink("/proc/self/ns/mnt")
    return mine != os.environ.get("LOVIA_MCP_HOST_MNT", mine)


def lift(step: Callable[..., None], *args: str) -> str:
    """Try to lift a block (only in a mount namespace of the box's own); say how it went."""
    if not own_mount_ns():
        return "not tried (the host's mount namespace)"
    try:
        step(*args)
        return "lifted"
    except OSError as exc:
        return exc.strerror or str(exc)


def twice(goal: Callable[[], str], unblock: Callable[..., None], *args: str) -> str:
    """The goal; if blocked, lift the block and try once more."""
    try:
        return goal()
    except OSError as first:
        how = lift(unblock, *args)
        try:
            return f"{goal()} (after lifting the block: {how})"
        except OSError as exc:
            raise OSError(exc.errno, f"{first.strerror or first}; lifting the block: {how}") from exc


def umount(path: str) -> None:
    check(libc.umount2(path.encode(), MNT_DETACH), f"umount2({path})")


def remount_rw(path: str) -> None:
    check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND, None), f"remount({path})")


def in_child(fn: Callable[[], object]) -> str:
    """Run ``fn`` in a forked child (it may change the process for good); its errno comes back."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except OSError as exc:
            os._exit(exc.errno or 1)
        except BaseException:  # noqa: BLE001 - a child must never return into the server
            os._exit(255)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise OSError(code, os.strerror(code) if 0 < code < 255 else f"exit {code}")
    return "done"


def p_secret(a: Args) -> str:
    """Read a secret planted outside the box (in a secret store the box hides), unmounting what covers it."""

    def goal() -> str:
        with open(a["path"]) as f:
            text = f.read(200)
        if a["marker"] not in text:
            raise OSError(2, "the file is there but the secret is not in it")
        return f"read the secret in {a['path']}"

    return twice(goal, umount, os.path.dirname(a["path"]))


def p_write_outside(a: Args) -> str:
    """Write a file outside cwd and writable=, remounting / read-write."""

    def goal() -> str:
        with open(a["path"], "w") as f:
            f.write("written from inside the box\n")
        return f"wrote {a['path']}"

    return twice(goal, remount_rw, "/")


def _connect_tcp(port: int, marker: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_WAIT) as s:
        got = s.recv(100).decode(errors="replace")
    if got != marker:
        raise OSError(111, f"something else answered on port {port}")
    return f"reached the host's listener on 127.0.0.1:{port}"


def p_loopback(a: Args) -> str:
    """With network=False, connect to a listener on the host's loopback; setns() into the host's network."""
    port, marker = int(a["port"]), a["marker"]
    try:
        return _connect_tcp(port, marker)
    except OSError as first:
        try:
            fd = os.open(f"/proc/{int(a['pid'])}/ns/net", os.O_RDONLY)
            try:
                sys_call("setns", fd, CLONE_NEWNET)
            finally:
                os.close(fd)
        except OSError as exc:
            raise OSError(exc.errno, f"{first.strerror or first}; setns: {exc.strerror or exc}") from exc
        return _connect_tcp(port, marker) + " (after setns)"


def p_unix_socket(a: Args) -> str:
    """Connect to a unix socket planted on the host (the Docker-socket case)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(CONNECT_WAIT)
        s.connect(a["path"])
        got = s.recv(100).decode(errors="replace")
    if got != a["marker"]:
        raise OSError(111, "something else answered on the socket")
    return f"reached the host's socket {a['path']}"


def p_other_environ(a: Args) -> str:
    """Read another process's environment (/proc/PID/environ), unmounting /proc to see the host's."""

    def goal() -> str:
        with open(f"/proc/{int(a['pid'])}/environ", "rb") as f:
            data = f.read()
        if a["marker"].encode() not in data:
            raise OSError(3, f"process {a['pid']} is not the one planted")
        return f"read process {a['pid']}'s environment, its secret included"

    return twice(goal, umount, "/proc")


def p_mount(a: Args) -> str:
    """Mount a file system: in a mount namespace of its own (made private first), else where it is."""

    def mount() -> None:
        target = a["path"]
        os.makedirs(target, exist_ok=True)
        if libc.unshare(CLONE_NEWNS) == 0:
            # Private first: a mount in a copy of a shared tree would show on the host.
            check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, MS_PRIVATE)")
        check(libc.mount(b"lovia-mcp-doctor", target.encode(), b"tmpfs", 0, None), f"mount(tmpfs on {target})")
        umount(target)

    in_child(mount)
    return f"mounted a tmpfs on {a['path']}"


def p_namespace(a: Args) -> str:
    """Make a user namespace, then a network namespace (the first step of most container escapes)."""
    made: list[str] = []
    refused: list[OSError] = []
    for flag, name in ((CLONE_NEWUSER, "user"), (CLONE_NEWNET, "network")):

        def unshare(flag: int = flag, name: str = name) -> int:
            return check(libc.unshare(flag), f"unshare(CLONE_NEW{name.upper()})")

        try:
            in_child(unshare)
            made.append(name)
        except OSError as exc:
            refused.append(exc)
    if not made:
        raise refused[0]
    return f"made a new {' and a new '.join(made)} namespace"


def with_sleeping_child(fn: Callable[[int], str]) -> str:
    """``fn(pid)`` of a forked child that waits, doing nothing, until ``fn`` returns."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    try:
        return fn(pid)
    finally:
        os.close(w)
        os.waitpid(pid, 0)


def p_ptrace(a: Args) -> str:
    """ptrace a process (its own child: the least any debugger-style attack needs)."""

    def seize(pid: int) -> str:
        sys_call("ptrace", PTRACE_SEIZE, pid, 0, 0)
        return f"seized process {pid} with ptrace"

    return with_sleeping_child(seize)


PROBES = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("p_")}


def run(name: str, args: Args) -> str:
    """One probe's answer: ``escaped: ...`` or ``held: ...``."""
    probe = PROBES.get(name)
    if probe is None:
        return f"error: no probe {name!r}"
    try:
        return "escaped: " + str(probe(args))
    except OSError as exc:
        return f"held: {exc.strerror or exc}"
    except Exception as exc:  # noqa: BLE001 - a broken probe answers, never kills the server
        return f"error: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- #
# The stdio MCP server: one JSON-RPC message per line each way.
# --------------------------------------------------------------------------- #
TOOL = {
    "name": "probe",
    "description": "Try one escape from the box; answers 'escaped: ...' or 'held: ...'.",
    "inputSchema": {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": sorted(PROBES)}, "args": {"type": "object"}},
        "required": ["name"],
    },
}


def _send(obj: Args) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if "id" not in msg or not isinstance(method, str):
            continue  # a notification, or a response nobody here asked for
        if method == "initialize":
            res: Args = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "lovia-mcp-doctor-probes", "version": "1"},
            }
        elif method == "tools/list":
            res = {"tools": [TOOL]}
        elif method == "tools/call":
            arguments = params.get("arguments") or {}
            text = run(str(arguments.get("name")), arguments.get("args") or {})
            res = {"content": [{"type": "text", "text": text}]}
        elif method == "ping":
            res = {}
        else:
            _send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
            continue
        _send({"jsonrpc": "2.0", "id": rid, "result": res})


__all__ = ["PROBES", "TOOL", "run", "serve"]

if __name__ == "__main__":
    serve()
