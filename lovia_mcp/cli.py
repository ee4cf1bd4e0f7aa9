"""The ``lovia-mcp`` command: check an MCP server before wiring it into an agent.

- ``lovia-mcp tools -- COMMAND [ARGS...]``: the tools the agent would see.
- ``lovia-mcp call TOOL '{"json": "args"}' -- COMMAND [ARGS...]``: one call,
  printed as the model would read it.
- ``lovia-mcp demo``: the offline demo (:mod:`lovia_mcp.demo`).

The server is reached exactly as the plugin reaches it (same configs, same
worker, same isolation), so what works here works in an agent.

Output: results and tables on stdout; errors on stderr as one
``lovia-mcp: error: ...`` message with its hint, never a traceback. The
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
import textwrap
import traceback
from collections.abc import Sequence
from typing import Any, Final

from lovia.exceptions import LoviaError, MCPError, UserError

from ._names import prefix_head
from .annotations import as_json
from .config import Limits, MCPServer, MCPServerStdio, MCPServerStreamableHTTP
from .render import render_mcp_content

# Exit statuses (documented in ``--help``).
EXIT_OK: Final = 0
EXIT_TOOL_ERROR: Final = 1  # the tool answered with an isError result
EXIT_USAGE: Final = 2  # argparse's own status for bad command lines
EXIT_FAILED: Final = 3  # the server could not be reached, or the call failed
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE: Final = 141  # 128 + SIGPIPE: stdout's reader went away (| head)

PROG: Final = "lovia-mcp"
# Narrowest description column before the table falls back to one block per tool.
MIN_DESCRIPTION_WIDTH: Final = 24
# Widest parameter column; longer parameter lines wrap.
MAX_PARAMETER_WIDTH: Final = 40

EXIT_STATUS_HELP: Final = """\
exit status:
  0    success
  1    call: the tool answered with an error result (isError); the result,
       rendered "[tool error] ...", is still printed on stdout
  2    usage error: bad options, bad JSON arguments, no server, unknown tool
  3    the server could not be started or reached, or the call failed
       (server crash, timeout, resource limit, protocol error)
  130  interrupted
  141  stdout was closed by its reader (e.g. piped into head)
"""

EXAMPLES: Final = f"""\
examples:
  {PROG} tools -- npx -y @modelcontextprotocol/server-everything
  {PROG} tools --json -- python my_server.py --root /tmp
  {PROG} call echo '{{"message": "hi"}}' -- npx -y @modelcontextprotocol/server-everything
  {PROG} call get_current_time '{{"timezone": "Asia/Tokyo"}}' --timeout 10 --memory-mb 512 -- uvx mcp-server-time
  {PROG} tools --url http://127.0.0.1:8000/mcp --header 'Authorization: Bearer ...'
  {PROG} demo
"""


class _UsageError(Exception):
    """A command-line mistake: reported with a hint, exit status 2."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


# --------------------------------------------------------------------------- #
# Command line
# --------------------------------------------------------------------------- #
def _formatter(prog: str) -> argparse.HelpFormatter:
    # Raw, so the epilogs keep their layout; descriptions are wrapped by _wrap.
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=min(100, shutil.get_terminal_size().columns) - 2)


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _header(text: str) -> tuple[str, str]:
    """``Name: value`` (curl's form) or ``NAME=VALUE``; a colon before any '=' wins.

    A token value often ends in '=' (base64 padding), so splitting
    ``Authorization: Bearer abc==`` at the '=' would be wrong.
    """
    colon, equals = text.find(":"), text.find("=")
    if colon > 0 and (equals < 0 or colon < equals):
        name, value = text[:colon].strip(), text[colon + 1 :].strip()
        if name and " " not in name:
            return name, value
    if equals > 0:
        return text[:equals].strip(), text[equals + 1 :]
    raise argparse.ArgumentTypeError(f"expected 'Name: value' or NAME=VALUE, got {text!r}")


def _verbosity(parser: argparse.ArgumentParser, *, top: bool) -> None:
    parser.add_argument(
        "-v", "--verbose", action="count", default=0 if top else argparse.SUPPRESS,
        help="show the lovia_mcp logs (the server's stderr included) on stderr; -vv for debug",
    )


