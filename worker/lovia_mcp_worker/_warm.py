"""Imported last by the forkserver: load what every worker needs, then freeze.

``gc.freeze()`` moves everything imported so far into the permanent
generation, so a worker's garbage collections never touch (and so never
copy) the pages it shares with the forkserver; that keeps a worker's unique
memory small. Collection stays off in the forkserver (``_preload_begin``);
each worker turns it back on (``main.run``).
"""

from __future__ import annotations

import gc

import anyio  # noqa: F401 - preloaded for workers
import mcp  # noqa: F401 - preloaded for workers
import mcp.client.stdio  # noqa: F401 - preloaded for workers
import mcp.client.streamable_http  # noqa: F401 - preloaded for workers
import mcp.shared._httpx_utils  # noqa: F401 - preloaded for workers
import mcp_types  # noqa: F401 - preloaded for workers

from . import host, main  # noqa: F401 - preloaded for workers

# No gc.collect() first: nothing imported is garbage worth the walk.
gc.freeze()

__all__: list[str] = []
