"""Three-way merges of one file's content: by text (merge3), by JSON Pointer, by definition.

:func:`merge_file` takes the base, ours and theirs of one path and the policy:

* ``text``: ``merge3`` (the bzr/breezy three-way line merge); overlapping
  changes are conflict hunks.
* ``semantic``: the text merge first (it keeps formatting and comments);
  where it conflicts, JSON, YAML and TOML are merged by path (two sides
  changing different keys merge; the same key changed two ways is a conflict
  named by its JSON Pointer), YAML and TOML written back as ours' own text
  with theirs' changes applied (comments and order kept: ruamel.yaml's
  round trip, tomlkit), and Python by top-level definition (two sides
  changing different functions merge); other files and what fails to parse
  keep the text merge's conflicts.
* Binary content is never merged: both sides changed is a conflict.

Nothing here reads a repository: bytes in, bytes and conflicts out.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

import merge3

from strata.semantic.base import pointer
from strata.semantic.structured import kind_of, load

__all__ = ["Conflict", "FileMerge", "Hunk", "merge_file", "text_hunks"]

_MISSING: Any = object()


@dataclass(frozen=True)
class Hunk:
    """One conflicting region of a text merge: the lines of base, ours and theirs."""

    base: tuple[str, ...]
    ours: tuple[str, ...]
    theirs: tuple[str, ...]


@dataclass(frozen=True)
class Conflict:
    """One conflict of a merge.

    ``kind`` is ``text``, ``key``, ``definition``, ``binary``, ``mode``,
    ``delete`` (changed on one side, deleted on the other) or ``kind`` (file
    against symlink or folder).
    """

    path: str
    kind: str
    where: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The conflict as ``--json`` and the merge event list it."""
        return {"path": self.path, "kind": self.kind, "where": self.where, "detail": self.detail}


@dataclass
class FileMerge:
    """What merging one file gave: the merged bytes when clean, else its conflicts."""

    path: str
    merged: bytes | None
    how: str
    conflicts: list[Conflict] = field(default_factory=list)


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8").splitlines(keepends=True)


def _binary(data: bytes | None) -> bool:
    if data is None:
        return False
    if b"\0" in data[:8000]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def text_hunks(base: bytes, ours: bytes, theirs: bytes) -> list[tuple[str, ...] | Hunk]:
    """The text merge as a list: merged runs of lines, and :class:`Hunk` s where it conflicts."""
    out: list[tuple[str, ...] | Hunk] = []
    m = merge3.Merge3(_lines(base), _lines(ours), _lines(theirs))
    for group in m.merge_groups():
        parts: tuple[Any, ...] = tuple(group)
        if parts[0] == "conflict":
            out.append(Hunk(tuple(parts[1]), tuple(parts[2]), tuple(parts[3])))
        else:
            out.append(tuple(parts[1]))
    return out


def _text_merge(path: str, base: bytes, ours: bytes, theirs: bytes) -> FileMerge:
    parts = text_hunks(base, ours, theirs)
    hunks = [p for p in parts if isinstance(p, Hunk)]
    if not hunks:
        text = "".join(line for p in parts if not isinstance(p, Hunk) for line in p)
        return FileMerge(path, text.encode(), "text")
    conflicts = [
        Conflict(
            path, "text", f"hunk {i + 1}", f"{len(h.ours)} line(s) ours, {len(h.theirs)} theirs"
        )
        for i, h in enumerate(hunks)
    ]
    return FileMerge(path, None, "conflict", conflicts)


def _merge_values(
    base: Any, ours: Any, theirs: Any, at: tuple[str | int, ...], found: list[str]
) -> Any:
    if ours == theirs:
        return ours
    if ours == base:
        return theirs
    if theirs == base:
        return ours
    if isinstance(ours, dict) and isinstance(theirs, dict):
        b = base if isinstance(base, dict) else {}
        merged: dict[str, Any] = {}
        keys = list(ours) + [k for k in theirs if k not in ours]
        for key in keys:
            value = _merge_values(
                b.get(key, _MISSING),
                ours.get(key, _MISSING),
                theirs.get(key, _MISSING),
                (*at, key),
                found,
            )
            if value is not _MISSING:
                merged[key] = value
        return merged
    found.append(pointer(at) or "/")
    return ours