def _server_options() -> argparse.ArgumentParser:
    """Options shared by ``tools`` and ``call``: which server, and how to run it."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("server (a command after '--', or --url)")
    g.add_argument("--url", help="a streamable-HTTP MCP endpoint instead of a command")
    g.add_argument("--header", metavar="'NAME: VALUE'", type=_header, action="append", default=[],
                   help="an HTTP header for --url (repeatable; NAME=VALUE also works)")
    g.add_argument("--name", help="the server's name: prefixes its tools as NAME__tool, as in an agent")
    g = p.add_argument_group("how the server runs")
    g.add_argument("--cwd", metavar="DIR", help="the server's working directory")
    g.add_argument("--env", metavar="NAME=VALUE", type=_pair, action="append", default=[],
                   help="set a variable in the server's environment (repeatable)")
    g.add_argument("--inherit-env", metavar="NAME", action="append", default=[],
                   help="pass this variable from the current environment (repeatable); "
                        "in process isolation the server otherwise gets only a small allowlist "
                        "(PATH, HOME, LANG, ...)")
    g.add_argument("--isolation", choices=("process", "none"), default="process",
                   help="'process' (default): the server and the MCP SDK in a worker process; "
                        "'none': in this process")
    g.add_argument("--timeout", metavar="SECONDS", type=_positive(float),
                   help="call: give up on the tool call after this long (the server tree is "
                        "killed); tools: same as --open-timeout")
    g.add_argument("--open-timeout", metavar="SECONDS", type=_positive(float),
                   help="give up if the server has not started and listed its tools after this "
                        "long (default 120: long enough for a first 'npx -y' download)")
    g = p.add_argument_group("limits on the server's process tree (process isolation)")
    g.add_argument("--memory-mb", metavar="MB", type=_positive(float), help="resident memory of the tree")
    g.add_argument("--cpu-seconds", metavar="SECONDS", type=_positive(float), help="CPU time of the tree")
    g.add_argument("--max-processes", metavar="N", type=_positive(int), help="live processes in the tree")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_wrap("Check an MCP server before wiring it into a lovia agent: list its tools, "
                          "call one, or run the offline demo. Each server runs in its own worker "
                          "process, exactly as with lovia_mcp.MCP."),
        epilog=EXAMPLES + "\n" + EXIT_STATUS_HELP,
        formatter_class=_formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _verbosity(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    server = _server_options()

    tools = sub.add_parser(
        "tools", parents=[server], formatter_class=_formatter,
        usage=f"{PROG} tools [options] (-- COMMAND [ARGS...] | --url URL)",
        help="list a server's tools (name, description, parameters)",
        description=_wrap("List the tools an agent would see: names (prefixed with --name if given), "
                          "descriptions, and parameters as sent to the model "
                          "('name?' is optional, '= x' a default)."),
        epilog=f"examples:\n  {PROG} tools -- npx -y @modelcontextprotocol/server-everything\n"
               f"  {PROG} tools --json -- python my_server.py | jq '.[].name'\n\n" + EXIT_STATUS_HELP,
    )
    tools.add_argument("--json", action="store_true",
                       help="a JSON list of {name, description, parameters} (the JSON schema) instead of a table")
    _verbosity(tools, top=False)

    call = sub.add_parser(
        "call", parents=[server], formatter_class=_formatter,
        usage=f"{PROG} call TOOL [ARGUMENTS] [options] (-- COMMAND [ARGS...] | --url URL)",
        help="call one tool and print its result as the model would read it",
        description=_wrap("Call one tool and print the result rendered as the model reads it "
                          "(an error result reads '[tool error] ...' and exits with status 1)."),
        epilog=f"examples:\n  {PROG} call add '{{\"a\": 1, \"b\": 2}}' -- python my_server.py\n"
               f"  echo '{{\"path\": \"/tmp\"}}' | {PROG} call list_dir - -- python my_server.py\n\n"
               + EXIT_STATUS_HELP,
    )
    call.add_argument("tool", metavar="TOOL", help="the tool's name (with or without the --name prefix)")
    call.add_argument("arguments", metavar="ARGUMENTS", nargs="?", default="{}",
                      help="the arguments as a JSON object (default {}); '-' reads them from stdin")
    call.add_argument("--json", action="store_true",
                      help="print {content, is_error, structured_content} as JSON instead of the rendered text")
    _verbosity(call, top=False)

    demo = sub.add_parser(
        "demo", formatter_class=_formatter,
        help="run the offline demo: a lovia agent survives its MCP server crashing",
        description=_wrap("A real lovia Agent, driven by a scripted model (offline, no API key), uses the "
                          "example server lovia_mcp/examples/demo_server.py through "
                          "MCP(..., isolation='process'): normal calls, an error result, a server crash "
                          "and recovery. Exits 0 when every expectation held, 1 otherwise."),
    )
    _verbosity(demo, top=False)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lovia-mcp")
    except PackageNotFoundError:
        return "(not installed)"


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Options before the first ``--``; the server's own command line after it."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


# --------------------------------------------------------------------------- #
# The server config
# --------------------------------------------------------------------------- #
def _server(ns: argparse.Namespace, command: list[str] | None) -> MCPServer:
    have_command = bool(command)
    example = f"{PROG} {ns.command}{' ' + ns.tool if ns.command == 'call' else ''}"
    if command is not None and not command:
        raise _UsageError("no command after '--'",
                          hint=f"Put the server's command after '--': {example} -- python server.py")
    if not have_command and ns.url is None:
        raise _UsageError(
            "no server given",
            hint=f"Put the server's command after '--' ({example} -- npx -y some-mcp-server) "
                 "or pass --url http://host/mcp.",
        )
    if have_command and ns.url is not None:
        raise _UsageError("both a command and --url given", hint="Pass one server: a command after '--', or --url.")

    limits = None
    if ns.memory_mb is not None or ns.cpu_seconds is not None or ns.max_processes is not None:
        limits = Limits(memory_mb=ns.memory_mb, cpu_seconds=ns.cpu_seconds, max_processes=ns.max_processes)
    common: dict[str, Any] = {
        "name": ns.name,
        "timeout": ns.timeout,
        "isolation": ns.isolation,
        "limits": limits,
        # One call, one answer: a retry would run a failing tool twice.
        "auto_reconnect": False,
    }
    open_timeout = ns.open_timeout if ns.open_timeout is not None else ns.timeout if ns.command == "tools" else None
    if open_timeout is not None:
        common["open_timeout"] = open_timeout

    if ns.url is not None:
        local = [opt for opt, used in (
            ("--cwd", ns.cwd is not None), ("--env", bool(ns.env)), ("--inherit-env", bool(ns.inherit_env)),
            ("--memory-mb", ns.memory_mb is not None), ("--cpu-seconds", ns.cpu_seconds is not None),
            ("--max-processes", ns.max_processes is not None),
        ) if used]
        if local:
            raise _UsageError(f"{', '.join(local)} apply to a server started from a command, not to --url",
                              hint="Drop them, or start the server with a command after '--'.")
        return MCPServerStreamableHTTP(url=ns.url, headers=dict(ns.header) or None, **common)
    if ns.header:
        raise _UsageError("--header applies to --url only", hint="Pass environment variables with --env NAME=VALUE.")
    assert command
    return MCPServerStdio(
        command=command[0],
        args=command[1:],
        env=dict(ns.env) or None,
        inherit_env=list(ns.inherit_env) or None,
        cwd=ns.cwd,
        **common,
    )


# --------------------------------------------------------------------------- #
# tools
# --------------------------------------------------------------------------- #
def _type_label(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "$ref" in schema and isinstance(schema["$ref"], str):
        return schema["$ref"].rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return "|".join(dict.fromkeys(_type_label(o) for o in options))
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array":
        return f"{_type_label(schema.get('items'))}[]"
    return str(kind) if isinstance(kind, str) else "any"


def parameter_lines(schema: dict[str, Any]) -> list[str]:
    """``name: type``, ``name?: type = default`` for each top-level property."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return []
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    lines = []
    for name, prop in props.items():
        line = f"{name}{'' if name in required else '?'}: {_type_label(prop)}"
        if isinstance(prop, dict) and "default" in prop:
            line += f" = {json.dumps(prop['default'], ensure_ascii=False)}"
        lines.append(line)
    return lines


