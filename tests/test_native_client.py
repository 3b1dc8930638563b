"""The native ``strata`` client (``native/strata.c``): a served command without starting Python.

What a user sees must not depend on which client asked: the native one sends
the watcher the request the Python client (``strata._resident``) sends, in
every locale and with any bytes in names and environment; prints what the
watcher answers byte for byte with its exit code; hands every command the
watcher does not take to the Python command (``strata-py``), which then does
exactly what it always did; and never runs a command twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import strata
from conftest import Person, wait_until

ROOT = Path(__file__).resolve().parent.parent
KEY = "k3y-for-the-test"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The native client, compiled from the source as ``setup.py`` does, beside ``strata-py``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler: the Python launcher is the strata command")
    folder = tmp_path_factory.mktemp("native-bin")
    native = folder / "strata"
    subprocess.run(
        [
            compiler,
            "-O2",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            f'-DSTRATA_VERSION="{strata.__version__}"',
            "-o",
            str(native),
            str(ROOT / "native" / "strata.c"),
        ],
        check=True,
        capture_output=True,
    )
    launcher = (ROOT / "bin" / "strata").read_text(encoding="utf-8").split("\n", 1)[1]
    python = folder / "strata-py"
    python.write_text(f"#!{sys.executable}\n{launcher}", encoding="utf-8")
    python.chmod(0o755)
    folder.chmod(0o755)
    return native


def test_the_installed_strata_command_is_the_native_client() -> None:
    """pip builds it (``setup.py``) wherever a C compiler is found, with the launcher beside it."""
    installed = Path(sys.executable).parent / "strata"
    if not installed.exists():
        pytest.skip("strata is not installed beside this Python")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: pip installed the Python launcher as strata")
    assert installed.read_bytes()[:4] == b"\x7fELF", "setup.py did not build the native client"
    launcher = installed.with_name("strata-py")
    assert launcher.read_bytes().startswith(b"#!") and b"strata._entry" in launcher.read_bytes()
    version = subprocess.run([installed, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout == f"strata {strata.__version__}\n"


# -- a watcher whose answers the test writes -------------------------------------------


class ScriptedWatcher:
    """A socket where a workspace's watcher listens, answering as ``answer`` says.

    It keeps every request it was sent. ``answer(conn, request)`` replies to
    one; by default every request is refused, as a watcher refuses a command
    it does not serve, so the asker runs it itself.
    """

    def __init__(self, repo: Path, answer: Callable[[socket.socket, dict[str, Any]], None]):
        folder = repo / "watch"
        folder.mkdir(exist_ok=True)
        key = folder / "watch.key"
        key.write_text(KEY + "\n", encoding="ascii")
        key.chmod(0o600)
        self.path = folder / "watch.sock"
        self.path.unlink(missing_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(self.path))
        self.server.listen(8)
        self.requests: list[dict[str, Any]] = []
        self.answer = answer
        #: set when the test ends: an answer that holds its connection open waits on it
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                line = _read_line(conn)
                if not line:
                    continue
                request = json.loads(line)
                self.requests.append(request)
                self.answer(conn, request)

    def runs(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("op") == "run"]

    def close(self) -> None:
        if self.server.fileno() == -1:
            return  # closed already
        self.closing.set()
        # shutdown wakes the thread blocked in accept, which then ends; closing first would
        # free the descriptor's number while the thread may still be about to accept on it,
        # and a socket opened later by another test could get that number and its clients
        self.server.shutdown(socket.SHUT_RDWR)
        self.thread.join(10)
        self.server.close()
        self.path.unlink(missing_ok=True)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def refuse(conn: socket.socket, request: dict[str, Any]) -> None:
    conn.sendall(b'{"v": 1, "ok": false, "reason": "not served in this test"}\n')


def send(conn: socket.socket, reply: dict[str, Any]) -> None:
    conn.sendall(json.dumps(reply).encode() + b"\n")


@pytest.fixture
def workspace(run_cli: Any) -> Iterator[Path]:
    """A workspace (no watcher) under a short path: a socket path must stay under 100 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="sn-", dir="/tmp"))
    ws = folder / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    code, _, err = run_cli("init", "--no-snapshot", cwd=ws)
    assert code == 0, err
    code, _, err = run_cli("snapshot", "-m", "base", cwd=ws)
    assert code == 0, err
    yield ws
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def scripted(workspace: Path) -> Iterator[Callable[..., ScriptedWatcher]]:
    made: list[ScriptedWatcher] = []

    def make(answer: Callable[[socket.socket, dict[str, Any]], None] = refuse) -> ScriptedWatcher:
        made.append(ScriptedWatcher(workspace / ".strata", answer))
        return made[-1]

    yield make
    for watcher in made:
        watcher.close()


