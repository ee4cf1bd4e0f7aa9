"""Imported first by the forkserver: no garbage collection during the preload.

Importing ``mcp`` allocates hundreds of thousands of objects that live for the
whole process; collecting while they are created is pure cost (~10 % of the
forkserver's start-up, which is on the path of the first open). ``_warm``
freezes them afterwards, and each worker turns collection back on.
"""

from __future__ import annotations

import gc

gc.disable()

__all__: list[str] = []
