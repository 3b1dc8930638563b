"""The ``strata`` command line, run as a user runs it: in a child process."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from conftest import CliRunner, Dir, File, Link, as_json, assert_user_error, ok
from strata.cli import COMMAND_MODULES, cli, load_all
from strata.store.objects import hash_bytes

MakeTree = Callable[..., Path]
Manifest = Callable[..., dict[str, Any]]


@pytest.fixture
def project(ws: Path, make_tree: MakeTree, run_cli: CliRunner) -> Path:
    """A workspace with two recorded snapshots (HEAD~1 and HEAD)."""
    make_tree(
        ws,
        {
            "README.md": "# demo\n",
            "src/app.py": "print('v1')\n",
            "src/util.py": "X = 1\n",
            "data.bin": b"\0\1\2\3",
        },
    )
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "first", cwd=ws))
    (ws / "src/app.py").write_text("print('v2')\n")
    ok(run_cli("snapshot", "-m", "second", cwd=ws))
    return ws


# -- --json ------------------------------------------------------------------------

EVENT_KEYS = {
    "id",
    "ts",
    "author",
    "action_type",
    "rationale",
    "files",
    "snapshot_ref",
    "parent_event_id",
}
REWIND_KEYS = {
    "event_id",
    "target_event_id",
    "target_snapshot_id",
    "auto_save_event_id",
    "restored_paths",
    "skipped_paths",
}
FILE_DIFF_KEYS = {
    "path",
    "status",
    "old_path",
    "insertions",
    "deletions",
    "binary",
    "bytes_changed",
    "hash_before",
    "hash_after",
    "mode_before",
    "mode_after",
}


def test_init_records_the_folder_as_it_is_and_no_snapshot_skips_it(
    tmp_path: Path, make_tree: MakeTree, run_cli: CliRunner
) -> None:
    ws = tmp_path / "project"
    make_tree(ws, {"src/app.py": "x = 1\n", "README": "hi\n"})
    init = as_json(run_cli("init", "--json", cwd=ws))
    first = init["snapshot"]
    assert first["files"] == 2 and first["warnings"] == []
    (event,) = as_json(run_cli("history", "--json", cwd=ws))
    assert event["id"] == first["event_id"] and event["snapshot_ref"] == first["snapshot_id"]
    assert event["author"] == {"name": "tester", "kind": "human"}
    assert event["rationale"] == "the folder as it was when Strata started recording it"
    assert as_json(run_cli("status", "--json", cwd=ws))["clean"] is True
    # again: nothing more; the words say what init did
    assert as_json(run_cli("init", "--json", cwd=ws))["snapshot"] is None
    assert len(as_json(run_cli("history", "--json", cwd=ws))) == 1
    other = tmp_path / "other"
    make_tree(other, {"a.txt": "a\n"})
    out = ok(run_cli("init", cwd=other))
    assert "Recorded the folder as it is: " in out and "(1 file)" in out
    skipped = tmp_path / "skipped"
    make_tree(skipped, {"a.txt": "a\n"})
    assert as_json(run_cli("init", "--no-snapshot", "--json", cwd=skipped))["snapshot"] is None
    assert as_json(run_cli("history", "--json", cwd=skipped)) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    assert as_json(run_cli("init", "--json", cwd=empty))["snapshot"] is None  # nothing to keep
    assert as_json(run_cli("history", "--json", cwd=empty)) == []


def test_every_json_output_parses_and_has_its_keys(
    tmp_path: Path, ws: Path, make_tree: MakeTree, run_cli: CliRunner
) -> None:
    make_tree(ws, {"a.txt": "1\n", "d/b.bin": b"\0x"})
    init = as_json(run_cli("init", "--no-snapshot", "--json", cwd=ws))
    assert init == {
        "schema": 1,
        "workspace": str(ws.resolve()),
        "repository": str((ws / ".strata").resolve()),
        "ledger": "sqlite",
        "created": True,
        "imported_events": 0,
        "imported_runs": 0,
        "git_exclude": None,
        "snapshot": None,
    }
    assert as_json(run_cli("init", "--json", cwd=ws))["created"] is False

    snap = as_json(run_cli("snapshot", "--json", "-m", "one", cwd=ws))
    assert set(snap) >= {
        "unchanged",
        "event_id",
        "snapshot_id",
        "files_changed",
        "insertions",
        "deletions",
        "changed_paths",
        "warnings",
    }
    assert snap["changed_paths"] == ["a.txt", "d/b.bin"]
    assert as_json(run_cli("snapshot", "--json", cwd=ws))["unchanged"] is True

    (ws / "a.txt").write_text("1\n2\n")
    status = as_json(run_cli("status", "--json", cwd=ws))
    assert set(status) >= {"head_event_id", "head_snapshot_id", "clean", "changes", "warnings"}
    assert status["clean"] is False
    assert status["changes"] == [{"path": "a.txt", "status": "modified", "old_path": None}]

    diff = as_json(run_cli("diff", "HEAD", "--json", cwd=ws))
    assert set(diff) >= {"files", "files_changed", "insertions", "deletions"}
    assert set(diff["files"][0]) >= FILE_DIFF_KEYS
    assert (diff["files_changed"], diff["insertions"], diff["deletions"]) == (1, 1, 0)

    two = as_json(run_cli("snapshot", "--json", "-m", "two", "--author", "bot", cwd=ws))
    history = as_json(run_cli("history", "--json", cwd=ws))
    assert [e["id"] for e in history] == [two["event_id"], snap["event_id"]]
    assert all(set(e) >= EVENT_KEYS for e in history)
    assert history[0]["author"] == {"name": "bot", "kind": "human"}
    assert history[1]["rationale"] == "one"

    manifest = as_json(run_cli("cat", "HEAD", "--json", cwd=ws))
    assert manifest["kind"] == "snapshot" and manifest["format"] == 1
    tree = as_json(run_cli("cat", manifest["tree"], "--json", cwd=ws))
    assert tree["kind"] == "tree"
    assert [(e["name"], e["kind"]) for e in tree["entries"]] == [("a.txt", "file"), ("d", "dir")]
    assert set(tree["entries"][0]) >= {"name", "kind", "mode", "size", "id"}
    blob = as_json(run_cli("cat", tree["entries"][0]["id"][:10], "--json", cwd=ws))
    assert blob == {"schema": 1, "kind": "blob", "size": 4}

    check = as_json(run_cli("check", "--json", cwd=ws))
    assert check == {"schema": 1, "ok": True, "problems": [], "events": 2}

    out = tmp_path / "out"
    export = as_json(run_cli("export", "HEAD~1", str(out), "--json", cwd=ws))
    assert export == {"schema": 1, "ref": "HEAD~1", "directory": str(out), "files_written": 2}

    rewind = as_json(run_cli("rewind", "HEAD~1", "--json", cwd=ws))
    assert set(rewind) >= REWIND_KEYS
    assert rewind["target_event_id"] == snap["event_id"]
    assert rewind["restored_paths"] == ["a.txt"]

    restore = as_json(run_cli("restore", two["event_id"], "--json", "--", "a.txt", cwd=ws))
    assert set(restore) >= REWIND_KEYS
    assert (ws / "a.txt").read_text() == "1\n2\n"


def test_output_is_byte_stable_under_injected_clock_and_seed(
    tmp_path: Path, make_tree: MakeTree
) -> None:
    outputs = []
    for name in ("one", "two"):
        ws = make_tree(tmp_path / name / "ws", {"a.txt": "hello\n"})
        run = CliRunner(tmp_path / name)
        ok(run("init", cwd=ws))
        first = ok(run("snapshot", cwd=ws))
        (ws / "a.txt").write_text("hello again\n")
        second = ok(run("snapshot", "--json", cwd=ws))
        history = ok(run("history", "--json", cwd=ws))
        outputs.append((first, second, history))
    assert outputs[0] == outputs[1]
    assert "2023-11-14T22:13:20" in outputs[0][2]


def test_a_reused_seed_does_not_collide(ws: Path, make_tree: MakeTree, run_cli: CliRunner) -> None:
    make_tree(ws, {"a.txt": "1"})
    same = {"STRATA_SEED": "42"}
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws, env=same))
    (ws / "a.txt").write_text("2")
    ok(run_cli("snapshot", cwd=ws, env=same))
    assert len(as_json(run_cli("history", "--json", cwd=ws))) == 2


# -- help --------------------------------------------------------------------------


def _all_commands() -> list[list[str]]:
    found: list[list[str]] = [[]]

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, command in sorted(group.commands.items()):
            found.append([*prefix, name])
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])

    load_all()
    walk(cli, [])
    return found


def test_every_command_is_found_in_the_module_the_table_names() -> None:
    """The root group imports a command's module on demand, from ``COMMAND_MODULES``."""
    import importlib

    defined = {}
    for module in sorted(set(COMMAND_MODULES.values())):
        for command in importlib.import_module(f"strata.cli.{module}").COMMANDS:
            defined[command.name] = module
    assert defined == COMMAND_MODULES
    cli_modules = {
        p.stem for p in Path(importlib.import_module("strata.cli").__file__).parent.glob("*.py")
    }
    with_commands = {
        m for m in cli_modules if hasattr(importlib.import_module(f"strata.cli.{m}"), "COMMANDS")
    }
    assert with_commands == set(COMMAND_MODULES.values())  # no module's commands left out


