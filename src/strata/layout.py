"""Where a repository lives, how it is found, and its configuration.

A workspace has a ``.strata`` entry at its root: either the repository folder
itself, or (``init --store DIR``) a small file ``strata-dir: /abs/path`` that
points at a repository kept outside the workspace, as git's gitfile does.
Commands find the workspace by searching upward from the current folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.atomic import atomic_write
from strata.errors import (
    NestedRepository,
    NotARepository,
    RepositoryError,
    RepositoryLocked,
    StoreOfAnotherWorkspace,
    UnsupportedFormat,
    UsageError,
)
from strata.store.ignore import DEFAULT_PATTERNS

FORMAT = 1
MARKER = ".strata"
POINTER_PREFIX = "strata-dir: "
#: where a git-backed run keeps its repository when the workspace has none:
#: inside ``.git``, so the user's work tree and ``git status`` never see it
GIT_HIDDEN_REPO = ".git/strata/repo"
#: the Workshop's folder, inside the repository (:attr:`Layout.workshop`)
WORKSHOP_FOLDER = "workshop"
#: the ``kind`` of the lease a Workshop turn holds (:attr:`Layout.groups`; older versions kept
#: it in :attr:`Layout.workshop`)
WORKSHOP_LEASE = "workshop_turn"

CONFIG_TEMPLATE = """\
# Strata repository configuration.
[repository]
format = {format}
workspace = {workspace}
hash = "blake3"
compression = "zstd"

[ledger]
driver = "{driver}"{url}

[ignore]
# Lowest-precedence ignore patterns (gitignore syntax); .gitignore and
# .strataignore files in the workspace override them.
defaults = {defaults}
"""


@dataclass(frozen=True)
class Config:
    """The parsed ``config.toml``."""

    format: int
    workspace: str
    ignore_defaults: tuple[str, ...]
    ledger_driver: str = "sqlite"
    raw: dict[str, Any] = field(default_factory=dict)
    #: the ``postgresql://`` URL of a shared ledger (``ledger.url``), or None
    ledger_url: str | None = None


@dataclass(frozen=True)
class Layout:
    """The paths of one repository."""

    workspace: Path
    repo: Path

    @property
    def config(self) -> Path:
        """``config.toml``."""
        return self.repo / "config.toml"

    @property
    def objects(self) -> Path:
        """The object store folder."""
        return self.repo / "objects"

    @property
    def ledger(self) -> Path:
        """The SQLite ledger."""
        return self.repo / "ledger.db"

    @property
    def statcache(self) -> Path:
        """The stat cache file."""
        return self.repo / "statcache"

    @property
    def journal(self) -> Path:
        """In-flight multi-file changes."""
        return self.repo / "journal"

    @property
    def trash(self) -> Path:
        """Files a restore replaced, until deleted (:func:`strata.store.fsops.empty_trash`)."""
        return self.repo / "trash"

    @property
    def runs(self) -> Path:
        """Leases of runs in progress (``<run id>.lease``)."""
        return self.repo / "runs"

    @property
    def groups(self) -> Path:
        """Leases of the operation groups in progress (``<group id>.lease``)."""
        return self.repo / "groups"

    @property
    def draft(self) -> Path:
        """The Draft's folder, while one exists (``draft.json`` says which)."""
        return self.repo / "draft"

    @property
    def draft_state(self) -> Path:
        """The open Draft's record; it exists exactly while a Draft is open."""
        return self.draft / "draft.json"

    @property
    def watch(self) -> Path:
        """The watcher's socket, pid file and cookies (``strata watch``)."""
        return self.repo / "watch"

    @property
    def workshop(self) -> Path:
        """The Workshop's turn lock (its turns' leases are in :attr:`groups`)."""
        return self.repo / WORKSHOP_FOLDER

    @property
    def lock(self) -> Path:
        """The writer lock file."""
        return self.repo / "lock"

    @property
    def git_backed(self) -> bool:
        """True for the repository a git-backed run keeps inside ``.git``."""
        return self.repo == self.workspace / GIT_HIDDEN_REPO


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def read_marker(marker: Path) -> Path:
    """The repository folder a ``.strata`` entry designates."""
    if marker.is_dir() and not marker.is_symlink():
        return marker
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise RepositoryError(f"cannot read {marker}: {exc}") from None
    if not text.startswith(POINTER_PREFIX):
        raise RepositoryError(
            f"{marker} is neither a repository folder nor a 'strata-dir:' pointer"
        )
    return Path(text[len(POINTER_PREFIX) :])


