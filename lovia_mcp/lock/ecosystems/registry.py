"""The lock's ecosystems by name: a new one is a module in this folder and its line here."""

from __future__ import annotations

from typing import Final

from .ecosystem import Ecosystem, Runner
from .npm import Npm
from .pypi import PyPI

ECOSYSTEMS: Final[dict[str, Ecosystem]] = {e.name: e for e in (PyPI(), Npm())}


def ecosystem(name: str) -> Ecosystem | None:
    """The ecosystem a lock's ``package.ecosystem`` names; None for any other name."""
    return ECOSYSTEMS.get(name)


def parse_runner(command: str, args: list[str]) -> Runner | None:
    """The package a server's command runs through a package runner, or None (not one an ecosystem reads)."""
    for each in ECOSYSTEMS.values():
        runner = each.parse(command, args)
        if runner is not None:
            return runner
    return None


__all__ = ["ECOSYSTEMS", "ecosystem", "parse_runner"]
