"""The package's modules import each other in one direction only, and the layers hold: the
core imports nothing above it, observability imports no server code, and the offline tools and
the CLI are imported by nobody else. In the shell, app.py composes and state.py is imported by
all and imports none of them. Every import counts, those under `TYPE_CHECKING` and inside
functions too: a cycle that only the type checker sees is still a knot."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sseproxy"
SHELL = PACKAGE / "shell"
# The top level: the entry points, configuration, and one package per layer or feature.
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "cli.py",
    "cli_io.py",
    "config.py",
    "server.py",
    "target.py",
    "capture",
    "core",
    "data",
    "inspector",
    "intercept",
    "observe",
    "shell",
    "tools",
}
# Who may import the offline tools and the command line: themselves and the entry point.
TOOL_USERS = ("sseproxy.tools", "sseproxy.cli", "sseproxy.__main__")
# What observability must never import: the server and what runs in it.
SERVER_CODE = ("sseproxy.shell", "sseproxy.server", "sseproxy.inspector", "sseproxy.capture")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package_dir: Path, root: Path) -> dict[str, set[str]]:
    """Module -> the modules under `package_dir` it imports (dotted names from `root`)."""
    paths = {module_name(p, root): p for p in package_dir.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                # `from . import record` names a module; `from .state import Exchange` a member
                targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            graph[name] |= {t for t in targets if t in paths and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_a_cycle_is_found_even_when_only_the_type_checker_sees_it(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import thing\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (pkg / "c.py").write_text("def f():\n    from pkg.sub.d import x\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "d.py").write_text("from ..a import y\n")
    (pkg / "leaf.py").write_text("from .a import thing\nimport os\n")
    assert cycles(import_graph(pkg, tmp_path)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.sub.d"]]
    (pkg / "b.py").write_text("import json\n")
    assert cycles(import_graph(pkg, tmp_path)) == []


def test_state_imports_no_module_that_uses_it() -> None:
    graph = import_graph(SHELL, ROOT)
    reached: set[str] = set()
    todo = list(graph["sseproxy.shell.state"])
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.get(module, ()))
    # state's imports are leaves below it: values and limits, never the modules that use them
    assert reached <= {
        "sseproxy.shell",  # the package itself (`from . import accelerator`)
        "sseproxy.shell.accelerator",
        "sseproxy.shell.budget",
        "sseproxy.shell.delivery",
        "sseproxy.shell.memory",
        "sseproxy.shell.pacing",
        "sseproxy.shell.turns",
        "sseproxy.shell.upstream",
    } | {m for m in graph if m.startswith("sseproxy.shell.upstream.")}
    assert "sseproxy.shell.state" not in reached


def test_the_shell_imports_in_one_direction() -> None:
    assert cycles(import_graph(SHELL, ROOT)) == []


def whole_package() -> dict[str, set[str]]:
    return import_graph(PACKAGE, ROOT)


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(whole_package()) == []


def test_the_core_imports_nothing_above_it() -> None:
    graph = whole_package()
    outside = {
        (module, dep)
        for module, deps in graph.items()
        if within(module, ("sseproxy.core",))
        for dep in deps
        if not within(dep, ("sseproxy.core",))
    }
    assert outside == set()


def test_observability_imports_no_server_code() -> None:
    graph = whole_package()
    found = {
        (module, dep)
        for module, deps in graph.items()
        if within(module, ("sseproxy.observe",))
        for dep in deps
        if within(dep, SERVER_CODE + TOOL_USERS)
    }
    assert found == set()


def test_the_tools_and_the_cli_are_imported_by_nobody_else() -> None:
    graph = whole_package()
    found = {
        (module, dep)
        for module, deps in graph.items()
        if not within(module, TOOL_USERS)
        for dep in deps
        if within(dep, TOOL_USERS)
    }
    assert found == set()


def test_the_top_level_holds_entry_points_configuration_and_layers() -> None:
    names = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert names == TOP_LEVEL


def test_the_layer_rules_see_a_violation(tmp_path: Path) -> None:
    """The rules above run on real graphs: a core module reaching up is caught."""
    pkg = tmp_path / "sseproxy"
    (pkg / "core").mkdir(parents=True)
    (pkg / "tools").mkdir()
    for init in ("__init__.py", "core/__init__.py", "tools/__init__.py"):
        (pkg / init).write_text("")
    (pkg / "tools" / "replay.py").write_text("import os\n")
    (pkg / "core" / "tap.py").write_text("def f():\n    from sseproxy.tools import replay\n")
    graph = import_graph(pkg, tmp_path)
    assert graph["sseproxy.core.tap"] == {"sseproxy.tools", "sseproxy.tools.replay"}
