"""The wire protocol between the agent and a worker: the one module both sides import.

Every message is a frozen, tagged msgspec ``Struct``; :data:`AgentMessage` is what
the agent sends, :data:`WorkerMessage` what the worker answers. Frames on the
pipe are a 4-byte little-endian length followed by a msgpack body. The agent
decodes only :data:`WorkerMessage` with a typed decoder and a frame-size cap:
the worker sits on the untrusted side of the boundary and nothing it sends is
ever unpickled.

Content blocks keep the MCP SDK 2.x attribute names (``type``, ``text``,
``mime_type``, ``data``, ``uri``, ``resource``) so a ``result_renderer``
written against the SDK's models reads them unchanged. They, the tool
listing and annotation structs, and the codec that reads a server's MCP JSON
into them (with the one pagination loop) live in :mod:`.mcpjson` beside this
one; what a server is launched under (``Limits``, ``Sandbox``) in
:mod:`.confinement`.

This module must import nothing but the standard library and msgspec: the
agent process imports it and must never pull in ``mcp``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, Literal, Union, get_args

import msgspec

from .confinement import Limits, Sandbox
from .mcpjson import ContentBlock, ToolSpec
from .refusals import EgressRefusal
from .sealed import Sealed

# The wire protocol's version: the agent sends it with Open and a worker that
# speaks another refuses the connection (an agent and a forkserver from two
# installs of different versions).
# 5: content blocks and tool annotations cross under their MCP JSON names
# (mimeType, readOnlyHint, _meta), the codec's one declaration of them.
# 6: a call carries its deadline (the worker times it out); the restart
# circuit is the agent's alone.
# 7: requests carry the agent's W3C trace context (Open/ListTools/CallTool
# .trace); Opened/Started/Tools/Stats say the MCP protocol version, the
# listing's ttl and the sandbox backend; Failure.limit names the limit.
# 8: CallTool.keep and Result.omitted: the middle of a text result the
# agent's output cap would cut stays in the worker.
# 9: Sandbox.pins: the sandbox's paths as resolved when the server was
# opened (a worker that ignored them would follow a swapped symlink).
# 10: Failure.option and .value: the setting a failure names, as data; its
# message and hint say it with OPTION_MARK / SETTING_MARK, which each front
# end renders in its own words.
# 11: Cancel.answer and the "cancelled" failure: a caller that asks is told
# whether its cancel was the call's timeout (the worker decides; spans read it);
# ToolSpec's title and outputSchema, and Stats.quarantined (tool pinning).
# 12: Result.usage: what the server's tree used during the call (CPU, peak
# memory, egress per host); Stats.call_* and egress_* its totals.
# 12: Result.denied and Stats.sandbox_denials: what the sandbox refused
# during a call, attributed to it.
# 13: Sandbox.upstream_proxy.
# 14: Sandbox.no_proxy: the allowed names reached directly, not through the
# upstream proxy.
# 15: ServerSpec.sealed: the tree a locked server starts from and its stamp,
# checked before every start.
# 16: the relay (ServerSpec.relay): Relay / Relayed carry any MCP request as
# raw JSON, ServerNotification what the server says besides tools, attributed
# to the request it came during; Opened.capabilities the server's.
# 17: ServerRequest / ServerReply: a server's own request (sampling,
# elicitation, roots) to the agent, attributed like a notification, and its answer.
# 18: Denied.refusal: a sandbox denial crosses as facts (kind, host, port,
# why; :mod:`.refusals`), which each side words with one function, not as the
# worker's prose (Denied's target and reason are gone).
PROTOCOL_VERSION: Final = 18

# A frame header: the body length, little-endian unsigned 32-bit.
HEADER: Final = struct.Struct("<I")
# On a worker's status socket from the forkserver (lovia_mcp_worker.forkserver.server):
# its pid, then its exit code (negative: the signal); a pid_t fits.
FORKSERVER_STATUS: Final = struct.Struct("q")

# MCP protocol revisions lovia-mcp speaks, newest first: those reached by the
# initialize handshake, and the stateless ones (no initialize; a per-request
# _meta envelope; server/discover is the probe).
MCP_HANDSHAKE_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MCP_MODERN_VERSIONS: Final = ("2026-07-28",)
# ServerSpec.protocol: negotiate ("auto"), the handshake only ("legacy"), or a pinned version.
MCP_PROTOCOL_MODES: Final = ("auto", "legacy", *MCP_MODERN_VERSIONS, *MCP_HANDSHAKE_VERSIONS)


# The launch defaults, one definition for both sides: the agent's configs
# default to these, and a spec that omits a field means the same.
# Spawn + handshake + tool listing. Generous: a first `npx -y pkg` or `uvx pkg`
# downloads the package inside this window.
DEFAULT_OPEN_TIMEOUT: Final = 120.0
# Between the cancel notification for a timed-out call and killing the
# server's tree: time for a well-behaved server to stop on its own.
DEFAULT_KILL_GRACE: Final = 1.0

# What a call past its timeout does to its server: "kill" retires the
# server's tree after kill_grace (a fresh server serves at once); "cancel"
# sends the cancel notification and keeps the server.
OnTimeout = Literal["kill", "cancel"]
ON_TIMEOUTS: Final[tuple[OnTimeout, ...]] = get_args(OnTimeout)
# Named for the code that branches on them; typed by the Literal, so mypy
# refuses a value it does not list.
ON_TIMEOUT_KILL: Final[OnTimeout] = "kill"
ON_TIMEOUT_CANCEL: Final[OnTimeout] = "cancel"


# --------------------------------------------------------------------------- #
# Values carried inside messages
# --------------------------------------------------------------------------- #
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
    open_timeout: float = DEFAULT_OPEN_TIMEOUT
    kill_grace: float = DEFAULT_KILL_GRACE
    on_timeout: OnTimeout = ON_TIMEOUT_KILL
    sandbox: Sandbox | None = None
    # Keep one more server READY beside the current one (a persistent
    # connection with spares): a crash or timeout restart promotes it.
    standby: bool = False
    # The MCP protocol negotiation: "auto" (probe server/discover, fall back
    # to initialize), "legacy" (initialize only), or a version to pin.
    protocol: str = "auto"
    # A locked server: the tree it runs from, as the agent checked it; every
    # start (restarts included) is refused once the tree's stamp differs.
    sealed: Sealed | None = None
    # The agent relays the rest of the protocol (lovia-mcp serve): the
    # server's notifications come as ServerNotification, and Relay is served.
    relay: bool = False


class HostEgress(msgspec.Struct, frozen=True, array_like=True):
    """Traffic through the sandbox's allowlist proxy to one destination host."""

    host: str
    connections: int  # connections the proxy opened to it
    bytes: int  # bytes relayed, both ways


