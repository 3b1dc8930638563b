"""Publish's three-way merge never guesses: what it cannot combine exactly is a conflict.

Each test makes a real Draft (``strata draft start``), edits the Draft's files
and Published meanwhile, then runs ``strata publish``: a binary file edited on
both sides, a file deleted on one side and edited on the other, and a Draft's
empty folder where Published has a file are conflicts (nothing written); a mode
change made in the Draft survives a merge with Published's edits.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import CliRunner, Person, assert_user_error, ok


def _draft(run_cli: CliRunner, ws: Path, files: dict[str, bytes]) -> Path:
    """A workspace holding ``files``, recorded, with a Draft open; returns the Draft's folder."""
    ok(run_cli("init", cwd=ws))
    for name, data in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_bytes(data)
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    return ws / ".strata" / "draft" / "files"


def _refused(run_cli: CliRunner, ws: Path, path: str) -> None:
    err = assert_user_error(run_cli("publish", cwd=ws), says=path)
    assert "conflict" in err.lower()


BINARY = bytes(range(256)) * 4 + b"\n"


def test_a_binary_file_edited_on_both_sides_is_a_conflict(run_cli: CliRunner, ws: Path) -> None:
    # Lines of a binary file are not lines: edits at both ends of one blob
    # would line-merge cleanly, and silently produce bytes nobody wrote.
    base = b"HEAD\n" + b"\x00\x01\x02\n" * 20 + b"TAIL\n"
    draft = _draft(run_cli, ws, {"img.bin": base})
    (draft / "img.bin").write_bytes(base.replace(b"HEAD", b"DRAFT"))
    (ws / "img.bin").write_bytes(base.replace(b"TAIL", b"PUBLISHED"))
    _refused(run_cli, ws, "img.bin")
    assert (ws / "img.bin").read_bytes() == base.replace(b"TAIL", b"PUBLISHED")


def test_a_text_file_that_turns_binary_on_one_side_is_a_conflict(
    run_cli: CliRunner, ws: Path
) -> None:
    # base and Published are text, the Draft wrote a NUL far past git's first 8000 bytes
    base = b"".join(b"line %d\n" % i for i in range(2000))
    draft = _draft(run_cli, ws, {"data.txt": base})
    (draft / "data.txt").write_bytes(base + b"\x00tail\n")
    (ws / "data.txt").write_bytes(b"top\n" + base)
    _refused(run_cli, ws, "data.txt")
    assert (ws / "data.txt").read_bytes() == b"top\n" + base


def test_a_mode_change_made_in_the_draft_survives_the_merge(run_cli: CliRunner, ws: Path) -> None:
    text = b"".join(b"echo %d\n" % i for i in range(20))
    draft = _draft(run_cli, ws, {"run.sh": text, "notes.txt": b"one\n"})
    (draft / "run.sh").chmod(0o755)
    (ws / "run.sh").write_bytes(text + b"echo published\n")
    (ws / "notes.txt").write_bytes(b"two\n")  # Published moved: publish merges
    ok(run_cli("publish", cwd=ws))
    assert (ws / "run.sh").read_bytes() == text + b"echo published\n"
    assert os.stat(ws / "run.sh").st_mode & 0o777 == 0o755
    assert (ws / "notes.txt").read_bytes() == b"two\n"


def test_a_mode_change_and_an_edit_in_the_draft_survive_the_merge(
    run_cli: CliRunner, ws: Path
) -> None:
    text = b"".join(b"echo %d\n" % i for i in range(20))
    draft = _draft(run_cli, ws, {"run.sh": text})
    (draft / "run.sh").write_bytes(b"#!/bin/sh\n" + text)
    (draft / "run.sh").chmod(0o755)
    (ws / "run.sh").write_bytes(text + b"echo published\n")
    ok(run_cli("publish", cwd=ws))
    assert (ws / "run.sh").read_bytes() == b"#!/bin/sh\n" + text + b"echo published\n"
    assert os.stat(ws / "run.sh").st_mode & 0o777 == 0o755


