"""The Workshop's file context on a mixed workspace: manifest + every file's map, cold and warm.

A workspace of ``--files`` files (default 2,000) in 40 folders: 70 % text
(markdown, Python, plain text, JSON), 15 % CSV, and xlsx, docx, pptx, pdf
and images for the rest. Text, CSV, pdf and image contents all differ; the
xlsx, docx and pptx files of one type share their bytes (making hundreds of
distinct Office files takes longer than the benchmark), so a cold run parses
each of those types once. Then:

1. **cold**: the manifest and the structural map of every file, with the
   in-memory caches empty (every CSV read by DuckDB, every document parsed);
2. **warm**: the same again, ``--repeat`` times (median): the target of issue
   13 is under 1 s;
3. ``build_prompt`` (manifest + as many maps as fit in 24k characters), warm;
4. **a turn's context**, warm: what ``Repository.workshop()`` builds before each
   model call: the manifest, the context items (a situation, ``--skills``
   Agent Skills with a reference each, a Document Style merged into the
   format style skills, :func:`strata.workshop.skills.plan_context`) and
   ``build_prompt`` on that manifest. Run on a tree without
   ``strata.workshop.skills`` (an older Strata, ``PYTHONPATH=OLD/src``), the
   same step is the manifest and ``build_prompt`` alone: the figure to compare.

Run:  .venv/bin/python benchmarks/workshop_context.py [--files 2000] [--repeat 5] [--skills 20]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from strata.providers.base import Message
from strata.workshop import filemaps
from strata.workshop.context import build_manifest, build_prompt, map_of
from workshop_fixtures import csv_bytes, docx_bytes, pdf_bytes, pptx_bytes, xlsx_bytes


def build(root: Path, files: int) -> dict[str, int]:
    kinds: dict[str, int] = {}
    docs = {"xlsx": xlsx_bytes(), "docx": docx_bytes(), "pptx": pptx_bytes()}
    for i in range(files):
        folder = root / f"folder-{i % 40:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        slot = i % 100
        if slot < 25:
            name, data = f"notes-{i}.md", f"# Notes {i}\n\n## Part\n\n" + "text line\n" * (i % 50)
        elif slot < 45:
            body = "".join(f"def f{j}_{i}():\n    return {j}\n\n" for j in range(i % 30))
            name, data = f"module_{i}.py", body
        elif slot < 60:
            name, data = f"log-{i}.txt", "".join(f"{i} event {j}\n" for j in range(i % 400))
        elif slot < 70:
            name, data = f"config-{i}.json", f'{{"id": {i}, "items": [1, 2, 3]}}\n'
        elif slot < 85:
            name, data = f"table-{i}.csv", csv_bytes(rows=20 + i % 200).decode() + f"x,{i},1.0\n"
        elif slot < 89:
            # documents: the same bytes plus a distinct tail still parse, and hash apart
            name, data = f"book-{i}.xlsx", docs["xlsx"]
        elif slot < 92:
            name, data = f"report-{i}.docx", docs["docx"]
        elif slot < 95:
            name, data = f"deck-{i}.pptx", docs["pptx"]
        elif slot < 98:
            name, data = f"paper-{i}.pdf", pdf_bytes((f"Paper {i}", "Results"))
        else:
            name, data = f"image-{i}.png", b"\x89PNG\r\n\x1a\n" + os.urandom(2048)
        raw = data if isinstance(data, bytes) else data.encode()
        (folder / name).write_bytes(raw)
        kind = filemaps.type_of(name)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def manifest_and_maps(root: Path) -> tuple[int, int]:
    manifest = build_manifest(root)
    made = 0
    for entry in manifest.files:
        if map_of(root, entry).ok:
            made += 1
    return len(manifest.files), made


def make_context(folder: Path, skills: int) -> None:
    """A situation, ``skills`` Agent Skills (one reference each) and a Document Style."""
    (folder / "skills").mkdir(parents=True)
    (folder / "situation.md").write_text("Quarter close: the books close on Friday.\n" * 20)
    topics = ["invoices", "sales", "budgets", "reports", "slides", "tables", "notes", "code"]
    for i in range(skills):
        name = f"skill-{i:02d}"
        topic = topics[i % len(topics)]
        where = folder / "skills" / name
        (where / "references").mkdir(parents=True)
        (where / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: How to handle {topic} in this team\n---\n"
            + f"Rule about {topic}.\n" * 30
            + "See [the summary](references/summary.md).\n"
        )
        (where / "references" / "summary.md").write_text(f"Summary of {topic}.\n" * 20)
    style = folder / "skills" / "document-style"
    style.mkdir()
    (style / "SKILL.md").write_text(
        "---\nname: document-style\ndescription: The house style\n---\nUse the house font.\n"
        "## Word documents\nHeadings in navy.\n## Slides\nOne chart a slide.\n"
    )


def turn_context(root: Path, context: Path, transcript: list[Message], text: str) -> object:
    """What a Workshop turn builds before its model call (see step 4 of the docstring)."""
    manifest = build_manifest(root)
    try:
        from strata.workshop.skills import plan_context
    except ImportError:  # an older Strata: the manifest and the prompt alone
        return build_prompt(root, transcript, user_text=text, manifest=manifest)
    plan = plan_context(context, text, manifest)
    return build_prompt(
        root, transcript, user_text=text, context_items=plan.items, manifest=manifest
    )


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skills", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wsctx-bench-") as tmp:
        root = Path(tmp) / "ws"
        kinds = build(root, args.files)
        filemaps.clear_cache()
        time.sleep(2.1)  # past the racy window, so the manifest's sniff cache may be used
        cold = timed(lambda: manifest_and_maps(root))
        files, mapped = manifest_and_maps(root)
        warm = [timed(lambda: manifest_and_maps(root)) for _ in range(args.repeat)]
        transcript = [Message("user", "hello"), Message("assistant", "hi")]
        prompt_times = [
            timed(lambda: build_prompt(root, transcript, user_text="sum table-80.csv"))
            for _ in range(args.repeat)
        ]
        prompt = build_prompt(root, transcript, user_text="sum table-80.csv")
        context = Path(tmp) / "context"
        make_context(context, args.skills)
        asked = "check the invoices in table-80.csv and make slides"
        turn_times = [
            timed(lambda: turn_context(root, context, transcript, asked))
            for _ in range(args.repeat)
        ]
        try:
            import strata.workshop.skills  # noqa: F401

            with_skills = f"situation + {args.skills} skills + document style"
        except ImportError:
            with_skills = "no context items: this Strata has none"
    print(
        f"# Workshop file context ({datetime.date.today()}, {platform.platform()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()})"
    )
    print(
        f"{files} files ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}); "
        f"{mapped} mapped, median of {args.repeat}"
    )
    print()
    print("| step | time |")
    print("| --- | --- |")
    print(f"| manifest + every map, cold (caches empty) | {cold:.2f} s |")
    print(f"| manifest + every map, warm (target < 1 s) | {statistics.median(warm):.3f} s |")
    print(f"| build_prompt, warm | {statistics.median(prompt_times):.3f} s |")
    print(f"| a turn's context ({with_skills}), warm | {statistics.median(turn_times):.3f} s |")
    print()
    print(f"prompt: {len(prompt.system)} characters; cut: {'; '.join(prompt.truncated)}")


if __name__ == "__main__":
    main()
