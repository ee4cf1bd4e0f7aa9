"""lovia's ``MCPConnection`` fields on ours: read-only views of the frozen config.

lovia's connection is a dataclass whose fields (``prefix``, ``include_tools``,
``exclude_tools``, ``needs_approval``, ``retries``, ``timeout``,
``max_output_chars``, ``result_renderer``, ``auto_reconnect``,
``close_after_run``, ``defer``) code may read; ours has the same names with
the same types (filters as sets, as lovia builds them). ``prefix``,
``close_after_run`` and ``defer`` live on the connection itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config.annotations import AutoReconnect
    from ..config.server import ServerConfig


class LoviaFields:
    """The read-only fields; the connection sets ``server``."""

    server: ServerConfig

    @property
    def include_tools(self) -> set[str] | None:
        return set(self.server.include_tools) if self.server.include_tools else None

    @property
    def exclude_tools(self) -> set[str] | None:
        return set(self.server.exclude_tools) if self.server.exclude_tools else None

    @property
    def needs_approval(self) -> Any:
        return self.server.needs_approval

    @property
    def retries(self) -> int | None:
        return self.server.retries

    @property
    def timeout(self) -> float | None:
        return self.server.timeout

    @property
    def max_output_chars(self) -> int | None:
        return self.server.max_output_chars

    @property
    def result_renderer(self) -> Any:
        """The renderer as configured (``None``: lovia's default rendering)."""
        return self.server.result_renderer

    @property
    def auto_reconnect(self) -> AutoReconnect:
        return self.server.auto_reconnect


__all__ = ["LoviaFields"]