def test_a_published_file_is_never_replaced_by_the_drafts_empty_folder(
    run_cli: CliRunner, ws: Path
) -> None:
    draft = _draft(run_cli, ws, {"keep.txt": b"k\n", "sub/old.txt": b"o\n"})
    # the Draft empties sub/; Published meanwhile writes a file named sub/new.txt
    (draft / "sub" / "old.txt").unlink()
    (draft / "sub" / "new.txt").mkdir()
    (ws / "sub" / "new.txt").write_bytes(b"precious\n")
    _refused(run_cli, ws, "sub/new.txt")
    assert (ws / "sub" / "new.txt").read_bytes() == b"precious\n"


def test_a_file_published_adds_where_the_draft_adds_an_empty_folder_is_a_conflict(
    run_cli: CliRunner, ws: Path
) -> None:
    draft = _draft(run_cli, ws, {"keep.txt": b"k\n"})
    (draft / "out").mkdir()
    (ws / "out").write_bytes(b"precious\n")
    _refused(run_cli, ws, "out")
    assert (ws / "out").read_bytes() == b"precious\n"


def test_a_file_deleted_in_the_draft_and_edited_in_published_is_a_conflict(
    run_cli: CliRunner, ws: Path
) -> None:
    draft = _draft(run_cli, ws, {"a.txt": b"one\n", "b.txt": b"b\n"})
    (draft / "a.txt").unlink()
    (ws / "a.txt").write_bytes(b"one\ntwo\n")
    _refused(run_cli, ws, "a.txt")
    assert (ws / "a.txt").read_bytes() == b"one\ntwo\n"


def test_a_file_edited_in_the_draft_and_deleted_in_published_is_a_conflict(
    run_cli: CliRunner, ws: Path
) -> None:
    draft = _draft(run_cli, ws, {"a.txt": b"one\n", "b.txt": b"b\n"})
    (draft / "a.txt").write_bytes(b"one\ndraft\n")
    (ws / "a.txt").unlink()
    _refused(run_cli, ws, "a.txt")
    assert not (ws / "a.txt").exists()


def test_a_folder_deleted_in_published_while_the_draft_edits_a_file_in_it_is_a_conflict(
    run_cli: CliRunner, ws: Path
) -> None:
    draft = _draft(run_cli, ws, {"lib/x.py": b"x = 1\n", "lib/y.py": b"y = 1\n"})
    (draft / "lib" / "x.py").write_bytes(b"x = 2\n")
    for name in ("x.py", "y.py"):
        (ws / "lib" / name).unlink()
    (ws / "lib").rmdir()
    _refused(run_cli, ws, "lib/x.py")
    assert not (ws / "lib").exists()


def test_a_mode_only_change_on_both_sides_keeps_the_drafts_mode(
    run_cli: CliRunner, ws: Path
) -> None:
    draft = _draft(run_cli, ws, {"tool": b"#!/bin/sh\n", "other": b"o\n"})
    (draft / "tool").chmod(0o755)
    (ws / "other").write_bytes(b"p\n")
    ok(run_cli("publish", cwd=ws))
    assert stat.S_IMODE(os.stat(ws / "tool").st_mode) == 0o755
    assert (ws / "other").read_bytes() == b"p\n"


def test_a_folder_mode_published_changed_meanwhile_survives_the_merge(
    run_cli: CliRunner, ws: Path
) -> None:
    # Published made a folder private while the agent worked: publishing must not reopen it
    draft = _draft(run_cli, ws, {"private/key": b"k\n", "notes.txt": b"n\n"})
    (draft / "notes.txt").write_bytes(b"draft\n")
    (ws / "private").chmod(0o700)
    ok(run_cli("publish", cwd=ws))
    assert stat.S_IMODE(os.stat(ws / "private").st_mode) == 0o700
    assert (ws / "notes.txt").read_bytes() == b"draft\n"


def test_a_folder_mode_the_draft_changed_survives_the_merge(run_cli: CliRunner, ws: Path) -> None:
    draft = _draft(run_cli, ws, {"bin/tool": b"t\n", "notes.txt": b"n\n"})
    (draft / "bin").chmod(0o700)
    (ws / "notes.txt").write_bytes(b"published\n")
    ok(run_cli("publish", cwd=ws))
    assert stat.S_IMODE(os.stat(ws / "bin").st_mode) == 0o700
    assert (ws / "notes.txt").read_bytes() == b"published\n"


