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

A module is parsed chunk by chunk (its top-level statements, cut at lines
that start at column 0) and each chunk's definitions are kept by the chunk's
text, so a file's next version parses only the chunks it changed: walking a
history of a 4,000-line module costs the changed functions, not the module.
"""

from __future__ import annotations

import ast
import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

from strata.semantic.base import Block, HandlerFailed, HandlerResult, decode_text, summarise

__all__ = ["PythonHandler", "definitions"]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class _Shape:
    """A definition's source and, once asked for, its fingerprint (shared by every parse).

    The AST is not kept: a history's worth of parsed definitions held as
    trees makes every garbage collection walk them (measured: most of the
    handler's time on click's history); it is parsed again from the source
    when a fingerprint is asked for.
    """

    __slots__ = ("print", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.print: str | None = None

    @property
    def node(self) -> ast.stmt:
        """The definition's AST, parsed again (an indented method inside ``if 1:``)."""
        if self.source[:1].isspace():
            block = ast.parse("if 1:\n" + self.source).body[0]
            assert isinstance(block, ast.If)
            return block.body[0]
        return ast.parse(self.source).body[0]


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
    shape: _Shape

    @property
    def node(self) -> ast.AST:
        """The definition's AST."""
        return self.shape.node

    @property
    def fingerprint(self) -> str:
        """A digest of the AST without positions, the own name or member bodies."""
        if self.shape.print is None:
            self.shape.print = _fingerprint(self.shape.node)
        return self.shape.print

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
        node.name = ""  # a tree parsed for this fingerprint alone
        text = ast.dump(node, include_attributes=False)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


#: the definitions by qualified name; the other top-level statements' text (whitespace
#: collapsed) and their sources
Parsed = tuple[dict[str, Definition], str, list[str]]

#: one definition as its chunk has it: (name, kind, parent, index, text, shape); the
#: top level's index counts within the chunk, and duplicate names are not yet numbered
_Entry = tuple[str, str, str, int, str, _Shape]
#: a chunk parsed: its definitions (depth first), its other statements' texts and sources
_Chunk = tuple[list[_Entry], list[str], list[str]]

#: keywords that continue the statement above them at the same indentation
_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b")
#: parsed chunks kept, by their text (a history changes a few chunks of a file at a time)
CHUNKS_KEPT = 4096
_chunks: OrderedDict[str, _Chunk] = OrderedDict()
_CHUNKS_LOCK = threading.Lock()


def definitions(source: str, what: str) -> Parsed:
    """The definitions of ``source`` by qualified name; the rest's text and statements.

    A module is cut into top-level chunks where a line starts at column 0
    (decorators and ``else``/``except``... stay with their statement), and
    each chunk is parsed on its own and kept by its text: the next version
    of the file parses only the chunks that changed. A cut that splits a
    statement (a string or bracket spanning lines that start at column 0)
    makes that chunk fail to parse, and then the module is parsed whole.
    """
    if not source.strip():
        return {}, "", []
    parsed: Parsed | str | None = _by_chunks(source)
    if parsed is None:
        parsed = _parse(source)
    if isinstance(parsed, str):
        raise HandlerFailed(f"{what} {parsed}")
    return parsed


def _cut(source: str) -> list[str]:
    """The top-level chunks of ``source`` (each ends with its newline)."""
    lines = source.splitlines(keepends=True)
    chunks: list[str] = []
    start = 0
    held = False  # a decorator (or comment) waits for the statement it belongs to
    for i, line in enumerate(lines):
        first = line[:1]
        if not first or first in " \t\f\r\n#)]}":
            continue
        if _CONTINUES.match(line):
            continue
        if not held and i > start:
            chunks.append("".join(lines[start:i]))
            start = i
        held = first == "@"
    chunks.append("".join(lines[start:]))
    return chunks


def _by_chunks(source: str) -> Parsed | None:
    found: dict[str, Definition] = {}
    rest: list[str] = []
    rest_sources: list[str] = []
    top = 0
    for chunk in _cut(source):
        with _CHUNKS_LOCK:
            parsed = _chunks.get(chunk)
            if parsed is not None:
                _chunks.move_to_end(chunk)
        if parsed is None:
            parsed = _parse_chunk(chunk)
            if parsed is None:
                return None
            with _CHUNKS_LOCK:
                _chunks[chunk] = parsed
                while len(_chunks) > CHUNKS_KEPT:
                    _chunks.popitem(last=False)
        entries, texts, nodes = parsed
        tops = 0
        for name, kind, parent, index, text, shape in entries:
            if not parent:
                index, tops = top + index, tops + 1
            _add(found, (name, kind, parent, index, text, shape))
        top += tops
        rest.extend(texts)
        rest_sources.extend(nodes)
    return found, "\n".join(rest), rest_sources


def _parse_chunk(chunk: str) -> _Chunk | None:
    try:
        tree = ast.parse(chunk)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _walk(tree, chunk.splitlines())


def _walk(tree: ast.Module, lines: list[str]) -> _Chunk:
    entries: list[_Entry] = []
    rest: list[str] = []
    rest_sources: list[str] = []

    def source(node: ast.stmt) -> str:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        return "\n".join(lines[first - 1 : node.end_lineno or node.lineno])

    def segment(text: str) -> str:
        return " ".join(text.split())

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
                text = source(stmt)
                entries.append((name, kind, prefix, index, segment(text), _Shape(text)))
                index += 1
                if isinstance(stmt, ast.ClassDef):
                    visit(stmt.body, name + ".", True)
            elif not prefix:
                text = source(stmt)
                rest.append(segment(text))
                rest_sources.append(text)

    visit(tree.body, "", False)
    return entries, rest, rest_sources


@lru_cache(maxsize=32)
def _parse(source: str) -> Parsed | str:
    """The whole module parsed at once (when its chunks do not parse alone)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"is not valid Python (line {exc.lineno}: {exc.msg})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"cannot be parsed as Python ({exc})"
    entries, texts, nodes = _walk(tree, source.splitlines())
    found: dict[str, Definition] = {}
    for entry in entries:
        _add(found, entry)
    return found, "\n".join(texts), nodes


def _add(found: dict[str, Definition], entry: _Entry) -> None:
    """Add ``entry``'s definition to ``found`` under its name, or ``NAME#2``, ``#3``… if taken."""
    name, kind, parent, index, text, shape = entry
    key = name
    n = 2
    while key in found:
        key = f"{name}#{n}"
        n += 1
    found[key] = Definition(key, kind, parent, index, text, shape)


def _dump(sources: list[str]) -> str:
    """The top-level statements' ASTs without positions (parsed again from their sources)."""
    return "\n".join(ast.dump(ast.parse(s), include_attributes=False) for s in sources)


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
        old, old_rest, old_sources = definitions(old_source, "the old side")
        new, new_rest, new_sources = definitions(new_source, "the new side")
        blocks: list[Block] = []
        if (
            old_rest != new_rest
            and before is not None
            and after is not None
            and _dump(old_sources) != _dump(new_sources)
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
        for d in gone.values() if came else ():  # fingerprints only to pair renames
            by_print.setdefault(d.fingerprint, []).append(d)
        for q in sorted(came):
            d = came[q]
            twins = by_print.get(d.fingerprint) if by_print else None
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
