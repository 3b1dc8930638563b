"""The git backend of runs: snapshots as commits in the workspace's own git repository.

A snapshot is ``git add -A`` into a private, persistent index
(``.git/strata/index``, seeded once from the user's index so unchanged files
are not re-hashed), then ``write-tree`` and ``commit-tree``; the commit is
kept alive by a ref under ``refs/strata/``. The user's index, HEAD,
branches, stash, tags and untracked files are never touched: every command
names the private index through ``GIT_INDEX_FILE`` and writes only objects
and ``refs/strata/…`` refs. When the user has no identity, Strata signs the
commits itself.

Strata's diff, rollback and ledger work on its own trees, so a commit's tree
is imported into the repository's object store (:func:`import_commit`); a
small table (``gitmap.db``) remembers which git object became which Strata
object, so an unchanged folder is imported once.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import GitBackendError, RunError, UnknownRef
from strata.ids import ObjectId
from strata.store.objects import ObjectStore
from strata.store.tree import TreeEntry, encode_tree

if TYPE_CHECKING:
    from strata.core import Core

REF_PREFIX = "refs/strata/"
IDENTITY = ("Strata", "strata@localhost")
_FILE_MODES = {0o100644: 0o644, 0o100755: 0o755}
_LINK, _TREE = 0o120000, 0o040000


@dataclass
class GitWorkspace:
    """A git work tree whose top-level folder is a workspace."""

    root: Path
    git_dir: Path
    _env: dict[str, str] | None = field(default=None, repr=False)

    @classmethod
    def find(cls, root: Path) -> GitWorkspace | None:
        """The git work tree whose top level is ``root``; None when ``root`` is not one."""
        if shutil.which("git") is None:
            return None
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "--absolute-git-dir"],
            capture_output=True,
            check=False,
        )
        lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
        if proc.returncode != 0 or len(lines) != 2:
            return None
        if Path(lines[0]).resolve() != root.resolve():
            return None
        return cls(root.resolve(), Path(lines[1]))

    @property
    def index(self) -> Path:
        """The private index Strata's snapshots are staged in."""
        return self.git_dir / "strata" / "index"

    def env(self) -> dict[str, str]:
        """The environment of every git command: the private index, an identity if needed."""
        if self._env is None:
            env = dict(os.environ)  # passed through to git, not interpreted here
            for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
                env.pop(name, None)
            for who in ("AUTHOR", "COMMITTER"):
                probe = subprocess.run(
                    [*self._base(), "var", f"GIT_{who}_IDENT"],
                    capture_output=True,
                    env=env,
                    check=False,
                )
                if probe.returncode != 0:
                    env[f"GIT_{who}_NAME"], env[f"GIT_{who}_EMAIL"] = IDENTITY
            env["GIT_INDEX_FILE"] = str(self.index)
            self._env = env
        return self._env

    def _base(self) -> list[str]:
        return [
            "git",
            f"--git-dir={self.git_dir}",
            f"--work-tree={self.root}",
            "-C",
            str(self.root),
        ]

    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> str:
        """Run one git command on the private index; its stdout, stripped."""
        proc = subprocess.run(
            [*self._base(), *args], capture_output=True, env=self.env(), input=input, check=False
        )
        if check and proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise GitBackendError(
                f"git {args[0]} failed: {message[-1] if message else proc.returncode}"
            )
        return proc.stdout.decode("utf-8", "surrogateescape").strip()

    def snapshot(self, message: str, *, ignore: Sequence[str] = ()) -> str:
        """Commit the work tree as it is (untracked files included, ignored ones not)."""
        self.index.parent.mkdir(parents=True, exist_ok=True)
        # the caller holds the repository's write lock: a lock file left here is a killed run's
        self.index.with_name("index.lock").unlink(missing_ok=True)
        user_index = self.git_dir / "index"
        if not self.index.exists() and user_index.exists():
            temp = self.index.with_name("index.seed")
            shutil.copyfile(user_index, temp)  # its stat data spares re-hashing unchanged files
            os.replace(temp, self.index)
        excludes = [spec for pattern in ignore for spec in _pathspecs(pattern)]
        if excludes:
            positive = [s.replace(":(exclude,glob)", ":(glob)") for s in excludes]
            self.git("rm", "--cached", "-r", "-q", "--ignore-unmatch", "--", *positive)
        self.git("add", "-A", "--", ".", *excludes)
        tree = self.git("write-tree")
        parent = self.git("rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
        args = ["commit-tree", tree, "-m", message or "strata snapshot"]
        if parent:
            args += ["-p", parent]
        return self.git(*args)

    def set_ref(self, name: str, sha: str) -> str:
        """Point ``refs/strata/<name>`` at ``sha``; return the full ref name."""
        ref = REF_PREFIX + name
        self.git("update-ref", ref, sha)
        return ref

    def resolve(self, rev: str) -> str:
        """The commit id ``rev`` names (``UnknownRef`` if none)."""
        if not rev or rev.startswith("-"):
            raise UnknownRef(f"git:{rev}")
        sha = self.git("rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False)
        if not sha:
            raise UnknownRef(f"git:{rev}", hint="give a commit of the workspace's git repository")
        return sha


@dataclass(frozen=True)
class GitHead:
    """Where git's HEAD was: its commit (None on an unborn branch) and branch (None: detached)."""

    commit: str | None
    branch: str | None

    def to_json(self) -> dict[str, Any]:
        """As kept in a run's event and printed by ``strata run --json``."""
        return {"commit": self.commit, "branch": self.branch}

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> GitHead | None:
        """Parse :meth:`to_json` (None stays None)."""
        if not raw:
            return None
        return cls(raw.get("commit"), raw.get("branch"))


def _git_out(folder: Path, *args: str) -> tuple[int, str]:
    proc = subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, check=False, env=_plain_env()
    )
    return proc.returncode, proc.stdout.decode("utf-8", "surrogateescape").strip()


def _plain_env() -> dict[str, str]:
    """The environment minus variables that would point git at another repository."""
    env = dict(os.environ)  # passed through to git, not interpreted here
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(name, None)
    return env


def read_head(folder: Path) -> GitHead | None:
    """Git's HEAD for the work tree holding ``folder``; None outside a git work tree."""
    if shutil.which("git") is None:
        return None
    code, inside = _git_out(folder, "rev-parse", "--is-inside-work-tree")
    if code != 0 or inside != "true":
        return None
    _, commit = _git_out(folder, "rev-parse", "-q", "--verify", "HEAD^{commit}")
    code, branch = _git_out(folder, "symbolic-ref", "-q", "--short", "HEAD")
    return GitHead(commit or None, branch if code == 0 and branch else None)


def index_path(folder: Path) -> Path | None:
    """The user's git index of the work tree holding ``folder`` (None outside git)."""
    code, path = _git_out(folder, "rev-parse", "--git-path", "index")
    return (folder / path) if code == 0 and path else None


def check_rollback_git(folder: Path, head: GitHead | None) -> None:
    """Refuse ``--rollback-git`` where it cannot work: outside git, or with a detached HEAD."""
    if head is None:
        raise RunError(
            f"--rollback-git needs a git work tree; {folder} is not in one",
            hint="leave out --rollback-git",
        )
    if head.branch is None or head.commit is None:
        raise RunError(
            "--rollback-git needs HEAD on a branch with a commit; HEAD is "
            + ("detached" if head.branch is None else f"the unborn branch {head.branch}"),
            hint="check out a branch first, or leave out --rollback-git",
        )


def rollback_git(
    folder: Path, run_id: str, before: GitHead, after: GitHead, saved_index: Path | None
) -> str:
    """Move the branch back to ``before``; keep the run's commits on ``failed/<run id>``.

    The user's index is put back from ``saved_index`` (its copy from before
    the run). Returns the branch that keeps the commits. Refuses
    (:class:`RunError`) when HEAD changed branch or was detached during the run.
    """
    if before.branch is None or before.commit is None:
        raise RunError("not moving git's branch back: HEAD was not on a branch before the run")
    if after.branch != before.branch:
        where = f"branch {after.branch}" if after.branch else "a detached HEAD"
        raise RunError(
            f"not moving git's branch back: HEAD moved from branch {before.branch} to {where} "
            "during the run",
            hint=f"the run's files were handled; move {before.branch} yourself if needed",
        )
    assert after.commit is not None
    keep = f"failed/{run_id}"
    for args in (
        ("update-ref", f"refs/heads/{keep}", after.commit, ""),
        ("update-ref", f"refs/heads/{before.branch}", before.commit, after.commit),
    ):
        code, _ = _git_out(folder, *args)
        if code != 0:
            raise RunError(
                f"not moving git's branch back: 'git {' '.join(args[:2])}' failed "
                f"(the branch {before.branch} changed meanwhile?)"
            )
    index = index_path(folder)
    if saved_index is not None and index is not None and saved_index.exists():
        os.replace(saved_index, index)
    return keep


def exclude_from_git(path: Path) -> Path | None:
    """Add ``path`` (a file in a git work tree) to the repository's ``info/exclude``.

    Idempotent; the exclude file (and its folder) is made when missing; the
    work tree's ``.gitignore`` files are never touched. Returns the exclude
    file, or None when ``path`` is not in a git work tree.
    """
    from strata.atomic import atomic_write

    if shutil.which("git") is None:
        return None
    folder = path.parent.resolve()
    proc = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--show-toplevel", "--git-path", "info/exclude"],
        capture_output=True,
        check=False,
    )
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        return None
    top, exclude = Path(lines[0]).resolve(), folder / lines[1]
    try:
        rel = (folder / path.name).relative_to(top).as_posix()
    except ValueError:
        return None
    pattern = "/" + "".join("\\" + c if c in "\\*?[" else c for c in rel)
    if pattern[1:2] in ("#", "!"):
        pattern = "/\\" + pattern[1:]
    text = exclude.read_bytes() if exclude.exists() else b""
    if pattern.encode("utf-8", "surrogateescape") in text.splitlines():
        return exclude
    if text and not text.endswith(b"\n"):
        text += b"\n"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(exclude, text + pattern.encode("utf-8", "surrogateescape") + b"\n")
    return exclude


