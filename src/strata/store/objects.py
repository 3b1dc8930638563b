"""Content-addressed object storage.

An object is a sequence of bytes stored once under its BLAKE3-256 hash. Blobs
(file contents, symlink targets), trees and snapshot manifests are all objects;
the store does not know which is which: whoever names an object knows its kind.

Two implementations share one protocol and one conformance suite:
:class:`DiskObjectStore` (``objects/ab/cdef…``, each file one zstd frame,
written to a temporary name and renamed into place, never modified) and
:class:`MemoryObjectStore`.

Durability is batched: writes are not synced one by one; :meth:`flush` makes
every object written so far durable with one ``syncfs``. Callers flush before
they write a record that names the objects.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import blake3
import zstandard

from strata.errors import CorruptRepository, ObjectMissing
from strata.ids import ObjectId, is_object_id
from strata.store.longpath import open_path
from strata.store.pack import PackIndex, PackWriter, remove_pack

COMPRESSION_LEVEL = 1
LOOSE_LIMIT = 64  # past this many new objects in one batch, the rest go to a pack
SYNC_ONE_BY_ONE = 8  # past this many loose objects in one flush, one syncfs syncs them all
STREAM_THRESHOLD = 16 * 1024 * 1024
CHUNK = 1024 * 1024
#: how a file hashed but not stored is read back (its path may pass PATH_MAX)
_SOURCE_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def hash_bytes(data: bytes) -> ObjectId:
    """The object id of ``data``."""
    return ObjectId(blake3.blake3(data).hexdigest())


def hash_fd(fd: int, size: int) -> ObjectId:
    """The object id of what the file ``fd`` holds from its offset; ``size``: its size.

    Read in pieces no larger than what is left (one byte more, so a file
    that grew is read to its end): a read of 1 MiB for a file of 20 KB would
    take and free a 1 MiB buffer, which, once ``bound_malloc_cache`` has
    made such blocks mappings of their own, is an ``mmap`` and ``munmap``
    each time.
    """
    hasher = blake3.blake3()
    left = size
    while chunk := os.read(fd, min(left, CHUNK) + 1):
        hasher.update(chunk)
        left = max(0, left - len(chunk))
    return ObjectId(hasher.hexdigest())


class ObjectWriter(Protocol):
    """Receives an object in chunks; :meth:`commit` stores it and returns its id."""

    def write(self, chunk: bytes) -> None:
        """Append a chunk."""

    def commit(self) -> ObjectId:
        """Store the object (if it is new) and return its id."""

    def abort(self) -> None:
        """Forget what was written."""


class ObjectStore(Protocol):
    """What every object store offers."""

    def has(self, oid: ObjectId) -> bool:
        """True when the object is stored."""

    def get(self, oid: ObjectId) -> bytes:
        """The object's bytes, verified against its id; ObjectMissing if absent."""

    def put(self, data: bytes, *, oid: ObjectId | None = None) -> ObjectId:
        """Store ``data`` (its id may be passed when already known) and return its id."""

    def writer(self) -> ObjectWriter:
        """A writer for an object too large to hold in memory."""

    def iter_chunks(self, oid: ObjectId) -> Iterator[bytes]:
        """The object's bytes in chunks (not verified; see :meth:`get`)."""

    def ids(self) -> Iterator[ObjectId]:
        """Every stored object id, in no particular order."""

    def flush(self) -> None:
        """Make every object written so far durable."""


