"""The ``lovia-mcp`` command: check an MCP server before wiring it into an agent.

- ``lovia-mcp tools -- COMMAND [ARGS...]``: the tools the agent would see.
- ``lovia-mcp call TOOL '{"json": "args"}' -- COMMAND [ARGS...]``: one call,
  printed as the model would read it.
- ``lovia-mcp check --config mcp.json``: every server of a config file
  opened at once, one row each (status, tools, open time, error).
- ``lovia-mcp lock --config mcp.json``: pin the servers (:mod:`lovia_mcp.lock`).
- ``lovia-mcp serve --config mcp.json``: the gateway (:mod:`lovia_mcp.gateway`).
- ``lovia-mcp doctor``: what the sandbox holds on this machine (:mod:`.doctor`).
- ``lovia-mcp demo``: the offline demo (:mod:`lovia_mcp.demo`).

Any of the first three takes ``--config FILE`` (``--server NAME`` to pick
entries) instead of a command; the parts live in :mod:`._args` (the command
line), :mod:`._servers` (which servers), :mod:`._table` (tables) and
:mod:`._progress` (the status line on a terminal).

The server is reached exactly as the plugin reaches it (same configs, same
worker, same isolation), so what works here works in an agent.

Output: results and tables on stdout; errors on stderr as one
``lovia-mcp: error: ...`` message with its hint, never a traceback; on a
terminal, a status line on stderr while the command waits (nothing when
piped). The
library logs nothing by itself; ``-v`` shows the ``lovia_mcp`` logs (the
server's stderr lines among them), ``-vv`` adds debug records.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import shutil
import sys
import time
import traceback
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from lovia.exceptions import LoviaError, MCPError, UserError
from lovia_mcp_worker.wire.messages import Option

from .._names import prefix_head
from ..config.annotations import as_json
from ..connection._errors import reworded
from ..lock.pins import summary
from ..opening.servers import MCPServer
from ..render import render_mcp_content
from ._args import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TOOL_ERROR,
    EXIT_USAGE,
    OPTION_FLAGS,
    PROG,
    UsageError,
    build_parser,
    split_command,
)
from ._progress import Progress, show_progress_records
from ._servers import label, servers_from
from ._table import CheckRow, check_table, drift_lines, parameter_lines, tools_table
from ._terminal import TerminalFormatter, terminal_block, terminal_json, terminal_line

if TYPE_CHECKING:
    from ..connection.live import MCPConnection


# --------------------------------------------------------------------------- #
# call
# --------------------------------------------------------------------------- #
def _arguments(text: str) -> dict[str, Any]:
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"the tool arguments are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            hint="""Pass a JSON object in single quotes: '{"city": "Oslo"}' (or '{}' for none).""",
        ) from None
    if not isinstance(value, dict):
        raise UsageError(
            f"the tool arguments must be a JSON object, got {type(value).__name__}: {text.strip()[:80]}",
            hint="""Wrap them in an object keyed by parameter name: '{"items": [1, 2]}'.""",
        )
    return value


def _content_json(block: Any) -> Any:
    dump = getattr(block, "model_dump", None)
    return dump() if callable(dump) else str(block)


def _same_server(ns: argparse.Namespace, command: list[str] | None, server: MCPServer) -> str:
    """The ``tools`` command line for the server ``ns`` and ``command`` name."""
    if ns.config is not None:
        return f"{PROG} tools --config {shlex.quote(ns.config)} --server {shlex.quote(server.name or '')}"
    where = f"-- {shlex.join(command)}" if command else f"--url {shlex.quote(ns.url)}"
    return f"{PROG} tools{' --name ' + shlex.quote(ns.name) if ns.name else ''} {where}"


def _raw_tool_name(wanted: str, raw_names: dict[str, str], head: str) -> str | None:
    """The server's name for the tool the user typed, or None.

    Takes the name as an agent sees it, the same without the ``--name``
    prefix, or the server's own raw name (names the server lists with spaces
    or dots are offered under a made-safe name, but typing the raw one works).
    """
    for visible in (wanted, head + wanted):
        if visible in raw_names:
            return raw_names[visible]
    return wanted if wanted in raw_names.values() else None


def _pick(ns: argparse.Namespace, servers: list[MCPServer]) -> MCPServer:
    """The server of a config file that has the tool: the one named, or the one whose prefix it has."""
    if len(servers) == 1:
        return servers[0]
    prefixed = [s for s in servers if s.name and ns.tool.startswith(prefix_head(s.name))]
    if prefixed:
        return max(prefixed, key=lambda s: len(s.name or ""))
    names = ", ".join(s.name or "" for s in servers)
    raise UsageError(
        f"{ns.config} has {len(servers)} servers: which one has the tool {ns.tool!r}?",
        hint=f"Pass --server NAME (one of {names}), or the tool's name with its prefix (NAME__tool).",
    )


async def _open(server: MCPServer, progress: Progress, stack: AsyncExitStack) -> MCPConnection:
    """A session of ``server`` on ``stack``, with "starting NAME… N s" on a terminal while it opens."""
    async with progress.waiting(f"starting {label(server)}"):
        return await stack.enter_async_context(server.session())


async def _call(
    ns: argparse.Namespace,
    servers: list[MCPServer],
    arguments: dict[str, Any],
    command: list[str] | None,
    progress: Progress,
) -> int:
    server = _pick(ns, servers)
    async with AsyncExitStack() as stack:
        conn = await _open(server, progress, stack)
        head = prefix_head(conn.prefix)
        found = _raw_tool_name(ns.tool, conn.raw_names, head)
        typed = ns.tool[len(head) :] if head and ns.tool.startswith(head) else ns.tool
        if found is None and typed in conn.quarantined:
            locked = server.locked
            assert locked is not None
            raise UsageError(
                f"the tool {typed!r} is quarantined: {conn.drift[typed].reason()}",
                hint=f"See what changed with: {locked.command('check', server.name)}; "
                f"if the change is wanted: {locked.command('lock --update', server.name)}",
            )
        if found is None:
            import difflib

            # Matched on the tool parts and the raw names, suggested as the
            # visible names: what this command and an agent both take.
            keys: dict[str, str] = {}
            for visible, raw_name in sorted(conn.raw_names.items()):
                keys.setdefault(visible[len(head) :], visible)
                keys.setdefault(raw_name, visible)
            typed = ns.tool[len(head) :] if head and ns.tool.startswith(head) else ns.tool
            close = list(dict.fromkeys(keys[c] for c in difflib.get_close_matches(typed, sorted(keys), n=3)))
            raise UsageError(
                f"the server has no tool {ns.tool!r}",
                hint=(f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else "")
                + f"List them with: {_same_server(ns, command, server)}",
            )
        raw = found
        call = conn.call_tool(raw, arguments, timeout=ns.timeout)
        try:
            async with progress.waiting(f"calling {ns.tool}"):
                result = await (call if ns.timeout is None else asyncio.wait_for(call, ns.timeout))
        except asyncio.TimeoutError:
            raise MCPError(
                f"MCP tool {raw!r} timed out after {ns.timeout:g} s",
                hint="Raise --timeout, or find out why the tool is slow (-v shows the server's stderr).",
                tool_name=raw,
            ) from None
    if ns.json:
        print(
            terminal_json(
                {
                    "content": [_content_json(b) for b in result.content],
                    "is_error": result.is_error,
                    "structured_content": result.structured_content,
                }
            )
        )
    else:
        print(terminal_block(render_mcp_content(result.content, is_error=result.is_error)))
    return EXIT_TOOL_ERROR if result.is_error else EXIT_OK


# --------------------------------------------------------------------------- #
# tools, check
# --------------------------------------------------------------------------- #
async def _tools_of(server: MCPServer, progress: Progress, named: bool) -> list[Any]:
    try:
        async with AsyncExitStack() as stack:
            conn = await _open(server, progress, stack)
            _note_drift(server, conn)
            return list(conn.tools())
    except LoviaError as exc:
        if not named or repr(label(server)) in str(exc):
            raise
        # Several servers: say which one failed (in the command line's words,
        # which the new error cannot be reworded into later).
        said = reworded(exc, cli_words)
        assert isinstance(said, LoviaError)
        raise LoviaError(f"server {label(server)!r}: {said.args[0] if said.args else said}", hint=said.hint) from None


def _note_drift(server: MCPServer, conn: MCPConnection) -> None:
    """Tools that differ from the lock, said on stderr: the command shows no log by default, and this is never silent."""
    if not conn.drift or server.locked is None:
        return
    withheld = "withheld" if conn.quarantined else "offered anyway (pin='warn')"
    print(
        terminal_block(
            f"{PROG}: note: server {label(server)!r}: {len(conn.drift)} tool(s) {withheld} because they differ "
            f"from the lock: {summary(conn.drift)}\n  see what changed with: {server.locked.command('check', server.name)}"
        ),
        file=sys.stderr,
    )


async def _tools(ns: argparse.Namespace, servers: list[MCPServer], progress: Progress) -> int:
    # All at once, as the plugin opens them; every open finishes (and closes) before an error is raised.
    listed = await asyncio.gather(*(_tools_of(s, progress, len(servers) > 1) for s in servers), return_exceptions=True)
    for outcome in listed:
        if isinstance(outcome, BaseException):
            raise outcome
    tools = [t for outcome in listed if not isinstance(outcome, BaseException) for t in outcome]
    if ns.json:
        out = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]
        for entry, t in zip(out, tools):
            if getattr(t, "annotations", None) is not None:
                entry["annotations"] = as_json(t.annotations)
        print(terminal_json(out))
    elif not tools:
        print("The server lists no tools." if len(servers) == 1 else "The servers list no tools.")
    else:
        print(tools_table(tools, shutil.get_terminal_size().columns))
    return EXIT_OK


async def _check_one(server: MCPServer, progress: Progress) -> CheckRow:
    start = time.monotonic()
    opened: float | None = None
    try:
        async with AsyncExitStack() as stack:
            conn = await _open(server, progress, stack)
            opened = time.monotonic() - start
            count = len(conn.tools())
            drift = tuple(d for _, d in sorted(conn.drift.items()))
    except LoviaError as exc:
        error = _said(exc)
    except Exception as exc:  # noqa: BLE001 - a row of the table, never a traceback
        error = f"unexpected {type(exc).__name__}: {exc}"
    else:
        if drift:
            locked = server.locked
            assert locked is not None
            return CheckRow(
                name=label(server),
                ok=False,
                tools=count,
                open_seconds=opened,
                status="drift",
                drift=drift,
                error=f"{len(drift)} tool(s) differ from the lock "
                f"({'withheld' if conn.quarantined else 'offered: pin=warn'}): {summary(conn.drift)}\n"
                f"  hint: if the change is wanted, pin the tools as they are now: "
                f"{locked.command('lock --update', server.name)}",
            )
        return CheckRow(name=label(server), ok=True, tools=count, open_seconds=opened)
    return CheckRow(
        name=label(server),
        ok=False,
        tools=None,
        open_seconds=time.monotonic() - start if opened is None else opened,
        error=error,
    )


async def _check(ns: argparse.Namespace, servers: list[MCPServer], progress: Progress) -> int:
    rows = await asyncio.gather(*(_check_one(s, progress) for s in servers))
    if ns.json:
        print(terminal_json([r.as_json() for r in rows]))
    else:
        print(check_table(rows, shutil.get_terminal_size().columns))
        details = [line for row in rows for line in drift_lines(row)]
        if details:
            print()
            print(terminal_block("\n".join(details)))
    sys.stdout.flush()
    for row in rows:
        if not row.ok and row.error:
            named = repr(row.name) in row.error
            _fail(f"{'' if named else f'server {row.name!r}: '}{row.error}", EXIT_FAILED)
    return EXIT_OK if all(r.ok for r in rows) else EXIT_FAILED


# --------------------------------------------------------------------------- #
# lock
# --------------------------------------------------------------------------- #
def _lock(ns: argparse.Namespace, progress: Progress) -> int:
    from ..opening.config_file.locking import lock_config

    overrides: dict[str, Any] = {}
    if ns.open_timeout is not None:
        overrides["open_timeout"] = float(ns.open_timeout)

    def say(message: str) -> None:
        logging.getLogger("lovia_mcp").info("%s", message)

    async def go() -> tuple[Any, list[Any]]:
        async with progress.waiting("locking"):
            return await lock_config(ns.config, lock=ns.lock, names=ns.server, update=ns.update, say=say, **overrides)

    path, outcomes = asyncio.run(go())
    width = max((len(o.name) for o in outcomes), default=0)
    for o in outcomes:
        if o.action == "failed":
            continue
        tools = f"{o.tools} tool{'s' if o.tools != 1 else ''} pinned"
        extra = f", {o.package}" if o.package else ""
        kept = " (already in the lock; --update re-pins)" if o.action == "kept" else ""
        print(terminal_line(f"{o.name.ljust(width)}  {o.action}  {tools}{extra}{kept}"))
    print(terminal_line(f"wrote {path}"))
    sys.stdout.flush()
    status = EXIT_OK
    for o in outcomes:
        if o.action == "failed":
            assert o.error is not None
            status = _fail(f"server {o.name!r}: {_said(o.error)}", EXIT_FAILED)
    return status


# --------------------------------------------------------------------------- #
# main
# --------------------------------------------------------------------------- #
def _configure_logging(verbosity: int) -> None:
    log = logging.getLogger("lovia_mcp")
    if verbosity <= 0:
        # No handler anywhere would send warnings to logging's last-resort
        # handler (stderr): the command prints only its own messages.
        log.addHandler(logging.NullHandler())
        return
    handler = logging.StreamHandler(sys.stderr)
    # The server's stderr lines are among the records: its words, escaped.
    handler.setFormatter(TerminalFormatter("%(name)s: %(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a shell tool does."""
    # Python flushes stdout again at exit; point it at /dev/null so that
    # flush cannot fail with a second BrokenPipeError.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _show_config_notes() -> None:
    """Keys the config loader ignored (another client's), said once each on stderr."""
    log = logging.getLogger("lovia_mcp.config")
    if any(getattr(h, "lovia_mcp_notes", False) for h in log.handlers):
        return  # main() called again in one process
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TerminalFormatter(f"{PROG}: note: %(message)s"))
    handler.lovia_mcp_notes = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _with_hint(exc: UsageError) -> str:
    return f"{exc}\n  hint: {exc.hint}" if exc.hint else str(exc)


