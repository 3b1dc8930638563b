"""Real crashes of ``strata gc`` and ``strata repack``: SIGKILL at every distinct write step.

One repository is built once: three packs, loose objects, a bookmark, a
checkpoint, and daily snapshots over 40 days of a fake clock, so that gc, run
100 days later, thins most of them, deletes loose objects and rewrites packs.
The steps (every fsync, rename, unlink, ...) of an uninterrupted gc and
repack are recorded with ``tests/crash_child.py``; each copy of the repository
is then killed at one step, and a fresh process must find it sound:
``strata check`` passes, every snapshot the command keeps restores byte for
byte, and running the command again finishes with the same objects stored as
an uninterrupted run.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import NOW_MS, TESTER, CliRunner, read_manifest
from strata import ObjectMissing, Repository, SnapshotPruned
from strata.layout import load_config
from strata.store.objects import DiskObjectStore
from test_crash import Step, kill_at_step, record_steps

pytestmark = pytest.mark.slow

DAY = 86_400_000
HOUR = DAY // 24
#: every command runs at NOW_MS (STRATA_NOW); the first snapshot is 100 days older
START = NOW_MS - 100 * DAY
RETENTION = """
[retention]
keep_all_days = 14
hourly_days = 30
daily_days = 60
keep_operations = 0
prune_grace_minutes = 60
"""
#: when each snapshot is taken (days after START): 0-40 are past daily_days (thinned
#: unless protected), 40.01-59 one a day, 72-80 one an hour (72 + 10 minutes is
#: thinned), 88-99 every one kept
SNAPSHOT_DAYS = (0, 2, 3, 5, 12, 25, 40, 40.01, 41, 55, 72, 72 + 1 / 144, 72.5, 80, 88, 95, 99)
#: these snapshots bring > 64 new objects each, so each writes a pack
PACKED = {0: "early", 12: "middle", 55: "late"}
BOOKMARKED = 3
GC = ["gc", "--grace", "0"]
REPACK = ["repack"]


class Clock:
    """A clock the test moves by hand (one millisecond a call)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _batch(tag: str, n: int) -> dict[str, bytes]:
    return {f"{tag}/f{i:03}.txt": f"{tag} {i}\n".encode() * (1 + i % 5) for i in range(n)}


def build(ws: Path) -> dict[str, dict[str, Any]]:
    """The repository; event id -> the files of its snapshot."""
    ws.mkdir(parents=True)
    clock = Clock()
    states: dict[str, dict[str, Any]] = {}
    repo = Repository.init(ws, clock=clock, author=TESTER)
    try:
        with repo.layout.config.open("a", encoding="utf-8") as f:
            f.write(RETENTION)
        repo.config = load_config(repo.layout)
        for n, day in enumerate(SNAPSHOT_DAYS):
            clock.now = START + round(day * DAY)
            files: dict[str, bytes] = {"day.txt": f"day {day}\n".encode()}
            if day in PACKED:
                tag = PACKED[day]
                files.update(_batch(f"kept-{tag}", 40))  # in every later snapshot: live
                files.update(_batch(f"only-{tag}", 40))  # gone the next time: dead if thinned
            files[f"loose-{n}.bin"] = os.urandom(300)  # a loose blob of this snapshot only
            for rel, data in files.items():
                (ws / rel).parent.mkdir(parents=True, exist_ok=True)
                (ws / rel).write_bytes(data)
            event = repo.snapshot(f"day {day}").event
            assert event is not None
            states[event.id] = read_manifest(ws)
            (ws / f"loose-{n}.bin").unlink()
            if day in PACKED:
                shutil.rmtree(ws / f"only-{PACKED[day]}")
        repo.bookmark("add", "keep", ref=list(states)[SNAPSHOT_DAYS.index(BOOKMARKED)])
        repo.checkpoints.create("known good")  # HEAD, the last snapshot
        store = repo.objects
        assert isinstance(store, DiskObjectStore)
        assert len(store.packs()) == 3 and sum(1 for _ in store.loose_ids()) > 40
    finally:
        repo.close()
    return states


def stored_ids(ws: Path) -> set[str]:
    with Repository.open(ws) as repo:
        return set(repo.objects.ids())


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("gc-crash")
    ws = base / "ws"
    states = build(ws)
    # the packs and loose objects must look old enough to any grace period
    old = time.time() - 7 * 86_400
    for path in (ws / ".strata").rglob("*"):
        os.utime(path, (old, old), follow_symlinks=False)
    return ws, states


def strata(args: list[str], cwd: Path) -> Any:
    """Run ``strata ARGS`` in a fresh process; it must succeed. Its JSON output, if any."""
    env = CliRunner(cwd).env()
    proc = subprocess.run(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout) if "--json" in args else None


