"""The ledger synced to Git: one commit per operation on ``strata/<branch>``, bookmarks as tags.

The ledger stays the source of truth; Git is where its history travels. Each
operation that touches a branch becomes one commit on
``refs/heads/strata/<branch>`` of the workspace's git repository (or of the
bare repository ``[sync] repository`` names in ``config.toml``). Only objects
and ``strata/…`` refs are written, through pygit2's object database: the
user's branches, index, HEAD and stash are never touched.

A commit's tree is the branch's files after the operation, plus a folder
``.strata-sync/`` that makes the commit self-describing::

    .strata-sync/manifest.json           the operation, its events (whole), snapshot ids
    .strata-sync/snapshots/<id>/manifest the snapshot's manifest, as stored
    .strata-sync/snapshots/<id>/files    the snapshot's files (a git tree)
    .strata-sync/snapshots/<id>/shadow   its Strata trees: ``tree`` (the raw object) and
                                         ``_<name>`` per folder, so permission bits and
                                         empty folders git cannot carry travel too
    .strata-sync/objects/<id>            artifacts the events name (redacted traces)

Commits are deterministic (author, committer and times come from the ledger),
so a sync is idempotent and an interrupted one, run again, writes the same
commits. A table in ``REPO/sync.db`` remembers which Strata object became which
git object and which operation was synced last, so a second sync writes only
the new operations. After writing, each new commit is checked: its files and
Strata trees are hashed again and compared with the snapshot the ledger names
(:func:`check_snapshot`); the first difference is reported.

:func:`import_ref` brings a fetched ``strata/<branch>`` in as the branch
``<remote>/<branch>``: every event keeps its id, author and time; every object
is hashed on the way in and refused when it is not what the event names.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import SyncError, SyncMismatch, UsageError
from strata.ids import ObjectId
from strata.ledger.ledger import Bookmark, View, check_ref_name, moved
from strata.schemas import fields_json
from strata.store.objects import hash_bytes
from strata.store.tree import decode_tree, read_tree

if TYPE_CHECKING:
    import pygit2

    from strata.core import Core

BRANCH_PREFIX = "refs/heads/strata/"
TAG_PREFIX = "refs/tags/strata/"
SYNC_DIR = ".strata-sync"
FORMAT = 1
COMMITTER = ("Strata", "strata@localhost")
_FILE, _EXEC, _LINK, _TREE = 0o100644, 0o100755, 0o120000, 0o040000
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class SyncedCommit:
    """One commit a sync wrote (or found already written)."""

    operation_id: str
    branch: str
    commit: str
    first_event_id: str | None
    last_event_id: str | None

    def to_json(self) -> dict[str, Any]:
        """As ``strata vcs sync --json`` prints it."""
        return fields_json(self)


@dataclass
class SyncResult:
    """What a sync did: new commits, where every ``strata/`` ref and tag points, the check."""

    git_dir: Path
    commits: list[SyncedCommit] = field(default_factory=list)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    verified: int = 0

    def to_json(self) -> dict[str, Any]:
        """As ``strata vcs sync --json`` prints it."""
        return {
            "schema": 1,
            "git_dir": str(self.git_dir),
            "commits": [c.to_json() for c in self.commits],
            "branches": dict(sorted(self.branches.items())),
            "tags": dict(sorted(self.tags.items())),
            "verified": self.verified,
        }


@dataclass
class ImportResult:
    """What an import brought in."""

    source: str
    branches: dict[str, str] = field(default_factory=dict)
    events: int = 0
    skipped: int = 0
    bookmarks: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """As ``strata import --json`` prints it."""
        return {
            "schema": 1,
            "source": self.source,
            "branches": dict(sorted(self.branches.items())),
            "events": self.events,
            "skipped": self.skipped,
            "bookmarks": sorted(self.bookmarks),
        }


# -- where the commits go ------------------------------------------------------------------


def git_dir_of(core: Core) -> Path:
    """The git repository the sync writes to: ``[sync] repository``, else the workspace's.

    A configured repository that does not exist yet is made (bare). Refuses
    (:class:`SyncError`) when there is neither.
    """
    section = core.config.raw.get("sync") or {}
    configured = section.get("repository") if isinstance(section, dict) else None
    if configured:
        path = Path(str(configured)).expanduser()
        if not path.is_absolute():
            path = core.root / path
        if not path.exists():
            _run(["git", "init", "-q", "--bare", str(path)])
        return path.resolve()
    proc = subprocess.run(
        ["git", "-C", str(core.root), "rev-parse", "--show-toplevel", "--absolute-git-dir"],
        capture_output=True,
        check=False,
        env=_git_env(),
    )
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if proc.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == core.root.resolve():
        return Path(lines[1])
    raise SyncError(
        f"{core.root} is not the top of a git work tree, and no repository to sync to is set",
        hint="run 'git init', or add to .strata/config.toml:  [sync]  repository = \"PATH.git\"",
    )


def _git_env() -> dict[str, str]:
    env = dict(os.environ)  # passed through to git, not interpreted here
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    return env


def _run(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, check=False, env=_git_env())
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        said = [line for line in lines if line.startswith(("fatal:", "error:", " ! "))]
        command = next((a for a in args[1:] if not a.startswith("-")), "")
        reason = (said or lines or [f"exit {proc.returncode}"])[0].strip()
        raise SyncError(f"git {command} failed: {reason}")
    return proc.stdout.decode("utf-8", "surrogateescape").strip()


def _git(git_dir: Path, *args: str) -> str:
    return _run(["git", f"--git-dir={git_dir}", *args])


# -- the table of what was synced ----------------------------------------------------------


class SyncState:
    """``REPO/sync.db``: Strata object -> git object, state event -> commit, the cursor."""

    def __init__(self, path: Path, git_dir: Path) -> None:
        self.db = sqlite3.connect(path)
        # a cache: a table lost to a crash costs a full sync, which writes the same commits
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS objects (kind TEXT, strata TEXT, git TEXT NOT NULL,"
            " PRIMARY KEY (kind, strata));"
            "CREATE TABLE IF NOT EXISTS events (event TEXT PRIMARY KEY, commit_id TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS tips (branch TEXT PRIMARY KEY, commit_id TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS hashed (git TEXT PRIMARY KEY, strata TEXT NOT NULL);"
        )
        self.git_dir = str(git_dir)

    def get_meta(self, key: str) -> str | None:
        """A value of the ``meta`` table (the cursor, the git folder)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the ``meta`` table (committed with the next commit)."""
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def tips(self) -> dict[str, str]:
        """The commit each ``strata/<branch>`` had when this table was last written."""
        return {str(b): str(c) for b, c in self.db.execute("SELECT branch, commit_id FROM tips")}

    def reset(self) -> None:
        """Forget the cursor, the tips and the commits (objects stay: git keeps them)."""
        for table in ("events", "tips"):
            self.db.execute(f"DELETE FROM {table}")
        self.set_meta("cursor", "0")
        self.set_meta("git_dir", self.git_dir)
        self.db.commit()

    def close(self) -> None:
        """Close the table."""
        self.db.close()


# -- Strata trees as git trees -------------------------------------------------------------


class _Writer:
    """Writes Strata objects into a git object database, each once (memoized in sync.db)."""

    def __init__(self, core: Core, repo: pygit2.Repository, state: SyncState) -> None:
        self.core = core
        self.repo = repo
        self.state = state
        self.memo: dict[tuple[str, str], str] = {}

    def _known(self, kind: str, oid: str) -> str | None:
        key = (kind, oid)
        hit = self.memo.get(key)
        if hit is None:
            row = self.state.db.execute(
                "SELECT git FROM objects WHERE kind = ? AND strata = ?", key
            ).fetchone()
            hit = str(row[0]) if row else ""
            if hit and hit not in self.repo:  # collected by git since: write it again
                hit = ""
            self.memo[key] = hit
        return hit or None

    def _remember(self, kind: str, oid: str, git: str) -> str:
        self.memo[(kind, oid)] = git
        self.state.db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", (kind, oid, git))
        return git

    def blob(self, oid: str) -> str:
        """The git blob holding a Strata object's bytes."""
        known = self._known("blob", oid)
        if known:
            return known
        data = self.core.objects.get(ObjectId(oid))
        return self._remember("blob", oid, str(self.repo.create_blob(data)))

    def files(self, tree: str) -> str:
        """The git tree of a Strata tree's files (modes: 644, 755, links, folders)."""
        known = self._known("files", tree)
        if known:
            return known
        builder = self.repo.TreeBuilder()
        for e in read_tree(self.core.objects, ObjectId(tree)):
            if not _utf8(e.name):
                raise SyncError(
                    f"the name {e.name.encode('utf-8', 'surrogateescape')!r} is not UTF-8: "
                    "the Git sync cannot carry it",
                    hint="rename the file (an audit bundle carries any name)",
                )
            if e.kind == "dir":
                builder.insert(e.name, _oid(self.files(e.oid)), _TREE)
            elif e.kind == "symlink":
                builder.insert(e.name, _oid(self.blob(e.oid)), _LINK)
            else:
                builder.insert(e.name, _oid(self.blob(e.oid)), _EXEC if e.mode & 0o111 else _FILE)
        return self._remember("files", tree, str(builder.write()))

    def shadow(self, tree: str) -> str:
        """The git tree holding a Strata tree's raw objects: ``tree`` and ``_<folder>``."""
        known = self._known("shadow", tree)
        if known:
            return known
        builder = self.repo.TreeBuilder()
        builder.insert("tree", _oid(self.blob(tree)), _FILE)
        for e in read_tree(self.core.objects, ObjectId(tree)):
            if e.kind == "dir":
                builder.insert("_" + e.name, _oid(self.shadow(e.oid)), _TREE)
        return self._remember("shadow", tree, str(builder.write()))

    def snapshot(self, snapshot_id: str) -> tuple[str, str]:
        """``(tree of .strata-sync/snapshots/<id>, tree of the files)``."""
        manifest = self.core.manifest(snapshot_id)  # type: ignore[arg-type]
        tree = str(manifest["tree"])
        files = self.files(tree)
        builder = self.repo.TreeBuilder()
        builder.insert("manifest", _oid(self.blob(snapshot_id)), _FILE)
        builder.insert("files", _oid(files), _TREE)
        builder.insert("shadow", _oid(self.shadow(tree)), _TREE)
        return str(builder.write()), files


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _oid(text: str) -> pygit2.Oid:
    import pygit2

    return pygit2.Oid(hex=text)