def find_layout(start: Path) -> Layout:
    """The workspace containing ``start`` (searching upward)."""
    start = start.resolve()
    for folder in (start, *start.parents):
        marker = folder / MARKER
        if marker.exists() or marker.is_symlink():
            repo = read_marker(marker)
            if not (repo / "config.toml").is_file():
                raise RepositoryError(
                    f"the repository of {folder} ({repo}) is missing or incomplete",
                    hint="if the store was moved, edit the path in " + str(marker),
                )
            if repo != marker:
                _check_owner(folder, repo)
            return Layout(folder, repo)
        hidden = folder / GIT_HIDDEN_REPO
        if (hidden / "config.toml").is_file():
            return Layout(folder, hidden)  # made by a git-backed 'strata run'
    raise NotARepository(str(start))


def _check_owner(workspace: Path, repo: Path) -> None:
    """Refuse a pointer that names the store of another workspace (a copied workspace).

    The store's ``config.toml`` names the workspace it was made for. When that
    is another folder whose own ``.strata`` pointer still names this store, the
    two would share one history: :class:`StoreOfAnotherWorkspace`. A workspace
    that was moved (the folder the store names no longer points at it) keeps
    its store. A copied repository *folder* (``init`` without ``--store``) is
    an independent copy and never reaches here.
    """
    try:
        raw = tomllib.loads((repo / "config.toml").read_text(encoding="utf-8"))
        owner = raw["repository"]["workspace"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return  # load_config reports a config it cannot read
    if not isinstance(owner, str) or Path(owner) == workspace:
        return
    other = Path(owner) / MARKER
    try:
        claimed = (
            other.is_file()
            and not other.is_symlink()
            and read_marker(other).resolve() == repo.resolve()
        )
    except (RepositoryError, OSError):
        claimed = False
    if claimed:
        raise StoreOfAnotherWorkspace(str(workspace), owner, str(repo))
    _claim(workspace, repo)


def _claim(workspace: Path, repo: Path) -> None:
    """Record ``workspace`` as the store's owner (its recorded one no longer points at it).

    The store belongs to one workspace: after a move, the first command in the
    moved folder claims it, and any other workspace naming it (a copy made
    before the move) is then refused. The ``workspace`` line of
    ``config.toml`` is replaced atomically; a store that cannot be written
    (a reader without write access) is left as it is.
    """
    config = repo / "config.toml"
    try:
        lines = config.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return
    done = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("workspace") and line.partition("=")[0].strip() == "workspace":
            lines[i] = f"workspace = {_toml_str(str(workspace))}\n"
            done = True
            break
    if not done:
        return
    try:
        atomic_write(config, "".join(lines).encode("utf-8"))
    except OSError:
        return


#: the settings of ``[watch]`` in config.toml
WATCH_SETTINGS = ("auto", "capture", "idle_timeout", "trash_idle")


def load_config(layout: Layout) -> Config:
    """Parse and check ``config.toml`` (a field of the wrong type: :class:`RepositoryError`)."""
    try:
        raw = tomllib.loads(layout.config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RepositoryError(f"cannot read {layout.config}: {exc}") from None

    def table(name: str) -> dict[str, Any]:
        value = raw.get(name, {})
        if not isinstance(value, dict):
            raise _bad_config(layout, f"[{name}] is not a table")
        return value

    repo = table("repository")
    fmt = repo.get("format")
    if fmt is None:
        raise _bad_config(layout, "repository.format is missing (the file is damaged)")
    if fmt != FORMAT or type(fmt) is not int:
        raise UnsupportedFormat("this repository", fmt, FORMAT)
    for key, allowed in (("hash", "blake3"), ("compression", "zstd")):
        if repo.get(key, allowed) != allowed:
            raise _bad_config(
                layout, f"repository.{key} is {repo.get(key)!r}: this Strata uses {allowed!r}"
            )
    defaults = table("ignore").get("defaults", list(DEFAULT_PATTERNS))
    if not isinstance(defaults, list) or not all(isinstance(p, str) for p in defaults):
        raise _bad_config(layout, "ignore.defaults is not a list of patterns")
    driver = table("ledger").get("driver", "sqlite")
    if not isinstance(driver, str) or driver not in LEDGER_DRIVERS:
        raise RepositoryError(
            f"{layout.config} names an unknown ledger driver {driver!r}",
            hint=f"use one of {', '.join(LEDGER_DRIVERS)}",
        )
    url = table("ledger").get("url")
    if driver == "postgresql" and not (isinstance(url, str) and is_ledger_url(url)):
        raise _bad_config(layout, 'ledger.url must be a "postgresql://..." URL')
    workspace = repo.get("workspace", str(layout.workspace))
    if not isinstance(workspace, str):
        raise _bad_config(layout, "repository.workspace is not a path")
    # [watch] and [retention] are checked by the commands that use them (watch_problem,
    # retention_settings): a mistake there must not stop the recording of a change
    return Config(
        format=fmt,
        workspace=workspace,
        ignore_defaults=tuple(defaults),
        ledger_driver=driver,
        raw=raw,
        ledger_url=url if driver == "postgresql" else None,
    )


#: the tables of config.toml Strata reads (each checked by what uses it); Strata writes
#: the first three (``init``), the user adds the others (docs/format.md, section 1.2)
CONFIG_TABLES = (
    "repository",
    "ignore",
    "ledger",
    "watch",
    "retention",
    "providers",
    "model",
    "gateway",
    "kb",
    "sync",  # where 'strata vcs sync' writes when the workspace is not a git work tree
    "telemetry",  # otlp_endpoint: where every command exports its spans and the metrics
    "traces",  # recipients, identity: traces encrypted at rest (providers/trace.py)
    "snapshot",  # max_file_size, large_files: the large-file guard (store/large.py)
)


def unknown_tables(raw: dict[str, Any]) -> list[str]:
    """The top-level keys of a parsed config.toml that are no table Strata reads, sorted.

    They stop nothing (a newer Strata's table, read by an older one, must not
    stop recording): the CLI warns about them, and the command that reads a
    table refuses one that looks like it (:func:`misspelt_table`).
    """
    return sorted(k for k in raw if k not in CONFIG_TABLES)


def unknown_tables_warning(raw: dict[str, Any]) -> str | None:
    """The one-line warning about :func:`unknown_tables` (None: there are none)."""
    unknown = unknown_tables(raw)
    if not unknown:
        return None
    names = ", ".join(f"[{k}]" for k in unknown)
    verb = "is not a table" if len(unknown) == 1 else "are not tables"
    return f"{names} {verb} Strata reads, ignored (known: {', '.join(CONFIG_TABLES)})"


def misspelt_table(raw: dict[str, Any], name: str) -> str | None:
    """A top-level key of config.toml that is no table Strata reads but looks like ``name``.

    ``[gatway]`` would otherwise be ignored without a word, and with it the
    settings the user meant for ``[gateway]``.
    """
    import difflib

    close = difflib.get_close_matches(name, unknown_tables(raw), n=1, cutoff=0.75)
    return close[0] if close else None


def misspelt_problem(raw: dict[str, Any], name: str) -> str | None:
    """Why the command that reads ``[name]`` must not run: a near miss of it (None: none)."""
    near = misspelt_table(raw, name)
    if near is None:
        return None
    return f"[{near}] is not a table Strata reads: did you mean [{name}]?"


def watch_problem(raw: dict[str, Any]) -> str | None:
    """What is wrong with the ``[watch]`` table of a parsed ``config.toml`` (None: nothing)."""
    if (near := misspelt_problem(raw, "watch")) is not None:
        return near
    watch = raw.get("watch", {})
    if not isinstance(watch, dict):
        return "[watch] is not a table"
    unknown = sorted(set(watch) - set(WATCH_SETTINGS))
    if unknown:  # a misspelt setting would be ignored without a word
        return f"watch.{unknown[0]} is not a setting (known: {', '.join(WATCH_SETTINGS)})"
    for key in ("auto", "capture"):
        if not isinstance(watch.get(key, False), bool):
            return f"watch.{key} is not true or false"
    idle = watch.get("idle_timeout", 1)
    if isinstance(idle, bool) or not isinstance(idle, int | float) or idle <= 0:
        return "watch.idle_timeout is not a number of seconds above 0"
    trash_idle = watch.get("trash_idle", 0)
    if isinstance(trash_idle, bool) or not isinstance(trash_idle, int | float) or trash_idle < 0:
        return "watch.trash_idle is not a number of seconds (0 or more)"
    return None


def bad_config(layout: Layout, problem: str) -> RepositoryError:
    """The error of a ``config.toml`` setting that cannot be used (a hint to fix it by hand)."""
    return _bad_config(layout, problem)


def _bad_config(layout: Layout, problem: str) -> RepositoryError:
    return RepositoryError(
        f"{layout.config}: {problem}", hint="fix it by hand (see docs/format.md for the fields)"
    )


LEDGER_DRIVERS = ("sqlite", "jsonl", "postgresql")


def is_ledger_url(text: str) -> bool:
    """True when ``text`` names a shared PostgreSQL ledger (``postgresql://...``)."""
    return text.startswith(("postgresql://", "postgres://"))


def ledger_choice(text: str) -> tuple[str, str | None]:
    """``(driver, url)`` of a ``--ledger``/``--to`` value: ``sqlite``, ``jsonl`` or a URL."""
    if is_ledger_url(text):
        return "postgresql", text
    if text not in ("sqlite", "jsonl"):
        raise UsageError(f"unknown ledger {text!r}; use sqlite, jsonl or a postgresql://... URL")
    return text, None


#: ``[retention]`` keys and their defaults (see strata.core.storage.Retention)
RETENTION_DEFAULTS = {
    "keep_all_days": 14,
    "hourly_days": 60,
    "daily_days": 365,
    "keep_operations": 100,
    "prune_grace_minutes": 60,
    "git_refs_days": 14,
    # the storage budget (strata.core.budget): bytes of the repository, 0 = none
    "max_size": 0,
    # the newest state events the budget never removes
    "keep_last": 20,
    # the store repacks itself past its thresholds (strata.core.upkeep)
    "auto_repack": True,
}
#: settings given as a size: a whole number of bytes or a string such as "2 GB"
SIZE_SETTINGS = ("max_size",)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: object) -> int:
    """Bytes of a size setting: ``1048576``, ``"500 MB"``, ``"2G"``, ``"1.5 GiB"`` (binary units).

    ValueError when it is none.
    """
    import re

    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{value} is below 0")
        return value
    if isinstance(value, str):
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", value.lower())
        if found:
            return int(float(found.group(1)) * _UNITS[found.group(2)])
    raise ValueError(f'{value!r} is not a size (a number of bytes, or e.g. "500 MB")')


def retention_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The ``[retention]`` table with defaults filled in; ValueError naming a bad key."""
    if (near := misspelt_problem(raw, "retention")) is not None:
        raise ValueError(near)  # gc would prune by the defaults, not by what the user wrote
    table = raw.get("retention", {})
    if not isinstance(table, dict):
        raise ValueError("[retention] is not a table")
    unknown = sorted(set(table) - set(RETENTION_DEFAULTS))
    if unknown:
        raise ValueError(
            f"retention.{unknown[0]} is not a setting (known: {', '.join(RETENTION_DEFAULTS)})"
        )
    out = {**RETENTION_DEFAULTS, **table}
    for key, value in out.items():
        if key == "auto_repack":
            if not isinstance(value, bool):
                raise ValueError(f"retention.auto_repack must be true or false, not {value!r}")
        elif key in SIZE_SETTINGS:
            try:
                out[key] = parse_size(value)
            except ValueError as exc:
                raise ValueError(f"retention.{key}: {exc}") from None
        elif type(value) is not int or value < 0:
            raise ValueError(f"retention.{key} must be a whole number >= 0, not {value!r}")
    if not out["keep_all_days"] <= out["hourly_days"] <= out["daily_days"]:
        raise ValueError(
            "retention tiers must grow: keep_all_days <= hourly_days <= daily_days "
            f"(got {out['keep_all_days']}, {out['hourly_days']}, {out['daily_days']})"
        )
    return out


def set_ledger_driver(layout: Layout, driver: str, url: str | None = None) -> None:
    """Record the ledger driver (and a shared ledger's URL) in ``config.toml`` (atomically)."""
    import re

    text = layout.config.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^url = .*\n", "", text)
    line = f'driver = "{driver}"' + (f"\nurl = {_toml_str(url)}" if url else "")
    text, n = re.subn(r'(?m)^driver = "[a-z]+"$', lambda _: line, text, count=1)
    if n != 1:
        raise RepositoryError(f"cannot find the ledger driver setting in {layout.config}")
    atomic_write(layout.config, text.encode())


def create_layout(
    workspace: Path,
    *,
    store: Path | None,
    ledger: str = "sqlite",
    hidden: bool = False,
    objects: Path | None = None,
) -> tuple[Layout, bool]:
    """Make the repository folders and config; return (layout, created).

    ``hidden`` makes the repository of a git work tree at :data:`GIT_HIDDEN_REPO`,
    with no ``.strata`` entry in the workspace. ``objects`` names an object store
    folder shared with other workspaces (a shared ledger's: docs/sync.md); the
    repository's ``objects`` is then a symbolic link to it.
    """
    if objects is not None and not is_ledger_url(ledger):
        raise UsageError(
            "--objects shares an object store between workspaces of one shared ledger",
            hint="give --ledger postgresql://... too",
        )
    ledger_choice(ledger)  # a bad --ledger is refused before anything is made
    workspace = workspace.resolve()
    if not workspace.is_dir():
        raise UsageError(f"{workspace} is not a folder")
    if hidden:
        return _create_repo(workspace, workspace / GIT_HIDDEN_REPO, ledger, objects), True
    marker = workspace / MARKER
    if marker.exists() or marker.is_symlink():
        layout = find_layout(workspace)
        if store is not None and layout.repo.resolve() != store.resolve():
            raise RepositoryError(
                f"{workspace} already has a repository at {layout.repo}; not moving it to {store}"
            )
        return layout, False
    for parent in workspace.parents:
        if (parent / MARKER).exists():
            raise NestedRepository(str(workspace), str(parent))
    if store is not None:
        repo = store.resolve()
        if repo == workspace or workspace in repo.parents:
            raise UsageError(
                f"the store {repo} is inside the workspace; put it outside, "
                "so nothing in the workspace can delete it"
            )
        if (repo / "config.toml").is_file():
            # the pointer file was deleted (rm -rf .strata, git clean): reconnect to the store
            existing = load_config(Layout(workspace, repo))
            if Path(existing.workspace) != workspace:
                raise UsageError(
                    f"the store {repo} belongs to the workspace {existing.workspace}",
                    hint="give another --store folder",
                )
            atomic_write(marker, f"{POINTER_PREFIX}{repo}\n".encode())
            return Layout(workspace, repo), False
        if repo.exists() and any(repo.iterdir()):
            raise UsageError(f"the store folder {repo} exists and is not empty")
    else:
        repo = marker
    layout = _create_repo(workspace, repo, ledger, objects)
    if store is not None:
        atomic_write(marker, f"{POINTER_PREFIX}{repo}\n".encode())
    return layout, True


def _create_repo(workspace: Path, repo: Path, ledger: str, objects: Path | None) -> Layout:
    repo.mkdir(parents=True, exist_ok=True)
    layout = Layout(workspace, repo)
    if objects is not None:
        shared = objects.resolve()
        if shared == workspace or workspace in shared.parents:
            raise UsageError(f"the object store {shared} is inside the workspace; put it outside")
        shared.mkdir(parents=True, exist_ok=True)
        if not layout.objects.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                layout.objects.rmdir()  # (empty: the repository is new)
            layout.objects.symlink_to(shared, target_is_directory=True)
    for sub in (layout.objects, layout.journal):
        sub.mkdir(exist_ok=True)
    atomic_write(repo / ".gitignore", b"*\n")
    defaults = "[" + ", ".join(_toml_str(p) for p in DEFAULT_PATTERNS) + "]"
    driver, url = ledger_choice(ledger)
    config = CONFIG_TEMPLATE.format(
        format=FORMAT,
        workspace=_toml_str(str(workspace)),
        defaults=defaults,
        driver=driver,
        url=f"\nurl = {_toml_str(url)}" if url else "",
    )
    atomic_write(layout.config, config.encode())
    return layout


class WriteLock:
    """The one-writer lock of a repository (``flock`` on ``lock``); readers never take it.

    It is held by one thread at a time: the thread that holds it may enter it
    again (``depth`` counts how often), another thread of this process waits for
    it as a thread of another process does, up to ``timeout`` seconds in all.
    """

    def __init__(self, path: Path, *, timeout: float = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None
        self._depth = 0
        #: the thread holding the lock (None: not held by this process)
        self._owner: int | None = None
        #: taken before the file lock: ``flock`` cannot tell two threads of one process apart
        self._threads = threading.Lock()

    def __enter__(self) -> WriteLock:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return self
        deadline = time.monotonic() + self.timeout
        if not self._threads.acquire(timeout=self.timeout):
            raise _locked()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        os.close(fd)
                        raise _locked() from None
                    time.sleep(0.01)
        except BaseException:
            self._threads.release()
            raise
        self._fd, self._owner, self._depth = fd, me, 1
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owner != threading.get_ident():
            raise RuntimeError("the write lock is released only by the thread that holds it")
        self._depth -= 1
        if self._depth == 0:
            fd, self._fd, self._owner = self._fd, None, None
            try:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
            finally:
                self._threads.release()

    @property
    def depth(self) -> int:
        """How many times the calling thread holds the lock (0: it does not)."""
        return self._depth if self._owner == threading.get_ident() else 0

    @property
    def held(self) -> bool:
        """True while the calling thread holds the lock."""
        return self.depth > 0


def _locked() -> RepositoryLocked:
    return RepositoryLocked(
        "another strata command is writing to this repository",
        hint="wait for it to finish, then try again",
    )
