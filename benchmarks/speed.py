"""Speed by default: Strata against git, side by side, in the configuration a user gets.

One run measures every row of the speed targets, each as the median of
``--runs`` samples taken in turn from Strata and git (the order alternates
from one run to the next), with the load average recorded when a row's first
sample starts and when its last one ends:

20,000-file corpus (``snapshots.py --size large``, cached under ``--cache``):

* ``incremental``  10 files edited, ``strata snapshot`` vs ``git add -A && git commit``
* ``noop``         ``strata snapshot`` with nothing changed vs ``git status``
* ``status``       ``strata status`` with 10 files edited vs ``git status``
* ``rewind``       ``strata rewind`` to the point before the 10 edits vs ``git checkout``
* ``agent``        one file edited, then ``strata snapshot`` (what a PostToolUse hook
                   runs) vs the same edit, then ``git add -A && git commit``
* ``export``       ``strata export HEAD DIR`` vs ``git archive HEAD | tar -x -C DIR``
* ``run``          ``strata run -- true`` (absolute bound)
* ``draft``        10 files edited in the Draft, ``strata publish`` vs ``git add -A &&
                   git commit`` in a worktree + ``git merge --ff-only``; then the next
                   ``strata draft start`` (absolute bound; ``git checkout -B`` shown)
* ``nowatch``      ``strata snapshot`` with nothing changed, ``STRATA_NO_DAEMON=1`` and
                   no watcher, vs ``git status``

``rewind-5k``: a 5,000-file tree in which every file changed; ``strata rewind``
moves all 5,000 back and forth between the two states (absolute bound; ``git
checkout`` shown): from the second sample on, the watcher takes the files
back from its trash. A second row then rewinds, each sample, to one of
``--runs`` further states never left since they were snapshotted: every
file is written anew.
``click``: the rows above on a real project's tree (``--tree``), each ≤ 2x git.
``memory``: peak resident memory of the first ``strata snapshot`` of an
80,000-file tree (the CLI's processes, and the watcher's if one ran) vs ``git add -A``.

The default configuration is measured: if the first command in a workspace
starts a watcher by itself, it is used as is; otherwise the benchmark starts
``strata watch --daemon --no-capture`` and says so. ``--no-watcher`` measures
with ``STRATA_NO_DAEMON=1`` and no watcher at all. The status, snapshot,
no-op, rewind and agent rows are measured in one loop (each needs the state
the one before left), so naming one of them in ``--rows`` measures all five
and reports the one named. Corpora are generated once
and reused (``--cache``, default /tmp/strata-bench-cache); the workspaces are
fresh copies in ``--work``, deleted at the end unless ``--keep``. Nothing is
downloaded: the ``click`` rows need a tree given with ``--tree`` (see README).

Run:  .venv/bin/python benchmarks/speed.py [--rows incremental,noop,...] [--runs N]
      [--tree PATH] [--no-watcher] [--rev REV | --python-client] [--json [FILE]] [--keep]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import snapshots as sb  # noqa: E402  (corpus, edits, tools, timing, machine, --rev)

GIT = sb.GIT_TOOL
Step = Callable[[], None]
MAIN_ROWS = ("incremental", "noop", "status", "rewind", "agent", "export", "run", "draft")
ALL_ROWS = (*MAIN_ROWS, "nowatch", "rewind-5k", "click", "memory")
SIZES = {
    "large": sb.SIZES["large"],
    "5k": sb.Size("5k", 5_000, 100 * 10**6, (4 * 2**20, 2 * 2**20), 250),
    "80k": sb.Size("80k", 80_000, 320 * 10**6, (8 * 2**20, 4 * 2**20), 3_600),
}


def strata(*args: str) -> list[str]:
    return [sb.STRATA, *args]  # read at call time: ``--rev`` replaces sb.STRATA


def output(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=sb.ENV, capture_output=True, text=True, check=True)
    return proc.stdout


def loadavg() -> str:
    return sb._loadavg()


# -- results ---------------------------------------------------------------------


@dataclass
class Row:
    tree: str
    op: str
    git_op: str = ""  # what the git column runs
    limit: float | None = None  # a ratio to git, or with ``absolute`` strata's seconds
    absolute: bool = False
    strata: list[float] = field(default_factory=list)  # seconds (MB for memory)
    git: list[float] = field(default_factory=list)
    unit: str = "s"
    load: list[str] = field(default_factory=list)  # [before the first sample, after the last]
    note: str = ""

    def add(self, key: str, value: float) -> None:
        if not self.load:
            self.load = [loadavg(), ""]
        (self.strata if key == "strata" else self.git).append(value)
        self.load[1] = loadavg()

    def median(self, key: str) -> float | None:
        values = self.strata if key == "strata" else self.git
        return statistics.median(values) if values else None

    def ratio(self) -> float | None:
        s, g = self.median("strata"), self.median("git")
        return s / g if s is not None and g else None

    def target(self) -> str:
        if self.limit is None:
            return ""
        if self.absolute:
            return f"≤ {self.limit * 1000:.0f} ms" if self.unit == "s" else f"≤ {self.limit} MB"
        return f"≤ {self.limit}x git"

    def met(self) -> str:
        value = self.median("strata") if self.absolute else self.ratio()
        if self.limit is None or value is None:
            return ""
        return "met" if value <= self.limit else "MISSED"

    def as_json(self) -> dict[str, object]:
        return {
            "tree": self.tree,
            "op": self.op,
            "git_op": self.git_op,
            "unit": "ms" if self.unit == "s" else self.unit,
            "strata": self.scaled(self.median("strata")),
            "git": self.scaled(self.median("git")),
            "ratio": self.ratio(),
            "target": self.target(),
            "met": self.met() or None,
            "load_before": self.load[0] if self.load else None,
            "load_after": self.load[1] if self.load else None,
            "strata_samples": [self.scaled(v) for v in self.strata],
            "git_samples": [self.scaled(v) for v in self.git],
            "note": self.note,
        }

    def scaled(self, value: float | None) -> float | None:
        if value is None:
            return None
        return round(value * 1000, 1) if self.unit == "s" else round(value, 1)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "MB":
        return f"{value:.0f} MB"
    return f"{value * 1000:.1f} ms" if value < 0.01 else f"{value * 1000:.0f} ms"


def table(rows: list[Row]) -> str:
    head = ["tree", "operation", "strata", "git", "git runs", "ratio", "target", "met"]
    head.append("load (1 min) before → after")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio = r.ratio()
        cells = [
            r.tree,
            r.op,
            fmt(r.median("strata"), r.unit),
            fmt(r.median("git"), r.unit),
            f"`{r.git_op}`" if r.git_op else "",
            f"{ratio:.2f}x" if ratio is not None else "—",
            r.target(),
            r.met(),
            " → ".join(load.split()[0] for load in r.load),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    notes = [f"* {r.tree}, {r.op}: {r.note}" for r in rows if r.note]
    return "\n".join(lines + (["", *notes] if notes else []))


# -- corpora and workspaces ----------------------------------------------------------


def cached_corpus(cache: Path, size: sb.Size, seed: int) -> tuple[Path, list[sb.File]]:
    """The pristine corpus of ``size`` under ``cache``, generated on first use."""
    files = sb.plan_corpus(size, seed)
    path = cache / f"corpus-{size.name}-seed{seed}"
    done = path.with_name(path.name + ".done")
    if not done.exists():
        sb.rmtree(path)
        sb.log(f"generating the {size.name} corpus ({size.files} files) in {path}")
        sb.write_corpus(path, files, seed)
        done.touch()
    for leftover in (".strata", ".git"):  # a run cut short may have left one
        sb.rmtree(path / leftover)
    return path, files


def git_template(cache: Path, corpus: Path) -> Path:
    """``corpus`` committed once by git (its first commit is slow), cached beside it."""
    path = corpus.with_name(corpus.name + "-git")
    done = path.with_name(path.name + ".done")
    if not done.exists():
        sb.rmtree(path)
        subprocess.run(["cp", "-a", str(corpus), str(path)], check=True)
        git_commit_all(path, init=True)
        done.touch()
    return path


def git_commit_all(path: Path, *, init: bool = False) -> None:
    if init:
        sb.run(GIT.git("init", "-q"), path)
    sb.run(GIT.git("add", "-A"), path)
    sb.run(GIT.git("commit", "-q", "-m", "x"), path)


def tree_files(root: Path) -> list[sb.File]:
    """Every file of a real tree as the corpus describes its own (text or binary, size)."""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in (".git", ".strata"))
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            head = path.read_bytes()[:8000]
            rel = path.relative_to(root).as_posix()
            files.append(sb.File(rel, b"\0" in head, path.stat().st_size))
    return files


def pick_edits(files: list[sb.File], seed: int) -> list[sb.File]:
    """The corpus's 10 edited files; in a tree with too few binary files, 10 text files."""
    try:
        return sb.pick_edits(files, seed)
    except ValueError:
        text = [f for f in files if not f.binary and 200 < f.size < 2**20]
        return random.Random(f"{seed}-edits").sample(text, min(sb.EDITED_FILES, len(text)))


