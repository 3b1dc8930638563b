"""The audit bundle: one self-verifying file holding a stretch of history (seed 004 §9).

``strata bundle export FILE [A..B]`` writes a tar archive compressed with
zstd::

    bundle.json           format, range, chain head, each branch's head, what it holds
    records.jsonl         the ledger's records 1..B, as stored: the hash chain
    objects/<id>          every object the events of A..B need: snapshot
                          manifests, trees, file contents, artifacts (traces,
                          already redacted when they were recorded)
    patches/<event>.patch each state event's change from its parent (git format)
    replay.py             a standalone script that rebuilds a snapshot's files

The records are the whole chain up to B, so :func:`verify_bundle` checks it
from the first record (:func:`strata.ledger.records.verify_chain`) and
compares its last hash with the head written in ``bundle.json``, and the last
hash of every branch's chain (a shared ledger chains each branch on its own)
with ``heads``: no record can be edited, dropped or reordered unseen. Every
object is hashed again and every snapshot of the range walked. Neither needs
a repository.
:func:`replay_bundle` rebuilds a state event's files offline from the bundle.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import CorruptRepository, StrataError, SyncError, SyncMismatch, UsageError
from strata.ids import ObjectId
from strata.ledger.records import Record, chain_heads, verify_chain
from strata.store.objects import hash_bytes
from strata.store.sealing import AGE_MAGIC, pyrage_module
from strata.store.tree import TreeEntry, decode_tree

if TYPE_CHECKING:
    from strata.core import Core

FORMAT = 1

REPLAY_SCRIPT = '''\
"""Rebuild the files of one snapshot of this audit bundle (extract the bundle first).

    tar --zstd -xf bundle.tar.zst -C extracted && python extracted/replay.py OUT [EVENT_ID]

