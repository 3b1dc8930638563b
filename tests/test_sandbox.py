"""The OS sandbox, with the real bubblewrap: what a sandboxed command can and cannot reach.

Each test runs a small Python script in the sandbox (the system's
``/usr/bin/python3``, which the sandbox shows read-only) through
``sandbox_command`` and ``run_command``, then looks at the host.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import conftest
from strata.errors import SandboxPolicyError
from strata.runs.process import run_command
from strata.sandbox.bwrap import (
    SYSTEM_PATHS,
    SandboxSpec,
    missing_mount_points,
    sandbox_command,
    sandbox_home,
    sandbox_problem,
    unreachable_command,
    unsandboxed_environment,
)

pytestmark = pytest.mark.sandbox

PYTHON = "/usr/bin/python3"  # the system's: visible in the sandbox through /usr
DEADLINE_S = 60  # how long a test waits for a sandboxed command before failing


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = sandbox_problem()
    if problem is not None:
        # scripts/dev installs bubblewrap: missing means a broken set-up. A machine
        # that forbids user namespaces cannot run these tests, except in CI.
        if os.environ.get("CI") or "not installed" in problem:
            pytest.fail(f"the sandbox tests need bubblewrap: {problem}")
        pytest.skip(problem)
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is needed inside the sandbox")


@dataclass
class Layout:
    """A workspace (Published), its repository, a Draft and a fake home on the host."""

    root: Path
    published: Path
    repository: Path
    draft: Path
    home: Path

    def spec(self, **changes: object) -> SandboxSpec:
        spec = SandboxSpec(
            workspace=self.published,
            source=self.draft,
            cwd=self.published,
            repository=self.repository,
        )
        return replace(spec, **changes)  # type: ignore[arg-type]

    def environ(self, **extra: str) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.home), **extra}


def _fill(folder: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _tree(folder: Path, *, skip: str = "") -> dict[str, bytes]:
    """Every file below ``folder`` (but those in ``skip``) with its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and not path.is_symlink()
        and not (skip and path.relative_to(folder).parts[0] == skip)
    }


def _make_layout(root: Path, *, repository_inside: bool) -> Layout:
    published = root / "project"
    _fill(published, {"keep.txt": "published keep\n", "gone.txt": "published gone\n"})
    repository = published / ".strata" if repository_inside else root / "repository"
    _fill(repository, {"ledger.db": "the ledger\n", "objects/ab/cdef": "an object\n"})
    draft = repository / "draft"
    _fill(draft, {"keep.txt": "draft keep\n", "gone.txt": "draft gone\n", "sub/x.txt": "x\n"})
    home = root / "home"
    _fill(home, {".ssh/id_ed25519": "host private key\n"})
    return Layout(root, published, repository, draft, home)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return _make_layout(tmp_path, repository_inside=True)


@dataclass
class Result:
    exit_code: int
    report: dict[str, object]
    """What the script inside saw, as it wrote it to stdout (JSON)."""


def run_in_sandbox(
    spec: SandboxSpec,
    script: str,
    capfd: pytest.CaptureFixture[str],
    *,
    environ: Mapping[str, str],
) -> Result:
    """Run :data:`PROBE` + ``script`` with the system Python in the sandbox.

    The script prints one JSON object: what it saw.
    """
    code = PROBE + textwrap.dedent(script)
    argv, env = sandbox_command(spec, [PYTHON, "-c", code], environ=environ)
    capfd.readouterr()
    outcome = run_command(argv, env=env, new_session=True)
    out, err = capfd.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {}
    assert lines or outcome.exit_code != 0, f"no report; stderr: {err}"
    return Result(outcome.exit_code, report)


PROBE = """
import json, os, socket, sys
report = {}
def attempt(name, action):
    try:
        result = action()
        report[name] = "ok" if result is None else result
    except OSError as exc:
        report[name] = type(exc).__name__ + ": " + (exc.strerror or str(exc))
"""


# -- files -----------------------------------------------------------------------------


