"""Fixture files of every type the Workshop maps, made with the libraries that read them."""

from __future__ import annotations

import io
from pathlib import Path


def csv_bytes(rows: int = 5) -> bytes:
    lines = ["region,units,price"]
    regions = ["north", "south", "east", "west"]
    for i in range(rows):
        lines.append(f"{regions[i % 4]},{i + 1},{(i + 1) * 2.5}")
    return ("\n".join(lines) + "\n").encode()


def xlsx_bytes() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Sales"
    sheet.append(["Region", "Units", "Price"])
    for i, region in enumerate(["north", "south", "east"], 1):
        sheet.append([region, i * 10, i * 1.5])
    notes = book.create_sheet("Notes")
    notes.append(["Topic", "Detail"])
    notes.append(["source", "survey 2026"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def docx_bytes() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Quarterly Report", level=1)
    document.add_paragraph("Sales grew in every region this quarter.")
    document.add_heading("Method", level=2)
    document.add_paragraph("We counted units sold per region.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).text = "Units"
    document.add_heading("Results", level=2)
    document.add_paragraph("North led with 30 units.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_bytes() -> bytes:
    import pptx

    deck = pptx.Presentation()
    for title in ("Kick-off", "Budget 2026", "Next steps"):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        assert slide.shapes.title is not None
        slide.shapes.title.text = title
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def pdf_bytes(pages: tuple[str, ...] = ("Invoice 2026-001", "Terms and conditions")) -> bytes:
    """A PDF whose pages show the given lines of text, with an outline entry per page."""
    from pypdf import PdfWriter
    from pypdf.generic import (
        DecodedStreamObject,
        DictionaryObject,
        NameObject,
    )

    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    for text in pages:
        page = writer.add_blank_page(width=612, height=792)
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 18 Tf 72 700 Td ({text}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
        )
    for number, text in enumerate(pages):
        writer.add_outline_item(text, number)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def write_all(root: Path) -> dict[str, bytes]:
    """One file of each type under ``root``; returns path -> bytes."""
    files = {
        "data/sales.csv": csv_bytes(),
        "book.xlsx": xlsx_bytes(),
        "report.docx": docx_bytes(),
        "deck.pptx": pptx_bytes(),
        "invoice.pdf": pdf_bytes(),
        "README.md": b"# Project\n\nIntro.\n\n## Usage\n\nRun it.\n",
        "src/app.py": b"import os\n\n\ndef main():\n    return 1\n\n\nclass App:\n    pass\n",
        "logo.png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    }
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return files