# -- checking a snapshot against git, and bringing it in -----------------------------------


def check_snapshot(
    repo: pygit2.Repository,
    folder: pygit2.Tree,
    snapshot_id: str,
    *,
    where: str,
    store: Any = None,
    hashed: dict[str, str] | None = None,
) -> None:
    """Hash a synced snapshot's folder again; raise :class:`SyncMismatch` at the first difference.

    ``folder`` is ``.strata-sync/snapshots/<id>``. The manifest, every Strata
    tree and every file is hashed from git's copy and compared with the ids
    the Strata trees name. With ``store``, every object checked is also put
    there (an import): nothing enters the store unverified.
    """
    import pygit2

    hashed = {} if hashed is None else hashed

    def blob_bytes(tree: pygit2.Tree, name: str, path: str) -> bytes:
        if name not in tree:
            raise SyncMismatch(where, path, "missing")
        obj = repo[tree[name].id]
        if not isinstance(obj, pygit2.Blob):
            raise SyncMismatch(where, path, "not a file")
        return bytes(obj.data)

    manifest = blob_bytes(folder, "manifest", "manifest")
    if hash_bytes(manifest) != snapshot_id:
        raise SyncMismatch(where, "manifest", f"its hash is not {snapshot_id}")
    try:
        tree_id = str(json.loads(manifest)["tree"])
    except (ValueError, KeyError, TypeError):
        raise SyncMismatch(where, "manifest", "unreadable") from None
    if store is not None:
        store.put(manifest, oid=ObjectId(snapshot_id))

    def walk(files: pygit2.Tree, shadow: pygit2.Tree, expected: str, path: str) -> None:
        raw = blob_bytes(shadow, "tree", path + "/")
        if hash_bytes(raw) != expected:
            raise SyncMismatch(where, path, f"its tree is not {expected}")
        entries = decode_tree(raw, expected)
        names = {e.name for e in entries}
        for item in files:
            if item.name not in names:
                raise SyncMismatch(where, _join(path, str(item.name)), "not in the snapshot")
        for e in entries:
            sub = _join(path, e.name)
            if e.name not in files:
                raise SyncMismatch(where, sub, "missing")
            item = files[e.name]
            if e.kind == "dir":
                if item.filemode != _TREE or ("_" + e.name) not in shadow:
                    raise SyncMismatch(where, sub, "not a folder")
                if str(item.id) + e.oid in hashed:
                    continue  # this folder was checked already
                child = repo[item.id]
                child_shadow = repo[shadow["_" + e.name].id]
                assert isinstance(child, pygit2.Tree) and isinstance(child_shadow, pygit2.Tree)
                walk(child, child_shadow, e.oid, sub)
                hashed[str(item.id) + e.oid] = "ok"
                continue
            want_mode = _LINK if e.kind == "symlink" else _EXEC if e.mode & 0o111 else _FILE
            if item.filemode != want_mode:
                raise SyncMismatch(where, sub, f"mode {item.filemode:o}, not {want_mode:o}")
            git_id = str(item.id)
            seen = hashed.get(git_id)
            if seen is None or (store is not None and not store.has(ObjectId(e.oid))):
                data = blob_bytes(files, e.name, sub)
                seen = hashed[git_id] = hash_bytes(data)
                if store is not None and seen == e.oid:
                    store.put(data, oid=ObjectId(e.oid))
            if seen != e.oid:
                raise SyncMismatch(where, sub, "its content differs")
        if store is not None:
            store.put(raw, oid=ObjectId(expected))

    files, shadow = repo[folder["files"].id], repo[folder["shadow"].id]
    if not isinstance(files, pygit2.Tree) or not isinstance(shadow, pygit2.Tree):
        raise SyncMismatch(where, "", "the snapshot's folders are missing")
    walk(files, shadow, tree_id, "")


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


