"""The ``lovia-mcp`` command line: its options, subcommands, help texts and exit statuses."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any, Final

from lovia_mcp_worker.wire.confinement import Limits
from lovia_mcp_worker.wire.messages import DEFAULT_KILL_GRACE, Option

from ..config._isolation import ISOLATIONS

# The flag that sets each option a failure can name as the one to change:
# errors say these where the library says its option names.
OPTION_FLAGS: Final[dict[Option, str]] = {
    "open_timeout": "--open-timeout",
    "timeout": "--timeout",
    "kill_grace": "--kill-grace",
    "memory_mb": "--memory-mb",
    "cpu_seconds": "--cpu-seconds",
    "max_processes": "--max-processes",
    "max_result_bytes": "--max-result-bytes",
}

EXIT_OK: Final = 0
EXIT_TOOL_ERROR: Final = 1  # the tool answered with an isError result
EXIT_USAGE: Final = 2  # argparse's own status for bad command lines
EXIT_FAILED: Final = 3  # the server could not be reached, or the call failed
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE: Final = 141  # 128 + SIGPIPE: stdout's reader went away (| head)

PROG: Final = "lovia-mcp"

EXIT_STATUS_HELP: Final = """\
exit status:
  0    success
  1    call: the tool answered with an error result (isError); the result,
       rendered "[tool error] ...", is still printed on stdout
  2    usage error: bad options, bad JSON arguments, no server, unknown tool
  3    the server could not be started or reached, or the call failed
       (server crash, timeout, resource limit, protocol error);
       check: at least one server failed, or has tools that differ
       from the lock
  130  interrupted
  141  stdout was closed by its reader (e.g. piped into head)
"""

# lock's own: it calls no tool, and a server that fails leaves the others locked.
LOCK_EXIT_STATUS_HELP: Final = """\
exit status:
  0    every server asked for was locked, or kept as the lock had it
  2    usage error: bad options, a config or lock file that cannot be read
       or has a mistake (an unknown key, an unset variable), no such --server
  3    a server could not be installed, started or pinned: the lock is
       written with the others, and each failure is on stderr; or the lock
       file could not be written
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
  {PROG} check --config .mcp.json
  {PROG} lock --config .mcp.json
  {PROG} tools --sandbox --network api.github.com --writable ./out -- npx -y some-mcp-server
  {PROG} call time__get_current_time '{{"timezone": "UTC"}}' --config .mcp.json
  {PROG} demo
