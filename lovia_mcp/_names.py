"""Model-visible tool names: safe for every provider, unique within a server.

Providers reject a whole request when any tool name falls outside
``^[a-zA-Z0-9_-]{1,64}$``, and lovia's Agent fails a run when two tools share
a name; MCP servers promise neither. :func:`tool_names` maps a server's raw
names to names that satisfy both, and the connection keeps the way back, so
the server is always called by its real name.

Caveats: a name that was already valid, short enough and unique is kept
exactly, so ordinary servers see the names lovia's own plugin gives them.
Any other name gets a suffix derived from the raw name alone, so it does not
move when the server adds, removes or reorders its other tools.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import Final

# The strictest provider rule (OpenAI, Anthropic, Gemini): the whole name,
# prefix included.
MAX_NAME: Final = 64
# "_" plus six hex digits of sha1: 24 bits, so two names of one server
# sharing a suffix by chance is a one-in-millions event (and still resolved).
SUFFIX_HEX: Final = 6
SUFFIX_LEN: Final = 1 + SUFFIX_HEX
# Room a prefix always leaves for the tool part (suffix included): without
# it a long server name would cut every tool of that server down to a hash.
MIN_TOOL_ROOM: Final = 16
# Between a server's name and its tool's, in the plugin's prefixes and the
# gateway's tool names alike.
PREFIX_SEP: Final = "__"
EMPTY_NAME: Final = "tool"

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_VALID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def sanitize(name: str) -> str:
    """``name`` in ``[a-zA-Z0-9_-]``: accents folded (``café`` -> ``cafe``), the rest ``_``."""
    # NFKD splits an accented letter into its base and a combining mark;
    # dropping the marks keeps the name readable instead of a row of "_".
    folded = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    return _UNSAFE.sub("_", folded) or EMPTY_NAME


def _digest(raw: str, salt: int = 0) -> str:
    data = raw if salt == 0 else f"{raw}\0{salt}"
    # surrogatepass: a server's JSON may carry a lone surrogate; it must
    # still hash, not raise.
    return hashlib.sha1(data.encode("utf-8", "surrogatepass")).hexdigest()[:SUFFIX_HEX]


def _suffixed(base: str, raw: str, room: int, salt: int = 0) -> str:
    return f"{base[: room - SUFFIX_LEN]}_{_digest(raw, salt)}"


def prefix_head(prefix: str | None) -> str:
    """What every visible name of a server with this ``name=`` starts with ("" for none)."""
    if not prefix:
        return ""
    safe = sanitize(prefix)
    limit = MAX_NAME - len(PREFIX_SEP) - MIN_TOOL_ROOM
    if len(safe) > limit:
        # Suffixed from the raw prefix, so two long server names sharing
        # their first characters still give distinct prefixes.
        safe = _suffixed(safe, prefix, limit)
    return safe + PREFIX_SEP


def tool_names(prefix: str | None, raw_names: Sequence[str]) -> list[str | None]:
    """The model-visible name of each raw name, in order; ``None`` for a repeat.

    A raw name listed again is the same tool listed twice: the first stays,
    later ones are ``None`` (the caller drops them). The result depends only
    on the set of raw names and the prefix, never on their order.
    """
    head = prefix_head(prefix)
    room = MAX_NAME - len(head)
    unique = list(dict.fromkeys(raw_names))

    first: dict[str, str] = {}
    for raw in unique:
        base = sanitize(raw)
        if base == raw and len(raw) <= room:
            first[raw] = raw
        else:
            first[raw] = _suffixed(base, raw, room)
    claims: dict[str, list[str]] = {}
    for raw, part in first.items():
        claims.setdefault(part, []).append(raw)

    chosen: dict[str, str] = {raw: part for part, raws in claims.items() if len(raws) == 1 for raw in raws}
    taken = set(chosen.values())
    # Sorted, so which of two colliding names gets which suffix does not
    # depend on the server's listing order.
    colliding = sorted(raw for raws in claims.values() if len(raws) > 1 for raw in raws)
    for raw in colliding:
        base = sanitize(raw)
        # A name whose first pick was already its salt-0 suffix needs another.
        start = 1 if first[raw] == _suffixed(base, raw, room) else 0
        for salt in itertools.count(start):
            part = _suffixed(base, raw, room, salt)
            if part not in taken:
                break
        chosen[raw] = part
        taken.add(part)

    out: list[str | None] = []
    seen: set[str] = set()
    for raw in raw_names:
        if raw in seen:
            out.append(None)
            continue
        seen.add(raw)
        out.append(head + chosen[raw])
    return out


def is_valid(name: str) -> bool:
    """Whether every provider accepts ``name`` as a tool name."""
    return _VALID.fullmatch(name) is not None


__all__ = ["MAX_NAME", "is_valid", "prefix_head", "sanitize", "tool_names"]
