"""`strata replay A..B`: recorded commands run again offline; the first divergence is reported."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from conftest import as_json, assert_user_error, ok

pytestmark = pytest.mark.sandbox


@pytest.fixture(autouse=True)
def _needs_bwrap():
    from strata.sandbox.bwrap import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        pytest.skip(problem)


def _workspace(run_cli, ws: Path) -> None:
    (ws / "notes.txt").write_text("one\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "base", cwd=ws))


def test_deterministic_commands_replay_to_the_same_files(run_cli, ws):
    _workspace(run_cli, ws)
    ok(run_cli("run", "--", "sh", "-c", "echo two >> notes.txt", cwd=ws))
    ok(run_cli("run", "--", "sh", "-c", "mkdir -p out && sort notes.txt > out/sorted", cwd=ws))
    report = as_json(run_cli("replay", "HEAD~2..HEAD", "--json", cwd=ws))
    assert report["ok"] is True and report["first_divergence"] is None
    assert [s["kind"] for s in report["steps"]] == ["run", "run"]
    assert [s["status"] for s in report["steps"]] == ["same", "same"]
    # nothing was written to the workspace or the ledger by the replay
    assert (ws / "out" / "sorted").read_text() == "one\ntwo\n"
    assert "replay" not in ok(run_cli("history", "--limit", "3", cwd=ws))
    out = ok(run_cli("replay", "HEAD~2..HEAD", cwd=ws))
    assert "Replay ok: 2 steps reproduced" in out


def test_the_first_divergence_names_the_event_the_path_and_shows_the_diff(run_cli, ws):
    _workspace(run_cli, ws)
    ok(run_cli("run", "--", "sh", "-c", "echo two >> notes.txt", cwd=ws))
    # a command whose output differs on every run: its files cannot replay
    ok(run_cli("run", "--", "sh", "-c", "cat /proc/sys/kernel/random/uuid > id.txt", cwd=ws))
    recorded = (ws / "id.txt").read_text()
    ok(run_cli("run", "--", "sh", "-c", "echo three >> notes.txt", cwd=ws))
    code, out, err = run_cli("replay", "HEAD~3..HEAD", "--json", cwd=ws)
    assert code == 1, err
    report = json.loads(out)
    d = report["first_divergence"]
    assert d["kind"] == "tree" and d["path"] == "id.txt"
    assert f"-{recorded.strip()}" in d["diff"]
    # the steps before it are reported the same, nothing after it ran
    assert [s["status"] for s in report["steps"]] == ["same", "diverged"]
    history = as_json(run_cli("history", "--json", "--limit", "20", cwd=ws))
    events = history["events"] if isinstance(history, dict) else history
    assert d["event_id"] in {e["id"] for e in events}
    code, out, _ = run_cli("replay", "HEAD~3..HEAD", cwd=ws)
    assert code == 1 and "Replay diverged at" in out and "id.txt" in out


def test_a_replayed_command_has_no_network(run_cli, ws):
    """Recorded with the network (a server on the host answered), replayed without it."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"from the network\n")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _workspace(run_cli, ws)
        fetch = (
            "import urllib.request,sys;"
            f"open('got.txt','wb').write(urllib.request.urlopen('http://127.0.0.1:{server.server_port}/').read())"
        )
        ok(run_cli("run", "--", "python3", "-c", fetch, cwd=ws))
        assert (ws / "got.txt").read_text() == "from the network\n"
        code, out, _ = run_cli("replay", "HEAD~1..HEAD", "--json", cwd=ws)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 1
    d = json.loads(out)["first_divergence"]
    # inside the sandbox the connection fails: the file is not written, the exit code differs
    assert d["kind"] == "tree" and d["path"] == "got.txt"


