"""Shared fixtures: build workspaces, read them back, run the CLI, open repositories.

Everything is deterministic by injection: the CLI gets ``STRATA_NOW`` and a
``STRATA_SEED`` that changes with every call (as jj's test environment does),
and repositories opened through :func:`make_repo` get a fixed clock, random
source and author.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings

from pgcluster import pg_cluster, pg_url  # noqa: F401  (fixtures for every test module)
from strata import Author, Repository

# In CI a failing property fails fast: no minutes spent shrinking the example.
settings.register_profile(
    "ci", phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target], deadline=None
)
if os.environ.get("CI"):
    settings.load_profile("ci")

# No command of the suite starts a watcher by itself (hundreds of workspaces would
# each leave one running); the tests of the self-started watcher turn it back on
# with ``env={"STRATA_NO_DAEMON": ""}`` and stop what they started.
os.environ["STRATA_NO_DAEMON"] = "1"

# A suite started in the background by a shell without job control ignores Ctrl-C (the shell
# sets SIGINT to "ignore" for it), and so would every command a test starts: the tests of
# what Ctrl-C does then fail. The suite runs as from a terminal: Ctrl-C interrupts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's temp folder is ``BASETEMP/gwN`` (not ``popen-gwN``).

    A watcher's socket is used only while its path is under 100 bytes (see
    ``strata._resident``): workspaces in a worker's temp folder stay as short
    as a serial run's plus four bytes, and tests of the watcher behave the same.
    """
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker and config.option.basetemp:
        config.option.basetemp = str(Path(config.option.basetemp).with_name(worker))


NOW_MS = 1_700_000_000_000
TESTER = Author("tester", "human")
ALICE = Author("alice", "human")
BOT = Author("bot", "agent")


# -- describing a workspace ------------------------------------------------------


@dataclass(frozen=True)
class File:
    """A regular file with exact permission bits."""

    data: bytes | str
    mode: int = 0o644


@dataclass(frozen=True)
class Link:
    """A symbolic link (stored as given, never followed)."""

    target: str


@dataclass(frozen=True)
class Dir:
    """A folder (empty unless other entries are placed below it)."""

    mode: int = 0o755


Spec = Mapping[str, "bytes | str | File | Link | Dir | None"]


def write_tree(root: Path, spec: Spec) -> Path:
    """Create ``spec`` (workspace path -> content) below ``root``; return ``root``.

    ``bytes``/``str``/:class:`File` make files, :class:`Link` symlinks and
    :class:`Dir` or ``None`` folders. Folder modes are applied last, deepest
    first, so a ``0o500`` folder can still be filled.
    """
    root.mkdir(parents=True, exist_ok=True)
    dir_modes: list[tuple[Path, int]] = []
    for rel, value in spec.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if value is None or isinstance(value, Dir):
            path.mkdir(parents=True, exist_ok=True)
            dir_modes.append((path, value.mode if value else 0o755))
        elif isinstance(value, Link):
            os.symlink(value.target, path)
        else:
            f = value if isinstance(value, File) else File(value)
            data = f.data.encode() if isinstance(f.data, str) else f.data
            path.write_bytes(data)
            os.chmod(path, f.mode)
    for path, mode in sorted(dir_modes, key=lambda pm: -len(pm[0].parts)):
        os.chmod(path, mode)
    return root


def read_manifest(root: Path, *, skip: tuple[str, ...] = (".strata", ".git")) -> dict[str, Any]:
    """Everything below ``root`` as path -> (kind, mode bits, content or link target).

    Folders are included (with their mode), so an empty folder counts; names
    in ``skip`` are left out at every depth. Symlinks are never followed.
    Names and link targets are decoded with ``surrogateescape``, so
    non-UTF-8 names compare exactly.
    """
    found: dict[str, Any] = {}

    def walk(folder: bytes, prefix: str) -> None:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            name = os.fsdecode(entry.name)
            if name in skip:
                continue
            rel = prefix + name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.fsdecode(os.readlink(entry.path)))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
                walk(entry.path, rel + "/")
            elif stat.S_ISREG(st.st_mode):
                with open(entry.path, "rb") as f:
                    found[rel] = ("file", stat.S_IMODE(st.st_mode), f.read())
            else:
                found[rel] = ("special", stat.S_IFMT(st.st_mode))

    walk(os.fsencode(root), "")
    return found


