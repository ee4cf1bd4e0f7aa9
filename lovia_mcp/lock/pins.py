"""Tool pinning: a listing screened against the lock.

At every listing (the open, a restart, ``tools/list_changed``) each tool's
canonical definition (:mod:`.definition`) is compared with its pin. A tool
whose definition differs, or that the lock does not know, has *drifted*;
what happens to it is the server's ``pin`` policy:

- ``"quarantine"`` (the default where a lock exists): withheld from the
  model, named in the log and in ``stats().quarantined``, and refused if
  called by name; the server's other tools keep working;
- ``"warn"``: offered, with a warning naming it;
- ``"off"``: not screened.

``lovia-mcp check`` shows a drifted tool field by field and fails;
``lovia-mcp lock --update`` pins what is listed now, after review.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, Literal, get_args

from lovia_mcp_worker.wire.mcpjson import ToolSpec

from .definition import changed_fields, definition, definition_hash
from .lockfile import Locked

PinPolicy = Literal["quarantine", "warn", "off"]
PIN_POLICIES: Final[tuple[PinPolicy, ...]] = get_args(PinPolicy)
DEFAULT_PIN: Final[PinPolicy] = "quarantine"


@dataclass(frozen=True)
class Drift:
    """A listed tool that does not match the lock."""

    name: str  # the server's raw name
    new: dict[str, object]  # its definition now
    old: dict[str, object] | None = None  # as pinned; None: the lock does not know it
    server_known: bool = True  # False: the lock has no entry for the server at all

    @property
    def fields(self) -> list[str]:
        return [] if self.old is None else changed_fields(self.old, self.new)

    def reason(self) -> str:
        if not self.server_known:
            return "the server is not in the lock"
        if self.old is None:
            return "not in the lock"
        return f"{', '.join(self.fields)} changed since the lock"

    def lines(self) -> list[str]:
        """Old against new, field by field (a new tool: its definition)."""
        out: list[str] = []
        if self.old is None:
            for field, value in self.new.items():
                out.append(f"  + {field}: {_shown(value)}")
            return out
        for field in self.fields:
            out.append(f"  {field}:")
            out.append(f"    - {_shown(self.old.get(field))}")
            out.append(f"    + {_shown(self.new.get(field))}")
        return out


def _shown(value: object) -> str:
    if value is None:
        return "(absent)"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def screen(specs: list[ToolSpec], locked: Locked) -> dict[str, Drift]:
    """Each listed tool that does not match its pin, by raw name."""
    entry = locked.entry
    pins = {} if entry is None else entry.tools
    drift: dict[str, Drift] = {}
    for spec in specs:
        if spec.name in drift:
            continue  # listed twice: the first listing is the one used
        now = definition(spec)
        pin = pins.get(spec.name)
        if pin is not None and pin.hash == definition_hash(now):
            continue
        drift[spec.name] = Drift(
            name=spec.name, new=now, old=None if pin is None else pin.definition, server_known=entry is not None
        )
    return drift


def summary(drift: dict[str, Drift]) -> str:
    """``'a' (description changed since the lock), 'b' (not in the lock)``."""
    return ", ".join(f"{name!r} ({d.reason()})" for name, d in sorted(drift.items()))


__all__ = ["DEFAULT_PIN", "PIN_POLICIES", "Drift", "PinPolicy", "screen", "summary"]
