"""Semantic blocks of recorded events: the API, ``diff --format``, ``history --semantic-block``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import as_json, assert_user_error, ok
from strata import Repository

V1 = 'def greet(name):\n    return "hi " + name\n\ndef other():\n    pass\n'
V2 = 'def greet(name):\n    return "hello " + name\n\ndef other():\n    pass\n'
V3 = 'def salute(name):\n    return "hello " + name\n\ndef other():\n    return 1\n'


def _three(repo: Repository, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text(V1)
    (ws / "c.json").write_text('{"a": 1, "b": {"c": 2}}\n')
    repo.snapshot(message="one")
    (ws / "src" / "app.py").write_text(V2)
    (ws / "c.json").write_text('{"a": 1, "b": {"c": 3}}\n')
    repo.snapshot(message="two")
    (ws / "src" / "app.py").write_text(V3)
    repo.snapshot(message="three")


def test_event_semantics_and_block_history_across_a_rename(repo: Repository, ws: Path):
    _three(repo, ws)
    head = repo.event_semantics("HEAD")
    assert head.diff_mode == "ast"
    assert {(b.id, b.change, b.old_id) for b in head.semantic_blocks} == {
        ("src/app.py::salute", "renamed", "src/app.py::greet"),
        ("src/app.py::other", "changed", None),
    }
    two = repo.event_semantics("HEAD~1")
    assert {b.id for b in two.semantic_blocks} == {"src/app.py::greet", "c.json::/b/c"}
    hits = repo.block_history("src/app.py::salute")
    assert [e.rationale for e, _ in hits] == ["three", "two", "one"]
    assert [[b.change for b in blocks] for _, blocks in hits] == [
        ["renamed"],
        ["changed"],
        ["added"],
    ]
    # computed once, then read from the cache (a file a reader may delete)
    cache = repo.layout.repo / "semantic" / "cache.db"
    assert cache.exists()
    cache.unlink()
    assert repo.event_semantics("HEAD") == head


def test_diff_format_and_history_on_the_command_line(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "app.py").write_text(V2)
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    (ws / "app.py").write_text(V3)
    (ws / "notes.yaml").write_text("# kept\nport: 80\n")
    ok(run_cli("snapshot", "-m", "two", cwd=ws))
    out = ok(run_cli("diff", "HEAD~1", "HEAD", "--format", "auto", cwd=ws))
    assert "app.py  [ast] 2 definitions: 1 changed, 1 renamed" in out
    assert "> renamed  salute  (was greet)" in out
    assert "+def salute(name):" in out  # the patch follows the blocks
    only = ok(run_cli("diff", "HEAD~1", "HEAD", "--format", "ast", cwd=ws))
    assert "+def salute(name):" not in only and "renamed  salute" in only
    data = as_json(run_cli("diff", "HEAD~1", "HEAD", "--format", "auto", "--json", cwd=ws))
    by_path = {f["path"]: f for f in data["semantic"]}
    assert by_path["app.py"]["diff_mode"] == "ast"
    assert by_path["notes.yaml"]["semantic_blocks"] == [
        {"kind": "yaml_path", "id": "notes.yaml::/port", "change": "added"}
    ]
    side = ok(run_cli("diff", "HEAD~1", "HEAD", "--side-by-side", cwd=ws))
    assert "def greet(name):" in side and "| def salute(name):" in side
    assert 'return "hello " + name' in side
    hist = as_json(run_cli("history", "--semantic-block", "app.py::salute", "--json", cwd=ws))
    assert [h["rationale"] for h in hist] == ["two", "one"]
    assert hist[0]["semantic_blocks"][0]["old_id"] == "app.py::greet"
    assert "No event changed that block." in ok(
        run_cli("history", "--semantic-block", "app.py::nothing", cwd=ws)
    )
    assert_user_error(
        run_cli("history", "--semantic-block", "app.py", cwd=ws), code=2, says="PATH::NAME"
    )


def test_malformed_file_in_an_event_falls_back_with_its_reason(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "c.json").write_text('{"a": 1}\n')
    ok(run_cli("snapshot", cwd=ws))
    (ws / "c.json").write_text('{"a": \n')
    ok(run_cli("snapshot", cwd=ws))
    data = json.loads(ok(run_cli("diff", "HEAD~1", "HEAD", "--format", "auto", "--json", cwd=ws)))
    (f,) = data["semantic"]
    assert f["diff_mode"] == "unified" and "not valid JSON" in f["fallback_reason"]
    out = ok(run_cli("diff", "HEAD~1", "HEAD", "--format", "schema", cwd=ws))
    assert "(line diff: the new side is not valid JSON" in out


def test_semantic_diff_where_its_cache_cannot_be_written(cli_as, home_of: Path, person):
    ws = home_of / "ws"
    ws.mkdir()
    os.chown(ws, person.uid, person.gid)
    ok(cli_as("init", cwd=ws))
    (ws / "app.py").write_text(V2)
    os.chown(ws / "app.py", person.uid, person.gid)
    ok(cli_as("snapshot", cwd=ws))
    (ws / "app.py").write_text(V3)
    ok(cli_as("snapshot", cwd=ws))
    cache = ws / ".strata" / "semantic"
    cache.mkdir()
    os.chown(cache, person.uid, person.gid)
    cache.chmod(0o500)  # the cache's folder is read-only: computed every time, never an error
    data = as_json(cli_as("diff", "HEAD~1", "HEAD", "--format", "auto", "--json", cwd=ws))
    assert [b["change"] for b in data["semantic"][0]["semantic_blocks"]] == ["changed", "renamed"]
    cache.chmod(0o700)
    ok(cli_as("check", cwd=ws))
