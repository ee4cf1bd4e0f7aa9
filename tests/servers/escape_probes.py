"""The escapes of issue 17, one function per probe (``p_NAME``), for ``escape_server.py``'s ``probe`` tool.

Standard library only: each tries an escape with root's means (ctypes
system calls), the plain way first and, when blocked, lifting the block,
and returns what it saw or raises OSError. A block is lifted only inside a
mount namespace of the probe's own (``ESCAPE_HOST_MNT`` names the agent's),
so an unsandboxed run never touches the host's mounts.
"""

from __future__ import annotations

import ctypes
import glob
import os
import socket

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
MACHINE = os.uname().machine
NR = {
    "x86_64": {"ptrace": 101, "setns": 308, "process_vm_readv": 310, "bpf": 321, "perf_event_open": 298,
               "keyctl": 250, "io_uring_setup": 425, "name_to_handle_at": 303, "open_by_handle_at": 304},
    "aarch64": {"ptrace": 117, "setns": 268, "process_vm_readv": 270, "bpf": 280, "perf_event_open": 241,
                "keyctl": 219, "io_uring_setup": 425, "name_to_handle_at": 264, "open_by_handle_at": 265},
}[MACHINE]
MNT_DETACH = 2
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
TIOCSTI = 0x5412
# Bound on a connection to a listener the test opened: it answers at once, when it is reachable.
CONNECT_WAIT = 5


def sys_call(name: str, *args: object) -> int:
    # Every argument as a long: a plain int in a variadic call leaves the register's high half undefined.
    wide = [ctypes.c_long(x) if isinstance(x, int) else x for x in args]
    ret = int(libc.syscall(ctypes.c_long(NR[name]), *wide))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return ret


def check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def read(path: str) -> str:
    with open(path) as f:
        return f.read()[:200]


def write(path: str) -> str:
    with open(path, "w") as f:
        f.write("escaped\n")
    return path


def connect(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=CONNECT_WAIT) as s:
        return s.recv(100).decode()


def procs() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def environ(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return str(len(f.read()))


def own_mount_ns() -> bool:
    return os.readlink("/proc/self/ns/mnt") != os.environ.get("ESCAPE_HOST_MNT", os.readlink("/proc/self/ns/mnt"))


def lift(step, *args):  # type: ignore[no-untyped-def]
    """Try to lift a block (only in a mount namespace of our own); say how it went."""
    if not own_mount_ns():
        return "not tried (the host's mount namespace)"
    try:
        step(*args)
        return "lifted"
    except OSError as exc:
        return f"{exc.strerror or exc}"


def umount(path: str) -> None:
    check(libc.umount2(path.encode(), MNT_DETACH), f"umount2({path})")


def remount_rw(path: str) -> None:
    check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND, None), f"remount({path})")


def twice(goal, unblock, *args):  # type: ignore[no-untyped-def]
    """The goal; if blocked, lift the block and try once more."""
    try:
        return goal()
    except OSError as first:
        how = lift(unblock, *args)
        try:
            return f"{goal()} (after: {how})"
        except OSError as exc:
            raise OSError(exc.errno, f"{first.strerror or first}; lifting: {how}; then: {exc.strerror or exc}") from exc


def p_hidden_secret(a: dict) -> str:
    def goal() -> str:
        text = read(a["path"])
        if "SECRET" not in text:
            raise OSError(2, "the secret is not there")
        return text.strip()
    target = a["path"] if os.path.isfile(a["path"]) else os.path.dirname(a["path"])
    return twice(goal, umount, target)


def p_write_host(a: dict) -> str:
    return twice(lambda: write(a["path"]), remount_rw, "/")


def p_agent_environ(a: dict) -> str:
    return twice(lambda: environ(int(a["pid"])), umount, "/proc")


def p_agent_mem(a: dict) -> str:
    def goal() -> str:
        pid = int(a["pid"])
        with open(f"/proc/{pid}/maps") as f:
            start = int(f.readline().split("-")[0], 16)
        with open(f"/proc/{pid}/mem", "rb") as f:
            f.seek(start)
            return f"read {len(f.read(16))} bytes"
    return twice(goal, umount, "/proc")