def clear_workspace(root: Path) -> None:
    """Remove everything in ``root`` except its ``.strata``."""
    for entry in os.scandir(root):
        if entry.name == ".strata":
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


@pytest.fixture(scope="session")
def make_tree() -> Callable[[Path, Spec], Path]:
    """``make_tree(root, {"a.txt": "hi", "bin": b"\\0", "d": Dir(), "l": Link("a.txt")})``."""
    return write_tree


@pytest.fixture(scope="session")
def manifest() -> Callable[..., dict[str, Any]]:
    """``manifest(root)``: the full content of a folder, for exact comparisons."""
    return read_manifest


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace folder."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


# -- repositories ----------------------------------------------------------------


def ticking_clock(start: int = NOW_MS, step: int = 1000) -> Callable[[], int]:
    """A clock that advances ``step`` ms on every reading."""
    ticks = itertools.count(start, step)
    return lambda: next(ticks)


def open_repo(path: Path, *, init: bool = True, seed: int = 0, **kwargs: Any) -> Repository:
    """A repository with a fixed clock, random source and author."""
    kwargs.setdefault("clock", ticking_clock())
    kwargs.setdefault("rng", random.Random(seed))
    kwargs.setdefault("author", TESTER)
    if init:
        return Repository.init(path, **kwargs)
    return Repository.open(path, **kwargs)


@pytest.fixture
def make_repo() -> Iterator[Callable[..., Repository]]:
    """``make_repo(path, init=True, seed=0, store=None)``: a deterministic Repository.

    Every repository made is closed at the end of the test.
    """
    made: list[Repository] = []

    def factory(path: Path, **kwargs: Any) -> Repository:
        repo = open_repo(path, **kwargs)
        made.append(repo)
        return repo

    yield factory
    for repo in made:
        repo.close()


@pytest.fixture
def repo(ws: Path, make_repo: Callable[..., Repository]) -> Repository:
    """A fresh repository in ``ws``."""
    return make_repo(ws)


# -- the command line ------------------------------------------------------------


class CliRunner:
    """Runs ``python -m strata`` in a child process with a deterministic environment."""

    def __init__(self, home: Path, prefix: tuple[str, ...] = ()) -> None:
        self.home = home
        self.prefix = prefix  # e.g. setpriv ... --: run as another user
        self._seed = itertools.count(1)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("STRATA_", "GIT_", "OTEL_"))
        }
        env.update(
            HOME=str(self.home),
            STRATA_NOW=str(NOW_MS),
            STRATA_SEED=str(next(self._seed)),
            STRATA_AUTHOR="tester",
            LC_ALL="C.UTF-8",
            NO_COLOR="1",
            STRATA_NO_DAEMON="1",
        )
        env.update(extra or {})
        return env

    def __call__(
        self,
        *args: str | os.PathLike[str],
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
        text: bool = True,
    ) -> tuple[int, Any, Any]:
        proc = subprocess.run(
            [*self.prefix, sys.executable, "-m", "strata", *map(str, args)],
            cwd=cwd,
            env=self.env(env),
            capture_output=True,
            timeout=timeout,
            check=False,
            text=text,
        )
        return proc.returncode, proc.stdout, proc.stderr


def ok(result: tuple[int, Any, Any]) -> Any:
    """stdout of a command that must succeed."""
    code, out, err = result
    assert code == 0, f"exit {code}: {err}"
    assert "Traceback" not in err
    return out


def as_json(result: tuple[int, Any, Any]) -> Any:
    """The parsed ``--json`` output of a command that must succeed."""
    return json.loads(ok(result))


def assert_user_error(result: tuple[int, Any, Any], *, code: int = 1, says: str = "") -> str:
    """Exactly one ``error:`` line (and maybe one ``hint:``) on stderr, nothing on stdout."""
    got, out, err = result
    assert got == code, f"exit {got}, wanted {code}: {err}"
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    assert lines and lines[0].startswith("error: "), err
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), err
    assert out == ""
    assert says in lines[0], err
    return str(err)


@pytest.fixture
def run_cli(tmp_path: Path) -> CliRunner:
    """``run_cli(*args, cwd=..., env=...)`` returns ``(exit code, stdout, stderr)``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return CliRunner(home)


# -- git -------------------------------------------------------------------------


def git_env(home: Path) -> dict[str, str]:
    """An environment where no user or system git configuration applies."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        LC_ALL="C",
    )
    return env


