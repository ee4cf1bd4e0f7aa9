"""Who hears of the sandbox's refusals: the reporter a server's launch is made under.

The allowlist proxy (:mod:`.netproxy`) and the deny-all listener of a box
with the network off (:mod:`.netbridge`) refuse things on a server's behalf, in
the worker, far from the call that caused them. The session host owns the
calls; it launches each generation under its reporter (:func:`reporting`),
and what the sandbox sets up during that launch (a proxy, a listener)
keeps the reporter it found (:func:`current`) and calls it with each
:class:`~...wire.refusals.EgressRefusal`. A context variable, not a parameter: the launch passes
through the transport and containment layers, which have no business with
denials.

A helper the launch sets up beside the server (the deny-all listener) tells
when it is ready (:func:`expect`); the host takes that (:func:`taken`) and
holds calls until it is, so that no call's attempt comes before anyone
listens.

Caveat: the reporter is read when a proxy is set up. A proxy serves every
later generation of the same host (one per allowlist and reporter), so a
host's reporter must stay the same object for its life.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable

from ...wire.refusals import EgressRefusal

Reporter = Callable[[EgressRefusal], None]
"""``reporter(refusal)``: called in the worker's event loop, once per refusal; must not raise."""

_reporter: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("lovia_mcp_sandbox_reporter", default=None)
_pending: contextvars.ContextVar[list[asyncio.Future[None]] | None] = contextvars.ContextVar(
    "lovia_mcp_sandbox_pending", default=None
)


def reporting(reporter: Reporter | None) -> None:
    """Launches made from now on in this task (and tasks it starts) report to ``reporter``."""
    _reporter.set(reporter)
    _pending.set([])


def expect(ready: asyncio.Future[None]) -> None:
    """The launch under way started a helper beside the server that is ready when ``ready`` is done."""
    pending = _pending.get()
    if pending is not None:
        pending.append(ready)


def taken() -> list[asyncio.Future[None]]:
    """The readiness of the helpers this task's launches started since the last call (then forgotten here)."""
    pending = _pending.get()
    if not pending:
        return []
    waiting = list(pending)
    pending.clear()
    return waiting


def current() -> Reporter | None:
    """The reporter the launch under way was made under (None: refusals are only logged)."""
    return _reporter.get()


__all__ = ["Reporter", "current", "expect", "reporting", "taken"]