# -- the sync ------------------------------------------------------------------------------


class GitSync:
    """Syncs one repository's ledger into one git repository."""

    def __init__(self, core: Core, git_dir: Path | None = None) -> None:
        import pygit2

        self.core = core
        self.git_dir = git_dir or git_dir_of(core)
        self.repo = pygit2.Repository(str(self.git_dir))
        self.state = SyncState(core.layout.repo / "sync.db", self.git_dir)

    def close(self) -> None:
        """Release the table."""
        self.state.close()

    def __enter__(self) -> GitSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- refs

    def refs(self, prefix: str) -> dict[str, str]:
        """Every ref under ``prefix`` (name without it -> target id)."""
        out: dict[str, str] = {}
        for name in self.repo.references:
            if name.startswith(prefix):
                ref = self.repo.references[name]
                out[name[len(prefix) :]] = str(ref.target)
        return out

    def _set_ref(self, name: str, target: str) -> None:
        self.repo.references.create(name, _oid(target), force=True)

    # -- sync

    def sync(self, *, until_operation: str | None = None, verify: bool = True) -> SyncResult:
        """Write a commit per operation not yet synced; move the tags; check what was written."""
        result = SyncResult(self.git_dir)
        state = self.state
        tips = state.tips()
        current = self.refs(BRANCH_PREFIX)
        cursor = int(state.get_meta("cursor") or 0)
        if state.get_meta("git_dir") != str(self.git_dir) or any(
            current.get(b) != c for b, c in tips.items()
        ):
            state.reset()  # another repository, or refs moved by hand: start over (same commits)
            tips, cursor = {}, 0
        writer = _Writer(self.core, self.repo, state)
        driver = self.core.ledger.driver
        found = until_operation is None
        for record in driver.scan(start=cursor + 1, kind="operation"):
            op = record.body
            for synced in self._commit_operation(writer, op, record.seq, tips):
                result.commits.append(synced)
                self._set_ref(BRANCH_PREFIX + synced.branch, synced.commit)
            state.set_meta("cursor", str(record.seq))
            state.db.commit()  # the refs first, then the cursor: a kill in between re-syncs
            if until_operation is not None and op["id"] == until_operation:
                found = True
                break
        if not found:
            raise UsageError(
                f"operation {until_operation} is not in the ledger (or was synced already)",
                hint="'strata op log' lists operations",
            )
        self._sync_tags(writer, result)
        result.branches = self.refs(BRANCH_PREFIX)
        result.tags = self.refs(TAG_PREFIX)
        if verify:
            result.verified = self.verify([c.commit for c in result.commits])
        return result

    def _commit_operation(
        self, writer: _Writer, op: dict[str, Any], seq: int, tips: dict[str, str]
    ) -> Iterator[SyncedCommit]:
        import pygit2

        driver = self.core.ledger.driver
        before = View.from_json(op["view_before"])
        after = View.from_json(op["view_after"])
        events: list[dict[str, Any]] = []
        for event_id in op.get("events") or ():
            found = driver.seek_event(str(event_id))
            if found is not None:
                events.append(found.body)
        touched = {str(e.get("branch") or "") for e in events} | {
            b for b in after.branches if before.branches.get(b) != after.branches.get(b)
        }
        for branch in sorted(b for b in touched if b):
            tip = after.branches.get(branch)
            if tip is None:
                continue  # the branch was deleted: its git branch stays as it was
            own = [e for e in events if e.get("branch") == branch]
            snapshots: dict[str, str] = {}
            for body in own:
                if body.get("snapshot_ref"):
                    snapshots[str(body["id"])] = str(body["snapshot_ref"])
            tip_snapshot = driver.snapshot_of(tip)
            if tip_snapshot is None:
                continue
            snapshots[tip] = tip_snapshot
            parent = tips.get(branch) or self._fork_point(tip, own)
            sync_folder = self.repo.TreeBuilder()
            snap_builder = self.repo.TreeBuilder()
            tip_files = ""
            for snapshot_id in sorted(set(snapshots.values())):
                folder, files = writer.snapshot(snapshot_id)
                snap_builder.insert(snapshot_id, _oid(folder), _TREE)
                if snapshot_id == tip_snapshot:
                    tip_files = files
            artifacts = sorted({str(a) for body in own for a in body.get("artifacts") or () if a})
            if artifacts:
                objects = self.repo.TreeBuilder()
                for oid in artifacts:
                    if self.core.objects.has(ObjectId(oid)):
                        objects.insert(oid, _oid(writer.blob(oid)), _FILE)
                sync_folder.insert("objects", objects.write(), _TREE)
            manifest = {
                "format": FORMAT,
                "branch": branch,
                "operation": {
                    "id": op["id"],
                    "command": op.get("command"),
                    "author": op.get("author"),
                    "ts": op.get("ts"),
                    "seq": seq,
                },
                "events": own,
                "snapshots": snapshots,
                "tip": {"event_id": tip, "snapshot_id": tip_snapshot},
            }
            sync_folder.insert(
                "manifest.json",
                self.repo.create_blob(json.dumps(manifest, sort_keys=True, indent=1).encode()),
                _FILE,
            )
            sync_folder.insert("snapshots", snap_builder.write(), _TREE)
            root_tree = self.repo[_oid(tip_files)]
            assert isinstance(root_tree, pygit2.Tree)
            if SYNC_DIR in root_tree:
                raise SyncError(
                    f"the workspace holds a folder {SYNC_DIR}, the name the sync keeps its "
                    "records under",
                    hint=f"rename {SYNC_DIR} in the workspace",
                )
            root = self.repo.TreeBuilder(root_tree)
            root.insert(SYNC_DIR, sync_folder.write(), _TREE)
            names = sorted(n for n, b in after.bookmarks.items() if b.target in snapshots)
            message = _message(op, branch, own, tip, tip_snapshot, names, seq)
            author = _signature(op.get("author") or {}, str(op.get("ts") or ""))
            committer = _signature(
                {"name": COMMITTER[0], "email": COMMITTER[1]}, str(op.get("ts") or "")
            )
            commit = str(
                self.repo.create_commit(
                    None,
                    author,
                    committer,
                    message,
                    root.write(),
                    [_oid(parent)] if parent else [],
                )
            )
            tips[branch] = commit
            self.state.db.execute("INSERT OR REPLACE INTO tips VALUES (?, ?)", (branch, commit))
            self.state.db.executemany(  # the first commit holding an event keeps it
                "INSERT OR IGNORE INTO events VALUES (?, ?)",
                [(event_id, commit) for event_id in snapshots],
            )
            yield SyncedCommit(
                op["id"],
                branch,
                commit,
                str(own[0]["id"]) if own else None,
                str(own[-1]["id"]) if own else None,
            )

    def _fork_point(self, tip: str, own: list[dict[str, Any]]) -> str | None:
        """The commit of the nearest synced ancestor of a branch's first events (its fork)."""
        starts = [str(b["parent_event_id"]) for b in own if b.get("parent_event_id")]
        for start in [*starts, tip]:
            try:
                for body in self.core.ledger.ancestors(start):
                    row = self.state.db.execute(
                        "SELECT commit_id FROM events WHERE event = ?", (str(body["id"]),)
                    ).fetchone()
                    if row:
                        return str(row[0])
            except KeyError:
                continue
        return None

    def _sync_tags(self, writer: _Writer, result: SyncResult) -> None:
        """One annotated tag ``strata/<bookmark>`` per bookmark; tags of deleted ones go."""
        view = self.core.view()
        existing = self.refs(TAG_PREFIX)
        for name, mark in view.bookmarks.items():
            tag = self._tag_object(name, mark)
            if tag is not None and existing.get(name) != tag:
                self._set_ref(TAG_PREFIX + name, tag)
        for name in existing.keys() - view.bookmarks.keys():
            self.repo.references.delete(TAG_PREFIX + name)

    def _tag_object(self, name: str, mark: Bookmark) -> str | None:
        import pygit2

        row = self.state.db.execute(
            "SELECT commit_id FROM events WHERE event = ?", (mark.target,)
        ).fetchone()
        if not row:
            return None
        try:
            ts = str(self.core.ledger.event(mark.target).get("ts") or "")
        except KeyError:
            return None
        tagger = _signature({"name": COMMITTER[0], "email": COMMITTER[1]}, ts)
        text = (
            f"object {row[0]}\ntype commit\ntag strata/{name}\n"
            f"tagger {tagger.name} <{tagger.email}> {tagger.time} +0000\n\n"
            f"strata bookmark {name}\n\nStrata-Bookmark: {name}\nStrata-Event: {mark.target}\n"
            f"Strata-Locked: {'yes' if mark.locked else 'no'}\n"
        )
        return str(self.repo.odb.write(pygit2.GIT_OBJECT_TAG, text.encode()))

    def tag(self, bookmark: str) -> dict[str, Any]:
        """Sync, then make sure ``strata/<bookmark>`` names the bookmark's event."""
        view = self.core.view()
        if bookmark not in view.bookmarks:
            from strata.errors import UnknownRef

            raise UnknownRef(bookmark, hint="'strata bookmark list' shows the bookmarks")
        result = self.sync()
        tag = result.tags.get(bookmark)
        if tag is None:
            raise SyncError(f"bookmark {bookmark} points at an event no synced commit holds")
        obj = self.repo[_oid(tag)]
        target = str(getattr(obj, "target", tag))
        return {
            "schema": 1,
            "bookmark": bookmark,
            "tag": f"strata/{bookmark}",
            "commit": target,
            "event_id": view.bookmarks[bookmark].target,
        }

    # -- verification

    def verify(self, commits: list[str] | None = None) -> int:
        """Check commits (every ``strata/`` commit when None) against the snapshots they name.

        Returns how many snapshots were checked; raises :class:`SyncMismatch` at
        the first difference (a file, a mode, a tree, a manifest).
        """
        import pygit2

        if commits is None:
            seen: set[str] = set()
            commits = []
            for tip in self.refs(BRANCH_PREFIX).values():
                for walked in self.repo.walk(_oid(tip)):
                    if str(walked.id) not in seen:
                        seen.add(str(walked.id))
                        commits.append(str(walked.id))
        hashed: dict[str, str] = {
            str(g): str(s) for g, s in self.state.db.execute("SELECT git, strata FROM hashed")
        }
        known = dict(hashed)
        checked = 0
        for sha in commits:
            commit = self.repo.get(sha)
            assert isinstance(commit, pygit2.Commit)
            manifest, folder = _read_commit(self.repo, commit)
            where = f"commit {sha[:12]}"
            snapshots = manifest.get("snapshots") or {}
            for event_id, snapshot_id in sorted(snapshots.items()):
                ours = self.core.ledger.driver.snapshot_of(str(event_id))
                if ours != snapshot_id:
                    raise SyncMismatch(where, "", f"event {event_id} has snapshot {ours} here")
                sub = folder["snapshots"]
                check_snapshot(
                    self.repo,
                    _subtree(self.repo, sub, str(snapshot_id)),
                    str(snapshot_id),
                    where=where,
                    hashed=hashed,
                )
                checked += 1
            tip_snapshot = str((manifest.get("tip") or {}).get("snapshot_id"))
            tip_folder = _subtree(self.repo, folder["snapshots"], tip_snapshot)
            root = self.repo.TreeBuilder(commit.tree)
            root.remove(SYNC_DIR)
            if str(root.write()) != str(tip_folder["files"].id):
                raise SyncMismatch(where, "", "its files are not the tip's snapshot")
        self.state.db.executemany(
            "INSERT OR REPLACE INTO hashed VALUES (?, ?)",
            [(g, s) for g, s in hashed.items() if g not in known],
        )
        self.state.db.commit()
        return checked

    # -- remotes

    def push(self, remote: str, refs: list[str] | None = None) -> dict[str, Any]:
        """Send the ``strata/`` branches and tags (or ``refs``) to ``remote`` by git's transport."""
        # a tag moves with its bookmark (forced); a branch only grows (git refuses a rewrite)
        specs = refs or [f"{BRANCH_PREFIX}*:{BRANCH_PREFIX}*", f"+{TAG_PREFIX}*:{TAG_PREFIX}*"]
        _git(self.git_dir, "push", "--porcelain", "--quiet", remote, *specs)
        return {
            "schema": 1,
            "remote": remote,
            "branches": self.refs(BRANCH_PREFIX),
            "tags": self.refs(TAG_PREFIX),
        }

    def fetch(self, remote: str) -> dict[str, Any]:
        """Bring ``remote``'s ``strata/`` branches and tags to ``refs/remotes/<remote>/…``."""
        name = remote_name(remote)
        branches = f"refs/remotes/{name}/strata/"
        tags = f"refs/strata-tags/{name}/"
        _git(
            self.git_dir,
            "fetch",
            "--quiet",
            "--no-tags",
            "--prune",
            remote,
            f"+{BRANCH_PREFIX}*:{branches}*",
            f"+{TAG_PREFIX}*:{tags}*",
        )
        return {
            "schema": 1,
            "remote": name,
            "branches": self.refs(branches),
            "tags": self.refs(tags),
        }


