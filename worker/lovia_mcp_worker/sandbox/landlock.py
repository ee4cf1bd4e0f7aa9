"""The Landlock + seccomp backend: a sandbox without namespaces and without root.

Where user namespaces are refused (Docker's default seccomp profile,
Kubernetes ``RuntimeDefault``, Ubuntu 23.10+ for ordinary users), bubblewrap
cannot build its box. Landlock (Linux 5.13+) restricts the server in place,
through the kernel's own interface (``landlock_create_ruleset``,
``landlock_add_rule``, ``landlock_restrict_self``), and needs neither.

Lifecycle: :func:`prepare` runs in the worker before the spawn. It makes the
server's private temporary directory (``TMPDIR``) and builds the ruleset, a
file descriptor holding every rule, each made on a descriptor: the cwd,
``writable`` and ``readable`` paths on those the worker opened and checked
against their pins (:func:`~lovia_mcp_worker.sandbox.pinned.hold`), the
rest opened without following a symlink (:func:`open_unfollowed`).
:meth:`Plan.apply` runs in the child between fork and exec (the launch's
pre-exec, after the rlimits): the server enters its cwd by descriptor, the
capability bounding set, ambient and inheritable sets are cleared and every
capability dropped, ``no_new_privs`` set, the ruleset enforced, then the
seccomp filter installed. The worker closes its copy of the ruleset after
the spawn.

What the server may do:

- **read** the system directories (:data:`SYSTEM_READ`), ``/proc`` and
  ``/sys``, its own runtime (the command's folder and prefix, a venv's base
  interpreter, a ``#!`` interpreter), the folder of a script named in its
  arguments (its ``node_modules`` tree), cwd, ``readable=`` and ``writable=``;
  nothing else (the home directory, other projects);
- **write** its cwd, ``writable=`` and its private folder (``TMPDIR``, and
  ``HOME`` unless cwd, ``readable=`` or ``writable=`` cover the agent's home:
  tools treat an unreadable ``~/.gitconfig`` or cache as fatal), minus
  the protected entries (:mod:`.writedeny`) and ``read_only=``;
- **connect and bind TCP** (Landlock ABI 4+) only to the worker's proxy port
  with a network allowlist, to nothing with ``network=False``; the seccomp
  filter refuses UDP and raw sockets then, and unix sockets always;
- **signal and reach abstract unix sockets** (ABI 6+) only inside its own
  domain (its own tree).

``hidden=`` paths are never granted. Landlock has no deny rule, so a hidden
path (or a protected entry) under a granted folder is carved out by granting
the folder's other entries one by one instead of the folder (entries that
are symlinks are not followed). A folder carved for a *hidden* path is not
listable itself; one carved for a protected entry stays readable.

Caveats (docs/sandbox.md's table):

- no private pid space: the server can list other processes and read their
  command lines; their memory and environment stay closed (Landlock refuses
  ptrace access across domains);
- a folder carved out for a protected entry gets no *new* top-level entries:
  only its existing entries are writable (opt out with ``write_deny=False``);
- Landlock's TCP rules name a port, not an address: with an allowlist the
  server may connect to the proxy's port on any host;
- the private folders live under ``/tmp/lovia-mcp-ll-<worker pid>-*`` until
  the worker exits (:func:`cleanup`); a worker killed outright leaves its
  folder to the next worker's first Landlock spawn, which removes it.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import shutil
import stat
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from ..wire import environment
from ..wire.confinement import Sandbox
from . import pinned, seccomp
from ._runtime import runtime, script_tree
from .backend import JSON, LaunchPlan, SandboxError
from .bwrap import hidden_paths
from .pinned import open_unfollowed
from .privileges import drop_privileges
from .writedeny import protected_entries

if TYPE_CHECKING:
    from ..wire.messages import ServerSpec

# Syscall numbers: the same on x86_64 and aarch64 (new syscalls share one table).
_SYSCALLS: Final = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_RULE_NET_PORT: Final = 2

# File system rights, by the ABI that introduced them (include/uapi/linux/landlock.h).
FS_EXECUTE: Final = 1 << 0
FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
FS_REFER: Final = 1 << 13  # ABI 2
FS_TRUNCATE: Final = 1 << 14  # ABI 3
FS_IOCTL_DEV: Final = 1 << 15  # ABI 5
_FS_BY_ABI: Final = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP: Final = 1 << 0  # ABI 4
NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
SCOPE_SIGNAL: Final = 1 << 1  # ABI 6

READ: Final = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# The rights a rule on a file (not a folder) may carry.
_FILE_RIGHTS: Final = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
# The lowest ABI that can keep the network closed (TCP rules).
NETWORK_ABI: Final = 4
SCOPE_ABI: Final = 6

# Read-only for every server: the system's programs, libraries and
# configuration, and /proc and /sys (runtimes read /proc/self, cpu counts and
# cgroup limits there; writes to /proc/sys and /sys are refused, and another
# process's memory or environment is closed by Landlock's ptrace rule). /opt
# and /home are not here: a runtime installed there is granted by its path.
SYSTEM_READ: Final = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/proc",
    "/sys",
    "/nix/store",
)
# Devices a program opens as a matter of course; no terminal (TIOCSTI), no /dev/shm (shared).
DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# The private temporary directories of this worker's servers, under one folder removed at exit.
_TMP_PREFIX: Final = "lovia-mcp-ll-"

_SYS: Final = _SYSCALLS.get(platform.machine())
# Loaded at import (in the forkserver), so the child between fork and exec loads nothing.
_libc: Final = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(nr: int, *args: object) -> int:
    ret = int(_libc.syscall(ctypes.c_long(nr), *args))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def _probe_abi() -> int:
    if _SYS is None or not platform.system() == "Linux":
        return 0
    try:
        return _syscall(_SYS[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:  # ENOSYS: no Landlock; EOPNOTSUPP: built in but disabled at boot
        return 0


# Looked up once, in the forkserver: the Landlock ABI this kernel speaks (0: none).
ABI: Final = _probe_abi()
# The security modules the kernel booted with (the doctor's fact: Landlock must be among them).
LSM_LIST: Final = "/sys/kernel/security/lsm"


def unavailable(box: Sandbox) -> str | None:
    """Why this backend cannot give ``box`` what it asks, or None if it can."""
    if ABI == 0:
        return "the kernel has no Landlock (Linux 5.13+, with landlock in the lsm= boot list)"
    if box.network is not True and ABI < NETWORK_ABI:
        return (
            f"the kernel's Landlock is ABI {ABI}, which cannot close the network "
            f"(TCP rules need ABI {NETWORK_ABI}, Linux 6.7+)"
        )
    return None


def kernel_facts() -> JSON:
    """The Landlock ABI this kernel speaks, what it can then hold, and the boot's security modules."""
    try:
        with open(LSM_LIST) as f:
            lsm: str | None = f.read().strip()
    except OSError:
        lsm = None
    return {
        "abi": ABI,
        "available": ABI > 0,
        "closes_network": ABI >= NETWORK_ABI,
        "scopes_signals_and_abstract_sockets": ABI >= SCOPE_ABI,
        "lsm": lsm,
    }


