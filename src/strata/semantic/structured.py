"""JSON, YAML and TOML: what changed, by JSON Pointer (``/services/web/ports/0``).

Both sides are parsed (``json``, PyYAML's safe loader, ``tomllib``) and walked
together: a key or an index on one side only is ``added`` or ``removed`` (its
whole value: the keys inside an added object are not listed one by one), a
scalar that differs, or a value whose type differs, is ``changed``. Lists are
compared index by index. The display keeps the file's own text (comments and
order) in the unified diff printed under the pointers.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from strata.semantic.base import (
    Block,
    HandlerFailed,
    HandlerResult,
    decode_text,
    plural,
    pointer,
)

__all__ = ["StructuredHandler", "changes", "load"]

#: past this many blocks, a file's list ends with one block saying how many more
MAX_BLOCKS = 1000

_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}


def kind_of(path: str) -> str | None:
    """``json``, ``yaml`` or ``toml`` for such a path, else ``None``."""
    dot = path.rfind(".")
    return _SUFFIXES.get(path[dot:].lower()) if dot >= 0 else None


def load(kind: str, text: str, what: str) -> Any:
    """The document ``text`` holds (a YAML stream of several documents: their list)."""
    if not text.strip():
        return None
    try:
        if kind == "json":
            return json.loads(text)
        if kind == "toml":
            return tomllib.loads(text)
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs = list(yaml.load_all(text, Loader=loader))
        return docs[0] if len(docs) == 1 else docs
    except RecursionError:
        raise HandlerFailed(f"{what} nests too deeply to parse as {kind.upper()}") from None
    except Exception as exc:  # each parser has its own error types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HandlerFailed(f"{what} is not valid {kind.upper()} ({first})") from None


def changes(old: Any, new: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    """``(pointer, change)`` pairs from ``old`` to ``new``, in document order."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[tuple[str | int, ...], Any, Any]] = [(path, old, new)]
    while stack:
        at, a, b = stack.pop()
        if isinstance(a, dict) and isinstance(b, dict):
            pending = []
            for key in list(a.keys()) + [k for k in b if k not in a]:
                here = (*at, str(key))
                if key not in b:
                    out.append((pointer(here), "removed"))
                elif key not in a:
                    out.append((pointer(here), "added"))
                elif a[key] != b[key] or type(a[key]) is not type(b[key]):
                    pending.append((here, a[key], b[key]))
            stack.extend(reversed(pending))
        elif isinstance(a, list) and isinstance(b, list):
            pending = []
            for i in range(max(len(a), len(b))):
                here = (*at, i)
                if i >= len(b):
                    out.append((pointer(here), "removed"))
                elif i >= len(a):
                    out.append((pointer(here), "added"))
                elif a[i] != b[i] or type(a[i]) is not type(b[i]):
                    pending.append((here, a[i], b[i]))
            stack.extend(reversed(pending))
        elif a != b or type(a) is not type(b):
            out.append((pointer(at), "changed"))
    return out


class StructuredHandler:
    """The ``schema`` handler for JSON, YAML and TOML files."""

    name = "structured"

    def handles(self, path: str) -> bool:
        """``.json``, ``.yaml``, ``.yml`` and ``.toml`` files."""
        return kind_of(path) is not None

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Keys and items added, removed or changed, by JSON Pointer."""
        kind = kind_of(path)
        assert kind is not None
        old = load(kind, decode_text(before, "the old side"), "the old side")
        new = load(kind, decode_text(after, "the new side"), "the new side")
        if before is None and isinstance(new, dict | list):
            old = type(new)()  # an added file: its top-level keys added
        if after is None and isinstance(old, dict | list):
            new = type(old)()
        found = changes(old, new)
        blocks = [Block(f"{kind}_path", f"{path}::{p or '/'}", c) for p, c in found[:MAX_BLOCKS]]
        if len(found) > MAX_BLOCKS:
            more = len(found) - MAX_BLOCKS
            blocks.append(Block(f"{kind}_path", f"{path}::…", "changed", detail=f"{more:,} more"))
        counts = [
            f"{sum(1 for _, c in found if c == w):,} {w}" for w in ("added", "removed", "changed")
        ]
        summary = (
            f"{plural(len(found), 'path')}: "
            + ", ".join(c for c in counts if not c.startswith("0 "))
            if found
            else "no value changed (formatting or comments only)"
        )
        return HandlerResult("schema", tuple(blocks), summary, handler=self.name)
