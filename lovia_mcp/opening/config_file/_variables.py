"""``${...}`` in a config file's values: the agent's environment and VS Code's variables.

``${NAME}`` and ``${NAME:-default}`` (the default also stands in for an
empty value, as in the shell) read the agent's environment, in every file.
VS Code's variables that name something outside the editor mean the same
here, in every file: ``${workspaceFolder}`` (the file's project: the folder
holding ``.vscode/``, or the file's own folder elsewhere),
``${workspaceFolderBasename}``, ``${userHome}``, ``${pathSeparator}`` (and
its short form ``${/}``) and ``${env:NAME}``.

Caveats: a variable with no value here is an error naming it and its
entry, never an empty string or the text left in place (a path with
``${...}`` in it would fail later, far from its cause): an unset variable
without a default; VS Code's prompts (``${input:...}``), settings
(``${config:...}``), commands (``${command:...}``) and the editor's state
(``${file}``, ``${selectedText}``...), which only the editor has.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from lovia.exceptions import UserError

PATTERN: Final = re.compile(r"\$\{([^}]*)\}")
NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# VS Code's variables filled in here, from the file's project folder (None for a dict source).
_FILLED: Final[dict[str, Callable[[Path | None], str | None]]] = {
    "workspaceFolder": lambda w: None if w is None else str(w),
    "workspaceRoot": lambda w: None if w is None else str(w),  # VS Code's older name for it
    "workspaceFolderBasename": lambda w: None if w is None else w.name,
    "userHome": lambda _: str(Path.home()),
    "pathSeparator": lambda _: os.sep,
    "/": lambda _: os.sep,
}
# VS Code's variables for the editor's own state: no meaning outside it.
_EDITOR_ONLY: Final = frozenset(
    {
        "file",
        "fileWorkspaceFolder",
        "relativeFile",
        "relativeFileDirname",
        "fileBasename",
        "fileBasenameNoExtension",
        "fileExtname",
        "fileDirname",
        "fileDirnameBasename",
        "cwd",
        "lineNumber",
        "columnNumber",
        "selectedText",
        "execPath",
        "defaultBuildTask",
    }
)
# VS Code's ``${prefix:...}`` forms that only the editor resolves, and what each is.
_EDITOR_PREFIXES: Final = {
    "input": "a VS Code prompt, which lovia-mcp cannot show",
    "config": "a VS Code setting, which only the editor reads",
    "command": "the result of a VS Code command, which only the editor runs",
    "workspaceFolder": "a folder of a VS Code multi-root workspace, which only the editor knows",
}
_FOLDER_HINT: Final = "Write ${workspaceFolder} (the folder holding .vscode/), or the folder's path."
_FILLED_HERE: Final = "${workspaceFolder}, ${workspaceFolderBasename}, ${userHome}, ${pathSeparator} and ${env:NAME}"
# The filled-in names by their lower case: an unset ${workspacefolder} is suggested the right one.
_BY_LOWER: Final = {name.lower(): name for name in _FILLED if name != "/"}


def expand(value: Any, where: str, workspace: Path | None) -> Any:
    """``value`` with every ``${...}`` in its strings filled in (lists and objects' values too; keys left alone)."""
    if isinstance(value, str):
        return PATTERN.sub(lambda m: _variable(m.group(1), where, workspace), value)
    if isinstance(value, list):
        return [expand(v, where, workspace) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, f"{where}.{k}", workspace) for k, v in value.items()}
    return value


def _variable(body: str, where: str, workspace: Path | None) -> str:
    if body in _FILLED:
        filled = _FILLED[body](workspace)
        if filled is None:
            raise UserError(
                f"{where}: ${{{body}}} needs a config file to be relative to",
                hint="Load the servers from the file, or write the folder out.",
            )
        return filled
    prefix, colon, rest = body.partition(":")
    if colon and prefix in _EDITOR_PREFIXES and not rest.startswith("-"):
        wanted = re.sub(r"\W", "_", rest).upper()  # ${input:api-key}: ${API_KEY}
        wanted = wanted if NAME.fullmatch(wanted) else "NAME"
        raise UserError(
            f"{where}: ${{{body}}} is {_EDITOR_PREFIXES[prefix]}",
            hint=_FOLDER_HINT
            if prefix == "workspaceFolder"
            else f"Put the value in an environment variable and write ${{{wanted}}}, or write the value out.",
        )
    if body in _EDITOR_ONLY:
        raise UserError(
            f"{where}: ${{{body}}} is VS Code's variable for the editor's own state, which lovia-mcp does not have",
            hint=f"lovia-mcp fills in {_FILLED_HERE}; write the value out, or use an environment variable: ${{NAME}}.",
        )
    if body.startswith("env:"):
        body = body[4:]
    name, sep, default = body.partition(":-")
    if not NAME.fullmatch(name):
        raise UserError(
            f"{where}: ${{{body}}} is not a variable reference",
            hint="Write ${NAME} or ${NAME:-default} (NAME: letters, digits, '_'); "
            f"VS Code's {_FILLED_HERE} are filled in too.",
        )
    value = os.environ.get(name)
    if sep:
        # As in the shell: the default also stands in for an empty value.
        return value if value else default
    if value is None:
        close = difflib.get_close_matches(name.lower(), list(_BY_LOWER), n=1, cutoff=0.8)
        raise UserError(
            f"{where}: the environment variable {name} is not set",
            hint=(f"Did you mean VS Code's ${{{_BY_LOWER[close[0]]}}}? " if close else "")
            + f"Set {name}, or give a default in the file: ${{{name}:-value}}.",
        )
    return value


__all__ = ["NAME", "PATTERN", "expand"]
