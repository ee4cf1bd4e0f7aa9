"""The wire protocol between the agent and a worker: the one module both sides import.

Every message is a frozen, tagged msgspec ``Struct``; :data:`AgentMessage` is what
the agent sends, :data:`WorkerMessage` what the worker answers. Frames on the
pipe are a 4-byte little-endian length followed by a msgpack body. The agent
decodes only :data:`WorkerMessage` with a typed decoder and a frame-size cap:
the worker sits on the untrusted side of the boundary and nothing it sends is
ever unpickled.

Content blocks keep the MCP SDK 2.x attribute names (``type``, ``text``,
``mime_type``, ``data``, ``uri``, ``resource``) so a ``result_renderer``
written against the SDK's models reads them unchanged.

This module must import nothing but the standard library and msgspec: the
agent process imports it and must never pull in ``mcp``.
"""

from __future__ import annotations

import struct
from typing import Any, Final, Literal, Union

import msgspec

# The wire protocol's version: the agent sends it with Open and a worker that
# speaks another refuses the connection (an agent and a forkserver from two
# installs of different versions).
PROTOCOL_VERSION: Final = 4

# A frame header: the body length, little-endian unsigned 32-bit.
HEADER: Final = struct.Struct("<I")

# MCP protocol revisions lovia-mcp speaks, newest first: those reached by the
# initialize handshake, and the stateless ones (no initialize; a per-request
# _meta envelope; server/discover is the probe).
MCP_HANDSHAKE_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MCP_MODERN_VERSIONS: Final = ("2026-07-28",)
# ServerSpec.protocol: negotiate ("auto"), the handshake only ("legacy"), or a pinned version.
MCP_PROTOCOL_MODES: Final = ("auto", "legacy", *MCP_MODERN_VERSIONS, *MCP_HANDSHAKE_VERSIONS)



# --------------------------------------------------------------------------- #
# Values carried inside messages
# --------------------------------------------------------------------------- #
class Resource(msgspec.Struct, frozen=True, omit_defaults=True):
    """An embedded resource's contents (SDK ``TextResourceContents`` / ``BlobResourceContents``)."""

    uri: str = ""
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class ContentBlock(msgspec.Struct, frozen=True, omit_defaults=True):
    """One MCP content block, whatever its ``type``; unused fields stay ``None``.

    ``extra`` keeps the JSON of fields this struct does not model (for an
    unknown block type), so nothing the server sent is silently lost.
    ``annotations`` and ``meta`` (the block's ``_meta``) are the server's
    JSON objects as dicts, named as on the SDK's models.
    """

    type: str
    text: str | None = None
    data: str | None = None
    mime_type: str | None = None
    uri: str | None = None
    name: str | None = None
    title: str | None = None
    description: str | None = None
    resource: Resource | None = None
    extra: bytes | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None

    def model_dump(self) -> dict[str, Any]:
        """A dict like the SDK model's ``model_dump()``, for renderers that call it."""
        out: dict[str, Any] = {
            f: getattr(self, f) for f in self.__struct_fields__ if f != "extra"
        }
        if self.resource is not None:
            out["resource"] = msgspec.structs.asdict(self.resource)
        if self.extra:
            out.update(msgspec.json.decode(self.extra))
        return {k: v for k, v in out.items() if v is not None}


