"""The large-file guard: files over ``[snapshot] max_file_size`` are named, skipped and kept.

A skipped file is not recorded; ``status``, ``snapshot``, ``run`` and
``review`` name it in a warning, and a rollback or a rewind never deletes or
overwrites it. ``large_files`` opts a path in.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import CliRunner, as_json, assert_user_error, ok

LIMIT = '\n[snapshot]\nmax_file_size = "1 MB"\n'
BIG = 2 * 1024 * 1024


def _init(ws: Path, run_cli: CliRunner, config: str = LIMIT) -> None:
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("a\n")
    ok(run_cli("init", cwd=ws))
    with (ws / ".strata" / "config.toml").open("a") as f:
        f.write(config)


def test_snapshot_and_status_name_a_file_over_the_limit_and_record_the_rest(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli)
    (ws / "big.bin").write_bytes(b"x" * BIG)
    (ws / "small.txt").write_text("small\n")
    code, _out, err = run_cli("snapshot", "-m", "one", cwd=ws)
    assert code == 0, err
    assert "big.bin" in err and "max_file_size" in err and "2.0 MiB" in err, err
    listed = ok(run_cli("show", "HEAD:", cwd=ws))
    assert "small.txt" in listed and "big.bin" not in listed, listed
    code, _out, err = run_cli("status", cwd=ws)
    assert code == 0 and "big.bin" in err and "max_file_size" in err, err
    status = as_json(run_cli("status", "--json", cwd=ws))
    assert any("big.bin" in w for w in status["warnings"]), status
    assert (ws / "big.bin").stat().st_size == BIG


def test_a_path_opted_in_is_recorded_whatever_its_size(tmp_path: Path, run_cli: CliRunner) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli, LIMIT + 'large_files = ["data/*.bin"]\n')
    (ws / "data").mkdir()
    (ws / "data" / "big.bin").write_bytes(b"y" * BIG)
    (ws / "other.bin").write_bytes(b"z" * BIG)
    code, _out, err = run_cli("snapshot", cwd=ws, text=False)
    assert code == 0, err
    assert b"data/big.bin" not in err and b"other.bin" in err, err
    code, shown, err = run_cli("show", "HEAD:data/big.bin", cwd=ws, text=False)
    assert code == 0 and shown == b"y" * BIG, err


def test_rollback_leaves_a_skipped_file_alone(tmp_path: Path, run_cli: CliRunner) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli)
    ok(run_cli("snapshot", cwd=ws))
    script = f"head -c {BIG} /dev/zero > made.bin; rm a.txt; exit 3"
    code, _out, err = run_cli("run", "--rollback-on-failure", "--", "sh", "-c", script, cwd=ws)
    assert code == 3, err
    assert "made.bin" in err and "max_file_size" in err, err
    # the rollback's own line says why it left the file (not only "could not be read")
    (left,) = [line for line in err.splitlines() if line.startswith("strata: left made.bin")]
    assert "over [snapshot] max_file_size" in left, left
    assert (ws / "a.txt").read_text() == "a\n"  # rolled back
    assert (ws / "made.bin").stat().st_size == BIG  # never recorded: never deleted


def test_rewind_neither_deletes_nor_overwrites_a_file_that_grew_past_the_limit(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli)
    ok(run_cli("snapshot", "-m", "without", cwd=ws))
    (ws / "grows.log").write_text("small\n")
    ok(run_cli("snapshot", "-m", "small", cwd=ws))
    (ws / "grows.log").write_bytes(b"g" * BIG)
    code, _out, err = run_cli("rewind", "HEAD~1", cwd=ws)
    assert code == 0, err
    assert "grows.log" in err, err
    assert (ws / "grows.log").stat().st_size == BIG


def test_rewind_never_overwrites_a_skipped_file_with_an_older_one(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli)
    (ws / "data.bin").write_text("old\n")
    ok(run_cli("snapshot", "-m", "small", cwd=ws))
    (ws / "data.bin").unlink()
    ok(run_cli("snapshot", "-m", "gone", cwd=ws))
    (ws / "data.bin").write_bytes(b"n" * BIG)  # never recorded: over the limit
    code, _out, err = run_cli("rewind", "HEAD~1", cwd=ws)
    assert code == 0, err
    assert (ws / "data.bin").read_bytes() == b"n" * BIG


def test_review_names_a_file_the_draft_holds_over_the_limit(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli)
    ok(run_cli("snapshot", cwd=ws))
    plant = f"head -c {BIG} /dev/zero > big.bin && echo two > a.txt"
    ok(run_cli("run", "--draft", "--sandbox", "none", "--", "sh", "-c", plant, cwd=ws))
    code, _out, err = run_cli("review", cwd=ws)
    assert code == 0, err
    assert "big.bin" in err and "max_file_size" in err, err
    review = json.loads(run_cli("review", "--json", cwd=ws)[1])
    assert any("big.bin" in w for w in review["warnings"]), review


def test_a_limit_that_is_no_size_is_refused_in_one_line(tmp_path: Path, run_cli: CliRunner) -> None:
    ws = tmp_path / "ws"
    _init(ws, run_cli, '\n[snapshot]\nmax_file_size = "huge"\n')
    assert_user_error(run_cli("snapshot", cwd=ws), says="max_file_size")
    ws2 = tmp_path / "ws2"
    _init(ws2, run_cli, "\n[snapshot]\nmax_files = 3\n")
    assert_user_error(run_cli("status", cwd=ws2), says="snapshot.max_files")
