"""The public surface: complete top-level exports, an ``__all__`` on every
public module that names only what exists, and clean imports on both sides
of the process boundary, which use only the public names of the packages
they build on.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import lovia.exceptions
import lovia.plugins.mcp
import lovia_mcp_worker
import pytest
from helpers import ROOT

import lovia_mcp

# The names the foundation issue promises at the top level.
PROMISED = {
    "MCP",
    "MCPServerStdio",
    "MCPServerStreamableHTTP",
    "MCPConnection",
    "MCPToolResult",
    "Limits",
    "render_mcp_content",
    "normalize_schema",
    "MCPError",
    "UserError",
}

# Agent-side modules whose public classes belong at the top level (config's
# descriptions are the layer under the servers module's public classes).
AGENT_SIDE = ("config.annotations", "opening.servers", "connection.live", "opening.plugin", "render")


def _public_modules(package: ModuleType) -> list[str]:
    # Subpackages included: walk_packages imports each to find its modules.
    return sorted(
        info.name
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
        if not any(part.startswith("_") for part in info.name.split("."))
    )


@pytest.mark.unit
def test_the_promised_names_are_exported_from_lovia_mcp() -> None:
    assert PROMISED <= set(lovia_mcp.__all__)
    for name in PROMISED:
        assert getattr(lovia_mcp, name) is not None
    # The errors are lovia's own, so `except lovia.exceptions.MCPError` catches ours.
    assert lovia_mcp.MCPError is lovia.exceptions.MCPError
    assert lovia_mcp.UserError is lovia.exceptions.UserError
    assert issubclass(lovia_mcp.MCPToolResult, lovia.plugins.mcp.MCPToolResult)
    assert lovia_mcp.render_mcp_content is lovia.plugins.mcp.render_mcp_content


@pytest.mark.unit
def test_every_public_class_of_the_agent_side_modules_is_exported_at_the_top_level() -> None:
    for short in AGENT_SIDE:
        module = importlib.import_module(f"lovia_mcp.{short}")
        for name in module.__all__:
            if inspect.isclass(getattr(module, name)):
                assert name in lovia_mcp.__all__, f"lovia_mcp.{short}.{name} is not exported by lovia_mcp"
                assert getattr(lovia_mcp, name) is getattr(module, name)


@pytest.mark.parametrize(
    "module_name",
    ["lovia_mcp", *_public_modules(lovia_mcp), "lovia_mcp_worker", *_public_modules(lovia_mcp_worker)],
)
@pytest.mark.unit
def test_every_public_module_has_an_all_naming_only_what_it_defines(module_name: str) -> None:
    module = importlib.import_module(module_name)

    assert isinstance(module.__all__, list)
    assert len(module.__all__) == len(set(module.__all__)), "duplicate names in __all__"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    namespace: dict[str, object] = {}
    exec(f"from {module_name} import *", namespace)  # noqa: S102 - the star import is what is tested
    assert set(module.__all__) <= set(namespace)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def test_lovia_mcp_imports_cleanly_in_a_fresh_interpreter_without_warnings_or_mcp() -> None:
    proc = _python("""
        import sys
        from lovia_mcp import *
        import lovia_mcp
        assert all(name in globals() for name in lovia_mcp.__all__)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types")))
    """)

    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.strip() == "[]"


def test_the_worker_package_imports_cleanly_and_never_imports_lovia() -> None:
    proc = _python("""
        import sys
        import lovia_mcp_worker.wire.messages, lovia_mcp_worker.session.host, lovia_mcp_worker.forkserver.worker
        print(sorted(m for m in sys.modules if m.split(".")[0] == "lovia"))
    """)

    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.strip() == "[]"


# Packages whose private names (any module or name segment with a leading
# underscore) may change in any release, so neither side may use them.
# Packages whose private names neither side may use (multiprocess: the scan's own test uses it).
FOREIGN = frozenset({"lovia", "mcp", "mcp_types", "asyncio", "opentelemetry", "uvicorn", "starlette", "multiprocess"})


def _is_private(segment: str) -> bool:
    # Dunders (``__version__``) are public by convention.
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None unless it is a plain dotted name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_foreign_names(source: str) -> list[str]:
    """Every use of a private name of a FOREIGN package in ``source``, as ``line: what``."""
    tree = ast.parse(source)
    found: list[str] = []
    # Local names bound to a foreign module or object: private attributes
    # reached through them count too.
    roots = set(FOREIGN)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in FOREIGN:
                    roots.add(alias.asname or parts[0])
                    if any(map(_is_private, parts)):
                        found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] in FOREIGN:
                for alias in node.names:
                    roots.add(alias.asname or alias.name)
                    # The local alias may be private (``as _Lovia...``); what
                    # matters is the foreign name.
                    if any(map(_is_private, parts)) or _is_private(alias.name):
                        found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            chain = _chain(node)
            if chain is not None and chain[0] in roots:
                found.append(f"{node.lineno}: {'.'.join(chain)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            chain = _chain(node.args[0])
            if chain is not None and chain[0] in roots:
                found.append(f"{node.lineno}: {node.func.id}({'.'.join(chain)}, {node.args[1].value!r})")
    return sorted(found, key=lambda f: int(f.split(":")[0]))


def _package_sources() -> list[Path]:
    return sorted([*(ROOT / "lovia_mcp").rglob("*.py"), *(ROOT / "worker" / "lovia_mcp_worker").rglob("*.py")])


@pytest.mark.unit
def test_the_private_name_scan_flags_every_form_of_private_use_and_nothing_public() -> None:
    source = textwrap.dedent("""
        import mcp.shared._httpx_utils
        import multiprocess as mp
        from lovia.plugins.mcp import _make_call_tool
        from lovia.tools._http import HttpClient
        from lovia.plugins import mcp as lovia_plugin
        from lovia.plugins.mcp import MCPToolResult as _LoviaMCPToolResult
        from lovia.tools import Tool
        from mypkg import _fine
        from ._local import _fine_too
        mcp.shared._x
        mp.context._default_context
        lovia_plugin._deferred_instructions
        Tool._handoff
        getattr(mp, "_private")
        mp.__version__
        _LoviaMCPToolResult.content
        self._closed
    """)

    assert private_foreign_names(source) == [
        "2: import mcp.shared._httpx_utils",
        "4: from lovia.plugins.mcp import _make_call_tool",
        "5: from lovia.tools._http import HttpClient",
        "11: mcp.shared._x",
        "12: mp.context._default_context",
        "13: lovia_plugin._deferred_instructions",
        "14: Tool._handoff",
        "15: getattr(mp, '_private')",
    ]


@pytest.mark.unit
def test_neither_side_uses_a_private_name_of_lovia_the_mcp_sdk_asyncio_or_the_servers_libraries() -> None:
    sources = _package_sources()
    assert any(p.name == "plugin.py" for p in sources) and any(p.name == "host.py" for p in sources)

    found = [
        f"{path.relative_to(ROOT)}:{use}"
        for path in sources
        for use in private_foreign_names(path.read_text(encoding="utf-8"))
    ]

    assert found == []


@pytest.mark.unit
def test_the_package_says_its_installed_version() -> None:
    from importlib import metadata

    import lovia_mcp

    assert lovia_mcp.__version__ == metadata.version("lovia-mcp")
