"""Other code by tree-sitter: JavaScript, TypeScript, Go and Rust definitions.

The grammars come from ``tree-sitter-language-pack`` (the ``semantic``
extra); without it these files fall back to line ranges, with the reason.
Definitions (functions, classes, methods, types, impls) get qualified names
as Python's do (``web/app.ts::Server.listen``, ``main.go::Store.Get``,
``src/lib.rs::Parser.next``); a definition's fingerprint is its text without
its name and without the definitions nested in it, whitespace collapsed, so a
re-indented function is not changed. A file with syntax errors falls back.
"""

from __future__ import annotations

import hashlib
from typing import Any

from strata.semantic.base import Block, HandlerFailed, HandlerResult, summarise

__all__ = ["TreeSitterHandler", "LANGUAGES"]

#: file suffix → the language pack's name for its grammar
LANGUAGES = {
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
}

# node type -> kind, for definitions that have a name
_DEFS = {
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "abstract_class_declaration": "class",
    "method_definition": "method",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "variable_declarator": "function",  # only when its value is a function (see _name)
    "method_declaration": "method",  # Go
    "type_spec": "type",
    "function_item": "function",  # Rust
    "struct_item": "struct",
    "enum_item": "enum",
    "trait_item": "trait",
    "impl_item": "impl",
    "mod_item": "module",
    "union_item": "union",
    "macro_definition": "macro",
    "function_signature_item": "function",
}
# nodes whose children may hold definitions under the same prefix
_THROUGH = {
    "program",
    "source_file",
    "export_statement",
    "lexical_declaration",
    "variable_declaration",
    "type_declaration",
    "class_body",
    "declaration_list",
    "interface_body",
    "object_type",
    "statement_block",
    "ambient_declaration",
    "internal_module",
    "module",
}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}
_CONTAINERS = {"class", "interface", "impl", "trait", "module"}


def _name(node: Any, source: bytes) -> tuple[str, Any] | None:
    """The definition's name and the node holding it (``None``: not a definition)."""
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is None or value.type not in _FUNCTION_VALUES:
            return None
    if node.type == "impl_item":
        held = node.child_by_field_name("type")
        trait = node.child_by_field_name("trait")
        if held is None:
            return None
        text = source[held.start_byte : held.end_byte].decode("utf-8", "replace")
        if trait is not None:
            text += " as " + source[trait.start_byte : trait.end_byte].decode("utf-8", "replace")
        return text, held
    held = node.child_by_field_name("name")
    if held is None:
        return None
    text = source[held.start_byte : held.end_byte].decode("utf-8", "replace")
    if node.type == "method_declaration":  # Go: func (s *Store) Get() → Store.Get
        receiver = node.child_by_field_name("receiver")
        if receiver is not None:
            raw = source[receiver.start_byte : receiver.end_byte].decode("utf-8", "replace")
            words = raw.strip("()").replace("*", " ").split()
            if words:
                text = words[-1].split("[")[0] + "." + text
    return text, held


def definitions(source: bytes, language: str, what: str) -> dict[str, tuple[str, str, str, int]]:
    """Qualified name → ``(kind, parent, fingerprint, index)`` of each definition."""
    from tree_sitter_language_pack import get_parser

    tree = get_parser(language).parse(source)  # type: ignore[arg-type]
    root = tree.root_node
    if root.has_error:
        line = _first_error(root)
        raise HandlerFailed(f"{what} has syntax errors ({language}, near line {line})")
    found: dict[str, tuple[str, str, str, int]] = {}
    counters: dict[str, int] = {}

    def visit(node: Any, prefix: str) -> list[tuple[int, int]]:
        """Walk ``node``'s children; the byte ranges of the definitions found."""
        spans: list[tuple[int, int]] = []
        for child in node.named_children:
            kind = _DEFS.get(child.type)
            named = _name(child, source) if kind else None
            if kind and named:
                name, held = named
                if kind == "function" and prefix and child.type != "variable_declarator":
                    kind = "method"
                qual = prefix + name
                inner = visit(child, qual + ".") if kind in _CONTAINERS else []
                skip = sorted([(held.start_byte, held.end_byte), *inner])
                text = bytearray()
                at = child.start_byte
                for s, e in skip:
                    if s >= at:
                        text += source[at:s]
                        at = e
                text += source[at : child.end_byte]
                digest = hashlib.blake2b(b" ".join(bytes(text).split()), digest_size=12)
                key, n = qual, 2
                while key in found:
                    key = f"{qual}#{n}"
                    n += 1
                index = counters.get(prefix, 0)
                counters[prefix] = index + 1
                found[key] = (kind, prefix, digest.hexdigest(), index)
                spans.append((child.start_byte, child.end_byte))
            elif child.type in _THROUGH or child.type.endswith(("_body", "declaration_list")):
                spans.extend(visit(child, prefix))
        return spans

    visit(root, "")
    return found


def _first_error(root: Any) -> int:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            return int(node.start_point[0]) + 1
        stack.extend(reversed(node.children))
    return int(root.start_point[0]) + 1


class TreeSitterHandler:
    """The ``ast`` handler for JavaScript, TypeScript, Go and Rust."""

    name = "treesitter"

    def handles(self, path: str) -> bool:
        """Files whose suffix names a language of :data:`LANGUAGES`."""
        dot = path.rfind(".")
        return dot >= 0 and path[dot:].lower() in LANGUAGES

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Definitions added, removed, changed, moved or renamed."""
        try:
            import tree_sitter_language_pack  # noqa: F401
        except ImportError:
            raise HandlerFailed(
                "tree-sitter-language-pack is not installed"
                " (pip install 'strata-workspace[semantic]')"
            ) from None
        language = LANGUAGES[path[path.rfind(".") :].lower()]
        old = definitions(before or b"", language, "the old side")
        new = definitions(after or b"", language, "the new side")
        blocks: list[Block] = []
        for q in sorted(old.keys() & new.keys()):
            a, b = old[q], new[q]
            if a[2] != b[2]:
                blocks.append(Block(b[0], f"{path}::{q}", "changed"))
        gone = {q: old[q] for q in old if q not in new}
        came = {q: new[q] for q in new if q not in old}
        by_print: dict[str, list[str]] = {}
        for q, d in gone.items():
            by_print.setdefault(d[2], []).append(q)
        for q in sorted(came):
            twins = by_print.get(came[q][2])
            if twins:
                was = twins.pop(0)
                del gone[was]
                same = was.rsplit(".", 1)[-1] == q.rsplit(".", 1)[-1]
                blocks.append(
                    Block(
                        came[q][0], f"{path}::{q}", "moved" if same else "renamed", f"{path}::{was}"
                    )
                )
            elif not any(q.startswith(p + ".") for p in came if p != q):
                blocks.append(Block(came[q][0], f"{path}::{q}", "added"))
        for q in sorted(gone):
            if not any(q.startswith(p + ".") for p in gone if p != q):
                blocks.append(Block(gone[q][0], f"{path}::{q}", "removed"))
        result = tuple(blocks)
        return HandlerResult("ast", result, summarise(result, "definition"), handler=self.name)
