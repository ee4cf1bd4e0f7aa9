"""The escapes of issue 17, one function per probe (``p_NAME``), for ``escape_server.py``'s ``probe`` tool.

Standard library only: each tries an escape with root's means (ctypes
system calls), the plain way first and, when blocked, lifting the block,
and returns what it saw or raises OSError. A block is lifted only inside a
mount namespace of the probe's own (``LOVIA_MCP_HOST_MNT`` names the
agent's), so an unsandboxed run never touches the host's mounts.

The system-call table and the helpers (``sys_call``, ``check``, ``lift``,
``twice``, ``in_child``, ``with_sleeping_child``...) are the doctor's (``lovia_mcp/doctor/probes.py``,
loaded from its file: a box cannot import the ``lovia_mcp`` package); a
server that runs these probes names that file in its arguments, so that
either sandbox lets it read it (:data:`DOCTOR_PROBES`).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import json
import os
import shutil
import socket
import stat
import struct
import sys
import threading
from pathlib import Path

from escape_basics import CONNECT_WAIT, connect, environ, read, write

DOCTOR_PROBES = str(Path(__file__).resolve().parents[2] / "lovia_mcp" / "doctor" / "probes.py")


def _doctor():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("lovia_mcp_doctor_probes", DOCTOR_PROBES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_d = _doctor()
libc, sys_call, check = _d.libc, _d.sys_call, _d.check
lift, twice, umount, remount_rw, in_child = _d.lift, _d.twice, _d.umount, _d.remount_rw, _d.in_child
with_sleeping_child = _d.with_sleeping_child
CLONE_NEWUSER, CLONE_NEWNET = _d.CLONE_NEWUSER, _d.CLONE_NEWNET
TIOCSTI = 0x5412
# How long a probe's own listener waits for the test to connect: the test connects right after the
# call returns, or finds it unreachable; the bound only ends the listener's thread when nobody came.
LISTEN_WAIT = 10


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


def p_new_userns(a: dict) -> str:
    return in_child(lambda: check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)"))


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


def p_process_vm_writev(a: dict) -> str:
    """Write into another process's memory (its own child here: same user, no ptrace needed)."""
    marker = ctypes.create_string_buffer(b"in the child's memory")
    planted = ctypes.create_string_buffer(b"written by the server")

    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    def write_child(pid: int) -> str:
        local = Iovec(ctypes.addressof(planted), len(marker))
        remote = Iovec(ctypes.addressof(marker), len(marker))
        n = sys_call("process_vm_writev", pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        return f"wrote {n} bytes into process {pid}"

    return with_sleeping_child(write_child)


def p_syscalls(a: dict) -> str:
    """Each system call of ``a["calls"]`` ([label, number, [integer arguments]]) in a forked child of
    its own (a call that succeeds changes nothing for the next): a JSON object of label to errno, 0
    where the call succeeded."""
    out = {}
    for label, nr, args in a["calls"]:
        pid = os.fork()
        if pid == 0:
            ret = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in args])
            os._exit(ctypes.get_errno() if ret == -1 else 0)
        _, status = os.waitpid(pid, 0)
        out[label] = os.waitstatus_to_exitcode(status)
    return json.dumps(out)


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