def _env(run_cli: Any, changes: dict[str, Any]) -> dict[Any, Any]:
    env: dict[Any, Any] = run_cli.env()
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


# -- the request: what the Python client sends, whatever the environment ----------------

#: stands for the folder of locales made for the test (``locales``): this machine has only C
LOCALES = object()


@pytest.fixture(scope="module")
def locales(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of locales for ``LOCPATH``: en_US.UTF-8 and fr_FR.ISO-8859-1."""
    folder = tmp_path_factory.mktemp("locales")
    for name, charmap in (("en_US", "UTF-8"), ("fr_FR", "ISO-8859-1")):
        made = subprocess.run(
            ["localedef", "-i", name, "-f", charmap, str(folder / f"{name}.{charmap}")],
            capture_output=True,
            check=False,
        )
        if not (folder / f"{name}.{charmap}").is_dir():
            pytest.skip(f"cannot make the locale {name}.{charmap}: {made.stderr!r}")
    return folder


ENVIRONMENTS: dict[str, dict[str, Any]] = {
    "a UTF-8 locale": {"LC_ALL": "C.UTF-8"},
    "the C locale by LC_ALL": {"LC_ALL": "C"},
    "no locale variable at all": {"LC_ALL": None, "LANG": None, "LC_CTYPE": None},
    "LANG only": {"LC_ALL": None, "LC_CTYPE": None, "LANG": "C.UTF-8"},
    "a locale that is not installed": {"LC_ALL": None, "LC_CTYPE": None, "LANG": "xx_YY.UTF-8"},
    "LC_ALL naming no installed locale": {"LC_ALL": "xx_YY.UTF-8"},
    "LC_CTYPE over LANG": {"LC_ALL": None, "LANG": "C", "LC_CTYPE": "C.utf8"},
    "bytes that are not UTF-8 in values": {
        "WEIRD": b"\xff\xfe ok \xc3\xa9 \xed\xa0\x80 \xc0\xaf \xf0\x9f\x98\x80 \xf4\x90\x80\x80",
        "CONTROL": 'tab\tnew\nline\x01\x7f "quoted" back\\slash',
        "EMPTY": "",
    },
    "a name that is not UTF-8": {b"N\xe9ME": b"v"},
    "an installed UTF-8 locale": {"LC_ALL": None, "LOCPATH": LOCALES, "LANG": "en_US.UTF-8"},
}


@pytest.mark.parametrize("case", list(ENVIRONMENTS))
def test_the_native_client_sends_what_the_python_client_sends(
    case: str,
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
    request: pytest.FixtureRequest,
) -> None:
    """Refused by the watcher, the native client runs ``strata-py``, whose client asks again.

    The watcher so receives both requests for one command: the two must be
    the same (folder, arguments, environment, umask, encodings, terminal).
    """
    watcher = scripted()
    changes = ENVIRONMENTS[case]
    if changes.get("LOCPATH") is LOCALES:
        changes = {**changes, "LOCPATH": str(request.getfixturevalue("locales"))}
    env = _env(run_cli, changes)
    proc = subprocess.run(
        [client, "status", "--json", "caf\xe9", b"\xe9t\xe9", "--"],
        cwd=workspace,
        env=env,
        capture_output=True,
        umask=0o027,
        check=False,
    )
    assert b"Traceback" not in proc.stderr
    native, python = watcher.runs()  # and then the command ran here (refused by both)
    assert native == python
    assert native["argv"] == ["status", "--json", "caf\xe9", "\udce9t\udce9", "--"]
    assert native["umask"] == 0o027 and native["key"] == KEY


EXECVE = """
import ctypes, os, sys
entries = [e.encode() for e in sys.argv[2:]] + [
    k + b"=" + v for k, v in os.environb.items() if k not in (b"DUP", b"")
]
argv = (ctypes.c_char_p * 3)(os.fsencode(sys.argv[1]), b"status", None)
envp = (ctypes.c_char_p * (len(entries) + 1))(*entries, None)
ctypes.CDLL(None, use_errno=True).execve(argv[0], argv, envp)
sys.exit(f"execve: {os.strerror(ctypes.get_errno())}")
"""


def test_an_environment_python_would_tidy_is_sent_as_python_tidies_it(
    client: Path, workspace: Path, scripted: Callable[..., ScriptedWatcher], run_cli: Any
) -> None:
    """A name given twice (Python keeps the first), an entry with no ``=``, an empty name."""
    watcher = scripted()
    odd = ["DUP=first", "DUP=second", "NO-EQUALS-SIGN", "=empty name"]
    proc = subprocess.run(
        [sys.executable, "-c", EXECVE, str(client), *odd],
        cwd=workspace,
        env=run_cli.env(),
        capture_output=True,
        check=False,
    )
    assert b"execve:" not in proc.stderr
    native, python = watcher.runs()
    assert native == python
    assert native["env"]["DUP"] == "first" and native["env"][""] == "empty name"


def test_in_a_locale_that_is_not_utf8_python_asks_the_watcher(
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
    locales: Path,
) -> None:
    """The native client does not work out other encodings: it leaves the command to Python."""
    watcher = scripted()
    env = _env(run_cli, {"LOCPATH": str(locales), "LC_ALL": "fr_FR.ISO-8859-1"})
    subprocess.run([client, "status"], cwd=workspace, env=env, capture_output=True, check=False)
    (python,) = watcher.runs()
    assert python["fsencoding"] == ["iso8859-1", "surrogateescape"]


def test_a_folder_name_that_is_not_utf8_and_a_terminal_are_sent_as_python_sends_them(
    client: Path, workspace: Path, scripted: Callable[..., ScriptedWatcher], run_cli: Any
) -> None:
    folder = workspace / os.fsdecode(b"d\xe9j\xe0 vu")
    folder.mkdir()
    watcher = scripted()
    leader, follower = os.openpty()
    try:
        subprocess.run(
            [client, "diff"],
            cwd=folder,
            env=run_cli.env(),
            stdout=follower,
            stderr=subprocess.PIPE,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    native, python = watcher.runs()
    assert native == python
    assert native["cwd"] == str(folder) and native["tty"] == [True, False]


# -- the protocol: what the watcher answers ------------------------------------------------

#: the test runs with each client: the native one, and the Python one it hands over to
BOTH_CLIENTS = pytest.mark.parametrize("which", ["native", "python"])
#: and with each form of the command's output: text, and --json
BOTH_FORMS = pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])


def client_env(run_cli: Any, which: str) -> dict[str, str]:
    """The test environment, with the client ``which`` names answering."""
    return {**run_cli.env(), "STRATA_NO_NATIVE": "1" if which == "python" else "0"}


@BOTH_CLIENTS
@pytest.mark.parametrize("wait", [0.3, 0.0])
def test_output_bytes_and_exit_code_are_the_watchers_after_a_wait_for_the_turn(
    which: str,
    wait: float,
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
) -> None:
    """A queued asker waits; then stdout and stderr get each byte the command wrote, in order.

    With no wait, "queued" and "ready" arrive in one read. Both clients are held to it.
    """
    chunks = [[1, "plain\n"], [2, 'caf\xe9 \u00ff\x00 \\ " /\n'], [1, "\t\x7f\x80\n"]]

    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        queued = json.dumps({"v": 1, "ok": True, "queued": True}).encode() + b"\n"
        ready = json.dumps({"v": 1, "ok": True, "ready": True, "pid": 4242}).encode() + b"\n"
        if wait:
            conn.sendall(queued)
            time.sleep(wait)
            conn.sendall(ready)
        else:
            conn.sendall(queued + ready)
        assert json.loads(_read_line(conn)) == {"go": True}
        send(conn, {"v": 1, "ok": True, "done": True, "extra": [{"a": [1.5e3, None]}],
                    "code": 3, "output": chunks})  # fmt: skip

    watcher = scripted(answer)
    env = client_env(run_cli, which)
    proc = subprocess.run(
        [client, "history"], cwd=workspace, env=env, capture_output=True, check=False
    )
    assert proc.returncode == 3
    assert proc.stdout == b"plain\n\t\x7f\x80\n"
    assert proc.stderr == 'caf\xe9 \xff\x00 \\ " /\n'.encode("latin-1")
    assert len(watcher.runs()) == 1  # served: the Python command never ran


def _error_of(stderr: str, as_json: bool) -> tuple[str, str, str | None]:
    """(type, message, hint) of the error a client printed, in either form."""
    if as_json:
        [line] = stderr.splitlines()
        body = json.loads(line)
        assert body["schema"] == 1
        return body["error"]["type"], body["error"]["message"], body["error"]["hint"]
    lines = stderr.splitlines()
    assert lines[0].startswith("error: ")
    hint = lines[1].removeprefix("hint: ") if len(lines) > 1 else None
    return "", lines[0].removeprefix("error: "), hint


@BOTH_FORMS
@BOTH_CLIENTS
def test_a_watcher_that_stops_after_go_is_reported_and_the_command_not_run_again(
    which: str,
    as_json: bool,
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
) -> None:
    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        send(conn, {"v": 1, "ok": True, "ready": True, "pid": 4242})
        _read_line(conn)  # "go": then the watcher dies

    watcher = scripted(answer)
    (workspace / "b.txt").write_text("b\n")
    proc = subprocess.run(
        [client, "snapshot", "-m", "x", *(["--json"] if as_json else [])],
        cwd=workspace,
        env=client_env(run_cli, which),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    kind, message, hint = _error_of(proc.stderr, as_json)
    assert kind == ("WatcherStopped" if as_json else "")
    assert message.startswith("the watcher (pid 4242) stopped while running 'strata snapshot'")
    assert hint == "see 'strata history' and 'strata check'"
    assert len(watcher.runs()) == 1  # never fell back to run it here
    watcher.close()
    history = json.loads(run_cli("history", "--json", cwd=workspace)[1])
    assert [e["rationale"] for e in history] == ["base"]  # nothing recorded twice, or at all


@BOTH_FORMS
@BOTH_CLIENTS
def test_ctrl_c_after_handing_over_names_the_watcher_that_finishes_it(
    which: str,
    as_json: bool,
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
) -> None:
    handed = threading.Event()

    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        send(conn, {"v": 1, "ok": True, "ready": True, "pid": 4242})
        _read_line(conn)
        handed.set()
        watcher.closing.wait(30)  # still running the command when the test ends

    watcher = scripted(answer)
    proc = subprocess.Popen(
        [client, "rewind", "HEAD~1", *(["--json"] if as_json else [])],
        cwd=workspace,
        env=client_env(run_cli, which),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert handed.wait(10)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert out == ""
    kind, message, hint = _error_of(err, as_json)
    assert kind == ("Interrupted" if as_json else "")
    assert message.startswith("interrupted; the watcher (pid 4242) finishes 'strata rewind'")
    assert hint == "see 'strata history' and 'strata status'"


@pytest.mark.parametrize(
    "reply",
    [b"not json\n", b'{"v": 2, "ok": true, "ready": true}\n', b"[1, 2]\n", b'{"v": 1, "ready"'],
)
def test_an_answer_it_cannot_read_before_go_leaves_the_command_to_python(
    reply: bytes,
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
) -> None:
    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        conn.sendall(reply)
        _read_line(conn)  # a client that took it for "ready" would say "go" and wait here

    watcher = scripted(answer)
    code, out, err = _run(client, ["history", "--json"], workspace, run_cli.env())
    assert code == 0, err
    assert [e["rationale"] for e in json.loads(out)] == ["base"]  # run by the Python command
    # the native client's request, then the Python client's; a line never ended is a watcher
    # that did not answer in time: the Python command does not ask it again
    assert len(watcher.runs()) == (1 if not reply.endswith(b"\n") else 2)


# -- against a real watcher ------------------------------------------------------------------


def _run(argv0: Path, args: list[Any], cwd: Path, env: dict[Any, Any]) -> tuple[int, bytes, bytes]:
    proc = subprocess.run([argv0, *args], cwd=cwd, env=env, capture_output=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def watched(workspace: Path, run_cli: Any) -> Iterator[Path]:
    code, _, err = run_cli("watch", "--daemon", "--no-capture", cwd=workspace)
    assert code == 0, err
    yield workspace
    run_cli("watch", "--stop", cwd=workspace)


def _commands_run(run_cli: Any, ws: Path) -> int:
    code, out, err = run_cli("watch", "--status", "--json", cwd=ws)
    assert code == 0, err
    return int(json.loads(out)["commands_run"])


def test_served_commands_print_what_the_python_client_prints(
    client: Path, watched: Path, run_cli: Any
) -> None:
    """Output, errors and exit codes, byte for byte; every one of them run by the watcher."""
    ws = watched
    (ws / "a.txt").write_bytes(b"caf\xe9 \xff\n")
    (ws / os.fsdecode(b"n\xe9w.txt")).write_text("new\n")
    env = {k: v for k, v in run_cli.env().items() if k != "STRATA_NO_DAEMON"}
    commands: list[list[Any]] = [
        ["status"],
        ["status", "--json"],
        ["diff", "HEAD"],
        ["diff", "HEAD", "--stat"],
        ["history", "--limit", "1"],
        ["rewind", "no-such-point"],
        ["rewind", "no-such-point", "--json"],
        ["history", "--no-such-option"],
        ["check"],
        ["bookmark", "list"],
        ["history", "--file", b"n\xe9w.txt"],
    ]
    before = _commands_run(run_cli, ws)
    for args in commands:
        native = _run(client, args, ws, env)
        python = _run(client, args, ws, {**env, "STRATA_NO_NATIVE": "1"})
        assert native == python, args
        assert b"Traceback" not in native[2]
    assert native[0] == 0
    assert _commands_run(run_cli, ws) == before + 2 * len(commands)  # none ran in the client


def test_a_snapshot_through_the_native_client_is_recorded_once(
    client: Path, watched: Path, run_cli: Any
) -> None:
    ws = watched
    env = {k: v for k, v in run_cli.env().items() if k != "STRATA_NO_DAEMON"}
    before = _commands_run(run_cli, ws)
    (ws / "b.txt").write_text("b\n")
    code, out, err = _run(client, ["snapshot", "-m", "by the native client", "--json"], ws, env)
    assert code == 0, err
    assert json.loads(out)["changed_paths"] == ["b.txt"]
    assert _commands_run(run_cli, ws) == before + 1
    history = json.loads(run_cli("history", "--json", cwd=ws)[1])
    assert [e["rationale"] for e in history] == ["by the native client", "base"]


def test_what_the_watcher_does_not_serve_runs_in_python(
    client: Path, watched: Path, run_cli: Any, tmp_path: Path
) -> None:
    ws = watched
    env = {k: v for k, v in run_cli.env().items() if k != "STRATA_NO_DAEMON"}
    before = _commands_run(run_cli, ws)
    code, out, _ = _run(client, ["--version"], ws, env)
    assert (code, out) == (0, f"strata {strata.__version__}\n".encode())
    code, out, _ = _run(client, ["status", "--help"], ws, env)
    assert code == 0 and out.startswith(b"Usage: strata status")
    code, out, err = _run(client, ["run", "--", "sh", "-c", "echo ran > r.txt"], ws, env)
    assert code == 0, err
    assert (ws / "r.txt").read_text() == "ran\n"
    code, out, _ = _run(client, [], ws, env)
    assert code == 0 and b"Usage: strata" in out
    assert _commands_run(run_cli, ws) == before  # the watcher ran none of these itself
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    native = _run(client, ["status"], outside, env)
    assert native == _run(client, ["status"], outside, {**env, "STRATA_NO_NATIVE": "1"})
    assert native[0] == 1 and native[2].startswith(b"error: not a strata workspace")


def test_another_user_is_not_served_and_gets_what_the_python_client_gives(
    client: Path, watched: Path, run_cli: Any, unprivileged: Person
) -> None:
    """The watcher's key is its owner's alone: another user's command is never handed over."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as another user")
    ws = watched
    for parent in [ws, *ws.parents]:
        if parent == Path("/tmp"):
            break
        parent.chmod(parent.stat().st_mode | 0o005)  # the workspace readable by the other user
    env = {k: v for k, v in run_cli.env().items() if k != "STRATA_NO_DAEMON"}
    env["HOME"] = "/tmp"
    before = _commands_run(run_cli, ws)
    native = unprivileged.run([str(client), "status"], cwd=ws, env=env)
    python = unprivileged.run([str(client), "status"], cwd=ws, env={**env, "STRATA_NO_NATIVE": "1"})
    assert (native.returncode, native.stdout, native.stderr) == (
        python.returncode,
        python.stdout,
        python.stderr,
    )
    assert "Traceback" not in native.stderr
    assert _commands_run(run_cli, ws) == before


def test_a_large_answer_is_printed_whole(client: Path, watched: Path, run_cli: Any) -> None:
    """A diff of megabytes arrives in many reads: every byte is printed, once."""
    ws = watched
    (ws / "big.txt").write_text("".join(f"line {i} caf\xe9\n" for i in range(200_000)))
    env = {k: v for k, v in run_cli.env().items() if k != "STRATA_NO_DAEMON"}
    native = _run(client, ["diff", "HEAD"], ws, env)
    python = _run(client, ["diff", "HEAD"], ws, {**env, "STRATA_NO_NATIVE": "1"})
    assert native[0] == 0, native[2]
    assert len(native[1]) > 3_000_000
    assert native == python
    assert native[1].count("line 199999 caf\xe9\n".encode()) == 1


def test_a_watcher_that_does_not_answer_is_waited_for_once(
    client: Path, workspace: Path, scripted: Callable[..., ScriptedWatcher], run_cli: Any
) -> None:
    """After its wait the native client leaves the command to Python, which does not wait again."""

    stuck = threading.Event()

    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        if request.get("op") == "run":
            stuck.wait(30)  # stuck past the client's 2 s, until the command has ended

    watcher = scripted(answer)
    code, out, err = _run(client, ["history", "--json"], workspace, run_cli.env())
    assert code == 0, err
    assert [e["rationale"] for e in json.loads(out)] == ["base"]  # run by the Python command
    stuck.set()
    # the watcher takes connections in turn: once a probe sent now is read, whatever the
    # command sent meanwhile has been read before it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(str(watcher.path))
        probe.sendall(b'{"op": "probe"}\n')
        wait_until(lambda: any(r.get("op") == "probe" for r in watcher.requests))
    # asked once, by the native client
    assert [r.get("op") for r in watcher.requests] == ["run", "probe"]


def test_a_caller_that_ignores_ctrl_c_keeps_ignoring_it(
    client: Path, workspace: Path, scripted: Callable[..., ScriptedWatcher], run_cli: Any
) -> None:
    handed = threading.Event()

    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        send(conn, {"v": 1, "ok": True, "ready": True, "pid": 4242})
        _read_line(conn)
        handed.set()
        time.sleep(1)
        send(conn, {"v": 1, "ok": True, "done": True, "code": 0, "output": [[1, "done\n"]]})

    scripted(answer)
    proc = subprocess.Popen(
        ["sh", "-c", 'trap "" INT; exec "$0" history', str(client)],
        cwd=workspace,
        env=run_cli.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert handed.wait(10)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert (proc.returncode, out, err) == (0, b"done\n", b"")


def test_without_proc_the_python_command_is_found_beside_it(client: Path) -> None:
    """In a container with no /proc the client finds strata-py by its own path, or on PATH."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    base = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/proc"]
    want = f"strata {strata.__version__}\n"
    for argv in (
        [*base, str(client), "--version"],
        [*base, "--setenv", "PATH", f"{client.parent}:/usr/bin:/bin", "strata", "--version"],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if "Creating new namespace failed" in proc.stderr:
            pytest.skip("no user namespaces here")
        assert (proc.returncode, proc.stdout) == (0, want), proc.stderr


def test_a_client_copied_away_from_strata_py_says_what_is_missing(
    client: Path, tmp_path: Path
) -> None:
    alone = tmp_path / "alone" / "strata"
    alone.parent.mkdir()
    shutil.copy2(client, alone)
    proc = subprocess.run([alone, "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    first, hint = proc.stderr.splitlines()
    assert first.startswith(f"error: cannot start {alone.parent}/strata-py")
    assert hint.startswith("hint: this strata is the native client; it runs strata-py")


# -- an agent's hook: its message on stdin, handed over as --payload ----------------------


def _hook_message(workspace: Path) -> str:
    return json.dumps(
        {
            "hook_event_name": "PostToolUse",
            "session_id": "s-native",
            "cwd": str(workspace),
            "tool_name": "Bash",
            "tool_input": {"command": "echo caf\u00e9 > a.txt"},
        },
        ensure_ascii=False,
    )


def test_the_native_client_hands_a_hooks_message_to_the_watcher_without_python(
    client: Path,
    workspace: Path,
    scripted: Callable[..., ScriptedWatcher],
    run_cli: Any,
    tmp_path: Path,
) -> None:
    """No strata-py beside it: served whole, the hook never starts Python (about 13 ms)."""
    alone = tmp_path / "alone" / "strata"
    alone.parent.mkdir()
    shutil.copy2(client, alone)

    def answer(conn: socket.socket, request: dict[str, Any]) -> None:
        send(conn, {"v": 1, "ok": True, "ready": True, "pid": 4242})
        assert json.loads(_read_line(conn)) == {"go": True}
        send(conn, {"v": 1, "ok": True, "done": True, "code": 0, "output": [[1, "Recorded\n"]]})

    watcher = scripted(answer)
    message = _hook_message(workspace)
    proc = subprocess.run(
        [alone, "hook", "claude-code", "--strict"],
        input=message.encode(),
        cwd=workspace,
        env=run_cli.env(),
        capture_output=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, b"Recorded\n"), proc.stderr
    (request,) = watcher.runs()
    assert request["argv"] == ["hook", "claude-code", "--strict", f"--payload={message}"]
    assert request["cwd"] == str(workspace)


def test_a_hook_the_watcher_refuses_is_run_by_python_with_its_message_on_stdin(
    client: Path, workspace: Path, scripted: Callable[..., ScriptedWatcher], run_cli: Any
) -> None:
    """The message the native client read is on strata-py's stdin again: recorded there."""
    watcher = scripted()  # refuses everything
    (workspace / "a.txt").write_text("café\n")
    proc = subprocess.run(
        [client, "hook", "claude-code"],
        input=_hook_message(workspace),
        cwd=workspace,
        env=run_cli.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Recorded" in proc.stdout
    assert len(watcher.runs()) == 2  # asked by each client, refused by both
    code, out, err = run_cli("history", "--json", "--limit", "1", cwd=workspace)
    assert code == 0, err
    assert json.loads(out)[0]["author"] == {"name": "s-native", "kind": "agent"}