def _structured_merge(
    path: str, kind: str, base: bytes, ours: bytes, theirs: bytes
) -> FileMerge | None:
    try:
        docs = [
            load(kind, data.decode("utf-8"), side)
            for data, side in ((base, "base"), (ours, "ours"), (theirs, "theirs"))
        ]
    except Exception:  # not parsable: the text conflicts stand
        return None
    found: list[str] = []
    merged = _merge_values(docs[0], docs[1], docs[2], (), found)
    if found:
        return FileMerge(
            path,
            None,
            "conflict",
            [Conflict(path, "key", p, "changed on both sides") for p in found],
        )
    if kind == "json":
        indent = _json_indent(ours)
        text = json.dumps(merged, indent=indent, ensure_ascii=False) + (
            "\n" if ours.endswith(b"\n") else ""
        )
        return FileMerge(path, text.encode(), "semantic")
    try:
        out = _round_trip(kind, ours.decode("utf-8"), theirs.decode("utf-8"), docs[1], merged)
    except Exception:  # a document the round-trip writer cannot edit: the text conflicts stand
        return None
    if out is None or load(kind, out, "merged") != merged:
        return None
    return FileMerge(path, out.encode(), "semantic")


def _round_trip(kind: str, ours: str, theirs: str, plain_ours: Any, merged: Any) -> str | None:
    """``ours`` as its own text (comments, order, quoting), edited to hold ``merged``.

    Only what differs from ``ours`` is touched: keys theirs added or changed
    are copied from theirs' document (with the comments they carry there),
    keys theirs removed are removed. TOML by tomlkit, YAML by ruamel.yaml's
    round-trip mode. ``None`` when the top level is not a mapping.
    """
    if kind == "toml":
        import tomlkit

        doc_o: Any = tomlkit.parse(ours)
        doc_t: Any = tomlkit.parse(theirs)
        _patch(doc_o, doc_t, plain_ours, merged)
        return tomlkit.dumps(doc_o)
    from io import StringIO

    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # long lines stay as they were written
    yaml.indent(**_yaml_indent(ours))
    doc_o = yaml.load(ours)
    doc_t = yaml.load(theirs)
    if not isinstance(doc_o, dict) or not isinstance(doc_t, dict):
        return None
    _patch(doc_o, doc_t, plain_ours, merged)
    buffer = StringIO()
    yaml.dump(doc_o, buffer)
    return buffer.getvalue()


def _yaml_indent(text: str) -> dict[str, int]:
    """The indentation ``text`` uses, as ruamel.yaml's ``indent()`` takes it.

    ``mapping``: how far a nested key sits under its parent; ``offset``: how
    far a list's dash sits under its key (``key:\n  - a`` is 2, ``- a`` at
    the key's column is 0); ``sequence``: the dash's offset plus two.
    """
    mapping, offset = 0, -1
    previous: tuple[int, str] | None = None
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if previous is not None and previous[1].endswith(":") and indent > previous[0]:
            if stripped.startswith("- ") and offset < 0:
                offset = indent - previous[0]
            elif not stripped.startswith("- ") and not mapping:
                mapping = indent - previous[0]
        elif previous is not None and previous[1].endswith(":") and stripped.startswith("- "):
            offset = 0 if offset < 0 and indent == previous[0] else offset
        previous = (indent, stripped.split(" #", 1)[0].rstrip())
        if mapping and offset >= 0:
            break
    mapping = mapping or 2
    offset = max(offset, 0)
    return {"mapping": mapping, "sequence": offset + 2, "offset": offset}


