"""The write order that makes a crash harmless, checked on the real system calls.

Each test runs a real command (``snapshot``, ``rewind``, ``publish``) under
``strace -f -y`` and reads the order of ``fsync``/``fdatasync``/``syncfs``,
``rename``/``renameat`` and ``unlink`` calls:

* every object file (and its folder) is synced, or the whole file system is,
  before the ledger commit that names it and before the journal that names it;
* the journal is synced, renamed into place and its folder synced before the
  first workspace file is renamed or removed;
* the journal is removed only after the ledger commit (a sync of the ledger).

A SIGKILL test shows a crash is survived at the points it happens to hit;
this shows the order itself, at every point. Needs ``strace`` (``scripts/dev``
installs it) and permission to trace; skipped with the reason otherwise.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import CliRunner, ok

SYSCALLS = "fsync,fdatasync,rename,renameat,renameat2,syncfs,openat,unlink,unlinkat"


def _strace_usable() -> str | None:
    if shutil.which("strace") is None:
        return "strace is not installed (scripts/dev installs it)"
    probe = subprocess.run(
        ["strace", "-f", "-o", "/dev/null", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[:200]}"
    return None


pytestmark = pytest.mark.skipif(_strace_usable() is not None, reason=str(_strace_usable()))


@dataclass(frozen=True)
class Call:
    name: str
    paths: tuple[str, ...]  # the paths it names, fd paths resolved by -y, in argument order


_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)")
_FD_PATH = re.compile(r"\d+<([^>]*)>")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _join(folder: str, name: str) -> str:
    return name if name.startswith("/") else f"{folder}/{name}"


def _parse(text: str) -> list[Call]:
    """The successful calls, in order; ``<unfinished ...>`` halves joined back."""
    pending: dict[str, str] = {}
    calls = []
    for raw in text.splitlines():
        pid, _, rest = raw.partition(" ")
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")]
            continue
        resumed = re.match(r"<\.\.\. \w+ resumed>(.*)", rest.strip())
        if resumed:
            rest = pending.pop(pid, "") + resumed.group(1)
        match = _LINE.match(f"{pid} {rest.strip()}")
        if match is None or int(match.group(4)) < 0:
            continue
        name, args = match.group(2), match.group(3)
        if name in ("fsync", "fdatasync", "syncfs"):
            paths = tuple(_FD_PATH.findall(args)[:1])
        elif name == "rename":
            paths = tuple(_STRING.findall(args)[:2])
        elif name in ("renameat", "renameat2"):  # dirfd<dir>, "old", dirfd<dir>, "new"
            dirs, names = _FD_PATH.findall(args), _STRING.findall(args)
            if len(names) < 2:
                continue
            dirs += [""] * (2 - len(dirs))
            paths = (_join(dirs[0], names[0]), _join(dirs[1], names[1]))
        elif name in ("unlink", "unlinkat"):
            names = _STRING.findall(args)
            dirs = _FD_PATH.findall(args) if name == "unlinkat" else []
            paths = (_join(dirs[0] if dirs else "", names[0]),) if names else ()
        else:
            continue
        calls.append(Call(name, paths))
    return calls


class Trace:
    """The order of one command's calls, with questions about it."""

    def __init__(self, calls: list[Call], ws: Path) -> None:
        self.calls = calls
        self.store = f"{ws}/.strata"
        self.ws = str(ws)

    def where(self, test: object) -> list[int]:
        return [i for i, c in enumerate(self.calls) if test(c)]  # type: ignore[operator]

    def is_sync(self, c: Call) -> bool:
        return c.name in ("fsync", "fdatasync")

    def ledger_syncs(self) -> list[int]:
        return self.where(
            lambda c: self.is_sync(c) and c.paths[0].startswith(f"{self.store}/ledger")
        )

    def objects_made(self) -> list[tuple[int, str]]:
        """(index, path) of each object renamed into place (loose objects and pack files)."""
        made = re.compile(re.escape(self.store) + r"/objects/(?:[0-9a-f]{2}/[0-9a-f]+|pack/.+)$")
        return [
            (i, c.paths[1])
            for i, c in enumerate(self.calls)
            if c.name.startswith("rename") and len(c.paths) == 2 and made.match(c.paths[1])
        ]

    def durable_by(self, path: str, made: int, before: int) -> bool:
        """The file at ``path`` and its folder are synced between ``made`` and ``before``."""
        folder = path.rpartition("/")[0]
        synced: set[str] = set()
        for c in self.calls[made + 1 : before]:
            if c.name == "syncfs":
                return True
            if self.is_sync(c):
                synced.add(c.paths[0])
        return path in synced and folder in synced

    def workspace_writes(self) -> list[int]:
        def in_workspace(c: Call) -> bool:
            if not (c.name.startswith("rename") or c.name.startswith("unlink")):
                return False
            target = c.paths[-1]
            return target.startswith(self.ws + "/") and not target.startswith(self.store)

        return self.where(in_workspace)