Needs only Python; with the 'blake3' package installed every object is hashed
again. 'strata bundle replay FILE OUT' does the same from the packed file.
"""
import json, os, sys

here = os.path.dirname(os.path.abspath(__file__))
try:
    from blake3 import blake3
except ImportError:
    blake3 = None


def obj(oid):
    with open(os.path.join(here, "objects", oid), "rb") as f:
        data = f.read()
    if blake3 is not None and blake3(data).hexdigest() != oid:
        sys.exit(f"object {oid} is corrupt")
    return data


def entries(data):
    body = data.split(b"\\n", 1)[1]
    for row in body.split(b"\\0")[:-1]:
        kind, mode, size, oid, name = row.split(b" ", 4)
        yield kind, int(mode, 8), oid.decode(), os.fsdecode(name)


def write(tree, dest):
    os.makedirs(dest, exist_ok=True)
    for kind, mode, oid, name in entries(obj(tree)):
        if name in ("", ".", "..") or "/" in name:
            sys.exit(f"unsafe name {name!r}")
        path = os.path.join(dest, name)
        if kind == b"d":
            write(oid, path)
            os.chmod(path, mode)
        elif kind == b"l":
            os.symlink(os.fsdecode(obj(oid)), path)
        else:
            with open(path, "wb") as f:
                f.write(obj(oid))
            os.chmod(path, mode)


meta = json.load(open(os.path.join(here, "bundle.json")))
event = sys.argv[2] if len(sys.argv) > 2 else meta["last_state_event"]
snapshot = meta["snapshots"][event]
write(json.loads(obj(snapshot))["tree"], sys.argv[1])
print(f"rebuilt event {event} (snapshot {snapshot}) in {sys.argv[1]}")
'''


@dataclass
class BundleReport:
    """What :func:`verify_bundle` found."""

    path: Path
    records: int = 0
    head: str = ""
    #: the hash of the last record of each branch's chain (``""``: the records without one)
    heads: dict[str, str] = field(default_factory=dict)
    events: int = 0
    snapshots: int = 0
    objects: int = 0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """As ``strata bundle verify --json`` prints it."""
        return {
            "schema": 1,
            "ok": not self.problems,
            "file": str(self.path),
            "records": self.records,
            "head": self.head,
            "heads": self.heads,
            "events": self.events,
            "snapshots": self.snapshots,
            "objects": self.objects,
            "problems": self.problems,
        }


# -- export ----------------------------------------------------------------------------------


def export_bundle(
    core: Core, dest: Path, span: str | None = None, *, recipients: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Write the bundle of ``A..B`` (default: the whole history) to ``dest``.

    With ``recipients`` (age public keys ``age1…``, or SSH public keys), the file
    is encrypted with age for them: only their identities can open it.
    """
    from strata.atomic import atomic_write

    driver = core.ledger.driver
    last = driver.last()
    if last is None:
        raise UsageError("the ledger is empty: there is nothing to bundle")
    first_seq, last_seq = 1, last.seq
    if span:
        a, sep, b = span.partition("..")
        if not sep or not a or not b:
            raise UsageError(f"give a range A..B, not {span!r}", hint="e.g. HEAD~3..HEAD")
        start, end = core.resolve(a).event, core.resolve(b).event
        if start is None or end is None:
            raise UsageError(f"{span} does not name two recorded events")
        first_seq, last_seq = start.seq, end.seq
        if first_seq > last_seq:
            raise UsageError(f"{a} was recorded after {b}", hint="give the older point first")
    records = list(driver.scan(start=1, stop=last_seq + 1))
    objects: dict[str, bytes] = {}
    snapshots: dict[str, str] = {}
    patches: dict[str, bytes] = {}
    last_state = ""
    events = 0
    for record in records:
        if record.kind != "event" or record.seq < first_seq:
            continue
        events += 1
        body = record.body
        for artifact in body.get("artifacts") or ():
            if core.objects.has(ObjectId(str(artifact))):
                objects[str(artifact)] = core.objects.get(ObjectId(str(artifact)))
        snapshot = body.get("snapshot_ref")
        if not snapshot:
            continue
        event_id = str(body["id"])
        snapshots[event_id] = str(snapshot)
        last_state = event_id
        _add_snapshot(core, str(snapshot), objects)
        parent = body.get("parent_event_id")
        parent_snapshot = driver.snapshot_of(str(parent)) if parent else None
        if parent_snapshot:
            before = ObjectId(str(core.manifest(parent_snapshot)["tree"]))  # type: ignore[arg-type]
            after = ObjectId(str(core.manifest(snapshot)["tree"]))
            diff = core.diff_trees(before, after, stats=False)
            patches[event_id] = b"".join(diff.iter_patch())
    if not last_state:
        raise UsageError(f"{span or 'the history'} holds no recorded files to bundle")
    meta = {
        "format": FORMAT,
        "range": {"first_seq": first_seq, "last_seq": last_seq, "span": span or ""},
        "head": records[-1].hash,
        "heads": chain_heads(records),
        "ledger_head": last.hash,
        "records": len(records),
        "events": events,
        "snapshots": snapshots,
        "last_state_event": last_state,
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))

        add("bundle.json", json.dumps(meta, indent=1, sort_keys=True).encode())
        add("records.jsonl", b"".join(r.to_line() + b"\n" for r in records))
        for oid, data in sorted(objects.items()):
            add(f"objects/{oid}", data)
        for event_id, patch in sorted(patches.items()):
            add(f"patches/{event_id}.patch", patch)
        add("replay.py", REPLAY_SCRIPT.encode(), 0o755)
    import zstandard

    packed = zstandard.ZstdCompressor(level=10).compress(buffer.getvalue())
    if recipients:
        packed = _encrypt(packed, recipients)
    try:
        atomic_write(dest, packed)
    except OSError as exc:
        raise SyncError(f"cannot write {dest}: {exc.strerror}") from None
    return {
        "schema": 1,
        "file": str(dest),
        "bytes": len(packed),
        "records": len(records),
        "events": events,
        "snapshots": len(set(snapshots.values())),
        "objects": len(objects),
        "patches": len(patches),
        "head": meta["head"],
        "heads": meta["heads"],
        "encrypted": bool(recipients),
    }


def _pyrage() -> Any:
    return pyrage_module("an encrypted audit bundle")


def _encrypt(data: bytes, recipients: tuple[str, ...]) -> bytes:
    pyrage = _pyrage()
    keys = []
    for text in recipients:
        try:
            if text.startswith("age1"):
                keys.append(pyrage.x25519.Recipient.from_str(text))
            else:
                keys.append(pyrage.ssh.Recipient.from_str(text))
        except (pyrage.RecipientError, ValueError):
            raise UsageError(
                f"not an age or SSH public key: {text[:24]!r}",
                hint="give an age1… key (age-keygen -y KEYFILE) or an ssh-ed25519/ssh-rsa key",
            ) from None
    return bytes(pyrage.encrypt(data, keys))


