"""Per-file summaries of office documents (docx, xlsx, pptx, pdf), made when a Draft records.

A changed office file is a zip or a PDF: its patch is "binary, N bytes
changed". When a Draft revision is recorded, each changed office file is read
by the structural readers Strata already has (the semantic diff handlers for
docx and xlsx, the document readers for pptx and pdf) and compared with the
Draft's base; the lines (``Sheet1: B2 changed 3 -> 4``, ``heading 'Intro':
paragraph 2 changed``, ``slide 3 'Plan' changed``, ``page 2 changed``) are
stored in the revision's data under ``file_summaries``, each with the two
blob ids it describes. ``strata review``, ``strata diff`` and the studio show
the stored lines; a pair no revision stored is summarised on the spot, by the
same readers. No model is ever called.

Bounded: at most :data:`MAX_FILES` files a revision, :data:`MAX_LINES` lines a
file, :data:`TIMEOUT` seconds a file and :data:`BUDGET` seconds a revision (the
semantic registry's own time-out and size limits apply to docx and xlsx).
"""

from __future__ import annotations

import difflib
import io
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from strata.semantic.base import Block

if TYPE_CHECKING:
    from strata.core.results import DiffResult
    from strata.ledger.events import Event
    from strata.store.objects import ObjectStore

__all__ = [
    "MAX_FILES",
    "MAX_LINES",
    "OFFICE_SUFFIXES",
    "file_summaries",
    "is_office",
    "summarise",
    "summaries_for",
]

OFFICE_SUFFIXES = (".docx", ".xlsx", ".pptx", ".pdf")
#: office files summarised in one revision (the rest are shown as binary)
MAX_FILES = 20
#: lines kept for one file; past it a last line says how many more
MAX_LINES = 12
#: seconds one file's readers may take
TIMEOUT = 5.0
#: seconds all the files of one revision may take together (the rest say so)
BUDGET = 15.0
#: pages of a PDF compared
MAX_PAGES = 50
#: files larger than this are not read
MAX_BYTES = 32 * 1024 * 1024


def is_office(path: str) -> bool:
    """Whether ``path`` names a docx, xlsx, pptx or pdf file."""
    return path.lower().endswith(OFFICE_SUFFIXES)


