"""Talking to a server: its transports and what they return.

- ``protocol``: the contract every transport keeps for the session above it
  (``TransportSession``, ``OnProgress``);
- ``stdio``: one server process, its pipes and how it ends; ``lines``: its
  output as lines (pure); ``jsonrpc``: the
  worker's own JSON-RPC 2.0 client over it; ``era``: the protocol eras
  (the handshake, 2026-07-28) and how the client negotiates between them;
  ``_jsonscan``: a message's id without parsing it;
- ``http``: streamable HTTP through the MCP SDK's public API (the one place
  the worker imports ``mcp``).

Both read results and listings with the wire's MCP-JSON codec
(:mod:`~lovia_mcp_worker.wire.mcpjson`), pagination included.
"""

__all__: list[str] = []
