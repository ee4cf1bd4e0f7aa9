"""Routing a sandboxed server's network through the worker's allowlist proxy."""

from __future__ import annotations

from .sandbox import SandboxError


async def route(allowed: list[str], argv: list[str], env: dict[str, str]) -> tuple[str, list[str]]:
    raise SandboxError(
        "network allowlists are not built yet in this commit",
        hint="Use Sandbox(network=False) or network=True.",
    )


__all__ = ["route"]
