"""The one retry decision: whether a failed call is tried once more on a fresh server.

Decided by the failure's kind alone, then the config's ``auto_reconnect``
(``"safe"``: only tools whose annotations say read-only or idempotent).

Caveat: like lovia's plugin, the retry is at-least-once: a server that died
after doing the work but before answering does it twice; so is a call
retried because another call's timeout killed the server it ran on.
"""

from __future__ import annotations

import logging
from typing import Final

from lovia_mcp_worker.wire.mcpjson import ToolAnnotations
from lovia_mcp_worker.wire.messages import Failure

from ..config import annotations as hints
from ..config.annotations import AutoReconnect

logger = logging.getLogger("lovia_mcp")

# Failure kinds after which one retry on a fresh server can succeed.
RETRYABLE: Final = frozenset({"server_exited", "worker_died", "protocol"})
# Failure kinds that mean the server generation ended: the next request
# needs a restart, which the circuit may refuse.
ENDED: Final = frozenset({"server_exited", "worker_died", "protocol", "limit"})


def retry(
    failure: Failure,
    *,
    policy: AutoReconnect,
    annotations: ToolAnnotations | None,
    retried: bool,
    server: str,
    tool: str,
) -> bool:
    """Whether ``failure`` of a call of ``tool`` is tried again (logged either way when it could be)."""
    if failure.kind not in RETRYABLE or not policy or retried:
        return False
    if policy == "safe" and not hints.retry_is_safe(annotations):
        logger.warning(
            "%s: not retrying %r (auto_reconnect='safe': its annotations say neither "
            "read-only nor idempotent) after: %s",
            server,
            tool,
            failure.text(),
        )
        return False
    logger.warning("%s: retrying %r once on a fresh server after: %s", server, tool, failure.text())
    return True


__all__ = ["ENDED", "RETRYABLE", "retry"]