@dataclass
class Pair:
    """One Strata workspace and one git work tree holding the same files."""

    name: str
    strata: Path
    git: Path
    files: list[sb.File]
    watcher: str = ""

    def head(self) -> tuple[str, str]:
        status = json.loads(output(strata("status", "--json"), self.strata))
        git_head = output(GIT.git("rev-parse", "HEAD"), self.git).strip()
        return status["head_event_id"], git_head


def make_pair(work: Path, name: str, source: Path, files: list[sb.File], git_src: Path | None):
    """Copy ``source`` into a Strata workspace (init + first snapshot) and a git work tree."""
    base = work / name
    sb.rmtree(base)
    base.mkdir(parents=True)
    pair = Pair(name, base / "strata", base / "git", files)
    sb.log(f"{name}: copying the tree into two workspaces")
    subprocess.run(["cp", "-a", str(source), str(pair.strata)], check=True)
    subprocess.run(["cp", "-a", str(git_src or source), str(pair.git)], check=True)
    for leftover in (".git", ".strata"):
        sb.rmtree(pair.strata / leftover)
    if git_src is None:
        sb.rmtree(pair.git / ".git")
        git_commit_all(pair.git, init=True)
    sb.run(GIT.git("status"), pair.git)  # untimed: git refreshes the copy's index once
    sb.run(strata("init"), pair.strata)
    sb.run(strata("snapshot", "-m", "x"), pair.strata)
    return pair


