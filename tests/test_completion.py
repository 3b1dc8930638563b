"""Shell completion completes refs: HEAD, branches, bookmarks, the newest events' ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import ok


def _complete(run_cli: Any, cwd: Path, words: str, shell: str = "bash") -> list[str]:
    """What ``strata`` offers for the last word of ``words`` (as the shell asks it)."""
    parts = words.split(" ")
    code, out, err = run_cli(
        cwd=cwd,
        env={
            "_STRATA_COMPLETE": f"{shell}_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(parts) - 1),
        },
    )
    assert code == 0 and "Traceback" not in err, err
    return [line.split(",", 1)[1] for line in out.splitlines() if "," in line]


def test_refs_complete_from_the_repository(ws: Path, run_cli: Any) -> None:
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    (ws / "a.txt").write_text("1\n")
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    ok(run_cli("branch", "create", "feature", cwd=ws))
    ok(run_cli("bookmark", "add", "release-1", cwd=ws))
    head = json.loads(ok(run_cli("status", "--json", cwd=ws)))["head_event_id"]
    offered = _complete(run_cli, ws, "strata rewind ")
    assert {"HEAD", "HEAD~1", "main", "feature", "release-1", head[:12]} <= set(offered)
    assert _complete(run_cli, ws, "strata diff HEAD fe") == ["feature"]
    assert _complete(run_cli, ws, "strata branch switch ") == ["feature", "main"]
    assert _complete(run_cli, ws, "strata bookmark delete ") == ["release-1"]
    assert _complete(run_cli, ws, f"strata rewind {head[:4]}") == [head[:12]]


def test_completion_outside_a_repository_offers_nothing_and_fails_nothing(
    tmp_path: Path, run_cli: Any
) -> None:
    assert _complete(run_cli, tmp_path, "strata rewind ") == []
    # the script a shell sources
    code, out, _ = run_cli(cwd=tmp_path, env={"_STRATA_COMPLETE": "bash_source"})
    assert code == 0 and "_strata_completion" in out
