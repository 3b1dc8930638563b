"""Reading a file's text for the knowledge base, line by line, with what cannot be read said.

:func:`extract` turns a file's bytes into a :class:`Document`: its lines,
numbered as a citation shows them, and the lines that are headings. What a
line is depends on the kind of file:

- text, markdown, reStructuredText and code: the file's own lines (line N of
  the document is line N of the file);
- HTML: the text of source line N, tags, scripts and styles removed (so a
  citation's lines are the lines of the HTML file);
- PDF: the lines of each page's extracted text, pages one after the other
  (:attr:`Document.pages` gives each line's page);
- DOCX: one paragraph per line (a citation's lines are paragraph numbers).

A file that cannot be read this way raises :class:`Unreadable` with a
one-line reason; the index reports it and goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import ClassVar

from strata.documents.readers import docx_paragraphs, open_docx, open_pdf
from strata.errors import DocumentsNotInstalled, DocumentTooLarge

#: extensions read as plain text (code and configuration included)
TEXT_EXTENSIONS = frozenset(
    """
    txt text log csv tsv ini cfg conf toml yaml yml json jsonl xml env properties py pyi pyx
    js jsx mjs cjs ts tsx go rs c h cc cpp cxx hpp hh java kt kts scala rb php pl pm lua r
    jl swift m mm cs fs vb sql sh bash zsh fish ps1 bat cmd el clj cljs ex exs erl hrl hs ml
    mli nim zig dart groovy gradle tf hcl proto graphql gql css scss sass less vue svelte
    tex bib dockerfile makefile cmake mk
    """.split()  # noqa: SIM905
)
MARKDOWN_EXTENSIONS = frozenset({"md", "markdown", "mdx", "mkd"})
RST_EXTENSIONS = frozenset({"rst", "rest"})
HTML_EXTENSIONS = frozenset({"html", "htm", "xhtml"})
#: files without an extension that are text
TEXT_NAMES = frozenset(
    {"readme", "license", "licence", "copying", "authors", "changelog", "makefile",
     "dockerfile", "gemfile", "rakefile", "procfile", "notice", "todo", "contributing"}
)  # fmt: skip


class Unreadable(Exception):
    """A file the knowledge base cannot read (``reason`` says why, in a few words)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Document:
    """A file's text as numbered lines (see the module doc for what a line is per kind)."""

    kind: str
    lines: list[str]
    #: line index (0-based) -> heading level (1 is the top); code has none
    headings: dict[int, int] = field(default_factory=dict)
    #: the page of each line (PDF only)
    pages: list[int] | None = None


def kind_of(path: str) -> str | None:
    """The kind of file ``path`` names (None: not indexed): text, markdown, rst, code...

    The kinds are ``markdown``, ``rst``, ``html``, ``pdf``, ``docx``, ``code`` and
    ``text``.
    """
    name = PurePosixPath(path).name.lower()
    suffix = name.rpartition(".")[2] if "." in name.lstrip(".") else ""
    if suffix in MARKDOWN_EXTENSIONS:
        return "markdown"
    if suffix in RST_EXTENSIONS:
        return "rst"
    if suffix in HTML_EXTENSIONS:
        return "html"
    if suffix == "pdf":
        return "pdf"
    if suffix == "docx":
        return "docx"
    if suffix in ("txt", "text", "log"):
        return "text"
    if suffix in TEXT_EXTENSIONS:
        return "code"
    if not suffix and name in TEXT_NAMES:
        return "text"
    return None


def extract(kind: str, data: bytes) -> Document:
    """The :class:`Document` of ``data``, a file of ``kind``; :class:`Unreadable` otherwise."""
    if kind == "pdf":
        return _pdf(data)
    if kind == "docx":
        return _docx(data)
    text = decode(data)
    lines = split_lines(text)
    if kind == "markdown":
        return Document(kind, lines, markdown_headings(lines))
    if kind == "rst":
        return Document(kind, lines, rst_headings(lines))
    if kind == "html":
        return _html(text, len(lines))
    if kind == "code":
        return Document(kind, lines, code_headings(lines))
    return Document(kind, lines)


