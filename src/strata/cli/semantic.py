"""How ``strata diff --format`` and ``history --semantic-block`` print semantic blocks."""

from __future__ import annotations

import difflib
import shutil
import sys
from typing import TYPE_CHECKING

import click

from strata.diff.display import printable, printable_patch

if TYPE_CHECKING:
    from strata.changes.blocks import FileSemantics
    from strata.core.results import DiffResult

FORMATS = ("unified", "ast", "schema", "binary", "auto")
_MARK = {"added": "+", "removed": "-", "changed": "~", "moved": ">", "renamed": ">"}
_COLOUR = {
    "added": "green",
    "removed": "red",
    "changed": "yellow",
    "moved": "cyan",
    "renamed": "cyan",
}


def block_line(block_id: str, change: str, old_id: str | None, detail: str | None) -> str:
    """One block as a line: ``~ changed  Greeter.greet``."""
    name = block_id.split("::", 1)[1] if "::" in block_id else block_id
    text = f"  {_MARK.get(change, '?')} {change:<8} {printable(name) or '(whole file)'}"
    if old_id:
        text += f"  (was {printable(old_id.split('::', 1)[-1])})"
    if detail and not detail.startswith(("replaced ", "added ", "deleted ")):
        text += f"  [{printable(detail)}]"
    return click.style(text, fg=_COLOUR.get(change))


def print_semantic(
    result: DiffResult, files: list[FileSemantics], fmt: str, *, side_by_side: bool
) -> None:
    """Each file's header, blocks, and (unless its mode is the one asked for) its patch."""
    patches = {}
    for change, section in zip(
        [c for c in result.changes if "dir" not in _kinds(c)],
        result.iter_patch(readable=True),
        strict=False,
    ):
        patches[change.path] = section
    for f in files:
        r = f.result
        label = f"{f.old_path} -> {f.path}" if f.old_path and f.old_path != f.path else f.path
        click.echo(
            click.style(f"{printable(label)}  [{r.diff_mode}] {printable(r.summary)}", bold=True)
        )
        if r.fallback_reason:
            click.echo(f"  (line diff: {printable(r.fallback_reason)})")
        for b in r.semantic_blocks:
            click.echo(block_line(b.id, b.change, b.old_id, b.detail))
        shown = fmt == "auto" or r.diff_mode != fmt
        if side_by_side and r.diff_mode != "binary":
            _side_by_side(result, f)
        elif shown and r.diff_mode != "binary" and f.path in patches:
            sys.stdout.flush()
            sys.stdout.buffer.write(printable_patch(patches[f.path]))
            sys.stdout.buffer.flush()


def _kinds(change: object) -> tuple[str, str]:
    old = getattr(change, "old", None)
    new = getattr(change, "new", None)
    return (old.kind if old else "", new.kind if new else "")


def _side_by_side(result: DiffResult, f: FileSemantics) -> None:
    change = next((c for c in result.changes if c.path == f.path), None)
    if change is None:
        return
    old = result.store.get(change.old.oid) if change.old and change.old.kind == "file" else b""
    new = result.store.get(change.new.oid) if change.new and change.new.kind == "file" else b""
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    width = max(20, (shutil.get_terminal_size((160, 24)).columns - 3) // 2)
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(2):
        click.echo(click.style("  " + "·" * (2 * width), dim=True))
        for op, a0, a1, b0, b1 in group:
            rows = max(a1 - a0, b1 - b0)
            for i in range(rows):
                left = printable(a[a0 + i]) if a0 + i < a1 else ""
                right = printable(b[b0 + i]) if b0 + i < b1 else ""
                mark = " " if op == "equal" else "|"
                colour = None if op == "equal" else "yellow"
                click.echo(
                    click.style(f"{left[:width]:<{width}} {mark} {right[:width]}", fg=colour)
                )
