"""Python: functions, classes and methods added, removed, changed, moved or renamed.

Definitions are read with the standard library's :mod:`ast` (its parser is C;
``libcst`` gives the same definitions several times slower, see
benchmarks/RESULTS-semantic.md). A definition's id is its qualified name,
``pkg/mod.py::Class.method``; classes are entered, functions are not (a
nested function belongs to the body of its function). A definition's
fingerprint is its AST without positions, its own name and, for a class, the
bodies of its members (a changed method is that method's change, not its class's).

* same name, other fingerprint: ``changed``;
* same name and fingerprint, another place among its siblings: ``moved``;
* gone under one name, come under another with the same fingerprint: ``renamed``
  (or ``moved``, when only the enclosing class differs);
* statements outside any definition (imports, constants): one ``module`` block.
"""

from __future__ import annotations

import ast
import hashlib
import threading
from dataclasses import dataclass
from functools import lru_cache

from strata.semantic.base import Block, HandlerFailed, HandlerResult, decode_text, summarise

__all__ = ["PythonHandler", "definitions"]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_NAMING = threading.Lock()


@dataclass
class Definition:
    """One definition of a module: its qualified name, kind, place and text.

    ``text`` is its source with whitespace collapsed: equal texts are equal
    definitions, and only definitions whose texts differ are compared by AST
    (:attr:`fingerprint`, computed on first use), which keeps a large module
    with a few changed functions fast.
    """

    qualname: str
    kind: str
    parent: str
    index: int
    text: str
    node: ast.AST
    _print: str | None = None

    @property
    def fingerprint(self) -> str:
        """A digest of the AST without positions, the own name or member bodies."""
        if self._print is None:
            self._print = _fingerprint(self.node)
        return self._print

    def same(self, other: Definition) -> bool:
        """Whether the two definitions are the same code (formatting aside)."""
        return self.text == other.text or self.fingerprint == other.fingerprint


def _fingerprint(node: ast.AST) -> str:
    if isinstance(node, ast.ClassDef):
        body = [s for s in node.body if not isinstance(s, _DEFS)]
        shape = ast.ClassDef(
            name="",
            bases=node.bases,
            keywords=node.keywords,
            body=body,
            decorator_list=node.decorator_list,
        )
        text = ast.dump(shape, include_attributes=False)
    else:
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        with _NAMING:  # the node is shared by the cache: its name is blanked under a lock
            saved = node.name
            node.name = ""
            try:
                text = ast.dump(node, include_attributes=False)
            finally:
                node.name = saved
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


Parsed = tuple[dict[str, Definition], str, list[ast.stmt]]


def definitions(source: str, what: str) -> Parsed:
    """The definitions of ``source`` by qualified name; the rest's text and statements.

    The last few sources parsed are kept (a file's new side is the next
    change's old side), so walking a history parses each version once.
    """
    parsed = _parse(source)
    if isinstance(parsed, str):
        raise HandlerFailed(f"{what} {parsed}")
    return parsed


@lru_cache(maxsize=32)
def _parse(source: str) -> Parsed | str:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"is not valid Python (line {exc.lineno}: {exc.msg})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"cannot be parsed as Python ({exc})"
    lines = source.splitlines()
    found: dict[str, Definition] = {}
    rest: list[str] = []
    rest_nodes: list[ast.stmt] = []

    def segment(node: ast.stmt) -> str:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        return " ".join(" ".join(lines[first - 1 : node.end_lineno or node.lineno]).split())

    def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
        index = 0
        for stmt in body:
            if isinstance(stmt, _DEFS):
                name = prefix + stmt.name
                kind = (
                    "class"
                    if isinstance(stmt, ast.ClassDef)
                    else ("method" if in_class else "function")
                )
                # a name defined twice (property setters, overloads) keeps each definition
                key = name
                n = 2
                while key in found:
                    key = f"{name}#{n}"
                    n += 1
                found[key] = Definition(key, kind, prefix, index, segment(stmt), stmt)
                index += 1
                if isinstance(stmt, ast.ClassDef):
                    visit(stmt.body, name + ".", True)
            elif not prefix:
                rest.append(segment(stmt))
                rest_nodes.append(stmt)

    visit(tree.body, "", False)
    return found, "\n".join(rest), rest_nodes


def _dump(nodes: list[ast.stmt]) -> str:
    return "\n".join(ast.dump(n, include_attributes=False) for n in nodes)


class PythonHandler:
    """The ``ast`` handler for ``.py`` and ``.pyi`` files."""

    name = "python"

    def handles(self, path: str) -> bool:
        """Python sources and stubs."""
        return path.endswith((".py", ".pyi"))

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Definitions added, removed, changed, moved or renamed."""
        old_source = decode_text(before, "the old side")
        new_source = decode_text(after, "the new side")
        old, old_rest, old_nodes = definitions(old_source, "the old side")
        new, new_rest, new_nodes = definitions(new_source, "the new side")
        blocks: list[Block] = []
        if (
            old_rest != new_rest
            and before is not None
            and after is not None
            and _dump(old_nodes) != _dump(new_nodes)
        ):
            blocks.append(Block("module", f"{path}::<module>", "changed"))
        gone = {q: d for q, d in old.items() if q not in new}
        came = {q: d for q, d in new.items() if q not in old}
        for q in sorted(old.keys() & new.keys()):
            a, b = old[q], new[q]
            if not a.same(b):
                blocks.append(Block(b.kind, f"{path}::{q}", "changed"))
            elif a.index != b.index and _sibling_order(old, a) != _sibling_order(new, b):
                blocks.append(Block(b.kind, f"{path}::{q}", "moved"))
        by_print: dict[str, list[Definition]] = {}
        for d in gone.values():
            by_print.setdefault(d.fingerprint, []).append(d)
        for q in sorted(came):
            d = came[q]
            twins = by_print.get(d.fingerprint)
            if twins:
                twin = twins.pop(0)
                del gone[twin.qualname]
                short_old = twin.qualname.rsplit(".", 1)[-1]
                short_new = q.rsplit(".", 1)[-1]
                change = "moved" if short_old == short_new else "renamed"
                blocks.append(Block(d.kind, f"{path}::{q}", change, f"{path}::{twin.qualname}"))
            else:
                blocks.append(Block(d.kind, f"{path}::{q}", "added"))
        for q in sorted(gone):
            # a definition inside a removed class is that class's removal
            if any(q.startswith(p + ".") for p in gone if p != q):
                continue
            blocks.append(Block(gone[q].kind, f"{path}::{q}", "removed"))
        blocks = [b for b in blocks if not _inside_added(b, came, path)]
        result = tuple(blocks)
        return HandlerResult("ast", result, summarise(result, "definition"), handler=self.name)


def _sibling_order(defs: dict[str, Definition], d: Definition) -> list[str]:
    """The names of ``d``'s siblings in order, up to and including ``d``."""
    siblings = sorted((x for x in defs.values() if x.parent == d.parent), key=lambda x: x.index)
    names = [x.qualname for x in siblings]
    return names[: names.index(d.qualname) + 1]


def _inside_added(block: Block, came: dict[str, Definition], path: str) -> bool:
    """Whether ``block`` is a member of a class added whole (its addition says it)."""
    if block.change != "added":
        return False
    q = block.id[len(path) + 2 :]
    return any(q.startswith(p + ".") for p in came if p != q)