"""


class UsageError(Exception):
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


def _positive(kind: type[int] | type[float], *, zero: bool = False) -> Any:
    """A parser of positive numbers of ``kind`` (with ``zero``, of numbers >= 0)."""
    wanted = f"a {'non-negative' if zero else 'positive'} {kind.__name__}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if not (value >= 0 if zero else value > 0):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
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
        "-v",
        "--verbose",
        action="count",
        default=0 if top else argparse.SUPPRESS,
        help="show the lovia_mcp logs (the server's stderr included) on stderr; -vv for debug",
    )


def _server_options() -> argparse.ArgumentParser:
    """Options shared by ``tools`` and ``call``: which server, and how to run it."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("server (a command after '--', --url, or --config)")
    g.add_argument("--url", help="a streamable-HTTP MCP endpoint instead of a command")
    g.add_argument(
        "--header",
        metavar="'NAME: VALUE'",
        type=_header,
        action="append",
        default=[],
        help="an HTTP header for --url (repeatable; NAME=VALUE also works)",
    )
    g.add_argument("--name", help="the server's name: prefixes its tools as NAME__tool, as in an agent")
    g.add_argument(
        "--config",
        metavar="FILE",
        help="the servers of a config file (.mcp.json, .vscode/mcp.json, Claude Desktop's, Cursor's); "
        "each entry's key is its --name",
    )
    g.add_argument(
        "--server",
        metavar="NAME",
        action="append",
        default=[],
        help="with --config: only this entry (repeatable); the others are not read, so their variables need not be set",
    )
    _lock_option(g)
    g = p.add_argument_group("how the server runs")
    g.add_argument("--cwd", metavar="DIR", help="the server's working directory")
    g.add_argument(
        "--env",
        metavar="NAME=VALUE",
        type=_pair,
        action="append",
        default=[],
        help="set a variable in the server's environment (repeatable)",
    )
    g.add_argument(
        "--inherit-env",
        metavar="NAME",
        action="append",
        default=[],
        help="pass this variable from the current environment (repeatable); "
        "in process isolation the server otherwise gets only a small allowlist "
        "(PATH, HOME, LANG, ...)",
    )
    g.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        help="'process' (default): the server and the MCP SDK in a worker process; 'none': in this process",
    )
    g.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive(float),
        help="call: give up on the tool call after this long (the server tree is "
        "killed); tools: same as --open-timeout",
    )
    g.add_argument(
        "--open-timeout",
        metavar="SECONDS",
        type=_positive(float),
        help="give up if the server has not started and listed its tools after this "
        "long (default 120: long enough for a first 'npx -y' download)",
    )
    g.add_argument(
        "--kill-grace",
        metavar="SECONDS",
        type=_positive(float, zero=True),
        help="after a timed-out call's cancel, how long the server has before its tree is killed "
        f"(default {DEFAULT_KILL_GRACE:g})",
    )
    g = p.add_argument_group("sandbox (Linux, process isolation; any of these turns it on)")
    g.add_argument(
        "--sandbox",
        action="store_true",
        help="run the server in Sandbox(): no network, the file system read-only but for its cwd, secret stores hidden",
    )
    g.add_argument(
        "--network",
        metavar="HOST",
        action="append",
        default=[],
        help="let the sandboxed server reach this host name through the worker's proxy "
        "(repeatable; '*.example.com' for subdomains)",
    )
    g.add_argument(
        "--writable",
        metavar="PATH",
        action="append",
        default=[],
        help="let the sandboxed server write this path besides its cwd (repeatable)",
    )
    g.add_argument(
        "--upstream-proxy",
        metavar="URL",
        help="reach the --network hosts through this proxy (http://HOST:PORT), where the network's only way "
        "out is a proxy",
    )
    g.add_argument(
        "--no-proxy",
        metavar="HOST",
        action="append",
        default=[],
        help="with --upstream-proxy, reach this --network host directly instead (repeatable; '*.corp.internal')",
    )
    # The registry names the backends without loading any of them.
    from lovia_mcp_worker.sandbox.registry import names

    g.add_argument(
        "--sandbox-backend",
        choices=names(),
        help="'auto' (default): namespaces (bubblewrap) where they can be made, else Landlock",
    )
    g = p.add_argument_group("limits on the server's process tree (process isolation)")
    g.add_argument("--memory-mb", metavar="MB", type=_positive(float), help="resident memory of the tree")
    g.add_argument("--cpu-seconds", metavar="SECONDS", type=_positive(float), help="CPU time of the tree")
    g.add_argument("--max-processes", metavar="N", type=_positive(int), help="live processes in the tree")
    g.add_argument(
        "--max-result-bytes",
        metavar="BYTES",
        type=_positive(int),
        help=f"the largest message the server may send (default {Limits().max_result_bytes // 2**20} MiB; "
        "--url servers too)",
    )
    return p


