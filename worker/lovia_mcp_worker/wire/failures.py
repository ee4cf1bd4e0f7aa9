"""Every way a server can fail, as a :class:`HostError`: pure functions, no I/O.

The host decides *when* something failed; this module says *what* the
caller is told: the ``kind`` (one of :data:`~lovia_mcp_worker.wire.messages.FailureKind`,
which the agent maps to ``MCPError.kind`` and its retry policy), the message,
the hint, the exit code or signal and the stderr tail. Keeping them here
makes the wording testable without starting a process, and keeps one
spelling of each failure. A stderr tail that shows a certificate or proxy
problem adds, to any failure's hint, the variable to pass
(:func:`~lovia_mcp_worker.wire.environment.hint`, read against the
worker's environment: the one impure step here).

A failure that a setting would change names it as data (``option`` and its
``value``), its texts saying it with ``OPTION_MARK`` / ``SETTING_MARK``: the
library words them ``Limits(memory_mb=...)`` and ``memory_mb=100``, the
command line ``--memory-mb`` and ``--memory-mb 100``, each from its own table.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Sequence
from typing import Final, Literal, NamedTuple

from . import environment
from .confinement import Limits
from .messages import OPTION_MARK, SETTING_MARK, Failure, FailureKind, Option, spelled

# Hints, each said in one place.
HINT_LOG = "Check the server's log (stderr tail below)."
HINT_STDIO = "Check that the command is an MCP server speaking stdio (stderr tail below)."
HINT_TOO_LARGE: Final = f"Raise {OPTION_MARK} or ask the tool for less."
HINT_ARGS = "Check the tool's name and arguments against its schema."
HINT_NOT_MCP = "The server is not speaking MCP correctly."
HINT_NOT_STDIO_SERVER = (
    "Check the command: an MCP stdio server reads JSON-RPC requests on stdin and answers on stdout "
    "(try it with: lovia-mcp tools -- <command> [args...])."
)
# What to do about each limit, by the option that raises it.
HINT_MEMORY: Final = f"Raise {OPTION_MARK} or make the tool use less memory."
HINT_PROCESSES: Final = f"Raise {OPTION_MARK} or stop the server from forking."
HINT_CPU: Final = f"Raise {OPTION_MARK} or make the tool do less work."
LimitOption = Literal["memory_mb", "max_processes", "cpu_seconds"]
LIMIT_HINTS: Final[dict[LimitOption, str]] = {
    "memory_mb": HINT_MEMORY,
    "max_processes": HINT_PROCESSES,
    "cpu_seconds": HINT_CPU,
}
# Package runners: each resolves and installs the server it names at every start.
PACKAGE_RUNNERS: Final = frozenset({"uvx", "uv", "pipx", "npx", "pnpm", "bunx", "yarn"})
# What a write the box refused looks like on stderr (bwrap: a read-only root; Landlock: no write right).
_REFUSED_WRITE: Final = re.compile(r"Read-only file system|os error 30|EROFS|Permission denied|os error 13|EACCES")
HINT_RUNNER_IN_BOX: Final = (
    "{runner} resolves and installs the server at every start: it must write its cache and reach the package "
    "registry, and the sandbox allows neither. Lock the server once with `lovia-mcp lock --config FILE`: a "
    "locked server starts from a verified cache with no package manager and no network (docs/lock.md)."
)
# Bytes of a server's stdout quoted when it wrote something other than JSON-RPC.
STDOUT_QUOTE_BYTES = 120


def with_tail(hint: str, stderr_tail: Sequence[str]) -> str:
    """``hint`` with "(stderr tail below)" only when there is a tail to show."""
    if stderr_tail:
        return hint
    return hint.replace(" (stderr tail below).", " (it wrote nothing on stderr).")


def with_environment_hint(hint: str | None, stderr_tail: Sequence[str]) -> str | None:
    """``hint``, and what to pass when the stderr tail shows a certificate or proxy problem.

    Read against the worker's environment, which is the agent's (the trust and
    proxy variables the server got, or did not).
    """
    extra = environment.hint(stderr_tail, os.environ) if stderr_tail else None
    if extra is None or (hint and extra in hint):  # a failure made from another keeps its hint once
        return hint
    return extra if not hint else f"{hint} {extra}"


def _stdout(head: bytes) -> str:
    """What a server wrote on stdout instead of JSON-RPC, quoted (its first bytes)."""
    shown = head[:STDOUT_QUOTE_BYTES].decode("utf-8", "replace")
    more = "..." if len(head) > STDOUT_QUOTE_BYTES else ""
    return f"{shown!r}{more}"


class Breach(NamedTuple):
    """A limit a server's tree passed: which (``what``), by how much, and the setting it passed."""

    what: str  # "memory", "process", "CPU"
    figure: str  # what the tree used
    option: LimitOption
    value: str  # the limit as set


