"""A call's deadline, owned here: the timer, the verdict "timed out", ``on_timeout``, and the words.

A change to what a timeout does is a change to this module, and to no other
on either side: the agent takes "timed out" from the answer's kind, the
gateway relays the answer, spans read the kind.

The worker owns every call's deadline (``CallTool.timeout``, seconds from
receipt). At the deadline the call is cancelled (its server is sent
``notifications/cancelled``), counted, and answered with a ``timeout``
failure worded by :func:`timed_out`; then the spec's ``on_timeout`` applies:

- ``"kill"``: the call's generation is retired: new calls go to a fresh
  server at once, the calls still running on the old one get its
  ``kill_grace`` and then fail as ``server_exited`` (:func:`killed_beside`;
  the agent retries them once), and its tree is killed without a SIGTERM
  grace (:mod:`.contain`);
- ``"cancel"``: the server keeps running but gets its cancel grace: it must
  answer a ping within ``kill_grace`` or it is retired as wedged
  (:meth:`.generations.Generations.probe`).

The verdict: a ``Cancel`` from the agent is the timeout when it arrives at
the deadline (within :data:`CANCEL_SLACK`):
lovia's own ``wait_for`` fires then, with the same timeout, and only this
side knows when the call arrived. This side's own timer fires
``CANCEL_SLACK`` after the deadline, so a caller that times the call itself
cancels first and reports its own error; it answers callers without one.

Cost: one timer for all the calls, armed for the earliest deadline
(:class:`~lovia_mcp_worker.wire.timers.TimerHeap`, the agent's backstop's
too): a call due after it costs a heap push and no timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Literal

from ..wire.failures import HostError
from ..wire.messages import ON_TIMEOUT_CANCEL, ON_TIMEOUT_KILL, OPTION_MARK, ServerSpec
from ..wire.timers import TimerHeap
from .calls import Calls
from .generation import Generation

# A cancel that reaches the worker this close before a call's deadline is
# the timeout: the caller's timer fires at the deadline and its cancel
# crosses the pipe in about the time the call took to arrive, but either
# crossing may have waited in a busy loop on a loaded machine. The worker's
# own timer fires as long after the deadline, so a caller timing the call
# itself (lovia's wait_for) cancels first and reports its own error.
CANCEL_SLACK: Final = 0.25

# What became of a timed-out call's server, for its answer's words.
Outcome = Literal["killed", "kept", "unreached"]

Retire = Callable[[Generation, float, HostError], None]
Probe = Callable[[Generation | None, float], None]


def timed_out(timeout: float, outcome: Outcome) -> HostError:
    """What a call that reached its deadline is told, whoever asks (library, command line, gateway)."""
    done = {
        "killed": "it was cancelled and its server killed (a fresh server serves the next call)",
        "kept": "it was cancelled (the server was kept)",
        "unreached": "it was cancelled before it reached a server",
    }[outcome]
    return HostError(
        "timeout",
        f"the call passed its {timeout:.3g} s timeout: {done}",
        hint=f"Raise {OPTION_MARK}, or ask the tool for less work.",
        option="timeout",
        value=f"{timeout:.3g}",
    )


def killed_beside() -> HostError:
    """What the other calls on a server killed for a timed-out call are told.

    ``server_exited``, so that under ``auto_reconnect`` a call that merely ran
    beside the one that timed out is retried once on the fresh server (the
    timed-out call itself already got its timeout answer).
    """
    return HostError(
        "server_exited",
        "the server was killed after another call on it passed its timeout",
        hint=f"A fresh server serves new calls. Raise {OPTION_MARK}, or use on_timeout={ON_TIMEOUT_CANCEL!r} "
        "for servers that honour cancellation.",
        option="timeout",
    )


class Deadlines:
    """The deadlines of one host's calls in flight, and what passing one does.

    ``calls``: the host's books (tasks, and the generation each call
    reached); ``retire`` and ``probe``: its generations' (a kill, the cancel
    grace). :attr:`spec` is the open's, set by the host.
    """

    def __init__(self, calls: Calls, retire: Retire, probe: Probe) -> None:
        self.spec: ServerSpec | None = None
        self.timeouts = 0
        self._calls = calls
        self._retire = retire
        self._probe = probe
        # Each timed call's deadline (loop time). The caller's own timer, if
        # it has one, fires first and reports its own timeout error; this
        # side's answers the callers without one.
        self._timers = TimerHeap(slack=CANCEL_SLACK)
        # Calls timed out here, and what became of their servers: their
        # tasks answer with :meth:`answer`.
        self._expired: dict[int, Outcome] = {}

    def add(self, rid: int, timeout: float) -> None:
        """Call ``rid`` is due ``timeout`` seconds from now."""
        deadline = asyncio.get_running_loop().time() + timeout
        self._timers.add(rid, deadline, self._expire)

    def forget(self, rid: int) -> None:
        """Call ``rid`` has ended (its coroutine calls this as it ends)."""
        self._timers.forget(rid)
        self._expired.pop(rid, None)

    # -- the verdict ----------------------------------------------------------- #
    def cancelled(self, rid: int) -> bool:
        """The agent cancelled call ``rid``: whether that is its timeout (then applied here) or already was.

        ``False``: a plain cancel, the host's to carry out.
        """
        if rid in self._expired:
            return True  # answered, or answering, as timed out
        found = self._timers.due(rid)
        if found is None or asyncio.get_running_loop().time() < found - CANCEL_SLACK:
            return False
        # The caller's timer and this side's deadline: one timeout.
        self._expire(rid)
        return True

    def _expire(self, rid: int) -> None:
        """Call ``rid`` passed its deadline: cancel it, count it, apply ``on_timeout``."""
        task = self._calls.tasks.get(rid)
        if task is None or task.done() or rid in self._expired:
            return
        gen = self._calls.on.get(rid)
        self.timeouts += 1
        spec = self.spec
        outcome: Outcome = "unreached" if gen is None else "kept"
        if spec is not None and gen is not None:
            if spec.on_timeout == ON_TIMEOUT_KILL:
                self._retire(gen, spec.kill_grace, killed_beside())
                outcome = "killed"
            else:
                self._probe(gen, spec.kill_grace)
        self._expired[rid] = outcome
        if self._calls.cancel(rid, task):
            self.forget(rid)  # it never ran: nobody is left to answer

    def answer(self, rid: int, timeout: float | None) -> HostError | None:
        """The answer of call ``rid`` (sent with ``timeout``), cancelled here: its timeout; ``None``: not timed out."""
        outcome = self._expired.get(rid)
        return None if outcome is None else timed_out(timeout or 0.0, outcome)

    def stop(self) -> None:
        """Stop the timer (the host is closing: it cancels the calls)."""
        self._timers.stop()


__all__ = ["CANCEL_SLACK", "Deadlines", "Outcome", "killed_beside", "timed_out"]
