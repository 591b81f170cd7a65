"""The shell's modules import each other in one direction only: app.py composes, state.py is
imported by all and imports none of them. Every import counts, those under `TYPE_CHECKING`
and inside functions too: a cycle that only the type checker sees is still a knot."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = ROOT / "sseproxy" / "shell"


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
        "sseproxy.shell.inspector",
        "sseproxy.shell.turns",
        "sseproxy.shell.upstream",
    } | {m for m in graph if m.startswith("sseproxy.shell.upstream.")}
    assert "sseproxy.shell.state" not in reached


def test_the_shell_imports_in_one_direction() -> None:
    assert cycles(import_graph(SHELL, ROOT)) == []