def p_setns_net(a: dict) -> str:
    def goal() -> str:
        return connect("127.0.0.1", int(a["port"]))

    def enter_host_net() -> None:
        path = f"/proc/{int(a['pid'])}/ns/net"
        if not os.path.exists(path):
            umount("/proc")
        fd = os.open(path, os.O_RDONLY)
        try:
            sys_call("setns", fd, CLONE_NEWNET)
        finally:
            os.close(fd)

    try:
        return goal()
    except OSError as first:
        try:
            enter_host_net()
        except OSError as exc:
            raise OSError(exc.errno, f"{first.strerror or first}; setns: {exc.strerror or exc}") from exc
        return f"{goal()} (after setns)"


def p_proc_sys_write(a: dict) -> str:
    # Opened for writing, never written: that alone shows the knob is open.
    fd = os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)
    os.close(fd)
    return "core_pattern is writable"


# Opening these for writing does something, or they are harmless: PSI triggers
# are per open file; debugfs and tracefs open handlers may act.
KNOB_SKIP = ("/proc/pressure/", "/sys/kernel/debug", "/sys/kernel/tracing")


def p_kernel_knobs(a: dict) -> str:
    """Any file under /proc (but processes) or /sys that opens for writing: the first one found."""
    seen = 0
    for top in ("/proc", "/sys"):
        for root, dirs, files in os.walk(top):
            if root == "/proc":
                dirs[:] = [d for d in dirs if not d.isdigit() and d not in ("self", "thread-self")]
            dirs[:] = [d for d in dirs if not os.path.join(root, d).startswith(KNOB_SKIP)]
            for name in files:
                path = os.path.join(root, name)
                if path.startswith(KNOB_SKIP):
                    continue
                seen += 1
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY))
                except OSError:
                    continue
                return f"{path} is writable"
    raise PermissionError(13, f"none of {seen} files under /proc and /sys opens for writing")


def p_capabilities(a: dict) -> str:
    for line in read_all("/proc/self/status").splitlines():
        if line.startswith("CapEff:") and int(line.split()[1], 16):
            return line
    raise PermissionError(1, "no effective capability")


def p_sysfs_write(a: dict) -> str:
    fd = os.open("/sys/kernel/mm/transparent_hugepage/enabled", os.O_WRONLY)
    os.close(fd)
    return "a /sys knob is writable"