def kill_points(steps: list[Step]) -> list[int]:
    """The steps to kill at: each distinct step, not each object.

    Steps are alike when they call the same function on the same kind of path
    (a loose object, a pack file, the ledger, ...). Of each run of alike steps
    the kill points are its first (none of the run done), its second (one
    done), its middle and its last (all but one done): killing amid the
    deletion of 200 loose objects at one of them is killing at any of them. Killing at step N
    stops the command just *before* step N. (What fsync guards against, a
    machine losing power, SIGKILL cannot show.)
    """

    def kind(step: Step) -> tuple[str, str]:
        rel = (step.paths[-1] if step.paths else "").split("/.strata/", 1)[-1].split("/")
        if rel[0] == "objects" and len(rel) > 2:
            return step.func, "loose" if len(rel[1]) == 2 else rel[1]
        return step.func, rel[0]

    runs: list[list[int]] = []
    for number, step in enumerate(steps, 1):
        if runs and kind(steps[runs[-1][0] - 1]) == kind(step):
            runs[-1].append(number)
        else:
            runs.append([number])
    points = sorted(
        {p for run in runs for p in (run[0], run[1 % len(run)], run[len(run) // 2], run[-1])}
    )
    # an fsync changes nothing another process sees: killing just after one is killing
    # just before it, so of the points with the same changes done only the first is kept
    done = list(itertools.accumulate((s.func != "fsync" for s in steps), initial=0))
    distinct: dict[int, int] = {}
    for point in points:
        distinct.setdefault(done[point - 1], point)
    return sorted(distinct.values())


def dead_writer_files(ws: Path) -> list[str]:
    """Files a killed writer leaves in the store: temp files, packs without an index."""
    objects = ws / ".strata" / "objects"
    found = [p for p in objects.rglob("*") if p.is_file() and p.name.startswith(".")]
    found += [p for p in objects.glob("packs/*.pack") if not p.with_suffix(".idx").exists()]
    found += list((objects / "tmp").glob("*"))
    return sorted(str(p.relative_to(objects)) for p in found)


@pytest.fixture(scope="module")
def outcomes(
    template: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[list[Step], set[str], set[str]]]:
    """Per command: its steps, the objects stored after it and the events it keeps."""
    ws, states = template
    base = tmp_path_factory.mktemp("gc-crash-probe")
    found = {}
    for args in (GC, REPACK):
        probe = base / args[0]
        shutil.copytree(ws, probe, symlinks=True)
        steps = record_steps(args, probe)
        with Repository.open(probe) as repo:
            assert repo.check() == []
            ids = set(repo.objects.ids())
            kept = set()
            for event_id in states:
                try:
                    repo.export(event_id, base / "out")
                except SnapshotPruned:
                    continue
                finally:
                    shutil.rmtree(base / "out", ignore_errors=True)
                kept.add(event_id)
        found[args[0]] = (steps, ids, kept)
    # repack keeps every snapshot; gc thins the old ones but keeps the bookmarked one
    assert found["repack"][2] == set(states)
    thinned = {0, 2, 5, 12, 25, 40, 72}  # 72 + 10 minutes is the newest of its hour
    kept_days = {
        day
        for day, event_id in zip(SNAPSHOT_DAYS, states, strict=True)
        if event_id in found["gc"][2]
    }
    assert kept_days == set(SNAPSHOT_DAYS) - thinned
    return found


def amid_pack_removal(step: Step) -> bool:
    return step.func == "unlink" and "/objects/packs/" in step.paths[0]


def assert_sound_after_kill(
    ws: Path, states: dict[str, Any], kept: set[str], out: Path, killed_at: Step
) -> None:
    """``strata check`` passes and every snapshot the command keeps restores byte for byte.

    A snapshot the command removes may still restore (it was not deleted yet)
    or say it was pruned; only a gc killed between the removal of two old
    packs may leave one half there (check knows it was pruned: the next gc
    finishes it).
    """
    check = strata(["check", "--json"], ws)
    assert check["ok"] is True, check
    with Repository.open(ws) as repo:
        for event_id, files in states.items():
            target = out / event_id
            try:
                repo.export(event_id, target)
            except SnapshotPruned:
                assert event_id not in kept, f"the kept snapshot of {event_id} was removed"
                continue
            except ObjectMissing:
                assert event_id not in kept, f"the kept snapshot of {event_id} lost objects"
                assert amid_pack_removal(killed_at), f"{event_id} half removed"
                continue
            assert read_manifest(target) == files, f"event {event_id} restores other files"
            shutil.rmtree(target)


@pytest.mark.parametrize("command", [GC, REPACK], ids=["gc", "repack"])
def test_killed_at_every_step_leaves_a_sound_repository_and_the_rerun_finishes(
    command: list[str],
    template: tuple[Path, dict[str, Any]],
    outcomes: dict[str, tuple[list[Step], set[str], set[str]]],
    tmp_path: Path,
) -> None:
    template_ws, states = template
    steps, ids_after, kept = outcomes[command[0]]
    points = kill_points(steps)
    seen = []
    for point in points:
        run = tmp_path / f"kill{point}"
        ws = run / "ws"
        shutil.copytree(template_ws, ws, symlinks=True)
        seen.append(kill_at_step(command, ws, point))
        assert_sound_after_kill(ws, states, kept, run / "out", seen[-1])
        # running it again finishes the job: the same objects as an uninterrupted run
        strata(command, ws)
        assert dead_writer_files(ws) == [], f"killed at {seen[-1]}: leftovers stay"
        with Repository.open(ws) as repo:
            assert repo.check() == [], f"killed at {seen[-1]}"
            store = repo.objects
            assert isinstance(store, DiskObjectStore)
            assert set(store.ids()) == ids_after, f"killed at {seen[-1]}: other objects stored"
            if command == REPACK:
                assert len(store.packs()) == 1 and not list(store.loose_ids())
        shutil.rmtree(run)
    # killed while writing the new pack, amid removing the old ones and the loose objects
    assert any(s.func == "fsync" for s in seen)
    assert any(amid_pack_removal(s) for s in seen)
    assert any(s.func == "unlink" and "/objects/packs/" not in s.paths[0] for s in seen)