class ToolAnnotations(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool's behaviour hints, with the SDK's attribute names (``ToolAnnotations``).

    Hints the server gives about itself: untrusted unless the user trusts
    the server (``trust_annotations=True``). ``None`` means not said.
    """

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool as listed by the server; ``input_schema`` and ``meta`` (its ``_meta``) are raw JSON."""

    name: str
    description: str | None = None
    input_schema: bytes = b"null"
    annotations: ToolAnnotations | None = None
    meta: bytes | None = None


class Limits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Limits on a server's whole process tree. ``None`` means no limit.

    - ``memory_mb``: resident memory (RSS) of the tree, watched by the worker.
    - ``cpu_seconds``: CPU time of the tree (RLIMIT_CPU per process, and watched).
    - ``max_processes``: live processes in the tree, watched (RLIMIT_NPROC is not
      used: it does not bind root and counts all of a user's processes).
    - ``max_open_files``: RLIMIT_NOFILE for each process of the tree.
    - ``max_result_bytes``: the largest single message the worker accepts from
      the server; a larger result never crosses the pipe.
    """

    memory_mb: float | None = None
    cpu_seconds: float | None = None
    max_processes: int | None = None
    max_open_files: int | None = None
    max_result_bytes: int = 32 * 1024 * 1024


class Sandbox(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An OS sandbox around a stdio server (bubblewrap; Linux).

    - ``network``: ``False`` no network at all (a fresh network namespace),
      ``True`` the host's, or a list of host names (``"*.npmjs.org"`` matches
      subdomains) reachable only through an HTTP(S) proxy run by the worker;
    - ``writable``: paths the server may write, besides its ``cwd``; the rest
      of the file system is read-only and ``/tmp`` is private;
    - ``hidden``: paths replaced by empty ones (``None``: the usual secret
      stores, :data:`DEFAULT_HIDDEN`; ``~`` is the agent's home).

    The server also gets a private pid namespace with its own ``/proc``, a
    new session, and dies with its worker.
    """

    network: bool | list[str] = False
    writable: list[str] = []
    hidden: list[str] | None = None


# Secret stores hidden by default ("~" is the home directory).
DEFAULT_HIDDEN: Final = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gcloud",
    "~/.azure",
    "~/.netrc",
    "~/.docker",
    "~/.kube",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.pypirc",
    "~/.npmrc",
    "~/.password-store",
)


class ServerSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Everything the worker needs to launch and talk to one server."""

    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    limits: Limits = Limits()
    open_timeout: float = 60.0
    kill_grace: float = 1.0
    on_timeout: Literal["kill", "cancel"] = "kill"
    restart_limit: int = 5
    restart_window: float = 60.0
    sandbox: Sandbox | None = None
    # Keep one more server READY beside the current one (a persistent
    # connection with spares): a crash or timeout restart promotes it.
    standby: bool = False
    # The MCP protocol negotiation: "auto" (probe server/discover, fall back
    # to initialize), "legacy" (initialize only), or a version to pin.
    protocol: str = "auto"


class Stats(msgspec.Struct, frozen=True, kw_only=True):
    worker_pid: int
    server_pid: int | None
    rss_bytes: int
    cpu_seconds: float
    processes: int
    calls: int
    errors: int
    timeouts: int
    restarts: int
    last_restart_reason: str | None
    uptime_seconds: float
    garbage_lines: int
    # How the tree's limits are enforced: "cgroup" (the kernel: a cgroup per
    # server generation), "watch" (rlimits and the sampled psutil watch), or
    # "none" (an HTTP server: no local tree).
    enforcement: str = "watch"
    # Processes of this worker's server trees stopped by the kernel's OOM
    # killer at memory_mb (cgroup enforcement only).
    oom_kills: int = 0
    # The MCP protocol version the current generation speaks (None: none serves).
    protocol_version: str | None = None


# --------------------------------------------------------------------------- #
# Agent -> worker
# --------------------------------------------------------------------------- #
class Open(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Start the server, do the handshake and list its tools.

    ``environ`` is the agent's environment at open time, for a worker process
    (the forkserver's copy dates from when it started); the server's
    allowlisted variables and the HTTP client's proxy settings come from it.
    """

    id: int
    spec: ServerSpec
    environ: dict[str, str] | None = None
    protocol: int = PROTOCOL_VERSION
    trace: dict[str, str] | None = None


# ``trace`` on a request: the agent's W3C trace context (``traceparent``,
# ``tracestate``) for the server, which the worker puts into the MCP
# request's ``_meta`` (the agent owns the spans; a worker has no exporter).


class ListTools(msgspec.Struct, frozen=True, tag=True):
    id: int
    trace: dict[str, str] | None = None


class CallTool(msgspec.Struct, frozen=True, tag=True):
    """Call a tool; ``arguments`` is the JSON object the model sent."""

    id: int
    name: str
    arguments: bytes
    trace: dict[str, str] | None = None


class Cancel(msgspec.Struct, frozen=True, tag=True):
    """Abandon request ``id``; ``timed_out`` applies the spec's ``on_timeout``."""

    id: int
    timed_out: bool = False


class GetStats(msgspec.Struct, frozen=True, tag=True):
    id: int


class Close(msgspec.Struct, frozen=True, tag=True):
    """Stop the server tree and exit."""

    id: int


AgentMessage = Union[Open, ListTools, CallTool, Cancel, GetStats, Close]


# --------------------------------------------------------------------------- #
# Worker -> agent
# --------------------------------------------------------------------------- #
class Opened(msgspec.Struct, frozen=True, tag=True):
    id: int
    server_pid: int | None
    tools: list[ToolSpec]
    # The MCP protocol version negotiated with the server, and how long the
    # listing may be reused (the server's ttlMs, in seconds; None: no limit).
    protocol_version: str | None = None
    listing_ttl: float | None = None


class Started(msgspec.Struct, frozen=True, tag=True):
    """Unsolicited: the worker started a fresh server generation (a restart).

    The agent follows ``server_pid`` so that, if this worker dies, it kills
    the right process group itself.
    """

    server_pid: int | None
    generation: int
    # Why the generation before it ended (None for the first), the MCP
    # protocol version it speaks, and the sandbox backend in force ("bwrap";
    # None: no sandbox): the agent makes span events of them.
    reason: str | None = None
    protocol_version: str | None = None
    sandbox: str | None = None


class Ended(msgspec.Struct, frozen=True, tag=True):
    """Unsolicited: a server generation that served has ended (its tree is being killed).

    The agent stops reporting ``server_pid`` as the connection's server if
    it is still the one it follows (a fresh generation may already serve).
    """

    server_pid: int | None
    generation: int


class Tools(msgspec.Struct, frozen=True, tag=True):
    id: int
    tools: list[ToolSpec]
    listing_ttl: float | None = None  # as on Opened


class ToolsChanged(msgspec.Struct, frozen=True, tag=True):
    """Unsolicited: the server's tool list changed (``notifications/tools/list_changed``, or a restart).

    Sent before the result of any call the server answered after notifying,
    so that call's caller already sees the new list.
    """

    tools: list[ToolSpec]


class Result(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    id: int
    content: list[ContentBlock]
    is_error: bool = False
    structured_content: bytes | None = None


class Progress(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Unsolicited: an MCP ``notifications/progress`` of the running call ``id``.

    Coalesced in the worker (at most one per ``PROGRESS_INTERVAL`` per call,
    the latest value kept), so a server flooding progress cannot flood the
    agent; the last one before the call's answer is always sent.
    """

    id: int
    progress: float
    total: float | None = None
    message: str | None = None


FailureKind = Literal[
    "server_exited",  # the server process ended (exit code or signal)
    "limit",  # a resource limit was passed and the tree was killed
    "timeout",  # the call passed its timeout and was cancelled or killed
    "too_large",  # the result passed max_result_bytes
    "protocol",  # the server broke the protocol (e.g. an unterminated giant line)
    "open",  # the server could not be started or did not finish the handshake
    "circuit_open",  # too many restarts in the window: failing fast
    "remote",  # the server answered with a JSON-RPC error
    "closed",  # the connection is closing
    "worker_died",  # the worker process ended (set by the agent side)
    "missing_mcp",  # an HTTP server needs the mcp package, which is not installed
    "internal",  # a bug in the worker
]


class Failure(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """A request failed; the agent turns this into an ``MCPError`` in one place."""

    id: int
    kind: FailureKind
    message: str
    hint: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: list[str] = []
    # For kind "limit": which one ("memory", "process", "CPU", or "oom" when
    # the kernel's OOM killer stopped the tree at memory_mb).
    limit: str | None = None


class StatsReply(msgspec.Struct, frozen=True, tag=True):
    id: int
    stats: Stats


class Closed(msgspec.Struct, frozen=True, tag=True):
    id: int


class Log(msgspec.Struct, frozen=True, tag=True):
    """A log record for the agent's ``logging``: ``stderr`` lines go to ``lovia_mcp.server.<name>``."""

    level: int
    message: str
    stderr: bool = False


WorkerMessage = Union[
    Opened, Started, Ended, Tools, ToolsChanged, Result, Progress, Failure, StatsReply, Closed, Log
]


def encoder() -> msgspec.msgpack.Encoder:
    return msgspec.msgpack.Encoder()


def agent_decoder() -> msgspec.msgpack.Decoder[WorkerMessage]:
    """The agent's decoder: typed, never untyped, never pickle."""
    return msgspec.msgpack.Decoder(WorkerMessage)


def worker_decoder() -> msgspec.msgpack.Decoder[AgentMessage]:
    return msgspec.msgpack.Decoder(AgentMessage)


__all__ = [
    "HEADER",
    "MCP_HANDSHAKE_VERSIONS",
    "MCP_MODERN_VERSIONS",
    "MCP_PROTOCOL_MODES",
    "PROTOCOL_VERSION",
    "AgentMessage",
    "CallTool",
    "Cancel",
    "Close",
    "Closed",
    "ContentBlock",
    "Ended",
    "Failure",
    "FailureKind",
    "GetStats",
    "Limits",
    "ListTools",
    "Log",
    "Open",
    "Opened",
    "DEFAULT_HIDDEN",
    "Progress",
    "Resource",
    "Result",
    "Sandbox",
    "ServerSpec",
    "Started",
    "Stats",
    "StatsReply",
    "ToolAnnotations",
    "ToolSpec",
    "Tools",
    "ToolsChanged",
    "WorkerMessage",
    "agent_decoder",
    "encoder",
    "worker_decoder",
]