def traced(run_cli: CliRunner, ws: Path, *args: str) -> Trace:
    log = ws.parent / "strace.log"
    proc = subprocess.run(
        [
            *("strace", "-f", "-y", "-qq", "-e", f"trace={SYSCALLS}", "-o", str(log)),
            *(sys.executable, "-m", "strata", *args),
        ],
        cwd=ws,
        env=run_cli.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return Trace(_parse(log.read_text(errors="replace")), ws)


def assert_objects_durable_before_named(trace: Trace) -> None:
    made = trace.objects_made()
    assert made, "the command stored no object: the test proves nothing"
    commits = trace.ledger_syncs()
    assert commits, "no ledger commit seen"
    journals = trace.where(
        lambda c: c.name.startswith("rename") and "/.strata/journal/" in c.paths[-1]
    )
    for i, path in made:
        namers = [n for n in [*commits, *journals] if n > i]
        assert namers, f"{path} was stored after the last commit"
        assert trace.durable_by(path, i, min(namers)), (
            f"{path} is not synced (file and folder) before the ledger commit "
            f"or journal that names it"
        )


def assert_journal_first_and_last(trace: Trace) -> None:
    writes = trace.workspace_writes()
    assert writes, "the command wrote no workspace file: the test proves nothing"
    placed = trace.where(
        lambda c: (
            c.name.startswith("rename")
            and re.search(r"/\.strata/journal/[^/.][^/]*\.json$", c.paths[-1]) is not None
        )
    )
    assert placed, "no journal was written"
    journal_at = placed[0]
    journal = trace.calls[journal_at]
    tmp, final = journal.paths
    assert journal_at < writes[0], "a workspace file was written before the journal"
    synced_tmp = trace.where(lambda c: trace.is_sync(c) and c.paths[0] == tmp)
    assert synced_tmp and synced_tmp[0] < journal_at, "the journal was renamed before its fsync"
    folder = final.rpartition("/")[0]
    synced_dir = trace.where(lambda c: trace.is_sync(c) and c.paths[0] == folder)
    assert any(journal_at < s < writes[0] for s in synced_dir), (
        "the journal's folder was not synced between the journal's rename and the first "
        "workspace write"
    )
    removed = trace.where(lambda c: c.name.startswith("unlink") and c.paths == (final,))
    assert removed, "the journal was never removed"
    commits = [s for s in trace.ledger_syncs() if writes[-1] < s]
    assert commits and commits[0] < removed[0], "the journal was removed before the ledger commit"


@pytest.fixture
def recorded(run_cli: CliRunner, ws: Path) -> Path:
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_text("b\n")
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    return ws


def test_snapshot_syncs_objects_before_the_ledger_commit(
    run_cli: CliRunner, recorded: Path
) -> None:
    (recorded / "a.txt").write_text("two\n")
    (recorded / "new.txt").write_text("new\n")
    trace = traced(run_cli, recorded, "snapshot", "-m", "two")
    assert_objects_durable_before_named(trace)


def test_rewind_syncs_objects_then_the_journal_then_writes_then_commits_then_drops_it(
    run_cli: CliRunner, recorded: Path
) -> None:
    (recorded / "a.txt").write_text("two\n")
    ok(run_cli("snapshot", "-m", "two", cwd=recorded))
    (recorded / "a.txt").write_text("unrecorded\n")  # auto-saved: objects in the same command
    (recorded / "c.txt").write_text("c\n")
    trace = traced(run_cli, recorded, "rewind", "HEAD~1")
    assert (recorded / "a.txt").read_text() == "one\n"
    assert_objects_durable_before_named(trace)
    assert_journal_first_and_last(trace)


def test_publish_syncs_objects_then_the_journal_then_writes_then_commits_then_drops_it(
    run_cli: CliRunner, recorded: Path
) -> None:
    ok(run_cli("draft", "start", cwd=recorded))
    draft = recorded / ".strata" / "draft" / "files"
    (draft / "a.txt").write_text("from the draft\n")
    (draft / "added.txt").write_text("added\n")
    (recorded / "sub" / "b.txt").write_text("published meanwhile\n")  # a merge and an auto-save
    trace = traced(run_cli, recorded, "publish")
    assert (recorded / "added.txt").read_text() == "added\n"
    assert_objects_durable_before_named(trace)
    assert_journal_first_and_last(trace)