def test_writes_and_deletes_land_in_the_draft_and_never_in_published(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    published_before = _tree(layout.published, skip=".strata")
    script = f"""
    open("new.txt", "w").write("by relative path\\n")
    open({str(layout.published / "sub" / "abs.txt")!r}, "w").write("by absolute path\\n")
    os.remove("gone.txt")
    report["keep"] = open("keep.txt").read()
    report["cwd"] = os.getcwd()
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(), script, capfd, environ=layout.environ())
    assert result.exit_code == 0
    assert result.report["cwd"] == str(layout.published)
    assert result.report["keep"] == "draft keep\n"  # the Draft's files, at the workspace's path
    assert (layout.draft / "new.txt").read_text() == "by relative path\n"
    assert (layout.draft / "sub" / "abs.txt").read_text() == "by absolute path\n"
    assert not (layout.draft / "gone.txt").exists()
    assert _tree(layout.published, skip=".strata") == published_before


def test_only_system_folders_and_private_folders_are_visible(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    script = """
    report["root"] = sorted(os.listdir("/"))
    attempt("write_usr", lambda: open("/usr/strata-probe", "w").close())
    attempt("write_root", lambda: open("/strata-probe", "w").close())
    attempt("work", lambda: os.listdir("/work"))
    attempt("var", lambda: os.listdir("/var"))
    attempt("sys", lambda: os.listdir("/sys"))
    commands = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            attempt("cmdline", lambda: commands.append(open(f"/proc/{pid}/cmdline").read()))
    report["commands"] = commands
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(), script, capfd, environ=layout.environ())
    system = {p.lstrip("/") for p in SYSTEM_PATHS if os.path.lexists(p)}
    assert set(result.report["root"]) == system | {"proc", "dev", "tmp", "run"}  # type: ignore[arg-type]
    assert str(result.report["write_usr"]).startswith("OSError: Read-only")
    assert str(result.report["write_root"]).startswith("OSError: Read-only")
    for host_only in ("work", "var", "sys"):
        assert str(result.report[host_only]).startswith("FileNotFoundError")
    # the host's processes (this test among them) are invisible: bwrap's reaper and the script
    commands = result.report["commands"]
    assert isinstance(commands, list)
    programs = sorted(os.path.basename(command.split("\0")[0]) for command in commands)
    assert programs == ["bwrap", "python3"]


def test_tmp_and_home_are_private_and_empty(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    name = f"strata-sandbox-{uuid.uuid4().hex}"
    home_before = _tree(layout.home)
    script = f"""
    home = os.environ["HOME"]
    report["home"] = home
    report["tmpdir"] = os.environ["TMPDIR"]
    report["home_entries"] = os.listdir(home)
    attempt("read_key", lambda: open(home + "/.ssh/id_ed25519").read())
    open("/tmp/{name}", "w").write("tmp")
    open(home + "/{name}", "w").write("home")
    report["tmp_entries"] = os.listdir("/tmp")
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(), script, capfd, environ=layout.environ())
    assert result.exit_code == 0
    assert result.report["home"] == str(layout.home)  # the usual path, but an empty folder
    assert result.report["tmpdir"] == "/tmp"
    assert result.report["home_entries"] == []
    assert str(result.report["read_key"]).startswith("FileNotFoundError")
    # only the way down to the workspace (which lies under /tmp here) and the new file
    assert sorted(result.report["tmp_entries"]) == sorted(  # type: ignore[type-var]
        [layout.root.parts[2], name]
    )
    assert not Path("/tmp", name).exists()
    assert not (Path.home() / name).exists()
    assert _tree(layout.home) == home_before


def test_a_workspace_inside_the_home_folder_stays_visible(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    # HOME holds the workspace (as ~/project usually does): the private home is
    # mounted first, then the Draft on top of it
    environ = layout.environ(HOME=str(layout.root))
    script = f"""
    report["home"] = os.environ["HOME"]
    report["home_entries"] = sorted(os.listdir(os.environ["HOME"]))
    report["keep"] = open({str(layout.published / "keep.txt")!r}).read()
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(), script, capfd, environ=environ)
    assert result.report["home"] == str(layout.root)
    assert result.report["home_entries"] == ["project"]  # not home/, not the host's files
    assert result.report["keep"] == "draft keep\n"


