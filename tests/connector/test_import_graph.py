"""The package's import graph: no import cycle, and the connector and the embedded broker stay apart.

Every module under ``connector/pyspark_kafka`` is parsed with ``ast`` (nothing is
imported); an edge is any import of a ``pyspark_kafka`` module, at module level
or inside a function, relative imports resolved; imports under ``if TYPE_CHECKING:`` are
annotations only (never run) and do not count, except for the circle test with type-only imports
(issue 29: a type-only circle is still a circle a reader must hold in their head). ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module, else to ``pkg``; importing a
submodule is not counted as importing its parent package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "pyspark_kafka"
ROOT = Path(__file__).resolve().parents[2] / "connector" / PACKAGE
BROKER = f"{PACKAGE}.broker"
# Connector modules that start the embedded broker on purpose: `pyspark-kafka broker` (cli) and the
# test clusters of the pytest plugin and the integration suite (testing.clusters). Everything else on
# the connector side must not import it.
# Modules both sides may import: they import nothing from the package but one another (fsync / atomic
# writes; the record format and its varints; the record batch codecs, used by the broker's log and the
# columnar reader; the request header rule; PKCS12 key store decoding).
SHARED = {f"{PACKAGE}.fsutil", f"{PACKAGE}.record_codecs", f"{PACKAGE}.record_format", f"{PACKAGE}.wire_header", f"{PACKAGE}.pkcs12", f"{PACKAGE}.sockets"}
STARTS_BROKER = {f"{PACKAGE}.cli", f"{PACKAGE}.testing.clusters"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    """``{dotted module name: (path, is_package)}`` of every module of the package."""
    return {_module_name(p): (p, p.name == "__init__.py") for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, modules: dict) -> str | None:
    """The module ``name`` loads: itself, or its longest prefix that is a module (``pkg.func`` → ``pkg``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path, is_package: bool, modules: dict, package: str = PACKAGE,
             with_type_only: bool = False) -> set:
    """The package modules ``module`` imports anywhere in its code (module and function level; under
    ``if TYPE_CHECKING:`` too when ``with_type_only``)."""
    out = set()
    tree = ast.parse(path.read_text(), str(path))
    type_only = set() if with_type_only else {
        id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
        for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = module.split(".") if is_package else module.split(".")[:-1]
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == package or target.startswith(package + "."):
                resolved = _resolve(target, modules)
                if resolved and resolved != module:
                    out.add(resolved)
    return out


def import_graph(with_type_only: bool = False) -> dict:
    """``{module: set of package modules it imports}`` for every module under ``connector/pyspark_kafka``
    (``with_type_only``: the imports under ``if TYPE_CHECKING:`` too)."""
    modules = _modules()
    return {m: _imports(m, path, is_pkg, modules, with_type_only=with_type_only)
            for m, (path, is_pkg) in modules.items()}


def find_cycle(graph: dict) -> list | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None when the graph has none."""
    state: dict = {}  # 1: on the current path, 2: done
    stack: list = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _is_broker(module: str) -> bool:
    return module == BROKER or module.startswith(BROKER + ".")


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert len(graph) > 20 and f"{PACKAGE}.read.batch" in graph
    assert f"{PACKAGE}.read.options" in graph[f"{PACKAGE}.read.batch"]  # module level, absolute
    assert f"{PACKAGE}.read" in graph[f"{PACKAGE}.source"]  # function level
    assert f"{PACKAGE}.read.planning" in graph[f"{PACKAGE}.groups"]
    assert f"{BROKER}.server" in graph[f"{PACKAGE}.cli"]  # function level, into a subpackage


def test_relative_imports_are_resolved(tmp_path):
    code = tmp_path / "m.py"
    code.write_text("from . import b\nfrom .b import f\nfrom .. import c\nfrom ..c.d import g\n"
                    "def h():\n    from .. import e\n")
    modules = dict.fromkeys(("pk", "pk.a", "pk.a.b", "pk.c", "pk.c.d", "pk.e"))
    expected = {"pk.a.b", "pk.c", "pk.c.d", "pk.e"}
    assert _imports("pk.a.m", code, False, modules, package="pk") == expected  # pk/a/m.py
    assert _imports("pk.a", code, True, modules, package="pk") == expected  # pk/a/__init__.py


@pytest.mark.parametrize(
    "graph, cycle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"a"}}, ["a", "a"]),
    ],
)
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_type_only_imports_count_when_asked(tmp_path):
    code = tmp_path / "m.py"
    code.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pk import b\n")
    modules = dict.fromkeys(("pk", "pk.m", "pk.b"))
    assert _imports("pk.m", code, False, modules, package="pk") == set()
    assert _imports("pk.m", code, False, modules, package="pk", with_type_only=True) == {"pk.b"}


COORDINATOR = f"{BROKER}.coordinator"


def test_no_import_cycle_with_type_only_imports_outside_the_coordinators():
    graph = import_graph(with_type_only=True)
    for module in [m for m in graph if m.startswith(COORDINATOR + ".")]:  # their split is under way (issue 29)
        graph[module] = {t for t in graph[module] if not t.startswith(COORDINATOR + ".")}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (type-only imports included): " + " -> ".join(cycle)


def test_no_import_cycle_with_type_only_imports():
    cycle = find_cycle(import_graph(with_type_only=True))
    assert cycle is None, "import cycle (type-only imports included): " + " -> ".join(cycle)


def test_the_read_package_never_imports_the_group_helpers_on_top_of_it():
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if t == f"{PACKAGE}.groups")
             for m, ts in graph.items() if m.startswith(f"{PACKAGE}.read")}
    assert not any(wrong.values()), f"read modules importing pyspark_kafka.groups: {wrong}"


def test_the_connector_does_not_import_the_broker():
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if _is_broker(t))
             for m, ts in graph.items() if not _is_broker(m) and m not in STARTS_BROKER}
    assert not any(wrong.values()), f"connector modules importing {BROKER}: {wrong}"


def test_the_broker_imports_only_broker_modules():
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if not _is_broker(t) and t not in SHARED) for m, ts in graph.items()
             if _is_broker(m)}
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, f"broker modules importing connector modules: {wrong}"


def test_shared_modules_import_only_shared_modules():
    """The shared modules are the base layer both sides build on: they may import one another (the wire
    header and the snappy codec read varints with record_format's decoder), nothing else of the package."""
    graph = import_graph()
    assert {m: sorted(graph[m] - SHARED) for m in SHARED if graph[m] - SHARED} == {}
