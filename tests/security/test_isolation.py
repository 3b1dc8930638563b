"""Sandbox and Draft isolation: nothing done in the Draft reaches the host.

A git work tree's Draft has a ``.git`` of its own that shares no file with the
real one; git config an agent plants in the Draft runs nothing when the user
inspects the Draft; the repository is never visible in the sandbox, wherever
``--store`` puts it; the watcher's socket answers only its own user's
command line; the clean-up after a sandboxed run never follows a symlink the
command left; and a Draft folder left unreadable never blocks the next Draft.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, Person, as_json, git_env, ok

GitRunner = Callable[..., subprocess.CompletedProcess[bytes]]


def _needs_bwrap() -> None:
    from strata.sandbox.bwrap import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        pytest.skip(problem)


@contextmanager
def _private_mounts(*folders: str) -> Iterator[int]:
    """A private mount namespace with a tmpfs over each of ``folders``; yields its holder's pid.

    Tests that make stores under system folders or bind mounts do it there, so
    a broken guard writes or deletes on a tmpfs that vanishes with the test,
    never on the machine running the suite. Commands run in it through
    :func:`_in_namespace`; the test reads what they made through
    ``/proc/PID/root``.
    """
    if os.geteuid() != 0:
        pytest.skip("only root can make a private mount namespace")
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "600"])
    try:
        mine = os.readlink("/proc/self/ns/mnt")
        for _ in range(200):
            try:
                if os.readlink(f"/proc/{holder.pid}/ns/mnt") != mine:
                    break
            except OSError:
                pass
            time.sleep(0.01)
        else:
            pytest.skip("unshare --mount is not permitted here")
        for folder in folders:
            done = subprocess.run(
                [*_in_namespace(holder.pid), "mount", "-t", "tmpfs", "tmpfs", folder],
                capture_output=True,
            )
            if done.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs over {folder}: {done.stderr.decode().strip()}")
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _in_namespace(pid: int, cwd: Path = Path("/")) -> tuple[str, ...]:
    """The prefix that runs a command in the mount namespace of ``pid``, in ``cwd``."""
    return ("nsenter", "-t", str(pid), "-m", f"--wd={cwd}", "--")


def _git_workspace(ws: Path, git: GitRunner) -> None:
    """A git work tree with a packed and a loose commit."""
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "a.txt").write_text("one\n")
    git("init", "-q", cwd=ws)
    git("add", "-A", cwd=ws)
    git("commit", "-qm", "one", cwd=ws)
    git("gc", "-q", cwd=ws)  # a pack
    (ws / "b.txt").write_text("two\n")
    git("add", "-A", cwd=ws)
    git("commit", "-qm", "two", cwd=ws)  # loose objects


def _draft_path(run_cli: CliRunner, ws: Path) -> Path:
    return Path(as_json(run_cli("draft", "status", "--json", cwd=ws))["path"])


def _files(root: Path) -> Iterator[Path]:
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder, name)
            if stat.S_ISREG(path.lstat().st_mode):
                yield path


# -- 1. the Draft's .git shares no inode with the host's --------------------------------


def test_the_drafts_git_shares_no_file_with_the_real_git(
    tmp_path: Path, run_cli: CliRunner, git: GitRunner
) -> None:
    ws = tmp_path / "ws"
    _git_workspace(ws, git)
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    draft_git = _draft_path(run_cli, ws) / ".git"
    assert (draft_git / "objects").is_dir()

    host = {p: p.read_bytes() for p in _files(ws / ".git")}
    host_inodes = {(p.lstat().st_dev, p.lstat().st_ino): p for p in host}
    written = 0
    for path in _files(draft_git):  # code in the Draft writes through every file of its .git
        st = path.lstat()
        assert (st.st_dev, st.st_ino) not in host_inodes, (
            path,
            host_inodes.get((st.st_dev, st.st_ino)),
        )
        path.chmod(0o600)
        with open(path, "r+b") as f:
            f.write(b"\0garbage written in the Draft\0")
        written += 1
    assert written > 5
    assert {p: p.read_bytes() for p in _files(ws / ".git")} == host
    assert git("fsck", "--full", cwd=ws, check=False).returncode == 0


# -- 2. git config planted in the Draft runs nothing ------------------------------------


def _plant(draft: Path, marker: Path, tools: Path) -> None:
    """What a hostile agent leaves in the Draft: every git setting that runs a program."""
    tools.mkdir(exist_ok=True)
    evil = tools / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    evil.chmod(0o755)
    hooks = tools / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("pre-commit", "post-commit", "post-checkout", "commit-msg"):
        shutil.copy(evil, hooks / name)
    for name in ("pre-commit", "post-checkout"):  # the default hooks folder too
        shutil.copy(evil, draft / ".git" / "hooks" / name)
    (tools / "included.cfg").write_text(f"[core]\n\tfsmonitor = {evil}\n")
    with open(draft / ".git" / "config", "a") as f:
        f.write(
            f"[core]\n\tfsmonitor = {evil}\n\thooksPath = {hooks}\n\tsshCommand = {evil}\n"
            f"\tpager = {evil}\n\teditor = {evil}\n"
            f"[alias]\n\tst = !{evil}\n\tstatus = !{evil}\n"
            f'[filter "evil"]\n\tclean = {evil}\n\tsmudge = {evil}\n\tprocess = {evil}\n'
            f'[diff "evil"]\n\ttextconv = {evil}\n\tcommand = {evil}\n'
            f"[diff]\n\texternal = {evil}\n"
            f"[include]\n\tpath = {tools / 'included.cfg'}\n"
        )
    (draft / ".gitattributes").write_text("* filter=evil diff=evil\n")
    # a common folder elsewhere whose config git would read too
    common = tools / "common"
    shutil.copytree(draft / ".git", common, dirs_exist_ok=True)
    (draft / ".git" / "commondir").write_text(f"{common}\n")
    (draft / ".git" / "config.worktree").write_text(f"[core]\n\tfsmonitor = {evil}\n")
    (draft / "a.txt").write_text("changed in the Draft\n")


def _inspect(draft: Path, home: Path) -> None:
    """What a user does to look at the Draft with git."""
    env = git_env(home)
    env["PAGER"] = "cat"
    for argv in (
        ["status"],
        ["st"],
        ["diff"],
        ["diff", "--cached"],
        ["add", "-A"],
        ["commit", "-qm", "look"],
        ["checkout", "-q", "-b", "look"],
        ["log", "-p", "-1"],
    ):
        subprocess.run(["git", *argv], cwd=draft, env=env, capture_output=True, check=False)


@pytest.mark.parametrize("how", ["status", "run", "own-git"])
def test_git_config_planted_in_the_draft_runs_nothing_when_the_user_inspects_it(
    how: str, tmp_path: Path, run_cli: CliRunner, git: GitRunner
) -> None:
    ws = tmp_path / "ws"
    if how == "own-git":  # no git work tree: the command makes the Draft's .git itself
        ws.mkdir()
        (ws / "a.txt").write_text("one\n")
    else:
        _git_workspace(ws, git)
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    draft = _draft_path(run_cli, ws)
    marker = tmp_path / "marker"
    if how == "own-git":
        git("init", "-q", cwd=draft)
        git("add", "a.txt", cwd=draft)
        git("commit", "-qm", "mine", cwd=draft)
        _plant(draft, marker, tmp_path / "tools")
        ok(run_cli("draft", "status", cwd=ws))
    elif how == "status":  # planted while the agent ran; the user asks where the Draft is
        _plant(draft, marker, tmp_path / "tools")
        assert str(draft) in ok(run_cli("draft", "status", cwd=ws))
    else:  # planted by the command itself; the user goes straight to the folder
        script = (
            f"import sys; sys.path[:0] = {sys.path!r}; from pathlib import Path; "
            f"from test_isolation import _plant; "
            f"_plant(Path.cwd(), Path({str(marker)!r}), Path({str(tmp_path / 'tools')!r}))"
        )
        env = {"PYTHONPATH": str(Path(__file__).parent)}
        ok(
            run_cli(
                "draft",
                "run",
                "--sandbox",
                "none",
                "--",
                sys.executable,
                "-c",
                script,
                cwd=ws,
                env=env,
            )
        )
    _inspect(draft, tmp_path / "home")
    assert not marker.exists(), marker.read_text()
    # the Draft's git still works for the user
    assert git("rev-parse", "HEAD", cwd=draft).stdout.strip()


def test_strata_runs_no_planted_program_when_it_starts_the_next_draft(
    tmp_path: Path, run_cli: CliRunner, git: GitRunner
) -> None:
    ws = tmp_path / "ws"
    _git_workspace(ws, git)
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    draft = _draft_path(run_cli, ws)
    marker = tmp_path / "marker"
    _plant(draft, marker, tmp_path / "tools")
    (draft / ".gitattributes").unlink()
    ok(run_cli("publish", "-m", "the Draft's a.txt", cwd=ws))  # Published gets no .git config
    ok(run_cli("draft", "start", cwd=ws))
    ok(run_cli("review", cwd=ws))
    ok(run_cli("discard", cwd=ws))
    assert not marker.exists(), marker.read_text()


# -- 3. the repository is invisible in the sandbox; the watcher's socket is guarded ---------


def test_a_store_under_a_system_folder_is_invisible_in_the_sandbox(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    _needs_bwrap()
    store = Path(f"/opt/strata-test-store-{uuid.uuid4().hex[:12]}")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    with _private_mounts("/opt") as pid:  # /opt is a tmpfs of this test's own
        cli = CliRunner(run_cli.home, prefix=_in_namespace(pid, ws))
        ok(cli("init", "--store", str(store), cwd=ws))
        ok(cli("draft", "start", cwd=ws))
        probe = (
            f"ls -A {store} > listed.txt 2>/dev/null; cat {store}/config.toml > read.txt 2>&1; "
            f"ls {store}/objects {store}/watch > deeper.txt 2>/dev/null; true"
        )
        ok(cli("draft", "run", "--", "sh", "-c", probe, cwd=ws))
        draft = Path(f"/proc/{pid}/root{_draft_path(cli, ws)}")  # the Draft is in the store
        assert (draft / "listed.txt").read_text() == ""
        assert (draft / "deeper.txt").read_text() == ""
        assert "[repository]" not in (draft / "read.txt").read_text()
        # the mask hid it, nothing touched it
        assert Path(f"/proc/{pid}/root{store}/config.toml").is_file()
    assert not store.exists()  # the host's /opt never saw it


def _socket_ask(path: Path, body: dict[str, Any], *, person: Person | None = None) -> Any:
    """Send one request to the watcher socket (as ``person``); its reply, or None."""
    return _socket_ask_argv([], path, body, person=person)


def _socket_ask_argv(
    prefix: list[str], path: Path, body: dict[str, Any], *, person: Person | None = None
) -> Any:
    """:func:`_socket_ask` with the client started through ``prefix`` (a sandbox)."""
    script = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.settimeout(5)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "    s.sendall(sys.argv[2].encode() + b'\\n')\n"
        "    data = b''\n"
        "    while not data.endswith(b'\\n'):\n"
        "        chunk = s.recv(65536)\n"
        "        if not chunk: break\n"
        "        data += chunk\n"
        "    if json.loads(data or b'null') and json.loads(data).get('ready'):\n"
        "        s.sendall(b'{\"go\": true}\\n')\n"
        "        data = b''\n"
        "        while not data.endswith(b'\\n'):\n"
        "            chunk = s.recv(65536)\n"
        "            if not chunk: break\n"
        "            data += chunk\n"
        "    print(data.decode() or 'null')\n"
        "except OSError as exc:\n"
        "    print(json.dumps({'oserror': str(exc)}))\n"
    )
    argv = [*prefix, sys.executable, "-I", "-c", script, str(path), json.dumps(body)]
    if person is not None:
        done = person.run(argv)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _run_request(argv: list[str], cwd: Path) -> dict[str, Any]:
    return {
        "v": 1,
        "op": "run",
        "argv": argv,
        "cwd": str(cwd),
        "env": {"PATH": os.environ.get("PATH", ""), "STRATA_AUTHOR": "x", "HOME": str(cwd)},
        "umask": 0o022,
        "fsencoding": [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
        "tty": [False, False],
        "encoding": [["utf-8", "strict"], ["utf-8", "strict"]],
    }


def test_the_watcher_socket_serves_only_its_own_command_line(
    run_cli: CliRunner, unprivileged: Person
) -> None:
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("connecting as another user needs root to switch users")
    base = Path(tempfile.mkdtemp(prefix="strata-sock-", dir="/tmp"))
    base.chmod(0o755)
    ws = base / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    try:
        ok(run_cli("init", cwd=ws))
        first = as_json(run_cli("snapshot", "--json", "-m", "one", cwd=ws))["event_id"]
        ok(run_cli("watch", "--daemon", "--no-capture", "--json", cwd=ws))
        sock = ws / ".strata" / "watch" / "watch.sock"
        for folder in (ws / ".strata", ws / ".strata" / "watch"):
            folder.chmod(0o755)
        sock.chmod(0o777)  # as a lax umask would leave it
        (ws / "a.txt").write_text("two\n")

        # another user reaches the socket: refused, whatever it asks
        for body in (
            {"v": 1, "op": "status"},
            {"v": 1, "op": "stop"},
            _run_request(["status"], ws),
        ):
            reply = _socket_ask(sock, body, person=unprivileged)
            assert not (reply or {}).get("ok"), reply
        # the same user without the watcher's key (as code in a sandbox would be): refused
        for body in ({"v": 1, "op": "status"}, _run_request(["rewind", first], ws)):
            reply = _socket_ask(sock, body)
            assert not (reply or {}).get("ok"), reply
        # with the key, a command that starts a child process is still refused
        key = (ws / ".strata" / "watch" / "watch.key").read_text().strip()
        assert stat.S_IMODE((ws / ".strata" / "watch" / "watch.key").stat().st_mode) == 0o600
        for argv in (["run", "--", "true"], ["draft", "run", "--", "true"], ["init"]):
            reply = _socket_ask(sock, {**_run_request(argv, ws), "key": key})
            assert not (reply or {}).get("ok"), reply
        assert (ws / "a.txt").read_text() == "two\n"  # nothing was rewound
        assert _socket_ask(sock, {"v": 1, "op": "status", "key": key})["ok"]
        # the command line itself still has its commands served
        ok(run_cli("status", cwd=ws))
        status = as_json(run_cli("watch", "--status", "--json", cwd=ws))
        assert status["running"] and status["commands_run"] == 1, status
    finally:
        run_cli("watch", "--stop", cwd=ws)
        shutil.rmtree(base, ignore_errors=True)


def test_the_watcher_serves_only_its_own_workspace_and_answers_a_bad_request(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    for folder in (ws, other):
        folder.mkdir()
        (folder / "a.txt").write_text("one\n")
        ok(run_cli("init", "--no-snapshot", cwd=folder))
    try:
        ok(run_cli("watch", "--daemon", "--no-capture", "--json", cwd=ws))
        sock = ws / ".strata" / "watch" / "watch.sock"
        key = (ws / ".strata" / "watch" / "watch.key").read_text().strip()
        # another workspace of the same user: refused, and nothing recorded there
        reply = _socket_ask(sock, {**_run_request(["snapshot", "-m", "x"], other), "key": key})
        assert not (reply or {}).get("ok") and "outside" in reply["reason"], reply
        assert "Nothing recorded yet" in ok(run_cli("status", cwd=other))
        # an encoding Python does not know: an answer, not silence after "ready"
        bad = {**_run_request(["status"], ws), "key": key}
        bad["encoding"] = [["rot-nothing", "strict"], ["utf-8", "strict"]]
        reply = _socket_ask(sock, bad)
        assert reply is not None and not reply.get("ok") and "rot-nothing" in reply["reason"]
        # its own workspace is still served
        reply = _socket_ask(sock, {**_run_request(["status"], ws), "key": key})
        assert reply["ok"] and reply["done"] and reply["code"] == 0, reply
    finally:
        run_cli("watch", "--stop", cwd=ws)


# -- 5. the clean-up of mount points never follows a symlink the command left -----------


def test_mount_point_clean_up_does_not_follow_a_symlink_left_by_the_command(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    _needs_bwrap()
    ws = tmp_path / "ws"
    (ws / "web" / "node_modules" / "lib").mkdir(parents=True)
    (ws / "web" / "node_modules" / "lib" / "x.js").write_text("x\n")
    (ws / "web" / "app.js").write_text("app\n")
    (ws / ".gitignore").write_text("node_modules/\n")
    victim = tmp_path / "victim"
    (victim / "node_modules").mkdir(parents=True)  # an empty host folder, where the symlink leads
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    draft = _draft_path(run_cli, ws)
    assert not (draft / "web" / "node_modules").exists()  # bubblewrap makes the mount point
    ok(run_cli("draft", "run", "--", "true", cwd=ws))
    assert not (draft / "web" / "node_modules").exists()  # and Strata removes it after the run
    swap = f"mv web web.moved && ln -s {victim} web"
    ok(run_cli("draft", "run", "--", "sh", "-c", swap, cwd=ws))
    assert (draft / "web").is_symlink()
    assert (victim / "node_modules").is_dir(), "the host folder's content was removed"


# -- 6. an unreadable Draft folder never blocks the next Draft ----------------------------


@pytest.mark.parametrize(("where", "then"), [("sub", "discard"), (".", "publish")])
def test_an_unreadable_draft_folder_does_not_block_the_next_draft(
    where: str, then: str, person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    person.run(["mkdir", "-p", str(ws / "keep")])
    person.run(["sh", "-c", "echo one > a.txt; echo k > keep/k.txt"], cwd=ws)
    ok(cli_as("init", cwd=ws))
    old = Path(as_json(cli_as("draft", "start", "--json", cwd=ws))["path"])
    lock = f"mkdir -p sub/deep && echo x > sub/deep/f && echo y > b.txt && chmod 000 {where}"
    cli_as("draft", "run", "--sandbox", "none", "--", "sh", "-c", lock, cwd=ws)
    code, out, err = cli_as(then, cwd=ws) if then == "discard" else cli_as(then, "-m", "p", cwd=ws)
    assert "Traceback" not in err and "internal error" not in err, err
    if code != 0:  # publish may refuse a Draft it cannot read; discard must not
        assert then == "publish", err
        assert err.startswith("error: "), err
        ok(cli_as("discard", cwd=ws))
    # a process the command left behind locks the kept folder after the Draft ended
    person.run(["sh", "-c", f"mkdir -p sub/deep && chmod 000 {where}"], cwd=old)
    code, out, err = cli_as("draft", "start", "--json", cwd=ws)
    assert code == 0, err
    draft = Path(json.loads(out)["path"])
    assert (draft / "a.txt").read_text() == "one\n"
    assert (draft / "keep" / "k.txt").read_text() == "k\n"
    # the new Draft holds Published's files, whatever the command left in the last one
    assert (draft / "sub").exists() == (ws / "sub").exists()
    ok(cli_as("discard", cwd=ws))


def test_a_draft_git_left_unreadable_does_not_break_the_draft(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    ws = home_of / "ws"
    env = git_env(home_of)
    person.run(["mkdir", str(ws)])
    person.run(
        ["sh", "-c", "echo one > a.txt && git init -q && git add -A && git commit -qm a"],
        cwd=ws,
        env=env,
    )
    ok(cli_as("init", cwd=ws))
    draft = Path(as_json(cli_as("draft", "start", "--json", cwd=ws))["path"])
    assert (draft / ".git" / "HEAD").is_file()
    ok(cli_as("draft", "run", "--sandbox", "none", "--", "chmod", "000", ".git", ".", cwd=ws))
    info = as_json(cli_as("draft", "status", "--json", cwd=ws))
    assert info["open"] and info["git"]
    ok(cli_as("discard", cwd=ws))
    draft = Path(as_json(cli_as("draft", "start", "--json", cwd=ws))["path"])
    assert (draft / "a.txt").read_text() == "one\n"
    ok(cli_as("discard", cwd=ws))


# -- a store reached through a bind mount is invisible, and the watcher refuses sandboxes ----


def test_a_store_reached_through_a_bind_mount_is_invisible_in_the_sandbox(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    _needs_bwrap()
    real = Path(f"/opt/strata-test-real-{uuid.uuid4().hex[:12]}")
    alias = tmp_path / "bind"  # this test's own folder: no other test can delete through it
    alias.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    with _private_mounts("/opt") as pid:  # /opt is a tmpfs of this test's own
        inside = _in_namespace(pid, ws)
        root = Path(f"/proc/{pid}/root")
        done = subprocess.run(
            [*inside, "sh", "-c", f"mkdir {real} && mount --bind {real} {alias}"],
            capture_output=True,
        )
        if done.returncode != 0:
            pytest.skip(f"mount --bind is not permitted here: {done.stderr.decode().strip()}")
        cli = CliRunner(run_cli.home, prefix=inside)
        try:
            ok(cli("init", "--store", str(alias), cwd=ws))
            ok(cli("watch", "--daemon", "--no-capture", "--json", cwd=ws))
            key = (root / str(alias)[1:] / "watch" / "watch.key").read_text().strip()
            probe = (
                f"ls -A {real} > listed.txt 2>/dev/null; "
                f"cat {real}/watch/watch.key > key.txt 2>&1; "
                f"ls {real}/objects {real}/watch > deeper.txt 2>/dev/null; true"
            )
            ok(cli("run", "--draft", "--", "sh", "-c", probe, cwd=ws))
            draft = root / str(_draft_path(cli, ws))[1:]  # the Draft is in the store
            assert (draft / "listed.txt").read_text() == ""
            assert (draft / "deeper.txt").read_text() == ""
            assert key not in (draft / "key.txt").read_text()
            assert (root / str(real)[1:] / "config.toml").is_file()  # masked, not touched

            # a sandboxed process that has the key and reaches the socket is refused all the same
            from strata.sandbox.bwrap import sandbox_problem

            assert sandbox_problem() is None
            sock = alias / "watch" / "watch.sock"
            bwrap = ["bwrap", "--dev-bind", "/", "/", "--unshare-all", "--die-with-parent", "--"]
            for body in (
                {"v": 1, "op": "status", "key": key},
                {**_run_request(["snapshot", "-m", "forged"], ws), "key": key},
            ):
                reply = _socket_ask_argv([*inside, *bwrap], sock, body)
                assert not (reply or {}).get("ok"), reply
            served = _socket_ask_argv(list(inside), sock, {"v": 1, "op": "status", "key": key})
            assert served["ok"]  # outside the sandbox: served
            assert "forged" not in ok(cli("history", cwd=ws))
        finally:
            cli("watch", "--stop", cwd=ws)
    assert not real.exists()  # the host's /opt never saw it
    assert not any(alias.iterdir())  # nor was anything written through the host's folder


# -- an odd .git/config left in the Draft never breaks status or review ---------------------

_ODD_GIT_CONFIGS = {
    "folder": "rm .git/config && mkdir -p .git/config/sub && echo x > .git/config/sub/f",
    "symlink": "rm .git/config && ln -s {target} .git/config",
    "fifo": "rm .git/config && mkfifo .git/config",
    "socket": (
        "rm .git/config && python3 -c "
        "'import socket; socket.socket(socket.AF_UNIX).bind(\".git/config\")'"
    ),
    "unreadable file": "chmod 000 .git/config",
    "unreadable folder": "rm .git/config && mkdir -p .git/config/sub && chmod 000 .git/config",
}


def test_an_odd_git_config_left_in_the_draft_breaks_neither_status_nor_review(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    ws = home_of / "ws"
    env = git_env(home_of)
    target = home_of / "host-file.txt"
    person.run(["sh", "-c", f"echo host > {target}"])
    person.run(["mkdir", str(ws)])
    person.run(
        ["sh", "-c", "echo one > a.txt && git init -q && git add -A && git commit -qm a"],
        cwd=ws,
        env=env,
    )
    ok(cli_as("init", cwd=ws))
    draft = Path(as_json(cli_as("draft", "start", "--json", cwd=ws))["path"])
    for kind, plant in _ODD_GIT_CONFIGS.items():
        script = plant.format(target=target) + f" && echo {kind} > new.txt"
        ok(cli_as("draft", "run", "--sandbox", "none", "--", "sh", "-c", script, cwd=ws))
        for argv in (("draft", "status"), ("review",), ("draft", "status")):
            code, _out, err = cli_as(*argv, cwd=ws)
            assert code == 0 and "internal error" not in err, (kind, argv, err)
        git_dir = draft / ".git"
        left = sorted(p.name for p in git_dir.iterdir() if p.name.startswith("config.strata-"))
        assert left == [], (kind, left)
        config = git_dir / "config"
        assert not config.is_symlink() and config.is_file(), kind
        assert config.read_text().count("hooksPath") == 1, kind
        assert target.read_text() == "host\n"  # the symlink's target was never written
    ok(cli_as("discard", cwd=ws))


def test_a_command_the_sandbox_cannot_see_is_not_found_with_the_way_to_show_it(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    _needs_bwrap()
    tools = tmp_path / "tools" / "bin"  # as an agent installed in the user's own folders
    tools.mkdir(parents=True)
    (tools / "my-agent").write_text("#!/bin/sh\necho edited > by-agent.txt\n")
    (tools / "my-agent").chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("init", cwd=ws))
    env = {"PATH": f"{tools}:{os.environ['PATH']}"}
    code, _, err = run_cli("run", "--draft", "--", "my-agent", cwd=ws, env=env)
    assert code == 127, err
    assert f"--bind-ro {tools.parent}" in err, err
    ok(run_cli("run", "--draft", "--bind-ro", str(tools.parent), "--", "my-agent", cwd=ws, env=env))
    assert "by-agent.txt" in ok(run_cli("review", cwd=ws))
    for sandbox in ("bwrap", "none"):  # a command no one has: 127, never an internal error
        code, _, err = run_cli("draft", "run", "--sandbox", sandbox, "--", "no-such-cmd", cwd=ws)
        assert code == 127 and "command not found: no-such-cmd" in err, err
