"""Nothing a command, a crash or a full disk leaves behind locks the user out (issue 10).

* item 9: ignore files are always recorded and rolled back, so a failing
  command cannot make Strata blind by writing ``*`` into ``.gitignore``;
* item 12: a rewind checks every object it needs before its first write, and a
  journal that cannot finish never blocks reading; ``strata recover`` is the
  way out;
* item 13: a full disk is a one-line error, readers keep working, and the
  journal finishes once space returns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CliRunner, Person, assert_user_error, ok
from strata.store.objects import hash_bytes

# -- item 9: the ignore files themselves -------------------------------------------


@pytest.mark.parametrize(
    ("ignore_file", "rule"),
    [
        (".gitignore", "*"),
        (".gitignore", ".gitignore"),
        (".gitignore", "*\\n!a.txt"),
        ("sub/.strataignore", "*"),
        ("sub/.strataignore", ".strataignore\\n*"),
    ],
)
def test_a_failing_command_cannot_hide_the_workspace_behind_gitignore(
    run_cli: CliRunner, tmp_path: Path, ignore_file: str, rule: str
) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("a\n")
    (ws / "sub" / "b.txt").write_text("b\n")
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "sub" / ".strataignore").write_text("*.tmp\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    script = f"printf '{rule}\\n' > {ignore_file}; echo new > c.txt; echo new > sub/d.txt; exit 3"
    code, _, err = run_cli("run", "--rollback-on-failure", "--", "sh", "-c", script, cwd=ws)
    assert code == 3, err
    # the rules are back, and with them Strata's sight
    assert (ws / ".gitignore").read_text() == "*.log\n"
    assert (ws / "sub" / ".strataignore").read_text() == "*.tmp\n"
    assert (ws / "a.txt").read_text() == "a\n" and (ws / "sub" / "b.txt").read_text() == "b\n"
    status = ok(run_cli("status", cwd=ws))
    # what the command wrote is rolled back, or (where its rule hid it) shown as unrecorded
    for made in ("c.txt", "sub/d.txt"):
        assert not (ws / made).exists() or made in status, (made, status)
    assert "ignore" not in status


def test_an_ignore_file_that_ignores_itself_is_still_recorded(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "deep" / "er").mkdir(parents=True)
    (ws / ".gitignore").write_text("*\n!deep/\n!deep/**/\n")
    (ws / "deep" / ".strataignore").write_text(".strataignore\n")
    (ws / "deep" / "er" / ".gitignore").write_text(".gitignore\n*\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "rules", cwd=ws))
    code, out, err = run_cli("show", "HEAD:deep/er/.gitignore", cwd=ws)
    assert code == 0, err
    assert out == ".gitignore\n*\n"
    assert ok(run_cli("show", "HEAD:.gitignore", cwd=ws)) == "*\n!deep/\n!deep/**/\n"
    assert ok(run_cli("show", "HEAD:deep/.strataignore", cwd=ws)) == ".strataignore\n"


# -- item 12: a rewind that cannot finish --------------------------------------------


def _two_snapshots(cli: CliRunner, person: Person, ws: Path) -> str:
    person.run(["mkdir", "-p", str(ws / "sub")])
    person.run(["sh", "-c", "echo one > a.txt; echo one > sub/b.txt"], cwd=ws)
    ok(cli("init", "--no-snapshot", cwd=ws))
    first = json.loads(ok(cli("snapshot", "-m", "one", "--json", cwd=ws)))["event_id"]
    person.run(["sh", "-c", "echo two > a.txt; echo two > sub/b.txt"], cwd=ws)
    ok(cli("snapshot", "-m", "two", cwd=ws))
    return str(first)


def _reads_work(cli: CliRunner, ws: Path) -> None:
    for argv in (["history"], ["status"], ["diff", "HEAD~1", "HEAD"], ["show", "HEAD:a.txt"]):
        ok(cli(*argv, cwd=ws))


def test_a_rewind_missing_an_object_writes_nothing(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    first = _two_snapshots(cli_as, person, ws)
    oid = hash_bytes(b"one\n")
    (ws / ".strata" / "objects" / oid[:2] / oid[2:]).unlink()
    err = assert_user_error(cli_as("rewind", first, cwd=ws), says="missing")
    assert "internal error" not in err
    # nothing half-done: both files still hold the second snapshot, no journal is left
    assert (ws / "a.txt").read_text() == "two\n" and (ws / "sub" / "b.txt").read_text() == "two\n"
    assert not list((ws / ".strata" / "journal").glob("*.json"))
    for argv in (["history"], ["status"], ["show", "HEAD:a.txt"]):  # the old blob is gone
        ok(cli_as(*argv, cwd=ws))
    ok(cli_as("snapshot", "-m", "still writable", cwd=ws))


def test_a_rewind_into_an_unwritable_folder_writes_nothing(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    first = _two_snapshots(cli_as, person, ws)
    person.run(["chmod", "555", str(ws / "sub")])
    result = cli_as("rewind", first, cwd=ws)
    if person.is_root:  # root writes anyway: the rewind simply happens
        ok(result)
        assert (ws / "sub" / "b.txt").read_text() == "one\n"
        return
    assert_user_error(result, says="cannot write into these folders")
    assert (ws / "a.txt").read_text() == "two\n" and (ws / "sub" / "b.txt").read_text() == "two\n"
    assert not list((ws / ".strata" / "journal").glob("*.json"))
    _reads_work(cli_as, ws)
    person.run(["chmod", "755", str(ws / "sub")])
    ok(cli_as("rewind", first, cwd=ws))
    assert (ws / "sub" / "b.txt").read_text() == "one\n"


def _stuck_journal(ws: Path, *, oid: str, path: str = "a.txt") -> Path:
    """A journal left by a killed rewind whose object has gone since."""
    from strata.ledger.ledger import Operation
    from strata.repo import Repository

    with Repository.open(ws) as repo:
        view = repo.view()
    op = Operation(
        id="op-stuck", command="rewind", author={"name": "t", "kind": "human"},
        ts="2024-01-01T00:00:00.000Z", before=view, after=view, details={"why": "test"},
    )  # fmt: skip
    record = {
        "version": 1,
        "actions": [{"op": "write", "path": path, "oid": oid, "mode": 0o644, "before": None}],
        "operation": op.to_json(),
    }
    journal = ws / ".strata" / "journal" / "op-stuck.json"
    journal.write_text(json.dumps(record))
    return journal


def test_a_journal_that_cannot_finish_blocks_no_reader_and_recover_abandons_it(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    _two_snapshots(cli_as, person, ws)
    journal = _stuck_journal(ws, oid="ab" * 32, path="c.txt")
    os.chown(journal, person.uid, person.gid)
    _reads_work(cli_as, ws)
    _, out, err = cli_as("check", cwd=ws)
    assert "internal error" not in err and "Traceback" not in err
    assert "op-stuck.json" in out + err  # check names the pending journal
    # writers refuse with the way out
    err = assert_user_error(cli_as("snapshot", "-m", "x", cwd=ws), says="cannot be finished")
    assert "strata recover" in err
    assert_user_error(cli_as("recover", cwd=ws), says="cannot be finished")
    out = ok(cli_as("recover", "--abandon", cwd=ws))
    assert "abandoned rewind" in out and "c.txt" in out
    assert not journal.exists()
    kept = json.loads((ws / ".strata" / "journal" / "abandoned" / "op-stuck.json").read_text())
    assert "missing" in kept["problem"]
    assert (ws / "a.txt").read_text() == "two\n"  # files left as they are
    ok(cli_as("snapshot", "-m", "writable again", cwd=ws))
    assert ok(cli_as("recover", cwd=ws)) == "nothing to recover\n"


# -- item 13: a full disk ----------------------------------------------------------------


def _tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (needs root; skipped where mounting is not allowed)."""
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MB tmpfs."""
    yield from _tmpfs(tmp_path / "disk", "4m")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 3 MB tmpfs."""
    yield from _tmpfs(tmp_path / "disk", "3m")


