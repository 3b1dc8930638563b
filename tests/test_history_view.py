"""``strata history`` as a person reads it: bookkeeping hidden, a pager, a default count."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from conftest import CliRunner, ok

BOOKKEEPING = ("workspace_snapshot_taken", "workspace_diff_computed")


def recorded_run(ws: Path, run_cli: CliRunner) -> None:
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    ok(run_cli("run", "--", "sh", "-c", "echo two > a.txt", cwd=ws))


def test_history_hides_bookkeeping_events_unless_all(ws: Path, run_cli: CliRunner) -> None:
    recorded_run(ws, run_cli)
    listed = ok(run_cli("history", cwd=ws))
    assert " run " in listed and "one" in listed
    assert not any(kind in listed for kind in BOOKKEEPING)
    everything = ok(run_cli("history", "--all", cwd=ws))
    assert all(kind in everything for kind in BOOKKEEPING)
    # asked for by name, or by machine: listed
    assert BOOKKEEPING[1] in ok(run_cli("history", "--action", BOOKKEEPING[1], cwd=ws))
    kinds = {e["action_type"] for e in json.loads(ok(run_cli("history", "--json", cwd=ws)))}
    assert set(BOOKKEEPING) <= kinds


def test_history_stops_at_a_default_count_when_not_on_a_terminal(
    ws: Path, run_cli: CliRunner
) -> None:
    recorded_run(ws, run_cli)
    script = (
        "import sys\nimport strata.cli.inspect as inspect\ninspect.HISTORY_DEFAULT = 2\n"
        "from strata.cli import main\nmain(sys.argv[1:])\n"
    )

    def history(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, "history", *args],
            cwd=ws,
            env=run_cli.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    cut = history()
    assert cut.returncode == 0, cut.stderr
    assert len(cut.stdout.splitlines()) <= 2
    assert "--limit N shows more" in cut.stderr
    more = history("--limit", "50")
    assert len(more.stdout.splitlines()) > 2 and more.stderr == ""


def test_history_on_a_terminal_goes_through_the_pager(
    ws: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    recorded_run(ws, run_cli)
    paged = tmp_path / "paged.txt"
    pager = tmp_path / "pager"
    pager.write_text(f"#!/bin/sh\ncat > {paged}\n")
    pager.chmod(0o755)

    def on_terminal(*args: str) -> str:
        master, slave = pty.openpty()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "strata", "history", *args],
                cwd=ws,
                env=run_cli.env({"PAGER": str(pager), "TERM": "xterm"}),
                stdin=slave,
                stdout=slave,
                stderr=subprocess.PIPE,
                timeout=60,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            os.close(slave)
            slave = -1
            shown = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                shown += chunk
            return shown.decode(errors="replace")
        finally:
            os.close(master)
            if slave != -1:
                os.close(slave)

    on_terminal()
    assert "one" in paged.read_text()  # the pager got the listing
    paged.unlink()
    direct = on_terminal("--no-pager")
    assert not paged.exists() and "one" in direct
