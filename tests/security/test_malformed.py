"""Every malformed input gives one ``error:`` line, never an internal error (issue 10, item 15).

A template repository (two snapshots, a file named with the byte ``\\xff``) is
copied for each case, one of its files is damaged, and every command a user
reaches for runs against it: each either works or prints exactly one
``error:`` line (and maybe a ``hint:``), exits non-zero, and prints no
traceback. Reading commands still work wherever the damage leaves them
something to read (a stat cache is a hint; a journal never blocks readers).
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CliRunner, assert_user_error, ok

READERS = (["history"], ["status"])
WRITERS = (["snapshot", "-m", "after"],)
FF = os.fsdecode(b"\xff")


def _journal(body: object) -> Callable[[Path], None]:
    def damage(repo: Path) -> None:
        text = body if isinstance(body, str) else json.dumps(body)
        (repo / "journal" / "j.json").write_text(text)

    return damage


def _draft(body: str) -> Callable[[Path], None]:
    def damage(repo: Path) -> None:
        (repo / "draft").mkdir(exist_ok=True)
        (repo / "draft" / "draft.json").write_text(body)

    return damage


def _config(body: str) -> Callable[[Path], None]:
    return lambda repo: (repo / "config.toml").write_text(body)


def _statcache(body: object) -> Callable[[Path], None]:
    return lambda repo: (repo / "statcache").write_bytes(marshal.dumps(body))


def _truncate(size: int) -> Callable[[Path], None]:
    def damage(repo: Path) -> None:
        with open(repo / "ledger.db", "r+b") as f:
            f.truncate(size)

    return damage


def _swap_sqlite(repo: Path) -> None:
    import sqlite3

    db = sqlite3.connect(repo / "ledger.db")
    rows = db.execute("SELECT seq, line FROM records ORDER BY seq LIMIT 2").fetchall()
    db.execute("DROP TRIGGER IF EXISTS records_no_update")
    db.execute("UPDATE records SET line = ? WHERE seq = ?", (rows[1][1], rows[0][0]))
    db.execute("UPDATE records SET line = ? WHERE seq = ?", (rows[0][1], rows[1][0]))
    db.commit()
    db.close()


def _swap_jsonl(repo: Path) -> None:
    log = repo / "ledger" / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    log.write_bytes(b"".join(lines))


ACTION = {"op": "write", "path": "a.txt", "oid": "ab" * 32, "mode": 420, "before": None}
CASES: dict[str, tuple[Callable[[Path], None], bool]] = {
    # name: (damage, whether the readers must still work)
    "journal actions a string": (_journal({"version": 1, "actions": "x"}), True),
    "journal a list": (_journal([1, 2]), True),
    "journal action missing keys": (_journal({"version": 1, "actions": [{"op": "write"}]}), True),
    "journal action wrong types": (
        _journal({"version": 1, "actions": [{**ACTION, "mode": "rw"}], "operation": {}}),
        True,
    ),
    "journal operation a list": (_journal({"version": 1, "actions": [], "operation": []}), True),
    "journal truncated": (_journal('{"version": 1, "act'), True),
    "journal unknown version": (_journal({"version": 99}), True),
    "draft.json a list": (_draft("[1]"), False),
    "draft.json missing keys": (_draft('{"format": 1}'), False),
    "draft.json wrong types": (
        _draft('{"format": 1, "id": 3, "branch": [], "base_event_id": null, "created_ms": "x"}'),
        False,
    ),
    "draft.json truncated": (_draft('{"format": 1, "id": "'), False),
    "config.toml truncated": (_config("[repository\nformat = 1"), False),
    "config.toml table a number": (_config("repository = 3\n"), False),
    "config.toml defaults a string": (
        _config('[repository]\nformat = 1\n[ignore]\ndefaults = "x"\n'),
        False,
    ),
    "config.toml wrong types": (
        _config('[repository]\nformat = "1"\nworkspace = 3\n[ledger]\ndriver = [1]\n'),
        False,
    ),
    "config.toml driver a list": (
        _config("[repository]\nformat = 1\n[ledger]\ndriver = [1]\n"),
        False,
    ),
    "stat cache wrong shape": (
        _statcache({"version": 3, "generation": "g", "dirs": {"": b"\x00garbage"}}),
        True,
    ),
    "stat cache wrong types": (
        _statcache(
            {
                "version": 3,
                "generation": "g",
                "dirs": {"": marshal.dumps((("a.txt",), "r", (), {"a.txt": "zz"}, "", ()))},
            }
        ),
        True,
    ),
    "stat cache a list": (_statcache([1, 2, 3]), True),
    # read through a mapping of the file, which an empty file cannot have
    "stat cache empty": (lambda repo: (repo / "statcache").write_bytes(b""), True),
    "stat cache cut short": (
        lambda repo: (repo / "statcache").write_bytes((repo / "statcache").read_bytes()[:100]),
        True,
    ),
    "config.toml empty": (_config(""), False),
    "config.toml another hash": (_config('[repository]\nformat = 1\nhash = "sha1"\n'), False),
    "config.toml another compression": (
        _config("[repository]\nformat = 1\ncompression = 5\n"),
        False,
    ),
    "ledger.db deleted": (lambda repo: (repo / "ledger.db").unlink(), False),
    "ledger.db emptied": (_truncate(0), False),
    "ledger.db truncated": (_truncate(4096), False),
    "ledger.db records swapped": (_swap_sqlite, False),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A repository per ledger driver with two snapshots and a non-UTF-8 file name."""
    made = {}
    home = tmp_path_factory.mktemp("home")
    cli = CliRunner(home)
    for driver in ("sqlite", "jsonl"):
        ws = tmp_path_factory.mktemp(driver) / "ws"
        ws.mkdir()
        ok(cli("init", "--no-snapshot", "--ledger", driver, cwd=ws))
        (ws / "a.txt").write_text("one\n")
        (ws / FF).write_bytes(b"one\n")
        ok(cli("snapshot", "-m", "one", cwd=ws))
        (ws / "a.txt").write_text("two\n")
        (ws / FF).write_bytes(b"two\n")
        ok(cli("snapshot", "-m", "two", cwd=ws))
        made[driver] = ws
    return made