def describe(facts: Mapping[str, object]) -> list[tuple[str, str]]:
    """:func:`kernel_facts`, as ``lovia-mcp doctor`` prints them."""
    found = facts.get("landlock")
    if not isinstance(found, dict):
        return []
    if not found["available"]:
        return [("landlock", "not available (Linux 5.13+ with landlock in the lsm= boot list)")]
    yes = {True: "yes", False: "no"}
    return [
        (
            "landlock",
            f"ABI {found['abi']} (closes the network: {yes[bool(found['closes_network'])]}; "
            f"scopes signals and abstract sockets: {yes[bool(found['scopes_signals_and_abstract_sockets'])]})",
        )
    ]


def fs_rights(abi: int = ABI) -> int:
    """Every file system right the ABI knows (all of them are handled: denied unless granted)."""
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)] if abi > 0 else 0


class Plan:
    """A ruleset ready to enforce in the child; the worker closes it after the spawn.

    A plain class, not a dataclass: this module is imported by every
    forkserver, and a dataclass costs its import about a millisecond.
    """

    def __init__(self, ruleset_fd: int, network: bool, tmpdir: str) -> None:
        self.ruleset_fd = ruleset_fd
        self.network = network
        self.tmpdir = tmpdir
        self.rules = 0
        # The server's cwd, held open by the caller: entered by descriptor, not by path.
        self.cwd_fd = -1
        self.seccomp = b""
        self.install: Callable[[bytes], None] = seccomp.install

    def apply(self) -> None:
        """In the child, between fork and exec: drop privileges, enforce the ruleset, the seccomp filter.

        Nothing is imported here (the child of a threaded worker must not take
        the import lock): ``install`` was looked up by :func:`prepare`.
        """
        if self.cwd_fd >= 0:
            os.fchdir(self.cwd_fd)
        drop_privileges()
        assert _SYS is not None
        _syscall(_SYS[2], ctypes.c_int(self.ruleset_fd), ctypes.c_uint32(0))
        self.install(self.seccomp)

    def close(self) -> None:
        if self.ruleset_fd >= 0:
            os.close(self.ruleset_fd)
            self.ruleset_fd = -1


