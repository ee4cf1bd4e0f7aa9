#!/usr/bin/env python3
"""The lower bound of every runtime dependency in pyproject.toml, as pip constraints.

``lowest_constraints.py pyproject.toml`` prints one ``name==version`` line
(with its environment marker) per entry of ``[project].dependencies``: the
version of its ``>=``, ``==`` or ``~=`` specifier. A dependency without a
lower bound is an error: the lowest-versions job could not test it.

``lowest_constraints.py --check FILE`` checks that the installed versions
are exactly those of FILE (entries whose marker does not apply are skipped).

Standard library only: it runs in a fresh venv before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
_LOWER = re.compile(r"(>=|==|~=)\s*([0-9][A-Za-z0-9.+!-]*)")


def lower_bounds(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = []
    for requirement in project["dependencies"]:
        spec, _, marker = requirement.partition(";")
        found = _NAME.match(spec)
        if found is None:
            raise SystemExit(f"cannot read the requirement {requirement!r}")
        name, _extras, specifiers = found.groups()
        bound = _LOWER.search(specifiers)
        if bound is None:
            raise SystemExit(
                f"{name} has no lower bound in pyproject.toml ({requirement!r}); "
                "give it one (>=) so the lowest-versions job can test it"
            )
        line = f"{name}=={bound.group(2)}"
        if marker.strip():
            line += f"; {marker.strip()}"
        lines.append(line)
    return lines


def _applies(marker: str) -> bool:
    # Only the markers pyproject uses: sys_platform comparisons.
    found = re.fullmatch(r"\s*sys_platform\s*(==|!=)\s*['\"]([^'\"]+)['\"]\s*", marker)
    if found is None:
        return True
    equal = sys.platform == found.group(2)
    return equal if found.group(1) == "==" else not equal


def _norm(version: str) -> str:
    # "0.11" and "0.11.0" are one version.
    parts = version.strip().split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)


def check(constraints: Path) -> int:
    wrong = []
    for line in constraints.read_text(encoding="utf-8").splitlines():
        pin, _, marker = line.partition(";")
        if not pin.strip() or (marker and not _applies(marker)):
            continue
        name, _, version = pin.partition("==")
        installed = metadata.version(name.strip())
        if _norm(installed) != _norm(version):
            wrong.append(f"{name.strip()} {installed} (wanted {version.strip()})")
    if wrong:
        print("not the lowest versions: " + ", ".join(wrong), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--check":
        return check(Path(argv[1]))
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(lower_bounds(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