def test_a_command_loads_only_its_own_module() -> None:
    """``strata status`` outside a workspace imports neither the Workshop nor the gateway."""
    code = (
        "import sys\n"
        "from strata.cli import main\n"
        "try:\n"
        "    main(['status'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import json\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('strata.cli.'))))\n"
    )
    env = {**os.environ, "STRATA_NO_DAEMON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/"
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "strata.cli.inspect" in loaded, out
    assert loaded.isdisjoint({"strata.cli.workshop", "strata.cli.mcp", "strata.cli.kb"}), loaded


def test_the_cli_has_the_documented_commands() -> None:
    names = {c[0] for c in _all_commands() if c}
    assert names >= {
        "init",
        "snapshot",
        "history",
        "diff",
        "rewind",
        "restore",
        "show",
        "export",
        "status",
        "check",
        "cat",
    }


@pytest.mark.parametrize("command", _all_commands(), ids=lambda c: " ".join(c) or "strata")
def test_every_help_ends_with_an_example(command: list[str], run_cli: CliRunner) -> None:
    out = ok(run_cli(*command, "--help"))
    # the command's own text is what comes before click's "Options:"/"Commands:" lists
    text = out.split("\nOptions:", 1)[0].split("\nCommands:", 1)[0]
    assert "Example:" in text, out
    after = text.split("Example:", 1)[1]
    examples = [line.strip() for line in after.splitlines() if line.strip()]
    assert examples and examples[0].startswith("strata "), out
    # every line of the block is a command, a comment, or continues the line above
    for above, line in itertools.pairwise(examples):
        assert line.startswith(("strata ", "#")) or above.endswith("\\"), out


# -- errors ------------------------------------------------------------------------


def test_unknown_refs(project: Path, run_cli: CliRunner) -> None:
    for args in (
        ["diff", "nosuchref"],
        ["diff", "HEAD", "zzzzzz"],
        ["rewind", "HEAD~9"],
        ["show", "deadbeef:README.md"],
        ["export", "nope", "out"],
        ["cat", "nope"],
    ):
        assert_user_error(run_cli(*args, cwd=project), says="unknown ref")
    assert not (project / "out").exists()


def test_paths_outside_the_workspace(project: Path, run_cli: CliRunner) -> None:
    decoy = project.parent / "decoy" / "passwd"  # an absolute path outside, never the host's
    decoy.parent.mkdir()
    decoy.write_text("root:x:0:0\n")
    for args in (
        ["history", "--file", "../x"],
        ["diff", "HEAD", "--file", "../x"],
        ["restore", "HEAD", "--", "../x"],
        ["restore", "HEAD", "--", str(decoy)],
        ["show", "HEAD:../x"],
    ):
        assert_user_error(run_cli(*args, cwd=project), says="outside the workspace")
    assert decoy.read_text() == "root:x:0:0\n"
    assert not (project.parent / "x").exists()


def test_missing_paths(project: Path, run_cli: CliRunner) -> None:
    assert_user_error(run_cli("show", "HEAD:nope.txt", cwd=project), says="does not exist")
    assert_user_error(run_cli("restore", "HEAD", "--", "nope.txt", cwd=project))


def test_not_a_workspace(tmp_path: Path, run_cli: CliRunner) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["status"], ["snapshot"], ["history"], ["check"]):
        err = assert_user_error(run_cli(*args, cwd=elsewhere), says="not a strata workspace")
        assert "hint: " in err and "strata init" in err


