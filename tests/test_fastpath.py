"""Every scanning command asks the watcher, and the stat cache it leaves never hides an edit.

With a watcher running, a snapshot, status, rewind, run, review or publish
lists only the folders holding a changed path (``ScanResult.folders_listed``,
``ScanResult.watcher``); the Draft's folder is watched with a history of its
own. A scan that walked everything because the watcher did not know its
token saves the new one, so the next scan is incremental. The stat cache is a
base file and a log of saves: a torn save, or a status that stored nothing,
leaves a cache the next snapshot still records every edit through.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strata import Repository
from strata.core import watched_folders
from strata.store.scan import ScanResult
from strata.watch.monitor import ChangeMonitor, MonitorServer

FOLDERS = 12


def _fill(ws: Path) -> None:
    for i in range(FOLDERS):
        folder = ws / f"pkg{i}" / "sub"
        folder.mkdir(parents=True)
        for j in range(3):
            (folder / f"m{j}.py").write_text(f"value = {i * 10 + j}\n")
            old = time.time() - 3600  # older than the scans: no racy entry to read again
            os.utime(folder / f"m{j}.py", (old, old))


def _folders(root: Path) -> int:
    """How many folders a full walk of ``root`` lists."""
    return sum(
        1
        for folder, _, _ in os.walk(root)
        if not any(p in (".strata", ".git") for p in Path(folder).relative_to(root).parts)
    )


def _serve(repo: Repository) -> tuple[ChangeMonitor, MonitorServer]:
    monitor = ChangeMonitor(repo.root, repo.layout.watch, others=watched_folders(repo.layout))
    monitor.start()
    return monitor, MonitorServer(monitor).start()


@pytest.fixture
def watched(
    ws: Path, make_repo: Callable[..., Repository]
) -> Iterator[tuple[Repository, ChangeMonitor]]:
    """A filled workspace, its first snapshot, and a watcher of it and of the Draft's folder."""
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    monitor, server = _serve(repo)
    try:
        yield repo, monitor
    finally:
        server.close()
        monitor.stop()


def _age(root: Path) -> None:
    """Make every file under ``root`` an hour old (a fresh copy's files are racy for 2 s)."""
    old = time.time() - 3600
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (old, old), follow_symlinks=False)


def _last(repo: Repository, name: str = "") -> ScanResult:
    scan = repo.workspaces[name].last_scan
    assert scan is not None
    return scan


def _wait_watched(monitor: ChangeMonitor, name: str) -> None:
    deadline = time.monotonic() + 10
    while not monitor.status()["watched"].get(name):
        assert time.monotonic() < deadline, monitor.status()
        time.sleep(0.02)


def _incremental(scan: ScanResult, total: int, at_most: int) -> None:
    assert scan.watcher == "incremental", scan.watcher
    assert scan.folders_listed <= at_most < total, (scan.folders_listed, total)


# -- every command asks ----------------------------------------------------------------


