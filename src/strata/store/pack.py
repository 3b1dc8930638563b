"""Pack files: many objects in one file, for large batches.

Creating one file per object costs far more than writing its bytes when a
batch holds thousands of small objects (a first snapshot). Past a threshold,
:class:`~strata.store.objects.DiskObjectStore` appends a batch's objects to one
pack instead::

    objects/packs/<name>.pack   "STRATAPACK\\x01\\0\\0\\0\\0\\0" then zstd frames back to back
    objects/packs/<name>.idx    "STRATAIDX\\x01\\0\\0\\0\\0\\0\\0", u64 count, then per object
                                (32-byte raw id, u64 offset, u64 length) sorted by id,
                                then the 32-byte BLAKE3 of everything before

All integers are big-endian. A pack is visible only once its index exists:
the index is written (temp, fsync, rename) after the pack is durable, so a
crash leaves at worst a pack without an index, which readers ignore.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import blake3

from strata.atomic import atomic_write
from strata.errors import CorruptRepository
from strata.ids import ObjectId

PACK_MAGIC = b"STRATAPACK\x01\0\0\0\0\0"
IDX_MAGIC = b"STRATAIDX\x01\0\0\0\0\0\0"
_ENTRY = struct.Struct(">32sQQ")
_HEADER = len(IDX_MAGIC) + 8


class PackIndex:
    """A read-only, memory-mapped pack index (binary search; nothing loaded up front)."""

    def __init__(self, idx: Path) -> None:
        self.idx = idx
        self.pack = idx.with_suffix(".pack")
        with open(idx, "rb") as f:
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:
                raise CorruptRepository(f"pack index {idx} is empty") from None
        m = self._map
        if m[: len(IDX_MAGIC)] != IDX_MAGIC:
            raise CorruptRepository(f"{idx} is not a pack index (or has an unknown version)")
        (self.count,) = struct.unpack(">Q", m[len(IDX_MAGIC) : _HEADER])
        if len(m) != _HEADER + self.count * _ENTRY.size + 32:
            raise CorruptRepository(f"pack index {idx} is truncated")

    def close(self) -> None:
        """Unmap the index."""
        self._map.close()

    def find(self, oid: str) -> tuple[int, int] | None:
        """(offset, length) of ``oid`` in the pack, or None."""
        key = bytes.fromhex(oid)
        m, lo, hi, size = self._map, 0, self.count, _ENTRY.size
        while lo < hi:
            mid = (lo + hi) // 2
            at = _HEADER + mid * size
            here = m[at : at + 32]
            if here < key:
                lo = mid + 1
            elif here > key:
                hi = mid
            else:
                _, offset, length = _ENTRY.unpack_from(m, at)
                return offset, length
        return None

    def ids(self) -> Iterator[ObjectId]:
        """Every id in the pack, sorted."""
        for i in range(self.count):
            at = _HEADER + i * _ENTRY.size
            yield ObjectId(self._map[at : at + 32].hex())

    def verify(self) -> list[str]:
        """Problems with the index itself (checksum, order, bounds)."""
        m = self._map
        problems = []
        if blake3.blake3(m[:-32]).digest() != m[-32:]:
            problems.append(f"pack index {self.idx.name}: checksum mismatch")
        try:
            pack_size = self.pack.stat().st_size
        except OSError:
            return [*problems, f"pack {self.pack.name} is missing"]
        previous = b""
        for i in range(self.count):
            raw, offset, length = _ENTRY.unpack_from(m, _HEADER + i * _ENTRY.size)
            if raw <= previous:
                problems.append(f"pack index {self.idx.name}: entries out of order")
                break
            if offset < len(PACK_MAGIC) or offset + length > pack_size:
                problems.append(
                    f"pack index {self.idx.name}: object {raw.hex()} lies outside the pack"
                )
            previous = raw
        return problems


_LENGTH_BITS = 40  # a frame shorter than 1 TiB
#: entries written to a pack's index at a time
INDEX_PIECE = 4096


def _where(packed: int) -> tuple[int, int]:
    """The (offset, length) of a :class:`PackWriter` entry."""
    return packed >> _LENGTH_BITS, packed & ((1 << _LENGTH_BITS) - 1)


class PackWriter:
    """Appends frames to a new pack; :meth:`finish` makes it durable and visible."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        name = f"pack-{os.getpid()}-{os.urandom(8).hex()}"
        self.path = folder / f"{name}.pack"
        self._file = open(self.path, "x+b")  # noqa: SIM115 - closed in finish/abort
        self._file.write(PACK_MAGIC)
        self._offset = len(PACK_MAGIC)
        #: object id -> its frame's offset and length, as one int (see :func:`_where`): a
        #: first snapshot's pack has an entry per file, and a tuple of two ints costs 4x more
        self.entries: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, oid: str, frame: bytes) -> None:
        """Append one object's frame (thread-safe; duplicates are ignored)."""
        with self._lock:
            if oid in self.entries:
                return
            self._file.write(frame)
            self.entries[oid] = self._offset << _LENGTH_BITS | len(frame)
            self._offset += len(frame)

    def read(self, oid: str) -> bytes | None:
        """A frame written to this (unfinished) pack, or None."""
        with self._lock:
            where = self.entries.get(oid)
            if where is None:
                return None
            offset, length = _where(where)
            self._file.flush()
            return os.pread(self._file.fileno(), length, offset)

    def finish(self, *, sync: bool) -> Path:
        """Sync the pack (when ``sync``), then write its index; return the index path."""
        with self._lock:
            self._file.flush()
            if sync:
                os.fsync(self._file.fileno())
            self._file.close()
            idx = self.path.with_suffix(".idx")
            atomic_write(idx, self._index(), durable=sync)
            return idx

    def _index(self) -> Iterator[bytes]:
        """The index's bytes in pieces, the entries dropped as they are written.

        A first snapshot's index has 80,000 entries: built whole it took 4 MB
        more at the moment the process's memory peaks.
        """
        entries, self.entries = self.entries, {}
        order = sorted(entries)
        hasher = blake3.blake3()
        body = bytearray(IDX_MAGIC)
        body += struct.pack(">Q", len(order))
        pack = _ENTRY.pack
        for start in range(0, len(order), INDEX_PIECE):
            for oid in order[start : start + INDEX_PIECE]:
                offset, length = _where(entries.pop(oid))
                body += pack(bytes.fromhex(oid), offset, length)
            hasher.update(body)
            yield bytes(body)
            body.clear()
        hasher.update(body)
        yield bytes(body) + hasher.digest()

    def abort(self) -> None:
        """Drop the pack."""
        with self._lock:
            self._file.close()
            self.path.unlink(missing_ok=True)


def remove_pack(idx: Path) -> None:
    """Delete a pack: its index first (the pack is then invisible), then the pack itself.

    A crash in between leaves a pack without an index, which readers ignore
    and ``strata gc`` deletes once it is older than the grace period.
    """
    idx.unlink(missing_ok=True)
    idx.with_suffix(".pack").unlink(missing_ok=True)
