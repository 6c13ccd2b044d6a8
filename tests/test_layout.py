"""The import rules of the layout (README, "Adding a paper"): each layer imports only the
layers below it, a paper never imports another paper, and tests check method code where it
lives, never through a protocol module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from experiments.runner.registry import known_papers

from .conftest import ROOT

# each layer may import itself and the layers before it
LAYERS = ["common", "models", "data", "methods", "experiments"]
PROJECT = set(LAYERS) | {"run", "tests"}


def imported_modules(path: Path) -> set[str]:
    """Every project module ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] in PROJECT}


def project_files(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("layer", LAYERS)
def test_layers_import_only_the_layers_below(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    for path in project_files(layer):
        for module in imported_modules(path):
            assert module.split(".")[0] in allowed, (
                f"{path.relative_to(ROOT)} imports {module}: {layer}/ may import only "
                f"{', '.join(sorted(allowed))}")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(top: str) -> list[list[str]]:
    """The import circles among the modules under ``top`` (imports inside functions count:
    a lazy import is an arrow too). ``from package import name`` is an arrow to the
    package's ``__init__``, and a package is the modules it imports."""
    files = {_module_of(p): p for p in project_files(top)}
    graph = {module: {m for m in imported_modules(path) if m in files and m != module}
             for module, path in files.items()}
    cycles, state = [], {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return cycles


def test_the_cycle_finder_finds_a_circle(tmp_path, monkeypatch):
    import tests.test_layout as layout

    for name, text in {"a.py": "from pkg.b import x\n", "b.py": "def f():\n    import pkg.a\n",
                       "c.py": "import pkg.a\n"}.items():
        (tmp_path / "pkg").mkdir(exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    monkeypatch.setattr(layout, "ROOT", tmp_path)
    monkeypatch.setattr(layout, "PROJECT", {"pkg"})
    assert layout.import_cycles("pkg") == [["pkg.a", "pkg.b", "pkg.a"]]


def test_experiments_has_no_import_cycle():
    assert import_cycles("experiments") == []


def test_a_paper_never_imports_another_paper():
    papers = set(known_papers())
    for path in project_files("methods") + project_files("experiments"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        own = parts[1] if len(parts) > 1 else ""
        for module in imported_modules(path):
            head = module.split(".")
            if len(head) > 1 and head[0] in ("methods", "experiments") and head[1] in papers:
                assert head[1] == own, f"{path.relative_to(ROOT)} imports {module}"


def test_tests_never_import_a_protocol_module():
    papers = set(known_papers())
    for path in project_files("tests"):
        for module in imported_modules(path):
            head = module.split(".")
            assert not (head[0] == "experiments" and len(head) > 1 and head[1] in papers), (
                f"{path.relative_to(ROOT)} imports {module}: test the method in methods/")


def test_protocols_do_not_select_a_plotting_backend():
    for path in project_files("experiments"):
        assert "matplotlib.use(" not in path.read_text(), path