def watcher_running(ws: Path) -> bool:
    proc = subprocess.run(
        strata("watch", "--status", "--json"), cwd=ws, env=sb.ENV, capture_output=True, text=True
    )
    try:
        return bool(json.loads(proc.stdout).get("running"))
    except ValueError:
        return False


def start_watcher(ws: Path, *, no_watcher: bool) -> str:
    """Put ``ws`` in the configuration measured; say which it is."""
    if no_watcher:
        stop_watcher(ws)
        return "none (STRATA_NO_DAEMON=1)"
    sb.run(strata("status"), ws)  # a first command: a self-starting watcher starts here
    for _ in range(10):
        if watcher_running(ws):
            return "self-started"
        time.sleep(0.1)
    sb.run(strata("watch", "--daemon", "--no-capture"), ws)
    sb.run(strata("snapshot"), ws)  # a fresh watcher's token saved
    return "started by the benchmark (`strata watch --daemon --no-capture`)"


def stop_watcher(ws: Path) -> None:
    if (ws / ".strata").exists():
        subprocess.run(strata("watch", "--stop"), cwd=ws, env=sb.ENV, capture_output=True)


@contextmanager
def no_daemon() -> Iterator[None]:
    old = sb.ENV.get("STRATA_NO_DAEMON")
    sb.ENV["STRATA_NO_DAEMON"] = "1"
    try:
        yield
    finally:
        if old is None:
            del sb.ENV["STRATA_NO_DAEMON"]
        else:
            sb.ENV["STRATA_NO_DAEMON"] = old


# -- the rows --------------------------------------------------------------------------


