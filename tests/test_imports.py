"""The package's modules import one way: no circles, at module level or inside functions.

A circle means two modules each need the other, which hides the layering (units -> topology ->
schedules -> library -> engine -> records -> report) and makes import order matter. The check
walks every module's ``import`` statements with :mod:`ast` (relative imports resolved, imports
inside functions included, ``if TYPE_CHECKING:`` blocks excluded) and fails naming each cycle.
A package is its ``__init__``: a module importing names from its own package while that
package's ``__init__`` imports the module is a circle too (which names exist then depends on
who was imported first).
"""

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking_nodes(tree) -> set:
    """The statements under ``if TYPE_CHECKING:`` (its ``else:`` runs, so it counts)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                  "typing.TYPE_CHECKING"):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def import_graph(*packages: Path) -> nx.DiGraph:
    """Module -> module edges of every import under ``packages`` (directories)."""
    modules = {module_name(p, package.parent): p
               for package in packages for p in package.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules
                           else stem for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """Every import circle, as its modules."""
    return list(nx.simple_cycles(graph))


def test_the_package_has_no_import_circles():
    packages = [ROOT / name for name in ("simulator", "topologies", "scenarios")
                if (ROOT / name / "__init__.py").exists()]
    found = cycles(import_graph(*packages))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c + [c[0]]) for c in found)


def test_the_check_finds_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from . import a\n")
    found = cycles(import_graph(pkg))
    assert sorted(map(sorted, found)) == [["pkg.a", "pkg.sub.b"]]


def test_the_check_finds_a_module_importing_its_own_package(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import f\nfrom .b import g\n")
    (pkg / "a.py").write_text("def f():\n    from . import g\n")     # g: from __init__
    (pkg / "b.py").write_text("from . import a\ndef g():\n    pass\n")  # a: the module
    found = cycles(import_graph(pkg))
    assert sorted(map(sorted, found)) == [["pkg", "pkg.a"], ["pkg", "pkg.a", "pkg.b"]]
