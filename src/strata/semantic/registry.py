"""Choosing a handler for a path, bounding it, and falling back to line ranges.

:func:`analyze` is the one entry: it finds the handler for ``path`` (handlers
registered under the entry point group ``strata.diff_handlers`` first, so a
package can replace a built-in one; then the built-ins), refuses inputs past
:data:`MAX_TEXT_BYTES` or :data:`MAX_LINES` before parsing anything, runs the
handler on a thread for at most ``timeout`` seconds, and on any failure returns
the unified diff's line ranges with the reason (``fallback_reason``). Binary
content that no handler claims goes to the binary handler.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache

from strata.semantic.base import (
    Block,
    DiffHandler,
    HandlerFailed,
    HandlerResult,
    hunk_ranges,
    plural,
)
from strata.semantic.binary import BinaryHandler
from strata.semantic.markdown import MarkdownHandler
from strata.semantic.python import PythonHandler
from strata.semantic.structured import StructuredHandler
from strata.semantic.tables import DocxHandler, TableHandler
from strata.semantic.treesitter import TreeSitterHandler

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "MAX_LINES",
    "MAX_TEXT_BYTES",
    "analyze",
    "builtin_handlers",
    "handler_for",
    "handlers",
    "line_ranges",
]

ENTRY_POINT_GROUP = "strata.diff_handlers"
#: seconds a handler may take on one file before its result is given up for line ranges
DEFAULT_TIMEOUT = 2.0
#: a text file larger than this is not parsed (it would not finish within the time-out)
MAX_TEXT_BYTES = 4 * 1024 * 1024
#: nor one with more lines than this
MAX_LINES = 50_000
#: binary content past this is not read by a handler (hash and size are the scanner's)
MAX_BINARY_BYTES = 64 * 1024 * 1024
#: binary suffixes parsed as documents by their handlers (zip containers)
_DOCUMENTS = (".xlsx", ".docx")


def builtin_handlers() -> list[DiffHandler]:
    """The handlers Strata ships, most specific first."""
    return [
        PythonHandler(),
        StructuredHandler(),
        MarkdownHandler(),
        TableHandler(),
        DocxHandler(),
        TreeSitterHandler(),
        BinaryHandler(),
    ]


@cache
def _plugins() -> tuple[DiffHandler, ...]:
    from importlib.metadata import entry_points

    found: list[DiffHandler] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            handler = obj() if isinstance(obj, type) else obj
        except Exception:  # a broken plug-in must not break diffs; its files fall back
            continue
        if callable(getattr(handler, "handles", None)) and callable(getattr(handler, "diff", None)):
            found.append(handler)
    return tuple(found)


def handlers() -> list[DiffHandler]:
    """Every handler: the entry points' first, then the built-ins."""
    return [*_plugins(), *builtin_handlers()]


def handler_for(path: str, chain: Sequence[DiffHandler] | None = None) -> DiffHandler | None:
    """The first handler of ``chain`` (default: :func:`handlers`) that claims ``path``."""
    for handler in handlers() if chain is None else chain:
        if handler.handles(path):
            return handler
    return None


def _binary(data: bytes | None) -> bool:
    return data is not None and b"\0" in data[:8000]


def line_ranges(
    path: str, before: bytes | None, after: bytes | None, unified_patch: str
) -> tuple[Block, ...]:
    """The changed line ranges of the unified diff, as blocks (``path:L12-20``)."""
    if not unified_patch and before is not None and after is not None:
        from strata.diff.patch import FileSide, render_patch

        unified_patch = render_patch(
            FileSide(path, "file", 0o644, before), FileSide(path, "file", 0o644, after), context=0
        ).decode("utf-8", "replace")
    if before is None or after is None:
        change = "added" if before is None else "removed"
        return (Block("file", f"{path}::", change),)
    blocks: list[Block] = []
    for old_start, old_count, new_start, new_count in hunk_ranges(unified_patch):
        if new_count:
            span = f"L{new_start}" + (f"-{new_start + new_count - 1}" if new_count > 1 else "")
            change = "changed" if old_count else "added"
        else:
            span = f"L{old_start}" + (f"-{old_start + old_count - 1}" if old_count > 1 else "")
            change = "removed"
        blocks.append(Block("lines", f"{path}::{span}", change))
    return tuple(blocks)


