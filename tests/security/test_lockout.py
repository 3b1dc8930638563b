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

from pathlib import Path

import pytest

from conftest import CliRunner, ok

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
    ok(run_cli("init", cwd=ws))
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
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", "-m", "rules", cwd=ws))
    code, out, err = run_cli("show", "HEAD:deep/er/.gitignore", cwd=ws)
    assert code == 0, err
    assert out == ".gitignore\n*\n"
    assert ok(run_cli("show", "HEAD:.gitignore", cwd=ws)) == "*\n!deep/\n!deep/**/\n"
    assert ok(run_cli("show", "HEAD:deep/.strataignore", cwd=ws)) == ".strataignore\n"
