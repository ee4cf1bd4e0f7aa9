"""Issue 17's escapes: each works without the sandbox (as root, as the machine runs us) and fails inside it.

``tests/servers/escape_server.py``'s ``probe`` tool tries each escape the way
a hostile server would: the plain way first, then, when blocked, lifting
the block (unmount what covers a path, remount ``/`` read-write, unmount
``/proc`` to reach the host's, ``setns`` into the host's network). The
same probe runs in an unsandboxed server (it must succeed: the escape is
real, and the test can fail) and in a sandboxed one (it must fail).

One server per sandbox shape is shared by the whole module (start-up cost):
unsandboxed, ``network=False``, ``network=True`` and a network allowlist.
:data:`PROBES` is the table: which shape runs a probe and what each backend
must give; a backend is one more key (the Landlock engineer's
``"landlock"``), parametrised in :func:`test_each_escape_fails_in_the_sandbox`.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import socket
import subprocess
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from helpers import DOCTOR_PROBES, ESCAPE_SERVER, PY, RAW_SERVER, EscapePlace, as_nobody, register_shared, run
from lovia_mcp_worker.sandbox import bwrap, landlock, seccomp

from lovia_mcp import MCPServerStdio, Sandbox

pytestmark = pytest.mark.skipif(bwrap.BWRAP is None, reason="bubblewrap is not available (Linux only)")

# Bound on one open or one probe, with margin for a loaded 2-core CI.
CALL_WAIT = 30.0
# Bound on the shared loop thread's exit at the end of the module.
JOIN_WAIT = 10.0
# Bound on the ordinary-user agent's whole run (interpreter, worker, bwrap, one call).
NOBODY_WAIT = 60.0

T = TypeVar("T")


@dataclass(frozen=True)
class Probe:
    """One escape: the probe's name in escape_server.py, what it tries, which sandbox shape runs it."""

    name: str
    tries: str
    shape: str = "off"  # "off": network=False; "on": network=True; "list": a network allowlist
    # Unsandboxed, it succeeds (root's means); None where there is nothing to
    # try outside a sandbox (the bridge exists only inside one).
    bare: bool | None = True
    # What each backend must give: True denied; "allowed" a limit of that
    # backend, documented in docs/sandbox.md, asserted as such; False: the
    # probe does not apply.
    expect: dict[str, bool | str] = field(default_factory=lambda: {"bwrap": True, "landlock": True})


PROBES: list[Probe] = [
    Probe("hidden_secret", "read a hidden= secret file, unmounting what covers it"),
    Probe("hidden_dir_secret", "read a key in a hidden= folder, unmounting what covers it"),
    Probe("write_host", "write a host file outside cwd/writable, remounting / read-write"),
    Probe("agent_environ", "read the agent's /proc/PID/environ, unmounting /proc to see the host's"),
    Probe("agent_mem", "read the agent's memory through /proc/PID/mem"),
    Probe("setns_net", "connect to a host loopback listener, setns() into the host's network namespace"),
    Probe("proc_sys_write", "open /proc/sys/kernel/core_pattern for writing"),
    Probe("sysfs_write", "open a /sys knob for writing"),
    Probe("kernel_knobs", "open any file under /proc (but processes) or /sys for writing"),
    Probe("cgroup_write", "open a cgroup.procs for writing (to leave the worker's cgroup)"),
    Probe("keyring", "read a key from the user's keyring (keyctl)"),
    # Landlock cannot carve /proc/keys out of /proc: the key's description is
    # listed (its payload stays unreadable: keyctl is refused).
    Probe("proc_keys", "list the user's keys in /proc/keys", expect={"bwrap": True, "landlock": "allowed"}),
    Probe("tiocsti", "inject input into a terminal with TIOCSTI, remounting the host's /dev"),
    Probe("unix_connect", "connect() to a pathname unix socket on the host (the Docker-socket case)"),
    Probe("unix_dgram_send", "send a datagram to a host unix socket (syslog, the journal) from a socketpair()"),
    Probe("unix_seqpacket_send", "the same from a seqpacket socketpair()"),
    Probe("abstract_unix_connect", "connect() to a host abstract unix socket, with the host's network", shape="on"),
    # Landlock's proxy listens on a loopback port: there is no socket folder.
    Probe("folder_write", "write into the network proxy's socket folder", shape="list", expect={"bwrap": True}),
    Probe(
        "other_mem",
        "open another process's memory for writing (bwrap's init and the network bridge may make AF_UNIX sockets)",
        shape="list",
    ),
    Probe("capabilities", "hold an effective capability"),
    Probe("new_userns", "create a user namespace"),
    # The allowlist's box runs under a filter without the AF_UNIX rule (bwrap's
    # init and the bridge need it) with the full one stacked on the server.
    Probe("list/unix_connect", "connect() to a host unix socket, in the allowlist's box", shape="list"),
    Probe("list/keyring", "read a key from the user's keyring, in the allowlist's box", shape="list"),
    Probe("list/new_userns", "create a user namespace, in the allowlist's box", shape="list"),
    Probe("ptrace", "ptrace a process (its own child)"),
    Probe("process_vm_readv", "read another process's memory with process_vm_readv"),
    Probe("process_vm_writev", "write another process's memory with process_vm_writev"),
    Probe("io_uring", "io_uring_setup"),
    Probe("bpf", "create a BPF map"),
    Probe("perf_event_open", "open a perf counter"),
    Probe("open_by_handle", "open a file by handle (the 'shocker' escape)"),
    # Issue 34: what outlives the box, and what the filter hid.
    Probe(
        "setuid_file",
        "leave a setuid/setgid file in its cwd (chmod 6755 on a copy of /bin/sh, "
        "open(O_CREAT, 04755), mkdir 02777, mknod 04755): a root shell for any host user later",
    ),
    Probe("fifo_device", "leave a FIFO, a device node or a socket file in its cwd (mkfifo, mknod, a whiteout)"),
    Probe("sock_diag", "list the host's TCP sockets (its services and their peers) through NETLINK_SOCK_DIAG"),
    Probe("list/sock_diag", "the same, in the allowlist's box", shape="list"),
    # Read directly, not through a refused call: with --unshare-user dropped
    # from bwrap's arguments, every other probe still fails (the filter hides
    # it) while the server is the host's root with a full bounding set.
    # Landlock never makes namespaces: the agent's user namespace is its design.
    Probe("host_userns", "run in the agent's user namespace (/proc/self/ns/user, the uid map)", expect={"bwrap": True}),
    Probe("bounding_set", "hold a capability in the bounding, permitted, inheritable or ambient set"),
]
BACKENDS = ["bwrap"] + (["landlock"] if landlock.ABI >= landlock.NETWORK_ABI else [])


