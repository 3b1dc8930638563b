"""Rollups: propose, apply (a summary event with its patch and index), history, revert."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import as_json, assert_user_error, ok


def test_rollup_apply_history_and_revert(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("a\n")
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("run", "--", sys.executable, "-c", "open('f.txt', 'w').write('f')", cwd=ws))
    found = as_json(run_cli("rollup", "propose", "--min-events", "3", "--json", cwd=ws))
    assert len(found) == 1 and found[0]["files"] == ["f.txt"]
    op = found[0]["operation_id"]
    event = as_json(run_cli("rollup", "apply", op, "--json", cwd=ws))
    info = event["data"]["rollup"]
    assert info["of_operation_id"] == op and info["event_count"] == found[0]["event_count"]
    index = json.loads(ok(run_cli("cat", info["rollup_index_artifact"], cwd=ws)))
    assert len(index["events"]) == info["event_count"]
    patch = ok(run_cli("cat", info["patch_artifact"], cwd=ws))
    assert "+++ b/f.txt" in patch
    shown = ok(run_cli("history", cwd=ws))
    assert "events rolled up" in shown and "run: " not in shown
    assert "run: " in ok(run_cli("history", "--expand", cwd=ws))
    assert as_json(run_cli("rollup", "propose", "--min-events", "3", "--json", cwd=ws)) == []
    assert_user_error(run_cli("rollup", "apply", op, cwd=ws), code=2, says="already rolled up")
    ok(run_cli("rollup", "revert", event["id"][:10], cwd=ws))
    assert "run: " in ok(run_cli("history", cwd=ws))
    assert_user_error(
        run_cli("rollup", "revert", event["id"][:10], cwd=ws), code=2, says="no standing"
    )
    ok(run_cli("check", cwd=ws))
