"""A private PostgreSQL cluster for the tests: ``initdb`` + ``pg_ctl`` in a temp folder.

One cluster per test session (per xdist worker), in memory when there is room
(``/dev/shm``), listening on a Unix socket only; one database per test.
PostgreSQL refuses to run as root: as root the cluster runs as the
``postgres`` user Debian's package creates. CI (root) fails when the binaries
are missing (``scripts/dev`` installs them); another user's run skips, saying
why.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = os.geteuid() == 0


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


class Cluster:
    """A running PostgreSQL cluster on a Unix socket in ``folder``."""

    def __init__(self, bin_dir: Path, folder: Path, *, durable: bool = False) -> None:
        self.bin = bin_dir
        #: fsync on (a benchmark against SQLite's synchronous=FULL); the tests run without
        self.durable = durable
        self.folder = folder
        self.data = folder / "data"
        self.user = "postgres" if ROOT else None
        self._names = itertools.count()

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            argv, user=self.user, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    def init(self) -> None:
        if ROOT:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "strata",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )

    def start(self) -> None:
        """Start the server (again); returns once it accepts connections."""
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "log"),
            "-o",
            f"-k {self.folder} -c listen_addresses='' -c max_connections=60"
            + ("" if self.durable else " -c fsync=off"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: every connection is cut)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://strata@/{database}?host={self.folder}"

    def new_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)


#: the room a cluster needs in memory: a test's database is about 8 MB, never dropped
SHM_ROOM = 2 << 30


def _cluster_parent() -> str | None:
    """Where the session's cluster lives: in memory (``/dev/shm``) when there is room.

    The tests' cluster runs without fsync and goes with the session, so a disk
    adds nothing to what they test; on one, creating a database per test and
    deleting the cluster's hundreds of megabytes at the end cost the session
    seconds (tens on a busy disk). Elsewhere: the temp folder.
    """
    try:
        room = os.statvfs("/dev/shm")
    except OSError:
        return None
    if room.f_bavail * room.f_frsize < SHM_ROOM or not os.access("/dev/shm", os.W_OK):
        return None
    return "/dev/shm"


def start_cluster() -> Iterator[Cluster]:
    """Start a cluster for the session (the body of the ``pg_cluster`` fixture)."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        reason = (
            "PostgreSQL's initdb is not installed (Debian: apt-get install postgresql; "
            "scripts/dev test installs it)"
        )
        if ROOT:
            pytest.fail(reason)
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="strata-pg-", dir=_cluster_parent()))
    folder.chmod(0o755)
    cluster = Cluster(bin_dir, folder)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            cluster.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One private PostgreSQL cluster for the whole test session."""
    yield from start_cluster()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """The URL of a new empty database of the session's cluster, dropped afterwards."""
    # not dropped afterwards: a DROP DATABASE costs a checkpoint (a second); the whole
    # cluster goes with the session
    return pg_cluster.new_database()
