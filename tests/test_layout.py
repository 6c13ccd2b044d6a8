"""The import rules of the layout (README, "Adding a paper"): each layer imports only the
layers below it, a paper never imports another paper, and tests check method code where it
lives, never through a protocol module."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from experiments.claims.papers import papers

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


@pytest.mark.parametrize("top", ["experiments", "methods", "models", "data", "common"])
def test_no_package_has_an_import_cycle(top):
    assert import_cycles(top) == []


def test_a_paper_never_imports_another_paper():
    keys = set(papers())
    for path in project_files("methods") + project_files("experiments"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        own = parts[1] if len(parts) > 1 else ""
        for module in imported_modules(path):
            head = module.split(".")
            if len(head) > 1 and head[0] in ("methods", "experiments") and head[1] in keys:
                assert head[1] == own, f"{path.relative_to(ROOT)} imports {module}"


def test_tests_never_import_a_protocol_module():
    keys = set(papers())
    for path in project_files("tests"):
        for module in imported_modules(path):
            head = module.split(".")
            assert not (head[0] == "experiments" and len(head) > 1 and head[1] in keys), (
                f"{path.relative_to(ROOT)} imports {module}: test the method in methods/")


def test_protocols_do_not_select_a_plotting_backend():
    for path in project_files("experiments"):
        assert "matplotlib.use(" not in path.read_text(), path


# Random draws come from streams by name (common/streams.py): no arithmetic on a seed, no
# reseeding of a global generator, no draw from the run seed itself.
SEED_PATTERNS = {
    "arithmetic on a seed": re.compile(r"\bseed\w*\s*[-+*%]\s*[\w(]|[\w)]\s*[+*]\s*\w*seed\b"),
    "a global torch reseed": re.compile(r"\btorch\.manual_seed\("),
    "a global numpy or python reseed": re.compile(r"\b(np\.random|random)\.seed\("),
    "a draw from the run seed": re.compile(
        r"(default_rng|manual_seed|Random|RandomState|SeedSequence)\(\s*ctx\.seed\b"),
    "the removed ctx.rng": re.compile(r"\bctx\.rng\b"),
}
# the streams themselves, and the runner seeding each process's globals from the run seed
# the files that own seeds: the streams, the runner's seeding, and the numbering of the
# confirmatory runs' seeds (no stream is derived there)
SEED_OWNERS = {"common/streams.py", "experiments/runner/seeding.py",
               "experiments/claims/study.py"}


def test_random_streams_are_named_never_derived_by_arithmetic():
    found = []
    for layer in ("common", "models", "data", "methods", "experiments"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in SEED_OWNERS:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = re.sub(r"(\"[^\"]*\"|'[^']*')", '""', line.split("#")[0])
                found += [f"{name}:{number}: {what}: {line.strip()}"
                          for what, pattern in SEED_PATTERNS.items() if pattern.search(code)]
    assert not found, "\n".join(found)


def test_the_seed_patterns_catch_what_they_forbid():
    for line in ("rng = np.random.default_rng(ctx.seed + 7)", "seeds = [ctx.seed * 100 + k]",
                 "torch.manual_seed(seed)", "np.random.seed(0)",
                 "gen = torch.Generator().manual_seed(seed + 1)", "x = 1000 * seed",
                 "Random(ctx.seed)", "rng = ctx.rng"):
        assert any(p.search(line) for p in SEED_PATTERNS.values()), line
    for line in ('log.info("seed %d", seed)', "gen = streams.torch('init')",
                 "g = torch.Generator().manual_seed(stream_seed)"):
        code = re.sub(r"(\"[^\"]*\"|'[^']*')", '""', line)
        assert not any(p.search(code) for p in SEED_PATTERNS.values()), line


def _project_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """Every project module ``module`` imports, directly or through others (by its source),
    the runner's aside."""
    import ast

    seen = set() if seen is None else seen
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    if module in seen or not path.is_file():
        return seen
    seen.add(module)
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            # the runner (which builds ctx.compute for every paper) is not the paper's code
            if name.split(".")[0] in ("methods", "models", "data", "common") or \
                    name.startswith("experiments.helpers"):
                _project_imports(name, seen)
    return seen


def test_paper_uses_declares_the_shared_groups_its_code_reads():
    """``paper.uses`` (what an override may change) agrees with the code: a paper that uses
    "trainer" reaches the Lightning trainer factory and reads ``ctx.compute`` (where the
    trainer settings live), one that does not never reads ``ctx.compute``; "model" exactly
    when the protocol reads ``cfg.model``."""
    from experiments.claims.papers import find_paper

    for key in list(papers()):
        uses = set(find_paper(key).info.get("uses") or [])
        source = (ROOT / "experiments" / f"{key}.py").read_text()
        if "trainer" in uses:
            assert "models.trainer" in _project_imports(f"experiments.{key}"), key
        assert ("trainer" in uses) == ("ctx.compute" in source), key
        assert ("model" in uses) == ("cfg.model" in source), key


# distribution name -> the module a run imports; plugins and back ends a library loads itself
MODULE_OF = {"hydra-core": "hydra", "markdown-it-py": "markdown_it", "scikit-learn": "sklearn",
             "dp-accounting": "dp_accounting", "biopython": "Bio", "pot": "ot",
             "prv-accountant": "prv_accountant"}
LOADED_BY_A_LIBRARY = {"hydra-joblib-launcher", "hydra-submitit-launcher",  # Hydra plugins
                       "accelerate", "gguf"}  # transformers: device placement, GGUF weights


def _declared(extra: str | None) -> list[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = project["dependencies"] if extra is None else \
        project["optional-dependencies"][extra]
    return [re.split(r"[<>=\[ ]", n)[0] for n in names if not n.startswith("paperlab")]


@functools.cache
def _sources(folder: str) -> tuple[str, ...]:
    return tuple(p.read_text() for p in (ROOT / folder).rglob("*.py"))


def _imported_by(folders: list[str], name: str) -> bool:
    module = MODULE_OF.get(name, name.replace("-", "_"))
    pattern = re.compile(rf"^\s*(import|from) {re.escape(module)}\b|importorskip\(\"{module}",
                         re.M)
    return any(pattern.search(text) for folder in folders for text in _sources(folder))


@pytest.mark.parametrize("extra", [None, "llm", "numerical", "vision", "neuro", "bio",
                                   "planning"])
def test_every_installed_dependency_is_used_by_the_project(extra):
    """A user's install holds what runs import (or a library they use loads), nothing else."""
    code = ["common", "data", "models", "methods", "experiments"]
    unused = [n for n in _declared(extra)
              if n not in LOADED_BY_A_LIBRARY and not _imported_by(code, n)]
    assert unused == [], f"declared in {extra or 'dependencies'} but never imported"


def test_the_test_extra_holds_what_only_tests_compare_with():
    code = ["common", "data", "models", "methods", "experiments"]
    for name in _declared("test"):
        assert _imported_by(["tests"], name), name
        assert not _imported_by(code, name), f"{name} is used by the project: not a test extra"
