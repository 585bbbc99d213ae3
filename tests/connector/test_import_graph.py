"""The package's import graph: no import cycle, and the package's three wings stay apart.

The wings: the Spark side (the data source: ``source``, ``read/``, ``write/``, ``sinks/``, ``groups``,
the CLI, ``testing/``), the Kafka client and wire layer both sides share (``pyspark_kafka.kafka``: the
record format and codecs, the header rule, our clients, client configuration, key stores), and the
embedded broker (``pyspark_kafka.broker``). The shared layer imports only itself and
``pyspark_kafka.errors`` (the package-wide error base, which imports nothing of the package); the broker
imports only itself and the shared layer; the Spark side imports the broker only where it starts one.

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
# The Kafka client and wire layer both sides share (issue 38): the record format and its varints, the
# record batch codecs, the request header rule, our clients (confluent-kafka's and the fetch client),
# client configuration (options, Java names, key stores), fsync / atomic writes, socket reads.
SHARED = f"{PACKAGE}.kafka"
# The package-wide error base: OptionError and PySparkKafkaError are raised on both the Spark side and
# the shared layer (a bad client setting is an OptionError wherever it is found), so it stays at the
# package root, imports nothing of the package, and the shared layer may import it.
ERRORS = f"{PACKAGE}.errors"
# Spark-side modules that start the embedded broker on purpose: `pyspark-kafka broker` (cli) and the
# test clusters of the pytest plugin and the integration suite (testing.clusters). Everything else on
# the Spark side must not import it.
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


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_broker(module: str) -> bool:
    return _within(module, BROKER)


def _is_shared(module: str) -> bool:
    return _within(module, SHARED)


def _is_spark_side(module: str) -> bool:
    """Neither the broker, the shared layer nor the error base: the data source, its CLI and test helpers."""
    return not (_is_broker(module) or _is_shared(module) or module == ERRORS)


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


def test_the_spark_side_does_not_import_the_broker():
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if _is_broker(t))
             for m, ts in graph.items() if _is_spark_side(m) and m not in STARTS_BROKER}
    assert not any(wrong.values()), f"Spark-side modules importing {BROKER}: {wrong}"


def test_the_broker_imports_only_itself_and_the_shared_layer():
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if not (_is_broker(t) or _is_shared(t))) for m, ts in graph.items()
             if _is_broker(m)}
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, f"broker modules importing outside {BROKER} and {SHARED}: {wrong}"


def test_the_shared_layer_imports_only_itself_and_the_error_base():
    """The shared layer is the base both sides build on: its modules may import one another (the wire
    header and the snappy codec read varints with record_format's decoder) and the error base, nothing
    else of the package (no Spark-side option parser, no broker)."""
    graph = import_graph()
    wrong = {m: sorted(t for t in ts if not (_is_shared(t) or t == ERRORS)) for m, ts in graph.items()
             if _is_shared(m)}
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, f"{SHARED} modules importing outside {SHARED} and {ERRORS}: {wrong}"


def test_the_error_base_imports_nothing_of_the_package():
    assert import_graph()[ERRORS] == set()


def test_the_broker_uses_the_shared_layer():
    """The rules above are not vacuous: the broker and the Spark side both import the shared layer."""
    graph = import_graph()
    assert f"{SHARED}.record_format" in graph[f"{BROKER}.log.record_batch"]
    assert f"{SHARED}.clients" in graph[f"{PACKAGE}.read.batch"]