def decode(data: bytes) -> str:
    """``data`` as UTF-8 text; :class:`Unreadable` for binary data (a NUL byte, bad UTF-8)."""
    if b"\0" in data[:65536] or b"\0" in data[-4096:]:
        return _binary("it holds NUL bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _binary(f"it is not UTF-8 text (byte {exc.start})")


def _binary(reason: str) -> str:
    raise Unreadable(f"binary, not text: {reason}")


def split_lines(text: str) -> list[str]:
    r"""The lines of ``text`` as an editor numbers them (``\n``, ``\r\n`` or ``\r`` end one)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+|$)")
_FENCE = re.compile(r" {0,3}(```|~~~)")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")


def markdown_headings(lines: list[str]) -> dict[int, int]:
    """The heading lines of markdown (``#`` headings and underlined ones), outside code fences."""
    found: dict[int, int] = {}
    fence: str | None = None
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if opened:
            if fence is None:
                fence = opened.group(1)
            elif opened.group(1) == fence:
                fence = None
            continue
        if fence is not None:
            continue
        atx = _ATX.match(line)
        if atx:
            found[i] = len(atx.group(1))
            continue
        under = _SETEXT.match(line)
        if under and i > 0 and lines[i - 1].strip() and (i - 1) not in found:
            if under.group(1)[0] == "-" and len(under.group(1)) < 2:
                continue
            found[i - 1] = 1 if under.group(1)[0] == "=" else 2
    return found


_DEFINITION = re.compile(
    r"(?:export\s+)?(?:pub(?:\(\w+\))?\s+)?(?:async\s+)?"
    r"(?:def|class|function|func|fn|struct|enum|trait|impl|interface|module)\s+\w"
)


def code_headings(lines: list[str]) -> dict[int, int]:
    """The top-level definitions of code (``def``, ``class``, ``func``, ``fn``... at column 0)."""
    return {i: 1 for i, line in enumerate(lines) if _DEFINITION.match(line)}


_RST_UNDERLINE = re.compile(r"([=\-`:'\"~^_*+#<>])\1{2,}\s*$")


def rst_headings(lines: list[str]) -> dict[int, int]:
    """The section titles of reStructuredText (a title over an underline as long as it)."""
    found: dict[int, int] = {}
    levels: list[str] = []
    for i in range(1, len(lines)):
        under = _RST_UNDERLINE.match(lines[i])
        title = lines[i - 1].rstrip()
        if not under or not title.strip() or len(lines[i].rstrip()) < len(title):
            continue
        if _RST_UNDERLINE.match(title):
            continue  # an overline
        char = under.group(1)
        if char not in levels:
            levels.append(char)
        found[i - 1] = levels.index(char) + 1
    return found


class _HtmlText(HTMLParser):
    """Collects the text of an HTML page by source line, skipping scripts and styles."""

    SKIP = frozenset({"script", "style", "template", "noscript", "head"})
    HEADINGS: ClassVar[dict[str, int]] = {
        "h1": 1,
        "h2": 2,
        "h3": 3,
        "h4": 4,
        "h5": 5,
        "h6": 6,
        "title": 1,
    }

    def __init__(self, n_lines: int) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[list[str]] = [[] for _ in range(max(n_lines, 1))]
        self.headings: dict[int, int] = {}
        self.skipping = 0
        self.heading: int | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP and tag != "head":
            self.skipping += 1
        if tag in self.HEADINGS:
            self.heading = self.HEADINGS[tag]

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and tag != "head" and self.skipping:
            self.skipping -= 1
        if tag in self.HEADINGS:
            self.heading = None

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        line = self.getpos()[0] - 1
        for offset, part in enumerate(split_lines(data) or [""]):
            i = min(line + offset, len(self.lines) - 1)
            if part.strip():
                self.lines[i].append(part.strip())
                if self.heading is not None:
                    self.headings.setdefault(i, self.heading)


def _html(text: str, n_lines: int) -> Document:
    parser = _HtmlText(n_lines)
    try:
        parser.feed(text)
        parser.close()
    except (AssertionError, ValueError) as exc:  # html.parser's own failures
        raise Unreadable(f"not parseable HTML: {exc}") from None
    lines = [" ".join(parts) for parts in parser.lines]
    return Document("html", lines, parser.headings)


def _pdf(data: bytes) -> Document:
    import logging

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a damaged file: our warning says it
    lines: list[str] = []
    pages: list[int] = []
    headings: dict[int, int] = {}
    try:
        reader = open_pdf(data)
        if reader.is_encrypted:
            raise Unreadable("the PDF is encrypted")
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            page_lines = split_lines(text)
            if page_lines:
                headings[len(lines)] = 1  # each page starts a section
            lines.extend(page_lines)
            pages.extend([number] * len(page_lines))
    except (Unreadable, DocumentsNotInstalled):
        raise
    except Exception as exc:  # pypdf raises many kinds on a damaged file
        raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {exc})"[:200]) from None
    if not any(line.strip() for line in lines):
        raise Unreadable("the PDF has no extractable text")
    return Document("pdf", lines, headings, pages)


def _docx(data: bytes) -> Document:
    try:
        lines: list[str] = []
        headings: dict[int, int] = {}
        for level, text in docx_paragraphs(open_docx(data)):
            if level is not None:
                headings[len(lines)] = level
            lines.append(text.replace("\n", " "))
    except DocumentsNotInstalled:
        raise  # (the command says which extra to install)
    except DocumentTooLarge as exc:
        raise Unreadable(exc.message) from None
    except Exception as exc:  # a damaged or foreign zip
        raise Unreadable(f"not a readable DOCX ({type(exc).__name__}: {exc})"[:200]) from None
    return Document("docx", lines, headings)
