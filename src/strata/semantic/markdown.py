"""Markdown: which sections changed, by heading path (``## Install > ### Linux``).

A section is a heading and the lines up to the next heading (ATX headings,
``#`` to ``######``, outside fenced code blocks); text before the first
heading is the section ``(top)``. A section whose heading text changed but
whose body did not is ``renamed``.
"""

from __future__ import annotations

import hashlib
import re

from strata.semantic.base import Block, HandlerResult, decode_text, summarise

__all__ = ["MarkdownHandler", "sections"]

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def sections(text: str) -> dict[str, str]:
    """Each section's heading path and a digest of its body, in document order."""
    found: dict[str, str] = {}
    trail: list[tuple[int, str]] = []
    current = "(top)"
    body: list[str] = []
    fence: str | None = None

    def close() -> None:
        key, n = current, 2
        while key in found:
            key = f"{current} ({n})"
            n += 1
        if key != "(top)" or any(line.strip() for line in body):
            digest = hashlib.blake2b("\n".join(body).encode(), digest_size=12).hexdigest()
            found[key] = digest

    for line in text.splitlines():
        fenced = _FENCE.match(line)
        if fence is not None:
            if fenced and fenced.group(1)[0] == fence[0] and len(fenced.group(1)) >= len(fence):
                fence = None
            body.append(line)
            continue
        if fenced:
            fence = fenced.group(1)
            body.append(line)
            continue
        m = _HEADING.match(line)
        if m is None:
            body.append(line)
            continue
        close()
        level = len(m.group(1))
        while trail and trail[-1][0] >= level:
            trail.pop()
        trail.append((level, f"{m.group(1)} {(m.group(2) or '').strip()}"))
        current = " > ".join(t for _, t in trail)
        body = []
    close()
    return found


class MarkdownHandler:
    """The ``ast`` handler for Markdown: sections by heading path."""

    name = "markdown"

    def handles(self, path: str) -> bool:
        """``.md`` and ``.markdown`` files."""
        return path.lower().endswith((".md", ".markdown"))

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Sections added, removed, changed or renamed."""
        old = sections(decode_text(before, "the old side"))
        new = sections(decode_text(after, "the new side"))
        blocks: list[Block] = []
        gone = [k for k in old if k not in new]
        by_body = {old[k]: k for k in gone}
        for key, digest in new.items():
            if key in old:
                if old[key] != digest:
                    blocks.append(Block("section", f"{path}::{key}", "changed"))
            elif digest in by_body:
                was = by_body.pop(digest)
                gone.remove(was)
                blocks.append(Block("section", f"{path}::{key}", "renamed", f"{path}::{was}"))
            else:
                blocks.append(Block("section", f"{path}::{key}", "added"))
        blocks.extend(Block("section", f"{path}::{k}", "removed") for k in gone)
        result = tuple(blocks)
        return HandlerResult("ast", result, summarise(result, "section"), handler=self.name)
