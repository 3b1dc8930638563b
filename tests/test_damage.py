"""Damage to any file of a repository is reported, never an internal error.

Each file under ``.strata`` is damaged in turn (emptied, cut in half, a byte
flipped near its start, middle and end) in a copy of one recorded repository;
then ``check``, ``status``, ``history`` and ``snapshot`` run. None may end in
an internal error or a traceback; ``check`` reports damage to the ledger or
the objects with exit 1, and the other commands, when they fail on it, say
the repository is damaged and point at ``strata check``.

The commands run in one child process per ledger driver (the CLI's ``main``
called in turn), so the 300-odd invocations cost one interpreter start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CliRunner, ok

CHILD = r"""
import contextlib, io, json, os, shutil, sys
from strata.cli import main

base, work = sys.argv[1], sys.argv[2]
MODES = ("empty", "half", "flip-start", "flip-middle", "flip-end")
COMMANDS = (["check"], ["status"], ["history"], ["snapshot", "-m", "after the damage"])
results = []
files = sorted(
    os.path.relpath(os.path.join(d, f), base)
    for d, _, names in os.walk(os.path.join(base, ".strata"))
    for f in names
    if f != "lock" and os.path.getsize(os.path.join(d, f)) > 0
)
for n, rel in enumerate(files):
    size = os.path.getsize(os.path.join(base, rel))
    for mode in MODES:
        ws = os.path.join(work, f"{n}-{mode}")
        shutil.copytree(base, ws, symlinks=True)
        path = os.path.join(ws, rel)
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            if mode == "empty":
                f.truncate(0)
            elif mode == "half":
                f.truncate(size // 2)
            else:
                at = {"flip-start": min(24, size - 1), "flip-middle": size // 2,
                      "flip-end": size - 1}[mode]
                f.seek(at)
                byte = f.read(1)[0]
                f.seek(at)
                f.write(bytes([byte ^ 0xFF]))
        for command in COMMANDS:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main(["-C", ws, *command])
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
            results.append({"file": rel, "mode": mode, "command": command[0], "code": code,
                            "stderr": err.getvalue()})
        shutil.rmtree(ws)
print(json.dumps(results))
"""

#: files whose damage ``check`` must report: the ledger and the objects (the rest are
#: caches rebuilt from them, or settings)
ESSENTIAL = ("ledger.db", "events.jsonl", "objects/")


def is_essential(rel: str) -> bool:
    return any(part in rel for part in ESSENTIAL) and not rel.endswith(".idx")


@pytest.fixture(params=["sqlite", "jsonl"])
def recorded(request: pytest.FixtureRequest, tmp_path: Path, run_cli: CliRunner) -> Path:
    """A repository with loose objects, a pack and a few events."""
    ws = tmp_path / "base"
    ws.mkdir()
    ok(run_cli("init", "--ledger", request.param, cwd=ws))
    for i in range(3):
        (ws / f"f{i}.txt").write_text("".join(f"line {j}\n" for j in range(i, 600)))
        ok(run_cli("snapshot", "-m", f"step {i}", cwd=ws))
    ok(run_cli("repack", cwd=ws))
    (ws / "late.txt").write_text("loose again\n")
    ok(run_cli("snapshot", "-m", "a loose one", cwd=ws))
    return ws


def test_damage_to_any_file_is_reported_never_an_internal_error(
    recorded: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    work = tmp_path / "copies"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(recorded), str(work)],
        env=run_cli.env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert any("objects/packs/" in r["file"] for r in results)  # a pack was damaged too
    crashes = [r for r in results if "internal error" in r["stderr"] or "Traceback" in r["stderr"]]
    assert crashes == []
    for r in results:
        assert r["code"] in (0, 1), r
        if r["code"] == 1:
            lines = r["stderr"].splitlines()
            assert lines, r
            if r["command"] != "check":
                assert lines[0].startswith("error: "), r
                assert len(lines) <= 2, r
        if r["command"] == "check" and is_essential(r["file"]) and r["mode"] in ("empty", "half"):
            assert r["code"] == 1, r  # a cut ledger or object is always found
        if r["command"] != "check" and "is corrupt" in r["stderr"]:
            assert "the repository is damaged" in r["stderr"], r
            assert "strata check" in r["stderr"], r