def _clip(text: str, width: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _block_line(block: Block, path: str) -> str:
    where = block.id.removeprefix(path + "::")
    if block.kind == "cell":
        sheet, _, cell = where.rpartition("!")
        if where == "…":
            return f"{block.detail or 'more'} changes"
        line = f"{sheet}: {cell} {block.change}" if sheet else f"{cell} {block.change}"
        return f"{line} {block.detail}" if block.detail else line
    if block.kind == "row":
        sheet, _, rows = where.rpartition("!")
        row = rows.partition(":")[0]
        return f"{sheet}: row {row} {block.change}" if sheet else f"row {row} {block.change}"
    if block.kind == "sheet":
        return f"sheet {where} {block.change}"
    if block.kind == "paragraph":
        heading, _, number = where.rpartition(" ¶")
        line = f"paragraph {number} {block.change}"
        return line if heading in ("", "(top)") else f"heading '{_clip(heading)}': {line}"
    return f"{where} {block.change}"


def _semantic(path: str, before: bytes | None, after: bytes | None) -> list[str]:
    from strata.semantic.registry import analyze

    result = analyze(path, before, after, timeout=TIMEOUT)
    if result.fallback_reason or result.handler == "binary":
        return [f"not summarised: {result.fallback_reason or 'unreadable'}"]
    return [_block_line(b, path) for b in result.semantic_blocks]


def _slides(data: bytes | None) -> list[tuple[str, str]]:
    if data is None:
        return []
    from strata.documents.readers import pptx_text

    slides: list[tuple[str, str]] = []
    for line in pptx_text(data).splitlines():
        if line.startswith("## Slide "):
            title = line.partition(": ")[2]
            slides.append((title, ""))
        elif slides:
            title, body = slides[-1]
            slides[-1] = (title, body + "\n" + line)
    return slides


def _pages(data: bytes | None) -> tuple[list[str], int]:
    if data is None:
        return [], 0
    from pypdf import PdfReader

    from strata.documents.readers import pdf_text

    total = len(PdfReader(io.BytesIO(data), strict=False).pages)
    if total == 0:
        return [], 0
    text, _ = pdf_text(data, f"1-{MAX_PAGES}")
    pages = text.split("--- page ")[1:]
    return [p.partition(" ---\n")[2] for p in pages], total


def _aligned(
    noun: str, old: Sequence[Any], new: Sequence[Any], name: Any = lambda i, item: ""
) -> list[str]:
    """Units added, removed or changed, aligned as the table handler aligns rows."""
    lines: list[str] = []

    def label(i: int, item: Any) -> str:
        title = name(i, item)
        return f"{noun} {i + 1}" + (f" '{_clip(title)}'" if title else "")

    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            continue
        paired = min(a1 - a0, b1 - b0) if op == "replace" else 0
        lines.extend(f"{label(b0 + i, new[b0 + i])} changed" for i in range(paired))
        lines.extend(f"{label(i, old[i])} removed" for i in range(a0 + paired, a1))
        lines.extend(f"{label(i, new[i])} added" for i in range(b0 + paired, b1))
    return lines


def _summary(path: str, before: bytes | None, after: bytes | None) -> list[str]:
    suffix = path.lower().rpartition(".")[2]
    if suffix in ("docx", "xlsx"):
        if before is None or after is None:
            return _shape(suffix, after if before is None else before, before is None)
        return _semantic(path, before, after)
    if suffix == "pptx":
        old, new = _slides(before), _slides(after)
        if before is None or after is None:
            return [f"{'added' if before is None else 'removed'}: {len(new or old)} slide(s)"]
        return _aligned("slide", old, new, lambda i, s: s[0])
    old_pages, old_total = _pages(before)
    new_pages, new_total = _pages(after)
    if before is None or after is None:
        return [f"{'added' if before is None else 'removed'}: {new_total or old_total} page(s)"]
    lines = _aligned("page", old_pages, new_pages)
    if old_total != new_total:
        lines.insert(0, f"{old_total} -> {new_total} pages")
    if max(old_total, new_total) > MAX_PAGES:
        lines.append(f"(the first {MAX_PAGES} pages compared)")
    return lines


def _shape(suffix: str, data: bytes | None, added: bool) -> list[str]:
    """What an added or removed document holds: its headings, or its sheets' sizes."""
    verb = "added" if added else "removed"
    if suffix == "xlsx":
        from strata.semantic.tables import TableHandler

        result = TableHandler().diff("f.xlsx", None, data, "")
        counts: dict[str, int] = {}
        for block in result.semantic_blocks:
            sheet = block.id.removeprefix("f.xlsx::").rpartition("!")[0]
            counts[sheet] = counts.get(sheet, 0) + 1
        sheets = ", ".join(f"{s} ({n} rows)" for s, n in counts.items())
        return [f"{verb}: {sheets or 'empty workbook'}"]
    from strata.semantic.tables import DocxHandler

    blocks = DocxHandler().diff("f.docx", None, data, "").semantic_blocks
    headings: list[str] = []
    for block in blocks:
        heading = block.id.removeprefix("f.docx::").rpartition(" ¶")[0]
        if heading != "(top)" and heading not in headings:
            headings.append(heading)
    lines = [f"{verb}: {len(blocks)} paragraph(s)"]
    lines.extend(f"heading '{_clip(h)}'" for h in headings)
    return lines


def summarise(path: str, before: bytes | None, after: bytes | None) -> list[str]:
    """The summary lines of one office file's change; never raises, bounded in time."""
    for side in (before, after):
        if side is not None and len(side) > MAX_BYTES:
            return [f"not summarised: larger than {MAX_BYTES:,} bytes"]
    box: list[list[str] | BaseException] = []

    def work() -> None:
        try:
            box.append(_summary(path, before, after))
        except BaseException as exc:  # handed to the caller's thread below
            box.append(exc)

    worker = threading.Thread(target=work, name="strata-office-summary", daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if not box:
        return [f"not summarised: reading took over {TIMEOUT:g} s"]
    outcome = box[0]
    if isinstance(outcome, BaseException):
        return [f"not summarised: {type(outcome).__name__}: {_clip(str(outcome), 80)}"]
    lines = outcome or ["no structural change (formatting or metadata only)"]
    if len(lines) > MAX_LINES:
        lines = [*lines[: MAX_LINES - 1], f"… {len(lines) - MAX_LINES + 1} more"]
    return lines


def _side(store: ObjectStore, oid: str | None) -> bytes | None:
    from strata.ids import ObjectId

    return None if oid is None else store.get(ObjectId(oid))


def file_summaries(diff: DiffResult) -> list[dict[str, Any]]:
    """Summaries of ``diff``'s office files, as a revision's ``file_summaries`` stores them."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + BUDGET
    for f in diff.files:
        if len(out) >= MAX_FILES:
            break
        if not is_office(f.path) or (f.hash_before is None and f.hash_after is None):
            continue
        if time.monotonic() > deadline:
            lines = [f"not summarised: the revision's {BUDGET:g} s for summaries ran out"]
        else:
            before, after = _side(diff.store, f.hash_before), _side(diff.store, f.hash_after)
            lines = summarise(f.path, before, after)
        out.append(
            {
                "path": f.path,
                "hash_before": f.hash_before,
                "hash_after": f.hash_after,
                "lines": lines,
            }
        )
    return out


def summaries_for(diff: DiffResult, events: Iterable[Event] = ()) -> dict[str, list[str]]:
    """Summary lines of ``diff``'s office files by path: stored by ``events``, else made now."""
    stored: dict[tuple[str, str | None, str | None], list[str]] = {}
    for event in events:
        for entry in event.data.get("file_summaries") or ():
            if isinstance(entry, dict) and isinstance(entry.get("lines"), list):
                key = (str(entry.get("path")), entry.get("hash_before"), entry.get("hash_after"))
                stored[key] = [str(x) for x in entry["lines"]]
    out: dict[str, list[str]] = {}
    for f in diff.files:
        if not is_office(f.path):
            continue
        found = stored.get((f.path, f.hash_before, f.hash_after))
        if found is None:
            if len(out) >= MAX_FILES:
                continue
            found = summarise(
                f.path, _side(diff.store, f.hash_before), _side(diff.store, f.hash_after)
            )
        out[f.path] = found
    return out


def summaries_between(
    resolve: Callable[[str], Any], result: DiffResult, a: str, b: str | None
) -> dict[str, list[str]]:
    """Office files' summary lines of a diff from ``a`` to ``b``.

    Those a Draft revision at B or A stored, else made now (``resolve``: a
    ref -> its point, with its ``event``).
    """
    from strata.errors import StrataError

    if not any(is_office(f.path) for f in result.files):
        return {}
    events: list[Event] = []
    for ref in (b, a):
        if ref is not None:
            try:
                event = resolve(ref).event
            except StrataError:  # a run id: its span has no revision to look in
                continue
            if event is not None:
                events.append(event)
    return summaries_for(result, events)
