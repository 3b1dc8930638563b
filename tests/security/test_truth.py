"""Review shows the truth: what a file or message holds is shown, never obeyed or hidden.

* ``review``, ``diff`` (on a terminal) and ``history`` write control characters
  out (``\\x1b``, ``\\r``, ``\\u202e``…) in names, messages and diff lines, so an
  agent cannot erase, recolour or reorder what the user reads; ``--json``
  keeps the exact text, and ``diff`` to a pipe keeps the exact patch.
* A text file that now holds a NUL byte is shown as text, the NUL written
  out and the change flagged, not as a base85 blob.
* Memory does not grow with file size: ``review`` and ``diff`` of a Draft
  holding a 1 GiB sparse file stay under 300 MB of peak RSS.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import tty
from pathlib import Path

import pytest

from conftest import CliRunner, as_json, ok

CONTROLS = [b"\x1b", b"\r", b"\x07", b"\x08", b"\x9b", "\u202e".encode()]


def on_terminal(run_cli: CliRunner, *args: str, cwd: Path) -> bytes:
    """Run the CLI with its stdout on a pseudo-terminal (raw mode: no newline translation)."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=run_cli.env(),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    out = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("the command printed nothing for 60 s")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.stderr is not None
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    return bytes(out)


def ok_bytes(result: tuple[int, bytes, bytes]) -> bytes:
    code, out, err = result
    assert code == 0 and b"Traceback" not in err, err.decode()
    return out


def assert_shown_not_obeyed(out: bytes) -> None:
    for control in CONTROLS:
        assert control not in out, (control, out)
    assert b"\r\n" not in out


EVIL_NAME = "note\x1b[2K\rsafe.txt"
EVIL_TEXT = "ok\n\x1b[31mred\x1b[0m\nrm -rf ~ \rharmless comment\n\u202eevil\x08\x07\n"


@pytest.fixture
def evil_draft(run_cli: CliRunner, ws: Path) -> Path:
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    draft = ws / ".strata" / "draft" / "files"
    (draft / EVIL_NAME).write_text(EVIL_TEXT)
    (draft / "a.txt").write_text("one\n\x1b]0;owned\x07two\n")
    return draft


def test_review_writes_control_characters_out(
    run_cli: CliRunner, ws: Path, evil_draft: Path
) -> None:
    out = ok_bytes(run_cli("review", cwd=ws, text=False))
    assert_shown_not_obeyed(out)
    assert b"note\\x1b[2K\\rsafe.txt" in out
    assert b"+\\x1b[31mred\\x1b[0m" in out
    assert b"+rm -rf ~ \\rharmless comment" in out
    assert b"+\\u202eevil\\x08\\x07" in out
    assert b"+\\x1b]0;owned\\x07two" in out
    # JSON keeps the exact name
    review = as_json(run_cli("review", "--json", cwd=ws))
    assert EVIL_NAME in {f["path"] for f in review["files"]}


def test_diff_on_a_terminal_writes_control_characters_out_and_a_pipe_gets_exact_bytes(
    run_cli: CliRunner, ws: Path, git: object
) -> None:
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("snapshot", cwd=ws))
    (ws / EVIL_NAME).write_text(EVIL_TEXT)
    (ws / "a.txt").write_text("one\n\x1b]0;owned\x07two\n")
    ok(run_cli("snapshot", cwd=ws))
    shown = on_terminal(run_cli, "diff", "HEAD~1", "HEAD", cwd=ws)
    assert_shown_not_obeyed(shown)
    assert b"+\\x1b[31mred\\x1b[0m" in shown
    for flag in ("--stat", "--name-only"):
        listed = on_terminal(run_cli, "diff", "HEAD~1", "HEAD", flag, cwd=ws)
        assert_shown_not_obeyed(listed)
        assert b"note\\x1b[2K\\rsafe.txt" in listed
    # to a pipe: the exact patch, which git applies
    patch = ok_bytes(run_cli("diff", "HEAD~1", "HEAD", cwd=ws, text=False))
    assert b"\x1b[31mred\x1b[0m" in patch
    ok(run_cli("rewind", "HEAD~1", cwd=ws))
    subprocess.run(["git", "apply", "-"], cwd=ws, input=patch, check=True)
    assert (ws / EVIL_NAME).read_bytes() == EVIL_TEXT.encode()