def _pathspecs(pattern: str) -> list[str]:
    """Exclude pathspecs approximating one gitignore-style pattern."""
    body = pattern.strip().rstrip("/")
    anchored = body.startswith("/")
    body = body.lstrip("/")
    forms = [body, f"{body}/**"]
    if not anchored and "/" not in body:
        forms += [f"**/{body}", f"**/{body}/**"]
    return [f":(exclude,glob){form}" for form in forms]


def import_commit(store: ObjectStore, memo_path: Path, git_dir: Path, sha: str) -> ObjectId:
    """Copy commit ``sha``'s tree into ``store``; return the Strata tree id."""
    import pygit2

    repo = pygit2.Repository(str(git_dir))
    commit = repo.get(sha)
    if not isinstance(commit, pygit2.Commit):
        raise UnknownRef(f"git:{sha}")
    db = sqlite3.connect(memo_path)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS map (git TEXT PRIMARY KEY, strata TEXT NOT NULL)")
        known: dict[str, str] = {}
        new: dict[str, str] = {}

        def lookup(oid: str) -> str | None:
            if oid in new:
                return new[oid]
            if oid not in known:
                row = db.execute("SELECT strata FROM map WHERE git = ?", (oid,)).fetchone()
                known[oid] = row[0] if row else ""
            return known[oid] or None

        def blob(oid: Any) -> tuple[ObjectId, int]:
            hit = lookup(str(oid))
            if hit is not None:
                strata_oid, size = hit.split(" ")
                return ObjectId(strata_oid), int(size)
            data = repo[oid].data
            strata_oid = store.put(data)
            new[str(oid)] = f"{strata_oid} {len(data)}"
            return strata_oid, len(data)

        def tree(oid: Any) -> ObjectId:
            hit = lookup(str(oid))
            if hit is not None:
                return ObjectId(hit)
            entries: list[TreeEntry] = []
            for item in repo[oid]:
                name = os.fsdecode(item.raw_name)
                mode = item.filemode
                if mode == _TREE:
                    entries.append(TreeEntry(name, "dir", 0o755, 0, tree(item.id)))
                elif mode == _LINK:
                    target, size = blob(item.id)
                    entries.append(TreeEntry(name, "symlink", 0o777, size, target))
                elif mode in _FILE_MODES:
                    content, size = blob(item.id)
                    entries.append(TreeEntry(name, "file", _FILE_MODES[mode], size, content))
                # a submodule (gitlink) has no content here
            strata_oid = store.put(encode_tree(entries))
            new[str(oid)] = strata_oid
            return strata_oid

        result = tree(commit.tree_id)
        store.flush()  # durable before the table names them
        db.executemany("INSERT OR REPLACE INTO map VALUES (?, ?)", list(new.items()))
        db.commit()
        return result
    finally:
        db.close()