def test_nested_init_and_busy_export(project: Path, tmp_path: Path, run_cli: CliRunner) -> None:
    assert_user_error(run_cli("init", cwd=project / "src"), says="nested")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine").write_text("x")
    assert_user_error(run_cli("export", "HEAD", str(busy), cwd=project), says="not empty")
    # a file where a folder is needed: one line, not a crash, the file untouched
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "out"
    assert_user_error(run_cli("export", "HEAD", str(target), cwd=project), says="Not a directory")
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("damage", ["flip bytes", "garbage"])
def test_a_corrupted_object_is_an_error_not_a_crash(
    project: Path, tmp_path: Path, run_cli: CliRunner, damage: str
) -> None:
    oid = hash_bytes(b"print('v2')\n")
    path = project / ".strata" / "objects" / oid[:2] / oid[2:]
    raw = bytearray(path.read_bytes())
    if damage == "garbage":
        raw = bytearray(b"this is not zstd at all")
    else:
        for i in range(4, len(raw), 3):
            raw[i] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(raw))

    assert_user_error(run_cli("show", "HEAD:src/app.py", cwd=project), says=oid)
    assert_user_error(run_cli("export", "HEAD", str(tmp_path / "o"), cwd=project), says="corrupt")
    assert ok(run_cli("show", "HEAD:src/util.py", cwd=project)) == "X = 1\n"

    code, out, err = run_cli("check", cwd=project)
    assert code == 1 and "Traceback" not in err
    assert oid in err
    assert err.splitlines()[-1].startswith("error: ")
    code, out, _ = run_cli("check", "--json", cwd=project)
    assert code == 1 and json.loads(out)["ok"] is False


