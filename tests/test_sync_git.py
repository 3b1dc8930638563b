"""The Git sync: one commit per operation, pushed to a bare remote, imported on another machine.

Real git, real bare repositories over ``file://`` and over SSH to an ``sshd``
this test starts on 127.0.0.1 with its own host and user keys.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, Dir, File, Link, as_json, assert_user_error, ok, write_tree

Git = Callable[..., subprocess.CompletedProcess[bytes]]


def machine_a(tmp: Path, run_cli: CliRunner, git: Git) -> Path:
    """A git work tree with a commit of its own, a recorded history, a branch and a bookmark."""
    ws = write_tree(
        tmp / "a",
        {
            "a.txt": "one\n",
            "tool.sh": File("#!/bin/sh\n", 0o755),
            "secret.cfg": File("k=v\n", 0o640),
            "empty": Dir(0o700),
            "link": Link("a.txt"),
        },
    )
    git("init", "-q", "-b", "work", cwd=ws)
    git("add", "a.txt", cwd=ws)
    git("commit", "-q", "-m", "user's own commit", cwd=ws)
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\ntwo\n")
    ok(run_cli("snapshot", "-m", "second", cwd=ws))
    ok(run_cli("bookmark", "add", "good", cwd=ws))
    first = as_json(run_cli("history", "--json", cwd=ws))[-1]["id"]
    ok(run_cli("rewind", first, "--branch", "retry", cwd=ws))
    (ws / "c.txt").write_text("c\n")
    ok(run_cli("snapshot", "-m", "on retry", cwd=ws))
    return ws


def user_git_state(ws: Path, git: Git) -> tuple[bytes, ...]:
    """What the user owns in git: HEAD, branches, index, stash, status."""
    return (
        git("rev-parse", "HEAD", cwd=ws).stdout,
        git("for-each-ref", "refs/heads/work", "refs/stash", cwd=ws).stdout,
        (ws / ".git" / "index").read_bytes(),
        git("--no-optional-locks", "status", "--porcelain", cwd=ws).stdout,
    )


def events_of(ws: Path, run_cli: CliRunner, *args: str) -> list[tuple[str, str, str]]:
    return [
        (e["id"], e["author"]["name"], e["ts"])
        for e in as_json(run_cli("history", "--json", *args, cwd=ws))
    ]


def test_history_travels_through_a_bare_remote_with_the_same_ids(
    tmp_path: Path, run_cli: CliRunner, git: Git
) -> None:
    ws = machine_a(tmp_path, run_cli, git)
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("remote", "add", "origin", f"file://{remote}", cwd=ws)
    before = user_git_state(ws, git)

    synced = as_json(run_cli("vcs", "sync", "--json", cwd=ws))
    assert set(synced["branches"]) == {"main", "retry"}
    assert synced["tags"].keys() == {"good"} and synced["verified"] >= 3
    assert user_git_state(ws, git) == before  # the user's HEAD, index, branches untouched
    log = git("log", "--format=%an%n%B", "strata/main", cwd=ws).stdout.decode()
    assert "Strata-Operation: " in log and "Strata-First-Event: " in log and "tester" in log
    pushed = as_json(run_cli("vcs", "push", "origin", "--json", cwd=ws))
    assert pushed["branches"] == synced["branches"]
    listed = git("ls-remote", str(remote), cwd=tmp_path).stdout.decode()
    assert "refs/heads/strata/main" in listed and "refs/tags/strata/good" in listed
    assert "refs/heads/work" not in listed

    b = tmp_path / "b"
    b.mkdir()
    git("init", "-q", cwd=b)
    git("remote", "add", "origin", f"file://{remote}", cwd=b)
    ok(run_cli("init", "--no-snapshot", cwd=b))
    fetched = as_json(run_cli("vcs", "fetch", "origin", "--json", cwd=b))
    assert fetched["branches"] == synced["branches"]
    imported = as_json(run_cli("import", "git:origin/strata/retry", "--json", cwd=b))
    # retry was forked from main's first event: that much of main comes along
    assert imported["branches"].keys() == {"origin/retry", "origin/main"}
    assert imported["bookmarks"] == []  # 'good' names an event retry does not reach
    main = as_json(run_cli("import", "git:origin/strata/main", "--json", cwd=b))
    assert main["bookmarks"] == ["origin/good"] and main["events"] == 1
    # the reviewer sees the agent's timeline: same ids, authors and times
    assert events_of(b, run_cli, "--branch", "origin/main") == events_of(
        ws, run_cli, "--branch", "main"
    )
    assert (
        events_of(b, run_cli, "--branch", "origin/retry")[0]
        == (events_of(ws, run_cli, "--branch", "retry")[0])
    )
    ok(run_cli("check", cwd=b))
    again = as_json(run_cli("import", "git:origin/strata/retry", "--json", cwd=b))
    assert again["events"] == 0 and again["skipped"] == imported["events"]
    ops = len(as_json(run_cli("op", "log", "--json", cwd=b)))
    as_json(run_cli("import", "git:origin/strata/main", "--json", cwd=b))
    assert len(as_json(run_cli("op", "log", "--json", cwd=b))) == ops  # nothing new: no record

    # a bookmark moved on A moves its tag on the remote, and the reviewer's copy follows
    retry_tip = events_of(ws, run_cli, "--branch", "retry")[0][0]
    ok(run_cli("bookmark", "move", "good", retry_tip, cwd=ws))
    ok(run_cli("vcs", "push", "origin", cwd=ws))
    ok(run_cli("import", "git:origin/strata/retry", cwd=b))
    marks = as_json(run_cli("bookmark", "list", "--json", cwd=b))
    assert [m["target_event_id"] for m in marks if m["name"] == "origin/good"] == [retry_tip]

    # rewinding to the shared bookmark brings the files back, permissions included
    ok(run_cli("rewind", "good", cwd=ws))
    ok(run_cli("rewind", "origin/good", cwd=b))
    from conftest import read_manifest

    assert read_manifest(b) == read_manifest(ws)


def test_a_second_sync_writes_only_new_operations_and_a_lost_table_changes_nothing(
    tmp_path: Path, run_cli: CliRunner, git: Git
) -> None:
    ws = machine_a(tmp_path, run_cli, git)
    first = as_json(run_cli("vcs", "sync", "--json", cwd=ws))
    assert len(first["commits"]) >= 3
    assert as_json(run_cli("vcs", "sync", "--json", cwd=ws))["commits"] == []
    (ws / "c.txt").write_text("changed\n")
    snap = as_json(run_cli("snapshot", "--json", cwd=ws))
    second = as_json(run_cli("vcs", "sync", "--json", cwd=ws))
    assert [(c["branch"], c["first_event_id"]) for c in second["commits"]] == [
        ("retry", snap["event_id"])
    ]
    # a sync killed before its table was written starts over and writes the same commits
    (ws / ".strata" / "sync.db").unlink()
    redo = as_json(run_cli("vcs", "sync", "--json", cwd=ws))
    assert redo["branches"] == second["branches"] and redo["tags"] == second["tags"]
    assert as_json(run_cli("vcs", "verify", "--json", cwd=ws))["ok"] is True


def test_verification_names_the_first_file_that_differs_and_import_refuses_it(
    tmp_path: Path, run_cli: CliRunner, git: Git
) -> None:
    ws = machine_a(tmp_path, run_cli, git)
    ok(run_cli("vcs", "sync", cwd=ws))
    # the table that says which Strata object became which git blob goes wrong:
    # tool.sh's content is mapped to the blob of secret.cfg
    db = sqlite3.connect(ws / ".strata" / "sync.db")
    tool = git("hash-object", str(ws / "tool.sh"), cwd=ws).stdout.decode().strip()
    cfg = git("hash-object", str(ws / "secret.cfg"), cwd=ws).stdout.decode().strip()
    changed = db.execute("UPDATE objects SET git = ? WHERE git = ?", (cfg, tool)).rowcount
    db.execute("DELETE FROM objects WHERE kind = 'files'")
    db.commit()
    db.close()
    assert changed == 1
    (ws / "c.txt").write_text("again\n")
    ok(run_cli("snapshot", cwd=ws))
    err = assert_user_error(run_cli("vcs", "sync", cwd=ws), says="tool.sh")
    assert "differs" in err
    assert_user_error(run_cli("vcs", "verify", cwd=ws), says="tool.sh")

    # the bad commit reaches a remote; the other machine refuses it and records nothing
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("push", "-q", str(remote), "refs/heads/strata/*:refs/heads/strata/*", cwd=ws)
    b = tmp_path / "b"
    b.mkdir()
    git("init", "-q", cwd=b)
    git("remote", "add", "up", f"file://{remote}", cwd=b)
    ok(run_cli("init", "--no-snapshot", cwd=b))
    assert_user_error(run_cli("import", "git:up/strata/retry", cwd=b), says="tool.sh")
    assert as_json(run_cli("history", "--json", cwd=b)) == []
    ok(run_cli("check", cwd=b))


def test_a_workspace_outside_git_syncs_to_the_configured_bare_repository(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = write_tree(tmp_path / "plain", {"a.txt": "a\n"})
    ok(run_cli("init", cwd=ws))
    assert_user_error(run_cli("vcs", "sync", cwd=ws), says="not the top of a git work tree")
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[sync]\nrepository = "../mirror.git"\n')
    synced = as_json(run_cli("vcs", "sync", "--json", cwd=ws))
    assert Path(synced["git_dir"]) == (tmp_path / "mirror.git").resolve()
    assert synced["branches"].keys() == {"main"}
    assert not (ws / ".git").exists()
    assert_user_error(run_cli("import", "origin/main", cwd=ws), code=2, says="cannot import")
    assert_user_error(run_cli("vcs", "fetch", "nowhere", cwd=ws), says="nowhere")


# -- over SSH --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An sshd on 127.0.0.1 that lets this user in with a key made here."""
    binary = "/usr/sbin/sshd"
    if not os.path.exists(binary) or shutil.which("ssh") is None:
        pytest.skip("openssh-server is not installed (scripts/dev installs it)")
    if os.geteuid() != 0:
        pytest.skip("the test's sshd logs the user in as root")
    folder = tmp_path / "ssh"
    folder.mkdir(mode=0o700)
    for name in ("host", "user"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True
        )
    (folder / "authorized_keys").write_bytes((folder / "user.pub").read_bytes())
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {folder / 'host'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\n"
    )
    host_key = (folder / "host.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    proc = subprocess.Popen(
        [binary, "-D", "-e", "-f", str(folder / "sshd_config")],
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        command = (
            f"ssh -i {folder / 'user'} -o IdentitiesOnly=yes -o BatchMode=yes "
            f"-o UserKnownHostsFile={folder / 'known_hosts'} -o StrictHostKeyChecking=yes"
        )
        yield {"port": port, "env": {"GIT_SSH_COMMAND": command}}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_push_and_import_over_ssh(
    tmp_path: Path, run_cli: CliRunner, git: Git, sshd: dict[str, Any]
) -> None:
    ws = machine_a(tmp_path, run_cli, git)
    remote = tmp_path / "over-ssh.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    url = f"ssh://root@127.0.0.1:{sshd['port']}{remote}"
    git("remote", "add", "team", url, cwd=ws)
    pushed = as_json(run_cli("vcs", "push", "team", "--json", cwd=ws, env=sshd["env"]))
    assert pushed["branches"].keys() == {"main", "retry"}
    shared = as_json(
        run_cli("bookmark", "share", "good", "team", "--json", cwd=ws, env=sshd["env"])
    )
    assert shared["tag"] == "strata/good" and shared["branch"] == "main"

    b = tmp_path / "b"
    b.mkdir()
    git("init", "-q", cwd=b)
    git("remote", "add", "team", url, cwd=b)
    ok(run_cli("init", "--no-snapshot", cwd=b))
    imported = as_json(run_cli("import", "git:team/strata/main", "--json", cwd=b, env=sshd["env"]))
    assert "team/good" in imported["bookmarks"]
    assert events_of(b, run_cli, "--branch", "team/main") == events_of(
        ws, run_cli, "--branch", "main"
    )
    ok(run_cli("rewind", "team/good", cwd=b))
    assert (b / "a.txt").read_text() == "one\ntwo\n"
    # a remote that refuses the key fails with git's one line, nothing else
    bad = {"GIT_SSH_COMMAND": sshd["env"]["GIT_SSH_COMMAND"].replace("/user ", "/host ")}
    assert_user_error(
        run_cli("vcs", "fetch", "team", cwd=b, env=bad), says="git fetch failed: fatal:"
    )


def test_a_sync_killed_at_any_point_resumes_to_the_same_commits(
    tmp_path: Path, run_cli: CliRunner, git: Git, make_repo: Callable[..., Any]
) -> None:
    ws = write_tree(tmp_path / "ws", {f"d{i % 5}/f{i}.txt": f"{i}\n" * 50 for i in range(200)})
    git("init", "-q", cwd=ws)
    repo = make_repo(ws)
    for n in range(12):
        (ws / f"d{n % 5}" / "f0.txt").write_text(f"change {n}\n")
        repo.snapshot(message=f"op {n}")
    repo.bookmark("add", "mark", ref="HEAD~3")
    repo.close()
    clean = tmp_path / "clean"
    shutil.copytree(ws, clean, symlinks=True)
    expected = as_json(run_cli("vcs", "sync", "--json", cwd=clean))
    assert len(expected["commits"]) == 12
    for delay in (0.05, 0.2, 0.4, 0.8):
        child = subprocess.Popen(
            [sys.executable, "-m", "strata", "vcs", "sync"],
            cwd=ws,
            env=run_cli.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        ok(run_cli("check", cwd=ws))
    resumed = as_json(run_cli("vcs", "sync", "--json", cwd=ws))
    assert resumed["branches"] == expected["branches"]
    assert resumed["tags"] == expected["tags"]
    git("fsck", "--no-dangling", cwd=ws)
    ok(run_cli("vcs", "verify", cwd=ws))


def test_a_name_git_cannot_hold_is_refused_in_one_line(
    tmp_path: Path, run_cli: CliRunner, git: Git
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name\n")
    git("init", "-q", cwd=ws)
    ok(run_cli("init", cwd=ws))
    assert_user_error(run_cli("vcs", "sync", cwd=ws), says="is not UTF-8")
    ok(run_cli("check", cwd=ws))
