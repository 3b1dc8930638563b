"""A publish killed with SIGKILL at random points leaves Published fully old or fully new.

The next command finishes (or never starts) the publish: ``strata check``
passes, no journal is left, and Published is byte-identical either to what it
was (the Draft still open, its work intact) or to the Draft (the Draft ended).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import read_manifest, write_tree
from test_crash import (
    Step,
    after_journal,
    kill_at_step,
    record_steps,
    strata,
    without_temp_files,
)

pytestmark = pytest.mark.slow

FILES = 1500
ITERATIONS = 4


def build(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Published with a recorded state and an open Draft that rewrote much of it."""
    spec = {f"d{i % 30:02}/f{i:04}.txt": f"file {i}\n" * (1 + i % 5) for i in range(FILES)}
    write_tree(root, spec)
    for args in (["init"], ["snapshot", "-m", "base"], ["draft", "start"]):
        result = strata(*args, cwd=root)
        assert result.returncode == 0, result.stderr
    old = read_manifest(root)
    draft = root / ".strata" / "draft" / "files"
    for i in range(0, FILES, 2):
        path = draft / f"d{i % 30:02}/f{i:04}.txt"
        if i % 10 == 0:
            path.unlink()
        else:
            path.write_bytes(b"draft version\n" + path.read_bytes())
    for i in range(150):
        (draft / f"d{i % 30:02}/new{i:03}.bin").write_bytes(bytes([i]) * 200)
    return old, read_manifest(draft)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any, list[Step]]:
    base = tmp_path_factory.mktemp("publish-crash")
    ws = base / "ws"
    old, new = build(ws)
    probe = base / "probe"
    shutil.copytree(ws, probe, symlinks=True)
    steps = record_steps(["publish"], probe)
    assert read_manifest(probe) == new
    return ws, old, new, steps


def outcome(ws: Path, old: Any, new: Any) -> str:
    reopened = strata("status", "--json", cwd=ws)  # takes the lock, finishes any journal
    assert reopened.returncode == 0, reopened.stderr
    check = strata("check", "--json", cwd=ws)
    assert json.loads(check.stdout)["ok"] is True, check.stdout
    assert not any((ws / ".strata" / "journal").glob("*.json"))
    state, temps = without_temp_files(read_manifest(ws))
    assert temps == [], f"temporary files left after recovery: {temps}"
    draft_open = (ws / ".strata" / "draft" / "draft.json").exists()
    if state == old:
        assert draft_open, "Published is old but the Draft was ended: its work would be lost"
        assert read_manifest(ws / ".strata" / "draft" / "files") == new
        assert strata("publish", cwd=ws).returncode == 0  # it can still be published
        assert read_manifest(ws) == new
        return "old"
    assert state == new, "a half-published workspace: neither the old nor the new state"
    assert not draft_open
    history = json.loads(strata("history", "--json", "--action", "publish", cwd=ws).stdout)
    assert len(history) == 1
    return "new"


@pytest.mark.parametrize("during_apply", [False, True], ids=["anywhere", "while-writing"])
def test_killed_publish_leaves_published_fully_old_or_fully_new(
    template: tuple[Path, Any, Any, list[Step]], tmp_path: Path, during_apply: bool
) -> None:
    template_ws, old, new, steps = template
    rng = random.Random(5 if during_apply else 4)
    writes = after_journal(steps)
    seen = []
    for n in range(ITERATIONS):
        ws = tmp_path / f"run{n}" / "ws"
        shutil.copytree(template_ws, ws, symlinks=True)
        if during_apply:  # in the first 30% of the writes the journal covers
            stop_at = rng.choice(writes[: max(1, int(len(writes) * 0.3))])
        else:
            stop_at = rng.randint(1, len(steps))
        kill_at_step(["publish"], ws, stop_at)
        seen.append(outcome(ws, old, new))
        shutil.rmtree(tmp_path / f"run{n}")
    assert len(seen) == ITERATIONS
