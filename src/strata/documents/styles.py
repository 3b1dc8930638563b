"""The styles of DOCX, XLSX and PPTX documents, as text a model reads (the ``*_get_styles`` tools).

Seed 000's research tools ``docx_get_styles``, ``xlsx_get_styles`` and
``pptx_get_styles`` tell the model how a document is styled, so what it
writes matches (the format style skills of :mod:`strata.workshop.skills`
send it there). Each reader opens the document with :mod:`strata.documents.readers`
(bounded: an Office file whose XML unpacks past ``MAX_UNPACKED`` is refused
before it is parsed) and returns plain lines:

- :func:`docx_styles`: the theme's fonts, the document's default font, the
  page (size, orientation, margins), the paragraph, character and table
  styles the body uses (with how many times, their font, size, weight and
  base style), and the other styles it defines;
- :func:`xlsx_styles`: the theme's fonts, the named cell styles, then per
  sheet the distinct cell formats (font, fill, number format, alignment)
  of its first :data:`MAX_CELLS` cells, with a count and the first cell of each;
- :func:`pptx_styles`: the theme's fonts and colours, the slide size, the
  layouts of each master, and per slide its layout and the fonts of its text.

Nothing here writes; every list is sorted or in document order, so the same
bytes give the same text.
"""

from __future__ import annotations

import io
import zipfile
from collections import Counter
from typing import Any
from xml.etree import ElementTree

from strata.documents.readers import open_docx, open_pptx, open_workbook

#: cells of one sheet whose format is read (a sheet's formats repeat; the rest is not read)
MAX_CELLS = 20_000
#: styles listed per kind before the list is cut (the cut is said)
MAX_LISTED = 40
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_EMU_PER_CM = 360_000
_THEMES = {"docx": "word/theme/theme1.xml", "xlsx": "xl/theme/theme1.xml"}


