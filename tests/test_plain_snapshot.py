"""``strata snapshot [-m MESSAGE]`` runs without the parser and does what the parser's path does.

Each case runs the same snapshot twice, in two identical workspaces with the
same clock and seed: once in the plain form (``-m MESSAGE``, which
``strata.cli.plain`` runs without click) and once in a form only the parser
takes (``--message=MESSAGE``). Exit code, standard output, standard error and
what the ledger recorded must be the same.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import CliRunner, ok

#: runs the console script's entry point; says on the descriptor named first whether the
#: parser ran the command (it loads the command's module, strata.cli.record)
PROBE = """
import atexit, os, sys
fd = int(sys.argv[1])
say = lambda: os.write(fd, b"parser" if "strata.cli.record" in sys.modules else b"plain")
atexit.register(say)
if os.environ.get("PROBE_INTERRUPT"):  # Ctrl-C while the snapshot runs
    import strata.repo
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    strata.repo.Repository.snapshot = interrupted
from strata._entry import run
sys.argv = ["strata", *sys.argv[2:]]
run()
"""


def _run(
    cli: CliRunner, args: list[str], cwd: Path, env: dict[str, str], *, stdout: int | None = None
) -> tuple[int, str, str, str]:
    """Exit code, stdout, stderr and which path ran (``plain``, ``parser``) of ``strata ARGS``.

    ``stdout``: a descriptor to print to instead of a pipe read here.
    """
    import subprocess

    read, write = os.pipe()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(write), *args],
        cwd=cwd,
        env=cli.env(env),
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(write,),
        timeout=60,
        check=False,
    )
    os.close(write)
    with os.fdopen(read, "rb") as f:
        path = f.read().decode()
    return proc.returncode, proc.stdout or "", proc.stderr, path


def _pair(
    tmp_path: Path, cli: CliRunner, files: dict[str, str], *, init: bool = True
) -> list[Path]:
    """Two identical workspaces (initialized with the same clock and seed)."""
    made = []
    for name in ("plain", "parser"):
        ws = tmp_path / name / "ws"
        ws.mkdir(parents=True)
        for rel, text in files.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        if init:
            ok(cli("init", "--no-snapshot", cwd=ws, env={"STRATA_SEED": "7"}))
        made.append(ws)
    return made


def _same(
    tmp_path: Path, cli: CliRunner, workspaces: list[Path], message: str, **env: str
) -> tuple[int, str, str]:
    """Run the plain and the parser form; assert they agree; return what they gave."""
    env = {"STRATA_SEED": "11", **env}
    plain = _run(cli, ["snapshot", "-m", message], workspaces[0], env)
    parser = _run(cli, ["snapshot", f"--message={message}"], workspaces[1], env)
    assert plain[3] == "plain" and parser[3] == "parser"

    def seen(result: tuple[int, str, str, str], ws: Path) -> tuple[int, str, str]:
        code, out, err, _ = result
        return code, out.replace(str(ws), "WS"), err.replace(str(ws), "WS")

    assert seen(plain, workspaces[0]) == seen(parser, workspaces[1])
    return seen(plain, workspaces[0])


def _history(cli: CliRunner, ws: Path) -> list[dict[str, object]]:
    events = json.loads(ok(cli("history", "--json", cwd=ws)))
    keys = ("id", "rationale", "author", "action_type", "snapshot_ref", "data")
    return [{k: e.get(k) for k in keys} for e in events]


def test_a_first_snapshot_then_a_no_op_print_and_record_the_same(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    workspaces = _pair(tmp_path, run_cli, {"a.txt": "a\n", "src/b.py": "b = 1\n"})
    code, out, err = _same(tmp_path, run_cli, workspaces, "first")
    assert code == 0 and out.startswith("Recorded ") and "2 files changed" in out, out
    code, out, err = _same(tmp_path, run_cli, workspaces, "again")
    assert (code, out, err) == (0, "Nothing changed since HEAD; no snapshot recorded.\n", "")
    (workspaces[0] / "a.txt").write_text("edited\n")
    (workspaces[1] / "a.txt").write_text("edited\n")
    code, out, _ = _same(tmp_path, run_cli, workspaces, "edit")
    assert "1 file changed" in out
    assert _history(run_cli, workspaces[0]) == _history(run_cli, workspaces[1])
    assert [e["rationale"] for e in _history(run_cli, workspaces[0])] == ["edit", "first"]


def test_a_warning_is_printed_the_same(tmp_path: Path, run_cli: CliRunner) -> None:
    workspaces = _pair(tmp_path, run_cli, {"a.txt": "a\n"})
    for ws in workspaces:
        os.mkfifo(ws / "pipe")
    code, _, err = _same(tmp_path, run_cli, workspaces, "with a FIFO")
    assert code == 0 and "skipped FIFO pipe" in err, err


def test_errors_are_reported_the_same(tmp_path: Path, run_cli: CliRunner) -> None:
    outside = _pair(tmp_path / "none", run_cli, {"a.txt": "a\n"}, init=False)
    code, out, err = _same(tmp_path, run_cli, outside, "x")
    assert code == 1 and out == "" and err.startswith("error: not a strata workspace"), err
    damaged = _pair(tmp_path / "damaged", run_cli, {"a.txt": "a\n"})
    for ws in damaged:
        (ws / ".strata" / "ledger.db").write_bytes(b"not a database" * 100)
    code, out, err = _same(tmp_path, run_cli, damaged, "x")
    assert code == 1 and err.startswith("error: "), err
    assert "Traceback" not in err and "internal error" not in err


def test_an_interrupted_snapshot_is_reported_the_same(tmp_path: Path, run_cli: CliRunner) -> None:
    workspaces = _pair(tmp_path, run_cli, {"a.txt": "a\n"})
    code, out, err = _same(tmp_path, run_cli, workspaces, "x", PROBE_INTERRUPT="1")
    assert (code, out, err) == (130, "", "\nerror: interrupted\n")


def test_a_reader_gone_away_ends_it_the_same(tmp_path: Path, run_cli: CliRunner) -> None:
    """Standard output is a pipe nobody reads: exit 1, and nothing on stderr."""
    workspaces = _pair(tmp_path, run_cli, {"a.txt": "a\n"})
    results = []
    for ws, args in zip(
        workspaces, (["snapshot", "-m", "x"], ["snapshot", "--message=x"]), strict=True
    ):
        read, write = os.pipe()
        os.close(read)
        try:
            results.append(_run(run_cli, args, ws, {"STRATA_SEED": "11"}, stdout=write))
        finally:
            os.close(write)
    assert results[0] == (1, "", "", "plain")
    assert results[1] == (1, "", "", "parser")


def test_what_the_parser_checks_still_goes_to_the_parser(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    (ws,) = _pair(tmp_path, run_cli, {"a.txt": "a\n"})[:1]
    for env in ({"STRATA_AUTHOR_KIND": "robot"}, {"STRATA_NOW": "soon"}):
        code, out, err, path = _run(run_cli, ["snapshot", "-m", "x"], ws, env)
        assert path == "parser" and code == 2 and out == "", err
        assert "hint: see 'strata snapshot --help'" in err, err
    for args in (["snapshot", "-m", "-x"], ["snapshot", "--json"], ["snapshot", "-m", "x", "-m"]):
        assert _run(run_cli, args, ws, {})[3] == "parser", args


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a terminal")
def test_no_color_on_a_terminal_goes_to_the_parser(tmp_path: Path, run_cli: CliRunner) -> None:
    """The parser turns a warning's colour off for NO_COLOR; the plain form leaves it to it."""
    import subprocess

    (ws,) = _pair(tmp_path, run_cli, {"a.txt": "a\n"})[:1]
    os.mkfifo(ws / "pipe")
    command = f"{sys.executable} -m strata snapshot -m x"
    proc = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        cwd=ws,
        env=run_cli.env({"NO_COLOR": "1"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipped FIFO pipe" in proc.stdout and "\x1b[" not in proc.stdout, proc.stdout