def made(path: str, what: str, create) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """Run ``create``; what the file system then holds at ``path`` (its mode, 0 if nothing), removed again."""
    try:
        create()
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"{what}: refused ({exc.strerror or exc})", 0
    finally:
        try:
            os.rmdir(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        except OSError:
            pass
    return f"{what}: made {stat.filemode(mode)}", mode


def left_behind(results: list[tuple[str, int]], wanted) -> str:  # type: ignore[no-untyped-def]
    """``ok`` if any way left such a file (it would outlive the box, on the host), else the refusals."""
    text = "; ".join(r for r, _ in results)
    if any(mode and wanted(mode) for _, mode in results):
        return text
    raise PermissionError(1, text)


def p_setuid_file(a: dict) -> str:
    """Leave a setuid/setgid file in the cwd, four ways; a host user who reaches the folder later runs it.

    As root, the copy of /bin/sh made 6755 is a root shell for anyone; as an
    ordinary user, one that runs as that user.
    """
    base = os.path.join(os.getcwd(), f"suid-{os.getpid()}")

    def chmod_copy() -> None:
        shutil.copyfile("/bin/sh", base + "-sh")
        os.chmod(base + "-sh", 0o6755)

    results = [
        made(base + "-sh", "chmod 6755", chmod_copy),
        made(
            base + "-open",
            "open(O_CREAT, 04755)",
            lambda: os.close(os.open(base + "-open", os.O_CREAT | os.O_WRONLY, 0o4755)),
        ),
        made(base + "-dir", "mkdir 02777", lambda: os.mkdir(base + "-dir", 0o2777)),
        made(base + "-node", "mknod 04755", lambda: os.mknod(base + "-node", stat.S_IFREG | 0o4755)),
    ]
    try:  # the copy stays if only its chmod was refused
        os.unlink(base + "-sh")
    except OSError:
        pass
    return left_behind(results, lambda mode: mode & (stat.S_ISUID | stat.S_ISGID))


AT_FDCWD, RENAME_WHITEOUT = -100, 4


def p_fifo_device(a: dict) -> str:
    """Leave a FIFO, a device node or a socket file in the cwd: a host program that opens the path
    later blocks, or reaches a device. A whiteout (character device 0:0) needs no capability."""
    base = os.path.join(os.getcwd(), f"node-{os.getpid()}")

    def whiteout() -> None:
        with open(base + "-moved", "w"):
            pass
        try:
            sys_call(
                "renameat2", AT_FDCWD, (base + "-moved").encode(), AT_FDCWD, (base + "-to").encode(), RENAME_WHITEOUT
            )
        finally:
            for path in (base + "-moved", base + "-to"):
                if os.path.isfile(path):
                    os.unlink(path)

    results = [
        made(base + "-moved", "renameat2(RENAME_WHITEOUT)", whiteout),
        made(base + "-fifo", "mkfifo", lambda: os.mkfifo(base + "-fifo", 0o666)),
        made(base + "-chr", "mknod c 0 0", lambda: os.mknod(base + "-chr", stat.S_IFCHR | 0o666, os.makedev(0, 0))),
        made(base + "-null", "mknod c 1 3", lambda: os.mknod(base + "-null", stat.S_IFCHR | 0o666, os.makedev(1, 3))),
        made(base + "-sock", "mknod socket", lambda: os.mknod(base + "-sock", stat.S_IFSOCK | 0o666)),
    ]
    return left_behind(results, lambda mode: not stat.S_ISREG(mode) and not stat.S_ISDIR(mode))


# The listeners p_listen_no_bind left, with their threads: p_listen_close ends them.
LISTENERS: list[tuple[socket.socket, threading.Thread]] = []


def p_listen_no_bind(a: dict) -> str:
    """listen() on a TCP socket never bound: the kernel binds it to an ephemeral port on every interface.

    One connection is served ``marker`` from a thread; the test connects from
    the host, then ends the listener with p_listen_close if nobody reached it.
    """
    family = socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.listen()
    except OSError:
        s.close()
        raise
    port = s.getsockname()[1]
    marker = a["marker"].encode()

    def serve() -> None:
        s.settimeout(LISTEN_WAIT)
        try:
            conn, _ = s.accept()
            with conn:
                conn.sendall(marker)
        except OSError:
            pass
        finally:
            s.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    LISTENERS.append((s, thread))
    return f"listening on port {port}"


def p_listen_close(a: dict) -> str:
    """End the listeners of p_listen_no_bind (shutdown wakes the accept; its thread closes the socket)."""
    ended = 0
    while LISTENERS:
        s, thread = LISTENERS.pop()
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already: it served its connection
        thread.join(LISTEN_WAIT)
        ended += 1
    return f"{ended} ended"


# linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h.
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 1, 0x300, 2, 3
IPPROTO_TCP, TCP_ALL_STATES = 6, 0xFFFFFFFF


def tcp_ports_by_sock_diag() -> set[int]:
    """Every local TCP port the kernel lists through NETLINK_SOCK_DIAG (what ``ss -t`` reads)."""
    ports: set[int] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as s:
        s.settimeout(CONNECT_WAIT)
        for family in (socket.AF_INET, socket.AF_INET6):
            # struct inet_diag_req_v2: family, protocol, ext, pad, states, then a zeroed inet_diag_sockid (48).
            req = struct.pack("=BBBxI48x", family, IPPROTO_TCP, 0, TCP_ALL_STATES)
            s.send(struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req)
            done = False
            while not done:
                data = s.recv(65536)
                off = 0
                while off + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, off)
                    if kind == NLMSG_DONE:
                        done = True
                        break
                    if kind == NLMSG_ERROR:
                        err = -struct.unpack_from("=i", data, off + 16)[0]
                        raise OSError(err, f"sock_diag: {os.strerror(err)}")
                    # struct inet_diag_msg: family, state, timer, retrans, then the sockid (sport first, big-endian).
                    ports.add(struct.unpack_from(">H", data, off + 16 + 4)[0])
                    off += (length + 3) & ~3
    return ports


def p_sock_diag(a: dict) -> str:
    """List the host's TCP sockets (its listening services and their peers) through netlink."""
    ports = tcp_ports_by_sock_diag()
    if int(a["port"]) not in ports:
        raise PermissionError(13, f"the host's listener is not listed ({len(ports)} TCP sockets seen)")
    return f"the host's listener on port {a['port']} is listed among {len(ports)} TCP sockets"


def status_fields(*names: str) -> dict[str, int]:
    out = {}
    for line in read_all("/proc/self/status").splitlines():
        key, _, value = line.partition(":")
        if key in names:
            out[key] = int(value.strip(), 16)
    return out


def p_host_userns(a: dict) -> str:
    """Run in the agent's user namespace (uid 0 there is the host's root): read the namespace
    itself and the uid map, which no system call filter can hide."""
    ns = os.readlink("/proc/self/ns/user")
    uid_map = " ".join(read_all("/proc/self/uid_map").split())
    if ns == a["host"] or uid_map == "0 0 4294967295":
        return f"{ns}, uid map {uid_map!r}"
    raise PermissionError(1, f"a user namespace of its own ({ns}, the agent's is {a['host']}; uid map {uid_map!r})")


def p_bounding_set(a: dict) -> str:
    """Hold any capability in the bounding, permitted, inheritable or ambient set (regained at an exec)."""
    caps = status_fields("CapBnd", "CapPrm", "CapInh", "CapAmb", "CapEff")
    held = {k: f"{v:x}" for k, v in caps.items() if v}
    if held:
        return f"capabilities held: {held}"
    raise PermissionError(1, f"every capability set is empty ({sorted(caps)})")


PROBES = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("p_")}
