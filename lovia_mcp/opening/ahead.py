"""Work done ahead of a run, and the one place runs begin and end.

Three things are kept ready so that a run does not wait for them:

- **idle workers**: the forkserver forks workers ahead of the next opens
  (:mod:`..client.forkserver`); every connection's worker is taken from them;
- **spares**: whole connections, opened ahead for the next per-run open of a
  server with ``spares=N`` (:mod:`.spares`);
- **standby**: one more server kept ready inside a persistent connection's
  worker, promoted when the serving one crashes or times out (the worker's
  ``session.standby``; the agent only asks for it).

Refilling the first two costs CPU, so it waits while a run of an ``MCP``
plugin is in progress: the plugin tells :func:`run_began` and
:func:`run_ended`, and nothing else does. A standby is refilled by its worker
beside its own connection's calls.
"""

from __future__ import annotations

from ..client import forkserver
from . import spares


def run_began() -> None:
    """A run of an ``MCP`` plugin began: refills of idle workers and spares wait for it to end."""
    spares.run_began()
    forkserver.run_began()


def run_ended() -> None:
    """A run of an ``MCP`` plugin ended (its closes handed off): with none left, the refills start."""
    spares.run_ended()
    forkserver.run_ended()


__all__ = ["run_began", "run_ended"]
