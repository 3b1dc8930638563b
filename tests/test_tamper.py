"""Tamper evidence: any edit, deletion or reordering of the SQLite ledger is caught.

The attacker here has the database file and SQLite: they drop the append-only
triggers and change ``records(seq, kind, line)`` directly. ``strata check``
and ``strata ledger verify`` must then exit 1 and name the first bad record;
the chain head written down earlier must expose what re-sealing hides; and a
damaged index (derived data) is reported and rebuilt from the records.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, as_json, ok
from strata import Repository
from strata.ledger.records import Record

MakeRepo = Callable[..., Repository]


@contextmanager
def tampering(db: Path) -> Iterator[sqlite3.Connection]:
    """A raw connection to the ledger with the append-only triggers dropped."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("DROP TRIGGER IF EXISTS records_no_update")
        con.execute("DROP TRIGGER IF EXISTS records_no_delete")
        yield con
    finally:
        con.close()


def line_of(con: sqlite3.Connection, seq: int) -> dict[str, Any]:
    (line,) = con.execute("SELECT line FROM records WHERE seq = ?", (seq,)).fetchone()
    return dict(json.loads(line))


def set_line(con: sqlite3.Connection, seq: int, raw: dict[str, Any] | bytes) -> None:
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    con.execute("UPDATE records SET line = ? WHERE seq = ?", (data, seq))


@pytest.fixture
def history(ws: Path, make_repo: MakeRepo) -> tuple[Path, list[int]]:
    """A closed repository with a few operations; returns (workspace, seqs of its events)."""
    repo = make_repo(ws)
    for n in range(4):
        (ws / "f.txt").write_text(f"version {n}\n")
        (ws / f"g{n}.txt").write_text("more\n")
        repo.snapshot(f"step {n}")
    repo.bookmark("add", "mark", ref="HEAD~2")
    repo.rewind("HEAD~1")
    repo.close()
    con = sqlite3.connect(repo.layout.ledger)
    try:
        seqs = [
            r[0] for r in con.execute("SELECT seq FROM records WHERE kind='event' ORDER BY seq")
        ]
    finally:
        con.close()
    assert len(seqs) == 5
    return ws, seqs


def db_of(ws: Path) -> Path:
    return ws / ".strata" / "ledger.db"


def assert_names_record(run_cli: CliRunner, ws: Path, seq: int, says: str) -> None:
    """check and ledger verify both exit 1 and name record ``seq`` first."""
    code, out, err = run_cli("ledger", "verify", cwd=ws)
    assert code == 1, (out, err)
    assert "Traceback" not in err and "internal error" not in err, err
    first = err.splitlines()[0]
    assert first.startswith(f"problem: record {seq} "), err
    assert says in first, err

    report = json.loads(run_cli("ledger", "verify", "--json", cwd=ws)[1])
    assert report["ok"] is False and report["problems"][0].startswith(f"record {seq} ")

    code, out, err = run_cli("check", cwd=ws)
    assert code == 1, (out, err)
    assert "Traceback" not in err and "internal error" not in err, err
    problems = [line for line in err.splitlines() if line.startswith("problem: ")]
    assert problems[0].startswith(f"problem: ledger: record {seq} "), err
    assert says in problems[0]
    assert err.splitlines()[-1].startswith("error: ")


def test_a_healthy_ledger_verifies(history: tuple[Path, list[int]], run_cli: CliRunner) -> None:
    ws, _ = history
    assert ok(run_cli("ledger", "verify", cwd=ws)).startswith("ok: ")
    assert ok(run_cli("check", cwd=ws)).startswith("ok: ")


def test_the_triggers_refuse_plain_updates_and_deletes(history: tuple[Path, list[int]]) -> None:
    ws, seqs = history
    con = sqlite3.connect(db_of(ws))
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            con.execute("UPDATE records SET line = line WHERE seq = ?", (seqs[1],))
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            con.execute("DELETE FROM records WHERE seq = ?", (seqs[1],))
    finally:
        con.close()


