"""Text made safe to show on a terminal: control characters are written out, never obeyed.

File names, messages and file contents come from whoever wrote the files,
an agent included. Printed raw, ``\\r`` rewrites the start of a line, an ANSI
escape (``\\x1b[2K``, ``\\x1b]8;;…``) erases or recolours what the user
reads, a bidi override (U+202E) reverses it. So every such character is
replaced by a visible escape: ``\\x1b``, ``\\r``, ``\\x00``, ``\\u202e``; a
byte that is not UTF-8 becomes ``\\xNN``. Tabs stay, and so does the ``\\r``
of a CRLF line ending (it moves the cursor to where the newline puts it
anyway). Only human output goes through here; JSON and patches written to a
file or pipe keep the exact bytes.
"""

from __future__ import annotations

import re

__all__ = ["printable", "printable_bytes", "printable_lines", "printable_patch"]

# C0 controls but tab, DEL, C1 controls; the bidi embeddings, overrides and isolates;
# the line and paragraph separators; a lone surrogate (an undecodable byte).
_UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\udc80-\udcff]"
)
_NAMED = {"\r": "\\r", "\n": "\\n", "\x1b": "\\x1b", "\x00": "\\x00"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character (newlines too) written as a visible escape."""
    return _UNSAFE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """``text`` through :func:`printable` line by line: its newlines are kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable_bytes(data: bytes) -> str:
    """Bytes (a name or a message as stored) as printable text."""
    return printable(data.decode("utf-8", "surrogateescape"))


def printable_patch(patch: bytes) -> bytes:
    """A patch, or any text, line by line through :func:`printable` (``\n``, ``\r\n`` kept)."""
    lines = patch.split(b"\n")
    out = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        crlf = not last and line.endswith(b"\r")
        body = line[:-1] if crlf else line
        out.append(printable_bytes(body).encode("utf-8") + (b"\r" if crlf else b""))
    return b"\n".join(out)