def remote_name(remote: str) -> str:
    """The name a remote's refs are kept under: its git name, never a URL."""
    if not _PLAIN_NAME.match(remote):
        raise UsageError(
            f"give a git remote's name, not {remote!r}",
            hint=f"add it first: git remote add NAME {remote}",
        )
    return remote


def _subtree(repo: pygit2.Repository, tree_entry: Any, name: str) -> pygit2.Tree:
    import pygit2

    tree = repo[tree_entry.id]
    if not isinstance(tree, pygit2.Tree) or name not in tree:
        raise SyncMismatch("sync", name, "the snapshot's folder is missing")
    sub = repo[tree[name].id]
    assert isinstance(sub, pygit2.Tree)
    return sub


def _read_commit(repo: pygit2.Repository, commit: pygit2.Commit) -> tuple[dict[str, Any], Any]:
    """A synced commit's manifest and its ``.strata-sync`` tree."""
    import pygit2

    where = f"commit {str(commit.id)[:12]}"
    if SYNC_DIR not in commit.tree:
        raise SyncError(f"{where} was not written by 'strata vcs sync' (no {SYNC_DIR})")
    folder = repo[commit.tree[SYNC_DIR].id]
    if not isinstance(folder, pygit2.Tree) or "manifest.json" not in folder:
        raise SyncError(f"{where} has no {SYNC_DIR}/manifest.json")
    blob = repo[folder["manifest.json"].id]
    try:
        manifest = json.loads(bytes(getattr(blob, "data", b"")))
    except ValueError:
        raise SyncError(f"{where}: {SYNC_DIR}/manifest.json is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SyncError(f"{where}: unknown sync format {manifest.get('format')!r}")
    return manifest, folder


def _signature(author: dict[str, Any], ts: str) -> pygit2.Signature:
    import pygit2

    name = str(author.get("name") or "unknown")
    email = str(author.get("email") or f"{author.get('kind') or 'human'}@strata")
    try:
        when = int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp())
    except ValueError:
        when = 0
    return pygit2.Signature(name, email, when, 0)