class HostError(Exception):
    """A request failure with everything the agent needs to explain it."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        hint: str | None = None,
        exit_code: int | None = None,
        signal_name: str | None = None,
        stderr_tail: Sequence[str] = (),
        limit: str | None = None,
        option: Option | None = None,
        value: str | None = None,
    ) -> None:
        super().__init__(spelled(message, option, value))
        self.kind: FailureKind = kind
        # May name ``option`` with OPTION_MARK / SETTING_MARK: each front end
        # spells it; :attr:`text` is the library's words, for the worker's logs.
        self.message = message
        self.hint = with_environment_hint(hint, stderr_tail)
        self.exit_code = exit_code
        self.signal_name = signal_name
        self.stderr_tail = list(stderr_tail)
        self.limit = limit
        self.option: Option | None = option
        self.value = value

    @property
    def text(self) -> str:
        """The message in the library's words."""
        return spelled(self.message, self.option, self.value)

    def failure(self, request_id: int) -> Failure:
        return Failure(
            id=request_id,
            kind=self.kind,
            message=self.message,
            hint=self.hint,
            exit_code=self.exit_code,
            signal=self.signal_name,
            stderr_tail=self.stderr_tail,
            limit=self.limit,
            option=self.option,
            value=self.value,
        )


class RemoteError(Exception):
    """The server answered a request with a JSON-RPC error object."""

    def __init__(self, code: object, message: object, data: object = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def exited(returncode: int, stderr_tail: Sequence[str], limits: Limits) -> HostError:
    """The server process ended with ``returncode`` (negative: killed by that signal)."""
    if returncode < 0 and -returncode == getattr(signal, "SIGXCPU", -1):
        return HostError(
            "limit",
            f"the server passed its CPU limit ({SETTING_MARK}) and was killed by SIGXCPU",
            hint=HINT_CPU,
            signal_name="SIGXCPU",
            stderr_tail=stderr_tail,
            option="cpu_seconds",
            value=f"{limits.cpu_seconds:g}",
        )
    if returncode < 0:
        name = signal_name(-returncode)
        return HostError(
            "server_exited",
            f"the server was killed by {name}",
            hint=with_tail(HINT_LOG, stderr_tail),
            signal_name=name,
            stderr_tail=stderr_tail,
        )
    return HostError(
        "server_exited",
        f"the server exited with code {returncode}",
        hint=with_tail(HINT_LOG, stderr_tail),
        exit_code=returncode,
        stderr_tail=stderr_tail,
    )


def runner_in_box(boxed_command: str | None, stderr_tail: Sequence[str]) -> str | None:
    """The hint for a package runner that a sandbox stopped (its cache unwritable, no registry); None if not that.

    ``boxed_command``: the server's command when it runs in a sandbox.
    """
    runner = os.path.basename(boxed_command or "")
    if runner not in PACKAGE_RUNNERS:
        return None
    text = "\n".join(stderr_tail)
    if _REFUSED_WRITE.search(text) or environment.NETWORK_ERRORS.search(text):
        return HINT_RUNNER_IN_BOX.format(runner=runner)
    return None


def exited_before_handshake(
    returncode: int, head: bytes, stderr_tail: Sequence[str], limits: Limits, boxed_command: str | None = None
) -> HostError:
    """The server ended before answering ``initialize``: say what it wrote instead.

    A command that wrote something other than JSON-RPC on stdout, or exited
    cleanly having written nothing at all, is not an MCP stdio server; that
    is an ``open`` failure (a fresh start would do the same). A crash with
    nothing on stdout stays a crash, its stderr tail explaining it, unless
    it is a package runner the sandbox stopped (``boxed_command``: the
    command, when the server runs in a sandbox): then the hint says to lock.
    """
    base = exited(returncode, stderr_tail, limits)
    if base.kind == "limit":
        return base
    message = f"{base.message} before answering the MCP handshake"
    if head:
        message += (
            f"; it wrote {_stdout(head)} on stdout instead of JSON-RPC: it does not look like an MCP stdio server"
        )
    elif returncode == 0:
        message += "; it wrote nothing on stdout" + ("" if stderr_tail else " or stderr")
        message += ": it does not look like an MCP stdio server"
    else:
        return HostError(
            base.kind,
            message,
            hint=runner_in_box(boxed_command, stderr_tail) or base.hint,
            exit_code=base.exit_code,
            signal_name=base.signal_name,
            stderr_tail=stderr_tail,
        )
    return HostError(
        "open",
        message,
        hint=HINT_NOT_STDIO_SERVER,
        exit_code=base.exit_code,
        signal_name=base.signal_name,
        stderr_tail=stderr_tail,
    )


def echoed(method: str, head: bytes, stderr_tail: Sequence[str]) -> HostError:
    """The command sent our own request back (``cat`` does): it is not a server."""
    return HostError(
        "open",
        f"the command sent lovia-mcp's own {method!r} request back on stdout instead of answering it "
        f"(it wrote {_stdout(head)}), as 'cat' would: it does not look like an MCP stdio server",
        hint=HINT_NOT_STDIO_SERVER,
        stderr_tail=stderr_tail,
    )


def exec_failed(command: str | None, why: str, returncode: int) -> HostError:
    return HostError(
        "open",
        f"could not start {command!r}: {why}",
        hint="Check the command, its interpreter line and cwd.",
        exit_code=returncode,
    )


def pipe_closed(which: str, stderr_tail: Sequence[str]) -> HostError:
    """The server closed its stdout or stdin but did not exit."""
    return HostError(
        "server_exited",
        f"the server closed its {which} and did not exit; it was stopped",
        hint=f"Check the server's log; an MCP stdio server must keep its {which} open.",
        stderr_tail=stderr_tail,
    )


def open_timed_out(
    name: str,
    open_timeout: float,
    stderr_tail: Sequence[str],
    *,
    head: bytes | None = None,
    answered: bool = False,
) -> HostError:
    """Start-up took too long; ``head``: what a stdio server wrote on stdout that was not JSON-RPC.

    ``head`` is None for an HTTP server (no stdout to speak of);
    ``answered``: the handshake was answered (the listing was not).
    """
    message = f"server {name!r} did not finish start-up (spawn, handshake, tool listing) within {SETTING_MARK} s"
    if answered:
        message += ": it answered the MCP handshake but not the tool listing"
    elif head is not None:
        message += ": it never answered the MCP initialize request"
        if head:
            message += (
                f" and wrote {_stdout(head)} on stdout instead of JSON-RPC: it does not look like an MCP stdio server"
            )
        else:
            message += " and wrote nothing on stdout"
    return HostError(
        "open",
        message,
        hint=f"Check that the command is an MCP server speaking stdio, or raise {OPTION_MARK}.",
        stderr_tail=stderr_tail,
        option="open_timeout",
        value=f"{open_timeout:g}",
    )


def start_failed(detail: str, stderr_tail: Sequence[str]) -> HostError:
    """The handshake or the first listing failed with the server still running."""
    return HostError(
        "open",
        f"the server failed during start-up (handshake or tool listing): {detail}",
        hint=with_tail(HINT_STDIO, stderr_tail),
        stderr_tail=stderr_tail,
    )


def lost(detail: str, stderr_tail: Sequence[str]) -> HostError:
    return HostError(
        "server_exited",
        f"lost the connection to the server: {detail}",
        hint=with_tail(HINT_LOG, stderr_tail),
        stderr_tail=stderr_tail,
    )


def http_failed(url: str | None, detail: str, *, opened: bool) -> HostError:
    return HostError(
        "server_exited" if opened else "open",
        f"could not talk to {url}: {detail}",
        hint="Check the URL and that the server is running and reachable.",
    )


def remote(what: str, error: RemoteError) -> HostError:
    return HostError(
        "remote",
        f"the server answered {what} with an error: {error.message} (code {error.code})",
        hint=HINT_ARGS,
    )


def bad_reply(what: str, detail: str) -> HostError:
    return HostError("protocol", f"the server's reply to {what} {detail}", hint=HINT_NOT_MCP)


def too_large(cap: int, size: int, *, complete: bool) -> HostError:
    shown = f"{size:,} bytes" if complete else f"{size:,} bytes or more"
    return HostError(
        "too_large",
        f"the server's message was larger than max_result_bytes={cap:,} ({shown}); it was dropped in the worker",
        hint=HINT_TOO_LARGE,
        option="max_result_bytes",
    )


def unattributable(cap: int, size: int, stderr_tail: Sequence[str]) -> HostError:
    """An over-long line that cannot be a reply to any request: the stream is lost."""
    return HostError(
        "protocol",
        f"the server's message was larger than max_result_bytes={cap:,} ({size:,} bytes or more) "
        "and carried no readable request id, so the server was restarted",
        hint=HINT_TOO_LARGE,
        stderr_tail=stderr_tail,
        option="max_result_bytes",
    )


def limit(breach: Breach, stderr_tail: Sequence[str], *, oom: bool = False) -> HostError:
    """``oom``: the kernel's OOM killer stopped the tree (cgroup), not the worker's watch."""
    return HostError(
        "limit",
        f"the server passed its {breach.what} limit: {breach.figure} ({SETTING_MARK}); it was killed",
        hint=LIMIT_HINTS[breach.option],
        stderr_tail=stderr_tail,
        limit="oom" if oom else breach.what,
        option=breach.option,
        value=breach.value,
    )


def wire_mismatch(worker: int, agent: int) -> HostError:
    """An Open from an agent that speaks another wire protocol (two installs of different versions)."""
    return HostError(
        "internal",
        f"the worker speaks wire protocol {worker}, the agent {agent}",
        hint="The agent and its worker come from different lovia-mcp installs; restart the agent process.",
    )


def closed(message: str = "the connection was closed") -> HostError:
    return HostError("closed", message)


def wedged(wait: float) -> HostError:
    """Why a server that did not answer a ping after a cancelled call is replaced.

    ``server_exited``, so that a call that was waiting on it is retried once
    (under ``auto_reconnect``) on the fresh server.
    """
    return HostError(
        "server_exited",
        f"the server did not answer a ping within {wait:g} s of a cancelled call (it ignores cancellation "
        "and is blocked); it was replaced",
        hint=f"A fresh server serves new calls. Make the tool honour notifications/cancelled, or raise {OPTION_MARK}.",
        option="kill_grace",
    )


def leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    inner = leaf(exc)
    return f"{type(inner).__name__}: {inner}"


__all__ = [
    "HINT_ARGS",
    "HINT_LOG",
    "HINT_NOT_MCP",
    "HINT_NOT_STDIO_SERVER",
    "HINT_STDIO",
    "HINT_TOO_LARGE",
    "Breach",
    "HINT_CPU",
    "HINT_MEMORY",
    "HINT_PROCESSES",
    "HostError",
    "LIMIT_HINTS",
    "LimitOption",
    "RemoteError",
    "bad_reply",
    "closed",
    "STDOUT_QUOTE_BYTES",
    "describe",
    "echoed",
    "exec_failed",
    "exited",
    "exited_before_handshake",
    "leaf",
    "http_failed",
    "limit",
    "lost",
    "open_timed_out",
    "pipe_closed",
    "remote",
    "signal_name",
    "start_failed",
    "wedged",
    "wire_mismatch",
    "too_large",
    "unattributable",
    "runner_in_box",
    "with_environment_hint",
    "with_tail",
]
