"""Launch a stdio server: environment, working directory, limits, own session.

The worker is the launch wrapper. The server gets:

- an environment built from a small allowlist of the worker's variables
  (:data:`ENV_ALLOWLIST`, plus ``LC_*``), then ``spec.env`` on top; the agent
  side has already copied any ``inherit_env`` names into ``spec.env``;
- ``spec.cwd`` as its working directory;
- its own session and process group, so the tree can be signalled as a whole;
- a parent-death signal (SIGKILL when the worker dies, Linux);
- rlimits from ``spec.limits`` applied between fork and exec, before any of
  the server's own code runs;
- with ``spec.sandbox``, the backend :func:`~lovia_mcp_worker.sandbox.backend.choose`
  picks: a bubblewrap argv in front of the server's, or a Landlock ruleset
  and seccomp filter applied in the same pre-exec, after the rlimits; its
  paths are opened as they were pinned at the open and granted by those
  descriptors (:func:`~lovia_mcp_worker.sandbox.backend.hold`: a changed
  one refuses the start).
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Final, TypeVar

from ..sandbox import backend
from ..sandbox import bwrap as sandbox
from ..sandbox import landlock
from .guard import die_with_parent
from ..wire.confinement import Limits, Sandbox
from ..wire.messages import ServerSpec

ENV_ALLOWLIST: Final = (
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
)


class LaunchError(Exception):
    """The server could not be started; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def server_environment(extra: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str]:
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k in ENV_ALLOWLIST or k.startswith("LC_")}
    env.update(extra)
    return env


def _preexec(limits: Limits, box: landlock.Plan | None = None) -> Callable[[], None]:
    def apply() -> None:
        # Runs in the child between fork and exec: only async-signal-tolerant
        # work here (prctl and setrlimit are plain syscalls).
        die_with_parent()
        if limits.cpu_seconds is not None:
            soft = max(1, math.ceil(limits.cpu_seconds))
            resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
        if limits.max_open_files is not None:
            n = int(limits.max_open_files)
            resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
        if box is not None:
            box.apply()

    return apply


