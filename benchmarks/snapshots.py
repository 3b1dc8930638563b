"""Snapshots, diffs, rewinds and exports: Strata against git on one synthetic corpus.

The script builds a fixed corpus (deterministic from ``--seed``), copies it into
one workspace per tool, and times the same life cycle in each:

1. first snapshot     ``strata init`` + ``strata snapshot``
                      vs ``git init -q`` + ``git add -A`` + ``git commit -q -m x``
2. no-change snapshot ``strata snapshot`` (records nothing)
                      vs ``git add -A`` + ``git diff --cached --quiet`` (exit 0: nothing
                      to commit, so a snapshot-if-changed script stops there)
3. incremental        the same 10 files edited in every workspace, then
                      ``strata snapshot`` vs ``git add -A`` + ``git commit -q -m x``
4. diff HEAD~1 HEAD   CLI: ``strata diff HEAD~1 HEAD --stat`` vs ``git diff HEAD~1 HEAD --stat``;
                      in-process: ``Repository.diff("HEAD~1", "HEAD")`` vs pygit2
                      (libgit2) ``diff`` + ``find_similar`` + ``stats``
5. rewind             ``strata rewind HEAD~1`` vs ``git checkout -q --detach HEAD~1``: both
                      move HEAD one snapshot back and rewrite the 10 edited files
6. export             ``strata export HEAD DIR`` vs ``git worktree add -q --detach DIR HEAD``
                      (a fresh checkout into a new folder); ``git archive HEAD | tar -x``
                      is shown for information
7. store size         ``du -sk``: ``.strata`` vs ``.git/objects`` (loose) and, at the end,
                      ``.git/objects`` after ``git gc``

git runs twice: with its defaults and with ``-c core.fsync=all`` (Strata makes
every object durable with ``fsync``/``syncfs`` before it records an event), and
always with ``gc.auto=0`` (no background gc after the first big commit; ``git
gc`` runs once, explicitly, at the end). git reads no global or system
configuration. Every timing is whole-process wall time, CLI start included,
median of the runs; the CPU time (user + sys) of the processes is reported too,
as it suffers less from other load on the machine. ``sync`` runs (untimed)
before every timed command, so no tool flushes data another step left dirty.
Corpus files get a fixed, old mtime, so no tool treats them as racily clean.
For the first snapshot, the repository (``.strata`` or ``.git``) is deleted
before each run; the workspace files stay (page cache warm for every tool).

``--rev REV`` benchmarks the ``src/`` of a commit (exported under the work
folder) instead of the working tree; ``--profile`` also runs the large
incremental snapshot and rewind under cProfile and prints their top costs.

``--size tiny`` is 20,000 text files of 1-2 KB each (the first snapshot's bound is 0.7x
git there: its cost is per file); ``--first-only`` stops after the first snapshot.

Run:  .venv/bin/python benchmarks/snapshots.py [--size small|large|tiny|both] [--first-only]
      [--runs N] [--keep]
      [--first-runs N] [--seed N] [--rev REV] [--profile [DIR]] [--work DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import os
import platform
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = Path(sys.executable).parent
STRATA = str(BIN / "strata") if (BIN / "strata").exists() else shutil.which("strata") or "strata"
STRATA_SRC = ROOT / "src"  # what ``--rev`` replaces with an exported commit
GIT = shutil.which("git") or "git"
FIXED_MTIME = 1_700_000_000  # every corpus file is "old": no tool sees it as racily clean
EDITED_FILES = 10

# -- the corpus ----------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    name: str
    files: int
    total: int  # bytes
    large: tuple[int, ...]  # sizes of the few large files (part of ``total``)
    folders: int  # folders below the top ones
    #: every file a text file of a size drawn evenly from this range (``total`` unused)
    even: tuple[int, int] | None = None
    #: the bound of the first snapshot, as a ratio to git's
    first_target: float = 0.3


SIZES = {
    "small": Size("small", 1_000, 20 * 10**6, (3 * 2**20, 2 * 2**20), 60),
    "large": Size(
        "large", 20_000, 400 * 10**6, (20 * 2**20, 12 * 2**20, 8 * 2**20, 5 * 2**20), 900
    ),
    # many small files: what a source tree is; the first snapshot costs per file, not per byte
    "tiny": Size("tiny", 20_000, 0, (), 900, even=(1024, 2048), first_target=0.7),
}

TOP = [
    "src",
    "lib",
    "app",
    "core",
    "api",
    "web",
    "cli",
    "tests",
    "docs",
    "assets",
    "vendor",
    "scripts",
    "tools",
    "config",
    "data",
    "examples",
    "build",
    "static",
    "templates",
    "migrations",
]
SUB = [
    "utils",
    "models",
    "views",
    "handlers",
    "services",
    "common",
    "internal",
    "parsers",
    "io",
    "net",
    "storage",
    "ui",
    "widgets",
    "fixtures",
    "schemas",
    "helpers",
    "plugins",
    "drivers",
    "codecs",
    "adapters",
]
TEXT_EXT = (".py", ".js", ".ts", ".md", ".json", ".txt", ".c", ".h", ".html", ".css", ".yaml")
BIN_EXT = (".png", ".jpg", ".bin", ".so", ".pdf", ".woff2", ".sqlite")
PUNCT = ["(", ")", ", ", " = ", ": ", ".", " + ", "[", "]", '"', " == ", "->"]
LINE_STARTS = ["\n", "\n    ", "\n        ", "\n            ", "\n\n"]


@dataclass(frozen=True)
class File:
    path: str
    binary: bool
    size: int


def plan_corpus(size: Size, seed: int) -> list[File]:
    """Paths, kinds and sizes of every file (the content is made by :func:`write_corpus`)."""
    rng = random.Random(f"{seed}-plan-{size.name}")
    folders = list(TOP)
    depth = {t: 1 for t in TOP}
    for i in range(size.folders):
        parent = rng.choice([f for f in folders if depth[f] < 4])
        name = f"{rng.choice(SUB)}_{i}"
        path = f"{parent}/{name}"
        folders.append(path)
        depth[path] = depth[parent] + 1
    # some folders hold many files, most hold a few
    weights = [rng.paretovariate(1.2) for _ in folders]
    n_small = size.files - len(size.large)
    if size.even is not None:
        binary = [False] * n_small
        sizes = [rng.randint(*size.even) for _ in range(n_small)]
    else:
        binary = [rng.random() < 0.25 for _ in range(n_small)]
        # log-normal sizes, median ~4 KB for text and ~11 KB for binary, scaled to the total
        raw = [rng.lognormvariate(9.3 if b else 8.3, 1.3) for b in binary]
        budget = size.total - sum(size.large)
        scale = budget / sum(raw)
        sizes = [max(0, min(int(r * scale), 2 * 2**20)) for r in raw]
        sizes[0] += budget - sum(sizes)  # exact total
    files: list[File] = []
    used: set[str] = set()
    for i, (b, n) in enumerate(zip(binary, sizes, strict=True)):
        folder = rng.choices(folders, weights)[0]
        ext = rng.choice(BIN_EXT if b else TEXT_EXT)
        path = f"{folder}/{rng.choice(SUB)}_{i}{ext}"
        used.add(path)
        files.append(File(path, b, n))
    for i, n in enumerate(size.large):
        ext = (".bin", ".sqlite", ".json", ".pdf")[i % 4]
        files.append(File(f"data/large_{i}{ext}", ext != ".json", n))
    files.sort(key=lambda f: f.path)
    return files


class Content:
    """Deterministic file content: code-like text and partly compressible binary."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"{seed}-vocabulary")
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = [
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(3000)
        ]
        words += ["def", "return", "if", "else", "for", "in", "self", "None", "import", "class"]
        words += [f"{w}_{v}" for w, v in zip(words[:400], words[400:800], strict=True)]
        words += [str(rng.randint(0, 10**6)) for _ in range(300)]
        # tokens are joined with spaces; word frequencies follow Zipf's law as in real code
        self.tokens = PUNCT + LINE_STARTS + [w + " " for w in words]
        weights = [60.0] * len(PUNCT) + [90.0] * len(LINE_STARTS)
        weights += [400.0 / (rank + 1) for rank in range(len(words))]
        total = 0.0
        self.cum = []
        for w in weights:
            total += w
            self.cum.append(total)

    def text(self, rng: random.Random, size: int) -> bytes:
        if size == 0:
            return b""
        out = "".join(rng.choices(self.tokens, cum_weights=self.cum, k=size // 5 + 16)).encode()
        while len(out) < size:
            out += "".join(
                rng.choices(self.tokens, cum_weights=self.cum, k=size // 5 + 16)
            ).encode()
        return out[: size - 1] + b"\n"

    @staticmethod
    def binary(rng: random.Random, size: int) -> bytes:
        # a header with NUL bytes, then 4 KiB blocks: 60% random, 40% low entropy
        parts = [b"\x89BIN\0\0\0\x01"]
        have = 8
        block = 4096
        filler = rng.randbytes(64) * (block // 64)
        while have < size:
            if rng.random() < 0.6:
                parts.append(rng.randbytes(block))
            else:
                parts.append(filler[: block - 16] + rng.randbytes(16))
            have += block
        return b"".join(parts)[:size]


def write_corpus(target: Path, files: list[File], seed: int) -> None:
    content = Content(seed)
    made: set[str] = set()
    for i, f in enumerate(files):
        rng = random.Random(f"{seed}-file-{i}")
        folder = f.path.rpartition("/")[0]
        if folder not in made:
            os.makedirs(target / folder, exist_ok=True)
            made.add(folder)
        data = content.binary(rng, f.size) if f.binary else content.text(rng, f.size)
        path = target / f.path
        path.write_bytes(data)
        os.utime(path, (FIXED_MTIME, FIXED_MTIME))


def pick_edits(files: list[File], seed: int) -> list[File]:
    """The 10 files every incremental run edits: 8 text and 2 binary, under 1 MB, all over."""
    rng = random.Random(f"{seed}-edits")
    text = [f for f in files if not f.binary and 200 < f.size < 2**20]
    binary = [f for f in files if f.binary and 200 < f.size < 2**20]
    if not binary:  # a corpus of text files alone
        return rng.sample(text, EDITED_FILES)
    return rng.sample(text, EDITED_FILES - 2) + rng.sample(binary, 2)


def edit(workspace: Path, files: list[File], run: int, seed: int) -> None:
    """Edit run ``run``: the same bytes in every workspace, different bytes each run."""
    for f in files:
        rng = random.Random(f"{seed}-edit-{run}-{f.path}")
        path = workspace / f.path
        data = path.read_bytes()
        at = rng.randrange(len(data) // 2, len(data))
        if f.binary:
            new = data[:at] + rng.randbytes(64) + data[at + 64 :]
        else:
            at = data.find(b"\n", at) + 1 or len(data)
            line = f"    edited_{run} = compute({rng.randrange(10**9)})  # run {run}\n".encode()
            new = data[:at] + line * rng.randint(1, 3) + data[at:]
        path.write_bytes(new)


# -- running tools ---------------------------------------------------------------


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.com",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.com",
        GIT_PAGER="cat",
        PAGER="cat",
        STRATA_AUTHOR="bench",
        LC_ALL="C",
    )
    # a user's Python caches bytecode: without the cache every strata start recompiles
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("STRATA_NOW", None)
    env.pop("STRATA_SEED", None)
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


ENV = tool_env()
Command = Sequence[str] | str  # a string runs through /bin/sh (pipelines)


def run(cmd: Command, cwd: Path, *, ok: tuple[int, ...] = (0,)) -> int:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=ENV,
        shell=isinstance(cmd, str),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{cmd!r} in {cwd} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        )
    return proc.returncode


LAST_CPU = [0.0]  # CPU seconds (user + sys) of the children of the last ``timed`` call


def timed(steps: Callable[[], None]) -> float:
    """Wall seconds of ``steps`` after an untimed ``sync`` (nothing dirty left behind).

    The CPU time (user + sys) of the processes it ran is left in ``LAST_CPU``.
    """
    os.sync()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    steps()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall


def seq(cwd: Path, *cmds: Command) -> Callable[[], None]:
    def steps() -> None:
        for c in cmds:
            run(c, cwd)

    return steps


@dataclass(frozen=True)
class Tool:
    key: str
    label: str
    git_config: tuple[str, ...] = ()

    @property
    def is_git(self) -> bool:
        return self.key != "strata"

    def git(self, *args: str) -> list[str]:
        return [GIT, *self.git_config, *args]


STRATA_TOOL = Tool("strata", "strata")
# no automatic gc: after the first commit of 20,000 objects git would detach a
# background ``gc --auto`` that competes with the next measurements and packs the
# loose objects whose size is measured; ``git gc`` runs explicitly at the end
GIT_BASE = ("-c", "init.defaultBranch=main", "-c", "gc.auto=0", "-c", "maintenance.auto=false")
GIT_TOOL = Tool("git", "git", GIT_BASE)
GITFS_TOOL = Tool("gitfs", "git fsync=all", (*GIT_BASE, "-c", "core.fsync=all"))
TOOLS = (STRATA_TOOL, GIT_TOOL, GITFS_TOOL)


def du_k(path: Path) -> int:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, check=True, text=True)
    return int(out.stdout.split()[0])


def rmtree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


# -- results ---------------------------------------------------------------------


@dataclass
class Row:
    op: str
    unit: str  # "s", "ms" or "MB"
    values: dict[str, list[float]] = field(default_factory=dict)  # tool key -> samples
    cpu: dict[str, list[float]] = field(default_factory=dict)  # tool key -> CPU seconds
    target: str = ""
    limit: float | None = None  # max strata/git ratio (or absolute bound, see ``absolute``)
    absolute: bool = False  # the target bounds strata's own value (in ``unit``)
    note: str = ""

    def value(self, key: str, *, cpu: bool = False) -> float | None:
        samples = (self.cpu if cpu else self.values).get(key)
        return statistics.median(samples) if samples else None

    def ratio(self, key: str = "git", *, cpu: bool = False) -> float | None:
        s, g = self.value("strata", cpu=cpu), self.value(key, cpu=cpu)
        return s / g if s is not None and g else None

    def verdict(self) -> str:
        if self.limit is None:
            return ""
        if self.absolute:
            s = self.value("strata")
            return "" if s is None else ("yes" if s < self.limit else "NO")
        r = self.ratio()
        return "" if r is None else ("yes" if r <= self.limit else "NO")


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "ms":
        return f"{value:.2f} ms"
    return f"{value:.1f} MB"


def table(rows: list[Row], title: str) -> str:
    head = ["operation", "strata", "git", "git fsync=all", "strata/git", "strata/git fsync"]
    head += ["target", "met"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio, ratio_fs = r.ratio(), r.ratio("gitfs")
        cells = [
            r.op.replace("|", "\\|"),
            fmt(r.value("strata"), r.unit),
            fmt(r.value("git"), r.unit),
            fmt(r.value("gitfs"), r.unit),
            f"{ratio:.2f}x" if ratio is not None else "—",
            f"{ratio_fs:.2f}x" if ratio_fs is not None else "—",
            r.target,
            r.verdict(),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"* {r.op}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", *notes]
    head = ["operation", "strata", "git", "git fsync=all", "strata/git", "strata/git fsync"]
    lines += [
        "",
        "CPU time (user + sys of the processes run; less sensitive to other load), median:",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        if not r.cpu:
            continue
        ratio, ratio_fs = r.ratio(cpu=True), r.ratio("gitfs", cpu=True)
        cells = [
            r.op.replace("|", "\\|"),
            fmt(r.value("strata", cpu=True), r.unit),
            fmt(r.value("git", cpu=True), r.unit),
            fmt(r.value("gitfs", cpu=True), r.unit),
            f"{ratio:.2f}x" if ratio is not None else "—",
            f"{ratio_fs:.2f}x" if ratio_fs is not None else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def samples_line(rows: list[Row]) -> str:
    out = []
    for r in rows:
        if r.unit == "MB":
            continue
        parts = []
        for key, vals in r.values.items():
            scale = 1000 if r.unit == "s" else 1
            parts.append(f"{key}=[{', '.join(f'{v * scale:.1f}' for v in vals)}]")
        out.append(f"  {r.op} (ms): {'; '.join(parts)}")
    return "\n".join(out)


# -- the benchmark -------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def bench_version(runs: int) -> Row:
    row = Row("`--version` (ms)", "s", target="strata < 60 ms", limit=0.060, absolute=True)
    here = Path.cwd()
    for _ in range(max(runs, 10)):
        for key, cmd in (("strata", STRATA), ("git", GIT)):
            row.values.setdefault(key, []).append(timed(seq(here, [cmd, "--version"])))
            row.cpu.setdefault(key, []).append(LAST_CPU[0])
    return row


def bench_size(
    size: Size,
    work: Path,
    *,
    runs: int,
    first_runs: int,
    seed: int,
    profile: Path | None,
    first_only: bool = False,
) -> tuple[list[Row], dict[str, str]]:
    base = work / size.name
    rmtree(base)
    base.mkdir(parents=True)
    log(f"{size.name}: generating {size.files} files, {size.total / 1e6:.0f} MB")
    t0 = time.perf_counter()
    files = plan_corpus(size, seed)
    corpus = base / "corpus"
    write_corpus(corpus, files, seed)
    info = {"generate": f"{time.perf_counter() - t0:.1f} s"}
    ws = {t.key: base / t.key for t in TOOLS}
    for t in TOOLS:
        subprocess.run(["cp", "-a", str(corpus), str(ws[t.key])], check=True)
    rmtree(corpus)
    edits = pick_edits(files, seed)
    folders = len({f.path.rpartition("/")[0] for f in files})
    info["corpus"] = (
        f"{len(files)} files in {folders} folders, {sum(f.size for f in files) / 1e6:.1f} MB "
        f"({sum(f.size for f in files if f.binary) / 1e6:.1f} MB binary in "
        f"{sum(f.binary for f in files)} files), "
        f"largest {max(f.size for f in files) / 2**20:.0f} MiB"
    )
    log(f"{size.name}: {info['corpus']}")
    rows: list[Row] = []

    def measure(row: Row, steps: dict[str, Callable[[int], float]], n: int) -> Row:
        for i in range(n):
            for t in TOOLS:
                if t.key in steps:
                    row.values.setdefault(t.key, []).append(steps[t.key](i))
                    row.cpu.setdefault(t.key, []).append(LAST_CPU[0])
            log(f"{size.name}: {row.op} run {i + 1}/{n}")
        return row

    # 1. first snapshot: the repository is deleted before every run
    def first(t: Tool) -> float:
        w = ws[t.key]
        if t.is_git:
            rmtree(w / ".git")
            return timed(
                seq(w, t.git("init", "-q"), t.git("add", "-A"), t.git("commit", "-q", "-m", "x"))
            )
        rmtree(w / ".strata")
        return timed(seq(w, [STRATA, "init"]))  # init records the folder as it is

    rows.append(
        measure(
            Row(
                "first snapshot",
                "s",
                target=f"≤ {size.first_target}x git",
                limit=size.first_target,
            ),
            {t.key: (lambda _, t=t: first(t)) for t in TOOLS},
            first_runs,
        )
    )

    # 7a. store size after the first snapshot
    strata_k = du_k(ws["strata"] / ".strata")
    objects_k = du_k(ws["strata"] / ".strata" / "objects")
    git_loose_k = du_k(ws["git"] / ".git" / "objects")
    git_all_k = du_k(ws["git"] / ".git")
    rows.append(
        Row(
            "store size (du -sk)",
            "MB",
            {"strata": [strata_k / 1024], "git": [git_loose_k / 1024]},
            target="≤ 1.0x git loose",
            limit=1.0,
            note=f"whole .strata {strata_k / 1024:.1f} MB (objects {objects_k / 1024:.1f} MB) "
            f"vs .git/objects (loose) {git_loose_k / 1024:.1f} MB; whole .git "
            f"{git_all_k / 1024:.1f} MB",
        )
    )
    if first_only:
        return rows, info

    # 2. no-change snapshot
    def nochange(t: Tool) -> float:
        w = ws[t.key]
        if t.is_git:
            return timed(seq(w, t.git("add", "-A"), t.git("diff", "--cached", "--quiet")))
        return timed(seq(w, [STRATA, "snapshot", "-m", "x"]))

    rows.append(
        measure(
            Row("no-change snapshot", "s", target="≤ 1.0x git", limit=1.0),
            {t.key: (lambda _, t=t: nochange(t)) for t in TOOLS},
            runs,
        )
    )

    def nochange_commit(t: Tool) -> float:
        w = ws[t.key]

        def steps() -> None:
            run(t.git("add", "-A"), w)
            run(t.git("commit", "-q", "-m", "x"), w, ok=(1,))  # "nothing to commit"

        return timed(steps)

    rows.append(
        measure(
            Row(
                "no-change, git commit attempted",
                "s",
                note="git column runs `git add -A` + `git commit -q -m x` (exit 1, nothing "
                "to commit); information only",
            ),
            {
                "strata": lambda _: nochange(STRATA_TOOL),
                "git": lambda _: nochange_commit(GIT_TOOL),
                "gitfs": lambda _: nochange_commit(GITFS_TOOL),
            },
            runs,
        )
    )

    # 3. incremental snapshot: edit run i (untimed), then snapshot (timed)
    def incremental(t: Tool, i: int) -> float:
        w = ws[t.key]
        edit(w, edits, i, seed)
        if t.is_git:
            return timed(seq(w, t.git("add", "-A"), t.git("commit", "-q", "-m", "x")))
        return timed(seq(w, [STRATA, "snapshot", "-m", "x"]))

    rows.append(
        measure(
            Row(
                f"incremental snapshot ({EDITED_FILES} files edited)",
                "s",
                target="≤ 1.0x git",
                limit=1.0,
            ),
            {t.key: (lambda i, t=t: incremental(t, i + 1)) for t in TOOLS},
            runs,
        )
    )

    # 4. diff of the last two snapshots
    def diff_cli(t: Tool) -> float:
        w = ws[t.key]
        if t.is_git:
            return timed(seq(w, t.git("diff", "HEAD~1", "HEAD", "--stat")))
        return timed(seq(w, [STRATA, "diff", "HEAD~1", "HEAD", "--stat"]))

    rows.append(
        measure(
            Row("diff HEAD~1 HEAD --stat (CLI)", "s"),
            {t.key: (lambda _, t=t: diff_cli(t)) for t in TOOLS},
            runs,
        )
    )
    rows.append(api_diff(ws, max(runs, 20)))

    # profile the incremental snapshot and the rewind (one extra snapshot first)
    if profile is not None and size.name == "large":
        edit(ws["strata"], edits, 10**5, seed)
        profile_cli(ws["strata"], ["snapshot", "-m", "x"], profile / "snapshot.prof")
        profile_cli(ws["strata"], ["rewind", "HEAD~1"], profile / "rewind.prof")

    # 5. rewind one snapshot back (each run goes one further back: 10 files every time)
    def rewind(t: Tool) -> float:
        w = ws[t.key]
        if t.is_git:
            return timed(seq(w, t.git("checkout", "-q", "--detach", "HEAD~1")))
        return timed(seq(w, [STRATA, "rewind", "HEAD~1"]))

    rows.append(
        measure(
            Row("rewind HEAD~1 (10 files)", "s", target="≤ 1.5x git", limit=1.5),
            {t.key: (lambda _, t=t: rewind(t)) for t in TOOLS},
            runs,
        )
    )
    check_same(ws)

    # 6. export HEAD into a new folder
    out = base / "export"

    def export(t: Tool) -> float:
        w = ws[t.key]
        rmtree(out)
        if t.is_git:
            run(t.git("worktree", "prune"), w)
            return timed(seq(w, t.git("worktree", "add", "-q", "--detach", str(out), "HEAD")))
        return timed(seq(w, [STRATA, "export", "HEAD", str(out)]))

    def archive() -> float:
        rmtree(out)
        out.mkdir()
        return timed(seq(ws["git"], f"{GIT} archive HEAD | tar -x -C {out}"))

    rows.append(
        measure(
            Row("export HEAD to a new folder", "s", target="≤ 0.5x git", limit=0.5),
            {t.key: (lambda _, t=t: export(t)) for t in TOOLS},
            first_runs,
        )
    )
    exported = rows[-1]
    rows.append(
        measure(
            Row(
                "export, git archive | tar -x",
                "s",
                {"strata": exported.values["strata"]},
                {"strata": exported.cpu["strata"]},
                note="git column is `git archive HEAD | tar -x -C DIR` (strata column: the "
                "export above); information only",
            ),
            {"git": lambda _: archive()},
            first_runs,
        )
    )
    rmtree(out)
    run(GIT_TOOL.git("worktree", "prune"), ws["git"])

    # 7b. store size at the end, git packed
    start = time.perf_counter()
    run(GIT_TOOL.git("gc", "-q"), ws["git"])
    info["git gc"] = f"{time.perf_counter() - start:.1f} s"
    end_strata = du_k(ws["strata"] / ".strata")
    packed = du_k(ws["git"] / ".git" / "objects")
    rows.append(
        Row(
            "store size at the end, git packed",
            "MB",
            {"strata": [end_strata / 1024], "git": [packed / 1024]},
            note=f"after the incremental snapshots; git column is .git/objects after `git gc` "
            f"(took {info['git gc']}); information only",
        )
    )
    return rows, info


def api_diff(ws: dict[str, Path], n: int) -> Row:
    """``Repository.diff`` in-process against pygit2's diff with stats (both median of ``n``)."""
    import pygit2

    from strata import Repository

    row = Row(
        "diff HEAD~1 HEAD in-process (API)",
        "ms",
        target="strata < 10 ms",
        limit=10.0,
        absolute=True,
    )
    with Repository.open(ws["strata"]) as repo:
        first = []
        for _ in range(n):
            start = time.perf_counter()
            result = repo.diff("HEAD~1", "HEAD")
            _ = result.insertions, result.deletions
            first.append((time.perf_counter() - start) * 1000)
        assert result.files_changed == EDITED_FILES, result.files_changed
    row.values["strata"] = first
    g = pygit2.Repository(str(ws["git"]))
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        d = g.diff("HEAD~1", "HEAD")
        d.find_similar()
        _ = d.stats.insertions
        samples.append((time.perf_counter() - start) * 1000)
    row.values["git"] = samples
    row.note = (
        f"strata: `Repository.diff` + line stats on an open repository, first call "
        f"{first[0]:.2f} ms; git: pygit2 `diff` + `find_similar` + `stats`, first call "
        f"{samples[0]:.2f} ms"
    )
    return row


def check_same(ws: dict[str, Path]) -> None:
    """After the rewinds every workspace holds the same files (a cheap sanity check)."""
    out = {}
    for key, w in ws.items():
        proc = subprocess.run(
            f"find . -path ./.git -prune -o -path ./.strata -prune -o -type f -print0 "
            f"| sort -z | xargs -0 cat | {GIT} hash-object --stdin",
            shell=True,
            cwd=w,
            capture_output=True,
            text=True,
            check=True,
        )
        out[key] = proc.stdout.strip()
    if len(set(out.values())) != 1:
        raise RuntimeError(f"workspaces differ after the rewinds: {out}")


def profile_cli(workspace: Path, args: list[str], dest: Path) -> None:
    """Run one strata command under cProfile in a child process; print its top costs."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.sync()
    cmd = [sys.executable, "-m", "cProfile", "-o", str(dest), "-m", "strata", *args]
    start = time.perf_counter()
    run(cmd, workspace)
    took = time.perf_counter() - start
    buf = io.StringIO()
    pstats.Stats(str(dest), stream=buf).sort_stats("cumulative").print_stats(25)
    log(f"profile of strata {' '.join(args)} ({took:.2f} s under cProfile) -> {dest}")
    print(buf.getvalue(), file=sys.stderr)
    buf = io.StringIO()
    pstats.Stats(str(dest), stream=buf).sort_stats("tottime").print_stats(15)
    print(buf.getvalue(), file=sys.stderr)
    _ = cProfile  # the module is used through ``python -m cProfile``


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def use_rev(rev: str, work: Path) -> str:
    """Benchmark the ``src`` of commit ``rev`` instead of the working tree; return its id.

    The commit is exported under the work folder and put first on ``PYTHONPATH``
    (ahead of the editable install); the launcher is the installed Python
    launcher's code (``strata-py`` beside a native ``strata``), run by this
    interpreter: the commit's own Python client, never the native one.
    """
    global STRATA, STRATA_SRC
    commit = subprocess.run(
        [GIT, "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest = work / f"strata-{commit[:12]}"
    rmtree(dest)
    dest.mkdir(parents=True)
    subprocess.run(
        f"{GIT} -C {ROOT} archive {commit} src | tar -x -C {dest}", shell=True, check=True
    )
    launcher = dest / "strata"
    installed = BIN / "strata-py"  # the Python launcher (``strata`` may be the native client)
    if not installed.exists():
        installed = BIN / "strata"
    if installed.exists():  # what a user runs, with this interpreter
        body = installed.read_text().split("\n", 1)[1]
    else:
        body = "import sys\nfrom strata._entry import run\n\nif __name__ == '__main__':\n"
        body += "    sys.exit(run())\n"
    launcher.write_text(f"#!{sys.executable}\n{body}")
    launcher.chmod(0o755)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src")], check=True)
    STRATA, STRATA_SRC = str(launcher), dest / "src"
    ENV["PYTHONPATH"] = str(STRATA_SRC)
    sys.path.insert(0, str(STRATA_SRC))
    return commit


def client() -> str:
    """Which client the measured ``strata`` command is: native or Python."""
    with open(STRATA, "rb") as f:
        return "native (native/strata.c)" if f.read(4) == b"\x7fELF" else "Python"


def walk() -> str:
    """Which walk the measured code makes: ``strata._walk`` in C where it is built beside it."""
    built = any((STRATA_SRC / "strata").glob("_walk.*.so"))
    return "C (strata._walk, native/walk.c)" if built else "Python"


def describe_src() -> str:
    if STRATA_SRC != ROOT / "src":
        return f"commit {STRATA_SRC.parent.name.removeprefix('strata-')} (exported with --rev)"
    head = subprocess.run(
        [GIT, "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        [GIT, "-C", str(ROOT), "status", "--porcelain", "--", "src"],
        capture_output=True,
        text=True,
    ).stdout
    return f"working tree at {head}" + (" with uncommitted changes in src/" if dirty else "")


def machine() -> dict[str, str]:
    def read(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    df = read(["df", "-T", str(ROOT)]).splitlines()[-1].split()
    return {
        "nproc": read(["nproc"]),
        "cpu": cpu,
        "ram": f"{mem_kb / 2**20:.1f} GiB",
        "fs": f"{df[1]} ({df[0]})",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git": read([GIT, "--version"]),
        "strata": read([STRATA, "--version"]) + f", {describe_src()}",
        "load": _loadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--size",
        choices=("small", "large", "tiny", "both"),
        default="both",
        help="both: small and large; tiny: 20,000 files of 1-2 KB",
    )
    parser.add_argument(
        "--first-only",
        action="store_true",
        help="measure the first snapshot (and the store's size) only",
    )
    parser.add_argument("--runs", type=int, default=5, help="runs of each fast operation")
    parser.add_argument(
        "--first-runs",
        type=int,
        default=0,
        help="runs of the first snapshot and of the export (default 3 small / 2 large)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--work", type=Path, default=HERE / "work", help="default benchmarks/work")
    parser.add_argument(
        "--rev",
        metavar="REV",
        help="benchmark the src/ of this commit (exported) instead of the working tree",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        nargs="?",
        const=HERE / "work" / "profile",
        metavar="DIR",
        help="also profile the large incremental snapshot and rewind with cProfile "
        "(stats files in DIR, default benchmarks/work/profile)",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    sizes = ["small", "large"] if args.size == "both" else [args.size]
    work: Path = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    if args.rev:
        use_rev(args.rev, work)
    m = machine()
    print(f"# Strata vs git snapshots — {datetime.datetime.now().isoformat(timespec='seconds')}")
    print()
    for k, v in m.items():
        print(f"* {k}: {v}")
    print(f"* invocation: {' '.join([sys.executable, *sys.argv])}")
    heavy = args.first_runs or "3 small / 2 large"
    print(f"* runs: {args.runs} (first snapshot and export: {heavy})")
    print()
    run([STRATA, "--help"], work)  # untimed: Python writes its bytecode caches
    version = bench_version(args.runs)
    try:
        for name in sizes:
            size = SIZES[name]
            first_runs = args.first_runs or (3 if name == "small" else 2)
            rows, info = bench_size(
                size,
                work,
                runs=args.runs,
                first_runs=first_runs,
                seed=args.seed,
                profile=args.profile,
                first_only=args.first_only,
            )
            if name == sizes[0]:
                rows.append(version)
            print(table(rows, f"{name}: {info['corpus']}"))
            print()
            print(f"corpus generated in {info['generate']}; samples:")
            print(samples_line(rows))
            print()
            sys.stdout.flush()
            if not args.keep:
                rmtree(work / name)
    finally:
        if not args.keep:
            for name in sizes:
                rmtree(work / name)
            if STRATA_SRC != ROOT / "src":
                rmtree(STRATA_SRC.parent)
    print(f"total wall time {time.perf_counter() - begin:.0f} s")
    print(f"load average at the start: {m['load']}; at the end: {_loadavg()}")


if __name__ == "__main__":
    main()
