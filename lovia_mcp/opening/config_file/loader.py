"""Server configs from the JSON files users already have.

Two shapes, one loader::

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]},
                    "api": {"type": "http", "url": "https://host/mcp",
                            "headers": {"Authorization": "Bearer ${API_TOKEN}"}}}}

is what Claude Desktop, Claude Code (``.mcp.json``), Cursor, fastmcp and
pydantic-ai write; VS Code's ``.vscode/mcp.json`` has the same entries under
``servers``, plus ``envFile`` and a ``sandbox`` block. Both may hold
comments and trailing commas (VS Code's files are JSONC).

Rules:

- each entry's key becomes the server's ``name=`` (the tool prefix);
- ``${VAR}`` and ``${VAR:-default}`` are expanded in ``command``, ``args``,
  ``env``, ``cwd``, ``url``, ``headers``, ``envFile`` and ``sandbox`` from
  the agent's environment, and VS Code's ``${workspaceFolder}``,
  ``${userHome}``... too (:mod:`._variables`); an undefined variable
  without a default is an error naming it and its entry, never an empty
  string, and only an entry that is loaded is expanded (``names=``);
- relative ``cwd``, ``envFile`` and ``command`` paths (a command with a
  ``/`` in it; a bare ``npx`` is looked up on ``PATH``) are relative to the
  file's folder, not to wherever the agent runs; ``~`` is expanded in them;
- lovia-mcp's own options (``timeout``, ``limits``, ``sandbox``, ``defer``,
  ``include_tools``, ... : every field of the config class) can be set per
  entry; their JSON values are checked against the field's type, nested
  structs (``limits``) converted with their own unknown keys refused;
- keys other clients use that mean nothing here are ignored, with a note on
  the ``lovia_mcp.config`` logger; an entry with ``"disabled": true`` is
  skipped (as those clients do); any other key is an error with a hint.

Non-goals: VS Code's ``${input:...}`` prompts and OAuth blocks (an editor
asks the user; a library cannot: an error with a hint), SSE servers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

from lovia.exceptions import UserError

from ...lock.lockfile import default_lock_path
from ..servers import MCPServer, MCPServerStdio, MCPServerStreamableHTTP
from ._values import convert, hints
from ._variables import NAME, expand
from .locks import LockOption, lock_path, with_lock

logger = logging.getLogger("lovia_mcp.config")

ConfigSource = str | os.PathLike[str] | Mapping[str, Any]

# The top-level keys holding the servers: everyone else's, then VS Code's.
_SERVER_KEYS: Final = ("mcpServers", "servers")
# Other top-level keys of those files, meaningless here.
_IGNORED_TOP: Final = {
    "inputs": "VS Code's input prompts",
    "$schema": "the schema reference",
    "globalShortcut": "Claude Desktop's keyboard shortcut",
}
# Entry keys other clients write that have no counterpart here.
_IGNORED: Final = {
    "description": "a description for people",
    "icon": "fastmcp's icon",
    "autoApprove": "Cline's auto-approved tools (use needs_approval)",
    "alwaysAllow": "Roo Code's auto-approved tools (use needs_approval)",
    "dev": "VS Code's watch-and-debug settings",
    "gallery": "VS Code's gallery entry",
    "version": "VS Code's server version",
}
# Entry keys that are the file formats' own rather than config fields.
_FORMAT_KEYS: Final = frozenset({"type", "transport", "envFile", "sandboxEnabled", "disabled"})
# Keys only `lovia-mcp serve` reads (lovia_mcp.gateway.options checks them there).
GATEWAY_KEYS: Final = frozenset({"session", "max_sessions", "idle"})
# The top-level section only `lovia-mcp serve` reads (access rules).
GATEWAY_SECTION: Final = "gateway"
# Set by load_servers itself, never in a file: the lock's entry, and the
# files a server's sandbox keeps read-only (this file and its lock).
_LOADER_ONLY: Final = {
    "locked": ("is set from the lock file", "Drop it; write the lock with: lovia-mcp lock --config FILE."),
    "config_files": (
        "is set by the loader (this file and its lock, kept read-only in the server's sandbox)",
        "Drop it; to keep other paths read-only, use the sandbox's read_only.",
    ),
    "relay": ("is set by lovia-mcp serve for the servers it serves", "Drop it."),
}
_STDIO_TYPES: Final = frozenset({"stdio"})
_HTTP_TYPES: Final = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})
# Fields whose strings get ${VAR} expansion (keys of env/headers are left
# alone); the sandbox's paths are where ${workspaceFolder} is written most.
_EXPANDED: Final = frozenset({"command", "args", "env", "cwd", "url", "headers", "sandbox"})
_EXAMPLE: Final = '{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}'


@dataclasses.dataclass(frozen=True)
class _Context:
    label: str  # the file's path, or "config" for a dict
    base: Path | None  # the file's folder: relative paths are relative to it
    workspace: Path | None  # VS Code's ${workspaceFolder}


def load_servers(
    source: ConfigSource, /, *, lock: LockOption = None, names: Collection[str] = (), **overrides: Any
) -> list[MCPServer]:
    """The server configs in a config file (a path) or in its parsed JSON (a dict).

    ``names``: only these entries (default: every one), in the file's
    order. The others are not read past their keys, so an environment
    variable that only they use need not be set.

    ``overrides`` set an option on every server and win over the file
    (``load_servers("mcp.json", timeout=30, isolation="none")``); they are
    Python values, so a ``result_renderer`` or an approval predicate can be
    given here. Raises :class:`~lovia.exceptions.UserError` with a hint for
    anything wrong in the file, naming the file and the entry.

    ``lock``: the lock file (docs/lock.md). By default the one beside the
    file (``.mcp.json``: ``.mcp.lock.json``) if it exists; a path names
    another; ``False`` reads none.
    """
    known = {f.name for cls in (MCPServerStdio, MCPServerStreamableHTTP) for f in dataclasses.fields(cls)}
    known -= set(_LOADER_ONLY)
    if "name" in overrides:
        raise UserError(
            "load_servers() takes no name=: each entry's key is its name",
            hint="Rename the entries in the file (their keys prefix their tools).",
        )
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise UserError(
            f"load_servers() got unknown option(s): {', '.join(unknown)}",
            hint=f"Options are the server configs' fields: {', '.join(sorted(known))}.",
        )
    if isinstance(names, str):
        raise UserError(
            f"load_servers() takes names= as a list of entry names, got the string {names!r}",
            hint=f"load_servers(path, names=[{names!r}])",
        )
    data, ctx = _read(source)
    entries = _entries(data, ctx)
    if names:
        entries = _chosen(entries, names, ctx)
    servers = []
    for name, entry in entries.items():
        server = _server(name, entry, ctx, overrides)
        if server is not None:
            servers.append(server)
    config = None if isinstance(source, Mapping) else source
    locks = lock_path(config, lock)
    if config is not None:
        servers = _guarding(servers, [Path(config).expanduser(), locks or default_lock_path(Path(config).expanduser())])
    return servers if locks is None else with_lock(servers, locks, config)


def _guarding(servers: list[MCPServer], files: list[Path]) -> list[MCPServer]:
    """``servers``, each stdio one knowing ``files`` (its config file and lock) to keep read-only in its sandbox.

    A sandboxed server that may write the folder holding its own config
    could otherwise rewrite it (an unsandboxed server of its making, run on
    the host at the next start) or the lock (its tools' pins), whatever the
    file is called. Recorded on the config (``config_files``), not put in
    ``read_only`` here: a sandbox given later (``MCP(sandbox=...)``, the
    command line's flags) keeps them too.
    """
    paths = tuple(os.path.abspath(p) for p in files)
    return [dataclasses.replace(s, config_files=paths) if isinstance(s, MCPServerStdio) else s for s in servers]


# --------------------------------------------------------------------------- #
# Reading
# --------------------------------------------------------------------------- #
def _read(source: ConfigSource) -> tuple[Any, _Context]:
    if isinstance(source, Mapping):
        return source, _Context("config", None, None)
    if not isinstance(source, (str, os.PathLike)):
        raise UserError(
            f"load_servers() takes a path or a dict, got {type(source).__name__}",
            hint="load_servers('.mcp.json') or load_servers({'mcpServers': {...}})",
        )
    path = Path(source).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(
            f"no config file at {str(path)!r}",
            hint="Pass the path of an mcp.json (e.g. .mcp.json or .vscode/mcp.json).",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"cannot read the config file {str(path)!r}: {exc}", hint="Check that it is a readable UTF-8 JSON file."
        ) from None
    try:
        data = json.loads(strip_jsonc(text))
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            hint=f"A config file looks like {_EXAMPLE}",
        ) from None
    folder = path.resolve().parent
    workspace = folder.parent if folder.name == ".vscode" else folder
    return data, _Context(str(path), folder, workspace)


def strip_jsonc(text: str) -> str:
    """JSON with ``//`` and ``/* */`` comments and trailing commas (JSONC) as plain JSON.

    Comments become spaces (newlines kept), so error positions still point
    into the original file.
    """
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        elif c in "]}":
            # A trailing comma: the last non-blank character written before this one.
            j = len(out) - 1
            while j >= 0 and out[j].isspace():
                j -= 1
            if j >= 0 and out[j] == ",":
                out[j] = " "
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _entries(data: Any, ctx: _Context) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise UserError(
            f"{ctx.label}: the top level must be a JSON object, got {type(data).__name__}",
            hint=f"A config file looks like {_EXAMPLE}",
        )
    present = [k for k in _SERVER_KEYS if k in data]
    if not present:
        raise UserError(
            f"{ctx.label}: no 'mcpServers' or 'servers' object",
            hint=f'Put the servers under "mcpServers" (or VS Code\'s "servers"): {_EXAMPLE}',
        )
    if len(present) > 1:
        raise UserError(
            f"{ctx.label}: both 'mcpServers' and 'servers' given",
            hint="Keep one: 'mcpServers' (most clients) or 'servers' (VS Code).",
        )
    for key in data:
        if key in _SERVER_KEYS:
            continue
        if key == GATEWAY_SECTION:
            continue  # lovia-mcp serve's (lovia_mcp.gateway.access checks it there)
        if key in _IGNORED_TOP:
            logger.info("%s: ignoring %r (%s)", ctx.label, key, _IGNORED_TOP[key])
            continue
        raise UserError(
            f"{ctx.label}: unknown top-level key {key!r}",
            hint="The file holds 'mcpServers' (or VS Code's 'servers' and 'inputs').",
        )
    entries = data[present[0]]
    if not isinstance(entries, Mapping) or not entries:
        raise UserError(
            f"{ctx.label}: {present[0]!r} must be a non-empty object of named servers",
            hint=f"A config file looks like {_EXAMPLE}",
        )
    return dict(entries)


def _chosen(entries: dict[str, Any], names: Collection[str], ctx: _Context) -> dict[str, Any]:
    """The entries ``names`` asks for; a name the file lacks, or whose entry is disabled, is an error."""
    missing = [n for n in names if n not in entries]
    if missing:
        raise UserError(
            f"{ctx.label} has no server {', '.join(map(repr, missing))}",
            hint=f"Its servers: {', '.join(map(repr, entries))}.",
        )
    for name in names:
        entry = entries[name]
        if isinstance(entry, Mapping) and entry.get("disabled") is True:
            raise UserError(
                f"{ctx.label}: server {name!r} is disabled in the file",
                hint='Set "disabled": false (or drop the key) to use it.',
            )
    return {name: entry for name, entry in entries.items() if name in names}


# --------------------------------------------------------------------------- #
# One entry
# --------------------------------------------------------------------------- #
def _server(name: str, entry: Any, ctx: _Context, overrides: Mapping[str, Any]) -> MCPServer | None:
    where = f"{ctx.label}: server {name!r}"
    if not isinstance(entry, Mapping):
        raise UserError(
            f"{where} must be an object, got {type(entry).__name__}",
            hint='"name": {"command": "uvx", "args": ["mcp-server-time"]}',
        )
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise UserError(
            f"{where}: 'disabled' must be true or false, got {disabled!r}",
            hint='"disabled": true skips the entry; drop the key to use it.',
        )
    if disabled:
        logger.info("%s is disabled in the file; skipped", where)
        return None
    if "name" in entry:
        raise UserError(
            f"{where}: 'name' is not an entry key: the entry's key is its name",
            hint=f"Rename the entry instead (its key, {name!r}, prefixes its tools).",
        )
    cls = _transport(entry, where)
    fields = {f.name for f in dataclasses.fields(cls)}
    other = MCPServerStreamableHTTP if cls is MCPServerStdio else MCPServerStdio
    kwargs: dict[str, Any] = {"name": name}
    for key, value in entry.items():
        if key in _FORMAT_KEYS or key in GATEWAY_KEYS:
            continue
        if key in _LOADER_ONLY:
            said, hint = _LOADER_ONLY[key]
            raise UserError(f"{where}: {key!r} {said}, not in the config", hint=hint)
        if key in _IGNORED:
            logger.info("%s: ignoring %r (%s)", where, key, _IGNORED[key])
        elif key in fields:
            if key in _EXPANDED:
                value = expand(value, f"{where}: {key}", ctx.workspace)
            kwargs[key] = convert(value, hints(cls).get(key, Any), f"{where}: {key}")
        elif key in {f.name for f in dataclasses.fields(other)}:
            kind = "a command (stdio)" if cls is MCPServerStdio else "a URL (HTTP)"
            raise UserError(
                f"{where}: {key!r} does not apply to a server started from {kind}",
                hint=f"Drop {key!r}, or describe the server by "
                f"{'url' if cls is MCPServerStdio else 'command'} instead.",
            )
        else:
            raise UserError(f"{where}: unknown key {key!r}", hint=_unknown_hint(key, fields))
    if cls is MCPServerStdio:
        _stdio_paths(kwargs, entry, where, ctx)
    kwargs.update({k: v for k, v in overrides.items() if k in fields})
    try:
        return cls(**kwargs)
    except UserError as exc:
        raise UserError(f"{where}: {exc.args[0] if exc.args else exc}", hint=exc.hint) from None


def _transport(entry: Mapping[str, Any], where: str) -> type[MCPServer]:
    kind = entry.get("type", entry.get("transport"))
    if kind is not None and kind not in _STDIO_TYPES | _HTTP_TYPES:
        if kind == "sse":
            raise UserError(
                f"{where}: SSE servers are not supported",
                hint='Use the server\'s streamable HTTP endpoint (often /mcp instead of /sse) with "type": "http".',
            )
        raise UserError(f"{where}: unknown type {kind!r}", hint='Use "stdio" (a command) or "http" (a url).')
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        raise UserError(
            f"{where} has both 'command' and 'url'",
            hint="Keep one: 'command' starts a local server, 'url' reaches a remote one.",
        )
    if kind in _HTTP_TYPES or (kind is None and has_url):
        if not has_url:
            raise UserError(
                f"{where}: an HTTP server needs a 'url'", hint='"api": {"type": "http", "url": "https://host/mcp"}'
            )
        return MCPServerStreamableHTTP
    if not has_command:
        raise UserError(
            f"{where} has neither 'command' nor 'url'",
            hint='"time": {"command": "uvx", "args": ["mcp-server-time"]}, '
            'or "api": {"type": "http", "url": "https://host/mcp"}',
        )
    return MCPServerStdio


def _unknown_hint(key: str, fields: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, sorted(fields | _FORMAT_KEYS), n=1)
    return (
        (f"Did you mean {close[0]!r}? " if close else "")
        + "Known: command, args, env, cwd, envFile, type, url, headers, and lovia-mcp's options "
        + f"({', '.join(sorted(fields - {'command', 'args', 'env', 'cwd', 'url', 'headers'}))})."
    )


def _stdio_paths(kwargs: dict[str, Any], entry: Mapping[str, Any], where: str, ctx: _Context) -> None:
    """Relative paths against the file's folder; ``envFile`` and ``sandboxEnabled`` folded in."""
    for key in ("command", "cwd"):
        path = kwargs.get(key)
        if not isinstance(path, str) or (key == "command" and "/" not in path):
            continue  # a bare command name is looked up on PATH
        path = os.path.expanduser(path)
        if ctx.base is not None and not os.path.isabs(path):
            path = str(ctx.base / path)
        kwargs[key] = path
    if "envFile" in entry:
        path = expand(entry["envFile"], f"{where}: envFile", ctx.workspace)
        if not isinstance(path, str) or not path:
            raise UserError(f"{where}: envFile must be a path, got {path!r}", hint='"envFile": ".env"')
        full = Path(path).expanduser()
        if ctx.base is not None and not full.is_absolute():
            full = ctx.base / full
        # The entry's own env wins over the file's, as in VS Code.
        kwargs["env"] = {**read_env_file(full, where), **(kwargs.get("env") or {})}
    enabled = entry.get("sandboxEnabled")
    if enabled is not None:
        if not isinstance(enabled, bool):
            raise UserError(
                f"{where}: sandboxEnabled must be true or false, got {enabled!r}", hint='"sandboxEnabled": true'
            )
        if not enabled:
            kwargs["sandbox"] = None
        elif kwargs.get("sandbox") is None:
            kwargs["sandbox"] = True


def read_env_file(path: Path, where: str = "envFile") -> dict[str, str]:
    """``NAME=value`` lines (``#`` comments, ``export``, quotes), as dotenv files have them."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(
            f"{where}: cannot read envFile {str(path)!r}: {exc.strerror or exc}",
            hint="A relative envFile is relative to the config file's folder.",
        ) from None
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not NAME.fullmatch(key):
            raise UserError(
                f"{where}: {path}:{number} is not a NAME=value line: {line[:60]!r}",
                hint="Write one NAME=value per line; '#' starts a comment.",
            )
        quote = value[:1]
        close = value.find(quote, 1) if quote in ('"', "'") else -1
        rest = value[close + 1 :].strip() if close > 0 else ""
        if close > 0 and (not rest or rest.startswith("#")):
            value = value[1:close]  # a quoted value, perhaps with a comment after it
        else:
            value = value.split(" #", 1)[0].rstrip()
        env[key] = value
    return env


__all__ = ["GATEWAY_KEYS", "GATEWAY_SECTION", "ConfigSource", "load_servers", "read_env_file", "strip_jsonc"]