def test_the_clock_and_hash_seed_are_fixed_so_replays_agree_with_each_other(run_cli, ws):
    _workspace(run_cli, ws)
    ok(run_cli("run", "--", "sh", "-c", "echo $SOURCE_DATE_EPOCH > epoch.txt", cwd=ws))
    code, out, _ = run_cli("replay", "HEAD~1..HEAD", "--json", cwd=ws)
    # recorded without SOURCE_DATE_EPOCH, replayed with the run's own time
    d = json.loads(out)["first_divergence"]
    assert code == 1 and d["path"] == "epoch.txt"
    history = as_json(run_cli("history", "--json", "--limit", "1", cwd=ws))
    events = history["events"] if isinstance(history, dict) else history
    from datetime import datetime

    ts = datetime.fromisoformat(events[0]["ts"].replace("Z", "+00:00")).timestamp()
    assert f"+{int(ts)}" in d["diff"]


def test_a_changed_exit_code_is_a_divergence(run_cli, ws):
    _workspace(run_cli, ws)
    # exits 0 when recorded (the file exists on the host), 1 in the sandbox (no host home)
    marker = ws.parent / "host-only"
    marker.write_text("x")
    ok(run_cli("run", "--", "sh", "-c", f"echo x > f.txt; test -e {marker}", cwd=ws))
    code, out, _ = run_cli("replay", "HEAD~1..HEAD", "--json", cwd=ws)
    d = json.loads(out)["first_divergence"]
    assert code == 1 and d["kind"] == "exit_code" and "exited 1, recorded 0" in d["detail"]


def test_dry_run_lists_the_steps_and_runs_nothing(run_cli, ws):
    _workspace(run_cli, ws)
    ok(run_cli("run", "--", "sh", "-c", "echo x > side-effect.txt", cwd=ws))
    (ws / "side-effect.txt").unlink()
    ok(run_cli("snapshot", "-m", "by hand", cwd=ws))
    report = as_json(run_cli("replay", "HEAD~2..HEAD", "--dry-run", "--json", cwd=ws))
    assert [(s["kind"], s["status"]) for s in report["steps"]] == [
        ("run", "verified"),
        ("recorded", "verified"),
    ]
    assert not (ws / "side-effect.txt").exists()


def test_bad_ranges_are_one_line_errors(run_cli, ws):
    _workspace(run_cli, ws)
    ok(run_cli("run", "--", "sh", "-c", "echo two >> notes.txt", cwd=ws))
    assert_user_error(run_cli("replay", "HEAD", cwd=ws), code=2, says="not a range")
    assert_user_error(run_cli("replay", "HEAD..HEAD~1", cwd=ws), code=2, says="not an ancestor")
    assert_user_error(run_cli("replay", "nosuch..HEAD", cwd=ws), says="nosuch")


def test_a_run_that_changed_nothing_is_not_taken_for_the_snapshot_before_it(run_cli, ws):
    _workspace(run_cli, ws)
    ok(run_cli("snapshot", "-m", "second", cwd=ws))  # nothing changed: no new event
    (ws / "notes.txt").write_text("edited by hand\n")
    ok(run_cli("snapshot", "-m", "by hand", cwd=ws))
    # this run changes nothing: it anchors at 'by hand', which it did not make
    ok(run_cli("run", "--", "sh", "-c", "echo not replayed > /dev/null", cwd=ws))
    report = as_json(run_cli("replay", "HEAD~1..HEAD", "--json", cwd=ws))
    assert [(s["kind"], s["status"]) for s in report["steps"]] == [("recorded", "applied")]


def test_a_replayed_command_that_hangs_is_stopped_at_the_timeout(run_cli, ws):
    _workspace(run_cli, ws)
    marker = ws.parent / "host-only"
    marker.write_text("x")
    # quick when recorded (the marker is on the host), stuck in the sandbox (it is not)
    script = f"test -e {marker} || sleep 60; echo done > f.txt"
    ok(run_cli("run", "--", "sh", "-c", script, cwd=ws))
    code, out, _ = run_cli("replay", "HEAD~1..HEAD", "--timeout", "1", "--json", cwd=ws, timeout=30)
    d = json.loads(out)["first_divergence"]
    assert code == 1 and d["kind"] == "exit_code" and "did not end within 1 s" in d["detail"]
