"""Result events: strata run --result, JUnit metrics, strata results list/show."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import as_json, assert_user_error, ok

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="{f}" skipped="1" tests="5" time="0.25">
<testcase classname="t" name="a" time="0.1"/></testsuite></testsuites>
"""


def _tester(ws: Path, failures: int) -> list[str]:
    script = ws.parent / f"tests_{failures}.py"
    script.write_text(
        "import sys\n"
        f"open(sys.argv[1].split('=', 1)[1], 'w').write({JUNIT.format(f=failures)!r})\n"
        f"sys.exit({1 if failures else 0})\n"
    )
    return [sys.executable, str(script)]


def test_run_result_with_junit_metrics_and_listing(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("a\n")
    first = as_json(run_cli("snapshot", "-m", "first", "--json", cwd=ws))
    report = ws.parent / "report.xml"
    code, _, err = run_cli(
        "run", "--result", "unit", "--", *_tester(ws, 2), f"--junitxml={report}", cwd=ws
    )
    assert code == 1  # the command's own exit code
    assert "unit: failed (5 tests, 2 failures, 0 errors, 1 skipped)" in err
    (ws / "a.txt").write_text("b\n")
    second = as_json(run_cli("snapshot", "-m", "second", "--json", cwd=ws))
    ok(run_cli("run", "--result", "unit", "--", *_tester(ws, 0), f"--junitxml={report}", cwd=ws))
    listed = as_json(run_cli("results", "list", "--json", cwd=ws))
    assert [r["passed"] for r in listed] == [True, False]
    assert listed[1]["metrics"] == {
        "tests": 5,
        "failures": 2,
        "errors": 0,
        "skipped": 1,
        "time_s": 0.25,
    }
    assert listed[1]["anchor_event_id"] == first["event_id"]
    assert listed[0]["anchor_event_id"] == second["event_id"]
    assert listed[0]["artifacts"]  # the report, stored
    only_first = as_json(
        run_cli("results", "list", "--between", f"{first['event_id']}..HEAD~1", "--json", cwd=ws)
    )
    assert [r["event_id"] for r in only_first] == [listed[1]["event_id"]]
    shown = as_json(run_cli("results", "show", listed[0]["event_id"][:10], "--json", cwd=ws))
    assert shown["name"] == "unit" and shown["exit_code"] == 0
    assert "unit: passed" in ok(run_cli("history", "--limit", "20", cwd=ws))
    assert_user_error(run_cli("results", "show", "zzzzzz", cwd=ws), says="unknown result")
    assert_user_error(run_cli("results", "list", "--between", "HEAD", cwd=ws), code=2, says="A..B")
    ok(run_cli("check", cwd=ws))


def test_result_without_a_report_and_a_bad_report(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("a\n")
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("run", "--result", "smoke", "--", sys.executable, "-c", "pass", cwd=ws))
    (r,) = as_json(run_cli("results", "list", "--json", cwd=ws))
    assert r["passed"] is True and r["metrics"] == {} and r["artifacts"] == []
    bad = ws.parent / "bad.xml"
    bad.write_text("<testsuite")
    code, _, err = run_cli(
        "run", "--result", "x", "--junit", str(bad), "--", sys.executable, "-c", "pass", cwd=ws
    )
    assert code == 125 and "JUnit XML report cannot be read" in err and "Traceback" not in err
    assert_user_error(
        run_cli("run", "--junit", str(bad), "--", sys.executable, "-c", "pass", cwd=ws),
        code=125,
        says="--junit goes with --result",
    )