def _patch(node: Any, theirs: Any, was: dict[str, Any], want: dict[str, Any]) -> None:
    """Edit mapping ``node`` (whose plain value is ``was``) to hold ``want``."""
    for key in [k for k in was if k not in want]:
        del node[key]
    for key, value in want.items():
        if key in was and was[key] == value:
            continue
        if key in was and isinstance(was[key], dict) and isinstance(value, dict):
            _patch(node[key], theirs[key], was[key], value)
            continue
        if key not in node and hasattr(node, "insert"):  # ruamel: at theirs' place
            keys = list(theirs)
            after = [k for k in keys[: keys.index(key)] if k in node]
            node.insert(list(node).index(after[-1]) + 1 if after else 0, key, theirs[key])
        else:
            node[key] = theirs[key]
        comments = getattr(theirs, "ca", None)  # ruamel keeps a key's comment on its mapping
        if comments is not None and key in comments.items:
            node.ca.items[key] = comments.items[key]


def _json_indent(data: bytes) -> int | None:
    for line in data.decode("utf-8", "replace").splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped:
            return len(line) - len(stripped) or None
    return None


def _python_items(source: str) -> list[tuple[str, str]]:
    """Top-level items of a module: ``(key, text)``; a definition's key is its name."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    items: list[tuple[str, str]] = []
    starts = []
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        starts.append((first, node))
    for i, (first, node) in enumerate(starts):
        end = starts[i + 1][0] - 1 if i + 1 < len(starts) else len(lines)
        text = "".join(lines[first - 1 : end])
        if i == 0 and first > 1:
            text = "".join(lines[: first - 1]) + text
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            key = "def " + node.name
        else:
            key = "stmt " + "".join(lines[first - 1 : node.end_lineno or first]).strip()
        while key in dict(items):
            key += "'"
        items.append((key, text))
    return items


def _python_merge(path: str, base: bytes, ours: bytes, theirs: bytes) -> FileMerge | None:
    try:
        b, o, t = (dict(_python_items(x.decode("utf-8"))) for x in (base, ours, theirs))
        order_o = [k for k, _ in _python_items(ours.decode("utf-8"))]
        order_t = [k for k, _ in _python_items(theirs.decode("utf-8"))]
    except (SyntaxError, ValueError, RecursionError):
        return None
    conflicts: list[Conflict] = []
    merged: dict[str, str] = {}
    for key in order_o + [k for k in order_t if k not in o]:
        bv, ov, tv = b.get(key, _MISSING), o.get(key, _MISSING), t.get(key, _MISSING)
        if ov == tv or tv == bv:
            value = ov
        elif ov == bv:
            value = tv
        else:
            name = key.split(" ", 1)[1]
            conflicts.append(
                Conflict(path, "definition", f"{path}::{name}", "changed on both sides")
            )
            value = ov
        if value is not _MISSING:
            merged[key] = value
    if conflicts:
        return FileMerge(path, None, "conflict", conflicts)
    # ours' order, with what theirs added placed after the item it follows there
    order = [k for k in order_o if k in merged]
    for i, key in enumerate(order_t):
        if key in merged and key not in order:
            before = next((k for k in reversed(order_t[:i]) if k in order), None)
            order.insert(order.index(before) + 1 if before else 0, key)
    text = "".join(merged[k] if merged[k].endswith("\n") else merged[k] + "\n" for k in order)
    try:
        ast.parse(text)
    except SyntaxError:
        return None
    return FileMerge(path, text.encode(), "semantic")


def merge_file(
    path: str, base: bytes | None, ours: bytes | None, theirs: bytes | None, *, policy: str = "text"
) -> FileMerge:
    """Merge one file changed on both sides (``None``: absent on that side)."""
    if ours == theirs:
        return FileMerge(path, ours, "same")
    if ours is None or theirs is None:
        gone = "ours" if ours is None else "theirs"
        return FileMerge(
            path,
            None,
            "conflict",
            [Conflict(path, "delete", "", f"deleted on {gone}, changed on the other")],
        )
    if any(_binary(x) for x in (base, ours, theirs)):
        return FileMerge(
            path,
            None,
            "conflict",
            [Conflict(path, "binary", "", "binary content changed on both sides")],
        )
    result = _text_merge(path, base or b"", ours, theirs)
    if result.merged is not None or policy != "semantic":
        return result
    kind = kind_of(path)
    better = None
    if kind is not None:
        better = _structured_merge(path, kind, base or b"", ours, theirs)
    elif path.endswith(".py"):
        better = _python_merge(path, base or b"", ours, theirs)
    return better or result