def _decrypt(data: bytes, path: Path, identities: tuple[Path, ...]) -> bytes:
    if not identities:
        raise SyncError(
            f"{path} is encrypted with age", hint="give the recipient's key: --identity KEYFILE"
        )
    pyrage = _pyrage()
    keys = []
    for identity in identities:
        try:
            text = identity.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SyncError(f"cannot read the identity {identity}: {exc}") from None
        secrets = [line.strip() for line in text.splitlines() if line.startswith("AGE-SECRET-KEY-")]
        try:
            keys += [pyrage.x25519.Identity.from_str(secret) for secret in secrets]
            if not secrets:
                keys.append(pyrage.ssh.Identity.from_buffer(text.encode()))
        except (pyrage.IdentityError, ValueError):
            raise SyncError(f"{identity} holds no age or SSH private key") from None
    try:
        return bytes(pyrage.decrypt(data, keys))
    except pyrage.DecryptError:
        raise SyncError(f"none of the identities given can open {path}") from None


def _add_snapshot(core: Core, snapshot: str, objects: dict[str, bytes]) -> None:
    if snapshot in objects:
        return
    manifest = core.objects.get(ObjectId(snapshot))
    objects[snapshot] = manifest
    stack = [str(json.loads(manifest)["tree"])]
    while stack:
        tree = stack.pop()
        if tree in objects:
            continue
        raw = core.objects.get(ObjectId(tree))
        objects[tree] = raw
        for e in decode_tree(raw, tree):
            if e.kind == "dir":
                stack.append(e.oid)
            elif e.oid not in objects:
                objects[e.oid] = core.objects.get(e.oid)


# -- reading ---------------------------------------------------------------------------------


def _open(path: Path, identities: tuple[Path, ...] = ()) -> dict[str, bytes]:
    """Every member of a bundle by name; :class:`SyncError` when it is not one."""
    import zstandard

    try:
        packed = path.read_bytes()
    except OSError as exc:
        raise SyncError(f"cannot read {path}: {exc.strerror}") from None
    if packed.startswith(AGE_MAGIC):
        packed = _decrypt(packed, path, identities)
    try:
        data = zstandard.ZstdDecompressor().decompressobj().decompress(packed)
        members: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for info in tar:
                if info.isfile():
                    extracted = tar.extractfile(info)
                    if extracted is not None:
                        members[info.name] = extracted.read()
    except (zstandard.ZstdError, tarfile.TarError, EOFError):
        raise SyncError(f"{path} is not an audit bundle (not tar + zstd)") from None
    if "bundle.json" not in members:
        raise SyncError(f"{path} is not an audit bundle (no bundle.json)")
    return members


