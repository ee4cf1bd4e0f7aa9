"""What a stdio server is launched under: its limits and its sandbox (values inside ``ServerSpec``).

Like the protocol, this imports nothing but the standard library and msgspec.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec


class Limits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Limits on a server's whole process tree. ``None`` means no limit.

    - ``memory_mb``: resident memory (RSS) of the tree, watched by the worker.
    - ``cpu_seconds``: CPU time of the tree (RLIMIT_CPU per process, and watched).
    - ``max_processes``: live processes in the tree, watched (RLIMIT_NPROC is not
      used: it does not bind root and counts all of a user's processes).
    - ``max_open_files``: RLIMIT_NOFILE for each process of the tree.
    - ``max_result_bytes``: the largest single message the worker accepts from
      the server; a larger result never crosses the pipe.
    """

    memory_mb: float | None = None
    cpu_seconds: float | None = None
    max_processes: int | None = None
    max_open_files: int | None = None
    max_result_bytes: int = 32 * 1024 * 1024


class PathPin(msgspec.Struct, frozen=True, array_like=True):
    """A sandbox path as it was when the server was opened: resolved, and which file it was.

    ``real`` has no symlink left in it; ``dev`` and ``ino`` are the file's
    ``st_dev`` and ``st_ino`` then, both 0 if nothing was there. Every start
    opens ``real`` without following a symlink and grants that file only if
    it is still the same one.
    """

    real: str
    dev: int = 0
    ino: int = 0


# The built-in sandbox backends, in the order ``auto`` tries them: the one
# list of their names. The worker's registry (``sandbox/registry.py``) finds
# each one by its name, and the agent, the CLI and the config file take
# ``Sandbox.backend`` from there.
BuiltinBackend = Literal["bwrap", "landlock"]
SandboxBackend = Literal["auto", BuiltinBackend]


class Sandbox(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An OS sandbox around a stdio server (bubblewrap or Landlock + seccomp; Linux).

    - ``network``: ``False`` no network at all,
      ``True`` the host's, or a list of host names (``"*.npmjs.org"`` matches
      subdomains) reachable only through an HTTP(S) proxy run by the worker;
    - ``writable``: paths the server may write, besides its ``cwd``; the rest
      of the file system is read-only and ``/tmp`` is private;
    - ``hidden``: paths replaced by empty ones (``None``: the usual secret
      stores, :data:`DEFAULT_HIDDEN`; ``~`` is the agent's home).

    - ``backend``: ``"bwrap"`` (namespaces), ``"landlock"`` (Landlock and
      seccomp, where user namespaces are refused), or ``"auto"``: namespaces
      where they can be made, else Landlock; never no sandbox;
    - ``read_only``: paths kept read-only inside cwd or a writable path;
    - ``readable``: paths the server may read besides the system, its own
      runtime and cwd (Landlock, whose reads are an allowlist; under bwrap
      everything not hidden is readable already);
    - ``write_deny``: keep :data:`WRITE_DENY` (git hooks and config, shell
      rc files, editor and MCP configs) read-only inside cwd and the writable
      paths; ``False`` opts out;
    - ``upstream_proxy``: with a ``network`` list, the proxy
      (``"http://HOST:PORT"``, credentials allowed) that the allowed names
      are reached through, for networks whose only way out is a proxy; the
      upstream then resolves them, so the check that an allowed name leads
      to no internal address is its to make;
    - ``no_proxy``: with ``upstream_proxy``, the allowed names reached
      directly instead (allowlist entries: ``"*.corp.internal"``), as the
      ``NO_PROXY`` variable says for other clients; they get the address
      check as any direct name;
    - ``pins``: filled in when the server is opened, not by the user (a
      value given here is replaced): the server's cwd and each ``writable``
      and ``readable`` path, by the absolute path as configured, resolved and
      identified once (:class:`PathPin`). A later start grants the same
      files or refuses to start: a path a server swapped for a symlink is
      never followed.

    The server also gets a private pid namespace with its own ``/proc``
    (bwrap), a new session, and dies with its worker.
    """

    network: bool | list[str] = False
    writable: list[str] = []
    hidden: list[str] | None = None
    backend: SandboxBackend = "auto"
    read_only: list[str] = []
    readable: list[str] = []
    write_deny: bool = True
    upstream_proxy: str | None = None
    no_proxy: list[str] = []
    pins: dict[str, PathPin] = {}


# Entries of cwd and each writable path that stay read-only (sandbox-runtime's
# mandatory deny list): a server that can write them runs code on the host the
# next time the user runs git, a shell, or an editor or agent that reads them.
WRITE_DENY: Final = (
    ".git/hooks",
    ".git/config",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".gitconfig",
    ".gitmodules",
    ".ripgreprc",
    ".mcp.json",
    ".mcp.lock.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands",
    ".claude/agents",
    ".cursor",
    ".vscode",
    ".idea",
)


# Secret stores hidden by default ("~" is the home directory).
DEFAULT_HIDDEN: Final = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gcloud",
    "~/.azure",
    "~/.netrc",
    "~/.docker",
    "~/.kube",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.pypirc",
    "~/.npmrc",
    "~/.password-store",
)


__all__ = ["DEFAULT_HIDDEN", "WRITE_DENY", "BuiltinBackend", "Limits", "PathPin", "Sandbox", "SandboxBackend"]