@dataclass
class Bench:
    runs: int
    heavy_runs: int
    seed: int
    no_watcher: bool
    rows: list[Row] = field(default_factory=list)
    watchers: dict[str, str] = field(default_factory=dict)

    def sample(
        self, row: Row, i: int, strata_step: Step, git_step: Step, *, prepare: Step | None = None
    ) -> None:
        """One timed sample of each tool, in an order that alternates with ``i``.

        ``prepare`` runs, untimed, before each tool's sample.
        """
        steps = [("strata", strata_step), ("git", git_step)]
        for key, step in steps if i % 2 == 0 else steps[::-1]:
            if prepare is not None:
                prepare()
            row.add(key, sb.timed(step))

    def tree_rows(self, pair: Pair, wanted: set[str], limits: dict[str, float]) -> None:
        """The rows measured on one tree; ``limits`` maps a row to its target."""
        st, gt, name = pair.strata, pair.git, pair.name
        edits = pick_edits(pair.files, self.seed)
        n = len(edits)
        pair.watcher = self.watchers[name] = start_watcher(st, no_watcher=self.no_watcher)

        def row(key: str, op: str, git_op: str = "") -> Row:
            return Row(name, op, git_op, limits.get(key))

        loop = {
            "status": row("status", f"status, {n} files edited", "git status"),
            "incremental": row(
                "incremental", f"incremental snapshot, {n} files", "git add -A && git commit"
            ),
            "noop": row("noop", "no-op snapshot", "git status"),
            "rewind": row("rewind", f"rewind {n} files", "git checkout -q --detach"),
            "agent": row(
                "agent", "agent loop: edit 1 file + snapshot", "edit + git add -A && git commit"
            ),
        }
        if wanted & set(loop):
            commit = GIT.git("add", "-A"), GIT.git("commit", "-q", "-m", "x")
            # one untimed round first: a fresh watcher's first snapshot loads what it needs
            for ws, cmds in ((st, [strata("snapshot", "-m", "x")]), (gt, commit)):
                sb.edit(ws, edits, 0, self.seed)
                sb.seq(ws, *cmds)()
            for i in range(self.runs):
                edit_no = 2 * i + 1
                before = pair.head()
                sb.edit(st, edits, edit_no, self.seed)
                sb.edit(gt, edits, edit_no, self.seed)
                self.sample(
                    loop["status"],
                    i,
                    sb.seq(st, strata("status")),
                    sb.seq(gt, GIT.git("status")),
                )
                self.sample(
                    loop["incremental"],
                    i,
                    sb.seq(st, strata("snapshot", "-m", "x")),
                    sb.seq(gt, *commit),
                )
                self.sample(
                    loop["noop"],
                    i,
                    sb.seq(st, strata("snapshot", "-m", "x")),
                    sb.seq(gt, GIT.git("status")),
                )
                self.sample(
                    loop["rewind"],
                    i,
                    sb.seq(st, strata("rewind", before[0])),
                    sb.seq(gt, GIT.git("checkout", "-q", "--detach", before[1])),
                )

                def agent(ws: Path, *cmds: sb.Command, no: int = edit_no + 1) -> Step:
                    def steps() -> None:
                        sb.edit(ws, edits[:1], no, self.seed)
                        sb.seq(ws, *cmds)()

                    return steps

                self.sample(
                    loop["agent"],
                    i,
                    agent(st, strata("snapshot", "-m", "Edit")),
                    agent(gt, *commit),
                )
                sb.log(f"{name}: snapshot/status/rewind/agent run {i + 1}/{self.runs}")
            for key, r in loop.items():
                if key in wanted:
                    self.rows.append(r)
            sb.check_same({"strata": st, "git": gt})
        if "export" in wanted:
            self.export_row(pair, row("export", "export HEAD", "git archive HEAD | tar -x"))
        if "run" in wanted:
            r = Row(name, "strata run -- true", "", limits.get("run"), absolute=True)
            for _ in range(self.runs):
                r.add("strata", sb.timed(sb.seq(st, strata("run", "--", "true"))))
            self.rows.append(r)
        if "draft" in wanted:
            self.draft_rows(pair, edits, limits)
        if "nowatch" in wanted:
            r = row("nowatch", "no-op snapshot, no watcher (STRATA_NO_DAEMON=1)", "git status")
            stop_watcher(st)
            with no_daemon():
                for i in range(self.runs):
                    self.sample(
                        r,
                        i,
                        sb.seq(st, strata("snapshot", "-m", "x")),
                        sb.seq(gt, GIT.git("status")),
                    )
            self.rows.append(r)
        stop_watcher(st)

    def export_row(self, pair: Pair, r: Row) -> None:
        out = pair.strata.parent / "export"

        def strata_export() -> None:
            sb.run(strata("export", "HEAD", str(out)), pair.strata)

        def git_export() -> None:
            out.mkdir()
            sb.run(f"{sb.GIT} archive HEAD | tar -x -C {out}", pair.git)

        for i in range(self.heavy_runs):
            self.sample(r, i, strata_export, git_export, prepare=lambda: sb.rmtree(out))
            sb.log(f"{pair.name}: export run {i + 1}/{self.heavy_runs}")
        sb.rmtree(out)
        self.rows.append(r)

    def draft_rows(self, pair: Pair, edits: list[sb.File], limits: dict[str, float]) -> None:
        st, gt, name = pair.strata, pair.git, pair.name
        worktree = gt.parent / "worktree"
        first = Row(name, "first draft start (information)", "git worktree add")
        started: dict[str, str] = {}
        sb.run(GIT.git("checkout", "-q", "-B", "main"), gt)  # the rewind rows left HEAD detached

        def start() -> None:
            info = json.loads(output(strata("draft", "start", "--json"), st))
            started["path"] = info["path"]

        first.add("strata", sb.timed(start))
        first.add(
            "git", sb.timed(sb.seq(gt, GIT.git("worktree", "add", "-q", "-b", "x", str(worktree))))
        )
        draft = Path(started["path"])
        publish = Row(
            name,
            f"Draft publish, {len(edits)} files edited",
            "git add -A && git commit in a worktree + git merge --ff-only",
            limits.get("draft"),
        )
        next_start = Row(
            name,
            "next draft start",
            "git checkout -B in the worktree",
            limits.get("draft-start"),
            absolute=name != "click",
        )
        for i in range(self.runs):
            sb.edit(draft, edits, 1000 + i, self.seed)
            sb.edit(worktree, edits, 1000 + i, self.seed)

            def merge() -> None:
                git_commit_all(worktree)
                sb.run(GIT.git("merge", "-q", "--ff-only", "x"), gt)

            self.sample(publish, i, sb.seq(st, strata("publish")), merge)
            self.sample(
                next_start,
                i,
                start,
                sb.seq(worktree, GIT.git("checkout", "-q", "-B", "x", "main")),
            )
            draft = Path(started["path"])
            sb.log(f"{name}: draft run {i + 1}/{self.runs}")
        sb.run(strata("discard"), st)
        self.rows += [first, publish, next_start]

    def rewind_all(self, work: Path, cache: Path) -> None:
        size = SIZES["5k"]
        corpus, files = cached_corpus(cache, size, self.seed)
        pair = make_pair(work, "5k", corpus, files, git_template(cache, corpus))
        self.watchers["5k"] = start_watcher(pair.strata, no_watcher=self.no_watcher)
        a = pair.head()
        for ws in (pair.strata, pair.git):
            for f in files:
                with open(ws / f.path, "ab") as out:
                    out.write(b"\nchanged\n")
        sb.run(strata("snapshot", "-m", "all"), pair.strata)
        git_commit_all(pair.git)
        b = pair.head()
        r = Row("5k", f"rewind all {len(files)} files", "git checkout -q --detach", 1.0, True)
        for i in range(self.runs):
            to = a if i % 2 == 0 else b
            self.sample(
                r,
                i,
                sb.seq(pair.strata, strata("rewind", to[0])),
                sb.seq(pair.git, GIT.git("checkout", "-q", "--detach", to[1])),
            )
            sb.log(
                f"5k: rewind run {i + 1}/{self.runs}: strata {r.strata[-1] * 1000:.0f} ms, "
                f"git {r.git[-1] * 1000:.0f} ms"
            )
        self.rows.append(r)
        # each sample to a state this workspace never left: nothing in the trash to take back,
        # every file written anew (as git writes them)
        states = []
        for n in range(self.runs):
            for ws in (pair.strata, pair.git):
                for f in files:
                    with open(ws / f.path, "ab") as out:
                        out.write(f"state {n}\n".encode())
            sb.run(strata("snapshot", "-m", f"state {n}"), pair.strata)
            git_commit_all(pair.git)
            states.append(pair.head())
        fresh = Row(
            "5k",
            f"rewind all {len(files)} files, each to a state never left",
            "git checkout -q --detach",
            1.0,
            True,
        )
        for i, to in enumerate([*states[-2::-1], a]):
            self.sample(
                fresh,
                i,
                sb.seq(pair.strata, strata("rewind", to[0])),
                sb.seq(pair.git, GIT.git("checkout", "-q", "--detach", to[1])),
            )
            sb.log(
                f"5k: fresh rewind run {i + 1}/{self.runs}: strata "
                f"{fresh.strata[-1] * 1000:.0f} ms, git {fresh.git[-1] * 1000:.0f} ms"
            )
        stop_watcher(pair.strata)
        self.rows.append(fresh)

    def memory(self, cache: Path) -> None:
        """Peak RSS of the first snapshot of the 80k tree (in place in the cache) and git add."""
        size = SIZES["80k"]
        corpus, _ = cached_corpus(cache, size, self.seed)
        r = Row("80k", "peak memory, first snapshot", "git add -A", 100.0, True, unit="MB")
        try:
            sb.run(strata("init", "--no-snapshot"), corpus)
            seconds, peak = peak_rss(strata("snapshot", "-m", "x"), corpus)
            hwm = watcher_hwm(corpus)
            r.load = [loadavg(), ""]
            r.strata.append(max(peak, hwm or 0.0))
            stop_watcher(corpus)
            sb.rmtree(corpus / ".strata")
            sb.run(GIT.git("init", "-q"), corpus)
            git_seconds, git_peak = peak_rss(GIT.git("add", "-A"), corpus)
            r.git.append(git_peak)
            r.load[1] = loadavg()
            watcher = f"{hwm:.0f} MB" if hwm is not None else "no watcher ran"
            r.note = (
                f"{size.files} files, {size.total / 1e6:.0f} MB; strata CLI {peak:.0f} MB, "
                f"watcher {watcher} ({seconds:.1f} s); git add -A {git_seconds:.1f} s"
            )
        finally:
            stop_watcher(corpus)
            sb.rmtree(corpus / ".strata")
            sb.rmtree(corpus / ".git")
        self.rows.append(r)