def test_history_writes_control_characters_out_of_messages_and_authors(
    run_cli: CliRunner, ws: Path
) -> None:
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    message = "fix\x1b[2K\rall tests pass \u202eyes"
    ok(run_cli("snapshot", "-m", message, cwd=ws, env={"STRATA_AUTHOR": "bot\x1b[8m"}))
    for args in ([], ["--group-by", "author"], ["--group-by", "operation", "--expand"]):
        out = ok_bytes(run_cli("history", *args, cwd=ws, text=False))
        assert_shown_not_obeyed(out)
        assert b"bot\\x1b[8m" in out
    out = ok_bytes(run_cli("history", cwd=ws, text=False))
    assert b"fix\\x1b[2K\\rall tests pass \\u202eyes" in out
    events = as_json(run_cli("history", "--json", cwd=ws))
    assert message in [e["rationale"] for e in events]


def test_status_writes_control_characters_out_of_names(run_cli: CliRunner, ws: Path) -> None:
    ok(run_cli("init", cwd=ws))
    (ws / EVIL_NAME).write_text("x\n")
    out = ok_bytes(run_cli("status", cwd=ws, text=False))
    assert_shown_not_obeyed(out)
    assert b"note\\x1b[2K\\rsafe.txt" in out


TEXT = b"".join(b"line %d\n" % i for i in range(30))
WITH_NUL = TEXT.replace(b"line 15\n", b"line 15 \x00 hidden payload\n")


def test_review_shows_a_text_file_that_gained_a_nul_as_text(run_cli: CliRunner, ws: Path) -> None:
    ok(run_cli("init", cwd=ws))
    (ws / "conf.py").write_bytes(TEXT)
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    (ws / ".strata" / "draft" / "files" / "conf.py").write_bytes(WITH_NUL)
    out = ok_bytes(run_cli("review", cwd=ws, text=False))
    assert b"GIT binary patch" not in out
    assert b"was text, now contains NUL bytes" in out
    assert b"-line 15\n+line 15 \\x00 hidden payload\n" in out
    assert b"\x00" not in out


def test_diff_on_a_terminal_shows_a_text_file_that_gained_a_nul_as_text(
    run_cli: CliRunner, ws: Path
) -> None:
    ok(run_cli("init", cwd=ws))
    (ws / "conf.py").write_bytes(TEXT)
    ok(run_cli("snapshot", cwd=ws))
    (ws / "conf.py").write_bytes(WITH_NUL)
    shown = on_terminal(run_cli, "diff", "HEAD", cwd=ws)
    assert b"GIT binary patch" not in shown
    assert b"was text, now contains NUL bytes" in shown
    assert b"+line 15 \\x00 hidden payload" in shown
    # a pipe still gets git's binary patch, which git applies
    patch = ok_bytes(run_cli("diff", "HEAD", cwd=ws, text=False))
    assert b"GIT binary patch" in patch


# -- memory does not grow with file size ---------------------------------------------

BIG = 1 << 30  # 1 GiB sparse: 2 GiB passes too, twice as slow (hashing and compressing zeros)
MAX_RSS = 300 * 1024 * 1024


def peak_rss_of(run_cli: CliRunner, *args: str, cwd: Path) -> tuple[int, bytes]:
    """Run the CLI in a fresh child (via a shell that reports it) and return its peak RSS."""
    script = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "sys.stderr.buffer.write(p.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stdout.buffer.write(p.stdout[:4096])\n"
        "sys.exit(p.returncode)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=run_cli.env(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    first, _, rest = proc.stdout.partition(b"\n")
    return int(first) * 1024, rest


