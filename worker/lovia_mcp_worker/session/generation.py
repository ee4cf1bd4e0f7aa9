"""A server generation: one launched (or reached) server, as an explicit state machine.

::

    STARTING --ready()--> READY --drain()--> DRAINING
        |                   |                   |
        +-------stop()------+-------stop()------+--> STOPPING --finished()--> DOWN

- ``STARTING``: spawn, handshake and first listing in progress.
- ``READY``: serves calls.
- ``DRAINING``: takes no new calls (a call timed out and the server is to
  be killed after ``kill_grace``); the calls in flight may still finish.
  A fresh generation serves new calls meanwhile: each generation's processes
  are its own :attr:`Generation.tree`, so two can overlap.
- ``STOPPING``: the reason is known, in-flight calls have failed with it,
  the teardown (tree kill) runs.
- ``DOWN``: every process of the generation is gone.

:meth:`Generation._move` is the one place the state changes, and it refuses
any transition not drawn above. The first reason given to :meth:`stop` is the
one reported: later ones (the exit status of a server we killed, say) are
consequences.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Final

from ..containment.guard import Tree
from ..transport.protocol import TransportSession
from ..wire.failures import HostError
from ..wire.mcpjson import ToolSpec


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPING = "stopping"
    DOWN = "down"


_NEXT: Final = {
    State.STARTING: {State.READY, State.STOPPING},
    State.READY: {State.DRAINING, State.STOPPING},
    State.DRAINING: {State.STOPPING},
    State.STOPPING: {State.DOWN},
    State.DOWN: set(),
}


class Generation:
    def __init__(self, number: int) -> None:
        self.number = number
        self.state = State.STARTING
        self.reason: HostError | None = None
        self.session: TransportSession | None = None
        # The generation's processes (stdio); None for HTTP (no local tree).
        self.tree: Tree | None = None
        # Retired after a timed-out call (its tree gets no SIGTERM grace).
        self.drained = False
        self.tools: list[ToolSpec] = []
        self.stopping = asyncio.Event()
        self.down = asyncio.Event()
        self._drain_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<Generation {self.number} {self.state.value}>"

    @property
    def server_pid(self) -> int | None:
        return None if self.session is None else self.session.pid

    @property
    def sandbox(self) -> str | None:
        """The sandbox backend its server was launched in (None: none, or not launched)."""
        return None if self.session is None else self.session.sandbox

    @property
    def protocol_version(self) -> str | None:
        """The MCP protocol version its session negotiated."""
        return None if self.session is None else self.session.protocol_version

    @property
    def listing_ttl(self) -> float | None:
        """How long its last listing may be reused (the server's ``ttlMs``; None: no limit)."""
        return None if self.session is None else self.session.listing_ttl

    @property
    def serving(self) -> bool:
        return self.state is State.READY

    def _move(self, to: State) -> None:
        if to not in _NEXT[self.state]:
            raise AssertionError(f"generation {self.number}: {self.state.value} -> {to.value} is not a transition")
        self.state = to

    def ready(self, tools: list[ToolSpec]) -> None:
        self.tools = tools
        self._move(State.READY)

    def drain(self, grace: float, reason: HostError) -> None:
        """Take no new calls; stop with ``reason`` after ``grace`` seconds."""
        if self.state is not State.READY:
            return
        self._move(State.DRAINING)
        self.drained = True
        self._drain_timer = asyncio.get_running_loop().call_later(grace, self.stop, reason)

    def stop(self, reason: HostError) -> None:
        """End this generation (idempotent: the first reason stays)."""
        if self.state in (State.STOPPING, State.DOWN):
            return
        self.reason = reason
        self._move(State.STOPPING)
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        self.stopping.set()
        if self.session is not None:
            self.session.end(reason)

    def finished(self) -> None:
        if self.state is not State.STOPPING:
            raise AssertionError(f"generation {self.number}: finished while {self.state.value}")
        self._move(State.DOWN)
        self.down.set()


__all__ = ["Generation", "State"]
