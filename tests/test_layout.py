"""Finding and reconnecting repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CliRunner, as_json, ok
from strata import Repository
from strata.errors import UsageError


def test_init_with_the_same_store_reconnects_a_workspace_whose_pointer_was_deleted(
    tmp_path: Path,
) -> None:
    ws, store = tmp_path / "ws", tmp_path / "store"
    ws.mkdir()
    (ws / "a.txt").write_text("kept\n")
    with Repository.init(ws, store=store) as repo:
        first = repo.snapshot("one").event
    assert first is not None
    (ws / ".strata").unlink()  # what 'git clean -fdx' or 'rm -rf .strata' does
    with Repository.init(ws, store=store) as repo:
        assert [e.id for e in repo.history()] == [first.id]
        assert repo.check() == []


def test_a_store_of_another_workspace_is_refused(tmp_path: Path) -> None:
    one, two, store = tmp_path / "one", tmp_path / "two", tmp_path / "store"
    one.mkdir()
    two.mkdir()
    Repository.init(one, store=store).close()
    with pytest.raises(UsageError, match="belongs to the workspace"):
        Repository.init(two, store=store)
    assert not (two / ".strata").exists()


# -- config.toml: tables Strata does not read -----------------------------------------------


def _append(ws: Path, text: str) -> None:
    with open(ws / ".strata" / "config.toml", "a", encoding="utf-8") as config:
        config.write(text)


def test_every_table_strata_writes_or_documents_is_known(tmp_path: Path) -> None:
    import re
    import tomllib

    from strata.layout import CONFIG_TABLES, Layout, load_config, unknown_tables

    ws = tmp_path / "ws"
    ws.mkdir()
    Repository.init(ws).close()  # what init writes: [repository], [ledger], [ignore]
    assert unknown_tables(load_config(Layout(ws, ws / ".strata")).raw) == []
    docs = Path(__file__).resolve().parents[1] / "docs"
    format_md = (docs / "format.md").read_text(encoding="utf-8")
    block = format_md.split("### 1.2 config.toml", 1)[1].split("```toml", 1)[1].split("```")[0]
    assert unknown_tables(tomllib.loads(block)) == []  # the documented example loads quietly
    written = "\n".join(p.read_text(encoding="utf-8") for p in docs.glob("*.md"))
    for table in CONFIG_TABLES:  # each one Strata reads is documented somewhere
        assert re.search(rf"\[{table}[.\]]", written), table


def test_an_unknown_table_is_a_warning_and_recording_goes_on(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    _append(ws, '\n[policy]\nprofile = "read-only"\n')  # not Strata's name for it
    (ws / "a.txt").write_text("recorded\n")
    code, out, err = run_cli("snapshot", "-m", "one", cwd=ws)
    assert code == 0 and "Recorded" in out
    (warning,) = err.splitlines()  # once, though the command may open the repository twice
    assert warning.startswith("warning: ") and "config.toml: [policy] is not a table" in warning
    assert "(known: repository, ignore, ledger, watch, retention, providers, model" in warning
    assert as_json(run_cli("history", "--json", cwd=ws))[0]["rationale"] == "one"


@pytest.mark.parametrize(
    ("table", "command", "says"),
    [
        (
            "retenton",
            ("gc", "--dry-run"),
            "[retenton] is not a table Strata reads: did you mean [retention]?",
        ),
        ("gatway", ("exec", "--dry-run", "--", "ls"), "[gatway], which Strata does not read"),
        ("kbs", ("kb", "index"), "[kbs] is not a table Strata reads: did you mean [kb]?"),
        (
            "models",
            ("models", "--json"),
            "[models] is not a table Strata reads: did you mean [model]?",
        ),
    ],
)
def test_a_near_miss_of_a_table_stops_the_command_that_reads_it(
    tmp_path: Path, run_cli: CliRunner, table: str, command: tuple[str, ...], says: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ok(run_cli("init", cwd=ws))
    _append(ws, f"\n[{table}]\ndefault = 1\n")
    code, out, err = run_cli(*command, cwd=ws)
    assert code != 0 and out == "", (out, err)
    assert says in err and "Traceback" not in err
    (ws / "a.txt").write_text("recorded all the same\n")
    ok(run_cli("snapshot", cwd=ws))  # a mistake in an optional table never stops recording


def test_a_near_miss_of_watch_keeps_the_watcher_from_starting(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ok(run_cli("init", cwd=ws))
    _append(ws, "\n[wacth]\nauto = false\n")  # meant to turn it off: it must not start
    status = as_json(run_cli("watch", "--status", "--json", cwd=ws, env={"STRATA_NO_DAEMON": "0"}))
    assert status["running"] is False
    assert status["reason"] == (
        "not started: config.toml: [wacth] is not a table Strata reads: did you mean [watch]?"
    )