class CallUsage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the server's process tree used during one ``tools/call`` (``Result.usage``).

    ``cpu_time``: CPU seconds of the tree over the call's window (the
    generation's cgroup where it has one, else the tree's processes).
    ``memory_peak``: bytes at the tree's peak in the window; ``memory_source``
    says how it was read: ``"kernel"`` (the kernel's own peak, reset when
    the server went busy) or ``"sampled"`` (the most of the readings taken,
    at the window's ends and while it lasted). ``egress``: the sandbox
    proxy's traffic per destination host in the window. ``shared``: another
    call ran on the same server during this one, so the figures are the
    server's over the window, not this call's alone (and a shared call's
    peak covers the server's whole busy spell).
    """

    cpu_time: float | None = None
    memory_peak: int | None = None
    memory_source: Literal["kernel", "sampled"] | None = None
    egress: list[HostEgress] = []
    shared: bool = False

    @property
    def egress_connections(self) -> int:
        return sum(e.connections for e in self.egress)

    @property
    def egress_bytes(self) -> int:
        return sum(e.bytes for e in self.egress)


class Stats(msgspec.Struct, frozen=True, kw_only=True):
    worker_pid: int
    server_pid: int | None
    rss_bytes: int
    cpu_seconds: float
    processes: int
    calls: int
    errors: int
    timeouts: int
    uptime_seconds: float
    garbage_lines: int
    # The agent's restart circuit counts restarts (server generations and
    # replaced workers) and fills these in; a worker sends the defaults.
    restarts: int = 0
    last_restart_reason: str | None = None
    # How the tree's limits are enforced: "cgroup" (the kernel: a cgroup per
    # server generation), "watch" (rlimits and the sampled psutil watch), or
    # "none" (an HTTP server: no local tree).
    enforcement: str = "watch"
    # Processes of this worker's server trees stopped by the kernel's OOM
    # killer at memory_mb (cgroup enforcement only).
    oom_kills: int = 0
    # The MCP protocol version the current generation speaks (None: none serves).
    protocol_version: str | None = None
    # The sandbox backend the serving (else the last) generation runs in, by its registry name; None: no sandbox.
    sandbox: str | None = None
    # Tools withheld from the model because they differ from the lock, by
    # the server's raw names; the agent fills this in (it owns the lock).
    quarantined: tuple[str, ...] = ()
    # What the server trees used while serving calls (CallUsage, summed over
    # the spells in which at least one call ran, so overlapping calls count
    # once): CPU seconds, the highest peak memory of a call (bytes), and the
    # sandbox proxy's connections and bytes. This worker's, like calls.
    call_cpu_seconds: float = 0.0
    call_memory_peak_bytes: int = 0
    egress_connections: int = 0
    egress_bytes: int = 0
    # Calls that ran beside another on the same server (CallUsage.shared).
    shared_calls: int = 0
    # Refusals by the sandbox (Denied) over the connection's life, whether or not a call was in flight.
    sandbox_denials: int = 0


# --------------------------------------------------------------------------- #
# Agent -> worker
# --------------------------------------------------------------------------- #
class Open(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Start the server, do the handshake and list its tools.

    ``environ`` is the agent's environment at open time, for a worker process
    (the forkserver's copy dates from when it started); the server's
    allowlisted variables and the HTTP client's proxy settings come from it.
    ``trace`` (here, on ``ListTools`` and ``CallTool``): the agent's W3C trace
    context (``traceparent``, ``tracestate``), which the worker puts into the
    MCP request's ``_meta`` (the agent owns the spans; a worker has no exporter).
    """

    id: int
    spec: ServerSpec
    environ: dict[str, str] | None = None
    protocol: int = PROTOCOL_VERSION
    trace: dict[str, str] | None = None


class ListTools(msgspec.Struct, frozen=True, tag=True):
    id: int
    trace: dict[str, str] | None = None


class CallTool(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Call a tool; ``arguments`` is the JSON object the model sent.

    ``timeout``: seconds from receipt to the call's deadline (``None``: none).
    The worker holds the deadline: at it, the call is cancelled, the spec's
    ``on_timeout`` applied, and the answer is a ``timeout`` failure.

    ``keep``: the model will see at most this many characters from each end
    of the result's rendered text (the agent's output cap): the worker may
    leave out the text between them, and a large ``structuredContent``
    (``session/cut.py``); ``None``: the whole result.
    """

    id: int
    name: str
    arguments: bytes
    trace: dict[str, str] | None = None
    timeout: float | None = None
    keep: int | None = None


class Cancel(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Abandon request ``id``.

    The worker decides what the cancel means: at the call's deadline it is
    the timeout (``on_timeout`` applies, and the call is answered with a
    ``timeout`` failure); before it, a plain cancel (the server gets its
    cancel grace, and a server still wedged after it is replaced), not
    answered unless ``answer``: then with a ``cancelled`` failure, so the
    caller learns which it was.
    """

    id: int
    answer: bool = False


class Relay(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Send the server MCP request ``method`` with ``params`` (a JSON object's raw bytes, as the client sent them).

    The relay of whatever is not a tool (resources, prompts, completion,
    logging): one message for every method, carried as raw JSON and never
    decoded on the way but for the era's envelope, so a new method needs no
    new message. Answered by :class:`Relayed` (the server's result or error,
    raw) or a :class:`Failure` (the server is gone, the connection closing).
    Cancelled by :class:`Cancel` like a call.
    """

    id: int
    method: str
    params: bytes | None = None


class ServerReply(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """The agent's answer to a :class:`ServerRequest` ``id``: the ``result`` or the JSON-RPC ``error`` object, raw
    JSON, written to the server as the answer to its request."""

    id: int
    result: bytes | None = None
    error: bytes | None = None


class GetStats(msgspec.Struct, frozen=True, tag=True):
    id: int


class Close(msgspec.Struct, frozen=True, tag=True):
    """Stop the server tree and exit."""

    id: int


AgentMessage = Union[Open, ListTools, CallTool, Relay, ServerReply, Cancel, GetStats, Close]


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
    generation: int = 1
    # The server's capabilities, its handshake's (or discover's) JSON object, raw.
    capabilities: bytes | None = None


class Started(msgspec.Struct, frozen=True, tag=True):
    """Unsolicited: a fresh server generation serves (a restart, for the agent's circuit).

    ``server_pid`` is for the agent to show; the worker owns the process.
    """

    server_pid: int | None
    generation: int
    # The MCP protocol version it speaks, and the sandbox backend in force
    # (its registry name; None: no sandbox): the agent makes span events
    # of them (why the one before ended came with its Ended).
    protocol_version: str | None = None
    sandbox: str | None = None


class Ended(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Unsolicited: a server generation that served has ended or was retired (its tree is being killed).

    If it is the generation the agent knows as current, the next request
    needs a restart (the agent's circuit decides); ``reason`` says why.
    A generation newer than any ``Started`` or ``Opened`` told of is a
    start that failed (it never served): a restart for the circuit too.
    ``draining``: retired, its server still alive for its calls' grace (a
    second ``Ended`` follows when it is down).
    """

    generation: int
    reason: str | None = None
    draining: bool = False


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


class Denied(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One distinct refusal by the sandbox during a call (:mod:`..session.denials` attributes it).

    ``refusal``: what was refused and why (:func:`.refusals.words` says it);
    ``count``: how often during the call; ``shared``: other calls were in
    flight on the server then, so it may have come from one of them.
    """

    refusal: EgressRefusal
    count: int = 1
    shared: bool = False


class Result(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """A call's answer; ``omitted``: characters of text left out of its middle (see ``CallTool.keep``).

    ``denied``: what the sandbox refused while the call was in flight, one entry per distinct refusal.
    """

    id: int
    content: list[ContentBlock]
    is_error: bool = False
    structured_content: bytes | None = None
    omitted: int = 0
    usage: CallUsage | None = None  # None: no local tree to measure (HTTP)
    denied: list[Denied] = []


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


class Relayed(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """The server's answer to a :class:`Relay`: its ``result`` or its JSON-RPC ``error`` object, raw JSON."""

    id: int
    result: bytes | None = None
    error: bytes | None = None


class ServerNotification(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Unsolicited (with ``ServerSpec.relay``): a notification the server sent, ``params`` raw JSON.

    Everything but progress and tool-list changes, which have messages of
    their own. ``call``: the agent's request it is attributed to, the only
    one in flight on the server's generation when it came (``None``: none
    was, or several were; stdio and HTTP say no more than the timing).
    """

    method: str
    params: bytes | None = None
    call: int | None = None


class ServerRequest(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """Unsolicited (with ``ServerSpec.relay``): a request the server sent (``sampling/createMessage``,
    ``elicitation/create``, ``roots/list``), ``params`` raw JSON.

    ``id`` is the worker's own number for it (not the server's JSON-RPC id),
    answered by one :class:`ServerReply`; ``call`` is attributed as a
    :class:`ServerNotification`'s is. The server waits for the answer (its
    own timeout bounds the wait).
    """

    id: int
    method: str
    params: bytes | None = None
    call: int | None = None


FailureKind = Literal[
    "server_exited",  # the server process ended (exit code or signal)
    "limit",  # a resource limit was passed and the tree was killed
    "timeout",  # the call passed its timeout and was cancelled or killed
    "cancelled",  # the caller cancelled the call before its timeout (answered only when asked: Cancel.answer)
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


# The settings a failure can name as the one that changes it, by their
# library names (fields of the server configs and of Limits). A failure's
# texts hold OPTION_MARK where the option's name goes ("Raise {option}") and
# SETTING_MARK where its name and value go ("({setting})"); each front end
# spells them its own way (the library ``Limits(memory_mb=...)`` and
# ``memory_mb=100``, the command line ``--memory-mb`` and ``--memory-mb 100``).
Option = Literal[
    "open_timeout", "timeout", "kill_grace", "memory_mb", "cpu_seconds", "max_processes", "max_result_bytes"
]
OPTIONS: Final[tuple[Option, ...]] = get_args(Option)
OPTION_MARK: Final = "{option}"
SETTING_MARK: Final = "{setting}"
# A front end's words for an option: its name (value None), or its setting.
Spelling = Callable[[Option, str | None], str]

# How a library user changes each option.
_LIBRARY_NAMES: Final[dict[Option, str]] = {
    "open_timeout": "open_timeout",
    "timeout": "the tool's timeout",
    "kill_grace": "kill_grace",
    "memory_mb": "Limits(memory_mb=...)",
    "cpu_seconds": "Limits(cpu_seconds=...)",
    "max_processes": "Limits(max_processes=...)",
    "max_result_bytes": "Limits(max_result_bytes=...)",
}


def library_words(option: Option, value: str | None) -> str:
    """The library's words for ``option``: how to set it, or its setting ``option=value``."""
    return _LIBRARY_NAMES[option] if value is None else f"{option}={value}"


def spelled(text: str, option: Option | None, value: str | None, words: Spelling = library_words) -> str:
    """``text`` of a failure about ``option`` (set to ``value``), in a front end's ``words``."""
    if option is None:
        return text
    return text.replace(OPTION_MARK, words(option, None)).replace(SETTING_MARK, words(option, value or ""))


class Failure(msgspec.Struct, frozen=True, tag=True, omit_defaults=True):
    """A request failed; the agent turns this into an ``MCPError`` in one place.

    ``message`` and ``hint`` may name ``option`` with OPTION_MARK and
    SETTING_MARK: read them through :meth:`text` and :meth:`hint_text`.
    """

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
    # The setting that changes the outcome, and its value when it was set.
    option: Option | None = None
    value: str | None = None

    def text(self, words: Spelling = library_words) -> str:
        """What happened, in a front end's ``words``."""
        return spelled(self.message, self.option, self.value, words)

    def hint_text(self, words: Spelling = library_words) -> str | None:
        """What to do, in a front end's ``words``."""
        return None if self.hint is None else spelled(self.hint, self.option, self.value, words)


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
    Opened,
    Started,
    Ended,
    Tools,
    ToolsChanged,
    Result,
    Progress,
    Failure,
    StatsReply,
    Closed,
    Log,
    Relayed,
    ServerNotification,
    ServerRequest,
]


def encoder() -> msgspec.msgpack.Encoder:
    return msgspec.msgpack.Encoder()


def agent_decoder() -> msgspec.msgpack.Decoder[WorkerMessage]:
    """The agent's decoder: typed, never untyped, never pickle."""
    return msgspec.msgpack.Decoder(WorkerMessage)


def worker_decoder() -> msgspec.msgpack.Decoder[AgentMessage]:
    return msgspec.msgpack.Decoder(AgentMessage)


__all__ = [
    "DEFAULT_KILL_GRACE",
    "DEFAULT_OPEN_TIMEOUT",
    "ON_TIMEOUTS",
    "OPTIONS",
    "OPTION_MARK",
    "SETTING_MARK",
    "Option",
    "Spelling",
    "library_words",
    "spelled",
    "ON_TIMEOUT_CANCEL",
    "ON_TIMEOUT_KILL",
    "OnTimeout",
    "FORKSERVER_STATUS",
    "HEADER",
    "MCP_HANDSHAKE_VERSIONS",
    "MCP_MODERN_VERSIONS",
    "MCP_PROTOCOL_MODES",
    "PROTOCOL_VERSION",
    "AgentMessage",
    "CallTool",
    "CallUsage",
    "Cancel",
    "Close",
    "Closed",
    "Denied",
    "Ended",
    "Failure",
    "FailureKind",
    "GetStats",
    "HostEgress",
    "ListTools",
    "Log",
    "Open",
    "Opened",
    "Progress",
    "Relay",
    "Relayed",
    "Result",
    "ServerNotification",
    "ServerReply",
    "ServerRequest",
    "ServerSpec",
    "Started",
    "Stats",
    "StatsReply",
    "Tools",
    "ToolsChanged",
    "WorkerMessage",
    "agent_decoder",
    "encoder",
    "worker_decoder",
]
