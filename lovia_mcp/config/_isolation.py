"""Where a connection's session host runs: the one definition of the isolation modes.

Its own module, below everything that names the modes (the configs, the
client core, the plugin, the command line), because the client core sits
below the configs and may not import them.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# "process": a worker process per connection (the server and the MCP SDK
# there); "none": the session host in the agent's own event loop.
Isolation = Literal["process", "none"]
ISOLATIONS: Final[tuple[Isolation, ...]] = get_args(Isolation)

__all__ = ["ISOLATIONS", "Isolation"]
