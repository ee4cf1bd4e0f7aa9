"""Imported last by the forkserver: load what every worker needs, then freeze.

Stdio workers speak JSON-RPC with the worker's own client, so nothing of the
MCP SDK is loaded here: that keeps the forkserver's start (on the path of the
first open) short. An HTTP worker imports the SDK itself, or the forkserver
preloads it through :mod:`._warm_http` when the application uses HTTP servers.

``gc.freeze()`` moves everything imported so far into the permanent
generation, so a worker's garbage collections never touch (and so never
copy) the pages it shares with the forkserver; that keeps a worker's unique
memory small. Collection stays off in the forkserver (``_preload_begin``);
each worker turns it back on (``main.run``).
"""

from __future__ import annotations

# asyncio.to_thread's executor (the cgroup move beside the handshake) loads these lazily.
import concurrent.futures.thread  # noqa: F401 - preloaded for workers
import gc
import queue  # noqa: F401 - preloaded for workers

from ..sandbox import registry
from ..session import host  # noqa: F401 - preloaded for workers
from ..transport import jsonrpc, stdio  # noqa: F401 - preloaded for workers
from ..wire import messages
from . import worker  # noqa: F401 - preloaded for workers

# The backends' modules and their probes (user namespaces, the Landlock ABI):
# once here, so no worker imports one on a server's start.
registry.load()

# msgspec works out a message union's types on its first decoder (~1 ms):
# once here, so no worker pays it on its open's path.
messages.worker_decoder()

# No gc.collect() first: nothing imported is garbage worth the walk.
gc.freeze()

__all__: list[str] = []