def _fill(path: Path) -> None:
    """Write ``path`` until the file system is full."""
    with open(path, "ab", buffering=0) as f:
        for size in (65536, 4096, 512):
            try:
                while True:
                    f.write(b"\0" * size)
                    f.flush()
            except OSError:
                pass


def test_a_full_disk_is_one_line_readers_go_on_and_the_journal_finishes_later(
    run_cli: CliRunner, small_disk: Path
) -> None:
    ws = small_disk / "ws"
    ws.mkdir()
    big = os.urandom(900_000)
    (ws / "big.bin").write_bytes(big)
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    first = json.loads(ok(run_cli("snapshot", "-m", "big", "--json", cwd=ws)))["event_id"]
    (ws / "big.bin").write_bytes(b"small now\n")
    ok(run_cli("snapshot", "-m", "small", cwd=ws))
    (ws / "new.bin").write_bytes(os.urandom(200_000))
    filler = small_disk / "filler"
    _fill(filler)
    # recording new content on a full disk: one line, exit 1, nothing recorded half
    assert_user_error(run_cli("snapshot", "-m", "new", cwd=ws), says="no space left on device")
    (ws / "new.bin").unlink()
    with open(filler, "r+b") as f:  # room for the journal, not for the big file
        f.truncate(filler.stat().st_size - 100_000)
    assert_user_error(run_cli("rewind", first, cwd=ws), says="no space left on device")
    assert list((ws / ".strata" / "journal").glob("*.json")), "the rewind stopped mid-way"
    for argv in (["history"], ["status"], ["diff", "HEAD~1", "HEAD"], ["show", "HEAD:big.bin"]):
        ok(run_cli(*argv, cwd=ws))  # readers go on
    assert_user_error(run_cli("snapshot", "-m", "x", cwd=ws), says="no space left on device")
    # space returns: the next command finishes the journal
    filler.unlink()
    ok(run_cli("status", cwd=ws))
    assert (ws / "big.bin").read_bytes() == big
    assert not list((ws / ".strata" / "journal").glob("*.json"))
    assert not [p for p in ws.iterdir() if p.name.startswith(".strata-tmp-")]
    ok(run_cli("check", cwd=ws))


def test_a_first_snapshot_on_a_nearly_full_disk_is_one_line(
    run_cli: CliRunner, tiny_disk: Path
) -> None:
    # the objects just fit, then the ledger's own write fails (SQLite: "database
    # or disk is full", having already ended the transaction): one line, never
    # an internal error from rolling back a transaction that is not there
    ws = tiny_disk / "ws"
    ws.mkdir()
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    for i in range(1, 6):
        (ws / f"f{i}").write_bytes(os.urandom(300_000))
    assert_user_error(run_cli("snapshot", "-m", "five", cwd=ws), says="no space left on device")
    ok(run_cli("history", cwd=ws))
    (ws / "f5").unlink()
    (ws / "f4").unlink()
    ok(run_cli("snapshot", "-m", "three", cwd=ws))
    ok(run_cli("check", cwd=ws))