def _probe_tool_name(probe: Probe) -> str:
    """The escape_server probe behind a table entry ("list/x" is probe x in another shape)."""
    return {
        "hidden_dir_secret": "hidden_secret",
        "abstract_unix_connect": "unix_connect",
        "unix_seqpacket_send": "unix_dgram_send",
    }.get(_base(probe), _base(probe))


def _base(probe: Probe) -> str:
    return probe.name.rsplit("/", 1)[-1]


class LoopThread:
    """An event loop on a daemon thread, so that connections outlive a single test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="escape-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_WAIT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(JOIN_WAIT)
        if not self.thread.is_alive():
            self.loop.close()


def _listen_tcp() -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))
    return listener


def _serve(listener: socket.socket, greeting: bytes) -> threading.Thread:
    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(greeting)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


_KEY_SPEC_USER_KEYRING = -4


def _keyring_call(name: str, *args: object) -> int:
    # libkeyutils is not always installed: the system calls themselves.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr = seccomp.SYSCALLS[os.uname().machine][name]
    return int(libc.syscall(ctypes.c_long(nr), *args))


def _add_user_key(description: str, payload: bytes) -> int | None:
    key = _keyring_call("add_key", b"user", description.encode(), payload, len(payload), _KEY_SPEC_USER_KEYRING)
    return None if key < 0 else key


def _unlink_user_key(key: int) -> None:
    _keyring_call("keyctl", 9, key, _KEY_SPEC_USER_KEYRING)  # KEYCTL_UNLINK


class World(EscapePlace):
    """What the probes aim at: a secret, the agent, listeners, a terminal, a key; and the servers."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, f"escape17-{os.getpid()}")
        (self.outside / "handle.txt").write_text("read by handle\n")
        self.tcp = _listen_tcp()
        self.unix_path = str(self.outside / "host.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        self.abstract_name = f"lovia-escape17-{os.getpid()}"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen()
        self.threads = [_serve(s, b"host says hi") for s in (self.tcp, self.unix, self.abstract)]
        self.dgram_path = str(self.outside / "host-dgram.sock")
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind(self.dgram_path)
        self.pty_master, self.pty_slave = os.openpty()
        self.key_description = f"lovia-escape17-{os.getpid()}"
        self.key = _add_user_key(self.key_description, b"KEYRING SECRET")
        self.folder = ""  # the proxy's socket folder, as the allowlist sandbox sees it

    def args(self, probe: Probe) -> dict[str, object]:
        me = os.getpid()
        return {
            "hidden_secret": {"path": str(self.home / ".netrc")},
            "hidden_dir_secret": {"path": str(self.home / ".ssh" / "id_rsa")},
            "write_host": {"path": str(self.outside / f"written-{probe.shape}")},
            "agent_environ": {"pid": me},
            "agent_mem": {"pid": me},
            "setns_net": {"pid": me, "port": self.tcp.getsockname()[1]},
            "keyring": {"description": self.key_description},
            "proc_keys": {"description": self.key_description},
            "tiocsti": {"tty": os.ttyname(self.pty_slave)},
            "unix_connect": {"path": self.unix_path},
            "unix_dgram_send": {"path": self.dgram_path},
            "unix_seqpacket_send": {"path": self.dgram_path, "pair": "seqpacket"},
            "abstract_unix_connect": {"path": "@" + self.abstract_name},
            "folder_write": {"folder": self.folder},
            "open_by_handle": {"path": str(self.outside / "handle.txt")},
            "sock_diag": {"port": self.tcp.getsockname()[1]},
            "host_userns": {"host": os.readlink("/proc/self/ns/user")},
        }.get(_base(probe), {})

    def server(self, box: Sandbox | None, env: dict[str, str] | None = None, **kw: Any) -> MCPServerStdio:
        return super().server(box, {"LOVIA_MCP_HOST_MNT": os.readlink("/proc/self/ns/mnt"), **(env or {})}, **kw)

    def close(self) -> None:
        for s in (self.tcp, self.unix, self.abstract, self.dgram):
            s.close()
        for fd in (self.pty_master, self.pty_slave):
            os.close(fd)
        if self.key is not None:
            _unlink_user_key(self.key)
        super().close()


SHAPES: dict[str, Sandbox | None] = {
    "bare": None,
    "off": Sandbox(network=False),
    "on": Sandbox(network=True),
    "list": Sandbox(network=["localhost"]),
}


def _sandbox(shape: str, backend: str) -> Sandbox | None:
    box = SHAPES[shape]
    return None if box is None else msgspec.structs.replace(box, backend=backend)  # type: ignore[arg-type]


class Servers:
    def __init__(self, world: World, loop: LoopThread) -> None:
        self.world, self.loop = world, loop
        self.conns: dict[tuple[str, str], Any] = {}
        self.servers: list[MCPServerStdio] = []

    def conn(self, shape: str, backend: str = "bwrap") -> Any:
        key = (shape, "none" if shape == "bare" else backend)
        if key not in self.conns:
            server = self.world.server(None if shape == "bare" else _sandbox(shape, backend))
            self.servers.append(server)
            conn = self.loop.run(server.open())
            if conn.worker_pid is not None:
                register_shared(conn.worker_pid)
            self.conns[key] = conn
        return self.conns[key]

    def probe(self, shape: str, probe: Probe, backend: str = "bwrap") -> str:
        conn = self.conn(shape, backend)
        if probe.name == "folder_write" and not self.world.folder:
            listed = self.call(self.conn("list", backend), "ls", {"pattern": "/tmp/lovia-mcp-net-*"})
            assert listed.startswith("ok /tmp/"), listed
            self.world.folder = listed.split()[1]
        args = {"name": _probe_tool_name(probe), "args": self.world.args(probe)}
        return self.call(conn, "probe", args)

    def call(self, conn: Any, name: str, args: dict[str, object]) -> str:
        if name == "ls":
            name, args = "probe", {"name": "ls", "args": args}
        return str(self.loop.run(asyncio.wait_for(conn.call_tool(name, args), CALL_WAIT), CALL_WAIT + 5))

    def close(self) -> None:
        for conn in self.conns.values():
            try:
                self.loop.run(conn.close())
            except Exception:  # noqa: BLE001 - close the others whatever one did
                pass


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    world = World(tmp_path_factory.mktemp("escape17"))
    loop = LoopThread()
    s = Servers(world, loop)
    try:
        yield s
    finally:
        s.close()
        loop.close()
        world.close()


def _needs(probe: Probe, world: World) -> str | None:
    """Why this machine cannot show the escape unsandboxed, if it cannot."""
    if probe.name == "tiocsti" and Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "0":
        return "the kernel refuses TIOCSTI to everyone (dev.tty.legacy_tiocsti=0)"
    if _base(probe) in ("keyring", "proc_keys") and world.key is None:
        return "no user keyring here"
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="the escapes need root's means unsandboxed")
@pytest.mark.parametrize("probe", [p for p in PROBES if p.bare], ids=lambda p: p.name)
def test_each_escape_works_without_the_sandbox(servers: Servers, probe: Probe) -> None:
    why = _needs(probe, servers.world)
    if why:
        pytest.skip(why)
    # Shape "on"/"list" only matter for where the target is visible; bare sees it all.
    if probe.shape == "list":
        servers.probe("list", probe)  # makes the proxy's folder exist, and finds it
    out = servers.probe("bare", probe)
    print(probe.name, "|", probe.tries, "|", out)
    assert out.startswith("ok"), out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_each_escape_fails_in_the_sandbox(servers: Servers, probe: Probe, backend: str) -> None:
    outcome = probe.expect.get(backend, False)
    if outcome is False:
        pytest.skip(f"{probe.name} does not apply to the {backend} backend")
    out = servers.probe(probe.shape, probe, backend)
    print(backend, probe.shape, probe.name, "|", out)
    if outcome == "allowed":  # the backend's documented limit: asserted, so a change shows
        assert out.startswith("ok"), out
        return
    assert out.startswith("denied"), out


