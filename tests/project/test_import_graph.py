"""The package's import graph, read from the source (function-local imports included): no cycle
between modules, and the stage contract in pyproject.toml holds."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT

import layergrad

PACKAGE = Path(layergrad.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The layergrad modules `path` imports, wherever the import statement stands."""
    found: set[str] = set()
    parts = _module_name(path).split(".")
    package = parts if path.name == "__init__.py" else parts[:-1]  # what `from .` means here
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if candidate in modules:
                    found.add(candidate)
                elif base in modules:
                    found.add(base)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {p: _module_name(p) for p in PACKAGE.rglob("*.py")}
    modules = set(files.values())
    graph = {name: _imports(path, modules) - {name} for path, name in files.items()}
    for name, deps in graph.items():  # importing a.b.c imports its packages' __init__ too
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back_through_others():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_function_local_imports():
    graph = import_graph()
    # cli/app.py imports the commands inside the command bodies only (to keep --help light)
    assert any(dep.startswith("layergrad.commands") for dep in graph["layergrad.cli.app"])


def test_the_stage_contract_holds():
    root = ROOT
    if not (root / "pyproject.toml").exists() or shutil.which("lint-imports") is None:
        pytest.skip("needs the repository's pyproject.toml and import-linter")
    out = subprocess.run(
        ["lint-imports", "--config", str(root / "pyproject.toml")],
        capture_output=True, text=True, cwd=root, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
