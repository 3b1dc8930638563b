"""The knowledge base: indexing a large workspace, re-indexing after edits, BM25 query latency.

Three rows, measured in one run:

* ``index``    ``kb index`` of a snapshot of ``--files`` text files (5,000 files of
               about 10 KB: 50 MB of markdown-like prose) into a fresh index
               (target: under 20 s); the snapshot itself is timed apart;
* ``reindex``  ``kb index`` after 10 files were edited (the working tree
               recorded, then only the changed files read again; target: under 1 s);
* ``query``    BM25 ``kb search`` of ``--queries`` queries, top 5 (target: p95 under 20 ms).

Usage::

    python benchmarks/kb.py [--files 5000] [--queries 200] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

from strata import Repository

WORDS = (  # noqa: SIM905
    "server cache request user setting default file folder index query token session queue "
    "worker message backup storage quota limit retry timeout error log metric trace port "
    "gateway route handler schema table column migration release version build test deploy "
    "config option flag command shell script module package import function class method "
    "value number string list map key secret password hash signature certificate network "
    "latency throughput memory disk thread process signal event stream buffer batch page"
).split()


#: English's commonest words: the top of the vocabulary, as in real prose
STOP = (  # noqa: SIM905
    "the of and to a in is it that for on was with as be by this are or at from not but "
    "have an they which one you were all we can her has there been if more when will would"
).split()


def vocabulary(rng: random.Random, n: int = 20_000) -> list[str]:
    """English's commonest words, then technical words, then made-up ones (by rank)."""
    made = {
        "".join(
            rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 4))
        )
        for _ in range(n)
    }
    return STOP + WORDS + sorted(made - set(WORDS) - set(STOP))


def zipf(n: int) -> list[float]:
    """Cumulative Zipf weights (the word of rank r is 1/r as frequent as the first)."""
    return list(itertools.accumulate(1.0 / (rank + 1) for rank in range(n)))


def make_corpus(root: Path, files: int, size: int, rng: random.Random) -> None:
    """Prose whose words follow Zipf's law over a 20,000-word vocabulary, like real text."""
    vocab = vocabulary(rng)
    weights = zipf(len(vocab))
    for i in range(files):
        folder = root / f"docs/part{i % 50:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        parts = [f"# Document {i}\n"]
        total = 0
        section = 0
        while total < size:
            if total // 2500 >= section:
                section += 1
                parts.append(f"\n## Section {section} on {rng.choice(WORDS)}\n\n")
            sentence = " ".join(rng.choices(vocab, cum_weights=weights, k=rng.randint(8, 16)))
            line = sentence.capitalize() + f" (item {rng.randint(1, 10**6)}).\n"
            if rng.random() < 0.2:
                line += "\n"
            parts.append(line)
            total += len(line)
        (folder / f"doc{i:05d}.md").write_text("".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--size", type=int, default=10_000, help="bytes per file")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["STRATA_NO_DAEMON"] = "1"
    rng = random.Random(15)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb-bench-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        make_corpus(ws, args.files, args.size, rng)
        vocab = vocabulary(random.Random(15))
        content = vocab[len(STOP) :]
        content_weights = zipf(len(content))
        mb = sum(p.stat().st_size for p in ws.rglob("*.md")) / 1e6
        with Repository.init(ws) as repo:
            t = time.perf_counter()
            repo.snapshot("corpus")
            snap_s = time.perf_counter() - t
            t = time.perf_counter()
            report = repo.kb.index(record=False)
            index_s = time.perf_counter() - t
            rows.append(
                {
                    "row": "index",
                    "files": report.files,
                    "mb": round(mb, 1),
                    "chunks": report.chunks,
                    "seconds": round(index_s, 2),
                    "snapshot_seconds": round(snap_s, 2),
                    "target_s": 20,
                }
            )
            edited = rng.sample(sorted(ws.rglob("*.md")), 10)
            for path in edited:
                with open(path, "a") as f:
                    f.write("\nAn edit about zeppelins and walruses.\n")
            t = time.perf_counter()
            again = repo.kb.index()
            reindex_s = time.perf_counter() - t
            assert again.changed == 10, again.to_json()
            rows.append(
                {
                    "row": "reindex",
                    "changed": again.changed,
                    "unchanged": again.unchanged,
                    "seconds": round(reindex_s, 3),
                    "target_s": 1,
                }
            )
            kb = repo.kb
            times = []
            for _ in range(args.queries):
                # a question: a few content words (by their frequency) in English
                words = rng.choices(content, cum_weights=content_weights, k=rng.randint(2, 4))
                query = f"how do I {words[0]} the {' '.join(words[1:])}"
                t = time.perf_counter()
                kb.search(query, k=5)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            rows.append(
                {
                    "row": "query",
                    "queries": len(times),
                    "p50_ms": round(statistics.median(times), 2),
                    "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
                    "target_p95_ms": 20,
                }
            )
    if args.json:
        print(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "rows": rows}))
        return
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