def _reached(port: int, marker: str) -> str:
    """What a client on the host gets from ``port`` (the box's marker when its listener is reachable)."""
    seen = []
    for host in ("127.0.0.1", "::1"):
        try:
            with socket.create_connection((host, port), timeout=CALL_WAIT) as client:
                client.settimeout(CALL_WAIT)
                got = client.recv(100).decode(errors="replace")
        except OSError as exc:
            seen.append(f"{host}: {exc.strerror or exc}")
            continue
        if got == marker:
            return got
        seen.append(f"{host}: {got!r}")
    return "; ".join(seen)


def _listen(servers: Servers, shape: str, backend: str) -> tuple[str, str, str]:
    """The box's listen() with no bind(): its answer, the marker, and what a host client got."""
    marker = f"boxed-{shape}-{backend}-{os.getpid()}"
    out = servers.call(servers.conn(shape, backend), "probe", {"name": "listen_no_bind", "args": {"marker": marker}})
    got = _reached(int(out.split()[-1]), marker) if out.startswith("ok listening on port") else ""
    # A listener nobody reached (bwrap's) would hold a descriptor the next tests count.
    servers.call(servers.conn(shape, backend), "probe", {"name": "listen_close", "args": {}})
    print(shape, backend, "|", out, "|", got)
    return out, marker, got


