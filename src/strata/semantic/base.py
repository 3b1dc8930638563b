"""The handler interface: its input, its output, and helpers every handler shares.

A handler is pure and deterministic: the same ``(path, before, after,
unified_patch)`` always gives the same result, and it reads nothing else. It
raises :class:`HandlerFailed` (or any exception) when it cannot understand a
side; the registry then falls back to the unified diff with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "CHANGES",
    "DIFF_MODES",
    "Block",
    "DiffHandler",
    "HandlerFailed",
    "HandlerResult",
    "decode_text",
    "hunk_ranges",
    "plural",
    "pointer",
    "summarise",
]

DiffMode = Literal["unified", "ast", "schema", "binary"]
DIFF_MODES: tuple[DiffMode, ...] = ("unified", "ast", "schema", "binary")
#: what a block can have undergone, in the order summaries list them
CHANGES = ("added", "removed", "changed", "moved", "renamed")


class HandlerFailed(Exception):
    """A handler cannot understand a side (malformed input, unsupported content)."""


@dataclass(frozen=True)
class Block:
    """One semantic unit that changed: a function, a key, a heading's section, a cell.

    ``id`` is qualified by the path (``src/app.py::Greeter.greet``,
    ``config.json::/services/web/ports/0``) so that ids from different files
    never collide; ``old_id`` is the block's id before a rename or a move.
    """

    kind: str
    id: str
    change: str
    old_id: str | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The block as ``--json`` and the cache write it."""
        out: dict[str, Any] = {"kind": self.kind, "id": self.id, "change": self.change}
        if self.old_id is not None:
            out["old_id"] = self.old_id
        if self.detail is not None:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Block:
        """The block ``to_json`` wrote."""
        return cls(
            kind=str(data["kind"]),
            id=str(data["id"]),
            change=str(data["change"]),
            old_id=data.get("old_id"),
            detail=data.get("detail"),
        )


@dataclass(frozen=True)
class HandlerResult:
    """What a handler says about one file's change (seed 004 §3.A).

    ``artifact_impacts`` (binary files, §5.4) holds one readable line per
    file: sizes, hashes, ``bytes_changed`` and, for images, how alike they look.
    """

    diff_mode: DiffMode
    semantic_blocks: tuple[Block, ...]
    summary: str
    fallback_reason: str | None = None
    handler: str = "unified"
    artifact_impacts: tuple[dict[str, Any], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The result as ``--json`` and the cache write it."""
        out: dict[str, Any] = {
            "diff_mode": self.diff_mode,
            "handler": self.handler,
            "semantic_blocks": [b.to_json() for b in self.semantic_blocks],
            "summary": self.summary,
            "fallback_reason": self.fallback_reason,
        }
        if self.artifact_impacts:
            out["artifact_impacts"] = [dict(i) for i in self.artifact_impacts]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HandlerResult:
        """The result ``to_json`` wrote."""
        mode = str(data["diff_mode"])
        if mode not in DIFF_MODES:
            raise ValueError(f"unknown diff mode {mode!r}")
        return cls(
            diff_mode=mode,
            semantic_blocks=tuple(Block.from_json(b) for b in data["semantic_blocks"]),
            summary=str(data["summary"]),
            fallback_reason=data.get("fallback_reason"),
            handler=str(data.get("handler", "unified")),
            artifact_impacts=tuple(data.get("artifact_impacts", ())),
        )


class DiffHandler(Protocol):
    """A semantic diff handler: pure, deterministic, registered by entry point.

    Third parties register one under the entry point group
    ``strata.diff_handlers`` (an object, or a class called with no argument).
    """

    #: a short name shown in results and benchmarks (``python``, ``json``)
    name: str

    def handles(self, path: str) -> bool:
        """Whether this handler understands ``path`` (by its name alone)."""
        ...

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """The semantic change from ``before`` to ``after`` (``None``: absent)."""
        ...


def decode_text(data: bytes | None, what: str) -> str:
    """``data`` as UTF-8 text (``""`` for an absent side); not text is a failure."""
    if data is None:
        return ""
    if b"\0" in data[:8000]:
        raise HandlerFailed(f"{what} holds NUL bytes (binary)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise HandlerFailed(f"{what} is not UTF-8 text (byte {exc.start})") from None


def pointer(parts: list[str | int] | tuple[str | int, ...]) -> str:
    """The RFC 6901 JSON Pointer of ``parts`` (``""`` is the whole document)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def hunk_ranges(unified_patch: str) -> list[tuple[int, int, int, int]]:
    """Each hunk of a unified patch as ``(old_start, old_count, new_start, new_count)``."""
    return [
        (
            int(m.group(1)),
            int(m.group(2) or 1),
            int(m.group(3)),
            int(m.group(4) or 1),
        )
        for m in _HUNK.finditer(unified_patch)
    ]


def plural(count: int, word: str) -> str:
    """``1 key``, ``3 keys``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def summarise(blocks: tuple[Block, ...] | list[Block], noun: str) -> str:
    """A one-line summary: ``2 functions changed, 1 added``."""
    if not blocks:
        return f"no {noun} changed"
    counts = {c: sum(1 for b in blocks if b.change == c) for c in CHANGES}
    parts = [f"{n:,} {c}" for c, n in counts.items() if n]
    return f"{plural(len(blocks), noun)}: " + ", ".join(parts)