@pytest.mark.parametrize("repository_inside", [True, False], ids=["inside", "sibling"])
def test_the_repository_cannot_be_read_or_written(
    tmp_path: Path, repository_inside: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    layout = _make_layout(tmp_path, repository_inside=repository_inside)
    repository_before = _tree(layout.repository, skip="draft")
    repo = str(layout.repository)
    script = f"""
    attempt("read", lambda: open({repo!r} + "/ledger.db").read())
    attempt("list", lambda: os.listdir({repo!r}))
    attempt("draft", lambda: os.listdir({str(layout.draft)!r}))
    attempt("write", lambda: open({repo!r} + "/ledger.db", "w").write("overwritten"))
    os.makedirs({repo!r} + "/objects", exist_ok=True)
    open({repo!r} + "/objects/planted", "w").write("planted")
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(), script, capfd, environ=layout.environ())
    assert result.exit_code == 0
    for attempt in ("read", "list", "draft", "write"):
        assert str(result.report[attempt]).startswith("FileNotFoundError"), attempt
    assert _tree(layout.repository, skip="draft") == repository_before
    if repository_inside:  # the write went to the Draft, at the workspace's path
        assert (layout.draft / ".strata" / "objects" / "planted").read_text() == "planted"


# -- network and sockets ---------------------------------------------------------------


@pytest.fixture
def tcp_server() -> Iterator[tuple[int, list[bytes]]]:
    """A host server on 127.0.0.1 that records what each connection sends."""
    received: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(DEADLINE_S)

    def serve() -> None:
        with server:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    received.append(conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept()
    server.close()
    thread.join(DEADLINE_S)


@pytest.mark.parametrize("net", [False, True], ids=["deny", "allow"])
def test_the_host_network_is_reachable_only_with_net_allow(
    layout: Layout,
    tcp_server: tuple[int, list[bytes]],
    net: bool,
    capfd: pytest.CaptureFixture[str],
) -> None:
    port, received = tcp_server
    script = f"""
    def connect():
        with socket.create_connection(("127.0.0.1", {port}), timeout=10) as s:
            s.sendall(b"from the sandbox")
    attempt("tcp", connect)
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(net=net), script, capfd, environ=layout.environ())
    if net:
        assert result.report["tcp"] == "ok"
        deadline = time.monotonic() + DEADLINE_S
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
        assert received == [b"from the sandbox"]
    else:
        assert str(result.report["tcp"]).startswith("ConnectionRefusedError")
        assert received == []


