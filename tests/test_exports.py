"""The public surface: complete top-level exports, an ``__all__`` on every
public module that names only what exists, and clean imports on both sides
of the process boundary.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import textwrap
from types import ModuleType

import lovia.exceptions
import lovia.plugins.mcp
import pytest
from conftest import ROOT

import lovia_mcp
import lovia_mcp_worker

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

# Agent-side modules whose public classes belong at the top level.
AGENT_SIDE = ("config", "connection", "plugin", "render")


def _public_modules(package: ModuleType) -> list[str]:
    return sorted(
        f"{package.__name__}.{info.name}"
        for info in pkgutil.iter_modules(package.__path__)
        if not info.name.startswith("_")
    )


def test_the_promised_names_are_exported_from_lovia_mcp() -> None:
    assert PROMISED <= set(lovia_mcp.__all__)
    for name in PROMISED:
        assert getattr(lovia_mcp, name) is not None
    # The errors are lovia's own, so `except lovia.exceptions.MCPError` catches ours.
    assert lovia_mcp.MCPError is lovia.exceptions.MCPError
    assert lovia_mcp.UserError is lovia.exceptions.UserError
    assert issubclass(lovia_mcp.MCPToolResult, lovia.plugins.mcp.MCPToolResult)
    assert lovia_mcp.render_mcp_content is lovia.plugins.mcp.render_mcp_content


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
        capture_output=True, text=True, timeout=30, cwd=ROOT,
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
        import lovia_mcp_worker.protocol, lovia_mcp_worker.host, lovia_mcp_worker.main
        print(sorted(m for m in sys.modules if m.split(".")[0] == "lovia"))
    """)

    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.strip() == "[]"