def _fallback(
    path: str, before: bytes | None, after: bytes | None, patch: str, reason: str | None
) -> HandlerResult:
    if _binary(before) or _binary(after):
        try:
            result = BinaryHandler().diff(path, before, after, "")
        except Exception:  # hashing cannot fail on bytes; kept so a fallback never raises
            pass
        else:
            return HandlerResult(
                "binary",
                result.semantic_blocks,
                result.summary,
                reason,
                handler="binary",
                artifact_impacts=result.artifact_impacts,
            )
    blocks = line_ranges(path, before, after, patch) if not (_big(before) or _big(after)) else ()
    summary = plural(len(blocks), "changed range") if blocks else "changed"
    return HandlerResult("unified", blocks, summary, reason, handler="unified")


def _big(data: bytes | None) -> bool:
    return data is not None and len(data) > MAX_TEXT_BYTES


def _too_big(handler: DiffHandler, before: bytes | None, after: bytes | None) -> str | None:
    binary = isinstance(handler, BinaryHandler) or handler.name in ("tables", "docx")
    limit = f"past the {handler.name} handler's limit of"
    for side, data in (("old", before), ("new", after)):
        if data is None:
            continue
        if binary:
            if len(data) > MAX_BINARY_BYTES:
                return f"the {side} side is {len(data):,} bytes, {limit} {MAX_BINARY_BYTES:,}"
            continue
        if len(data) > MAX_TEXT_BYTES:
            return f"the {side} side is {len(data):,} bytes, {limit} {MAX_TEXT_BYTES:,}"
        lines = data.count(b"\n")
        if lines > MAX_LINES:
            return f"the {side} side has {lines:,} lines, {limit} {MAX_LINES:,}"
    return None


def analyze(
    path: str,
    before: bytes | None,
    after: bytes | None,
    unified_patch: str = "",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    chain: Sequence[DiffHandler] | None = None,
) -> HandlerResult:
    """The semantic change of ``path`` from ``before`` to ``after``; never raises.

    Args:
        path: The file's workspace path (its name chooses the handler).
        before: The old content, or ``None`` for an added file.
        after: The new content, or ``None`` for a deleted file.
        unified_patch: The file's unified diff when the caller has it (the
            fallback's line ranges come from it; computed when empty).
        timeout: Seconds the handler may take.
        chain: Handlers to choose from (default: entry points, then built-ins).
    """
    handler = handler_for(path, chain)
    if handler is None:
        if _binary(before) or _binary(after):
            handler = BinaryHandler()
        else:
            return _fallback(path, before, after, unified_patch, None)
    elif (_binary(before) or _binary(after)) and not (
        isinstance(handler, BinaryHandler) or path.lower().endswith(_DOCUMENTS)
    ):
        return _fallback(path, before, after, unified_patch, "binary content")
    too_big = _too_big(handler, before, after)
    if too_big is not None:
        return _fallback(path, before, after, unified_patch, too_big)
    box: list[HandlerResult | BaseException] = []

    def work() -> None:
        try:
            box.append(handler.diff(path, before, after, unified_patch))
        except BaseException as exc:  # handed to the caller's thread below
            box.append(exc)

    worker = threading.Thread(target=work, name=f"strata-semantic-{handler.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        return _fallback(
            path,
            before,
            after,
            unified_patch,
            f"the {handler.name} handler took over {timeout:g} s",
        )
    outcome = box[0]
    if isinstance(outcome, HandlerFailed):
        return _fallback(path, before, after, unified_patch, str(outcome))
    if isinstance(outcome, BaseException):
        return _fallback(
            path,
            before,
            after,
            unified_patch,
            f"the {handler.name} handler failed ({type(outcome).__name__}: {outcome})",
        )
    return outcome
