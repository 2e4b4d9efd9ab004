"""The package's shape: one-way imports, small facades, extras kept out of the core.

These guard the structure the architecture page describes (docs/architecture.md).
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "docpc_retrievers"
INTEGRATIONS = {
    "langchain_docpc": ROOT / "integrations/langchain-docpc/langchain_docpc",
    "llama_index.retrievers.docpc": ROOT / "integrations/llama-index-retrievers-docpc/llama_index/retrievers/docpc",
}


def _modules() -> dict[str, Path]:
    found = {}
    for prefix, folder in {"docpc_retrievers": PACKAGE, **INTEGRATIONS}.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name`` imports, at any depth of the file, including ``import_module("...")`` strings."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    # The plug-in entry-point group's name reads as a module path (it is the retriever package's) but imports nothing.
    groups = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "ENTRY_POINTS" for t in n.targets)}
    for node in ast.walk(tree):
        if id(node) in groups:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("docpc_retrievers."):
            targets.add(node.value)  # module paths handed to import_module
    return {t for t in targets if t in known and t != name}


def test_no_import_cycles() -> None:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    # A package's __init__ re-exporting its own submodules is not a cycle in the data flow.
    for name in graph:
        graph[name] = {t for t in graph[name] if not (modules[name].name == "__init__.py" and t.startswith(name + "."))}
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

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


SIZE_GUIDE = 400
"""Lines a module of the package or an integration is expected to stay near: past it, read it for a second job."""
SIZE_CEILING = 600
"""Lines past which a module surely does two jobs."""


def test_modules_are_split_by_job_with_a_size_guide() -> None:
    """Modules are split by what they do, not trimmed to a number: those past the guide are listed as a warning,
    and none may pass the ceiling."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    over_guide = sorted((n, lines) for n, lines in sizes.items() if lines > SIZE_GUIDE)
    if over_guide:
        warnings.warn(f"modules past the {SIZE_GUIDE}-line guide (a second job to move out?): {over_guide}",
                      stacklevel=1)
    assert max(sizes.values()) <= SIZE_CEILING, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]


def test_store_modules_stay_small_and_search_has_its_own_room() -> None:
    """The backends, their interface and configuration and exact scoring live in store/search/, the search read
    end to end stays short, pooling lives with the encoders, and the store never reaches back into rendering."""
    store = PACKAGE / "store"
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in store.rglob("*.py")}
    assert {"backend.py", "config.py", "centroid_search.py", "scan.py", "ranking.py"} <= {
        p.name for p in (store / "search").glob("*.py")}
    assert max(v for k, v in sizes.items() if "/search/" in k) <= 400
    search = [*(store / "search").glob("*.py"), *(PACKAGE / "scoring").glob("*.py"), PACKAGE / "blas_threads.py"]
    assert sum(len(p.read_text().splitlines()) for p in search) <= 1500  # the search, read end to end
    from docpc_retrievers.store.search import SearchConfig

    assert len(dataclasses.fields(SearchConfig)) <= 20
    assert (PACKAGE / "encoders" / "pooling.py").is_file() and not (store / "pooling.py").exists()
    reaching = [p.relative_to(ROOT).as_posix() for p in store.rglob("*.py")
                if "documents.represent" in p.read_text() or "documents.rendering" in p.read_text()]
    assert reaching == []


def test_integrations_import_only_the_retriever_package_from_the_core() -> None:
    """The LangChain and LlamaIndex packages take everything core from ``docpc_retrievers.retrievers``: a change
    below it never reaches them through a side door."""
    modules = _modules()
    known = set(modules)
    offenders = {}
    for name, path in modules.items():
        if not name.startswith(tuple(INTEGRATIONS)):
            continue
        core = {t for t in _imports(name, path, known) if t.startswith("docpc_retrievers")}
        if core - {"docpc_retrievers.retrievers"}:
            offenders[name] = sorted(core)
    assert offenders == {}


def test_the_retriever_layer_is_one_package_the_store_never_imports() -> None:
    """Options, hits, opening, loading, editing and plug-ins live in ``docpc_retrievers/retrievers/`` (no module of
    it past 450 lines), and nothing in ``store/`` imports it."""
    layer = PACKAGE / "retrievers"
    assert {"schema.py", "options.py", "hits.py", "opening.py", "loading.py", "editing.py", "plugins.py"} <= {
        p.name for p in layer.glob("*.py")}
    for gone in ("options", "retriever_options", "hits", "adapters", "retriever_parts", "frameworks"):
        assert not (PACKAGE / f"{gone}.py").exists(), gone
    assert max(len(p.read_text().splitlines()) for p in layer.glob("*.py")) <= 450
    modules = _modules()
    known = set(modules)
    reaching = {name: sorted(t for t in _imports(name, path, known) if t.startswith("docpc_retrievers.retrievers"))
                for name, path in modules.items() if name.startswith("docpc_retrievers.store")}
    assert {k: v for k, v in reaching.items() if v} == {}


def test_trainer_and_synthetic_generator_are_split_into_their_parts() -> None:
    """Training: configuration, checkpoints, schedule, model and loop in their own modules; the synthetic corpus
    generator: planning, drawing, pages and writing. None of those over 400 lines."""
    parts = [PACKAGE / "training" / f"{name}.py" for name in ("config", "checkpoints", "schedule", "model", "trainer",
                                                             "evaluation", "ablation")]
    parts += [PACKAGE / "eval" / "synthetic" / f"{name}.py" for name in ("planning", "drawing", "pages", "writing")]
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in parts}
    assert max(sizes.values()) <= 400, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    assert not (PACKAGE / "eval" / "synthetic.py").exists()


def test_no_module_above_the_store_joins_store_paths() -> None:
    """Only store/ knows the file names inside a store directory."""
    names = ('"store.json"', '"write.lock"', '"grids"', '"page_cache"', '"vectors"', '"chroma"', '"docpc_retriever.json"')
    offenders = []
    for path in [*PACKAGE.rglob("*.py"), *(p for f in INTEGRATIONS.values() for p in f.rglob("*.py"))]:
        if "store" in path.relative_to(ROOT).parts[:2] and path.parent.name == "store":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if f"/ {n}" in text]
    assert offenders == []


def test_core_import_pulls_no_evaluation_dependency() -> None:
    """Importing the core (index, search, CLI) never imports rank_bm25: it belongs to the [eval] extra."""
    code = (
        "import sys, docpc_retrievers.index, docpc_retrievers.cli.app, docpc_retrievers.retrievers;"
        "docpc_retrievers.cli.app.build_parser();"
        "print('rank_bm25' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
