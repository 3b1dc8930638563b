"""Templates and syntax highlighting: everything a page shows is escaped text.

Jinja2 escapes every value (autoescape); names, messages and file lines also
pass through :func:`strata.diff.display.printable` first, so a terminal escape,
a NUL or a bidi override shows as ``\\x1b``, ``\\x00``, ``\\u202e``. Pygments
only classifies tokens: each line's HTML is built here from escaped pieces.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from html import escape
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.token import STANDARD_TYPES, Token
from pygments.util import ClassNotFound

from strata.diff.display import printable, printable_lines

#: files larger than this are shown without highlighting (one class per line: plain)
HIGHLIGHT_MAX = 2 << 20


def short(text: str | None, n: int = 10) -> str:
    """The first ``n`` characters of an id."""
    return (text or "")[:n]


def size(n: int | None) -> str:
    """A size in bytes as a person reads it."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@functools.cache
def environment() -> Environment:
    """The studio's template environment (autoescape on for every template)."""
    env = Environment(
        loader=PackageLoader("strata.studio", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = short
    env.filters["size"] = size
    env.filters["printable"] = lambda v: printable(str(v))
    env.filters["printable_lines"] = lambda v: printable_lines(str(v))
    return env


def page(name: str, **values: Any) -> str:
    """Render template ``name`` with ``values``."""
    return environment().get_template(name).render(**values)


def _lexer(path: str, text: str) -> Lexer:
    try:
        return get_lexer_for_filename(path.rsplit("/", 1)[-1], stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _css_class(kind: Any) -> str:
    while kind not in STANDARD_TYPES and kind.parent is not None:
        kind = kind.parent
    css: str = STANDARD_TYPES.get(kind, "")
    return css


def highlight_lines(path: str, text: str) -> list[Markup]:
    """``text`` split into lines, each as escaped HTML with Pygments' token classes."""
    if len(text) > HIGHLIGHT_MAX:
        return [Markup(escape(printable(line))) for line in text.split("\n")]
    lines: list[Markup] = []
    current: list[str] = []
    for kind, value in _lexer(path, text).get_tokens(text):
        css = _css_class(kind) if kind is not Token.Text else ""
        pieces = value.split("\n")
        for i, piece in enumerate(pieces):
            if i:
                lines.append(Markup("".join(current)))
                current = []
            if piece:
                shown = escape(printable(piece))
                current.append(f'<span class="{css}">{shown}</span>' if css else shown)
    lines.append(Markup("".join(current)))
    return lines


def plain_lines(text: str) -> Iterator[Markup]:
    """Lines of ``text`` escaped, without highlighting."""
    for line in text.split("\n"):
        yield Markup(escape(printable(line)))