def peak_rss(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak resident MB of ``cmd`` and the children it waited for."""
    os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=sb.ENV, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{cmd!r} exited {proc.returncode}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def watcher_hwm(ws: Path) -> float | None:
    """The peak resident MB of the watcher running in ``ws``, if one runs."""
    proc = subprocess.run(
        strata("watch", "--status", "--json"), cwd=ws, env=sb.ENV, capture_output=True, text=True
    )
    try:
        pid = json.loads(proc.stdout).get("pid")
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (ValueError, OSError):
        pass
    return None


# -- main ----------------------------------------------------------------------------

LARGE_LIMITS = {
    "incremental": 0.3,
    "noop": 0.5,
    "status": 0.5,
    "rewind": 1.0,
    "agent": 0.5,
    "export": 0.7,
    "nowatch": 2.0,
    "draft": 2.0,
    "draft-start": 0.5,
    "run": 0.1,
}
CLICK_LIMITS = {key: 2.0 for key in LARGE_LIMITS} | {"run": 0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows",
        default=",".join(ALL_ROWS),
        help=f"comma-separated subset of: {', '.join(ALL_ROWS)} (default: all)",
    )
    parser.add_argument("--runs", type=int, default=5, help="samples of each row (default 5)")
    parser.add_argument(
        "--heavy-runs", type=int, default=3, help="samples of the export rows (default 3)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tree", type=Path, help="a real project's tree for the click rows")
    parser.add_argument("--no-watcher", action="store_true", help="STRATA_NO_DAEMON=1, no watcher")
    parser.add_argument("--rev", help="benchmark the src/ of this commit instead (exported)")
    parser.add_argument(
        "--python-client",
        action="store_true",
        help="run strata-py, the Python launcher, instead of the native client",
    )
    parser.add_argument("--cache", type=Path, default=Path("/tmp/strata-bench-cache"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-speed"))
    parser.add_argument("--keep", action="store_true", help="keep the workspaces")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the results as JSON to FILE (no FILE: to stdout, instead of Markdown)",
    )
    args = parser.parse_args()
    wanted = set(args.rows.split(","))
    if unknown := wanted - set(ALL_ROWS):
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    if args.runs < 1 or args.heavy_runs < 1:
        parser.error("--runs and --heavy-runs must be at least 1")
    if "click" in wanted and args.tree is None:
        sb.log("no --tree given: the click rows are skipped (see benchmarks/README.md)")
        wanted.discard("click")
    work, cache = args.work.resolve(), args.cache.resolve()
    work.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    if args.rev:
        sb.use_rev(args.rev, work)
    elif args.python_client:
        sb.STRATA = str(sb.BIN / "strata-py")
    if args.no_watcher:
        sb.ENV["STRATA_NO_DAEMON"] = "1"
    began = time.perf_counter()
    machine = sb.machine()
    client = sb.client()  # (before a --rev export is deleted)
    walk = sb.walk()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    sb.run(strata("--help"), work)  # untimed: Python writes its bytecode caches
    bench = Bench(args.runs, args.heavy_runs, args.seed, args.no_watcher)
    try:
        if wanted & {*MAIN_ROWS, "nowatch"}:
            corpus, files = cached_corpus(cache, SIZES["large"], args.seed)
            pair = make_pair(work, "20k", corpus, files, git_template(cache, corpus))
            bench.tree_rows(pair, wanted, LARGE_LIMITS)
            if not args.keep:
                sb.rmtree(work / "20k")
        if "rewind-5k" in wanted:
            bench.rewind_all(work, cache)
        if "click" in wanted:
            tree = args.tree.resolve()
            pair = make_pair(work, "click", tree, tree_files(tree), None)
            bench.tree_rows(pair, set(MAIN_ROWS) | {"nowatch"}, CLICK_LIMITS)
        if "memory" in wanted:
            bench.memory(cache)
    finally:
        if not args.keep:
            for name in ("20k", "5k", "click"):
                stop_watcher(work / name / "strata")
                sb.rmtree(work / name)
            if sb.STRATA_SRC != sb.ROOT / "src":  # the commit exported by --rev
                sb.rmtree(sb.STRATA_SRC.parent)
    report = {
        "schema": 1,
        "date": now,
        "machine": machine,
        "invocation": " ".join([sys.executable, *sys.argv]),
        "client": client,
        "walk": walk,
        "runs": args.runs,
        "watcher": bench.watchers,
        "load_end": loadavg(),
        "wall_s": round(time.perf_counter() - began),
        "rows": [r.as_json() for r in bench.rows],
    }
    if args.json and args.json != "-":
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.json == "-":
        print(json.dumps(report, indent=2))
        return
    print(f"# Speed by default — {now}")
    print()
    for k, v in machine.items():
        print(f"* {k}: {v}")
    print(f"* invocation: {report['invocation']}")
    print(f"* client: {report['client']}")
    print(f"* walk: {report['walk']}")
    print(f"* runs: {args.runs} (export: {args.heavy_runs}); medians")
    for tree, how in bench.watchers.items():
        print(f"* watcher in the {tree} workspace: {how}")
    print()
    print(table(bench.rows))
    print()
    print(f"total wall time {report['wall_s']} s; load average at the end: {report['load_end']}")


if __name__ == "__main__":
    main()