def test_a_listen_without_bind_is_reachable_from_the_host_without_the_sandbox(servers: Servers) -> None:
    out, marker, got = _listen(servers, "bare", "none")
    assert out.startswith("ok listening on port"), out
    assert got == marker


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ["off", "list"])
def test_a_listen_without_bind_is_not_reachable_from_the_host_with_the_network_closed(
    servers: Servers, shape: str, backend: str
) -> None:
    """Issue 34: the kernel binds a listening socket that was never bound to a port on every interface.

    Landlock's bind rule does not see that implicit bind, so the filter refuses
    ``listen``; bwrap's box listens in a network namespace of its own.
    """
    out, marker, got = _listen(servers, shape, backend)
    assert got != marker
    if backend == "landlock":
        assert out.startswith("denied") and "not permitted" in out, out


def test_the_sandboxed_server_keeps_no_descriptor_but_its_stdio(servers: Servers) -> None:
    # The seccomp program's memfd goes to bwrap (which reads it) or the bridge (which closes it).
    for shape in ("off", "list"):
        out = servers.call(servers.conn(shape), "probe", {"name": "ls", "args": {"pattern": "/proc/self/fd/*"}})
        fds = sorted(int(p.rsplit("/", 1)[1]) for p in out.split()[1:])
        print(shape, fds)
        # 0-2, and the descriptor glob itself opened to list the folder.
        assert len([fd for fd in fds if fd > 2]) <= 1, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sandboxed_open_works_for_an_ordinary_user(backend: str) -> None:
    """The worker, bwrap and the server as nobody."""
    agent = (
        "import asyncio, sys\n"
        "from lovia_mcp import MCPServerStdio, Sandbox\n"
        "async def main():\n"
        "    s = MCPServerStdio(command=sys.executable, args=[sys.argv[2]], cwd=sys.argv[1],\n"
        "                       sandbox=Sandbox(backend=sys.argv[3]))\n"
        "    async with s.session() as c:\n"
        "        print(await c.call_tool('echo', {'text': 'hello as nobody'}), (await c.stats()).sandbox)\n"
        "asyncio.run(main())\n"
    )
    proc = as_nobody(agent, RAW_SERVER, backend)
    assert proc.stdout.strip() == f"hello as nobody {backend}"


