"""Preloaded by the forkserver before :mod:`._warm` when HTTP servers are used.

Importing the MCP SDK costs about half a second of CPU; done once in the
forkserver, every HTTP worker starts with it loaded. A missing ``mcp`` is
skipped by the forkserver, and the worker reports it at open time with the
install hint.
"""

from __future__ import annotations

import httpx2  # noqa: F401 - preloaded for workers
import mcp  # noqa: F401 - preloaded for workers
import mcp.client.streamable_http  # noqa: F401 - preloaded for workers

from ..transport import http  # noqa: F401 - preloaded for workers

__all__: list[str] = []