# The server's parent-death signal without a Python pre-exec hook, which
# forces subprocess to fork() the whole worker (~4 ms for its ~65 MB) where
# it can otherwise vfork (~0.15 ms): util-linux's setpriv sets it and execs
# the server (about 1 ms more of the server's start than a bare exec: it
# loads libc and libcap-ng; scripts/bench.py measures it). Looked up once,
# in the forkserver; without it the pre-exec hook sets the signal.
_SETPRIV: Final = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def _launch_plan(
    limits: Limits, argv: list[str], box: landlock.Plan | None = None
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to execute, and the pre-exec hook if one is needed.

    rlimits (cpu_seconds, max_open_files) and a Landlock sandbox need the
    hook, which also sets the parent-death signal; without them setpriv
    sets it, where there is one.
    """
    if box is not None:
        return argv, _preexec(limits, box)
    if limits.cpu_seconds is None and limits.max_open_files is None and _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv], None
    return argv, _preexec(limits)


def wrapper_exec_error(returncode: int, stderr_tail: list[str]) -> str | None:
    """The exec error setpriv or bwrap reported for the server, if that is why it exited.

    Without a wrapper, a failed exec (a missing interpreter on the ``#!``
    line, say) raises in the worker; with one, the wrapper exits and says
    why on stderr. This reads that back so the error is the same.
    """
    sandboxed = sandbox.setup_error(returncode, stderr_tail)
    if sandboxed is not None:
        return sandboxed
    if _SETPRIV is None or returncode not in (126, 127) or not stderr_tail:
        return None
    last = stderr_tail[-1]
    if not last.startswith("setpriv: failed to execute"):
        return None
    return last.rsplit(": ", 1)[-1]


def resolve_command(spec: ServerSpec, env: dict[str, str]) -> str:
    command = spec.command or ""
    if not command:
        raise LaunchError("no command given", hint="Pass MCPServerStdio(command=...).")
    if os.sep in command:
        # Absolute, because the server is then started with cwd=spec.cwd: a
        # path still relative would be resolved against that cwd a second time.
        path = os.path.abspath(command if spec.cwd is None else os.path.join(spec.cwd, command))
        if not os.path.exists(path):
            raise LaunchError(
                f"command not found: {command!r}",
                hint=f"Check the path to the server executable (a relative one is taken from cwd: {path!r}).",
            )
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise LaunchError(
                f"command is not executable: {command!r}",
                hint=f"Make it executable (chmod +x {command}) or run it through its interpreter.",
            )
        return path
    found = shutil.which(command, path=env.get("PATH"))
    if found is None:
        raise LaunchError(
            f"command not found: {command!r}",
            hint=f"Install it or fix PATH; the server's PATH is {env.get('PATH', '')!r}.",
        )
    return found


async def _sandboxed(
    spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]
) -> tuple[list[str], tuple[int, ...], tuple[int, ...], landlock.Plan | None]:
    """``argv`` inside the sandbox, or the Landlock plan for the pre-exec; sets ``env``.

    With a network allowlist the server is behind the worker's proxy: through
    a unix socket and a bridge for bwrap, on a loopback TCP port for Landlock.
    The sandbox's paths are opened as pinned first (a changed one refuses
    the start). Also returned: the descriptors the spawn passes on (bwrap's
    seccomp programs and the paths it binds, which it closes), and those it
    only keeps open through the spawn (the other paths; for Landlock, all of
    them: its rules were made on them and its pre-exec enters the cwd by
    one); the caller closes both after the spawn. The server gets none.
    """
    fds: list[int] = []
    held: backend.Held | None = None
    try:
        chosen = backend.choose(box)
        held = backend.hold(box, spec.cwd)
        if chosen == "landlock":
            port: int | None = None
            if isinstance(box.network, list):
                from ..sandbox import netroute

                port = await netroute.route_tcp(box.network, env)
            plan = landlock.prepare(box, argv, cwd=spec.cwd, env=env, proxy_port=port, held=held.paths)
            return argv, (), held.fds(), plan
        proxy_socket: str | None = None
        if isinstance(box.network, list):
            from ..sandbox import netroute

            fds.append(sandbox.filter_fd(box))
            proxy_socket, argv = await netroute.route(box.network, argv, env, seccomp_fd=fds[-1])
        fds.append(sandbox.filter_fd(box, allow_unix=proxy_socket is not None))
        argv = sandbox.command(box, argv, cwd=spec.cwd, env=env, seccomp_fd=fds[-1], proxy_socket=proxy_socket,
                               held=held.paths)
        # Only the descriptors bwrap binds (and closes): any other would reach the server.
        configured = ([spec.cwd] if spec.cwd else []) + list(box.writable)
        bound = tuple(fd for _, fd in sandbox.outermost([held.paths[p] for p in configured]))
        return argv, (*fds, *bound), tuple(fd for fd in held.fds() if fd not in bound), None
    except BaseException as exc:
        for fd in fds:
            os.close(fd)
        if held is not None:
            held.close()
        if isinstance(exc, sandbox.SandboxError):
            raise LaunchError(str(exc), hint=exc.hint) from exc
        raise


P = TypeVar("P", bound=asyncio.SubprocessProtocol)


async def spawn(spec: ServerSpec, protocol_factory: Callable[[], P]) -> tuple[asyncio.SubprocessTransport, P]:
    """Start the server with its pipes attached to ``protocol_factory()``; raises LaunchError."""
    env = server_environment(spec.env)
    if spec.cwd is not None and not os.path.isdir(spec.cwd):
        raise LaunchError(f"cwd is not a directory: {spec.cwd!r}", hint="Pass an existing directory as cwd=.")
    argv = [resolve_command(spec, env), *spec.args]
    pass_fds: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()
    box: landlock.Plan | None = None
    if spec.sandbox is not None:
        argv, pass_fds, kept, box = await _sandboxed(spec, spec.sandbox, argv, env)
    argv, preexec = _launch_plan(spec.limits, argv, box)
    loop = asyncio.get_running_loop()
    try:
        return await loop.subprocess_exec(
            protocol_factory,
            *argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            # A Landlock server enters its cwd by the descriptor its rules were made on.
            cwd=spec.cwd if box is None or box.cwd_fd < 0 else None,
            start_new_session=True,
            preexec_fn=preexec,
            pass_fds=pass_fds,
        )
    except subprocess.SubprocessError as exc:  # the pre-exec failed: no server ran
        raise LaunchError(
            f"the sandbox could not be applied to {spec.command!r} ({exc})",
            hint="Check that Landlock and seccomp are available (stats() names the backend), "
            "or use Sandbox(backend='bwrap').",
        ) from exc
    except PermissionError as exc:
        raise LaunchError(
            f"command is not executable: {spec.command!r} ({exc.strerror})",
            hint="Check the file's permissions, or run it through its interpreter.",
        ) from exc
    except OSError as exc:
        raise LaunchError(
            f"could not start {spec.command!r}: {exc.strerror or exc}",
            hint="Check the command, its interpreter line and cwd.",
        ) from exc
    finally:
        for fd in (*pass_fds, *kept):
            os.close(fd)
        if box is not None:
            box.close()


__all__ = [
    "ENV_ALLOWLIST",
    "LaunchError",
    "resolve_command",
    "server_environment",
    "spawn",
    "wrapper_exec_error",
]