@pytest.mark.parametrize(
    "args",
    [
        ["bogus"],
        ["diff"],
        ["rewind"],
        ["restore", "HEAD"],
        ["history", "--limit", "0"],
        ["history", "--nope"],
        ["show", "HEAD"],
        ["snapshot", "--author-kind", "robot"],
        ["-C", "/nonexistent/folder", "status"],
    ],
    ids=" ".join,
)
def test_usage_errors_exit_2(args: list[str], project: Path, run_cli: CliRunner) -> None:
    code, out, err = run_cli(*args, cwd=project)
    assert code == 2, err
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].startswith("error: ")
    assert all(line.startswith("hint: ") for line in lines[1:]) and len(lines) <= 2


def test_a_bad_strata_now_is_a_usage_error(project: Path, run_cli: CliRunner) -> None:
    code, _, err = run_cli("snapshot", cwd=project, env={"STRATA_NOW": "yesterday"})
    assert code == 2 and err.startswith("error: ") and "STRATA_NOW" in err


# -- where commands run ---------------------------------------------------------------


def test_dash_c_works_like_git(project: Path, tmp_path: Path, run_cli: CliRunner) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    here = as_json(run_cli("history", "--json", cwd=project))
    assert as_json(run_cli("-C", str(project), "history", "--json", cwd=elsewhere)) == here
    relative = os.path.relpath(project, elsewhere)
    assert as_json(run_cli("-C", relative, "history", "--json", cwd=elsewhere)) == here
    # paths after -C are relative to the new folder, as with git -C
    by_sub = as_json(run_cli("-C", str(project / "src"), "history", "--json", "--file", "app.py"))
    by_root = as_json(run_cli("history", "--json", "--file", "src/app.py", cwd=project))
    assert by_sub == by_root and len(by_root) == 2
    assert len(as_json(run_cli("history", "--json", "--file", "README.md", cwd=project))) == 1
    assert as_json(run_cli("history", "--json", "--file", "src/", cwd=project)) == by_root


def test_commands_work_from_a_subfolder(project: Path, run_cli: CliRunner) -> None:
    sub = project / "src"
    first = as_json(run_cli("history", "--json", cwd=sub))[-1]["id"]
    assert len(as_json(run_cli("history", "--json", "--file", ".", cwd=sub))) == 2
    assert len(as_json(run_cli("history", "--json", "--file", "../README.md", cwd=sub))) == 1

    (sub / "app.py").write_text("print('unrecorded')\n")
    (project / "README.md").write_text("changed too\n")
    names = ok(run_cli("diff", "HEAD", "--name-only", "--file", ".", cwd=sub))
    assert names.splitlines() == ["src/app.py"]

    ok(run_cli("restore", first, "--", "app.py", cwd=sub))
    assert (sub / "app.py").read_text() == "print('v1')\n"
    assert (project / "README.md").read_text() == "changed too\n"
    # show takes workspace paths, as git's REF:PATH does
    assert ok(run_cli("show", f"{first}:src/app.py", cwd=sub)) == "print('v1')\n"
    status = as_json(run_cli("status", "--json", cwd=sub))
    assert [c["path"] for c in status["changes"]] == ["src/app.py"]  # README: auto-saved