def _message(
    op: dict[str, Any],
    branch: str,
    own: list[dict[str, Any]],
    tip: str,
    snapshot: str,
    bookmarks: list[str],
    seq: int,
) -> str:
    author = op.get("author") or {}
    rationale = next(
        (str(b["rationale"]).splitlines()[0] for b in reversed(own) if b.get("rationale")), ""
    )
    title = f"strata {op.get('command')}" + (f": {rationale}" if rationale else "")
    lines = [
        title[:200],
        "",
        f"Strata-Operation: {op['id']}",
        f"Strata-Branch: {branch}",
        f"Strata-Author: {author.get('name')} ({author.get('kind')})",
    ]
    if own:
        lines += [f"Strata-First-Event: {own[0]['id']}", f"Strata-Last-Event: {own[-1]['id']}"]
    lines += [f"Strata-Event: {tip}", f"Strata-Snapshot: {snapshot}", f"Strata-Seq: {seq}"]
    if bookmarks:
        lines.append(f"Strata-Bookmarks: {', '.join(bookmarks)}")
    return "\n".join(lines) + "\n"


# -- import --------------------------------------------------------------------------------


def parse_source(source: str) -> tuple[str, str]:
    """``git:REMOTE/strata/BRANCH`` -> ``(REMOTE, BRANCH)``."""
    body = source.removeprefix("git:")
    remote, sep, branch = body.partition("/strata/")
    if not source.startswith("git:") or not sep or not remote or not branch:
        raise UsageError(
            f"cannot import {source!r}",
            hint="give git:REMOTE/strata/BRANCH, e.g. git:origin/strata/main",
        )
    return remote_name(remote), branch


