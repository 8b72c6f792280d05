"""The layout is the architecture: no import cycle among the project's modules, the
in-process runtime imports none of the offline tools, and the run-directory contract
imports neither torch nor anything above it. Read from the source (every import,
top-level or inside a function), so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.util import REPO

PACKAGES = ("diag", "probes", "reference_trainer")
OFFLINE = ("diag.analyze", "diag.report", "diag.cli", "diag.watch", "diag.scaletest",
           "diag.checkenv", "diag.lab", "probes")


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _target(name: str) -> str | None:
    """The project module ``name`` is, or is inside (an attribute of a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # `from pkg import mod` needs mod, not pkg's __init__; `from pkg import attr`
            # needs pkg itself.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        out |= {t for n in names if (t := _target(n)) and t != module}
    return out


def _external(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    return {(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
            for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: imports_of(m) - {m} for m in MODULES}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return found


def test_no_import_cycle_among_the_projects_modules():
    assert cycles() == []


def test_the_runtime_imports_none_of_the_offline_tools():
    wrong = {m: sorted(t for t in imports_of(m) if t.startswith(OFFLINE))
             for m in MODULES if m.startswith("diag.runtime")}
    assert {m: t for m, t in wrong.items() if t} == {}


def test_the_run_directory_contract_imports_only_itself_and_no_torch():
    for m in (m for m in MODULES if m.startswith("diag.format")):
        assert all(t == "diag" or t.startswith("diag.format") for t in imports_of(m)), m
        assert "torch" not in _external(m), m
