"""What kind of document a file is, and whether its content is text.

A **file type** comes from the name's extension (``data.csv`` is ``csv``,
``notes.md`` is ``markdown``), checked against the content where that is
cheap: an Office file must be a zip, a PDF must start with ``%PDF-``, and a
file of unknown extension is ``text`` when its first 64 KiB hold no NUL byte
and decode, else ``binary``. Text is **readable** when it decodes: UTF-8 is
tried first (exact, and by far the commonest), other encodings are detected
with charset-normalizer; binaries, images and archives are **opaque**.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

#: how much of a file is read to tell text from binary and to guess its encoding
SNIFF_BYTES = 64 * 1024

TABULAR = frozenset({"csv", "tsv"})
DOCUMENTS = frozenset({"xlsx", "docx", "pptx", "pdf"})
STRUCTURED = TABULAR | DOCUMENTS

_BY_EXTENSION: dict[str, str] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".docx": "docx",
    ".pptx": "pptx",
    ".pdf": "pdf",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".rst": "text",
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".json": "json",
    ".jsonl": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".ini": "text",
    ".cfg": "text",
    ".html": "html",
    ".htm": "html",
    ".css": "css",
    ".xml": "xml",
    ".sql": "sql",
    ".sh": "shell",
    ".go": "go",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
    ".java": "java",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".gif": "image",
    ".webp": "image",
    ".bmp": "image",
    ".ico": "image",
    ".zip": "archive",
    ".gz": "archive",
    ".tgz": "archive",
    ".bz2": "archive",
    ".xz": "archive",
    ".zst": "archive",
    ".7z": "archive",
    ".tar": "archive",
    ".xls": "binary",
    ".doc": "binary",
    ".ppt": "binary",
    ".exe": "binary",
    ".so": "binary",
    ".whl": "archive",
    ".db": "binary",
    ".sqlite": "binary",
    ".parquet": "binary",
    ".mp3": "binary",
    ".mp4": "binary",
    ".wav": "binary",
    ".mov": "binary",
}
#: types whose content is never text
OPAQUE_TYPES = frozenset({"image", "archive", "binary"})
_ZIP_MAGIC = b"PK\x03\x04"
_PDF_MAGIC = b"%PDF-"


def type_of(path: str) -> str:
    """The file type the name says (``text`` when the extension is unknown)."""
    name = path.rsplit("/", 1)[-1].lower()
    dot = name.rfind(".")
    if dot <= 0:
        return "text"
    return _BY_EXTENSION.get(name[dot:], "text")


@dataclass(frozen=True)
class Sniffed:
    """What the first bytes of a file say: its type, readable or not, its encoding, why not."""

    type: str
    readable: bool
    encoding: str | None = None
    reason: str | None = None


def sniff(path: str, head: bytes, size: int) -> Sniffed:
    """The type and readability of a file named ``path`` whose first bytes are ``head``."""
    kind = type_of(path)
    if kind in OPAQUE_TYPES:
        return Sniffed(kind, False, reason=f"{kind} file")
    if kind in ("xlsx", "docx", "pptx"):
        if not head.startswith(_ZIP_MAGIC):
            return Sniffed(kind, False, reason=f"not a valid {kind} file (not a zip archive)")
        return Sniffed(kind, True)
    if kind == "pdf":
        if _PDF_MAGIC not in head[:1024]:
            return Sniffed(kind, False, reason="not a valid pdf file (no %PDF- header)")
        return Sniffed(kind, True)
    if b"\0" in head:
        return Sniffed("binary" if kind == "text" else kind, False, reason="binary content")
    encoding = detect_encoding(head, complete=len(head) >= size)
    if encoding is None:
        return Sniffed(kind, False, reason="undecodable text (no encoding fits)")
    return Sniffed(kind, True, encoding)


def detect_encoding(data: bytes, *, complete: bool = True) -> str | None:
    """The encoding ``data`` decodes with: ``utf-8`` when it is UTF-8, else charset-normalizer's.

    ``complete`` False means ``data`` is the start of a longer file (a
    multi-byte character cut at its end is not an error).
    """
    if not data:
        return "utf-8"
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(data, final=complete)
    except UnicodeDecodeError:
        pass
    else:
        return "utf-8"
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    return None if best is None else str(best.encoding)


def decode(data: bytes, encoding: str | None) -> str:
    """``data`` as text in ``encoding`` (UTF-8 when None), undecodable bytes replaced."""
    try:
        return data.decode(encoding or "utf-8", "replace")
    except LookupError:
        return data.decode("utf-8", "replace")