# Issue 34's attacks as an ordinary user: the escape server bare, then boxed,
# each probe's answer as JSON; the agent is the host client of the listener.
NOBODY_PROBES = r"""
import asyncio, json, socket, sys
from lovia_mcp import MCPServerStdio, Sandbox
from lovia_mcp.doctor import probes as doctor_probes
cwd, escape, backend, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def reached(port, marker):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.settimeout(10)
            return c.recv(100).decode(errors="replace")
    except OSError as exc:
        return str(exc)
async def probes(box):
    out = {}
    server = MCPServerStdio(command=sys.executable, args=[escape, doctor_probes.__file__], cwd=cwd, sandbox=box)
    async with server.session() as c:
        for name, args in (("setuid_file", {}), ("fifo_device", {}), ("sock_diag", {"port": port}),
                           ("listen_no_bind", {"marker": "boxed"})):
            text = str(await c.call_tool("probe", {"name": name, "args": args}))
            if name == "listen_no_bind" and text.startswith("ok"):
                text += " | the host got " + reached(int(text.split()[-1]), "boxed")
            out[name] = text
    return out
print(json.dumps({"bare": asyncio.run(probes(None)), "box": asyncio.run(probes(Sandbox(backend=backend)))}))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_ordinary_users_server_leaves_no_setuid_file_or_fifo_and_cannot_list_or_listen(backend: str) -> None:
    """Issue 34 as nobody: each attack works on the bare server and fails in the box."""
    with socket.create_server(("127.0.0.1", 0)) as host:
        proc = as_nobody(NOBODY_PROBES, ESCAPE_SERVER, backend, str(host.getsockname()[1]))
    seen = json.loads(proc.stdout)
    for name, out in seen["bare"].items():
        assert out.startswith("ok"), (name, out)
    assert seen["bare"]["listen_no_bind"].endswith("the host got boxed")
    for name, out in seen["box"].items():
        if name == "listen_no_bind" and backend == "bwrap":  # a network namespace of its own
            assert not out.endswith("the host got boxed"), out
        else:
            assert out.startswith("denied"), (name, out)


REFUSING_AGENT = r"""
import asyncio, sys
from lovia_mcp import MCPError, MCPServerStdio, Sandbox
from lovia_mcp_worker.sandbox import seccomp
# What Docker's default profile does to bubblewrap: no new user namespaces
# for this process and everything it starts (the worker, bwrap).
seccomp.install(seccomp.deny_new_user_namespaces())
async def main():
    server = MCPServerStdio(command=sys.executable, args=[sys.argv[1]], sandbox=Sandbox(backend="bwrap"))
    try:
        await server.open()
    except MCPError as exc:
        print("refused:", exc.kind, exc)
        return
    print("opened: the server ran")
asyncio.run(main())
"""


def test_where_user_namespaces_are_refused_the_namespace_backend_fails_loudly_with_a_hint() -> None:
    proc = subprocess.run([PY, "-c", REFUSING_AGENT, RAW_SERVER], capture_output=True, text=True, timeout=NOBODY_WAIT)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused: open"), proc.stdout
    assert "user namespaces" in proc.stdout


def test_a_warm_spare_of_a_sandboxed_server_is_sandboxed_and_filtered(tmp_path: Path) -> None:
    from lovia_mcp import close_spares, warm_spares

    async def main() -> tuple[str, str, str]:
        server = MCPServerStdio(
            command=PY,
            args=[ESCAPE_SERVER, DOCTOR_PROBES],
            cwd=str(tmp_path),
            sandbox=Sandbox(),
            spares=1,
            env={"LOVIA_MCP_HOST_MNT": os.readlink("/proc/self/ns/mnt")},
        )
        try:
            assert await warm_spares(server) == 1
            conn = await server.open()  # the spare
            try:
                seen = str(await conn.call_tool("procs", {}))
                userns = str(await conn.call_tool("probe", {"name": "new_userns", "args": {}}))
                agent = str(await conn.call_tool("environ", {"pid": os.getpid()}))
            finally:
                await conn.close()
        finally:
            await close_spares()
        return seen, userns, agent

    seen, userns, agent = run(main())
    print(seen, "|", userns, "|", agent)
    assert int(seen.split()[1]) <= 3
    assert userns.startswith("denied") and "not permitted" in userns
    assert agent.startswith("denied")


def test_a_bubblewrap_too_old_for_the_hardening_is_named_with_a_hint() -> None:
    why = bwrap.setup_error(1, ["bwrap: Unknown option --disable-userns"])
    assert why is not None and "0.8 or later" in why and "--disable-userns" in why