@pytest.mark.slow  # 1 GiB hashed, compressed and written again by six commands (~20 s of CPU)
def test_review_and_diff_of_a_huge_sparse_file_keep_memory_flat(
    run_cli: CliRunner, ws: Path
) -> None:
    if shutil.disk_usage(ws).free < 4 * 1024**3:
        pytest.skip("needs 4 GB of free disk space")
    ok(run_cli("init", cwd=ws))
    with (ws / ".strata" / "config.toml").open("a") as f:  # past the large-file guard
        f.write('\n[snapshot]\nlarge_files = ["big.log"]\n')
    (ws / "small.txt").write_text("one\n")
    with open(ws / "big.log", "wb") as f:  # text, with a first line and a last one
        f.write(b"first\n")
        f.truncate(BIG)
        f.seek(BIG)
        f.write(b"\nlast\n")
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    big = ws / ".strata" / "draft" / "files" / "big.log"
    with open(big, "r+b") as f:  # an edit in the middle of the big file
        f.seek(BIG // 2)
        f.write(b"middle\n")
    rss, out = peak_rss_of(run_cli, "review", cwd=ws)
    assert rss < MAX_RSS, f"review peaked at {rss >> 20} MiB"
    assert b"big.log" in out and b"Binary files a/big.log and b/big.log differ" in out
    review = as_json(run_cli("review", "--json", cwd=ws))
    (entry,) = [f for f in review["files"] if f["path"] == "big.log"]
    assert entry["binary"] is True
    assert entry["bytes_changed"] == BIG + 6 - BIG // 2  # from the first changed byte on
    base, tip = review["base_event_id"], review["draft_event_id"]
    rss, out = peak_rss_of(run_cli, "diff", base, tip, cwd=ws)
    assert rss < MAX_RSS, f"diff peaked at {rss >> 20} MiB"
    assert b"Binary files a/big.log and b/big.log differ" in out
    rss, _ = peak_rss_of(run_cli, "publish", cwd=ws)
    assert rss < MAX_RSS, f"publish peaked at {rss >> 20} MiB"
    assert os.path.getsize(ws / "big.log") == BIG + 6
    # the working tree against HEAD: the file is read from the workspace, as a stream
    with open(ws / "big.log", "r+b") as f:
        f.seek(BIG // 4)
        f.write(b"quarter\n")
    rss, out = peak_rss_of(run_cli, "diff", "HEAD", "--stat", cwd=ws)
    assert rss < MAX_RSS, f"diff of the working tree peaked at {rss >> 20} MiB"
    assert b"big.log | Bin" in out


def test_op_log_checkpoints_and_errors_write_control_characters_out(
    run_cli: CliRunner, ws: Path
) -> None:
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    evil = "agent\x1b[2J\rclean"
    ok(run_cli("snapshot", "--author", evil, "-m", "one", cwd=ws))
    ok(run_cli("checkpoint", "create", "-m", "cp\x1b]0;owned\x07", cwd=ws))
    for argv in (("op", "log"), ("checkpoint", "list")):
        out = ok(run_cli(*argv, cwd=ws))
        assert "\x1b" not in out and "\r" not in out, (argv, out)
    code, out, err = run_cli("-C", str(ws / "no\x1b[2J"), "status", cwd=ws)
    assert code != 0 and "\x1b" not in err and "no\\x1b[2J" in err, err


def test_review_warns_about_what_the_draft_holds_but_cannot_record(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws))
    plant = "mkfifo pipe && echo two > a.txt"
    ok(run_cli("run", "--draft", "--sandbox", "none", "--", "sh", "-c", plant, cwd=ws))
    code, _, err = run_cli("review", cwd=ws)
    assert code == 0, err
    assert "pipe" in err and "FIFO" in err, err  # never dropped silently
    review = json.loads(run_cli("review", "--json", cwd=ws)[1])
    assert any("pipe" in w for w in review["warnings"]), review


def test_a_sparse_file_stays_sparse_when_published_and_rewound(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("init", cwd=ws))
    with (ws / ".strata" / "config.toml").open("a") as f:  # past the large-file guard
        f.write('\n[snapshot]\nmax_file_size = "1 GB"\n')
    ok(run_cli("snapshot", cwd=ws))
    size = 256 << 20
    plant = f"truncate -s {size} zeros.img && printf end >> zeros.img"
    ok(run_cli("run", "--draft", "--sandbox", "none", "--", "sh", "-c", plant, cwd=ws))
    ok(run_cli("publish", cwd=ws))
    published = (ws / "zeros.img").stat()
    assert published.st_size == size + 3
    assert published.st_blocks * 512 < 4 << 20, "the agent's zeros took real disk space"
    with open(ws / "zeros.img", "rb") as f:
        f.seek(size)
        assert f.read() == b"end"
    # a rewind writes it back sparse too
    (ws / "zeros.img").unlink()
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("rewind", "HEAD~1", cwd=ws))
    assert (ws / "zeros.img").stat().st_blocks * 512 < 4 << 20