def test_host_unix_sockets_are_unreachable(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    path = layout.root / "agent.sock"
    abstract = f"\0strata-test-{uuid.uuid4().hex}"
    servers = []
    for address in (str(path), abstract):
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        server.listen()
        servers.append(server)
    try:
        # the host can connect to both: the sockets are real
        for address in (str(path), abstract):
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(address)
        script = f"""
        def connect(address):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(address)
        attempt("path", lambda: connect({str(path)!r}))
        attempt("abstract", lambda: connect({abstract!r}))
        print(json.dumps(report))
        """
        result = run_in_sandbox(layout.spec(), script, capfd, environ=layout.environ())
    finally:
        for server in servers:
            server.close()
    assert str(result.report["path"]).startswith("FileNotFoundError")
    assert str(result.report["abstract"]).startswith("ConnectionRefusedError")


# -- environment -----------------------------------------------------------------------


@pytest.mark.parametrize("passed", [False, True], ids=["cleared", "env-name"])
def test_host_secrets_in_the_environment_stay_outside(
    layout: Layout, passed: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    environ = layout.environ(
        SECRET=secret,
        SSH_AUTH_SOCK="/tmp/ssh-agent.sock",
        DISPLAY=":0",
        LC_ALL="C.UTF-8",
        TERM="xterm-256color",
    )
    spec = layout.spec(env_names=("SECRET",) if passed else ())
    script = f"""
    report["env"] = dict(os.environ)
    found = []
    for pid in os.listdir("/proc"):
        try:
            if {secret!r}.encode() in open("/proc/" + pid + "/environ", "rb").read():
                found.append(pid)
        except OSError:
            pass
    report["found_in_proc"] = found
    print(json.dumps(report))
    """
    result = run_in_sandbox(spec, script, capfd, environ=environ)
    env = result.report["env"]
    assert isinstance(env, dict)
    assert "SSH_AUTH_SOCK" not in env
    assert "DISPLAY" not in env
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["TERM"] == "xterm-256color"
    assert env["STRATA_NO_DAEMON"] == "1"  # a strata command there starts no watcher
    if passed:
        assert env["SECRET"] == secret
    else:
        assert "SECRET" not in env
        assert result.report["found_in_proc"] == []


# -- read-only binds -------------------------------------------------------------------


def test_bind_ro_is_readable_but_not_writable_even_by_remounting(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    config = layout.root / "agent-config"
    _fill(config, {"settings.json": '{"model": "m"}'})
    before = _tree(config)
    script = f"""
    import subprocess
    config = {str(config)!r}
    report["read"] = open(config + "/settings.json").read()
    attempt("write", lambda: open(config + "/settings.json", "w").write("changed"))
    attempt("create", lambda: open(config + "/new", "w").close())
    report["remount"] = subprocess.run(
        ["mount", "-o", "remount,bind,rw", config], capture_output=True
    ).returncode
    attempt("write_after_remount", lambda: open(config + "/settings.json", "w").write("x"))
    report["new_user_namespace"] = subprocess.run(
        ["unshare", "--user", "--map-root-user", "true"], capture_output=True
    ).returncode
    print(json.dumps(report))
    """
    result = run_in_sandbox(layout.spec(bind_ro=(config,)), script, capfd, environ=layout.environ())
    assert result.report["read"] == '{"model": "m"}'
    for attempt in ("write", "create", "write_after_remount"):
        assert str(result.report[attempt]).startswith("OSError: Read-only"), attempt
    assert result.report["remount"] != 0
    assert result.report["new_user_namespace"] != 0  # no way to regain capabilities
    assert _tree(config) == before


def test_readonly_bind_shows_an_ignored_folder_read_only(
    layout: Layout, capfd: pytest.CaptureFixture[str]
) -> None:
    venv = layout.published / ".venv"
    _fill(venv, {"bin/tool": "#!/bin/sh\n", "lib/site.py": "X = 1\n"})
    before = _tree(venv)
    inside = layout.published / ".venv"
    script = f"""
    report["read"] = open({str(inside / "lib" / "site.py")!r}).read()
    attempt("write", lambda: open({str(inside / "lib" / "site.py")!r}, "w").write("X = 2"))
    attempt("delete", lambda: os.remove({str(inside / "bin" / "tool")!r}))
    print(json.dumps(report))
    """
    spec = layout.spec(readonly=((venv, inside),))
    assert missing_mount_points(spec) == [layout.draft / ".venv"]
    result = run_in_sandbox(spec, script, capfd, environ=layout.environ())
    assert result.report["read"] == "X = 1\n"
    assert str(result.report["write"]).startswith("OSError: Read-only")
    assert str(result.report["delete"]).startswith("OSError: Read-only")
    assert _tree(venv) == before
    # bubblewrap left the mount point in the Draft, empty, as missing_mount_points said
    assert list((layout.draft / ".venv").iterdir()) == []
    assert missing_mount_points(spec) == []


# -- exit codes and signals ------------------------------------------------------------


@pytest.mark.parametrize(("script", "code"), [("exit 3", 3), ("kill -KILL $$", 128 + 9)])
def test_exit_codes_pass_through(layout: Layout, script: str, code: int) -> None:
    argv, env = sandbox_command(layout.spec(), ["sh", "-c", script], environ=layout.environ())
    assert run_command(argv, env=env, new_session=True).exit_code == code


RUNNER = """
import json, os, sys
from pathlib import Path
from strata.runs.process import run_command
from strata.sandbox.bwrap import SandboxSpec, sandbox_command
spec = json.loads(sys.argv[1])
spec = SandboxSpec(workspace=Path(spec["workspace"]), source=Path(spec["source"]),
                   cwd=Path(spec["workspace"]))
argv, env = sandbox_command(spec, sys.argv[2:], environ=os.environ)
outcome = run_command(argv, env=env, new_session=True)
print(json.dumps({"exit_code": outcome.exit_code, "interrupted": outcome.interrupted}))
sys.exit(outcome.exit_code)
"""

HANDLER = """
import signal, sys, time
def on_signal(signum, frame):
    open("got", "w").write(signal.Signals(signum).name)
    sys.exit(7)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, on_signal)
open("ready", "w").close()
time.sleep(600)
"""


def _start_runner(
    layout: Layout, command: list[str], *, stdin: int | None = None
) -> subprocess.Popen[bytes]:
    spec = json.dumps({"workspace": str(layout.published), "source": str(layout.draft)})
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, spec, *command],
        stdin=stdin,
        stdout=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "HOME": str(layout.home)},
    )


def test_the_command_keeps_the_callers_standard_streams(layout: Layout) -> None:
    runner = _start_runner(
        layout, ["sh", "-c", 'read line; echo "got $line"; exit 5'], stdin=subprocess.PIPE
    )
    out, _ = runner.communicate(b"a question\n", timeout=DEADLINE_S)
    lines = out.decode().splitlines()
    assert lines[0] == "got a question"
    assert json.loads(lines[1]) == {"exit_code": 5, "interrupted": False}