# -- patches -----------------------------------------------------------------------


def _git_view(m: dict[str, Any]) -> dict[str, Any]:
    """What git can represent: files with their executable bit, symlinks."""
    view: dict[str, Any] = {}
    for path, value in m.items():
        if value[0] == "file":
            view[path] = ("file", bool(value[1] & 0o100), value[2])
        elif value[0] == "link":
            view[path] = value
    return view


def _checkout(run_cli: CliRunner, git: Callable[..., Any], ws: Path, ref: str, where: Path) -> None:
    ok(run_cli("export", ref, str(where), cwd=ws))
    git("init", "-q", cwd=where)
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", ref, cwd=where)


@pytest.fixture
def init_ws(ws: Path, run_cli: CliRunner) -> Path:
    ok(run_cli("init", cwd=ws))
    return ws


def test_git_apply_reproduces_the_target(
    init_ws: Path,
    tmp_path: Path,
    make_tree: MakeTree,
    manifest: Manifest,
    run_cli: CliRunner,
    git: Callable[..., Any],
) -> None:
    ws = init_ws
    make_tree(
        ws,
        {
            "text.txt": "".join(f"line {i}\n" for i in range(30)),
            "no-newline.txt": "last line without newline",
            "image.bin": bytes(range(256)) * 8,
            "doomed.txt": "delete me\n",
            "script.sh": File("#!/bin/sh\necho hi\n", 0o644),
            "was-exec.sh": File("#!/bin/sh\n", 0o755),
            "link": Link("text.txt"),
            "file-becomes-link": "plain\n",
            "old/name.txt": "rename me, I am long enough to be similar\n" * 3,
        },
    )
    a = as_json(run_cli("snapshot", "--json", cwd=ws))
    lines = (ws / "text.txt").read_text().splitlines(keepends=True)
    lines[3] = "line three, changed\n"
    del lines[20]
    (ws / "text.txt").write_text("".join(lines) + "appended\n")
    (ws / "no-newline.txt").write_text("last line, still without newline")
    image = bytearray((ws / "image.bin").read_bytes())
    image[1000:1010] = b"\0" * 10
    (ws / "image.bin").write_bytes(bytes(image))
    (ws / "new.bin").write_bytes(b"\0new binary\xff")
    (ws / "new dir").mkdir()
    (ws / "new dir/new file.txt").write_text("hello\n")
    (ws / "doomed.txt").unlink()
    (ws / "script.sh").chmod(0o755)
    (ws / "was-exec.sh").chmod(0o644)
    (ws / "link").unlink()
    (ws / "link").symlink_to("no-newline.txt")
    (ws / "new-link").symlink_to("dangling/target")
    (ws / "file-becomes-link").unlink()
    (ws / "file-becomes-link").symlink_to("text.txt")
    (ws / "old/name.txt").rename(ws / "new-name.txt")
    (ws / "old").rmdir()
    b = as_json(run_cli("snapshot", "--json", cwd=ws))
    want = _git_view(manifest(ws))

    patch_file = tmp_path / "change.patch"
    code, patch, err = run_cli("diff", a["event_id"], b["event_id"], cwd=ws, text=False)
    assert code == 0, err
    patch_file.write_bytes(patch)
    assert b"GIT binary patch" in patch and b"new mode 100755" in patch

    checkout = tmp_path / "checkout"
    _checkout(run_cli, git, ws, a["event_id"], checkout)
    git("apply", "--check", str(patch_file), cwd=checkout)
    git("apply", str(patch_file), cwd=checkout)
    assert _git_view(manifest(checkout)) == want


