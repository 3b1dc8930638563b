"""Runs in the Draft with the real bubblewrap sandbox, through ``strata draft run``.

A hostile command writes by relative and absolute path, deletes a file,
writes to ``/tmp``, ``$HOME`` and the repository folder, connects to
``127.0.0.1`` and to a host Unix socket and prints a host secret. Published,
the real ``/tmp``, the real home and the repository stay untouched, neither
socket is reached, the secret is not seen; review lists exactly the Draft's
changes and publish makes Published byte-identical to the reviewed Draft.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner

PROBE = r"""
import json, os, socket, sys
ws, store, port, sock_path, token = sys.argv[1:6]
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = f"refused: {exc.strerror}"
def write(path):
    with open(path, "w") as f:
        f.write("written in the sandbox\n")
attempt("relative", lambda: write("rel.txt"))
attempt("absolute", lambda: write(os.path.join(ws, "abs.txt")))
attempt("delete", lambda: os.unlink("gone.txt"))
attempt("tmp", lambda: write(f"/tmp/probe-{token}"))
attempt("home", lambda: write(os.path.join(os.environ.get("HOME", "/"), f"probe-{token}")))
attempt("store", lambda: write(os.path.join(store, f"probe-{token}")))
def tcp():
    with socket.create_connection(("127.0.0.1", int(port)), timeout=2) as s:
        s.sendall(b"hello")
attempt("tcp", tcp)
def unix():
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(sock_path)
        s.sendall(b"hello")
attempt("unix", unix)
out["secret"] = os.environ.get("STRATA_TEST_SECRET")
out["cwd"] = os.getcwd()
print(json.dumps(out))
"""


class Listener:
    """A host server that counts the connections it accepts."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.accepted = 0
        sock.settimeout(0.2)
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listeners(tmp_path: Path) -> Iterator[tuple[Listener, Listener, Path]]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    path = tmp_path / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(path))
    unix.listen()
    a, b = Listener(tcp), Listener(unix)
    yield a, b, path
    a.close()
    b.close()


@pytest.mark.parametrize("entry", [("run", "--draft"), ("draft", "run")])
def test_a_hostile_command_in_the_sandbox_touches_nothing_of_the_host(
    entry: tuple[str, str],
    tmp_path: Path,
    run_cli: CliRunner,
    manifest: Callable[..., dict[str, Any]],
    listeners: tuple[Listener, Listener, Path],
) -> None:
    from strata.sandbox.bwrap import sandbox_problem

    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_problem()}")
    tcp, unix, sock_path = listeners
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("kept\n")
    (ws / "gone.txt").write_text("to be deleted\n")
    (ws / "probe.py").write_text(PROBE)
    store = tmp_path / "store"
    code, _, err = run_cli("init", "--store", store, cwd=ws)
    assert code == 0, err
    assert run_cli("snapshot", cwd=ws)[0] == 0
    published = manifest(ws)
    home = run_cli.home
    home_before = manifest(home)
    token = uuid.uuid4().hex
    store_files_before = {p.name for p in store.rglob("*")}

    code, out, err = run_cli(
        *entry, "--", "python3", "probe.py", ws, store,
        str(tcp.sock.getsockname()[1]), sock_path, token,
        cwd=ws, env={"STRATA_TEST_SECRET": "hunter2"},
    )  # fmt: skip
    assert code == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["relative"] == seen["absolute"] == seen["delete"] == "ok"
    assert seen["cwd"] == str(ws)  # the Draft is at the workspace's own path
    assert seen["tcp"].startswith("refused") and seen["unix"].startswith("refused")
    assert seen["secret"] is None
    assert "hunter2" not in out
    assert tcp.accepted == 0 and unix.accepted == 0
    assert manifest(ws) == published
    assert not Path(f"/tmp/probe-{token}").exists()
    assert manifest(home) == home_before
    assert not any(token in p.name for p in store.rglob("*"))
    assert store_files_before <= {p.name for p in store.rglob("*")}

    review = json.loads(run_cli("review", "--json", cwd=ws)[1])
    changes = {f["path"]: f["status"] for f in review["files"]}
    assert changes == {"rel.txt": "added", "abs.txt": "added", "gone.txt": "deleted"}
    draft_files = store / "draft" / "files"
    reviewed = manifest(draft_files)
    code, _, err = run_cli("publish", "--expect", review["draft_snapshot_id"], cwd=ws)
    assert code == 0, err
    assert manifest(ws) == reviewed


def test_the_sandbox_shows_ignored_folders_read_only(tmp_path: Path, run_cli: CliRunner) -> None:
    from strata.sandbox.bwrap import sandbox_problem

    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_problem()}")
    ws = tmp_path / "ws"
    (ws / ".venv").mkdir(parents=True)
    (ws / ".venv" / "tool").write_text("a tool\n")
    (ws / "web" / "node_modules" / "pkg").mkdir(parents=True)
    (ws / "web" / "node_modules" / "pkg" / "index.js").write_text("module\n")
    (ws / "web" / "app.js").write_text("app\n")
    assert run_cli("init", cwd=ws)[0] == 0
    script = (
        "cat .venv/tool web/node_modules/pkg/index.js;"
        "echo x > .venv/tool || echo refused; echo x > web/node_modules/new || echo refused"
    )
    code, out, err = run_cli("draft", "run", "--", "sh", "-c", script, cwd=ws)
    assert code == 0, err
    assert out.splitlines() == ["a tool", "module", "refused", "refused"]
    assert (ws / ".venv" / "tool").read_text() == "a tool\n"
    assert not (ws / "web" / "node_modules" / "new").exists()
    draft = ws / ".strata" / "draft" / "files"
    # ignored folders are not copied, and the mount points made for them are removed
    assert sorted(p.name for p in draft.iterdir()) == ["web"]
    assert sorted(p.name for p in (draft / "web").iterdir()) == ["app.js"]
