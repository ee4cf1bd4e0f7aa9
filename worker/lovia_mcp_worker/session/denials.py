"""Sandbox denials attributed to the calls in flight.

The sandbox refuses things in the worker (the allowlist proxy, the deny-all
listener of a box with the network off), far from the call that caused them;
only the host knows which calls were on the server then. The host launches
every generation under one :class:`Attribution` (:meth:`Attribution.launching`)
and brackets each call that reaches a server with :meth:`~Attribution.begin`
and :meth:`~Attribution.end`; each refusal (:class:`~..wire.refusals.EgressRefusal`)
goes to every call in flight at that moment. With more than one in flight,
each of them gets it marked ``shared``: the worker cannot tell which call's
request it was (one server, one proxy).

A call's answer carries its distinct denials (``Result.denied``), each
counted, at most :data:`MAX_DISTINCT` of them; ``stats()`` counts every
refusal, with or without a call in flight.

Caveat: a refusal belongs to the calls in flight when the sandbox decides,
which is before the server sees it refused; a server that keeps trying
after it answered (a background task) is charged to whatever call runs then.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Final

from ..sandbox.egress import reporter
from ..wire.messages import Denied
from ..wire.refusals import EgressRefusal

# Bound on a call's wait for a helper the sandbox set up beside the server
# (the deny-all listener: made about a millisecond after bwrap has made the
# box's namespaces, long before the handshake is over, so calls seldom wait
# at all). Past it the call goes on, and what the server tries before the
# helper listens is refused unseen (logged).
HELPER_WAIT: Final = 2.0

# Distinct denials a call's answer lists: a server retrying many hosts in a
# loop must not grow the answer (or the model's view) without bound; the
# rest are counted in stats() and logged.
MAX_DISTINCT: Final = 20


class Attribution:
    """The refusals of one host's servers, attributed to its calls in flight; the host's reporter."""

    def __init__(self, log: Callable[[int, str], None]) -> None:
        self._log = log
        # Readiness of the helpers the sandbox started beside a server, not yet ready.
        self.starting: list[asyncio.Future[None]] = []
        # Per call in flight: each distinct refusal -> [count, shared];
        # None until the call's first (most calls have none: no dict per call).
        self._open: dict[int, dict[EgressRefusal, list[int]] | None] = {}
        self.total = 0
        """Refusals over the host's life, attributed or not."""

    def launching(self) -> None:
        """Launches made from the caller's task on report here (call at the top of a generation's task)."""
        reporter.reporting(self)

    def adopt(self) -> None:
        """Take the helpers the calling task's launches started: calls wait for them (:meth:`settled`)."""
        for ready in reporter.taken():
            if not ready.done():
                self.starting.append(ready)
                ready.add_done_callback(self._ready)

    def _ready(self, ready: asyncio.Future[None]) -> None:
        if ready in self.starting:
            self.starting.remove(ready)

    async def settled(self) -> None:
        """Wait, at most :data:`HELPER_WAIT`, until the helpers are ready; a late one is logged and given up.

        Calls that come together wait for the same helpers.
        """
        _, late = await asyncio.wait(list(self.starting), timeout=HELPER_WAIT)
        for ready in late:
            if not ready.done():
                ready.cancel()
                self._log(
                    logging.WARNING,
                    f"the sandbox's deny-all listener was not made within {HELPER_WAIT:g} s; "
                    "what the server tries before then is refused unseen",
                )

    def __call__(self, refusal: EgressRefusal) -> None:
        self.total += 1
        calls = self._open
        if not calls:
            return
        shared = len(calls) > 1
        for rid, seen in calls.items():
            if seen is None:
                seen = calls[rid] = {}
            entry = seen.get(refusal)
            if entry is not None:
                entry[0] += 1
                entry[1] |= shared
            elif len(seen) < MAX_DISTINCT:
                seen[refusal] = [1, shared]

    def begin(self, rid: int) -> None:
        """Call ``rid`` has reached its server: refusals from now on are (also) its own."""
        self._open[rid] = None

    def end(self, rid: int) -> list[Denied]:
        """Call ``rid`` is answered: its distinct denials, in the order they first came."""
        seen = self._open.pop(rid, None)
        if not seen:
            return []
        return [Denied(refusal=refusal, count=count, shared=bool(shared)) for refusal, (count, shared) in seen.items()]

    async def aclose(self) -> None:
        """Stop the proxies and deny-all listeners set up for this host (its connection closed); bounded."""
        # Only where one was ever set up: the proxy's modules stay unloaded otherwise.
        bridge = sys.modules.get("lovia_mcp_worker.sandbox.egress.netbridge")
        if bridge is not None:
            bridge.release(self)
        route = sys.modules.get("lovia_mcp_worker.sandbox.egress.netroute")
        if route is not None:
            await route.release(self)


__all__ = ["HELPER_WAIT", "MAX_DISTINCT", "Attribution"]