def test_an_edited_rationale_is_detected(
    history: tuple[Path, list[int]], run_cli: CliRunner
) -> None:
    ws, seqs = history
    target = seqs[1]
    with tampering(db_of(ws)) as con:
        raw = line_of(con, target)
        assert raw["body"]["rationale"] == "step 1"
        raw["body"]["rationale"] = "step 1 (nothing to see here)"
        set_line(con, target, raw)
    assert_names_record(run_cli, ws, target, "was modified")


def test_an_edit_that_reseals_the_record_breaks_the_next_link(
    history: tuple[Path, list[int]], run_cli: CliRunner
) -> None:
    ws, seqs = history
    target = seqs[1]
    with tampering(db_of(ws)) as con:
        old = Record.from_json(line_of(con, target))
        body = dict(old.body, rationale="rewritten, hash and all")
        set_line(con, target, Record.seal(old.seq, old.kind, body, old.prev).to_line())
    assert_names_record(run_cli, ws, target + 1, f"does not follow record {target}")


def test_a_deleted_record_is_detected(history: tuple[Path, list[int]], run_cli: CliRunner) -> None:
    ws, seqs = history
    target = seqs[2]
    with tampering(db_of(ws)) as con:
        con.execute("DELETE FROM records WHERE seq = ?", (target,))
    assert_names_record(run_cli, ws, target, "is missing or out of order")


@pytest.mark.parametrize("gap", [1, 3])
def test_swapped_records_are_detected(
    history: tuple[Path, list[int]], run_cli: CliRunner, gap: int
) -> None:
    ws, seqs = history
    first, second = seqs[1], seqs[1] + gap
    with tampering(db_of(ws)) as con:
        a, b = line_of(con, first), line_of(con, second)
        set_line(con, first, b)
        set_line(con, second, a)
    assert_names_record(run_cli, ws, first, f"found record {second}")


def test_a_record_that_is_not_json_is_detected(
    history: tuple[Path, list[int]], run_cli: CliRunner
) -> None:
    ws, seqs = history
    target = seqs[1]
    with tampering(db_of(ws)) as con:
        set_line(con, target, b'{"seq": 3, "kind": "event", "bo')
    for args in (["ledger", "verify"], ["check"]):
        code, out, err = run_cli(*args, cwd=ws)
        assert code == 1, (args, out, err)
        assert "Traceback" not in err and "internal error" not in err, err


def test_resealing_everything_is_caught_by_the_head_written_down(
    history: tuple[Path, list[int]], run_cli: CliRunner
) -> None:
    ws, seqs = history
    written_down = ok(run_cli("ledger", "head", cwd=ws)).strip()
    with tampering(db_of(ws)) as con:
        records = [
            Record.from_line(bytes(r[0]))
            for r in con.execute("SELECT line FROM records ORDER BY seq")
        ]
        prev = ""
        for r in records:
            body = dict(r.body, rationale="history rewritten") if r.seq == seqs[0] else r.body
            sealed = Record.seal(r.seq, r.kind, body, prev)
            set_line(con, r.seq, sealed.to_line())
            prev = sealed.hash
    # a perfect forgery passes the chain check, but not the head comparison
    assert ok(run_cli("ledger", "verify", cwd=ws)).startswith("ok: ")
    assert ok(run_cli("ledger", "head", cwd=ws)).strip() != written_down


def test_cutting_the_newest_records_is_caught_by_the_head_written_down(
    history: tuple[Path, list[int]], run_cli: CliRunner
) -> None:
    ws, _ = history
    written_down = as_json(run_cli("ledger", "head", "--json", cwd=ws))
    with tampering(db_of(ws)) as con:
        con.execute("DELETE FROM records WHERE seq = (SELECT MAX(seq) FROM records)")
    now = as_json(run_cli("ledger", "head", "--json", cwd=ws))
    assert now["records"] == written_down["records"] - 1
    assert now["head"] != written_down["head"]