def test_git_apply_of_the_working_tree_diff(
    init_ws: Path,
    tmp_path: Path,
    make_tree: MakeTree,
    manifest: Manifest,
    run_cli: CliRunner,
    git: Callable[..., Any],
) -> None:
    ws = init_ws
    make_tree(ws, {"a.txt": "one\n", "b.bin": b"\0\0", "sub/c.txt": "c\n", "keep": Dir()})
    ok(run_cli("snapshot", cwd=ws))
    (ws / "a.txt").write_text("one\ntwo\n")
    (ws / "b.bin").write_bytes(b"\0\1\2")
    (ws / "sub/c.txt").unlink()
    (ws / "sub/d.txt").write_text("d\n")
    want = _git_view(manifest(ws))
    code, patch, err = run_cli("diff", "HEAD", cwd=ws, text=False)
    assert code == 0, err
    patch_file = tmp_path / "wt.patch"
    patch_file.write_bytes(patch)
    checkout = tmp_path / "checkout"
    _checkout(run_cli, git, ws, "HEAD", checkout)
    git("apply", "--check", str(patch_file), cwd=checkout)
    git("apply", str(patch_file), cwd=checkout)
    assert _git_view(manifest(checkout)) == want
    assert ok(run_cli("diff", "HEAD", "HEAD", cwd=ws)) == ""


def test_diff_stat_and_name_only(project: Path, run_cli: CliRunner) -> None:
    assert ok(run_cli("diff", "HEAD~1", "HEAD", "--name-only", cwd=project)) == "src/app.py\n"
    stat = ok(run_cli("diff", "HEAD~1", "HEAD", "--stat", cwd=project))
    assert "src/app.py" in stat and "1 file changed, 1 insertion(+), 1 deletion(-)" in stat


def test_human_output_of_snapshot_and_rewind(project: Path, run_cli: CliRunner) -> None:
    (project / "README.md").write_text("unrecorded\n")
    out = ok(run_cli("rewind", "HEAD~1", cwd=project))
    assert "Auto-saved unrecorded work as" in out
    assert "Rewound to" in out
    assert (project / "src/app.py").read_text() == "print('v1')\n"
    assert "Nothing changed since HEAD" in ok(run_cli("snapshot", cwd=project))
    history = ok(run_cli("history", cwd=project)).splitlines()
    assert [line.split()[3] for line in history] == [
        "rewind",
        "auto_save",
        "snapshot",
        "snapshot",
    ]


def test_json_before_the_command_is_the_commands_own_json(
    ws: Path, make_tree: MakeTree, run_cli: CliRunner
) -> None:
    make_tree(ws, {"a.txt": "1\n"})
    assert run_cli("init", cwd=ws)[0] == 0
    assert as_json(run_cli("status", "--json", cwd=ws)) == as_json(
        run_cli("--json", "status", cwd=ws)
    )
    code, out, err = run_cli("--json", "rewind", "nope", cwd=ws)
    assert code == 1 and out == ""
    assert json.loads(err)["error"]["type"] == "UnknownRef"