def _wait_for(path: Path, runner: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if runner.poll() is not None or time.monotonic() > deadline:
            runner.kill()
            pytest.fail(f"the sandboxed command never started (runner: {runner.returncode})")
        time.sleep(0.01)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_runner_reaches_the_sandboxed_command(
    layout: Layout, signum: signal.Signals
) -> None:
    runner = _start_runner(layout, [PYTHON, "-c", HANDLER])
    _wait_for(layout.draft / "ready", runner)
    runner.send_signal(signum)
    out, _ = runner.communicate(timeout=DEADLINE_S)
    assert (layout.draft / "got").read_text() == signum.name
    assert json.loads(out) == {"exit_code": 7, "interrupted": True}
    assert runner.returncode == 7


def test_the_sandboxed_command_dies_with_the_runner(layout: Layout) -> None:
    # the command holds the runner's stdout: the pipe ends only when every
    # process in the sandbox is gone
    runner = _start_runner(layout, ["sh", "-c", ": > ready; sleep 600 & sleep 600"])
    _wait_for(layout.draft / "ready", runner)
    runner.kill()
    try:
        out, _ = runner.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail("the sandboxed command outlived its runner")
    assert out == b""


# -- the policy ------------------------------------------------------------------------


def test_policy_refuses_dangerous_or_malformed_paths(layout: Layout, tmp_path: Path) -> None:
    environ = layout.environ()
    (layout.draft / "link").symlink_to(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sibling = _make_layout(tmp_path / "sibling", repository_inside=False)
    cases = {
        "/ would expose": layout.spec(bind_ro=(Path("/"),)),
        "lies in the workspace": layout.spec(bind_ro=(layout.published / "keep.txt",)),
        "would cover": layout.spec(bind_ro=(layout.home,)),  # the private home
        "would expose the repository": sibling.spec(bind_ro=(sibling.repository / "objects",)),
        f"would cover {re.escape(str(layout.published))},": layout.spec(
            repository=None, bind_ro=(layout.root,)
        ),
        "keeps private": layout.spec(bind_ro=(Path("/run"),)),
        "has its own 'proc'": layout.spec(bind_ro=(Path("/proc/self/fd"),)),
        "not an absolute path": layout.spec(bind_ro=(Path("relative"),)),
        "contains '..'": layout.spec(bind_ro=(layout.root / "home" / ".." / "project",)),
        "does not exist": layout.spec(bind_ro=(layout.root / "missing",)),
        "outside the workspace": layout.spec(cwd=layout.root),
        "does not exist in the Draft": layout.spec(cwd=layout.published / "nowhere"),
        "is a symlink in the Draft": layout.spec(
            readonly=((elsewhere, layout.published / "link" / "x"),)
        ),
        "must lie below the workspace": layout.spec(readonly=((elsewhere, layout.root / "v"),)),
        "covers a system folder": layout.spec(workspace=Path("/"), cwd=Path("/")),
        "contains the repository": layout.spec(source=layout.published),
        "not an environment variable name": layout.spec(env_names=("A=B",)),
    }
    for expected, spec in cases.items():
        with pytest.raises(SandboxPolicyError, match=expected):
            sandbox_command(spec, ["true"], environ=environ)
    assert not (tmp_path / "x").exists()  # nothing was created through the symlink


def test_the_private_home_keeps_the_users_path_unless_it_would_hide_the_workspace(
    layout: Layout,
) -> None:
    spec = layout.spec()
    assert sandbox_home(spec, environ={"HOME": str(layout.home)}) == layout.home
    assert sandbox_home(spec, environ={"HOME": str(layout.root)}) == layout.root  # holds it
    for unusable in (str(layout.published), str(layout.published / "sub"), "/", "/usr", "", "x"):
        assert sandbox_home(spec, environ={"HOME": unusable}) == Path("/run/home"), unusable
    assert sandbox_home(spec, environ={}) == Path("/run/home")


def test_a_program_the_sandbox_does_not_show_is_named_with_the_folder_to_expose(
    layout: Layout,
) -> None:
    tools = layout.root / "tools"  # like ~/.local/bin: on the host's PATH only
    _fill(tools, {"agent": "#!/bin/sh\necho agent\n"})
    (tools / "agent").chmod(0o755)
    _fill(layout.draft, {"bin/build": "#!/bin/sh\necho build\n"})
    (layout.draft / "bin" / "build").chmod(0o755)
    environ = layout.environ(PATH=f"{tools}:/usr/bin:/bin")
    spec = layout.spec()
    problem = unreachable_command(spec, "agent", environ=environ)
    assert problem is not None and f"--bind-ro {tools}" in problem
    exposed = layout.spec(bind_ro=(tools,))
    assert unreachable_command(exposed, "agent", environ=environ) is None
    assert unreachable_command(spec, "sh", environ=environ) is None  # /bin -> usr/bin
    assert unreachable_command(spec, "./bin/build", environ=environ) is None  # in the Draft
    assert unreachable_command(spec, "no-such-program", environ=environ) is None
    # a Published .venv whose interpreter is a symlink into a folder the sandbox hides
    _fill(layout.published, {".venv/bin/.keep": ""})
    (layout.published / ".venv" / "bin" / "python").symlink_to(tools / "agent")
    venv = layout.spec(readonly=((layout.published / ".venv", layout.published / ".venv"),))
    problem = unreachable_command(venv, ".venv/bin/python", environ=environ)
    assert problem is not None and f"leads to {tools / 'agent'}" in problem
    # and bubblewrap agrees: the exposed program runs, the other does not start
    argv, env = sandbox_command(exposed, ["agent"], environ=environ)
    assert run_command(argv, env=env, new_session=True).exit_code == 0
    argv, env = sandbox_command(spec, ["agent"], environ=environ)
    assert run_command(argv, env=env, new_session=True).exit_code != 0


def test_sandbox_problem_names_what_is_missing(tmp_path: Path) -> None:
    assert sandbox_problem() is None
    missing = sandbox_problem(executable=str(tmp_path / "no-bwrap"))
    assert missing is not None and "cannot run" in missing
    broken = sandbox_problem(executable="/bin/false")
    assert broken is not None and "--version failed" in broken


def test_git_commits_in_a_cloned_draft_stay_in_the_draft(layout: Layout) -> None:
    env = conftest.git_env(layout.home)
    subprocess.run(["git", "init", "-q", str(layout.published)], check=True, env=env)
    subprocess.run(["git", "add", "keep.txt"], cwd=layout.published, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "one"], cwd=layout.published, check=True, env=env)
    draft = layout.root / "git-draft"
    # a local clone (hard links): a --shared clone's alternates would name
    # Published's .git, which the sandbox does not show
    subprocess.run(["git", "clone", "-q", str(layout.published), str(draft)], check=True, env=env)
    script = "echo new > new.txt && git add new.txt && git commit -qm two && git log --format=%s"
    environ = {k: env[k] for k in ("PATH", "HOME")} | {
        name: env[name] for name in env if name.startswith("GIT_")
    }
    spec = layout.spec(source=draft, env_names=tuple(n for n in environ if n.startswith("GIT_")))
    argv, sandbox_env = sandbox_command(spec, ["sh", "-c", script], environ=environ)
    assert run_command(argv, env=sandbox_env, new_session=True).exit_code == 0
    log = ["git", "log", "--format=%s"]
    in_draft = subprocess.run(log, cwd=draft, env=env, capture_output=True, text=True, check=True)
    assert in_draft.stdout.split() == ["two", "one"]
    real = subprocess.run(
        log, cwd=layout.published, env=env, capture_output=True, text=True, check=True
    )
    assert real.stdout.split() == ["one"]


# -- no isolation ----------------------------------------------------------------------


def test_unsandboxed_git_never_climbs_into_the_real_repository(layout: Layout) -> None:
    git_env = conftest.git_env(layout.home)
    subprocess.run(["git", "init", "-q", str(layout.published)], check=True, env=git_env)
    where = ["git", "rev-parse", "--show-toplevel"]
    found = subprocess.run(where, cwd=layout.draft, env=git_env, capture_output=True, text=True)
    assert found.stdout.strip() == str(layout.published)  # without the ceiling it climbs
    environ = dict(git_env, GIT_DIR=str(layout.published / ".git"))
    env = unsandboxed_environment(layout.draft, environ=environ)
    inside = subprocess.run(where, cwd=layout.draft, env=env, capture_output=True, text=True)
    assert inside.returncode != 0
    assert "not a git repository" in inside.stderr
