"""The gateway's audit log (``--audit-log FILE``): one JSON line per tool call, never its arguments or result.

Each line::

    {"time": "2026-01-02T03:04:05.678Z", "principal": "alice", "endpoint": "/mcp",
     "server": "search", "tool": "query", "outcome": "ok", "duration_ms": 12.3,
     "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}

- ``outcome``: ``ok``; ``tool_error`` (the server's ``isError``); the
  failure's kind (``timeout``, ``limit``, ``server_exited``, ``circuit_open``,
  ``refused``, ``cancelled``, ``error``...); ``denied`` (a tool that exists
  but the principal may not call, answered as an unknown tool); ``unknown``
  (a name that is no tool the principal can see);
- ``server`` is ``null`` when the name resolves to no server; ``tool`` is the
  name as the server knows it, cut to :data:`MAX_NAME_CHARS`;
- ``trace_id``: the W3C trace id of the call's ``traceparent`` (its
  ``_meta``, else the HTTP header), ``null`` without one.

Lifecycle: the file is opened (created ``0600`` if missing) when the
gateway starts, for appending: a line is one ``write`` on an ``O_APPEND``
descriptor, so lines of concurrent calls never interleave and a rotation
by ``copytruncate`` loses none. A write that fails (a full disk, a file
system gone read-only) is logged, at most once per :data:`FAILURE_LOG_EVERY`
with the count since, and never fails the call.

Caveats: writes are synchronous on the event loop, as cheap as a page-cache
write (``scripts/bench_gateway.py --only audit`` measures it); an audit log
on a network file system that stalls stalls the gateway with it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from lovia.exceptions import UserError

logger = logging.getLogger("lovia_mcp.gateway")

# A client may send any tool name: the log keeps enough to read it, not a megabyte.
MAX_NAME_CHARS: Final = 256
# A failing disk fails every call's write: one warning a minute says so
# without flooding the logs that are the operator's other record.
FAILURE_LOG_EVERY: Final = 60.0
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_id(meta: Mapping[str, Any] | None, header: bytes | None) -> str | None:
    """The trace id of a call's W3C ``traceparent`` (its ``_meta`` first, then the HTTP header); ``None`` if none is well formed."""
    for value in ((meta or {}).get("traceparent"), None if header is None else header.decode("latin-1")):
        if isinstance(value, str):
            match = _TRACEPARENT.fullmatch(value.strip())
            if match is not None and match.group(1) != "0" * 32:
                return match.group(1)
    return None


@dataclass(frozen=True)
class Caller:
    """Who made a call and where: what its audit line says besides the call itself."""

    principal: str
    endpoint: str
    trace: str | None = None


class AuditLog:
    """An open audit log file; :meth:`write` one call's line."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(os.path.expanduser(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise UserError(
                f"cannot open the audit log {path!r}: {exc.strerror or exc}",
                hint="Pass a writable file path (its folder must exist); lines are appended to it.",
            ) from None
        self.failures = 0
        self._unlogged = 0
        self._logged_at: float | None = None

    def write(
        self,
        *,
        principal: str,
        endpoint: str,
        server: str | None,
        tool: str,
        outcome: str,
        seconds: float,
        trace: str | None,
    ) -> None:
        """Append one call's line; a failure is logged (rate-limited) and counted, never raised."""
        now = time.time()
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
            "principal": principal,
            "endpoint": endpoint,
            "server": server,
            "tool": tool[:MAX_NAME_CHARS],
            "outcome": outcome,
            "duration_ms": round(seconds * 1000, 3),
            "trace_id": trace,
        }
        data = (json.dumps(line, ensure_ascii=True) + "\n").encode()
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(0, f"wrote {written} of {len(data)} bytes")
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.failures += 1
        self._unlogged += 1
        now = time.monotonic()
        if self._logged_at is not None and now - self._logged_at < FAILURE_LOG_EVERY:
            return
        logger.warning(
            "cannot write the audit log; the call is served without its line",
            extra={"path": self.path, "error": exc.strerror or str(exc), "lines_lost": self._unlogged},
        )
        self._logged_at, self._unlogged = now, 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


__all__ = ["FAILURE_LOG_EVERY", "MAX_NAME_CHARS", "AuditLog", "Caller", "trace_id"]