def theme_lines(data: bytes, part: str) -> list[str]:
    """The theme's heading and body fonts and its colour scheme (none when it has no theme)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            raw = archive.read(part)
    except (KeyError, zipfile.BadZipFile, ValueError):
        return []
    try:
        root = ElementTree.fromstring(raw)
    except ElementTree.ParseError:
        return ["theme: unreadable"]
    lines: list[str] = []
    for tag, what in (("majorFont", "headings"), ("minorFont", "body")):
        latin = root.find(f".//{_A}{tag}/{_A}latin")
        if latin is not None and latin.get("typeface"):
            lines.append(f"theme font ({what}): {latin.get('typeface')}")
    scheme = root.find(f".//{_A}clrScheme")
    if scheme is not None:
        colours = []
        for slot in scheme:
            value = next(iter(slot), None)
            if value is None:
                continue
            rgb = value.get("val") if value.tag == f"{_A}srgbClr" else value.get("lastClr")
            if rgb:
                colours.append(f"{slot.tag.removeprefix(_A)} #{rgb}")
        if colours:
            lines.append("theme colours: " + ", ".join(colours))
    return lines


def _cut(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LISTED:
        return lines
    return [*lines[:MAX_LISTED], f"[{len(lines) - MAX_LISTED} more {what} not listed]"]


def _font(font: Any) -> str:
    parts = []
    if font.name:
        parts.append(str(font.name))
    if font.size is not None:
        parts.append(f"{font.size.pt:g} pt")
    if font.bold:
        parts.append("bold")
    if font.italic:
        parts.append("italic")
    colour = getattr(font.color, "rgb", None) if font.color is not None else None
    if colour is not None:
        parts.append(f"#{colour}")
    return ", ".join(parts) or "inherited"


def docx_styles(data: bytes) -> str:
    """The styles of a Word document (see the module's docstring)."""
    document = open_docx(data)
    lines = ["docx styles", *theme_lines(data, _THEMES["docx"])]
    lines.append(f"default font: {_docx_default_font(document)}")
    for number, section in enumerate(document.sections, 1):
        width, height = section.page_width, section.page_height
        if width is None or height is None:
            continue
        orientation = "landscape" if width > height else "portrait"
        margins = [section.top_margin, section.right_margin, section.bottom_margin]
        margins.append(section.left_margin)
        shown = " ".join(f"{m / _EMU_PER_CM:.2f}" for m in margins if m is not None)
        lines.append(
            f"page (section {number}): {width / _EMU_PER_CM:.2f} x {height / _EMU_PER_CM:.2f} "
            f"cm, {orientation}, margins top/right/bottom/left {shown} cm"
        )
    by_id = {style.style_id: style for style in document.styles}
    used: Counter[str] = Counter()
    body = document.element.body
    for tag, path in (("p", f"{_W}pPr/{_W}pStyle"), ("r", f"{_W}rPr/{_W}rStyle")):
        for node in body.iter(f"{_W}{tag}"):
            found = node.find(path)
            used[
                found.get(f"{_W}val") if found is not None else "Normal" if tag == "p" else ""
            ] += 1
    for table in body.iter(f"{_W}tbl"):
        found = table.find(f"{_W}tblPr/{_W}tblStyle")
        if found is not None:
            used[found.get(f"{_W}val") or ""] += 1
    used.pop("", None)
    rows = []
    for style_id, count in sorted(used.items(), key=lambda kv: (-kv[1], kv[0])):
        style = by_id.get(style_id)
        if style is None:
            rows.append(f"- {style_id} (undefined style), used {count} times")
            continue
        kind = str(style.type).split(".")[-1].split(" ")[0].lower()
        base = f", based on {style.base_style.name}" if style.base_style is not None else ""
        font = _font(style.font) if hasattr(style, "font") else "-"
        rows.append(f"- {style.name} ({kind}), used {count} times: {font}{base}")
    lines.append(f"styles used ({len(rows)}):")
    lines.extend(_cut(rows, "styles"))
    unused = sorted(
        str(style.name) for sid, style in by_id.items() if sid not in used and style.name
    )
    if unused:
        listed = unused[:MAX_LISTED]
        more = f" and {len(unused) - len(listed)} more" if len(unused) > len(listed) else ""
        lines.append(f"other styles defined ({len(unused)}): {', '.join(listed)}{more}")
    return "\n".join(lines)


def _docx_default_font(document: Any) -> str:
    """The font of the document's defaults (``w:docDefaults``), then of its Normal style."""
    parts = []
    fonts = document.styles.element.find(f"{_W}docDefaults/{_W}rPrDefault/{_W}rPr/{_W}rFonts")
    if fonts is not None:
        face = fonts.get(f"{_W}ascii") or fonts.get(f"{_W}asciiTheme")
        if face:
            theme = {"minor": "the theme's body font", "major": "the theme's heading font"}
            parts.append(theme.get(face[:5], face))
    size = document.styles.element.find(f"{_W}docDefaults/{_W}rPrDefault/{_W}rPr/{_W}sz")
    if size is not None and (size.get(f"{_W}val") or "").isdigit():
        parts.append(f"{int(size.get(f'{_W}val')) / 2:g} pt")
    try:
        normal = _font(document.styles["Normal"].font)
    except KeyError:
        normal = "inherited"
    if normal != "inherited":
        parts.append(f"Normal style: {normal}")
    return ", ".join(parts) or "not set (the application's default)"


def _cell_format(cell: Any) -> str:
    font = cell.font
    parts = []
    if font is not None:
        face = [str(font.name)] if font.name else []
        if font.sz:
            face.append(f"{float(font.sz):g} pt")
        if font.b:
            face.append("bold")
        if font.i:
            face.append("italic")
        colour = getattr(font.color, "rgb", None) if font.color is not None else None
        if isinstance(colour, str) and colour not in ("FF000000",):
            face.append(f"#{colour}")
        parts.append("font " + " ".join(face))
    fill = cell.fill
    if fill is not None and getattr(fill, "fill_type", None):
        colour = getattr(fill.fgColor, "rgb", None)
        parts.append(f"fill {fill.fill_type}" + (f" #{colour}" if isinstance(colour, str) else ""))
    if cell.number_format and cell.number_format != "General":
        parts.append(f"number format {cell.number_format!r}")
    alignment = cell.alignment
    if alignment is not None and alignment.horizontal:
        parts.append(f"align {alignment.horizontal}")
    return "; ".join(parts) or "default"


def xlsx_styles(data: bytes, sheet: str | None = None) -> str:
    """The styles of a workbook, or of its sheet ``sheet`` (see the module's docstring)."""
    book = open_workbook(data)
    try:
        names = list(book.sheetnames)
        if sheet is not None and sheet not in names:
            raise ValueError(f"no sheet {sheet!r}; the sheets are {', '.join(names)}")
        lines = ["xlsx styles", *theme_lines(data, _THEMES["xlsx"])]
        named = [str(n) for n in getattr(book, "named_styles", [])]
        if named:
            lines.append(f"named cell styles ({len(named)}): {', '.join(named[:MAX_LISTED])}")
        for name in [sheet] if sheet is not None else names:
            lines.extend(_sheet_formats(book[name], name))
        return "\n".join(lines)
    finally:
        book.close()


def _sheet_formats(worksheet: Any, name: str) -> list[str]:
    formats: dict[str, list[Any]] = {}
    seen = 0
    cut = False
    for row in worksheet.iter_rows():
        for cell in row:
            if getattr(cell, "value", None) is None and not getattr(cell, "has_style", False):
                continue
            if seen >= MAX_CELLS:
                cut = True
                break
            seen += 1
            key = _cell_format(cell)
            entry = formats.setdefault(key, [0, getattr(cell, "coordinate", "?")])
            entry[0] += 1
        if cut:
            break
    rows = [
        f"- {first}: {key} ({count} cells)"
        for key, (count, first) in sorted(formats.items(), key=lambda kv: (-kv[1][0], kv[0]))
    ]
    head = f"sheet {name!r}: {len(formats)} cell formats in {seen} cells"
    if cut:
        head += f" (the first {MAX_CELLS} read)"
    return [head, *_cut(rows, "formats")]


def pptx_styles(data: bytes) -> str:
    """The styles of a deck (see the module's docstring)."""
    deck = open_pptx(data)
    lines = ["pptx styles"]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        parts = sorted(archive.namelist())
    theme = next((n for n in parts if n.startswith("ppt/theme/theme") and n.endswith(".xml")), None)
    if theme is not None:
        lines.extend(theme_lines(data, theme))
    width, height = deck.slide_width, deck.slide_height
    if width is not None and height is not None:
        lines.append(f"slide size: {width / _EMU_PER_CM:.2f} x {height / _EMU_PER_CM:.2f} cm")
    for number, master in enumerate(deck.slide_masters, 1):
        layouts = [layout.name or "(unnamed)" for layout in master.slide_layouts]
        lines.append(f"master {number} layouts: {', '.join(layouts)}")
    for number, slide in enumerate(deck.slides, 1):
        fonts: Counter[str] = Counter()
        for shape in slide.shapes:
            if not shape.has_text_frame:
                continue
            for paragraph in shape.text_frame.paragraphs:
                for run in paragraph.runs:
                    if run.text.strip():
                        fonts[_font(run.font)] += 1
        used = ", ".join(f"{f} ({c})" for f, c in sorted(fonts.items(), key=lambda kv: -kv[1]))
        lines.append(
            f"slide {number}: layout {slide.slide_layout.name or '(unnamed)'}; "
            f"fonts {used or 'none'}"
        )
    return "\n".join(_cut(lines, "lines"))
