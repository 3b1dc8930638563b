"""`strata digest scan|show|set|clear|optimize` on the command line, and `strata replay` of an
optimization with no network."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import as_json, assert_user_error, ok

SCRIPT = "responses:\n  - expect: Optimization Goal\n    text: '# Notes digest'\n"


def _workspace(run_cli, ws: Path) -> Path:
    (ws / "README.md").write_text("# Notes\n\nA notebook.\n")
    (ws / "Makefile").write_text("test:\n\tpytest\n")
    ok(run_cli("init", cwd=ws))
    (ws / "digest.yaml").write_text(SCRIPT)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.demo]\nadapter = "scripted"\nscript = "digest.yaml"\n')
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    return ws


def test_scan_prints_the_same_bytes_twice_and_as_json(run_cli, ws):
    _workspace(run_cli, ws)
    first = ok(run_cli("digest", "scan", "--json", cwd=ws))
    assert ok(run_cli("digest", "scan", "--json", cwd=ws)) == first
    scan = json.loads(first)
    assert scan["readme"]["title"] == "Notes"
    assert {"source": "Makefile", "name": "test", "command": "make test", "kind": "test"} in scan[
        "commands"
    ]
    text = ok(run_cli("digest", "scan", cwd=ws))
    assert "README (README.md): Notes" in text and "[test] make test" in text


def test_show_set_clear_with_the_user_level_store(run_cli, ws, tmp_path):
    _workspace(run_cli, ws)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    code, out, err = run_cli("digest", "show", cwd=ws, env=env)
    assert code == 0 and out.startswith("## Workspace Digest\n\nNo workspace digest is available")
    assert err.startswith("warning: no workspace digest")
    ok(
        run_cli(
            "digest", "set", "--scope", "global", "--tag", "team", "pinned ${x}", cwd=ws, env=env
        )
    )
    assert list((tmp_path / "xdg" / "strata" / "overrides" / "strata").glob("*/team/*.json"))
    shown = as_json(run_cli("digest", "show", "--tag", "team", "--json", cwd=ws, env=env))
    assert (shown["source"], shown["text"]) == ("override", "pinned ${x}")
    ok(run_cli("digest", "set", "live", cwd=ws, env=env))
    shown = as_json(run_cli("digest", "show", "--tag", "team", "--json", cwd=ws, env=env))
    assert (shown["source"], shown["text"]) == ("session", "live")
    cleared = as_json(run_cli("digest", "clear", "--json", cwd=ws, env=env))
    assert cleared["removed"] == 1
    env_tag = {**env, "STRATA_DIGEST_TAG": "team"}
    assert as_json(run_cli("digest", "show", "--json", cwd=ws, env=env_tag))["source"] == "override"


def test_bad_input_is_one_error_line(run_cli, ws):
    _workspace(run_cli, ws)
    assert_user_error(
        run_cli("digest", "set", "--key", "Bad Key", "x", cwd=ws),
        code=2,
        says="must match ^[a-z0-9][a-z0-9._-]{0,63}$",
    )
    assert_user_error(
        run_cli("digest", "set", "--scope", "global", "x", cwd=ws), code=2, says="needs a tag"
    )
    assert_user_error(run_cli("digest", "set", cwd=ws), code=2, says="give the digest as TEXT")
    assert_user_error(
        run_cli("digest", "set", "--file", str(ws / "missing.md"), cwd=ws),
        code=2,
        says="cannot read",
    )
    assert not (ws / ".strata" / "digest").exists()


def test_a_global_optimize_without_a_tag_stops_before_the_provider_is_even_opened(run_cli, ws):
    _workspace(run_cli, ws)
    (ws / "new.txt").write_text("unrecorded\n")
    before = ok(run_cli("history", "--json", cwd=ws))
    result = run_cli("digest", "optimize", "--scope", "global", "--model", "nowhere", cwd=ws)
    assert_user_error(result, code=2, says="the global scope needs a tag")  # not 'unknown provider'
    assert ok(run_cli("history", "--json", cwd=ws)) == before


def test_optimize_is_recorded_and_replays_offline(run_cli, ws):
    _workspace(run_cli, ws)
    (ws / "notes.md").write_text("# Monday\n")  # unrecorded: auto-saved, then scanned
    result = as_json(run_cli("digest", "optimize", "--model", "demo", "--json", cwd=ws))
    assert result["digest"] == "# Notes digest" and len(result["traces"]) == 1
    shown = as_json(run_cli("digest", "show", "--json", cwd=ws))
    assert (shown["source"], shown["origin"], shown["event_id"]) == (
        "session",
        "optimize",
        result["event_id"],
    )
    history = as_json(run_cli("history", "--json", "--limit", "100", cwd=ws))
    events = history["events"] if isinstance(history, dict) else history
    base = next(e["id"] for e in events if e["rationale"] == "base")
    code, out, err = run_cli("replay", f"{base}..HEAD", cwd=ws)
    assert code == 0, err
    assert "agent_step: same" in out and "1 digest optimizations" in out
    ok(run_cli("check", cwd=ws))