def tools_table(tools: Sequence[Any], width: int) -> str:
    """A table of NAME / PARAMETERS / DESCRIPTION, wrapped to ``width`` columns."""
    rows = []
    for t in tools:
        params = parameter_lines(t.parameters) or ["-"]
        description = " ".join((t.description or "").split()) or "-"
        rows.append((t.name, params, description))
    name_w = max(len("NAME"), *(len(r[0]) for r in rows))
    param_w = min(MAX_PARAMETER_WIDTH, max(len("PARAMETERS"), *(len(p) for r in rows for p in r[1])))
    desc_w = width - name_w - param_w - 4
    if desc_w < MIN_DESCRIPTION_WIDTH:
        # Too narrow for columns: one block per tool.
        blocks = []
        for name, params, description in rows:
            block = [name]
            block += textwrap.wrap(description, max(20, width - 4), initial_indent="    ",
                                   subsequent_indent="    ", break_on_hyphens=False)
            block += [f"    {p}" for p in params if p != "-"]
            blocks.append("\n".join(block))
        return "\n\n".join(blocks)
    lines = [f"{'NAME':<{name_w}}  {'PARAMETERS':<{param_w}}  DESCRIPTION"]
    for name, params, description in rows:
        left = [name]
        mid = [piece for p in params for piece in (textwrap.wrap(p, param_w, subsequent_indent="  ") or [p])]
        right = textwrap.wrap(description, desc_w, break_on_hyphens=False) or [""]
        for i in range(max(len(left), len(mid), len(right))):
            cells = (left[i] if i < len(left) else "", mid[i] if i < len(mid) else "", right[i] if i < len(right) else "")
            lines.append(f"{cells[0]:<{name_w}}  {cells[1]:<{param_w}}  {cells[2]}".rstrip())
    return "\n".join(lines)


