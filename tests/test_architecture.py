"""The package rules of docs/architecture.md, held against the code: layers, climbs, import circles,
where the engines' libraries are imported, and each package saying what it holds."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers.servers import REPO

DOC = REPO / "docs" / "architecture.md"
#: the one import circle allowed: the Kafka reader's worker process imports its parent's protocol
ALLOWED_CIRCLES = [{"eoctl.engine.duckdb.kafka_reader", "eoctl.engine.duckdb.kafka_worker"}]
#: where each engine's library may be imported
LIBRARY_HOMES = {"pyspark": ("eoctl.engine.spark",), "duckdb": ("eoctl.engine.duckdb", "eoctl.stores", "eoctl.history")}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (REPO / "eoctl").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _runtime_imports(path: Path, typing: bool = False) -> list[str]:
    """Every module an import statement names, but those under `if TYPE_CHECKING:` (annotations)
    unless `typing`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = set() if typing else {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                                        and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [f"{node.module}.{a.name}" for a in node.names] if node.level == 0 else []
    return out


def _graph(typing: bool = False) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """eoctl module -> the eoctl modules it imports; library -> the eoctl modules importing it.
    `typing`: annotations' imports too."""
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    libraries: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for target in _runtime_imports(path, typing):
            if target.split(".")[0] != "eoctl":
                libraries[target.split(".")[0]].add(name)
                continue
            while target not in modules:  # `from pkg import name`: the module, else the package
                target = target.rsplit(".", 1)[0]
            if target != name:
                edges[name].add(target)
    return edges, libraries


def _layers() -> dict[str, int]:
    """Module prefix -> layer, from the doc's table."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Layers"):text.index("## Climbs")]
    out = {}
    for layer, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", table, re.MULTILINE):
        for prefix in re.findall(r"`([\w.]+)`", cell):
            out[prefix] = int(layer)
    return out


def _climbs_documented() -> set[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Climbs"):text.index("## One audit")]
    return set(re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|", table, re.MULTILINE))


def layer_of(module: str, layers: dict[str, int]) -> int:
    prefix = max((p for p in layers if module == p or module.startswith(p + ".")), key=len, default=None)
    assert prefix is not None, f"{module}: in no layer of docs/architecture.md"
    return layers[prefix]


def _circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


@pytest.mark.unit
def test_no_import_circles_but_the_kafka_readers_worker() -> None:
    edges, _ = _graph()
    circles = [c for c in _circles(edges) if c not in ALLOWED_CIRCLES]
    assert not circles, f"import circles: {circles}"


@pytest.mark.unit
def test_every_module_is_in_a_layer_and_imports_only_below_or_beside_it_but_the_documented_climbs() -> None:
    edges, _ = _graph()
    layers = _layers()
    documented = _climbs_documented()
    climbs = {(src, dst) for src, targets in edges.items() for dst in targets
              if layer_of(dst, layers) > layer_of(src, layers)}
    assert climbs == documented, (
        f"undocumented climbs: {sorted(climbs - documented)}; documented but gone: {sorted(documented - climbs)}")
    assert len(climbs) <= 3
    for module in _modules():
        layer_of(module, layers)


@pytest.mark.unit
def test_each_engines_library_is_imported_in_its_home_only() -> None:
    _, libraries = _graph(typing=True)  # not even for an annotation
    for library, homes in LIBRARY_HOMES.items():
        strays = sorted(m for m in libraries[library] if not m.startswith(homes))
        assert not strays, f"{library} imported outside {homes}: {strays}"
    # the layer test would pass with an empty graph: the homes do import them
    assert any(m.startswith("eoctl.engine.spark") for m in libraries["pyspark"])
    assert any(m.startswith("eoctl.engine.duckdb") for m in libraries["duckdb"])


@pytest.mark.unit
def test_only_the_cli_imports_the_renderers_and_no_engine_is_chosen_outside_the_engine_layer() -> None:
    edges, _ = _graph()
    renderers = sorted(src for src, targets in edges.items() for dst in targets
                       if dst.startswith("eoctl.report") and not src.startswith(("eoctl.cli", "eoctl.report")))
    assert not renderers, f"rendering imported by the core: {renderers}"
    cli = [p for name, p in _modules().items() if name.startswith("eoctl.cli")]
    branching = [p.name for p in cli if re.search(r"engine\.kind\s*[!=]=", p.read_text(encoding="utf-8"))]
    assert not branching, f"commands that pick the engine themselves: {branching}"


@pytest.mark.unit
def test_every_package_says_what_it_holds() -> None:
    for name, path in _modules().items():
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            assert doc and len(doc.split()) >= 5, f"{name}: its first line says what the package holds"