def import_ref(core: Core, sync: GitSync, source: str, *, fetch: bool = True) -> ImportResult:
    """Bring ``git:REMOTE/strata/BRANCH`` in: its events, objects and bookmarks.

    Each remote branch ``B`` met on the way becomes ``REMOTE/B`` here; events
    this ledger already holds are kept as they are. Everything is verified
    before one operation (``import``) records it: an import is one undo away.
    """
    remote, branch = parse_source(source)
    if fetch:
        sync.fetch(remote)
    ref = f"refs/remotes/{remote}/strata/{branch}"
    if ref not in sync.repo.references:
        raise SyncError(
            f"{remote} has no strata/{branch}",
            hint=f"'git ls-remote {remote} refs/heads/strata/*' lists what it has",
        )
    # under the write lock from the first object stored to the operation naming it:
    # a gc in between would take the objects for unreferenced ones
    with core.writing():
        return _import_chain(core, sync, source, remote, ref)


def _import_chain(core: Core, sync: GitSync, source: str, remote: str, ref: str) -> ImportResult:
    import pygit2

    repo = sync.repo
    tip = repo.references[ref].target
    chain = [c for c in repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL)]
    chain.reverse()  # oldest first
    driver = core.ledger.driver
    result = ImportResult(source)
    bodies: list[dict[str, Any]] = []
    fresh: set[str] = set()
    tips: dict[str, str] = {}
    hashed: dict[str, str] = {}
    for commit in chain:
        manifest, folder = _read_commit(repo, commit)
        where = f"commit {str(commit.id)[:12]}"
        local = f"{remote}/{manifest.get('branch')}"
        check_ref_name(local, what="branch")
        snapshots = manifest.get("snapshots") or {}
        for snapshot_id in sorted(set(snapshots.values())):
            if core.objects.has(ObjectId(str(snapshot_id))):
                continue  # (a whole snapshot: the ledger named it, so check passed it)
            check_snapshot(
                repo,
                _subtree(repo, folder["snapshots"], str(snapshot_id)),
                str(snapshot_id),
                where=where,
                store=core.objects,
                hashed=hashed,
            )
        if "objects" in folder:
            objects = repo[folder["objects"].id]
            assert isinstance(objects, pygit2.Tree)
            for item in objects:
                data = bytes(getattr(repo[item.id], "data", b""))
                if hash_bytes(data) != item.name:
                    raise SyncMismatch(where, f"objects/{item.name}", "its hash differs")
                core.objects.put(data, oid=ObjectId(item.name))
        for body in manifest.get("events") or ():
            event_id = str(body.get("id"))
            if event_id in fresh or driver.seek_event(event_id) is not None:
                result.skipped += 1
                continue
            fresh.add(event_id)
            bodies.append({**body, "branch": f"{remote}/{body.get('branch')}"})
        tip_event = str((manifest.get("tip") or {}).get("event_id") or "")
        if tip_event:
            tips[local] = tip_event
    known = {b["id"] for b in bodies}
    for body in bodies:
        for key in ("parent_event_id", "anchor_event_id"):
            target = body.get(key)
            if target and target not in known and driver.seek_event(str(target)) is None:
                raise SyncError(
                    f"event {body['id']} names {key.split('_')[0]} {target}, which neither "
                    f"{source} nor this ledger holds",
                    hint="import the branch it was forked from first",
                )
    marks = _remote_bookmarks(sync, remote)

    def held(event_id: str) -> bool:  # (the driver of the moment: writing() may reopen it)
        return event_id in known or core.ledger.driver.seek_event(event_id) is not None

    with core.writing():
        view = core.view()
        branches = dict(view.branches)
        for name, event_id in tips.items():
            now = branches.get(name)
            if not held(event_id) or now == event_id:
                continue
            if now is None or not core.ledger.is_ancestor(event_id, now):
                branches[name] = event_id  # forward only: an older import never moves it back
        bookmarks = dict(view.bookmarks)
        for name, (event_id, locked) in marks.items():
            local_mark = f"{remote}/{name}"
            if held(event_id) and (local_mark not in bookmarks or not bookmarks[local_mark].locked):
                bookmarks[local_mark] = Bookmark(event_id, locked)
                result.bookmarks.append(local_mark)
        if bodies or branches != view.branches or bookmarks != view.bookmarks:
            with core.transaction("import", remote=remote, source=source) as tx:
                tx.op.events.extend(bodies)
                tx.set_view(moved(tx.view, branches=branches, bookmarks=bookmarks))
    result.events = len(bodies)
    result.branches = {n: t for n, t in branches.items() if n in tips}
    return result