# --- the rules ---------------------------------------------------------------


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class _Grants:
    """Rules added to a ruleset, each on a descriptor, carved around hidden and write-protected paths.

    Nothing here follows a symlink after the first resolution: a path is
    resolved, then opened without following one (:func:`open_unfollowed`);
    a pinned path comes in as a descriptor already; entries met while
    carving are opened beside their folder's descriptor with ``O_NOFOLLOW``,
    and a symlink among them is skipped. So a server of an earlier
    generation, still in its kill grace, that swaps an entry for a symlink
    while this runs makes a rule miss, never land elsewhere.
    """

    def __init__(self, ruleset: int, all_fs: int, hidden: list[str], protected: list[str]) -> None:
        self.ruleset = ruleset
        self.all_fs = all_fs
        self.hidden = hidden
        self.protected = protected
        self.rules = 0

    def add(self, path: str, rights: int) -> None:
        """Grant ``rights`` on ``path`` as it resolves now (system and runtime paths)."""
        real = os.path.realpath(path)
        try:
            fd = open_unfollowed(real)
        except OSError:
            return  # missing, or changed since it was resolved: nothing to grant
        try:
            self.add_fd(fd, real, rights)
        finally:
            os.close(fd)

    def add_fd(self, fd: int, real: str, rights: int) -> None:
        """Grant ``rights`` on the file ``fd`` holds, which is at ``real`` (no symlink in it)."""
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            return  # an entry met while carving: its target is granted only on its own
        if any(_under(real, h) for h in self.hidden):
            return
        writes = rights & ~READ
        if writes and any(_under(real, p) for p in self.protected):
            self.add_fd(fd, real, rights & READ)
            return
        if not stat.S_ISDIR(st.st_mode):
            self._rule(fd, real, rights & _FILE_RIGHTS)
            return
        holes = [h for h in self.hidden if _under(h, real)]
        locked = [p for p in self.protected if _under(p, real)] if writes else []
        if not holes and not locked:
            self._rule(fd, real, rights)
            return
        if not holes:
            self._rule(fd, real, rights & READ)  # the folder stays readable; its entries get the rest
        try:
            listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return
        try:
            names = os.listdir(listing)
        finally:
            os.close(listing)
        for name in names:
            try:
                entry = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue  # gone since it was listed
            try:
                self.add_fd(entry, os.path.join(real, name), rights)
            finally:
                os.close(entry)

    def _rule(self, fd: int, real: str, rights: int) -> None:
        rights &= self.all_fs
        if not rights:
            return
        assert _SYS is not None
        try:
            rule = struct.pack("=Qi", rights, fd)
            _syscall(
                _SYS[1],
                ctypes.c_int(self.ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.c_char_p(rule),
                ctypes.c_uint32(0),
            )
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise SandboxError(
                    f"a Landlock rule for {real!r} could not be added ({exc.strerror})",
                    hint="Report this with the path and the kernel version.",
                ) from exc
            return
        self.rules += 1


def _private_dir(parent: str, prefix: str) -> str:
    """A new folder only this user may enter (``tempfile.mkdtemp``'s first call costs ~10 ms)."""
    while True:
        path = f"{parent}/{prefix}{os.urandom(6).hex()}"
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def _tmp_base() -> str:
    global _tmp_root
    if _tmp_root is None or not os.path.isdir(_tmp_root):
        _sweep_stale()
        _tmp_root = _private_dir("/tmp", f"{_TMP_PREFIX}{os.getpid()}-")
    return _tmp_root


def _sweep_stale() -> None:
    """Remove the folders of workers that died without :func:`cleanup` (SIGKILL), named by their pid."""
    try:
        names = [n for n in os.listdir("/tmp") if n.startswith(_TMP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(_TMP_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(f"/tmp/{name}", ignore_errors=True)
        except OSError:
            pass  # alive (another user's): not ours to remove


_tmp_root: str | None = None
_programs: dict[bool, bytes] = {}


def _program(network: bool) -> bytes:
    """The seccomp program, built once per worker for each network setting."""
    prog = _programs.get(network)
    if prog is None:
        prog = _programs[network] = seccomp.program(network=network, allow_listen=network)
    return prog


def prepare(
    box: Sandbox,
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    proxy_port: int | None,
    held: Mapping[str, tuple[str, int]] | None = None,
) -> Plan:
    """Build the ruleset for ``argv`` under ``box``; set TMPDIR in ``env``. Raises SandboxError.

    ``held`` maps the configured cwd, ``writable`` and ``readable`` paths to
    their resolved path and a descriptor the caller opened and checked
    (:func:`~lovia_mcp_worker.sandbox.pinned.hold`): their rules are made on
    those descriptors, and the server's cwd is entered through its own, so
    nothing is looked up by path again. Without it (a one-off ruleset), those
    paths are resolved here, once. The caller closes the descriptors after
    the spawn.
    """
    why = unavailable(box)
    if why is not None:
        raise SandboxError(
            f"the Landlock sandbox cannot be used: {why}",
            hint="Use Sandbox(backend='bwrap') where user namespaces are allowed, or run the agent on a newer kernel.",
        )
    configured = ([cwd] if cwd else []) + list(box.writable)
    if held is not None:
        writable = [held[p] for p in configured]
        readable = [held[p] for p in box.readable if p in held]
    else:
        writable = [(os.path.realpath(p), -1) for p in configured]
        readable = [(os.path.realpath(p), -1) for p in box.readable]
    for path, (real, _) in zip(configured, writable):
        if real == "/":
            raise SandboxError(
                "the sandbox would make the whole file system writable (cwd or a writable path is '/')",
                hint="Give the server a cwd= of its own, or leave '/' out of writable.",
            )
        if not os.path.exists(real):
            raise SandboxError(
                f"a writable sandbox path does not exist: {path!r}",
                hint="Create it first, or leave it out of Sandbox(writable=[...]).",
            )
    all_fs = fs_rights()
    handled_net = 0 if box.network is True else NET_BIND_TCP | NET_CONNECT_TCP
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if ABI >= SCOPE_ABI else 0
    if not scoped:  # best effort: said once per worker, never silently weaker
        _warn_once(
            f"Landlock ABI {ABI} cannot scope signals (ABI {SCOPE_ABI}, Linux 6.12+): the sandboxed "
            "server may signal processes of the same user outside its own tree"
        )
    attr = struct.pack("QQQ", all_fs, handled_net, scoped)
    size = 8 if ABI < NETWORK_ABI else (16 if ABI < SCOPE_ABI else 24)
    assert _SYS is not None
    try:
        fd = _syscall(_SYS[0], ctypes.c_char_p(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    except OSError as exc:
        raise SandboxError(
            f"the Landlock ruleset could not be made ({exc.strerror})",
            hint="Use Sandbox(backend='bwrap'), or check that Landlock is enabled.",
        ) from exc
    private = _private_dir(_tmp_base(), "s")
    plan = Plan(ruleset_fd=fd, network=box.network is True, tmpdir=private)
    try:
        tmpdir, home = f"{private}/tmp", f"{private}/home"
        os.mkdir(tmpdir, 0o700)
        os.mkdir(home, 0o700)
        env["TMPDIR"] = tmpdir
        grants = _Grants(
            fd,
            all_fs,
            [os.path.realpath(p) for p in hidden_paths(box, env)],
            protected_entries(box, [real for real, _ in writable]),
        )
        for path in SYSTEM_READ:
            grants.add(path, READ)
        if os.path.islink("/etc/resolv.conf"):  # often a link into /run (systemd-resolved)
            grants.add(os.path.dirname(os.path.realpath("/etc/resolv.conf")), READ)
        homes = [env.get("HOME", ""), os.path.expanduser("~")]
        for path in runtime(argv[0], env.get("PATH"), homes):
            grants.add(path, READ)
        for arg in argv[1:]:
            for path in script_tree(arg, homes):
                grants.add(path, READ)
        # The CA bundles the environment names (a TLS-intercepting proxy's): the files only, never a hidden one.
        for path in environment.trust_files(env):
            grants.add(path, FS_READ_FILE)
        for dev in DEVICES:
            grants.add(dev, FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV)
        grants.add(private, all_fs)
        for granted, rights in ((readable, READ), (writable, all_fs)):
            for real, held_fd in granted:
                if held_fd >= 0:
                    grants.add_fd(held_fd, real, rights)
                else:
                    grants.add(real, rights)
        plan.rules = grants.rules
        if held is not None and cwd:
            plan.cwd_fd = held[cwd][1]
        if not _covered(env.get("HOME", ""), [real for real, _ in (*writable, *readable)]):
            # The agent's home is not readable here, and tools treat an unreadable
            # ~/.gitconfig or cache as fatal: the server gets a fresh, empty home
            # of its own instead (caches such as ~/.npm then work too).
            env["HOME"] = home
        if proxy_port is not None:
            rule = struct.pack("QQ", NET_CONNECT_TCP, proxy_port)
            _syscall(_SYS[1], ctypes.c_int(fd), ctypes.c_int(_RULE_NET_PORT), ctypes.c_char_p(rule), ctypes.c_uint32(0))
        plan.seccomp = _program(box.network is True)
    except BaseException:
        plan.close()
        raise
    return plan


def _covered(path: str, granted: list[str]) -> bool:
    """Whether ``path`` lies in a folder the user granted (cwd, ``readable``, ``writable``; resolved).

    Not the runtime's grants: an interpreter under the home folder must not
    keep a home whose ``.gitconfig`` the server cannot read.
    """
    if not path or not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    return any(_under(real, g) for g in granted)


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logging.getLogger("lovia_mcp.sandbox").warning("%s", message)


_warned: set[str] = set()


def cleanup() -> None:
    """Remove this worker's private temporary directories (at worker exit)."""
    global _tmp_root
    if _tmp_root is not None:
        shutil.rmtree(_tmp_root, ignore_errors=True)
        _tmp_root = None


class LandlockBackend:
    """``backend="landlock"``: Landlock and seccomp, where namespaces are refused; needs Landlock (ABI 4 for
    a closed network).

    With a network allowlist the server reaches the worker's proxy on a
    loopback TCP port, the only one its rules allow. Every pinned path is
    held through the spawn (its rules were made on them, and the pre-exec
    enters the cwd by one); the server gets none.
    """

    name: Final = "landlock"
    guarantees: Final[Mapping[str, str]] = {
        "filesystem": "read-only system paths; cwd and writable paths by their pinned descriptors; hidden paths "
        "never granted",
        "network": "TCP only to the worker's proxy port (ABI 4+), none with network=False",
        "processes": "no private pid space: other processes' memory and environment stay closed",
        "privileges": "capabilities dropped before the exec",
        "syscalls": "the seccomp filter on the server",
    }

    def unavailable(self, box: Sandbox) -> str | None:
        return unavailable(box)

    def hint(self) -> str:
        """What to do where :meth:`unavailable` says no."""
        return "Use Sandbox(backend='bwrap') where user namespaces are allowed, or run the agent on Linux 6.7 or later."

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return None  # no wrapper: the ruleset is applied in the pre-exec, whose failure the spawn raises

    def facts(self) -> dict[str, JSON]:
        return {"landlock": kernel_facts()}

    def describe(self, facts: Mapping[str, object]) -> list[tuple[str, str]]:
        return describe(facts)

    def cleanup(self) -> None:
        cleanup()

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        held = pinned.hold(box, spec.cwd)
        try:
            port: int | None = None
            if isinstance(box.network, list):
                from .egress import netroute  # the proxy's modules load only where a server needs one

                port = await netroute.route_tcp(box.network, env, upstream=box.upstream_proxy, no_proxy=box.no_proxy)
            ruleset = prepare(box, argv, cwd=spec.cwd, env=env, proxy_port=port, held=held.paths)
        except BaseException:
            held.close()
            raise
        return LaunchPlan(
            self.name,
            argv,
            kept_fds=held.fds(),
            preexec=ruleset.apply,
            enters_cwd=ruleset.cwd_fd >= 0,
            release=ruleset.close,
        )


__all__ = [
    "LandlockBackend",
    "ABI",
    "DEVICES",
    "LSM_LIST",
    "NETWORK_ABI",
    "READ",
    "SCOPE_ABI",
    "SYSTEM_READ",
    "Plan",
    "cleanup",
    "describe",
    "kernel_facts",
    "fs_rights",
    "prepare",
    "unavailable",
]
