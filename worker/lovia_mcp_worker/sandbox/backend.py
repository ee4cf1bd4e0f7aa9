"""What a sandbox backend provides, and the error every backend raises.

A backend is an object with (:class:`Backend`):

- ``name``: what ``Sandbox(backend=...)``, the CLI and ``stats()`` call it;
- ``guarantees``: a short mapping of what it holds (file system, network,
  processes...), for the docs, the CLI and diagnostics;
- ``unavailable(box)``: None where it can give ``box`` what it asks here,
  else the reason (a probe: no side effect a caller must undo); ``hint()``:
  what to do then (the error of an open that named this backend ends with it);
- ``plan(spec, box, argv, env)``: the :class:`LaunchPlan` that runs ``argv``
  inside the box: the argv to execute, the descriptors to pass to the spawn
  and those to keep open through it, a pre-exec step, and the network route
  set up through :mod:`.egress.netroute` (it sets the proxy variables in
  ``env``). It raises :class:`SandboxError`, having closed what it opened;
- ``setup_error(returncode, stderr_tail)``: the reason, when a server it
  launched exited because the box itself could not be built or could not
  execute the command (a wrapper such as bwrap says so on stderr), so the
  error is the one an unboxed exec failure gives; None otherwise;
- ``facts()``: what the kernel offers it here, as ``lovia-mcp doctor``
  reports it: plain JSON, each fact under its own key of the report's
  ``kernel`` (bwrap's ``user_namespaces`` and ``bwrap``, Landlock's
  ``landlock``); ``describe(facts)``: those facts as the doctor's text, one
  ``(label, line)`` row each, an empty label continuing the row above (the
  doctor reads them from the report, so it names no backend);
- ``cleanup()``: the worker is ending: remove what the backend keeps for
  the servers it boxed (Landlock's private temporary directories; nothing
  for most).

The registry (:mod:`.registry`) names them; ``auto`` delegates to the first
available one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..wire.confinement import Sandbox
    from ..wire.messages import ServerSpec


class SandboxError(Exception):
    """The sandbox cannot be built as asked; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class LaunchPlan:
    """How to start one server inside a backend's box; the launcher closes it after the spawn.

    - ``argv``: what to execute (the server's own, or a wrapper's around it);
    - ``pass_fds``: descriptors the spawned process must inherit;
    - ``kept_fds``: descriptors only held open through the spawn (the server
      does not get them);
    - ``preexec``: run in the child between fork and exec, after the
      launcher's own steps (rlimits, parent-death signal), or None;
    - ``enters_cwd``: the pre-exec enters the server's cwd itself (by a
      descriptor), so the spawn must not change directory by path;
    - ``release``: called once the spawn is over, whatever its outcome.

    A plain class, not a dataclass: the forkserver imports this module, and a
    dataclass costs its import about a millisecond.
    """

    def __init__(
        self,
        backend: str,
        argv: list[str],
        *,
        pass_fds: tuple[int, ...] = (),
        kept_fds: tuple[int, ...] = (),
        preexec: Callable[[], None] | None = None,
        enters_cwd: bool = False,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.argv = argv
        self.pass_fds = pass_fds
        self.kept_fds = kept_fds
        self.preexec = preexec
        self.enters_cwd = enters_cwd
        self._release = release

    def close(self) -> None:
        """Close the descriptors and release what the backend holds for the spawn (idempotent)."""
        fds, self.pass_fds, self.kept_fds = (*self.pass_fds, *self.kept_fds), (), ()
        for fd in fds:
            os.close(fd)
        release, self._release = self._release, None
        if release is not None:
            release()


# A fact as the doctor reports it: plain JSON (str, int, bool, None, lists and dicts of them).
JSON = dict[str, object]


class Backend(Protocol):
    """A sandbox backend (see the module's docstring for what each member promises)."""

    @property
    def name(self) -> str: ...

    @property
    def guarantees(self) -> Mapping[str, str]: ...

    def unavailable(self, box: Sandbox) -> str | None: ...

    def hint(self) -> str: ...

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan: ...

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None: ...

    def facts(self) -> dict[str, JSON]: ...

    def describe(self, facts: Mapping[str, object]) -> list[tuple[str, str]]: ...

    def cleanup(self) -> None: ...


__all__ = ["JSON", "Backend", "LaunchPlan", "SandboxError"]