def test_snapshot_status_and_rewind_list_only_the_changed_folders(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    repo, _ = watched
    total = _folders(repo.root)
    repo.status()  # the first scan of this watcher walks and saves its token
    (repo.root / "pkg3" / "sub" / "m1.py").write_text("value = 'edited'\n")
    status = repo.status()
    assert [f.path for f in status.changes] == ["pkg3/sub/m1.py"]
    _incremental(_last(repo), total, 4)
    first = repo.snapshot("edit")
    assert first.event is not None and first.event.files == ("pkg3/sub/m1.py",)
    _incremental(_last(repo), total, 4)
    (repo.root / "pkg5" / "sub" / "m0.py").write_text("unrecorded\n")
    repo.rewind("HEAD~1")
    _incremental(_last(repo), total, 4)  # the auto-save before the rewind
    assert (repo.root / "pkg3" / "sub" / "m1.py").read_text() == "value = 31\n"
    assert (repo.root / "pkg5" / "sub" / "m0.py").read_text() == "value = 50\n"
    auto = [e for e in repo.history() if e.action_type == "auto_save"]
    assert auto and auto[0].files == ("pkg5/sub/m0.py",)  # nothing missed by the auto-save


def test_a_folder_whose_entries_changed_is_read_name_by_name_not_listed(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    """The watcher names the entries that changed: only they are looked at, and nothing is missed.

    Edits, a same-size rewrite, a deletion, a new file, a new ignored file, a
    permission change, a symlink, a file replaced by a folder: each incremental
    scan lists no folder but new ones, and records what a full walk finds.
    """
    from strata.store.ignore import IgnoreRules
    from strata.store.objects import MemoryObjectStore
    from strata.store.scan import Scanner
    from strata.store.statcache import StatCache

    repo, _ = watched
    sub = repo.root / "pkg2" / "sub"
    (repo.root / ".gitignore").write_text("*.log\n")
    repo.snapshot("ignore logs")
    steps: list[Callable[[], object]] = [
        lambda: (sub / "m0.py").write_text("value = 'zero'\n"),
        lambda: (sub / "m0.py").write_text("value = 'ZERO'\n"),  # same size, at once
        lambda: (sub / "m1.py").unlink(),
        lambda: (sub / "fresh.py").write_text("fresh\n"),
        lambda: (sub / "debug.log").write_text("ignored\n"),
        lambda: (sub / "m2.py").chmod(0o755),
        lambda: (sub / "link").symlink_to("m2.py"),
        lambda: ((sub / "fresh.py").unlink(), (sub / "fresh.py").mkdir()),
        lambda: (sub / "fresh.py" / "inner.txt").write_text("inner\n"),
    ]
    rules = IgnoreRules.root(defaults=repo.config.ignore_defaults)
    for n, step in enumerate(steps):
        step()
        result = repo.snapshot(f"step {n}")
        scan = _last(repo)
        assert scan.watcher == "incremental", scan.watcher
        # nothing listed, or only the folder that replaced a file (it is new)
        assert scan.folders_listed == (1 if n == 7 else 0), (n, scan.folders_listed)
        if n == 4:  # an ignored file: nothing to record
            assert result.event is None
        else:
            assert result.event is not None, f"step {n} was missed"
        full = Scanner(repo.root, MemoryObjectStore(), rules=rules, cache=StatCache(None)).scan()
        assert scan.tree == full.tree, n
        assert repo.status().clean, n
        assert _last(repo).watcher == "incremental" and _last(repo).folders_listed == 0, n
    assert repo.show("HEAD", "pkg2/sub/m0.py") == b"value = 'ZERO'\n"
    assert repo.show("HEAD", "pkg2/sub/fresh.py/inner.txt") == b"inner\n"
    assert "pkg2/sub/debug.log" not in {c.path for c in repo.diff("HEAD~8", "HEAD").files}
    assert repo.check() == []


@pytest.mark.parametrize("statuses", [1, 2])
def test_a_snapshot_after_a_status_stores_what_the_status_only_looked_at(
    watched: tuple[Repository, ChangeMonitor], statuses: int
) -> None:
    """A status hashes without storing: the next snapshot stores it, still without listing.

    A second status sees the first one's unstored ids in the cache: they must not
    pass for stored.
    """
    repo, _ = watched
    repo.snapshot("token")
    sub = repo.root / "pkg4" / "sub"
    (sub / "m0.py").write_text("the status saw this\n")
    (sub / "new.py").write_text("and this\n")
    (sub / "m1.py").unlink()
    old = time.time() - 60  # not racy: only the cache can make them be read again
    for path in (sub / "m0.py", sub / "new.py"):
        os.utime(path, (old, old))
    cache = repo.layout.statcache
    saved = [
        (p.stat().st_size, p.stat().st_mtime_ns) for p in (cache, cache.with_name("statcache.log"))
    ]
    for _ in range(statuses):
        changed = {c.path for c in repo.status().changes}
        assert changed == {"pkg4/sub/m0.py", "pkg4/sub/new.py", "pkg4/sub/m1.py"}
    # the status had nothing worth keeping: its files are read again by the next scan anyway
    assert saved == [
        (p.stat().st_size, p.stat().st_mtime_ns) for p in (cache, cache.with_name("statcache.log"))
    ]
    event = repo.snapshot("after the status").event
    assert _last(repo).watcher == "incremental" and _last(repo).folders_listed == 0
    assert event is not None and set(event.files) == changed
    assert repo.show("HEAD", "pkg4/sub/m0.py") == b"the status saw this\n"
    assert repo.show("HEAD", "pkg4/sub/new.py") == b"and this\n"
    assert repo.check() == []
    assert repo.status().clean


def test_a_run_asks_the_watcher_for_both_its_snapshots(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    repo, _ = watched
    total = _folders(repo.root)
    repo.snapshot("token")
    code = "import pathlib; pathlib.Path('pkg7/sub/m2.py').write_text('by the run\\n')"
    result = repo.execute_run([sys.executable, "-c", code])
    _incremental(_last(repo), total, 4)  # the "after" snapshot
    assert result.ok and result.workspace is not None
    assert "pkg7/sub/m2.py" in str(result.workspace.diff)
    assert repo.show("HEAD", "pkg7/sub/m2.py") == b"by the run\n"


def test_the_draft_is_watched_and_review_and_publish_list_only_what_changed(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    repo, monitor = watched
    draft = repo.draft()
    _wait_watched(monitor, "draft")
    _age(draft.path)
    total = _folders(draft.path)
    draft.review()  # walks once: the folder was watched only after the start
    edited = draft.path / "pkg2" / "sub" / "m0.py"
    edited.write_text("value = 'in the draft'\n")  # right before the command: never missed
    review = draft.review()
    _incremental(_last(repo, "draft"), total, 4)
    assert [f.path for f in review.diff.files] == ["pkg2/sub/m0.py"]
    (draft.path / "pkg9" / "sub" / "new.py").write_text("added\n")
    result = draft.publish("ship")
    _incremental(_last(repo, "draft"), total, 4)
    assert result.files_changed == 2
    assert (repo.root / "pkg2" / "sub" / "m0.py").read_text() == "value = 'in the draft'\n"
    assert (repo.root / "pkg9" / "sub" / "new.py").read_text() == "added\n"
    # the next Draft starts from the kept folder, asking the watcher about it
    second = repo.draft()
    _incremental(_last(repo, "draft"), total + 0, 6)
    assert (second.path / "pkg9" / "sub" / "new.py").read_text() == "added\n"


def test_a_replaced_draft_folder_is_never_answered_from_the_old_ones_history(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    repo, monitor = watched
    draft = repo.draft()
    _wait_watched(monitor, "draft")
    draft.review()
    restarts = monitor.restarts
    # the folder is swapped for a copy behind the watcher's back, with one file changed
    files = draft.path
    os.rename(files, files.with_name("old"))
    import shutil

    shutil.copytree(files.with_name("old"), files, symlinks=True)
    (files / "pkg4" / "sub" / "m1.py").write_text("in the copy\n")
    review = draft.review()
    assert _last(repo, "draft").watcher != "incremental"
    assert [f.path for f in review.diff.files] == ["pkg4/sub/m1.py"]
    deadline = time.monotonic() + 10
    while monitor.restarts == restarts:  # then the new folder is watched
        assert time.monotonic() < deadline
        time.sleep(0.02)
    _wait_watched(monitor, "draft")


# -- the first scan of a new watcher saves its token -------------------------------------


@pytest.mark.parametrize("command", ["status", "snapshot"])
def test_a_first_no_op_saves_the_new_watchers_token(
    ws: Path, make_repo: Callable[..., Repository], command: str
) -> None:
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")  # no watcher: the stat cache holds no token
    total = _folders(ws)
    monitor, server = _serve(repo)
    try:
        run = repo.status if command == "status" else lambda: repo.snapshot("no-op")
        run()
        assert "no token" in _last(repo).watcher
        assert _last(repo).folders_listed == total
        run()  # nothing changed, but the first one saved the token
        _incremental(_last(repo), total, 1)
    finally:
        server.close()
        monitor.stop()
    # another watcher: the saved token is unknown to it, and the first no-op saves its own
    monitor, server = _serve(repo)
    try:
        repo.status()
        assert "unknown token" in _last(repo).watcher
        (ws / "pkg1" / "sub" / "m2.py").write_text("seen\n")
        event = repo.snapshot("after").event
        _incremental(_last(repo), total, 4)
        assert event is not None and event.files == ("pkg1/sub/m2.py",)
    finally:
        server.close()
        monitor.stop()


# -- the stat cache never hides an edit ----------------------------------------------------


def test_a_status_saves_no_object_id_the_store_lacks(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    """A status stores nothing: the files it found changed must be stored by the next snapshot."""
    repo, _ = watched
    repo.status()
    path = repo.root / "pkg6" / "sub" / "m0.py"
    path.write_text("content only a status has seen\n")
    old = time.time() - 60  # not racy: only the stat cache could make it be read again
    os.utime(path, (old, old))
    assert [f.path for f in repo.status().changes] == ["pkg6/sub/m0.py"]
    event = repo.snapshot("after the status").event
    assert event is not None and event.files == ("pkg6/sub/m0.py",)
    assert repo.show("HEAD", "pkg6/sub/m0.py") == b"content only a status has seen\n"
    assert repo.check() == []


def test_a_torn_save_leaves_a_cache_that_hides_no_edit(
    watched: tuple[Repository, ChangeMonitor],
) -> None:
    repo, _ = watched
    repo.snapshot("token")
    log = repo.layout.statcache.with_name("statcache.log")
    one, two, six = (repo.root / f"pkg{i}" / "sub" / "m1.py" for i in (8, 10, 11))
    one.write_text("value = 'one'\n")
    _age(one.parent)  # not racy: only the saved rows say what it holds
    repo.snapshot("one")
    size = log.stat().st_size
    two.write_text("value = 'two'\n")
    _age(two.parent)
    repo.snapshot("two")
    assert log.stat().st_size > size  # appended, not rewritten
    with open(log, "r+b") as f:  # a crash in the middle of that append
        f.truncate(size + 11)
    six.write_text("value = 'six'\n")
    event = repo.snapshot("three").event
    assert event is not None and event.files == ("pkg11/sub/m1.py",)
    assert repo.show("HEAD", "pkg8/sub/m1.py") == b"value = 'one'\n"
    assert repo.show("HEAD", "pkg10/sub/m1.py") == b"value = 'two'\n"
    assert repo.show("HEAD", "pkg11/sub/m1.py") == b"value = 'six'\n"
    assert repo.status().clean


def test_without_a_watcher_two_statuses_then_a_snapshot_store_the_new_file(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    path = ws / "pkg0" / "sub" / "pending.txt"
    path.write_text("pending\n")
    old = time.time() - 60
    os.utime(path, (old, old))
    for _ in range(2):
        assert [c.path for c in repo.status().changes] == ["pkg0/sub/pending.txt"]
    event = repo.snapshot("now").event
    assert event is not None and event.files == ("pkg0/sub/pending.txt",)
    assert repo.show("HEAD", "pkg0/sub/pending.txt") == b"pending\n"
    assert repo.check() == []


def test_a_racy_same_size_edit_is_seen(ws: Path, make_repo: Callable[..., Repository]) -> None:
    """An edit with the same size and mtime, just after a snapshot, is recorded by the next one."""
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    path = ws / "pkg0" / "sub" / "m0.py"
    path.write_text("value = 'aa'\n")
    repo.snapshot("racy")  # the file is as new as the scan
    st = path.stat()
    path.write_text("value = 'bb'\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    event = repo.snapshot("same size, same mtime").event
    assert event is not None and event.files == ("pkg0/sub/m0.py",)
    assert repo.show("HEAD", "pkg0/sub/m0.py") == b"value = 'bb'\n"


def test_a_monitor_in_this_process_answers_without_its_socket(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    """A watcher running commands itself lets their scans ask its monitor directly."""
    from strata.core import monitor_in_process

    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    total = _folders(ws)
    monitor = ChangeMonitor(ws, repo.layout.watch, others=watched_folders(repo.layout)).start()
    try:
        with monitor_in_process(monitor):
            opened = Repository.open(ws)  # as a command run by the watcher opens it
            try:
                opened.status()
                (ws / "pkg0" / "sub" / "m2.py").write_text("asked in-process\n")
                assert [f.path for f in opened.status().changes] == ["pkg0/sub/m2.py"]
                _incremental(_last(opened), total, 4)
            finally:
                opened.close()
        repo.status()  # outside: no socket, no watcher to ask
        assert _last(repo).watcher == "no watcher"
    finally:
        monitor.stop()