class _Codec(threading.local):
    """Per-thread zstd contexts (they are not thread-safe)."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()


_codec = _Codec()


def compress(data: bytes) -> bytes:
    """One zstd frame holding ``data``."""
    return _codec.compressor.compress(data)


def decompress(frame: bytes) -> bytes:
    """The bytes held in one zstd frame (with or without a content size)."""
    return _codec.decompressor.decompressobj().decompress(frame)


class DiskObjectStore:
    """Objects under ``root``: loose (``root/ab/cdef…``, one zstd frame each) or in packs.

    The first :data:`LOOSE_LIMIT` objects written between two flushes are loose
    files; the rest of a large batch is appended to one pack
    (:mod:`strata.store.pack`), because creating thousands of small files costs
    far more than writing their bytes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        #: opaque to the store: returns the cipher a trace recorder writing here encrypts
        #: with (set by the core from config; see strata.providers.trace.Recorder)
        self.trace_cipher: object = None
        self._tmp = root / "tmp"
        self._known_dirs: set[str] = set()
        self._written: list[Path] = []
        self._lock = threading.Lock()
        self._pack: PackWriter | None = None
        self._packs: dict[str, PackIndex] | None = None
        self._packs_stamp = 0
        self._root_str = str(root)
        self._pack_dir_str = f"{root}/packs"
        self._pack_fds: dict[Path, int] = {}
        #: while a batch goes to a pack: the loose-object folders (``ab/``) that existed when
        #: it began, and those made since. A loose object can only be in one of them, so a
        #: new object of a first snapshot costs no ``stat`` (None: not listed)
        self._prefixes: set[str] | None = None

    def _path(self, oid: str) -> Path:
        return self.root / oid[:2] / oid[2:]

    def _loose(self, oid: str) -> str:
        # plain strings: this runs once per file of a first snapshot
        return f"{self._root_str}/{oid[:2]}/{oid[2:]}"

    @property
    def _pack_dir(self) -> Path:
        return self.root / "packs"

    def _load_packs(self) -> dict[str, PackIndex]:
        """The pack indexes, re-listed only when the packs folder changed."""
        try:
            stamp = os.stat(self._pack_dir_str).st_mtime_ns
        except FileNotFoundError:
            stamp = 0
        if self._packs is not None and stamp == self._packs_stamp:
            return self._packs
        # a new dict, never the old one grown: another thread may be iterating it.
        # Packs a repack or gc removed are dropped (their objects are in a newer pack).
        old = self._packs if self._packs is not None else {}
        packs: dict[str, PackIndex] = {}
        if stamp:
            for idx in sorted(self._pack_dir.glob("*.idx")):
                known = old.get(idx.name)
                if known is not None:
                    packs[idx.name] = known
                    continue
                try:
                    packs[idx.name] = PackIndex(idx)
                except FileNotFoundError:
                    continue  # removed by a repack between the listing and the open
        self._packs, self._packs_stamp = packs, stamp
        return packs

    def _in_pack(self, oid: str) -> tuple[Path, int, int] | None:
        # search the packs already known; re-list the folder only on a miss
        for refresh in (False, True):
            if refresh or self._packs is None:
                before = self._packs_stamp
                packs = self._load_packs()
                if refresh and self._packs_stamp == before:
                    return None
            else:
                packs = self._packs
            for index in packs.values():
                where = index.find(oid)
                if where is not None:
                    return index.pack, where[0], where[1]
        return None

    def _pack_fd(self, path: Path) -> int:
        fd = self._pack_fds.get(path)
        if fd is None:
            with self._lock:
                fd = self._pack_fds.get(path)
                if fd is None:
                    fd = self._pack_fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return fd

    def close(self) -> None:
        """Close the pack files kept open for reading."""
        fds, self._pack_fds = self._pack_fds, {}
        for fd in fds.values():
            os.close(fd)

    def has(self, oid: ObjectId) -> bool:
        """True when the object is stored."""
        if os.path.exists(self._loose(oid)):
            return True
        pack = self._pack
        if pack is not None and oid in pack.entries:
            return True
        return self._in_pack(oid) is not None

    def _packed_frame(self, oid: str) -> bytes | None:
        """The frame of ``oid`` from the pack being written or a pack already known, or None.

        Looked at before the loose file: most objects are packed, and a failed
        ``open`` of a loose path costs more than a look in the indexes.
        """
        pack = self._pack
        if pack is not None:
            frame = pack.read(oid)
            if frame is not None:
                return frame
        packs = self._packs if self._packs is not None else self._load_packs()
        for index in packs.values():
            where = index.find(oid)
            if where is not None:
                try:
                    return os.pread(self._pack_fd(index.pack), where[1], where[0])
                except FileNotFoundError:  # removed by a repack: look again, loose first
                    self._packs_stamp = -1
                    return None
        return None

    def _read_frame(self, oid: ObjectId, *, loose: bool = True) -> bytes:
        """The stored frame of ``oid``; with ``loose`` false the caller found no loose file."""
        if loose:
            frame = self._packed_frame(oid)
            if frame is not None:
                return frame
            try:
                with open(self._loose(oid), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                pass
        pack = self._pack
        if pack is not None:
            frame = pack.read(oid)
            if frame is not None:
                return frame
        for _ in range(3):
            where = self._in_pack(oid)
            if where is None:
                break
            path, offset, length = where
            try:
                return os.pread(self._pack_fd(path), length, offset)
            except FileNotFoundError:
                # a repack removed this pack after the index was read: its objects are
                # in the pack that replaced it (or loose, for a moment); look again
                self._packs_stamp = -1
                try:
                    with open(self._loose(oid), "rb") as f:
                        return f.read()
                except FileNotFoundError:
                    continue
        raise ObjectMissing(oid)

    def get(self, oid: ObjectId) -> bytes:
        """The object's bytes, verified against its id."""
        frame = self._read_frame(oid)
        try:
            data = decompress(frame)
        except zstandard.ZstdError:
            raise CorruptRepository(
                f"object {oid} is corrupt (not a valid zstd frame)",
                hint="run 'strata check' to list every problem",
            ) from None
        if hash_bytes(data) != oid:
            raise CorruptRepository(
                f"object {oid} is corrupt (its content does not match its id)",
                hint="run 'strata check' to list every problem",
            )
        return data

    def iter_chunks(self, oid: ObjectId) -> Iterator[bytes]:
        """The object's bytes in chunks of about 1 MiB (one chunk when it is no larger).

        An object whose frame says it holds at most :data:`CHUNK` bytes is
        decompressed in one call: a stream's reads of :data:`CHUNK` each take a
        buffer that size, which, once ``bound_malloc_cache`` has made such
        blocks mappings of their own, is an ``mmap`` and ``munmap`` per object
        (5,000 objects of 20 KB: 0.35 s read as streams, 0.14 s in one call).
        """
        frame = self._packed_frame(oid)
        f: IO[bytes]
        if frame is not None:
            f = io.BytesIO(frame)
        else:
            try:
                f = open(self._loose(oid), "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                frame = self._read_frame(oid, loose=False)
                f = io.BytesIO(frame)
            else:
                # (a read of CHUNK bytes would itself take such a buffer: its size first)
                frame = f.read() if os.fstat(f.fileno()).st_size <= CHUNK else b""
        with f:
            if 0 < len(frame) <= CHUNK:
                try:
                    size = zstandard.frame_content_size(frame)
                    data = _codec.decompressor.decompress(frame) if 0 <= size <= CHUNK else None
                except zstandard.ZstdError:
                    raise CorruptRepository(
                        f"object {oid} is corrupt (not a valid zstd frame)",
                        hint="run 'strata check' to list every problem",
                    ) from None
                if data is not None:
                    if data:
                        yield data
                    return
            f.seek(0)
            yield from self._stream(oid, f)

    @staticmethod
    def _stream(oid: ObjectId, f: IO[bytes]) -> Iterator[bytes]:
        """The bytes of the zstd frame read from ``f``, in chunks of about 1 MiB."""
        with _codec.decompressor.stream_reader(f) as reader:
            while True:
                try:
                    chunk = reader.read(CHUNK)
                except zstandard.ZstdError:
                    raise CorruptRepository(
                        f"object {oid} is corrupt (not a valid zstd frame)",
                        hint="run 'strata check' to list every problem",
                    ) from None
                if not chunk:
                    break
                yield chunk

    def _install(self, oid: ObjectId, fill: Iterable[bytes]) -> None:
        """Write the frames from ``fill`` to a temp file and rename it to ``oid``."""
        prefix = oid[:2]
        if prefix not in self._known_dirs:
            os.makedirs(self.root / prefix, exist_ok=True)
            self._known_dirs.add(prefix)
        self._made_prefix(prefix)
        # the temp file sits beside its final name: one folder per rename, no shared hot folder
        tmp = self.root / prefix / f".tmp-{oid[2:]}.{os.getpid()}.{threading.get_ident()}"
        try:
            with open(tmp, "wb") as f:
                for part in fill:
                    f.write(part)
            os.replace(tmp, self._path(oid))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._note_written(oid)

    def _made_prefix(self, prefix: str) -> None:
        """A loose-object folder exists now (see ``_prefixes``)."""
        prefixes = self._prefixes
        if prefixes is not None and prefix not in prefixes:
            with self._lock:
                if self._prefixes is not None:
                    self._prefixes.add(prefix)

    def _note_written(self, oid: str) -> None:
        with self._lock:
            self._written.append(self._path(oid))

    def put(self, data: bytes, *, oid: ObjectId | None = None) -> ObjectId:
        """Store ``data`` unless an object with its id exists; return the id."""
        if oid is None:
            oid = hash_bytes(data)
        if self._stored(oid):
            return oid
        frame = compress(data)
        with self._lock:
            pack = self._pack
            if pack is None and len(self._written) >= LOOSE_LIMIT:
                pack = self._pack = PackWriter(self._pack_dir)
                self._prefixes = {n for n in os.listdir(self._root_str) if len(n) == 2}
        if pack is not None:
            pack.add(oid, frame)
        else:
            self._install(oid, (frame,))
        return oid

    def _stored(self, oid: ObjectId) -> bool:
        """:meth:`has` as :meth:`put` asks it: cheap for an object that is new.

        The packs are not listed again (a pack another process wrote since
        they were only costs a duplicate, which is harmless), and, while a
        batch goes to a pack, a loose object is looked for only in a folder
        known to exist.
        """
        pack = self._pack
        if pack is not None and oid in pack.entries:
            return True
        prefixes = self._prefixes
        if (prefixes is None or oid[:2] in prefixes) and os.path.exists(self._loose(oid)):
            return True
        packs = self._packs if self._packs is not None else self._load_packs()
        return any(index.find(oid) is not None for index in packs.values())

    def writer(self) -> ObjectWriter:
        """A streaming writer: compresses to a temp file while hashing."""
        return _DiskWriter(self)

    def ids(self) -> Iterator[ObjectId]:
        """Every stored object id (loose ones first, then packed ones)."""
        if not self.root.is_dir():
            return
        seen: set[str] = set()
        for oid in self._loose_ids():
            seen.add(oid)
            yield oid
        for index in self._load_packs().values():
            for oid in index.ids():
                if oid not in seen:
                    seen.add(oid)
                    yield oid

    def stored_size(self, oid: ObjectId) -> int:
        """The compressed size of an object as stored (loose or packed)."""
        return len(self._read_frame(oid))

    # -- maintenance: gc, repack, du (the caller holds the repository's write lock) ----------

    def packs(self) -> list[PackIndex]:
        """The visible packs (those with an index)."""
        return list(self._load_packs().values())

    def loose_ids(self) -> Iterator[ObjectId]:
        """The ids of the loose objects."""
        if self.root.is_dir():
            yield from self._loose_ids()

    def loose_path(self, oid: ObjectId) -> Path:
        """Where the loose copy of ``oid`` is (or would be)."""
        return self._path(oid)

    def peek(self, oid: ObjectId, size: int) -> bytes:
        """The first ``size`` bytes of an object (unverified): enough to tell its kind."""
        try:
            f: IO[bytes] = open(self._loose(oid), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            f = io.BytesIO(self._read_frame(oid, loose=False))
        try:
            with f, _codec.decompressor.stream_reader(f) as reader:
                return reader.read(size)
        except zstandard.ZstdError:
            return b""

    def delete_loose(self, oid: ObjectId) -> int:
        """Delete the loose copy of ``oid``; the bytes freed (0 if there was none)."""
        path = self._path(oid)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def repack(
        self,
        *,
        packs: list[PackIndex],
        loose: Iterable[ObjectId] = (),
        drop: set[str] | frozenset[str] = frozenset(),
    ) -> RepackOutcome:
        """Write the objects of ``packs`` and ``loose`` minus ``drop`` into one new pack.

        Order, so that a reader never misses an object and a crash at any
        point loses nothing: every frame is verified (a corrupt one is left
        where it is, and so is its pack), the new pack is synced and its index
        written (temp, fsync, rename, fsync folder); only then are the old
        packs' indexes and packs, and the packed loose files, deleted.
        """
        outcome = RepackOutcome()
        writer: PackWriter | None = None
        keep_old: set[Path] = set()
        packed_loose: list[ObjectId] = []

        def add(oid: ObjectId, frame: bytes) -> bool:
            nonlocal writer
            try:
                ok = hash_bytes(decompress(frame)) == oid
            except zstandard.ZstdError:
                ok = False
            if not ok:
                outcome.corrupt.append(oid)
                return False
            if writer is None:
                writer = PackWriter(self._pack_dir)
            writer.add(oid, frame)
            return True

        for index in packs:
            fd = os.open(index.pack, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for oid in index.ids():
                    if oid in drop:
                        where = index.find(oid)
                        outcome.dropped += 1
                        outcome.bytes_dropped += where[1] if where else 0
                        continue
                    where = index.find(oid)
                    assert where is not None
                    if not add(oid, os.pread(fd, where[1], where[0])):
                        keep_old.add(index.idx)
            finally:
                os.close(fd)
        for oid in loose:
            if oid in drop:
                continue
            try:
                with open(self._path(oid), "rb") as f:
                    frame = f.read()
            except FileNotFoundError:
                continue
            if add(oid, frame):
                packed_loose.append(oid)
        if writer is not None:
            outcome.objects = len(writer.entries)
            idx = writer.finish(sync=True)
            outcome.pack = idx.name
            self._load_packs()
        for index in packs:
            if index.idx not in keep_old:
                remove_pack(index.idx)
                outcome.packs_removed += 1
        for oid in packed_loose:
            self.delete_loose(oid)
        outcome.loose_packed = len(packed_loose)
        self._load_packs()
        return outcome

    def pack_problems(self) -> list[str]:
        """Problems with pack indexes (checksums, bounds)."""
        return [p for index in self._load_packs().values() for p in index.verify()]

    def _loose_ids(self) -> Iterator[ObjectId]:
        for sub in sorted(os.listdir(self.root)):
            if len(sub) != 2:
                continue
            for rest in sorted(os.listdir(self.root / sub)):
                oid = sub + rest
                if is_object_id(oid):
                    yield ObjectId(oid)

    def flush(self) -> None:
        """Make every object written so far durable.

        A pack is synced with one ``fsync`` before its index is written. A few
        loose objects are synced one by one (file, then its folder); more than
        :data:`SYNC_ONE_BY_ONE` with one ``syncfs`` of the store's file system,
        which costs one journal commit instead of one per file.
        """
        with self._lock:
            written, self._written = self._written, []
            pack, self._pack = self._pack, None
            self._prefixes = None
        if pack is not None:
            idx = pack.finish(sync=True)
            self._load_packs()
            assert self._packs is not None and idx.name in self._packs
        if len(written) > SYNC_ONE_BY_ONE:
            from strata.atomic import sync_filesystem

            sync_filesystem(self.root)
            return
        folders = {p.parent for p in written}
        for path in [*written, *folders]:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@dataclass
class RepackOutcome:
    """What :meth:`DiskObjectStore.repack` did."""

    #: the new pack's index file name (None: nothing was left to pack)
    pack: str | None = None
    objects: int = 0
    packs_removed: int = 0
    loose_packed: int = 0
    dropped: int = 0
    bytes_dropped: int = 0
    corrupt: list[str] = field(default_factory=list)


class _DiskWriter:
    def __init__(self, store: DiskObjectStore) -> None:
        self._store = store
        os.makedirs(store._tmp, exist_ok=True)
        self._tmp = store._tmp / f"stream.{os.getpid()}.{threading.get_ident()}.{id(self)}"
        self._file: IO[bytes] = open(self._tmp, "wb")  # noqa: SIM115 - closed in commit/abort
        self._hasher = blake3.blake3()
        self._zw = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL).stream_writer(
            self._file, closefd=False
        )

    def write(self, chunk: bytes) -> None:
        self._hasher.update(chunk)
        self._zw.write(chunk)

    def commit(self) -> ObjectId:
        oid = ObjectId(self._hasher.hexdigest())
        self._zw.flush(zstandard.FLUSH_FRAME)
        self._file.close()
        store = self._store
        if store.has(oid):
            self._tmp.unlink(missing_ok=True)
            return oid
        prefix = oid[:2]
        os.makedirs(store.root / prefix, exist_ok=True)
        store._known_dirs.add(prefix)
        store._made_prefix(prefix)
        os.replace(self._tmp, store._path(oid))
        store._note_written(oid)
        return oid

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)


class MemoryObjectStore:
    """Objects in a dict; for tests and throw-away repositories."""

    def __init__(self) -> None:
        self._objects: dict[ObjectId, bytes] = {}

    def has(self, oid: ObjectId) -> bool:
        """True when the object is stored."""
        return oid in self._objects

    def get(self, oid: ObjectId) -> bytes:
        """The object's bytes."""
        try:
            data = self._objects[oid]
        except KeyError:
            raise ObjectMissing(oid) from None
        if hash_bytes(data) != oid:
            raise CorruptRepository(f"object {oid} is corrupt (its content does not match its id)")
        return data

    def put(self, data: bytes, *, oid: ObjectId | None = None) -> ObjectId:
        """Store ``data``; return its id."""
        oid = oid or hash_bytes(data)
        self._objects.setdefault(oid, bytes(data))
        return oid

    def writer(self) -> ObjectWriter:
        """A writer collecting chunks in memory."""
        return _MemoryWriter(self)

    def iter_chunks(self, oid: ObjectId) -> Iterator[bytes]:
        """The object's bytes in chunks."""
        if oid not in self._objects:
            raise ObjectMissing(oid)
        data = self._objects[oid]
        for i in range(0, len(data), CHUNK):
            yield data[i : i + CHUNK]

    def ids(self) -> Iterator[ObjectId]:
        """Every stored id."""
        yield from list(self._objects)

    def flush(self) -> None:
        """Nothing to do: memory is as durable as it gets."""

    def corrupt(self, oid: ObjectId, data: bytes) -> None:
        """Overwrite an object's bytes (tests of verification use this)."""
        self._objects[oid] = data


class _MemoryWriter:
    def __init__(self, store: MemoryObjectStore) -> None:
        self._store = store
        self._parts: list[bytes] = []

    def write(self, chunk: bytes) -> None:
        self._parts.append(bytes(chunk))

    def commit(self) -> ObjectId:
        return self._store.put(b"".join(self._parts))

    def abort(self) -> None:
        self._parts.clear()


def verified_chunks(store: ObjectStore, oid: ObjectId) -> Iterator[bytes]:
    """The object's bytes in chunks, then CorruptRepository if they do not hash to ``oid``.

    Writers that install the result only after consuming every chunk (temp file,
    then rename) therefore never install corrupt content.
    """
    hasher = blake3.blake3()
    for chunk in store.iter_chunks(oid):
        hasher.update(chunk)
        yield chunk
    if hasher.hexdigest() != oid:
        raise CorruptRepository(
            f"object {oid} is corrupt (its content does not match its id)",
            hint="run 'strata check' to list every problem",
        )


class OverlayStore:
    """Reads from a base store; keeps new objects in memory; never writes the base.

    Used to look at the working tree (``status``, ``diff`` against it) without
    storing anything. Files that were only hashed are read back from their
    path on demand (``sources``: object id -> absolute path).
    """

    def __init__(self, base: ObjectStore) -> None:
        self.base = base
        self.top = MemoryObjectStore()
        self.sources: dict[ObjectId, str] = {}

    def has(self, oid: ObjectId) -> bool:
        """True when the object is in memory, in the base, or readable from a file."""
        return self.top.has(oid) or self.base.has(oid) or oid in self.sources

    def get(self, oid: ObjectId) -> bytes:
        """The object's bytes from memory, the base, or the file it was hashed from."""
        if self.top.has(oid):
            return self.top.get(oid)
        source = self.sources.get(oid)
        if source is not None and not self.base.has(oid):
            try:
                with open(open_path(source, _SOURCE_FLAGS), "rb") as f:
                    data = f.read()
            except OSError:
                raise ObjectMissing(oid) from None
            if hash_bytes(data) != oid:
                from strata.errors import WorkspaceChanged

                raise WorkspaceChanged([source])
            return data
        return self.base.get(oid)

    def put(self, data: bytes, *, oid: ObjectId | None = None) -> ObjectId:
        """Keep ``data`` in memory."""
        oid = oid or hash_bytes(data)
        if not self.base.has(oid):
            self.top.put(data, oid=oid)
        return oid

    def writer(self) -> ObjectWriter:
        """A writer into memory."""
        return self.top.writer()

    def iter_chunks(self, oid: ObjectId) -> Iterator[bytes]:
        """The object's bytes: one chunk from memory, a stream from a file or the base."""
        if self.top.has(oid):
            yield self.top.get(oid)
            return
        source = self.sources.get(oid)
        if source is None or self.base.has(oid):
            yield from self.base.iter_chunks(oid)
            return
        hasher = blake3.blake3()
        try:
            with open(open_path(source, _SOURCE_FLAGS), "rb") as f:
                while chunk := f.read(CHUNK):
                    hasher.update(chunk)
                    yield chunk
        except OSError:
            raise ObjectMissing(oid) from None
        if hasher.hexdigest() != oid:
            from strata.errors import WorkspaceChanged

            raise WorkspaceChanged([source])

    def ids(self) -> Iterator[ObjectId]:
        """Ids in memory and in the base."""
        yield from self.top.ids()
        yield from self.base.ids()

    def flush(self) -> None:
        """Nothing is ever written to disk."""
