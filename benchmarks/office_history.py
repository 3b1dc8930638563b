"""A git history of spreadsheet and document edits, for ``semantic.py``'s tables and docx rows.

Real repositories rarely keep xlsx, csv or docx files under version control,
so the corpus for the ``tables`` and ``docx`` handlers is built: a team's
reporting folder (monthly sales workbooks, a price list, a stock csv, a
report and meeting notes) edited over ``--commits`` commits the way people
edit them: cells corrected, rows added, inserted and deleted, a sheet added,
a column added, paragraphs rewritten, headings inserted, sections moved,
files added and removed. The edits are drawn from a seeded random generator,
so the same arguments build the same history (file bytes differ run to run
only by the timestamps openpyxl and python-docx write into the packages).

Usage::

    python benchmarks/office_history.py /tmp/office-history [--commits 300] [--seed 7]
    python benchmarks/semantic.py --repo /tmp/office-history
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import subprocess
from pathlib import Path
from typing import Any

REGIONS = ["north", "south", "east", "west", "central", "coast", "hills", "islands"]
PRODUCTS = ["apples", "pears", "plums", "cherries", "grapes", "figs", "dates", "limes"]
PROSE = (
    "sales grew in every region but the coast where the storm closed two shops for a week "
    "margins held because the new supplier cut costs and the team hired three people "
    "stock of limes ran low in march and the orders for april were moved to may"
)
WORDS = PROSE.split()


def sentence(rng: random.Random) -> str:
    n = rng.randint(6, 18)
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


class Workbook:
    """A workbook as rows per sheet; saved with openpyxl."""

    def __init__(self, rng: random.Random) -> None:
        self.sheets: dict[str, list[list[Any]]] = {
            "Sales": [["region", "product", "units", "price"]]
            + [
                [r, p, rng.randint(1, 500), round(rng.uniform(0.5, 9.5), 2)]
                for r in REGIONS[:4]
                for p in PRODUCTS[:5]
            ]
        }

    def edit(self, rng: random.Random) -> str:
        name = rng.choice(list(self.sheets))
        rows = self.sheets[name]
        what = rng.choices(
            ["cell", "cells", "add", "insert", "delete", "sheet", "column"],
            [40, 15, 15, 10, 10, 3, 2],
        )[0]
        if what == "sheet" and len(self.sheets) < 5:
            title = f"Q{len(self.sheets) + 1}"
            self.sheets[title] = [["region", "target"]] + [
                [r, rng.randint(100, 900)] for r in REGIONS
            ]
            return f"add sheet {title}"
        if what == "column" and len(rows[0]) < 7:
            rows[0].append(f"note{len(rows[0])}")
            for row in rows[1:]:
                row.append(rng.choice(["", "checked", "late", "ok"]))
            return f"add a column to {name}"
        if what in ("add", "insert") or len(rows) < 4:
            new = list(rows[1])
            new[0] = rng.choice(REGIONS)
            for i in range(1, len(new)):
                if isinstance(new[i], int):
                    new[i] = rng.randint(1, 500)
            at = len(rows) if what == "add" else rng.randint(1, len(rows))
            rows.insert(at, new)
            return f"add a row to {name}"
        if what == "delete":
            del rows[rng.randint(1, len(rows) - 1)]
            return f"remove a row of {name}"
        for _ in range(1 if what == "cell" else rng.randint(2, 6)):
            row = rows[rng.randint(1, len(rows) - 1)]
            col = rng.randint(1, len(row) - 1)
            value = row[col]
            if isinstance(value, int):
                row[col] = max(0, value + rng.randint(-40, 40))
            elif isinstance(value, float):
                row[col] = round(value * rng.uniform(0.9, 1.1), 2)
            else:
                row[col] = rng.choice(["ok", "late", "checked", "revised"])
        return f"correct figures in {name}"

    def save(self) -> bytes:
        import openpyxl

        book = openpyxl.Workbook()
        first = True
        for name, rows in self.sheets.items():
            sheet = book.active if first else book.create_sheet(name)
            assert sheet is not None
            sheet.title = name
            first = False
            for row in rows:
                sheet.append(row)
        out = io.BytesIO()
        book.save(out)
        return out.getvalue()


class Table:
    """A csv file as rows."""

    def __init__(self, rng: random.Random, header: list[str]) -> None:
        self.rows: list[list[str]] = [header] + [
            [p, f"{rng.uniform(0.5, 9.5):.2f}", str(rng.randint(0, 300))] for p in PRODUCTS
        ]

    def edit(self, rng: random.Random) -> str:
        what = rng.choices(["cell", "add", "delete", "sort"], [60, 20, 15, 5])[0]
        if what == "add" or len(self.rows) < 4:
            self.rows.insert(
                rng.randint(1, len(self.rows)),
                [f"{rng.choice(PRODUCTS)}-{rng.randint(2, 99)}", "1.00", str(rng.randint(0, 50))],
            )
            return "add an item"
        if what == "delete":
            del self.rows[rng.randint(1, len(self.rows) - 1)]
            return "drop an item"
        if what == "sort":
            self.rows[1:] = sorted(self.rows[1:])
            return "sort the items"
        row = self.rows[rng.randint(1, len(self.rows) - 1)]
        row[rng.randint(1, 2)] = str(rng.randint(0, 300))
        return "update a figure"

    def save(self) -> bytes:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(self.rows)
        return out.getvalue().encode()


class Document:
    """A docx document as (style, text) paragraphs; saved with python-docx."""

    def __init__(self, rng: random.Random, title: str) -> None:
        self.paragraphs: list[tuple[str, str]] = [("Title", title)]
        for section in ("Summary", "Regions", "Next steps"):
            self.paragraphs.append(("Heading 1", section))
            self.paragraphs += [("Normal", sentence(rng)) for _ in range(rng.randint(2, 4))]

    def edit(self, rng: random.Random) -> str:
        body = [i for i, (style, _) in enumerate(self.paragraphs) if style == "Normal"]
        what = rng.choices(["rewrite", "add", "delete", "heading", "move"], [50, 25, 10, 10, 5])[0]
        if what == "add" or len(body) < 3:
            self.paragraphs.insert(rng.randint(2, len(self.paragraphs)), ("Normal", sentence(rng)))
            return "add a paragraph"
        if what == "delete":
            del self.paragraphs[rng.choice(body)]
            return "remove a paragraph"
        if what == "heading":
            at = rng.choice(body)
            self.paragraphs.insert(at, ("Heading 2", rng.choice(REGIONS).capitalize()))
            return "add a heading"
        if what == "move":
            i = rng.choice(body)
            moved = self.paragraphs.pop(i)
            self.paragraphs.insert(rng.randint(2, len(self.paragraphs)), moved)
            return "move a paragraph"
        i = rng.choice(body)
        words = self.paragraphs[i][1].rstrip(".").split()
        words[rng.randrange(len(words))] = rng.choice(WORDS)
        self.paragraphs[i] = ("Normal", " ".join(words) + ".")
        return "reword a paragraph"

    def save(self) -> bytes:
        import docx

        document = docx.Document()
        for style, text in self.paragraphs:
            document.add_paragraph(text, style=style)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()


def build(root: Path, commits: int, seed: int) -> None:
    """Write the history into a new git repository at ``root``."""
    rng = random.Random(seed)
    root.mkdir(parents=True)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.name", "office")
    git("config", "user.email", "office@example.invalid")
    files: dict[str, Any] = {
        "sales/2026-01.xlsx": Workbook(rng),
        "prices.csv": Table(rng, ["item", "price", "stock"]),
        "stock.csv": Table(rng, ["item", "cost", "count"]),
        "reports/monthly.docx": Document(rng, "Monthly report"),
        "notes/meeting.docx": Document(rng, "Meeting notes"),
    }
    for path, thing in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(thing.save())
    git("add", "-A")
    git("commit", "-q", "-m", "start the reporting folder")
    month = 2
    for _ in range(commits):
        messages = []
        touched: set[str] = set()
        if rng.random() < 0.03 and month <= 12:
            path = f"sales/2026-{month:02d}.xlsx"
            files[path] = Workbook(rng)
            touched.add(path)
            month += 1
            messages.append(f"new workbook {path}")
        elif rng.random() < 0.01 and len(files) > 4:
            path = rng.choice(sorted(p for p in files if p.startswith("sales/")))
            del files[path]
            (root / path).unlink()
            messages.append(f"remove {path}")
        for path in rng.sample(sorted(files), k=rng.choice([1, 1, 1, 2, 3])):
            messages.append(f"{path}: {files[path].edit(rng)}")
            touched.add(path)
        for path in touched:  # a file saved only when edited, as people do
            (root / path).write_bytes(files[path].save())
        git("add", "-A")
        git("commit", "-q", "--allow-empty", "-m", "; ".join(messages))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    build(args.root, args.commits, args.seed)
    print(f"{args.commits + 1} commits written to {args.root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
