"""The layout's promises, read from the source: no import cycle, and a narrow agent -> worker surface.

Imports are read with ``ast`` (module level and inside functions, where a
lazy import would hide a cycle; ``if TYPE_CHECKING:`` blocks are not run, so
the runtime graph leaves them out, and a second check counts them too).
Pure: no process is started.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGES = {"lovia_mcp": ROOT / "lovia_mcp", "lovia_mcp_worker": ROOT / "worker" / "lovia_mcp_worker"}
# What the agent may import from the worker package (lovia_mcp/__init__ says why).
AGENT_SURFACE = frozenset(
    {
        "lovia_mcp_worker.wire",
        "lovia_mcp_worker.wire.messages",
        "lovia_mcp_worker.wire.mcpjson",
        "lovia_mcp_worker.wire.confinement",
        "lovia_mcp_worker.wire.framing",
        "lovia_mcp_worker.wire.hostport",
        # A sandbox refusal's facts and the one function that words them, for the model.
        "lovia_mcp_worker.wire.refusals",
        # The lock: the stamp of a locked server's tree, taken by the agent, compared by the worker.
        "lovia_mcp_worker.wire.sealed",
        # One timer heap: the worker's call deadlines and the agent's stuck-worker backstop.
        "lovia_mcp_worker.wire.timers",
        "lovia_mcp_worker.session.host",
        "lovia_mcp_worker.sandbox.egress.netrequest",
        "lovia_mcp_worker.sandbox.registry",
        # lovia-mcp doctor: the kernel's facts, and the error a backend's availability check raises.
        "lovia_mcp_worker.containment.machine",
        "lovia_mcp_worker.sandbox.backend",
    }
)


def _modules(package: str) -> dict[str, Path]:
    root = PACKAGES[package]
    out: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, *, type_only: bool = False) -> set[str]:
    """Every module ``name`` imports when its code runs (with ``type_only``, TYPE_CHECKING blocks too)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if type_only:
                self.generic_visit(node)
                return
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            ):
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)

    Visitor().visit(ast.parse(path.read_text()))
    return found


def _graph(package: str, *, type_only: bool = False) -> dict[str, set[str]]:
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # A module's own parent packages are imported before it anyway.
        imported = _imports(name, path, type_only=type_only)
        graph[name] = {m for m in imported if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_module_of_either_package_imports_itself_through_a_cycle(package: str) -> None:
    assert _cycles(_graph(package)) == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_cycle_either_when_the_type_only_imports_count(package: str) -> None:
    # A contract a module needs of another is a Protocol it owns (transport.era's
    # Negotiating), not an import back under TYPE_CHECKING.
    assert _cycles(_graph(package, type_only=True)) == []


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function_level_import() -> None:
    # The check itself can fail: config <-> connection, the way they were.
    graph = {"a.config": {"a.connection"}, "a.connection": {"a.spares"}, "a.spares": {"a.config"}}
    assert _cycles(graph) == [["a.config", "a.connection", "a.spares", "a.config"]]


def test_the_agent_imports_from_the_worker_package_only_its_named_public_surface() -> None:
    used: dict[str, set[str]] = {}
    worker = _modules("lovia_mcp_worker")
    for name, path in _modules("lovia_mcp").items():
        for module in _imports(name, path):
            if module.startswith("lovia_mcp_worker") and module in worker and module != "lovia_mcp_worker":
                used.setdefault(module, set()).add(name)
    assert set(used) <= AGENT_SURFACE, {m: sorted(by) for m, by in used.items() if m not in AGENT_SURFACE}


# The worker's subpackages, top to bottom: each imports only those below it.
WORKER_LAYERS = [("forkserver",), ("session",), ("transport",), ("containment",), ("sandbox",), ("wire",)]

# The agent side's folders, top to bottom: each imports only from its own
# layer or those below it. The config describes and never opens (``opening/``
# adds opening on top of it), so the connection and the client core under it
# can be written against the config. The leaves are the only modules beside
# the package's face.
AGENT_LAYERS = [
    ("__main__", "cli", "gateway", "doctor", "demo", "examples"),  # the front ends
    ("opening",),  # what opens configs, per run or ahead, and config files
    ("connection",),  # the live connection, as lovia sees it
    ("client",),  # the client core: requests, channels, the circuit, the forkserver handle
    ("config", "lock"),  # the configs, as descriptions, and their lock
    ("_names", "render", "tracing"),  # leaves: they import nothing of the package
]

LAYERS = {"lovia_mcp": AGENT_LAYERS, "lovia_mcp_worker": WORKER_LAYERS}


def _rank(layers: list[tuple[str, ...]]) -> dict[str, int]:
    return {member: i for i, layer in enumerate(layers) for member in layer}


def _upward(package: str, layers: list[tuple[str, ...]]) -> list[str]:
    """Imports from a lower layer to a higher one (runtime, lazy and type-only imports all count)."""
    rank = _rank(layers)
    modules = _modules(package)
    found = []
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) < 2:  # the package's own __init__ (its public surface) is not layered
            continue
        here = rank[parts[1]]
        for module in sorted(_imports(name, path, type_only=True)):
            if module not in modules:
                continue
            target = module.split(".")
            if len(target) > 1 and target[1] in rank and rank[target[1]] < here:
                found.append(f"{name} -> {module}")
    return found


@pytest.mark.parametrize("package", sorted(LAYERS))
@pytest.mark.unit
def test_every_module_and_subpackage_is_declared_in_exactly_one_layer(package: str) -> None:
    declared = [member for layer in LAYERS[package] for member in layer]
    found = {name.split(".")[1] for name in _modules(package) if "." in name}

    assert len(declared) == len(set(declared)), "declared twice"
    assert sorted(found) == sorted(declared)


@pytest.mark.parametrize("package", sorted(LAYERS))
@pytest.mark.unit
def test_no_module_imports_from_a_layer_above_its_own(package: str) -> None:
    assert _upward(package, LAYERS[package]) == []


@pytest.mark.unit
def test_the_layer_check_finds_an_upward_import_hidden_under_type_checking(tmp_path: Path) -> None:
    # The check itself can fail: the transport's contract, where it was.
    root = tmp_path / "pkg"
    for layer in ("session", "transport"):
        (root / layer).mkdir(parents=True)
        (root / layer / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "session" / "progress.py").write_text("X = 1\n")
    (root / "transport" / "stdio.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..session.progress import X\n"
    )
    PACKAGES["pkg"] = root
    try:
        assert _upward("pkg", [("session",), ("transport",)]) == ["pkg.transport.stdio -> pkg.session.progress"]
    finally:
        del PACKAGES["pkg"]


@pytest.mark.unit
def test_the_wheel_lists_every_package_of_both_sides() -> None:
    # setuptools takes an explicit list here (the worker lives under worker/):
    # a subpackage missing from it is missing from the wheel, while an
    # editable install (the suite's) still finds it.
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join([package, *init.parent.relative_to(root).parts])
        for package, root in PACKAGES.items()
        for init in root.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }

    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set()
