"""Processes: the forkserver, and each worker it forks.

- ``server``: the forkserver's serving side: preload once, fork workers ahead
  of their requests, kill what a dead worker left;
- ``start``: a forked child becoming a worker (idle ahead of its request, or
  forked on it);
- ``worker``: the worker's loop: frames in from the agent, a ``Host``, frames
  back out; ``channel``: its end of the agent's socket;
- ``pages``: the forkserver's pages an open writes, copied ahead by idle
  workers; ``_preload_begin``, ``_warm``, ``_warm_http``: what the forkserver
  loads before forking.

The agent's handle on the forkserver is the agent's own
(``lovia_mcp.client.forkserver``).
"""

__all__: list[str] = []
