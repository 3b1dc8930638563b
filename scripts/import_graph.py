"""Print the import graph of src/strata and every import loop in it.

Usage: .venv/bin/python scripts/import_graph.py [--loops] [SRC]

Every import counts, wherever it stands: at the top of a module, inside a
function, under ``if TYPE_CHECKING:``, or as ``importlib.import_module`` with
a literal name. ``from P import m`` where ``P.m`` is a module is an import of
``P.m``; any other name makes it an import of ``P``.

The graph is printed twice: between modules, and between packages (``strata.X``
for everything under ``src/strata/X/``; a top-level module is its own
package). A loop is a group of modules (or packages) that reach each other
through their imports; each is printed with the imports that tie it. The exit
status is 1 when there is a loop at either level, 0 otherwise; ``--loops``
prints the loops alone. ``tests/test_layers.py`` runs the same functions.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "strata"


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int
    #: the names a ``from`` import takes (empty for ``import x`` and for modules)
    names: tuple[str, ...] = ()


def module_name(path: str) -> str:
    """``strata/core/core.py`` -> ``strata.core.core``; a package is its ``__init__``."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_sources(src: Path = SRC, root: str = ROOT) -> dict[str, str]:
    """Every module under ``src/root`` as {path relative to src: text}."""
    return {
        path.relative_to(src).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted((src / root).rglob("*.py"))
    }


def imports(sources: Mapping[str, str], root: str = ROOT) -> list[Import]:
    """Every import of a module of ``root`` made by the modules of ``sources``."""
    known = {module_name(path) for path in sources}
    found: list[Import] = []
    for path, text in sources.items():
        module = module_name(path)
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(text, filename=path)):
            for target, line, names in _targets(node, package, known):
                if target == root or target.startswith(root + "."):
                    found.append(Import(module, target, line, names))
    return found


def _targets(
    node: ast.AST, package: str, known: set[str]
) -> Iterable[tuple[str, int, tuple[str, ...]]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, node.lineno, ()
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            name = ".".join([*base, node.module] if node.module else base)
        else:
            name = node.module or ""
        plain: list[str] = []
        for alias in node.names:
            sub = f"{name}.{alias.name}"
            if sub in known:
                yield sub, node.lineno, ()
            else:
                plain.append(alias.name)
        if plain:
            yield name, node.lineno, tuple(plain)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
        == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        yield node.args[0].value, node.lineno, ()


def package_of(module: str, root: str = ROOT) -> str:
    """``strata.core.core`` -> ``strata.core``; ``strata.repo`` -> itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == root else module


def graph(edges: Iterable[Import], *, packages: bool = False) -> dict[str, set[str]]:
    """{module: the modules it imports}, or the same between packages."""
    out: dict[str, set[str]] = {}
    for edge in edges:
        source, target = edge.source, edge.target
        if packages:
            source, target = package_of(source), package_of(target)
        out.setdefault(source, set())
        out.setdefault(target, set())
        if source != target:
            out[source].add(target)
    return out


def loops(nodes: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more nodes (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    for start in sorted(nodes):
        if start in index:
            continue
        # an explicit stack of (node, its remaining successors): no recursion limit
        work = [(start, iter(sorted(nodes[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(nodes.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return sorted(found)


def ties(group: list[str], edges: Iterable[Import], *, packages: bool = False) -> list[Import]:
    """The imports that run between members of one loop."""
    members = set(group)
    key = package_of if packages else (lambda module: module)
    return [
        edge
        for edge in edges
        if key(edge.source) in members
        and key(edge.target) in members
        and key(edge.source) != key(edge.target)
    ]


def describe_loops(edges: list[Import]) -> list[str]:
    """Each loop at module and package level, with the imports that tie it."""
    lines: list[str] = []
    for level, packages in (("module", False), ("package", True)):
        for group in loops(graph(edges, packages=packages)):
            lines.append(f"{level} loop: {' <-> '.join(group)}")
            for edge in sorted(set(ties(group, edges, packages=packages)), key=_order):
                taken = f" ({', '.join(edge.names)})" if edge.names else ""
                lines.append(f"  {edge.source}:{edge.line} -> {edge.target}{taken}")
    return lines


def _order(edge: Import) -> tuple[str, int, str]:
    return edge.source, edge.line, edge.target


def main(argv: list[str]) -> int:
    """Print the graph (unless ``--loops``) and the loops; 1 when there is one."""
    only_loops = "--loops" in argv
    args = [a for a in argv if a != "--loops"]
    src = Path(args[0]) if args else SRC
    edges = imports(read_sources(src))
    if not only_loops:
        for level, packages in (("modules", False), ("packages", True)):
            nodes = graph(edges, packages=packages)
            print(f"# {level}: {len(nodes)}, imports between them: ", end="")
            print(sum(len(v) for v in nodes.values()))
            for node in sorted(nodes):
                print(f"{node} -> {', '.join(sorted(nodes[node])) or '(nothing)'}")
            print()
    found = describe_loops(edges)
    print("\n".join(found) if found else "no import loop")
    return 1 if found else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # (piped into head): stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