def _copy(template: Path, tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(template, ws, symlinks=True)
    return ws


def _clean(result: tuple[int, str, str]) -> bool:
    """True when the command worked; else it must be one clean error.

    ``check`` lists what it found on ``problem:`` lines before its one ``error:``.
    """
    code, _, err = result
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 0:
        return True
    lines = [line for line in err.splitlines(keepends=True) if not line.startswith("problem: ")]
    assert_user_error((code, "", "".join(lines)))
    return False


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_file_gives_one_error_line(
    case: str, template: dict[str, Path], run_cli: CliRunner, tmp_path: Path
) -> None:
    damage, readers_work = CASES[case]
    ws = _copy(template["sqlite"], tmp_path)
    damage(ws / ".strata")
    worked = [_clean(run_cli(*argv, cwd=ws)) for argv in (*READERS, *WRITERS, ["check"])]
    if readers_work:
        assert all(worked[: len(READERS)]), case
    if not case.startswith("stat cache"):
        assert not all(worked), f"{case}: every command passed over the damage"


def test_swapped_jsonl_records_give_one_error_line(
    template: dict[str, Path], run_cli: CliRunner, tmp_path: Path
) -> None:
    ws = _copy(template["jsonl"], tmp_path)
    _swap_jsonl(ws / ".strata")
    worked = [_clean(run_cli(*argv, cwd=ws)) for argv in (*READERS, *WRITERS, ["check"])]
    assert not worked[-1], "check must see the swapped records"


def test_a_huge_limit_means_all(template: dict[str, Path], run_cli: CliRunner) -> None:
    ws = template["sqlite"]
    out = ok(run_cli("history", "--limit", str(10**30), cwd=ws))
    assert len(out.splitlines()) == 2
    assert ok(run_cli("op", "log", "--limit", str(10**30), cwd=ws))
    assert_user_error(run_cli("history", "--limit", "0", cwd=ws), code=2)


def test_a_non_utf8_file_name_is_recorded_shown_and_rewound(
    template: dict[str, Path], run_cli: CliRunner, tmp_path: Path
) -> None:
    ws = _copy(template["sqlite"], tmp_path)
    assert '"a/\\377"' in ok(run_cli("diff", "HEAD~1", "HEAD", cwd=ws))
    ok(run_cli("history", "--file", FF, cwd=ws))
    _clean(run_cli("show", f"HEAD:{FF}", cwd=ws))
    ok(run_cli("rewind", "HEAD~1", cwd=ws))
    assert (ws / FF).read_bytes() == b"one\n"
    ok(run_cli("status", cwd=ws))


@pytest.mark.parametrize(("driver", "ledger"), [("sqlite", "ledger.db"), ("jsonl", "ledger")])
def test_a_lost_ledger_never_starts_a_new_history(
    driver: str, ledger: str, template: dict[str, Path], run_cli: CliRunner, tmp_path: Path
) -> None:
    ws = _copy(template[driver], tmp_path)
    lost = ws / ".strata" / ledger
    if lost.is_dir():
        shutil.rmtree(lost)
    else:
        lost.unlink()
    for argv in (["history"], ["snapshot", "-m", "over the old history"]):
        assert_user_error(run_cli(*argv, cwd=ws), says="ledger")
    assert not lost.exists(), "a new, empty ledger was made over the objects of the old one"