def _remote_bookmarks(sync: GitSync, remote: str) -> dict[str, tuple[str, bool]]:
    """The bookmarks a fetched remote shares: name -> (event id, locked)."""
    out: dict[str, tuple[str, bool]] = {}
    for name, target in sync.refs(f"refs/strata-tags/{remote}/").items():
        message = str(getattr(sync.repo[_oid(target)], "message", ""))
        fields = dict(
            line.split(": ", 1) for line in message.splitlines() if line.startswith("Strata-")
        )
        event_id = fields.get("Strata-Event")
        if event_id:
            out[name] = (event_id, fields.get("Strata-Locked") == "yes")
    return out


def share_bookmark(core: Core, name: str, remote: str) -> dict[str, Any]:
    """Sync, then push the bookmark's tag and the branch holding its event to ``remote``."""
    with GitSync(core) as sync:
        tagged = sync.tag(name)
        branch = str(core.ledger.event(tagged["event_id"]).get("branch") or "")
        refs = [f"+{TAG_PREFIX}{name}:{TAG_PREFIX}{name}"]
        if branch and branch in sync.refs(BRANCH_PREFIX):
            refs.append(f"{BRANCH_PREFIX}{branch}:{BRANCH_PREFIX}{branch}")
        sync.push(remote, refs)
    return {**tagged, "remote": remote, "branch": branch}