def p_cgroup_write(a: dict) -> str:
    """Open a cgroup.procs for writing: moving itself out would escape the worker's limits and tree kill."""
    tried = []
    for line in read_all("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        name = controllers.replace("name=", "") or "unified"
        for folder in {f"/sys/fs/cgroup/{name}{path}", f"/sys/fs/cgroup/{name}", "/sys/fs/cgroup"}:
            target = os.path.join(folder, "cgroup.procs")
            try:
                os.close(os.open(target, os.O_WRONLY))
                return f"{target} is writable"
            except OSError as exc:
                tried.append(exc)
    # The most telling refusal: one that found the file.
    found = [exc for exc in tried if exc.errno != 2]
    raise (found or tried or [OSError(2, "no cgroup found")])[0]


def p_keyring(a: dict) -> str:
    desc = a["description"].encode()
    key = sys_call("keyctl", 10, ctypes.c_long(-4), b"user", desc, 0)  # KEYCTL_SEARCH in @u
    buf = ctypes.create_string_buffer(256)
    n = sys_call("keyctl", 11, key, buf, 256)  # KEYCTL_READ
    return buf.raw[:n].decode()


def p_proc_keys(a: dict) -> str:
    text = read_all("/proc/keys")
    if a["description"] not in text:
        raise OSError(2, "the key is not listed")
    return "listed"


def read_all(path: str) -> str:
    with open(path) as f:
        return f.read()


def p_tiocsti(a: dict) -> str:
    def goal() -> str:
        fd = os.open(a["tty"], os.O_RDWR | os.O_NOCTTY)
        try:
            check(libc.ioctl(fd, TIOCSTI, ctypes.c_char_p(b"x")), "ioctl(TIOCSTI)")
        finally:
            os.close(fd)
        return "injected"
    return twice(goal, umount, "/dev")


def p_unix_connect(a: dict) -> str:
    path = a["path"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(CONNECT_WAIT)
        s.connect("\0" + path[1:] if path.startswith("@") else path)
        return s.recv(100).decode()


def p_unix_dgram_send(a: dict) -> str:
    """A datagram to a host unix socket (a syslog or journal socket) from a socketpair(), not socket()."""
    kind = {"dgram": socket.SOCK_DGRAM, "seqpacket": socket.SOCK_SEQPACKET}[a.get("pair", "dgram")]
    one, other = socket.socketpair(socket.AF_UNIX, kind)
    with one, other:
        one.sendto(b"from the box", a["path"])
    return "sent"


def p_ls(a: dict) -> str:
    return " ".join(sorted(glob.glob(a["pattern"])))


def p_folder_write(a: dict) -> str:
    return write(os.path.join(a["folder"], "planted"))


def in_child(fn) -> str:  # type: ignore[no-untyped-def]
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


def p_new_userns(a: dict) -> str:
    return in_child(lambda: check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)"))


def with_sleeping_child(fn):  # type: ignore[no-untyped-def]
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


def p_ptrace(a: dict) -> str:
    return with_sleeping_child(lambda pid: f"seized {pid} ({sys_call('ptrace', 0x4206, pid, 0, 0)})")


def p_process_vm_readv(a: dict) -> str:
    marker = ctypes.create_string_buffer(b"in the child's memory")

    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    def read_child(pid: int) -> str:
        out = ctypes.create_string_buffer(len(marker))
        local = Iovec(ctypes.addressof(out), len(marker))
        remote = Iovec(ctypes.addressof(marker), len(marker))
        sys_call("process_vm_readv", pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        return out.value.decode()

    return with_sleeping_child(read_child)


def p_io_uring(a: dict) -> str:
    params = ctypes.create_string_buffer(120)
    fd = sys_call("io_uring_setup", 1, params)
    os.close(fd)
    return "ring made"


def p_bpf(a: dict) -> str:
    attr = ctypes.create_string_buffer(bytes([2, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0]).ljust(64, b"\0"))
    fd = sys_call("bpf", 0, attr, 64)  # BPF_MAP_CREATE, an array of one
    os.close(fd)
    return "map made"


def p_perf_event_open(a: dict) -> str:
    attr = bytearray(128)
    attr[0:4] = (1).to_bytes(4, "little")  # PERF_TYPE_SOFTWARE, config 0: cpu clock
    attr[4:8] = (128).to_bytes(4, "little")
    attr[40] = 0x60  # exclude_kernel | exclude_hv
    fd = sys_call("perf_event_open", ctypes.create_string_buffer(bytes(attr)), 0, -1, -1, 0)
    os.close(fd)
    return "counter opened"


def p_open_by_handle(a: dict) -> str:
    handle = ctypes.create_string_buffer(128 + 8)
    handle[0:4] = (128).to_bytes(4, "little")
    mount_id = ctypes.c_int()
    sys_call("name_to_handle_at", -100, a["path"].encode(), handle, ctypes.byref(mount_id), 0)
    root = os.open("/", os.O_RDONLY)
    try:
        fd = sys_call("open_by_handle_at", root, handle, os.O_RDONLY)
    finally:
        os.close(root)
    with os.fdopen(fd) as f:
        return f.read()[:50].strip()


def p_other_mem(a: dict) -> str:
    """Open another process's memory for writing (in a sandbox: bwrap's init, the network bridge)."""
    me = os.getpid()
    for pid in sorted(int(n) for n in os.listdir("/proc") if n.isdigit()):
        if pid == me:
            continue
        for path in (f"/proc/{pid}/mem", f"/proc/{pid}/task/{pid}/mem"):
            try:
                os.close(os.open(path, os.O_RDWR))
            except OSError:
                continue
            return f"{path} open for writing"
    raise PermissionError(13, "no other process's memory could be opened")


PROBES = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("p_")}