@pytest.fixture
def git(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """``git(*args, cwd=...)``: run git isolated from the user's configuration."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    home = tmp_path / "git-home"
    home.mkdir(exist_ok=True)
    env = git_env(home)

    def run(
        *args: str, cwd: Path, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, check=check, input=input
        )

    return run


# -- people: root and an unprivileged user ---------------------------------------

UNPRIVILEGED = "strata-tester"


@dataclass(frozen=True)
class Person:
    """Who runs a command: this process's user, or the unprivileged user made for the tests.

    Root never meets an unreadable file or folder, so what touches permissions
    runs as both (the ``person`` fixture).
    """

    name: str
    uid: int
    gid: int

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def prefix(self) -> tuple[str, ...]:
        """The argv prefix that runs a command as this person."""
        if self.uid == os.geteuid():
            return ()
        return ("setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--")

    def run(
        self, argv: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this person (text output, never raising on exit codes)."""
        return subprocess.run(
            [*self.prefix(), *argv],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )


@pytest.fixture(scope="session")
def unprivileged() -> Person:
    """A user without privileges (created when the tests run as root)."""
    import pwd

    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return Person(me.pw_name, me.pw_uid, me.pw_gid)
    import fcntl

    # parallel workers (pytest-xdist) each ask: one creates the user, the others wait for it
    with open(f"/tmp/{UNPRIVILEGED}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entry = pwd.getpwnam(UNPRIVILEGED)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    UNPRIVILEGED,
                ],
                check=True,
                capture_output=True,
            )
            entry = pwd.getpwnam(UNPRIVILEGED)
    return Person(entry.pw_name, entry.pw_uid, entry.pw_gid)


@pytest.fixture(params=["root", "unprivileged"])
def person(request: pytest.FixtureRequest, unprivileged: Person) -> Person:
    """The test runs twice: as this process's user (root in CI) and as an unprivileged one."""
    import pwd

    if request.param == "root":
        me = pwd.getpwuid(os.geteuid())
        return Person(me.pw_name, me.pw_uid, me.pw_gid)
    if os.geteuid() != 0:
        pytest.skip("only root can run a command as another user")
    return unprivileged


@pytest.fixture
def home_of(person: Person) -> Iterator[Path]:
    """A folder outside pytest's private temp folder that ``person`` owns (for workspaces)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="strata-person-", dir="/tmp"))
    os.chown(folder, person.uid, person.gid)
    folder.chmod(0o755)
    yield folder
    subprocess.run(["chmod", "-R", "u+rwX", str(folder)], check=False, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def cli_as(person: Person, home_of: Path) -> CliRunner:
    """``cli_as(*args, cwd=...)``: the CLI run as ``person``, with a home of its own."""
    home = home_of / "home"
    home.mkdir()
    os.chown(home, person.uid, person.gid)
    return CliRunner(home, prefix=person.prefix())


# -- self-started watchers ------------------------------------------------------

#: the environment that lets watchers start themselves (the suite turns them off)
AUTO = {"STRATA_NO_DAEMON": ""}


def watchers_below(folder: Path) -> list[int]:
    """The pids of the self-started watchers whose workspace lies below ``folder``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--auto" in argv and b"-C" in argv:
            where = argv[argv.index(b"-C") + 1].decode(errors="replace")
            if where.startswith(str(folder)):
                found.append(int(entry))
    return found


def wait_until(condition: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def auto(tmp_path: Path, run_cli: CliRunner) -> Iterator[Callable[..., tuple[int, Any, Any]]]:
    """``auto(*args, cwd=...)``: the CLI with self-starting watchers; all stopped at the end."""

    def run(*args: str | os.PathLike[str], **kwargs: Any) -> tuple[int, Any, Any]:
        return run_cli(*args, **{**kwargs, "env": {**AUTO, **kwargs.get("env", {})}})

    yield run
    for pid in watchers_below(tmp_path):
        os.kill(pid, signal.SIGTERM)
    for pid in watchers_below(tmp_path):
        wait_until(lambda pid=pid: gone(pid), timeout=10)
    leftover = watchers_below(tmp_path)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, "a watcher did not stop on SIGTERM"


# -- model providers -------------------------------------------------------------


@pytest.fixture
def wire() -> Iterator[Any]:
    """A real HTTP server speaking OpenAI's and Anthropic's wire formats (tests/wire_server.py)."""
    from wire_server import WireServer

    with WireServer() as server:
        yield server
