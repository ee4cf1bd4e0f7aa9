"""The manual's code blocks, as tests/project/test_readme.py and test_docs_examples.py read them.

A fenced block's first word says what it is:

- ``python``: code that runs. The blocks of a page run in order in one
  process and one namespace, as a reader pasting them one after another
  into one script would; a block is a script's text, so no top-level
  ``await`` (put it in an ``async def main()`` run by ``asyncio.run``).
- ``output``: what the Python block just before it prints.
- ``console``: a shell session. A ``$ command`` line followed by lines is a
  command and what it prints (stdout and stderr together, then the exit
  status where the session echoes it); ``$ cat FILE`` followed by lines
  *makes* FILE for the commands after it. A command shown without output
  is not run.
- anything else (``bash``, ``json``, ``text``, none): shown, not run.

A block that cannot run here says so and why, in an HTML comment on the
line before it (blank lines between are allowed), which GitHub does not
show: ``<!-- not run: it starts npx servers from the network -->``.

Expected output matches what was printed line by line, trailing spaces
ignored, except that a line ``...`` matches any number of lines, ``...``
inside a line matches any text, and durations (``0.16 s``, ``12 ms``)
match any duration.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
THIRDPARTY = ROOT / ".cache" / "thirdparty"
WHEELS = THIRDPARTY / "wheels"
NPM_CACHE = THIRDPARTY / "npm-cache"
VENV_BIN = Path(sys.executable).parent
# Bound on the README's lock: it installs mcp-server-time's ~30 wheels into a
# venv and compiles them (about ten seconds; several times that on a loaded machine).
LOCK_TIMEOUT = 240.0

FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)[ \t]*(?P<info>[^\n`]*)$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->$")
DURATION = re.compile(r"\b\d+(?:\.\d+)? (?:s|ms|µs)\b")


@dataclass
class Block:
    """One fenced block of a page: where it starts (the fence's line, 1-based), its language and text."""

    page: Path
    line: int
    lang: str
    text: str
    not_run: str | None = None
    """The reason given in a ``<!-- not run: ... -->`` comment before the block, if any."""
    output: Block | None = field(default=None, repr=False)
    """The ``output`` block that follows a Python block."""

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def first_line(self) -> int:
        """The line of the block's first line of text."""
        return self.line + 1


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order; each ``output`` block is also set on the Python block before it."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marked = NOT_RUN.match(before)
        lang = (opened["info"].split() or [""])[0].lower()
        block = Block(page, start + 1, lang, "\n".join(body), marked["reason"] if marked else None)
        if lang == "output" and found and found[-1].lang == "python":
            found[-1].output = block
        found.append(block)
        i += 1
    return found


def padded(block: Block) -> str:
    """The block's text with blank lines before it, so that its line numbers are the page's."""
    return "\n" * (block.first_line - 1) + block.text + "\n"


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of a console block, with the lines shown after it."""

    command: str
    shown: list[str]
    line: int


def steps(block: Block) -> list[Step]:
    """The commands of a console block; lines before the first ``$`` are an error (output of what?)."""
    found: list[Step] = []
    for n, line in enumerate(block.text.split("\n"), block.first_line):
        if line.startswith("$ "):
            found.append(Step(line[2:], [], n))
        elif not found:
            raise ValueError(f"{block.page.name}:{n}: console output before any `$ command`: {line!r}")
        else:
            found[-1].shown.append(line)
    return [Step(s.command, _trim(s.shown), s.line) for s in found]


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _same_line(shown: str, printed: str) -> bool:
    shown, printed = DURATION.sub("<duration>", shown.rstrip()), DURATION.sub("<duration>", printed.rstrip())
    if "..." not in shown:
        return shown == printed
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, printed) is not None


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what ``shown`` shows (``...`` lines, ``...`` in a line and durations as wildcards)."""
    if not shown:
        return not printed
    if shown[0].strip() == "...":
        return any(matches(shown[1:], printed[k:]) for k in range(len(printed) + 1))
    return bool(printed) and _same_line(shown[0], printed[0]) and matches(shown[1:], printed[1:])


def section(page: Path, heading: str) -> list[Block]:
    """The blocks under ``## heading`` of ``page``, up to the next ``## `` heading."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    first, last = text[:start].count("\n") + 2, text[: end if end >= 0 else len(text)].count("\n") + 1
    return [b for b in blocks(page) if first < b.line < last]


def offline_env(folder: Path) -> dict[str, str]:
    """The environment a page's commands run in: this environment's ``lovia-mcp`` and ``python``
    first on PATH, a terminal 80 columns wide, lovia-mcp's cache in ``folder``, and pip and npm
    offline, reading ``.cache/thirdparty`` (as tests/lock/test_lock_thirdparty.py does)."""
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "COLUMNS": "80",
        "LOVIA_MCP_CACHE_DIR": str(folder / ".lovia-mcp-cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(WHEELS),
        "PIP_CONFIG_FILE": os.devnull,
        "npm_config_offline": "true",
        "npm_config_cache": str(NPM_CACHE),
    }


@dataclass(frozen=True)
class ReadmeLocked:
    """The README's ``mcp.json`` in ``folder``, locked by the README's own command, which printed ``printed``."""

    folder: Path
    config: str
    env: dict[str, str]
    step: Step
    printed: subprocess.CompletedProcess[str]


_readme_locked: list[ReadmeLocked] = []


def readme_locked(tmp_path_factory: pytest.TempPathFactory) -> ReadmeLocked:
    """The README's config locked offline by its own command, once for the session:
    tests/project/test_readme.py checks the lock, docs/without-a-model.md's examples use it."""
    if not WHEELS.is_dir():
        pytest.skip(".cache/thirdparty has no wheels: run `bash scripts/thirdparty.sh`")
    if not _readme_locked:
        use_it = section(README, "Use it")
        [config] = [b for b in use_it if b.lang == "json"]
        [lock] = steps(next(b for b in use_it if b.lang == "console"))
        name = re.search(r"--config (\S+)", lock.command)
        assert lock.command.startswith("lovia-mcp lock ") and name is not None, lock.command
        folder = tmp_path_factory.mktemp("readme")
        (folder / name[1]).write_text(config.text)
        env = offline_env(folder)
        printed = subprocess.run(
            ["bash", "-c", lock.command],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=LOCK_TIMEOUT,
        )
        _readme_locked.append(ReadmeLocked(folder, name[1], env, lock, printed))
    return _readme_locked[0]


__all__ = [
    "NPM_CACHE",
    "README",
    "ROOT",
    "ReadmeLocked",
    "VENV_BIN",
    "WHEELS",
    "Block",
    "Step",
    "blocks",
    "matches",
    "offline_env",
    "padded",
    "readme_locked",
    "section",
    "steps",
]
