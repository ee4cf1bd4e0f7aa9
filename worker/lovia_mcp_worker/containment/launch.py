"""Launch a stdio server: environment, working directory, limits, own session.

The worker is the launch wrapper. The server gets:

- an environment built from a small allowlist of the worker's variables
  (:data:`ENV_ALLOWLIST`, plus ``LC_*``: the base names, the TLS trust
  paths, and the proxy variables that carry no credentials, as
  :mod:`~lovia_mcp_worker.wire.environment` says), then ``spec.env`` on top;
  the agent side has already copied any ``inherit_env`` names into
  ``spec.env``; a sandbox backend then sets its own proxy variables over
  both;
- ``spec.cwd`` as its working directory;
- with ``spec.sealed`` (a locked server), a start only while the tree it
  runs from has the stamp the agent checked (a restart included: the
  worker starts it with no agent in between);
- its own session and process group, so the tree can be signalled as a whole;
- a parent-death signal (SIGKILL when the worker dies, Linux);
- rlimits from ``spec.limits`` applied between fork and exec, before any of
  the server's own code runs;
- with ``spec.sandbox``, the launch plan of the backend the registry
  picks (:func:`~lovia_mcp_worker.sandbox.registry.pick`): its argv (a
  bubblewrap one in front of the server's, say), the descriptors it passes,
  and its pre-exec step (a Landlock ruleset and seccomp filter), run after
  the rlimits. The backend in use is returned with the process, for the
  generation to report.
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

from ..sandbox import registry
from ..sandbox.backend import LaunchPlan, SandboxError
from ..wire import environment
from ..wire.confinement import Limits, Sandbox
from ..wire.messages import ServerSpec
from ..wire.sealed import stamp
from .guard import die_with_parent

# Every name a server may get without asking (the proxy variables only without credentials).
ENV_ALLOWLIST: Final = (*environment.BASE, *environment.TRUST, *environment.PROXY)


class LaunchError(Exception):
    """The server could not be started; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def server_environment(extra: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str]:
    env = environment.default_environment(os.environ if base is None else base)
    env.update(extra)
    return env


def _preexec(limits: Limits, box: Callable[[], None] | None = None) -> Callable[[], None]:
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
            box()

    return apply


# The server's parent-death signal without a Python pre-exec hook, which
# forces subprocess to fork() the whole worker (~4 ms for its ~65 MB) where
# it can otherwise vfork (~0.15 ms): util-linux's setpriv sets it and execs
# the server (it loads libc and libcap-ng first: scripts/bench.py's
# pdeathsig_setpriv is what that adds to a start, pdeathsig_preexec what the
# hook's fork does). Looked up once,
# in the forkserver; without it the pre-exec hook sets the signal.
_SETPRIV: Final = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def _launch_plan(
    limits: Limits, argv: list[str], box: Callable[[], None] | None = None
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to execute, and the pre-exec hook if one is needed.

    rlimits (cpu_seconds, max_open_files) and a backend's pre-exec step (``box``) need the
    hook, which also sets the parent-death signal; without them setpriv
    sets it, where there is one.
    """
    if box is not None:
        return argv, _preexec(limits, box)
    if limits.cpu_seconds is None and limits.max_open_files is None and _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv], None
    return argv, _preexec(limits)


def wrapper_exec_error(returncode: int, stderr_tail: list[str], backend: str | None = None) -> str | None:
    """The exec error setpriv or the sandbox ``backend`` the launch used reported, if that is why the server exited.

    Without a wrapper, a failed exec (a missing interpreter on the ``#!``
    line, say) raises in the worker; with one, the wrapper exits and says
    why on stderr. This reads that back so the error is the same.
    """
    if backend is not None:
        return registry.get(backend).setup_error(returncode, stderr_tail)
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


async def _sandboxed(spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
    """The launch plan of the backend that serves ``box`` here; sets ``env``. Raises LaunchError."""
    try:
        return await registry.pick(box).plan(spec, box, argv, env)
    except SandboxError as exc:
        raise LaunchError(str(exc), hint=exc.hint) from exc


P = TypeVar("P", bound=asyncio.SubprocessProtocol)


async def spawn(
    spec: ServerSpec, protocol_factory: Callable[[], P]
) -> tuple[asyncio.SubprocessTransport, P, str | None]:
    """Start the server with its pipes attached to ``protocol_factory()``; raises LaunchError.

    Also returned: the name of the sandbox backend it runs in (None: no sandbox).
    """
    if spec.sealed is not None and stamp(spec.sealed.root) != spec.sealed.stamp:
        raise LaunchError(
            f"the locked files of {spec.name!r} under {spec.sealed.root} changed since they were checked "
            "against the lock; the server is not started",
            hint="Reinstall it from the lock with `lovia-mcp lock` (it checks the hashes), then open it again.",
        )
    env = server_environment(spec.env)
    if spec.cwd is not None and not os.path.isdir(spec.cwd):
        raise LaunchError(f"cwd is not a directory: {spec.cwd!r}", hint="Pass an existing directory as cwd=.")
    argv = [resolve_command(spec, env), *spec.args]
    plan: LaunchPlan | None = None
    if spec.sandbox is not None:
        plan = await _sandboxed(spec, spec.sandbox, argv, env)
        argv = plan.argv
    argv, preexec = _launch_plan(spec.limits, argv, None if plan is None else plan.preexec)
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.subprocess_exec(
            protocol_factory,
            *argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            # A backend's pre-exec may enter the cwd itself (Landlock: by the descriptor its rules were made on).
            cwd=spec.cwd if plan is None or not plan.enters_cwd else None,
            start_new_session=True,
            preexec_fn=preexec,
            pass_fds=() if plan is None else plan.pass_fds,
        )
        return transport, protocol, None if plan is None else plan.backend
    except subprocess.SubprocessError as exc:  # the pre-exec failed: no server ran
        raise LaunchError(
            f"the sandbox could not be applied to {spec.command!r} ({exc})",
            # The backend whose pre-exec failed says what to do instead (Landlock's: bwrap, or a newer kernel).
            hint=registry.get(plan.backend).hint() if plan is not None else "Check the server's limits=.",
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
        if plan is not None:
            plan.close()


__all__ = [
    "ENV_ALLOWLIST",
    "LaunchError",
    "resolve_command",
    "server_environment",
    "spawn",
    "wrapper_exec_error",
]