async def _tools(ns: argparse.Namespace, server: MCPServer) -> int:
    async with server.session() as conn:
        tools = conn.tools()
    if ns.json:
        out = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]
        for entry, t in zip(out, tools):
            if getattr(t, "annotations", None) is not None:
                entry["annotations"] = as_json(t.annotations)
        print(json.dumps(out, indent=2, ensure_ascii=False))
    elif not tools:
        print("The server lists no tools.")
    else:
        print(tools_table(tools, shutil.get_terminal_size().columns))
    return EXIT_OK


# --------------------------------------------------------------------------- #
# call
# --------------------------------------------------------------------------- #
def _arguments(text: str) -> dict[str, Any]:
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(
            f"the tool arguments are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            hint="""Pass a JSON object in single quotes: '{"city": "Oslo"}' (or '{}' for none).""",
        ) from None
    if not isinstance(value, dict):
        raise _UsageError(f"the tool arguments must be a JSON object, got {type(value).__name__}: {text.strip()[:80]}",
                          hint="""Wrap them in an object keyed by parameter name: '{"items": [1, 2]}'.""")
    return value


def _content_json(block: Any) -> Any:
    dump = getattr(block, "model_dump", None)
    return dump() if callable(dump) else str(block)


def _same_server(ns: argparse.Namespace, command: list[str] | None) -> str:
    """The ``tools`` command line for the server ``ns`` and ``command`` name."""
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


async def _call(
    ns: argparse.Namespace, server: MCPServer, arguments: dict[str, Any], command: list[str] | None
) -> int:
    async with server.session() as conn:
        head = prefix_head(conn.prefix)
        found = _raw_tool_name(ns.tool, conn.raw_names, head)
        if found is None:
            import difflib

            # Matched on the tool parts and the raw names, suggested as the
            # visible names: what this command and an agent both take.
            keys: dict[str, str] = {}
            for visible, raw_name in sorted(conn.raw_names.items()):
                keys.setdefault(visible[len(head):], visible)
                keys.setdefault(raw_name, visible)
            typed = ns.tool[len(head):] if head and ns.tool.startswith(head) else ns.tool
            close = list(dict.fromkeys(keys[c] for c in difflib.get_close_matches(typed, sorted(keys), n=3)))
            raise _UsageError(
                f"the server has no tool {ns.tool!r}",
                hint=(f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else "")
                + f"List them with: {_same_server(ns, command)}",
            )
        raw = found
        call = conn.call_tool(raw, arguments, timeout=ns.timeout)
        try:
            result = await (call if ns.timeout is None else asyncio.wait_for(call, ns.timeout))
        except asyncio.TimeoutError:
            raise MCPError(
                f"MCP tool {raw!r} timed out after {ns.timeout:g} s",
                hint="Raise --timeout, or find out why the tool is slow (-v shows the server's stderr).",
                tool_name=raw,
            ) from None
    if ns.json:
        print(json.dumps({
            "content": [_content_json(b) for b in result.content],
            "is_error": result.is_error,
            "structured_content": result.structured_content,
        }, indent=2, ensure_ascii=False))
    else:
        print(render_mcp_content(result.content, is_error=result.is_error))
    return EXIT_TOOL_ERROR if result.is_error else EXIT_OK


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
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a shell tool does."""
    # Python flushes stdout again at exit; point it at /dev/null so that
    # flush cannot fail with a second BrokenPipeError.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _with_hint(exc: _UsageError) -> str:
    return f"{exc}\n  hint: {exc.hint}" if exc.hint else str(exc)


# The library's hints speak Python; the command line's user typed flags.
_CLI_WORDS: Final = (
    ("Raise Limits(memory_mb=...)", "Raise --memory-mb"),
    ("Raise Limits(cpu_seconds=...)", "Raise --cpu-seconds"),
    ("Raise Limits(max_processes=...)", "Raise --max-processes"),
    ("(memory_mb=", "(--memory-mb "),
    ("(cpu_seconds=", "(--cpu-seconds "),
    ("(max_processes=", "(--max-processes "),
    ("within open_timeout=", "within --open-timeout "),
    ("or raise open_timeout", "or raise --open-timeout"),
    ("Raise the tool timeout", "Raise --timeout"),
)


def cli_words(text: str) -> str:
    """A library message with its option names as the command line spells them."""
    for python, flag in _CLI_WORDS:
        text = text.replace(python, flag)
    return text


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lovia-mcp`` entry point; returns the exit status (see ``--help``)."""
    options, command = _split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns, extra = parser.parse_known_args(options)
    if extra:
        where = f" to '{PROG} {ns.command}'" if ns.command else ""
        parser.error(f"unexpected argument(s){where}: {' '.join(extra)}"
                     + ("\n  hint: put the server's own command and its options after '--'"
                        if ns.command in ("tools", "call") else ""))
    verbosity: int = getattr(ns, "verbose", 0)
    _configure_logging(verbosity)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if ns.command == "demo":
        if command is not None:
            parser.error("demo takes no server command")
        from .demo import main as demo_main

        try:
            return demo_main()
        except BrokenPipeError:
            return _stdout_closed()

    try:
        # Mistakes in the command line, caught before anything starts.
        arguments = _arguments(ns.arguments) if ns.command == "call" else {}
        server = _server(ns, command)
    except _UsageError as exc:
        return _fail(_with_hint(exc), EXIT_USAGE)
    except UserError as exc:
        return _fail(str(exc), EXIT_USAGE)
    try:
        runner = _tools(ns, server) if ns.command == "tools" else _call(ns, server, arguments, command)
        return asyncio.run(runner)
    except _UsageError as exc:  # an unknown tool name
        return _fail(_with_hint(exc), EXIT_USAGE)
    except LoviaError as exc:
        return _fail(cli_words(str(exc)), EXIT_FAILED)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as exc:  # noqa: BLE001 - the command's promise: a message, never a traceback
        if verbosity > 1:
            traceback.print_exc()
        return _fail(f"unexpected {type(exc).__name__}: {exc}\n  hint: run with -vv for the traceback "
                     "and report it (it is a bug in lovia-mcp or its dependencies)", EXIT_FAILED)


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_TOOL_ERROR", "EXIT_USAGE", "build_parser", "main",
           "parameter_lines", "tools_table"]