def _lock_option(g: Any) -> None:
    g.add_argument(
        "--lock",
        metavar="FILE",
        help="with --config: the lock file (default: <config stem>.lock.json beside the config, if it exists)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_wrap(
            "Check an MCP server before wiring it into a lovia agent: list its tools, "
            "call one, check every server of a config file, or run the offline demo. Each server runs in its own worker "
            "process, exactly as with lovia_mcp.MCP."
        ),
        epilog=EXAMPLES + "\n" + EXIT_STATUS_HELP,
        formatter_class=_formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _verbosity(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    server = _server_options()

    tools = sub.add_parser(
        "tools",
        parents=[server],
        formatter_class=_formatter,
        usage=f"{PROG} tools [options] (-- COMMAND [ARGS...] | --url URL | --config FILE)",
        help="list a server's tools (name, description, parameters)",
        description=_wrap(
            "List the tools an agent would see: names (prefixed with --name if given), "
            "descriptions, and parameters as sent to the model "
            "('name?' is optional, '= x' a default)."
        ),
        epilog=f"examples:\n  {PROG} tools -- npx -y @modelcontextprotocol/server-everything\n"
        f"  {PROG} tools --json -- python my_server.py | jq '.[].name'\n\n" + EXIT_STATUS_HELP,
    )
    tools.add_argument(
        "--json",
        action="store_true",
        help="a JSON list of {name, description, parameters, annotations} (parameters: the JSON schema; "
        "annotations: the server's hints such as readOnlyHint) instead of a table",
    )
    _verbosity(tools, top=False)

    call = sub.add_parser(
        "call",
        parents=[server],
        formatter_class=_formatter,
        usage=f"{PROG} call TOOL [ARGUMENTS] [options] (-- COMMAND [ARGS...] | --url URL | --config FILE)",
        help="call one tool and print its result as the model would read it",
        description=_wrap(
            "Call one tool and print the result rendered as the model reads it "
            "(an error result reads '[tool error] ...' and exits with status 1)."
        ),
        epilog=f'examples:\n  {PROG} call add \'{{"a": 1, "b": 2}}\' -- python my_server.py\n'
        f'  echo \'{{"path": "/tmp"}}\' | {PROG} call list_dir - -- python my_server.py\n\n' + EXIT_STATUS_HELP,
    )
    call.add_argument("tool", metavar="TOOL", help="the tool's name (with or without the --name prefix)")
    call.add_argument(
        "arguments",
        metavar="ARGUMENTS",
        nargs="?",
        default="{}",
        help="the arguments as a JSON object (default {}); '-' reads them from stdin",
    )
    call.add_argument(
        "--json",
        action="store_true",
        help="print {content, is_error, structured_content} as JSON instead of the rendered text",
    )
    _verbosity(call, top=False)

    check = sub.add_parser(
        "check",
        parents=[server],
        formatter_class=_formatter,
        usage=f"{PROG} check [options] (--config FILE | -- COMMAND [ARGS...] | --url URL)",
        help="open every server of a config at once and print a table: status, tools, open time, error",
        description=_wrap(
            "Open every server (in parallel, as an agent's MCP plugin does), list its tools, "
            "close it, and print one row per server: name, status, number of tools, open "
            "time, and the error of those that failed (in full on stderr). Exits 3 when "
            "any server failed, after printing the table."
        ),
        epilog=f"examples:\n  {PROG} check --config .mcp.json\n"
        f"  {PROG} check --config .vscode/mcp.json --server github --open-timeout 30\n\n" + EXIT_STATUS_HELP,
    )
    check.add_argument(
        "--json",
        action="store_true",
        help="a JSON list of {name, status, tools, open_seconds, error} instead of a table",
    )
    _verbosity(check, top=False)

    _lock_parser(sub)
    _serve_parser(sub)
    _doctor_parser(sub)

    demo = sub.add_parser(
        "demo",
        formatter_class=_formatter,
        help="run the offline demo: a lovia agent survives its MCP server crashing",
        description=_wrap(
            "A real lovia Agent, driven by a scripted model (offline, no API key), uses the "
            "example server lovia_mcp/examples/demo_server.py through "
            "MCP(..., isolation='process'): normal calls, an error result, a server crash "
            "and recovery. Exits 0 when every expectation held, 1 otherwise."
        ),
    )
    _verbosity(demo, top=False)
    return parser


def _lock_parser(sub: Any) -> None:
    lock = sub.add_parser(
        "lock",
        formatter_class=_formatter,
        usage=f"{PROG} lock --config FILE [--lock FILE] [--server NAME]... [--update]",
        help="pin a config's servers: packages installed into a verified cache, tool definitions hashed",
        description=_wrap(
            "Write the config's lock file (default: <config stem>.lock.json beside it). A server started "
            "by a package runner (uvx, uv tool run, pipx run, npx) is resolved to an exact version and "
            "installed once into a content-addressed cache, its integrity hashes recorded; it then starts "
            "from there, with no package manager and no registry. Every server's tools are pinned: one "
            "whose definition changes later is withheld from the model until re-pinned. A server already "
            "in the lock is kept as it is unless --update is given. See docs/lock.md and docs/pinning.md."
        ),
        epilog=f"examples:\n  {PROG} lock --config .mcp.json\n"
        f"  {PROG} check --config .mcp.json        # shows what changed since the lock\n"
        f"  {PROG} lock --config .mcp.json --server time --update\n\n" + LOCK_EXIT_STATUS_HELP,
    )
    lock.add_argument("--config", metavar="FILE", required=True, help="the config file whose servers to lock")
    lock.add_argument("--lock", metavar="FILE", help="the lock file to write (default: beside the config)")
    lock.add_argument("--server", metavar="NAME", action="append", default=[], help="lock only this entry (repeatable)")
    lock.add_argument(
        "--update",
        action="store_true",
        help="re-resolve and re-pin the servers already in the lock (after reviewing 'check')",
    )
    lock.add_argument(
        "--open-timeout",
        metavar="SECONDS",
        type=_positive(float),
        help="give up on a server that has not started and listed its tools after this long",
    )
    _verbosity(lock, top=False)


def _serve_parser(sub: Any) -> None:
    from ..gateway.options import (
        DEFAULT_DRAIN,
        DEFAULT_HEAD_TIMEOUT,
        DEFAULT_LISTEN,
        DEFAULT_MAX_BODY,
        DEFAULT_MAX_CONNECTIONS,
        DEFAULT_MAX_HTTP_SESSIONS,
    )

    serve = sub.add_parser(
        "serve",
        formatter_class=_formatter,
        usage=f"{PROG} serve --config FILE [--listen HOST:PORT] [--token-file FILE] [options]",
        help="serve a config's servers, each contained, over streamable HTTP (the gateway)",
        description=_wrap(
            "Serve every server of a config file over streamable HTTP: /mcp with every tool "
            "as <server>__<tool>, /servers/<name>/mcp with one server's tools, /healthz, /readyz, "
            "/metrics. Each server runs in its own worker with its limits and sandbox. Prints the "
            "URL, then 'ready' once the servers are open. SIGTERM drains and exits 0. "
            "See docs/gateway.md."
        ),
        epilog=f"examples:\n  {PROG} serve --config mcp.json --listen 127.0.0.1:0\n"
        f"  {PROG} serve --config mcp.json --listen 0.0.0.0:8765 --token-file /run/secrets/tokens\n",
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        required=True,
        help="an mcp.json (the same files as 'check'); entries may set session, max_sessions, idle; "
        'a top-level "gateway": {"access": ...} says which principal may use which tools',
    )
    _lock_option(serve)
    serve.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=DEFAULT_LISTEN,
        help=f"address to serve on (default {DEFAULT_LISTEN}; port 0 picks a free one); "
        "a non-loopback address needs --token-file or --oauth-issuer",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="bearer tokens, one a line as 'PRINCIPAL TOKEN' (a bare TOKEN is principal 'default'); "
        "every request but /healthz and /readyz must carry one",
    )
    oauth = serve.add_argument_group(
        "OAuth 2.1 resource server (instead of --token-file; see docs/gateway.md)",
        "Requests carry an authorization server's JWT access tokens, checked against its keys.",
    )
    oauth.add_argument(
        "--oauth-issuer",
        metavar="URL",
        help="the authorization server whose access tokens the gateway accepts (their iss claim, exactly)",
    )
    oauth.add_argument(
        "--oauth-resource",
        metavar="URL",
        help="the gateway's public URL as clients reach it (https://mcp.example.com): RFC 9728's resource, "
        "served at /.well-known/oauth-protected-resource; needed with --oauth-issuer",
    )
    oauth.add_argument(
        "--oauth-audience",
        metavar="AUD",
        help="the aud a token must carry (default: the --oauth-resource URL)",
    )
    oauth.add_argument(
        "--oauth-jwks",
        metavar="FILE_OR_URL",
        help="the issuer's JWK Set, a file or an https:// URL (default: the jwks_uri of the issuer's metadata)",
    )
    oauth.add_argument(
        "--oauth-principal-claim",
        metavar="CLAIM",
        help="the claim that names the principal (default sub)",
    )
    oauth.add_argument(
        "--oauth-scope",
        metavar="SCOPE",
        action="append",
        help="a scope every token must carry (repeat for several); a token without it gets HTTP 403",
    )
    serve.add_argument(
        "--max-body-bytes",
        metavar="N",
        type=_positive(int),
        default=DEFAULT_MAX_BODY,
        help=f"largest request body (default {DEFAULT_MAX_BODY}); larger ones get HTTP 413",
    )
    serve.add_argument(
        "--max-http-sessions",
        metavar="N",
        type=_positive(int),
        default=DEFAULT_MAX_HTTP_SESSIONS,
        help=f"open MCP sessions per endpoint (default {DEFAULT_MAX_HTTP_SESSIONS}), each of the token file's "
        "principals at most an even share of them; past it HTTP 503",
    )
    serve.add_argument(
        "--max-connections",
        metavar="N",
        type=_positive(int),
        default=None,
        help=f"open HTTP connections at once (default {DEFAULT_MAX_CONNECTIONS}, less if the open-file "
        "limit asks it); past it a new one displaces one still sending its request head",
    )
    serve.add_argument(
        "--head-timeout",
        metavar="SECONDS",
        type=_positive(float),
        default=DEFAULT_HEAD_TIMEOUT,
        help=f"a connection that has not sent a whole request head in this long is closed "
        f"(default {DEFAULT_HEAD_TIMEOUT:g})",
    )
    serve.add_argument(
        "--drain-seconds",
        metavar="SECONDS",
        type=_positive(float),
        default=DEFAULT_DRAIN,
        help=f"on SIGTERM, how long calls in flight may take to finish (default {DEFAULT_DRAIN:g})",
    )
    serve.add_argument(
        "--audit-log",
        metavar="FILE",
        help="append one JSON line per tool call to FILE: time, principal, endpoint, server, tool, "
        "outcome, duration, trace id (never arguments or results)",
    )
    serve.add_argument(
        "--metrics-principal",
        action="store_true",
        help="label /metrics call counts by principal too (one series per principal: the token file's names)",
    )
    serve.add_argument(
        "--log-format", choices=("json", "text"), default="json", help="logs on stderr: JSON lines (default) or text"
    )
    _verbosity(serve, top=False)