def test_diff_name_only_to_a_pipe_gives_names_that_are_not_utf8_as_their_bytes(
    ws: Path, run_cli: CliRunner
) -> None:
    name = b"caf\xe9.txt"  # Latin-1: not UTF-8
    (ws / os.fsdecode(name)).write_bytes(b"one\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("snapshot", cwd=ws)[0] == 0
    (ws / os.fsdecode(name)).write_bytes(b"two\n")
    done = subprocess.run(
        [sys.executable, "-m", "strata", "diff", "--name-only", "HEAD"],
        cwd=ws,
        env=run_cli.env(),
        capture_output=True,
        check=True,
    )
    assert done.stdout == name + b"\n"  # what xargs needs to open the file
    assert "caf\\xe9.txt" in as_json(run_cli("diff", "HEAD", "--json", cwd=ws))["files"][0]["path"]


def test_text_in_bytes_that_are_not_utf8_is_a_clear_error_and_records_nothing(
    ws: Path, run_cli: CliRunner
) -> None:
    """A message, bookmark name or author must be UTF-8: said plainly, not an internal error."""
    (ws / "a.txt").write_text("a\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    (ws / "a.txt").write_text("changed\n")
    bad = os.fsdecode(b"caf\xe9")
    for args in (
        ["snapshot", "-m", bad],
        ["snapshot", "--author", bad, "-m", "x"],
        ["bookmark", "add", bad],
    ):
        assert_user_error(run_cli(*args, cwd=ws), code=2, says="bytes that are not UTF-8")
    history = as_json(run_cli("history", "--json", cwd=ws))
    assert [e["rationale"] for e in history] == ["base"]
    assert as_json(run_cli("bookmark", "list", "--json", cwd=ws)) == []
    ok(run_cli("check", cwd=ws))


def test_first_command_traps_of_git_and_jj_users(
    tmp_path: Path, make_tree: MakeTree, run_cli: CliRunner
) -> None:
    """``log``, ``help``, ``snapshot "msg"`` and ``rewind HEAD`` on a clean tree."""
    ws = tmp_path / "ws"
    make_tree(ws, {"a.txt": "a\n"})
    ok(run_cli("init", cwd=ws))
    assert ok(run_cli("log", cwd=ws)) == ok(run_cli("history", cwd=ws))
    assert ok(run_cli("help", "rewind", cwd=ws)) == ok(run_cli("rewind", "--help", cwd=ws))
    assert ok(run_cli("help", "op", "log", cwd=ws)) == ok(run_cli("op", "log", "--help", cwd=ws))
    assert_user_error(run_cli("help", "nope", cwd=ws), code=2, says="no such command")
    assert_user_error(run_cli("snapshot", "fix it", cwd=ws), code=2, says="-m 'fix it'")
    before = as_json(run_cli("op", "log", "--json", cwd=ws))
    out = ok(run_cli("rewind", "HEAD", cwd=ws))
    assert "nothing to do" in out
    assert as_json(run_cli("op", "log", "--json", cwd=ws)) == before  # nothing recorded
    assert "main-2" not in ok(run_cli("branch", "list", cwd=ws))  # no fork either
    assert "main-2" not in ok(run_cli("status", cwd=ws))
    (ws / "a.txt").write_text("changed\n")  # with unrecorded work it is a rewind, as ever
    ok(run_cli("rewind", "HEAD", cwd=ws))
    assert (ws / "a.txt").read_text() == "a\n"
    assert len(as_json(run_cli("op", "log", "--json", cwd=ws))) == len(before) + 1


def test_the_author_comes_from_git_then_the_login_when_user_is_unset(
    tmp_path: Path, make_tree: MakeTree, run_cli: CliRunner
) -> None:
    import pwd
    import subprocess
    import sys

    ws = tmp_path / "ws"
    make_tree(ws, {"a.txt": "a\n"})
    env = run_cli.env()
    for name in ("STRATA_AUTHOR", "USER", "LOGNAME"):
        env.pop(name, None)

    def first_author() -> dict[str, str]:
        out = subprocess.run(
            [sys.executable, "-m", "strata", "history", "--json"],
            cwd=ws, env=env, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        author: dict[str, str] = json.loads(out)[0]["author"]
        return author

    (run_cli.home / ".gitconfig").write_text("[user]\n\tname = Ada Lovelace\n")
    subprocess.run([sys.executable, "-m", "strata", "init"], cwd=ws, env=env, check=True)
    assert first_author() == {"name": "Ada Lovelace", "kind": "human"}
    (run_cli.home / ".gitconfig").unlink()
    (ws / "a.txt").write_text("b\n")
    subprocess.run([sys.executable, "-m", "strata", "snapshot"], cwd=ws, env=env, check=True)
    assert first_author()["name"] == pwd.getpwuid(os.getuid()).pw_name  # never "unknown"


def test_bytes_changed_counts_the_changed_lines_not_the_span_between_them(
    tmp_path: Path, make_tree: MakeTree, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    body = "".join(f"line {i} of a forty kilobyte file\n" for i in range(1200))
    make_tree(ws, {"big.txt": body})
    ok(run_cli("init", cwd=ws))
    lines = body.splitlines(keepends=True)
    lines[0], lines[-1] = "the first line, rewritten\n", "the last line, rewritten\n"
    (ws / "big.txt").write_text("".join(lines))
    (f,) = as_json(run_cli("diff", "HEAD", "--json", cwd=ws))["files"]
    assert len(body) > 40_000
    first = max(len("line 0 of a forty kilobyte file\n"), len("the first line, rewritten\n"))
    last = max(len("line 1199 of a forty kilobyte file\n"), len("the last line, rewritten\n"))
    assert f["bytes_changed"] == first + last  # per hunk, the larger side; not ~40 KB
    assert (f["insertions"], f["deletions"]) == (2, 2)
