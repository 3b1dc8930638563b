"""The storage lifecycle: ``strata gc`` (retention), ``strata repack``, ``strata du``.

Repositories here spread their events over a fake clock (days apart), so the
retention tiers have something to thin; gc runs with no grace period unless a
test is about the grace period.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    NOW_MS,
    CliRunner,
    Person,
    as_json,
    assert_user_error,
    ok,
    read_manifest,
)
from strata import Repository, SnapshotPruned
from strata.errors import RepositoryLocked
from strata.layout import load_config
from strata.store.objects import DiskObjectStore, hash_bytes

DAY = 86_400_000
RETENTION = """
[retention]
keep_all_days = 14
hourly_days = 30
daily_days = 60
keep_operations = 0
"""


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: int = NOW_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        self.now += 1
        return self.now


def with_retention(repo: Repository, text: str = RETENTION) -> None:
    with repo.layout.config.open("a", encoding="utf-8") as f:
        f.write(text)
    repo.config = load_config(repo.layout)


def spread(repo: Repository, ws: Path, clock: Clock, days: int) -> dict[str, dict[str, Any]]:
    """One snapshot a day for ``days`` days, each with a file of its own; event id -> files."""
    states: dict[str, dict[str, Any]] = {}
    for day in range(days):
        clock.now = NOW_MS + day * DAY
        (ws / "day.txt").write_text(f"day {day}\n")
        (ws / f"only-{day}.bin").write_bytes(os.urandom(200))
        result = repo.snapshot(f"day {day}")
        assert result.event is not None
        states[result.event.id] = read_manifest(ws)
        (ws / f"only-{day}.bin").unlink()
    return states


def files_of(repo: Repository, ref: str, tmp: Path) -> dict[str, Any]:
    target = tmp / f"export-{ref}"
    shutil.rmtree(target, ignore_errors=True)
    repo.export(ref, target)
    return read_manifest(target)


def repo_files(repo: Repository) -> dict[str, int]:
    return {
        str(p.relative_to(repo.layout.repo)): p.stat().st_size
        for p in repo.layout.repo.rglob("*")
        if p.is_file() and p.name != "lock"
    }


@pytest.fixture
def aged(ws: Path, make_repo: Callable[..., Repository]) -> tuple[Repository, Clock, dict]:
    clock = Clock()
    repo = make_repo(ws, clock=clock)
    with_retention(repo)
    states = spread(repo, ws, clock, 40)
    clock.now = NOW_MS + 40 * DAY
    return repo, clock, states


def test_gc_thins_old_snapshots_and_keeps_what_refs_protect(
    aged: tuple[Repository, Clock, dict], ws: Path, tmp_path: Path
) -> None:
    repo, clock, states = aged
    ids = list(states)
    # protections: a bookmark on day 1, a branch tip on day 3 (rewind + snapshot), a checkpoint
    repo.bookmark("add", "keep-me", ref=ids[1])
    repo.rewind(ids[3])
    (ws / "branched.txt").write_text("on another branch\n")
    branched = repo.snapshot("branched").event
    assert branched is not None
    states[branched.id] = read_manifest(ws)
    repo.rewind(ids[-1])
    checkpoint = repo.checkpoints.create("known good")
    before = repo_files(repo)

    # 40 days: one snapshot a day is what the hourly and daily tiers keep anyway
    assert repo.gc(grace_s=0).pruned_snapshots == []
    assert repo_files(repo) == before
    # 100 days on, everything older than daily_days (60) goes unless protected
    clock.now = NOW_MS + 100 * DAY
    result = repo.gc(grace_s=0)
    assert result.objects_removed > 0 and result.bytes_freed > 0
    assert result.operation_id is not None
    assert repo.check() == []
    assert sum(repo_files(repo).values()) < sum(before.values())
    # day 1 (bookmark), the branch tip made from day 3, HEAD (the checkpoint's) stay
    protected = {ids[1], branched.id, ids[-1]}
    assert files_of(repo, checkpoint.id, tmp_path) == states[ids[-1]]
    gone = [e for e in ids if e not in protected and e != ids[3]]
    for event_id in gone:
        with pytest.raises(SnapshotPruned, match="was removed by gc on"):
            repo.export(event_id, tmp_path / "nope")
    for event_id in protected:
        assert files_of(repo, event_id, tmp_path) == states[event_id], event_id


def test_retention_tiers_keep_one_snapshot_per_hour_then_per_day(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    clock = Clock()
    repo = make_repo(ws, clock=clock)
    with_retention(repo)
    kept_by_day: dict[int, list[str]] = {}
    # day 20 (hourly tier): 3 snapshots in one hour and 1 in the next;
    # day 45 (daily tier): 3 snapshots in one day
    hour, minute = 3_600_000, 60_000
    for day, offsets in ((20, (0,)), (45, (0, 10 * minute, 20 * minute)), (60, (0, minute, hour))):
        for offset in offsets:
            clock.now = NOW_MS + day * DAY + offset
            (ws / "f.txt").write_text(f"{day} {offset}\n")
            event = repo.snapshot("x").event
            assert event is not None
            kept_by_day.setdefault(day, []).append(event.id)
    (ws / "f.txt").write_text("now\n")
    clock.now = NOW_MS + 80 * DAY
    repo.snapshot("now")  # HEAD: protects nothing old
    clock.now = NOW_MS + 80 * DAY + 1000
    repo.gc(grace_s=0)

    def alive(event_id: str) -> bool:
        try:
            repo.resolve(event_id)
        except SnapshotPruned:
            return False
        return True

    # day 60 is 20 days old (hourly tier): the newest of each hour
    assert [alive(e) for e in kept_by_day[60]] == [False, True, True]
    # day 45 is 35 days old (daily tier): the newest of the day
    assert [alive(e) for e in kept_by_day[45]] == [False, False, True]
    # day 20 is 60 days old: past daily_days, gone
    assert [alive(e) for e in kept_by_day[20]] == [False]
    assert repo.check() == []


def test_gc_keeps_what_undo_and_the_open_draft_need(
    ws: Path, make_repo: Callable[..., Repository], tmp_path: Path
) -> None:
    clock = Clock()
    repo = make_repo(ws, clock=clock)
    # the four newest operations: the rewind, the Draft's start and two revisions
    with_retention(repo, RETENTION.replace("keep_operations = 0", "keep_operations = 4"))
    states = spread(repo, ws, clock, 5)
    ids = list(states)
    before_rewind = read_manifest(ws)  # unrecorded: the rewind auto-saves it
    repo.rewind(ids[0])
    draft = repo.draft()
    (draft.path / "draft-only.txt").write_text("made in the draft\n")
    revision = draft.record("work")
    clock.now = NOW_MS + 400 * DAY
    result = repo.gc(grace_s=0)
    # days 1..3; day 0 is HEAD, day 4 the view before the rewind (undo goes back to it)
    assert len(result.pruned_snapshots) == 3
    assert repo.check() == []
    assert files_of(repo, ids[0], tmp_path) == states[ids[0]]
    assert repo.show(revision.id, "draft-only.txt") == b"made in the draft\n"
    draft.discard()
    undone = repo.undo()  # the discard, then the Draft's start ... then the rewind
    while undone.command != "rewind":
        undone = repo.undo()
    assert read_manifest(ws) == before_rewind


def test_dry_run_deletes_nothing(aged: tuple[Repository, Clock, dict]) -> None:
    repo, clock, _ = aged
    clock.now = NOW_MS + 200 * DAY
    before = repo_files(repo)
    ledger_count = repo.ledger.driver.count()
    result = repo.gc(dry_run=True, grace_s=0)
    assert result.objects_removed > 0 and result.pruned_snapshots
    assert repo_files(repo) == before
    assert repo.ledger.driver.count() == ledger_count
    real = repo.gc(grace_s=0)
    assert real.objects_removed == result.objects_removed
    assert real.pruned_snapshots == result.pruned_snapshots


def test_an_object_written_by_an_uncommitted_writer_survives_gc(
    aged: tuple[Repository, Clock, dict], ws: Path
) -> None:
    repo, clock, _ = aged
    clock.now = NOW_MS + 200 * DAY
    # another process's transaction has written an object and not yet committed its event
    other = DiskObjectStore(repo.layout.objects)
    fresh = other.put(b"written by a command still running")
    other.flush()
    repo.gc()  # the default grace period (60 minutes) spares it
    assert repo.objects.has(fresh)
    # while another command holds the write lock, gc waits and then gives up: nothing goes
    holder = Repository.open(ws)
    try:
        with holder.writing():
            repo.lock.timeout = 0.2
            before = repo_files(repo)
            with pytest.raises(RepositoryLocked):
                repo.gc(grace_s=0)
            assert repo_files(repo) == before
    finally:
        holder.close()
    repo.lock.timeout = 30
    repo.gc(grace_s=0)  # past the grace period, an object nothing names goes
    assert not repo.objects.has(fresh)
    assert repo.check() == []


def test_repack_merges_packs_and_every_object_stays_readable(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    repo = make_repo(ws)
    for batch in range(3):  # more than 64 new objects per snapshot: each writes a pack
        for i in range(100):
            (ws / f"b{batch}-{i}.txt").write_text(f"{batch} {i}\n")
        repo.snapshot(f"batch {batch}")
    store = repo.objects
    assert isinstance(store, DiskObjectStore)
    assert len(store.packs()) == 3
    everything = {oid: store.get(oid) for oid in store.ids()}
    reader = Repository.open(ws)  # a reader that loaded the old packs' indexes
    try:
        assert all(reader.objects.get(oid) == data for oid, data in list(everything.items())[:5])
        result = repo.repack()
        assert result.packs_removed == 3 and result.pack is not None
        assert len(store.packs()) == 1
        assert list(store.loose_ids()) == []
        for oid, data in everything.items():
            assert store.get(oid) == data
            assert reader.objects.get(oid) == data
            assert hash_bytes(data) == oid
    finally:
        reader.close()
    assert repo.check() == []
    assert repo.repack().pack is None  # one pack, nothing loose: nothing to do


def test_gc_rewrites_packs_without_their_dead_objects(
    ws: Path, make_repo: Callable[..., Repository], tmp_path: Path
) -> None:
    clock = Clock()
    repo = make_repo(ws, clock=clock)
    with_retention(repo)
    for i in range(100):
        (ws / f"old-{i}.txt").write_text(f"old {i}\n")
    old = repo.snapshot("old, packed").event
    clock.now = NOW_MS + 50 * DAY
    (ws / "between.txt").write_text("between\n")
    repo.snapshot("between")
    clock.now = NOW_MS + 100 * DAY
    for i in range(100):
        (ws / f"old-{i}.txt").unlink()
    (ws / "new.txt").write_text("new\n")
    repo.snapshot("new")
    store = repo.objects
    assert isinstance(store, DiskObjectStore)
    assert len(store.packs()) == 1
    pack_bytes = sum(p.pack.stat().st_size for p in store.packs())
    result = repo.gc(grace_s=0)
    assert result.packs_rewritten == 1
    assert sum(p.pack.stat().st_size for p in store.packs()) < pack_bytes / 2
    assert repo.check() == []
    assert old is not None
    with pytest.raises(SnapshotPruned):
        repo.export(old.id, tmp_path / "x")


def test_du_adds_up_to_the_bytes_on_disk(
    aged: tuple[Repository, Clock, dict], run_cli: CliRunner, ws: Path
) -> None:
    repo, _, _ = aged
    draft = repo.draft()
    draft.discard()  # leaves the kept Draft folder
    usage = as_json(run_cli("du", "--json", cwd=ws))
    on_disk = sum(
        p.lstat().st_size for p in repo.layout.repo.rglob("*") if p.is_file() and not p.is_symlink()
    )
    assert usage["total"] == on_disk
    assert sum(usage["kinds"].values()) == on_disk
    assert usage["kinds"]["draft"] > 0 and usage["kinds"]["ledger"] > 0
    frames = sum(usage["objects"].values())
    assert frames <= usage["kinds"]["loose_objects"] + usage["kinds"]["packs"]
    assert usage["gc_would_free"] >= usage["kinds"]["draft"]


def test_gc_removes_the_kept_draft_folder_only_when_no_draft_is_open(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    repo = make_repo(ws)
    (ws / "a.txt").write_text("a\n")
    repo.snapshot("a")
    draft = repo.draft()
    repo.gc(grace_s=0)
    assert draft.path.is_dir()  # open: kept
    draft.discard()
    assert draft.path.is_dir()  # ended: kept for the next start
    # du and gc agree on what the folder holds (its own stat cache included)
    usage = repo.du()
    dry = repo.gc(grace_s=0, dry_run=True)
    assert usage.to_json()["kinds"]["draft"] == dry.draft_folder_bytes > 0
    result = repo.gc(grace_s=0)
    assert result.draft_folder_bytes == dry.draft_folder_bytes
    assert not repo.layout.draft.exists()
    assert repo.check() == []
    again = repo.draft()  # the next start copies afresh
    assert (again.path / "a.txt").read_text() == "a\n"
    again.discard()


def test_cli_pruned_event_and_bad_config_are_one_line_errors(run_cli: CliRunner, ws: Path) -> None:
    ok(run_cli("init", cwd=ws))
    config = ws / ".strata" / "config.toml"
    config.write_text(config.read_text() + RETENTION)
    first = None
    for day in range(3):
        (ws / "f").write_text(f"{day}\n")
        out = as_json(
            run_cli("snapshot", "-m", "x", "--json", cwd=ws, env={"STRATA_NOW": str(NOW_MS + day)})
        )
        first = first or out["event_id"]
    later = {"STRATA_NOW": str(NOW_MS + 200 * DAY)}
    dry = as_json(run_cli("gc", "--dry-run", "--grace", "0", "--json", cwd=ws, env=later))
    assert dry["dry_run"] and len(dry["pruned_snapshots"]) == 2
    done = as_json(run_cli("gc", "--grace", "0", "--json", cwd=ws, env=later))
    assert done["pruned_snapshots"] == dry["pruned_snapshots"]
    assert "ok" in ok(run_cli("check", cwd=ws))
    for command in (("rewind", first), ("show", f"{first}:f"), ("diff", first, "HEAD")):
        err = assert_user_error(run_cli(*command, cwd=ws), says="was removed by gc on")
        assert "nearest kept:" in err
    log = ok(run_cli("op", "log", cwd=ws))
    assert " gc " in log
    config.write_text(config.read_text().replace("daily_days = 60", "daily_days = 5"))
    assert_user_error(run_cli("gc", cwd=ws), says="retention")
    assert_user_error(run_cli("du", cwd=ws), says="retention")
    # the policy's mistake refuses only the commands that use the policy: changes are recorded
    (ws / "f").write_text("recorded all the same\n")
    assert as_json(run_cli("snapshot", "-m", "after the typo", "--json", cwd=ws))["event_id"]
    ok(run_cli("status", cwd=ws))


def test_gc_with_an_unreadable_tree_removes_nothing(
    person: Person, cli_as: CliRunner, home_of: Path
) -> None:
    ws = home_of / "ws"
    ws.mkdir()
    os.chown(ws, person.uid, person.gid)
    ok(cli_as("init", cwd=ws))
    config = ws / ".strata" / "config.toml"
    for day in range(2):
        (ws / "d").mkdir(exist_ok=True)
        (ws / "d" / "f").write_text(f"{day}\n")
        subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", str(ws)], check=True)
        ok(cli_as("snapshot", "-m", "x", cwd=ws, env={"STRATA_NOW": str(NOW_MS + day)}))
    config.write_text(config.read_text() + RETENTION)
    repo = Repository.open(ws)
    try:
        head = repo.head()
        assert head is not None
        tree = repo.tree_of(head)
    finally:
        repo.close()
    loose = ws / ".strata" / "objects" / tree[:2] / tree[2:]
    loose.chmod(0o000)
    before = sorted(p.name for p in (ws / ".strata" / "objects").rglob("*"))
    result = cli_as("gc", "--grace", "0", cwd=ws, env={"STRATA_NOW": str(NOW_MS + 200 * DAY)})
    if person.is_root:
        ok(result)  # root reads it anyway
    else:
        assert_user_error(result, says="gc cannot read object")
        assert sorted(p.name for p in (ws / ".strata" / "objects").rglob("*")) == before
    loose.chmod(0o444)
    assert "ok" in ok(cli_as("check", cwd=ws))


# -- the git backend's refs --------------------------------------------------------------


def test_git_refs_are_undecorated_and_pruned_by_gc(
    run_cli: CliRunner, ws: Path, git: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    git("init", "-q", cwd=ws)
    (ws / "tracked.txt").write_text("tracked\n")
    git("add", "tracked.txt", cwd=ws)
    git("commit", "-qm", "user commit", cwd=ws)
    ok(run_cli("init", cwd=ws))
    git_env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    argv = ("run", "--strategy", "git", "--", "sh", "-c", "echo x > made.txt")
    ok(run_cli(*argv, cwd=ws, env=git_env))
    refs = git("for-each-ref", "--format=%(refname)", "refs/strata/", cwd=ws).stdout.decode()
    assert "refs/strata/runs/" in refs
    # git 2.39 decorates only heads, tags, remotes, stash and HEAD by default
    log = git("log", "--all", "--decorate", "--oneline", cwd=ws).stdout.decode()
    assert "strata" not in log.replace("strata snapshot", "").replace("run before", "")
    assert log.count("\n") > 1  # the run's commits are listed by --all while their refs live
    later = {**git_env, "STRATA_NOW": str(NOW_MS + 30 * DAY)}
    out = as_json(run_cli("gc", "--grace", "0", "--json", cwd=ws, env=later))
    removed = out["git_refs_removed"]
    assert removed and all(r.startswith("refs/strata/") for r in removed)
    assert git("for-each-ref", "refs/strata/", cwd=ws).stdout == b""
    log = git("log", "--all", "--oneline", cwd=ws).stdout.decode()
    assert log.splitlines() == [line for line in log.splitlines() if "user commit" in line]
    assert "ok" in ok(run_cli("check", cwd=ws))