def _doctor_parser(sub: Any) -> None:
    doctor = sub.add_parser(
        "doctor",
        formatter_class=_formatter,
        usage=f"{PROG} doctor [--config FILE] [--json]",
        help="what lovia-mcp can guarantee on this machine: kernel facts, each sandbox run against escape probes",
        description=_wrap(
            "Report the kernel's facts (user namespaces and what refuses them, Landlock, seccomp, cgroups, "
            "bubblewrap), then run escape probes inside each sandbox backend's real box on this machine "
            "(a planted secret, a write outside the box, the loopback with the network closed, a unix socket, "
            "another process's environment, mount, namespaces, ptrace): each held, escaped or skipped. "
            "With --config, the backend each server would get and how its limits are enforced. "
            "See docs/doctor.md."
        ),
        epilog=f"examples:\n  {PROG} doctor\n  {PROG} doctor --config .mcp.json --json | jq .backends\n\n"
        "exit status:\n"
        "  0    every available backend held every probe, and every configured server's sandbox can start\n"
        "  1    a probe escaped, an available backend's box did not start, or a server's sandbox cannot\n"
        "       start here (each named on stderr)\n"
        "  2    usage error: bad options, a config file that cannot be read\n",
    )
    doctor.add_argument(
        "--config",
        metavar="FILE",
        help="also say, for each server of this config file, the backend it would get and its limits' enforcement",
    )
    doctor.add_argument("--json", action="store_true", help="the report as JSON (for CI) instead of text")
    _verbosity(doctor, top=False)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lovia-mcp")
    except PackageNotFoundError:
        return "(not installed)"


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Options before the first ``--``; the server's own command line after it."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TOOL_ERROR",
    "EXIT_USAGE",
    "OPTION_FLAGS",
    "PROG",
    "UsageError",
    "build_parser",
    "split_command",
]
