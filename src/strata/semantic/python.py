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
from dataclasses import dataclass

from strata.semantic.base import Block, HandlerFailed, HandlerResult, decode_text, summarise

__all__ = ["PythonHandler", "definitions"]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Definition:
    """One definition of a module: its qualified name, kind, place and fingerprint."""

    qualname: str
    kind: str
    parent: str
    index: int
    fingerprint: str


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
        saved = node.name
        node.name = ""
        try:
            text = ast.dump(node, include_attributes=False)
        finally:
            node.name = saved
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def definitions(source: str, what: str) -> tuple[dict[str, Definition], str]:
    """The definitions of ``source`` by qualified name, and a fingerprint of the rest."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise HandlerFailed(f"{what} is not valid Python (line {exc.lineno}: {exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise HandlerFailed(f"{what} cannot be parsed as Python ({exc})") from None
    found: dict[str, Definition] = {}
    rest: list[str] = []

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
                found[key] = Definition(key, kind, prefix, index, _fingerprint(stmt))
                index += 1
                if isinstance(stmt, ast.ClassDef):
                    visit(stmt.body, name + ".", True)
            elif not prefix:
                rest.append(ast.dump(stmt, include_attributes=False))

    visit(tree.body, "", False)
    module = hashlib.blake2b("\n".join(rest).encode(), digest_size=12).hexdigest()
    return found, module


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
        old, old_rest = definitions(decode_text(before, "the old side"), "the old side")
        new, new_rest = definitions(decode_text(after, "the new side"), "the new side")
        blocks: list[Block] = []
        if old_rest != new_rest and (before is not None and after is not None):
            blocks.append(Block("module", f"{path}::<module>", "changed"))
        gone = {q: d for q, d in old.items() if q not in new}
        came = {q: d for q, d in new.items() if q not in old}
        for q in sorted(old.keys() & new.keys()):
            a, b = old[q], new[q]
            if a.fingerprint != b.fingerprint:
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