def resolve_git_ref(repo: Core, rev: str) -> ObjectId:
    """The Strata tree of the git commit ``rev`` of ``repo``'s workspace (imported on demand)."""
    git = GitWorkspace.find(repo.root)
    if git is None:
        raise UnknownRef(f"git:{rev}", hint="the workspace is not the top of a git work tree")
    sha = git.resolve(rev)
    return import_commit(repo.objects, repo.layout.repo / "gitmap.db", git.git_dir, sha)


def forget_imported(memo_path: Path, removed: set[str]) -> int:
    """Drop the ``gitmap.db`` rows naming objects ``strata gc`` is about to delete.

    Called before the objects go: a row must never name an absent object, or
    the next import would build a tree over it. Returns how many rows went.
    """
    if not removed or not memo_path.exists():
        return 0
    db = sqlite3.connect(memo_path)
    try:
        try:
            rows = db.execute("SELECT git, strata FROM map").fetchall()
        except sqlite3.OperationalError:
            return 0  # no table yet
        gone = [(git,) for git, strata in rows if str(strata).split(" ")[0] in removed]
        db.executemany("DELETE FROM map WHERE git = ?", gone)
        db.commit()
        return len(gone)
    finally:
        db.close()


def prune_refs(
    core: Core, kept_snapshots: set[str], *, now_ms: int, days: int, dry_run: bool
) -> list[str]:
    """Delete the ``refs/strata/`` refs gc no longer keeps; return their names.

    A run's ref (``runs/<run id>/<label>``) goes when the snapshot it was
    imported as is no longer kept, or when the run is older than ``days``
    (Strata's own store keeps the files as retention says; git may then
    collect the commit). A rollback's ``safety/<run id>`` goes only with its
    snapshot. Refs this repository's ledger does not know are left alone.
    Every namespace under ``refs/`` is listed by ``git log --all`` (measured
    with git 2.39), so pruning is what keeps that listing short.
    """
    from strata.core.storage import DAY_MS, ts_ms

    git = GitWorkspace.find(core.root)
    if git is None:
        return []
    listing = git.git("for-each-ref", "--format=%(refname) %(objectname)", REF_PREFIX)
    refs = [line.split(" ", 1) for line in listing.splitlines() if " " in line]
    if not refs:
        return []
    states: dict[str, str] = {}  # state event -> its snapshot
    commits: dict[str, tuple[str, str]] = {}  # commit -> (its state event, when it was taken)
    for record in core.ledger.driver.scan(kind="event"):
        body = record.body
        if body.get("snapshot_ref"):
            states[str(body.get("id"))] = str(body["snapshot_ref"])
        data = body.get("data") or {}
        ref = data.get("ref")
        if (
            body.get("action_type") == "workspace_snapshot_taken"
            and isinstance(ref, str)
            and ref.startswith("git:")
            and body.get("anchor_event_id")
        ):
            commits[ref[4:]] = (str(body["anchor_event_id"]), str(body.get("ts", "")))
    removed: list[str] = []
    for name, sha in refs:
        anchor, ts = commits.get(sha, ("", ""))
        snapshot = states.get(anchor)
        if snapshot is None:
            continue
        keep = snapshot in kept_snapshots
        if keep and name.startswith(REF_PREFIX + "runs/"):
            try:
                keep = now_ms - ts_ms(ts) < days * DAY_MS
            except ValueError:
                keep = True  # an unreadable time: never guess it old
        if keep:
            continue
        if not dry_run:
            git.git("update-ref", "-d", name, sha)
        removed.append(name)
    return removed
