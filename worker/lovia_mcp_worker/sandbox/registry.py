"""The sandbox backends by name, and ``auto``.

The built-in backends are the names of the wire's ``BuiltinBackend`` (the one
list of them), and :data:`BUILTIN` says where each one's class is: a backend
called ``x`` is the class ``XBackend`` of the module ``x`` under this package.
A backend module is imported
only when it is first asked for, so naming the backends (the CLI, the
agent's check of ``Sandbox(backend=...)``) loads none of them. Another
backend joins with :func:`register` (tests, extensions); ``auto`` tries the
registered ones in order.

A sandboxed server never runs unsandboxed: where the asked backend (or, for
``auto``, none) works, :func:`pick` raises SandboxError with each reason and
a hint.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from ..wire.confinement import BuiltinBackend
from .backend import JSON, Backend, LaunchPlan, SandboxError

if TYPE_CHECKING:
    from ..wire.confinement import Sandbox
    from ..wire.messages import ServerSpec

AUTO: Final = "auto"
# name -> "module:Class" under this package, in the order auto tries them.
BUILTIN: Final[Mapping[str, str]] = {
    name: f"{name}:{name.capitalize()}Backend" for name in typing.get_args(BuiltinBackend)
}

_backends: dict[str, Backend | str] = dict(BUILTIN)


def names() -> tuple[str, ...]:
    """Every name ``Sandbox(backend=...)`` accepts: ``auto``, then the backends in the order auto tries them."""
    return (AUTO, *_backends)


def register(backend: Backend) -> None:
    """Add ``backend`` (after those registered already) or replace the one of its name."""
    if backend.name == AUTO:
        raise ValueError(f"{AUTO!r} is the registry's own choice; give the backend another name")
    _backends[backend.name] = backend


def unregister(name: str) -> None:
    """Remove a backend :func:`register` added; a built-in one goes back to its module's."""
    _backends.pop(name, None)
    if name in BUILTIN:
        _backends[name] = BUILTIN[name]


def get(name: str) -> Backend:
    """The backend called ``name`` (``auto`` included); raises SandboxError for an unknown name."""
    if name == AUTO:
        return AutoBackend()
    entry = _backends.get(name)
    if entry is None:
        raise SandboxError(f"no sandbox backend is called {name!r}", hint=f"Use one of {', '.join(names())}.")
    if isinstance(entry, str):
        module, cls = entry.split(":")
        entry = _backends[name] = getattr(importlib.import_module(f".{module}", __package__), cls)()
        assert not isinstance(entry, str)
    return entry


def registered() -> list[Backend]:
    """Every registered backend, in the order ``auto`` tries them (importing each one's module)."""
    return [get(name) for name in list(_backends)]


def load() -> None:
    """Import every registered backend's module now (the forkserver does, for its workers)."""
    registered()


def cleanup() -> None:
    """At the worker's exit: each backend in use removes what it keeps for its servers (none is imported for it)."""
    for entry in list(_backends.values()):
        if not isinstance(entry, str):
            entry.cleanup()


def pick(box: Sandbox) -> Backend:
    """The backend that serves ``box`` here: the named one, or for ``auto`` the first available one.

    Raises SandboxError with the reason(s) where none can.
    """
    backend = get(box.backend)
    if isinstance(backend, AutoBackend):
        return backend.choose(box)
    why = backend.unavailable(box)
    if why is not None:
        raise SandboxError(
            f"the {backend.name} sandbox (backend={backend.name!r}) cannot run: {why}", hint=backend.hint()
        )
    return backend


class AutoBackend:
    """``backend="auto"``: delegates to the first registered backend available here."""

    name: Final = AUTO

    @property
    def guarantees(self) -> Mapping[str, str]:
        return {"chooses": "the first available of " + ", ".join(_backends)}

    def choose(self, box: Sandbox) -> Backend:
        """The first backend available for ``box``; raises SandboxError with every reason."""
        reasons: list[str] = []
        for name in list(_backends):
            backend = get(name)
            why = backend.unavailable(box)
            if why is None:
                return backend
            reasons.append(f"{name}: {why}")
        raise SandboxError("no sandbox can be built here: " + "; ".join(reasons), hint=self.hint())

    def hint(self) -> str:
        return (
            "Allow unprivileged user namespaces, or run on Linux 6.7+ with Landlock enabled; "
            "or open the server without sandbox= (it then runs unsandboxed)."
        )

    def unavailable(self, box: Sandbox) -> str | None:
        try:
            self.choose(box)
        except SandboxError as exc:
            return str(exc)
        return None

    async def plan(self, spec: ServerSpec, box: Sandbox, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        return await self.choose(box).plan(spec, box, argv, env)

    def setup_error(self, returncode: int, stderr_tail: list[str]) -> str | None:
        return None  # a plan names the backend it chose, whose own reading applies

    def facts(self) -> dict[str, JSON]:
        return {}  # each backend reports its own

    def describe(self, facts: Mapping[str, object]) -> list[tuple[str, str]]:
        return []

    def cleanup(self) -> None:
        pass  # the backends it delegated to are the registry's, cleaned up by it


__all__ = [
    "AUTO",
    "BUILTIN",
    "AutoBackend",
    "cleanup",
    "get",
    "load",
    "names",
    "pick",
    "register",
    "registered",
    "unregister",
]