def cli_words(option: Option, value: str | None) -> str:
    """The command line's words for an option a failure names: its flag, or the flag and its value."""
    flag = OPTION_FLAGS[option]
    return flag if value is None else f"{flag} {value}"


def _said(error: BaseException) -> str:
    """``error`` as the command line says it: the options it names spelled as flags."""
    return str(reworded(error, cli_words))


def _fail(message: str, status: int) -> int:
    # A server's error message, its stderr tail in the hint: its words, escaped.
    print(terminal_block(f"{PROG}: error: {message}"), file=sys.stderr)
    return status


def _unexpected(exc: Exception, verbosity: int) -> int:
    """An error no part of lovia-mcp said it would raise: a message (the traceback with -vv), exit 3."""
    if verbosity > 1:
        traceback.print_exc()
    return _fail(
        f"unexpected {type(exc).__name__}: {exc}\n  hint: run with -vv for the traceback "
        "and report it (it is a bug in lovia-mcp or its dependencies)",
        EXIT_FAILED,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lovia-mcp`` entry point; returns the exit status (see ``--help``)."""
    options, command = split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns, extra = parser.parse_known_args(options)
    if extra:
        where = f" to '{PROG} {ns.command}'" if ns.command else ""
        parser.error(
            f"unexpected argument(s){where}: {' '.join(extra)}"
            + (
                "\n  hint: put the server's own command and its options after '--'"
                if ns.command in ("tools", "call", "check")
                else ""
            )
        )
    verbosity: int = getattr(ns, "verbose", 0)
    _configure_logging(verbosity)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if ns.command == "demo":
        if command is not None:
            parser.error("demo takes no server command")
        from ..demo.run import main as demo_main

        try:
            return demo_main()
        except BrokenPipeError:
            return _stdout_closed()

    if ns.command == "lock":
        if command is not None:
            parser.error("lock takes no server command: put the servers in the --config file")
        _show_config_notes()
        lock_progress = Progress.on_stderr()
        lock_progress.enabled = lock_progress.enabled and verbosity == 0
        try:
            return _lock(ns, lock_progress)
        except LoviaError as exc:
            return _fail(_said(exc), EXIT_USAGE if isinstance(exc, UserError) else EXIT_FAILED)
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            return _stdout_closed()
        except OSError as exc:  # the file system refused the lock file or the cache
            return _fail(
                f"{exc}\n  hint: Check that the folder exists and can be written (--lock FILE writes another).",
                EXIT_FAILED,
            )
        except Exception as exc:  # noqa: BLE001 - the command's promise: a message, never a traceback
            return _unexpected(exc, verbosity)
        finally:
            lock_progress.clear()

    if ns.command == "serve":
        if command is not None:
            parser.error("serve takes no server command: put the servers in the --config file")
        from ..gateway.serve import main as serve_main

        return serve_main(ns)

    if ns.command == "doctor":
        if command is not None:
            parser.error("doctor takes no server command: name the servers with --config")
        from .doctor import main as doctor_main

        return doctor_main(ns)

    try:
        # Mistakes in the command line, caught before anything starts.
        arguments = _arguments(ns.arguments) if ns.command == "call" else {}
        if ns.config is not None:
            _show_config_notes()
        servers = servers_from(ns, command)
    except UsageError as exc:
        return _fail(_with_hint(exc), EXIT_USAGE)
    except UserError as exc:
        return _fail(str(exc), EXIT_USAGE)
    progress = Progress.on_stderr()
    if verbosity > 0:
        # -v writes log lines, which would break into the status line; they
        # say what is going on (progress records among them) instead.
        progress.enabled = False
    show_progress_records(progress)
    try:
        if ns.command == "tools":
            runner = _tools(ns, servers, progress)
        elif ns.command == "check":
            runner = _check(ns, servers, progress)
        else:
            runner = _call(ns, servers, arguments, command, progress)
        return asyncio.run(runner)
    except UsageError as exc:  # an unknown tool name
        return _fail(_with_hint(exc), EXIT_USAGE)
    except LoviaError as exc:
        return _fail(_said(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as exc:  # noqa: BLE001 - the command's promise: a message, never a traceback
        return _unexpected(exc, verbosity)
    finally:
        progress.clear()


__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_TOOL_ERROR",
    "EXIT_USAGE",
    "build_parser",
    "check_table",
    "cli_words",
    "main",
    "parameter_lines",
    "tools_table",
]