def test_a_file_mode_published_changed_survives_a_draft_edit(run_cli: CliRunner, ws: Path) -> None:
    text = b"".join(b"secret %d\n" % i for i in range(20))
    draft = _draft(run_cli, ws, {"secret.txt": text})
    (draft / "secret.txt").write_bytes(text + b"draft\n")
    (ws / "secret.txt").chmod(0o600)
    (ws / "secret.txt").write_bytes(b"top\n" + text)
    ok(run_cli("publish", cwd=ws))
    assert (ws / "secret.txt").read_bytes() == b"top\n" + text + b"draft\n"
    assert stat.S_IMODE(os.stat(ws / "secret.txt").st_mode) == 0o600


def test_different_mode_changes_on_both_sides_are_a_conflict(run_cli: CliRunner, ws: Path) -> None:
    text = b"".join(b"line %d\n" % i for i in range(20))
    draft = _draft(run_cli, ws, {"f.txt": text})
    (draft / "f.txt").chmod(0o755)
    (draft / "f.txt").write_bytes(text + b"draft\n")
    (ws / "f.txt").chmod(0o600)
    _refused(run_cli, ws, "f.txt")
    assert stat.S_IMODE(os.stat(ws / "f.txt").st_mode) == 0o600


def test_modes_merge_for_root_and_for_an_unprivileged_user(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    person.run(["mkdir", str(ws)])
    sh = [
        "sh",
        "-c",
        "mkdir private && echo k > private/key && echo t > tool && echo n > notes.txt",
    ]
    assert person.run(sh, cwd=ws).returncode == 0
    ok(cli_as("init", cwd=ws))
    ok(cli_as("snapshot", cwd=ws))
    ok(cli_as("draft", "start", cwd=ws))
    draft = ws / ".strata" / "draft" / "files"
    person.run(["chmod", "755", str(draft / "tool")])  # the Draft makes it executable
    person.run(["chmod", "700", str(ws / "private")])  # Published makes a folder private
    person.run(["sh", "-c", "echo published > notes.txt"], cwd=ws)
    ok(cli_as("publish", cwd=ws))
    assert stat.S_IMODE(os.stat(ws / "private").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ws / "tool").st_mode) == 0o755
    assert (ws / "notes.txt").read_bytes() == b"published\n"
    assert (ws / "private" / "key").stat().st_uid == person.uid


# -- a Draft cannot delete a tracked file by ignoring it -------------------------------


def test_a_file_the_draft_ignores_is_not_deleted_by_publish(run_cli: CliRunner, ws: Path) -> None:
    draft = _draft(run_cli, ws, {"app.py": b"print(1)\n", "other.txt": b"o\n"})
    with open(draft / "app.py", "ab") as f:
        f.write(b"x\n")
    (draft / ".strataignore").write_text("app.py\n")
    review = ok(run_cli("review", cwd=ws))
    assert "D app.py" not in review, review
    assert "app.py" in review and "ignored" in review, review
    ok(run_cli("publish", cwd=ws))
    assert (ws / "app.py").read_bytes() == b"print(1)\n"  # Published's version is kept
    assert (ws / ".strataignore").read_text() == "app.py\n"  # the rule change is published


def test_a_file_the_draft_ignores_survives_a_merge_too(run_cli: CliRunner, ws: Path) -> None:
    draft = _draft(run_cli, ws, {"app.py": b"print(1)\n", "other.txt": b"o\n"})
    (draft / ".strataignore").write_text("app.py\n")
    (ws / "other.txt").write_bytes(b"published moved\n")
    ok(run_cli("snapshot", "-m", "published moved", cwd=ws))
    ok(run_cli("publish", cwd=ws))
    assert (ws / "app.py").read_bytes() == b"print(1)\n"
    assert (ws / "other.txt").read_bytes() == b"published moved\n"
