"""The agent's client core: what the agent side does with one worker, each job in one place.

Layout (the role httpcore plays for httpx; :mod:`lovia_mcp.connection` is
the lovia-facing surface over it):

- ``core``: request ids and futures, the channel and its replacement, the
  dispatch of worker messages, the clean-up after a lost worker; a request
  ends in the answer or a ``Failure`` value, never an exception;
- ``retry``: the one retry decision, by the failure's kind;
- ``relay``: a request's :class:`~.relay.Listener`, what the caller hears
  of it while it runs (its progress, the server's notifications);
- ``circuit``: the restart circuit (only the agent sees worker deaths);
- ``worker_link``: the channel to a worker process, over a socket pair,
  or to the host in the agent's own loop (``isolation="none"``);
- ``forkserver``: the agent's handle on its forkserver and the idle
  workers it starts (taken by an open);
- ``workers``: a worker as the agent sees it (pid, exit code, join, kill);
- ``closing``: closes a run's end started, finished in the background and
  waited for by ``MCP.aclose()``, ``close_spares()`` and the loop's end.
"""

__all__: list[str] = []