def test_the_head_moves_only_when_records_are_appended(ws: Path, run_cli: CliRunner) -> None:
    (ws / "f.txt").write_text("1\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    assert ok(run_cli("ledger", "head", cwd=ws)) == "(empty ledger)\n"
    ok(run_cli("snapshot", cwd=ws))
    head = as_json(run_cli("ledger", "head", "--json", cwd=ws))
    assert len(head["head"]) == 64 and head["records"] > 0

    for args in (
        ["status"],
        ["history"],
        ["check"],
        ["ledger", "verify"],
        ["op", "log"],
        ["branch", "list"],
        ["bookmark", "list"],
        ["diff", "HEAD"],
        ["show", "HEAD:f.txt"],
        ["snapshot"],  # nothing changed: nothing recorded
    ):
        ok(run_cli(*args, cwd=ws))
        assert as_json(run_cli("ledger", "head", "--json", cwd=ws)) == head, args
    assert ok(run_cli("ledger", "head", cwd=ws)).strip() == head["head"]

    (ws / "f.txt").write_text("2\n")
    ok(run_cli("snapshot", cwd=ws))
    after = as_json(run_cli("ledger", "head", "--json", cwd=ws))
    assert after["head"] != head["head"] and after["records"] > head["records"]
    ok(run_cli("bookmark", "add", "here", cwd=ws))
    marked = as_json(run_cli("ledger", "head", "--json", cwd=ws))
    assert marked["head"] != after["head"] and marked["records"] > after["records"]


# -- the index --------------------------------------------------------------------------


def test_a_damaged_event_index_is_reported_and_rebuilt(
    history: tuple[Path, list[int]], run_cli: CliRunner
) -> None:
    ws, seqs = history
    full = as_json(run_cli("history", "--json", cwd=ws))
    con = sqlite3.connect(db_of(ws))
    try:
        con.execute("DELETE FROM events WHERE seq IN (?, ?)", (seqs[0], seqs[2]))
        con.commit()
    finally:
        con.close()
    damaged = as_json(run_cli("history", "--json", cwd=ws))
    assert len(damaged) == len(full) - 2, "the damage is visible to a user"

    code, _, err = run_cli("ledger", "verify", cwd=ws)
    assert code == 1
    assert f"event record {seqs[0]} is indexed wrongly" in err
    assert f"event record {seqs[2]} is indexed wrongly" in err
    code, _, err = run_cli("check", cwd=ws)
    assert code == 1 and "indexed wrongly" in err

    assert ok(run_cli("ledger", "index", "rebuild", cwd=ws)) == "Index rebuilt.\n"
    assert ok(run_cli("ledger", "verify", cwd=ws)).startswith("ok: ")
    assert ok(run_cli("check", cwd=ws)).startswith("ok: ")
    assert as_json(run_cli("history", "--json", cwd=ws)) == full


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE events SET author = 'mallory' WHERE seq = {seq}",
        "UPDATE events SET branch = 'elsewhere' WHERE seq = {seq}",
        "DELETE FROM event_files WHERE seq = {seq}",
        "INSERT INTO event_files VALUES ({seq}, 'planted.txt')",
        "INSERT INTO events VALUES (9999, 'ghjkghjkghjkghjkghjk', 'x', 'main', 'o', 'a', 'human',"
        " 'snapshot', NULL)",
    ],
    ids=["author", "branch", "files-lost", "files-planted", "phantom-event"],
)
def test_every_kind_of_index_damage_is_reported_and_rebuilt(
    history: tuple[Path, list[int]], run_cli: CliRunner, damage: str
) -> None:
    ws, seqs = history
    full = as_json(run_cli("history", "--json", cwd=ws))
    con = sqlite3.connect(db_of(ws))
    try:
        con.execute(damage.format(seq=seqs[1]))
        con.commit()
    finally:
        con.close()
    report = json.loads(run_cli("ledger", "verify", "--json", cwd=ws)[1])
    assert report["ok"] is False
    assert all(p.startswith("index: ") for p in report["problems"]), report
    ok(run_cli("ledger", "index", "rebuild", cwd=ws))
    assert as_json(run_cli("ledger", "verify", "--json", cwd=ws))["ok"] is True
    assert as_json(run_cli("history", "--json", cwd=ws)) == full