def _meta(members: dict[str, bytes], path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(members["bundle.json"])
    except ValueError:
        raise SyncError(f"{path}: bundle.json is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SyncError(f"{path}: unknown bundle format {meta.get('format')!r}")
    return meta


def verify_bundle(path: Path, identities: tuple[Path, ...] = ()) -> BundleReport:
    """Check a bundle's chain, head, objects and snapshots; no repository needed."""
    members = _open(path, identities)
    meta = _meta(members, path)
    report = BundleReport(path)
    problems = report.problems
    records: list[Record] = []
    for n, line in enumerate(members.get("records.jsonl", b"").splitlines(), 1):
        try:
            records.append(Record.from_line(line))
        except CorruptRepository as exc:
            problems.append(f"records.jsonl line {n}: {exc}")
    report.records = len(records)
    broken = verify_chain(records)
    if broken:
        problems.append(f"chain: {broken}")
    report.head = records[-1].hash if records else ""
    if report.head != meta.get("head"):
        problems.append(f"chain: the last record's hash is not the head {meta.get('head')}")
    report.heads = chain_heads(records)
    stated = meta.get("heads")
    if stated is not None:  # a bundle made before heads were written states the last one only
        if not isinstance(stated, dict):
            problems.append("bundle.json's heads are not a table")
            stated = {}
        for lane in sorted(set(stated) | set(report.heads)):
            what = f"branch {lane}" if lane else "the records without a branch"
            if lane not in report.heads:
                problems.append(
                    f"chain: {what} has no record here, its head {stated[lane]} is missing"
                )
            elif report.heads[lane] != stated.get(lane):
                problems.append(
                    f"chain: the last record of {what} is not its head "
                    f"{stated.get(lane) or '(none stated)'}: records were dropped or added"
                )
    objects = {
        k.removeprefix("objects/"): v for k, v in members.items() if k.startswith("objects/")
    }
    report.objects = len(objects)
    for oid, data in sorted(objects.items()):
        if hash_bytes(data) != oid:
            problems.append(f"object {oid}: its content does not match its hash")
    first = int((meta.get("range") or {}).get("first_seq") or 1)
    named: dict[str, str] = {}
    for record in records:
        if record.kind != "event" or record.seq < first:
            continue
        report.events += 1
        body = record.body
        if body.get("snapshot_ref"):
            named[str(body["id"])] = str(body["snapshot_ref"])
        for artifact in body.get("artifacts") or ():
            if str(artifact) not in objects:
                problems.append(f"event {body.get('id')}: artifact {artifact} is missing")
    if named != meta.get("snapshots"):
        problems.append("bundle.json's snapshots are not the events' snapshots")
    for snapshot in sorted(set(named.values())):
        report.snapshots += 1
        problem = _snapshot_problem(objects, snapshot)
        if problem:
            problems.append(f"snapshot {snapshot}: {problem}")
    if "replay.py" not in members:
        problems.append("replay.py is missing")
    return report


def _snapshot_problem(objects: dict[str, bytes], snapshot: str) -> str | None:
    if snapshot not in objects:
        return "its manifest is missing"
    try:
        stack = [(str(json.loads(objects[snapshot])["tree"]), "")]
    except (ValueError, KeyError, TypeError):
        return "its manifest is unreadable"
    while stack:
        tree, where = stack.pop()
        if tree not in objects:
            return f"the tree of {where or '(root)'} is missing"
        try:
            entries = decode_tree(objects[tree], tree)
        except StrataError as exc:
            return f"{where or '(root)'}: {exc}"
        for e in entries:
            path = f"{where}/{e.name}" if where else e.name
            if e.kind == "dir":
                stack.append((e.oid, path))
            elif e.oid not in objects:
                return f"{path} is missing"
    return None


def replay_bundle(
    path: Path, dest: Path, event_id: str | None = None, identities: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """Rebuild a state event's files (default: the range's last) from a verified bundle."""
    report = verify_bundle(path, identities)
    if report.problems:
        raise SyncMismatch(str(path), "", report.problems[0])
    members = _open(path, identities)
    meta = _meta(members, path)
    event = event_id or str(meta["last_state_event"])
    snapshots: dict[str, str] = meta["snapshots"]
    if event not in snapshots:
        matches = [e for e in snapshots if e.startswith(event)] if event else []
        if len(matches) != 1:
            raise UsageError(
                f"the bundle holds no state event {event!r}",
                hint="'strata bundle verify --json FILE' lists what it holds",
            )
        event = matches[0]
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} exists and is not an empty folder", hint="give a new folder")
    objects = {
        k.removeprefix("objects/"): v for k, v in members.items() if k.startswith("objects/")
    }
    snapshot = snapshots[event]
    tree = str(json.loads(objects[snapshot])["tree"])
    written = _write(objects, tree, dest)
    return {
        "schema": 1,
        "file": str(path),
        "event_id": event,
        "snapshot_id": snapshot,
        "dest": str(dest),
        "files": written,
    }


def _write(objects: dict[str, bytes], tree: str, dest: Path) -> int:
    """Write a tree below ``dest``, names checked (no separators, no dot names)."""
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    entries: list[TreeEntry] = decode_tree(objects[tree], tree)
    for e in entries:
        if e.name in ("", ".", "..") or "/" in e.name or "\0" in e.name:
            raise SyncMismatch("bundle", e.name, "an unsafe name")
        target = dest / e.name
        if e.kind == "dir":
            count += _write(objects, e.oid, target)
            os.chmod(target, e.mode)
        elif e.kind == "symlink":
            os.symlink(os.fsdecode(objects[e.oid]), target)
            count += 1
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(objects[e.oid])
            os.chmod(target, e.mode)
            count += 1
    return count
