"""The JSONL ledger driver: ``events.jsonl`` plus an ``events.idx`` sidecar index.

Files in the ledger folder::

    ledger.json    {"driver":"jsonl","format":2}; other format versions are refused
    events.jsonl   the records, one per line: exactly ``record.to_line() + b"\\n"``
    events.idx     the sidecar index: derived from events.jsonl, rebuilt when in doubt

events.jsonl
------------
Line ``n`` holds record ``n``: canonical RFC 8785 JSON, byte-identical to
``records.line`` in the SQLite driver. The file is only ever appended to. A
batch is written with one ``write`` of all its lines, then ``fsync``; only then
is the sidecar updated, so the data file is always the truth.

A last line without its newline is *torn* (a crash in the middle of an append):
readers ignore it, and the writer (the lock holder, ``writer=True``) truncates
it away when it opens the ledger. A malformed line anywhere else is
:class:`~strata.errors.CorruptRepository`, naming the line (= the record's seq).
Opened with ``batch_end="operation"`` (as the ledger opens it), the record
kind that ends every batch is the batch's end marker: complete lines after the
last such record are a batch a crash cut short, so readers ignore them and the
writer truncates them too — a crash never leaves orphan events.

events.idx
----------
Little-endian; offsets are byte offsets into events.idx unless said otherwise.
The file is memory-mapped. It starts with a 4 KiB header page; everything
after it is allocated by bumping ``alloc`` and is never moved (tables that
grow are copied to a new place; the old copy becomes dead space until the next
rebuild).

Header page::

    0     8s   magic b"STRATAIX"
    8     u32  version (2; version 1 posted every file of a big event)
    12    u32  state: 0 clean (fsynced at close), 1 a writer session is or was open
    16    16s  boot: BLAKE2b-128 of the Linux boot id of that session (zeros if unknown)
    32    u64  records: N, the records 1..N are indexed
    40    u64  data_bytes: length of the events.jsonl prefix that holds records 1..N
    48    32s  head: BLAKE2b-256 of the ``hash`` of record N (detects a replaced data file)
    80    u64  alloc: end of the used part of the file (the file may be longer)
    88    u64  ids_off, 96 ids_cap, 104 ids_used        the id table
    112   u64  keys_off, 120 keys_cap, 128 keys_used    the key table
    256   32 u64    rows: the offsets of the row extents
    4088  u64  checksum: BLAKE2b-64 of bytes 0..4088

Structures (``H(b)`` is BLAKE2b-64 of ``b`` as an integer, 1 when it is 0):

* **Rows** (offset by seq): record ``s`` has an 8-byte row at index
  ``i = s - 1`` holding the byte offset of its line in events.jsonl (its end is
  the next row, or ``data_bytes`` for record N). Rows live in extents of
  doubling size: extent ``k`` holds ``1024·2^k`` rows, so ``i`` is found in O(1)
  (``k = bit_length(i // 1024 + 1) - 1``) and nothing is ever copied.
* **Id table**: open addressing with linear probing, ``ids_cap`` (a power of
  two) slots of ``(u64 H(id), u64 seq)``; ``H == 0`` marks an empty slot. Slot
  ``H & (ids_cap - 1)`` is probed first. Seek by event id reads one or two slots
  and then the one line it names: O(1). Kept at most half full; when it
  would pass that, a table twice the size is built and the header points to it.
* **Key table**: the same kind of table with 24-byte slots ``(u64 H(key),
  u64 key_off, u64 head)``: ``key_off`` points at the key (``u32 length`` +
  UTF-8 bytes) and ``head`` at the newest block of the key's posting list.
  At most 70 % full.
* **Posting blocks**: ``(u64 prev, u64 base, u32 cap, u32 fill)`` then ``cap``
  times ``u32 seq``, ascending. ``prev`` is the older block (0 for none, always a
  lower offset), ``base`` the number of entries in all older blocks, so a
  list's length is ``base + fill`` of its head. Appending fills the head block
  in place; a full block is followed by a new one twice its size (2 up to 1024
  entries). A ledger holds at most 2^32 - 1 records.

Posting keys (UTF-8)::

    k:<kind>          every record, by kind (scan(kind=...), last_of_kind)
    b:<branch>  o:<operation_id>  a:<author name>  ak:<author kind>  t:<action_type>
    p:<path>          each changed path, and each folder above it ("src/a/b.py"
                      also files under "p:src/a" and "p:src"); an event of more
                      than 256 files posts its folders instead ("p:src/a/", "/"
                      for the root, and the folders above): a path filter reads
                      "p:<path>" and "p:<its folder>/" and checks each line
    i2:<id[:2]>  i4:<id[:4]>          event id prefix buckets
    s2:<ref[:2]> s4:<ref[:4]>         snapshot id prefix buckets (also newest_with_snapshot)
    T:                events whose ts is later than every earlier event's ts; both
                      their seqs and their timestamps ascend, so seek_time is a
                      binary search that reads O(log n) lines

Every answer is checked against the line it names (the id, the filter, the
prefix), so a damaged index can hide a record but never return a wrong one.
Prefixes shorter than two characters (and the empty folder ``""``) are
answered by scanning all events.

Writing, crashes and readers
----------------------------
Only the writer changes the sidecar. Before its first change in a session it
sets ``state = 1`` with its boot id and fsyncs the header; after each batch it
rewrites the header (``records``, ``data_bytes``, ``head``, tables), which is
the commit point of the index; ``close`` fsyncs everything and sets
``state = 0``. Every change is made in an order that leaves a consistent
prefix if the process dies: the line data before the header, a key's bytes
before its slot, a block before the pointer to it, an entry before ``fill``.
So when a writer opens a sidecar with ``state = 1``:

* the same boot id (the process died, the page cache did not): a repair pass
  empties table slots that name records after N or keys allocated after
  ``alloc``, moves each head back to a committed block, trims entries after N
  and moves ``alloc`` to the end of the file (space the dead session wrote is
  never reused: a reader may still follow a pointer into it); then it catches
  up;
* another (or unknown) boot id: pages may have been lost, so it is rebuilt.

The writer also rebuilds a sidecar that is missing, has another version, a bad
checksum, or does not match events.jsonl (``head``); and catches up one that is
behind the data (records after N) by indexing the missing lines. Rebuilding
writes a temporary file, fsyncs it and renames it over events.idx.

Readers never change a file. They trust records 1..N of a valid header and
read the lines after ``data_bytes`` themselves; list entries and table slots
that name records after N are skipped (a writer may be adding them). Without a
usable sidecar a reader answers every question by reading events.jsonl. A
writer kept open after another process wrote to the ledger (it no longer holds
the lock) notices the change and becomes a reader: it refuses to append and
leaves the header alone when it closes.

Invariants
----------
* Line ``n`` of events.jsonl MUST hold record ``n`` as canonical JSON followed by
  ``\n``. The file MUST only grow, except that the writer MAY cut a torn last line.
* A batch's lines MUST be durable (fsync) before the sidecar header names them.
* Only the holder of the repository's write lock MAY open the ledger with
  ``writer=True``; only it changes files.
* The sidecar MUST NOT be trusted past record N of its header, and an answer read
  through it MUST be checked against the line it names.
* A sidecar with another version MUST be rebuilt by the writer and ignored by
  readers; a ``ledger.json`` with another format MUST be refused.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import json
import mmap
import os
import re
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.atomic import atomic_write, fsync_dir
from strata.errors import CorruptRepository, UnsupportedFormat, UsageError
from strata.ledger.driver import EventFilter, EventKeys, indexed_paths, parent_row, path_matches
from strata.ledger.records import RECORD_KINDS, Record, canonical

FORMAT = 2
META_NAME = "ledger.json"
DATA_NAME = "events.jsonl"
INDEX_NAME = "events.idx"

INDEX_MAGIC = b"STRATAIX"
INDEX_VERSION = 2
PAGE = 4096
ROWS0 = 1024  # rows in extent 0; extent k holds ROWS0 << k
MAX_SEQ = 2**32 - 1
FIRST_BLOCK = 2
MAX_BLOCK = 1024

_HEAD = struct.Struct("<8sII16sQQ32sQQQQQQQ")
_ROWS = struct.Struct("<32Q")
_ROWS_AT = 256
_CHECK_AT = PAGE - 8
_ID_SLOT = struct.Struct("<QQ")
_KEY_SLOT = struct.Struct("<QQQ")
_BLOCK = struct.Struct("<QQII")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_CHUNK = 1 << 20
_KEY_CACHE_LIMIT = 200_000
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _BadIndex(CorruptRepository):
    """The sidecar cannot be used: missing, damaged, or not matching the data.

    A writer answers it by rebuilding and a reader by reading events.jsonl; it
    only reaches a caller when a reader meets damage in the middle of a query.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the ledger index is unusable: {reason}",
            hint="run 'strata check'; the next writer rebuilds the index",
        )


# -- small helpers -------------------------------------------------------------------


def _enc(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _hash(data: bytes) -> int:
    value = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return value or 1


def _digest(text: str) -> bytes:
    return hashlib.blake2b(_enc(text), digest_size=32).digest()


def _align8(n: int) -> int:
    return (n + 7) & ~7


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def _boot_id() -> bytes | None:
    """A fingerprint of the running kernel boot, or None where the OS does not say."""
    try:
        text = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _parse(line: bytes, seq: int) -> Record:
    """Parse line ``seq`` of events.jsonl; CorruptRepository naming it when it is bad."""
    try:
        record = Record.from_line(line)
    except (CorruptRepository, RecursionError) as exc:
        raise CorruptRepository(
            f"{DATA_NAME} line {seq} is malformed: {exc}",
            hint="run 'strata check'; the line must hold record " + str(seq),
        ) from None
    if record.seq != seq:
        raise CorruptRepository(
            f"{DATA_NAME} line {seq} holds record {record.seq}, expected record {seq}",
            hint="run 'strata check'",
        )
    return record


def _limited(items: list[str], limit: int) -> list[str]:
    return items if limit < 0 else items[:limit]


def _in_prefix(value: str, prefix: str) -> bool:
    """``prefix <= value < prefix + U+FFFF``, the SQLite driver's prefix test."""
    return prefix <= value < prefix + "\uffff"


def _matches(keys: EventKeys, where: EventFilter) -> bool:
    for wanted, have in (
        (where.branch, keys.branch),
        (where.operation_id, keys.operation_id),
        (where.author, keys.author),
        (where.author_kind, keys.author_kind),
        (where.action_type, keys.action_type),
    ):
        if wanted is not None and have != wanted:
            return False
    return where.path is None or path_matches(keys.files, where.path)


def _snapshot(keys: EventKeys) -> str | None:
    ref = keys.snapshot_ref
    return None if ref is None else str(ref)


_KIND_KEYS = {kind: b"k:" + kind.encode() for kind in RECORD_KINDS}


def _event_keys(keys: EventKeys) -> list[bytes]:
    """The posting keys of one event (without ``k:event`` and ``T:``)."""
    out = [
        "b:" + keys.branch,
        "o:" + keys.operation_id,
        "a:" + keys.author,
        "ak:" + keys.author_kind,
        "t:" + keys.action_type,
        "i2:" + keys.id[:2],
        "i4:" + keys.id[:4],
    ]
    ref = _snapshot(keys)
    if ref is not None:
        out += ("s2:" + ref[:2], "s4:" + ref[:4])
    for path in indexed_paths(keys.files):  # a big event's folders (the rows end in "/")
        out.append("p:" + path)
        cut = path.find("/", 1)
        while cut > 0:
            out.append("p:" + path[:cut])
            cut = path.find("/", cut + 1)
    return [key.encode("utf-8", "surrogatepass") for key in dict.fromkeys(out)]


def _filter_keys(where: EventFilter) -> list[bytes]:
    """Posting keys whose lists hold every event that passes ``where``."""
    keys = [
        prefix + _enc(value)
        for prefix, value in (
            (b"b:", where.branch),
            (b"o:", where.operation_id),
            (b"a:", where.author),
            (b"ak:", where.author_kind),
            (b"t:", where.action_type),
        )
        if value is not None
    ]
    return keys


def _path_keys(where: EventFilter) -> list[bytes]:
    """The posting keys whose lists together hold every event that passes the path filter.

    The path's own list and its folder's row of big events (``indexed_paths``);
    the candidates are checked against the record.
    """
    if where.path is None or not where.path.strip("/"):
        return []
    return [b"p:" + _enc(where.path.strip("/")), b"p:" + _enc(parent_row(where.path))]


def _prefix_key(kind: str, prefix: str) -> bytes | None:
    """The bucket holding every id (``i``) or snapshot (``s``) that starts with ``prefix``."""
    if len(prefix) >= 4:
        return f"{kind}4:".encode() + _enc(prefix[:4])
    if len(prefix) >= 2:
        return f"{kind}2:".encode() + _enc(prefix[:2])
    return None


#: the envelope after a record's body: its kind, read without parsing the body
_KIND_AT_END = re.compile(
    rb',"hash":"[0-9a-f]*","kind":"([a-z_]+)"(?:,"lane":"(?:[^"\\]|\\.)*")?'
    rb',"prev":"[0-9a-f]*","seq":[0-9]+\}$'
)


def _visible_end(fd: int, size: int, batch_end: str | None = None) -> int:
    """The length of events.jsonl without a torn last line (nor a cut-short batch).

    With ``batch_end``, whole lines after the last record of that kind are a
    batch whose append a crash interrupted: they end no batch, so they are
    not part of the ledger either.
    """
    end = _line_end_before(fd, size)
    if batch_end is None:
        return end
    wanted = batch_end.encode()
    pos = end
    while pos > 0:
        start = _line_end_before(fd, pos - 1)  # the start of the line ending at pos
        tail = os.pread(fd, min(pos - 1 - start, 512), max(start, pos - 1 - 512))
        m = _KIND_AT_END.search(tail)
        if m is None or m.group(1) == wanted:
            return pos  # a batch's last line (or one this code cannot read: kept)
        pos = start
    return 0


def _line_end_before(fd: int, pos: int) -> int:
    """The end of the last complete line before ``pos`` (0 if none)."""
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        pos = start
    return 0


# -- the sidecar ------------------------------------------------------------------------


@dataclass
class _Header:
    state: int = 0
    boot: bytes = bytes(16)
    records: int = 0
    data_bytes: int = 0
    head: bytes = bytes(32)
    alloc: int = PAGE
    ids_off: int = 0
    ids_cap: int = 0
    ids_used: int = 0
    keys_off: int = 0
    keys_cap: int = 0
    keys_used: int = 0
    rows: list[int] = field(default_factory=lambda: [0] * 32)

    def pack(self) -> bytes:
        page = bytearray(PAGE)
        _HEAD.pack_into(
            page,
            0,
            INDEX_MAGIC,
            INDEX_VERSION,
            self.state,
            self.boot,
            self.records,
            self.data_bytes,
            self.head,
            self.alloc,
            self.ids_off,
            self.ids_cap,
            self.ids_used,
            self.keys_off,
            self.keys_cap,
            self.keys_used,
        )
        _ROWS.pack_into(page, _ROWS_AT, *self.rows)
        page[_CHECK_AT:] = hashlib.blake2b(bytes(page[:_CHECK_AT]), digest_size=8).digest()
        return bytes(page)

    @classmethod
    def read(cls, buf: mmap.mmap, size: int) -> _Header:
        if size < PAGE or len(buf) < PAGE:
            raise _BadIndex(f"{INDEX_NAME} is too short")
        raw = buf[:PAGE]
        if raw[:8] != INDEX_MAGIC:
            raise _BadIndex(f"{INDEX_NAME} is not a Strata index")
        if hashlib.blake2b(raw[:_CHECK_AT], digest_size=8).digest() != raw[_CHECK_AT:]:
            raise _BadIndex(f"{INDEX_NAME} has a bad header checksum")
        (_, version, state, boot, records, data_bytes, head, alloc, *tables) = _HEAD.unpack_from(
            raw
        )
        if version != INDEX_VERSION:
            raise _BadIndex(f"{INDEX_NAME} has version {version}")
        h = cls(state, boot, records, data_bytes, head, alloc, *tables)
        h.rows = list(_ROWS.unpack_from(raw, _ROWS_AT))
        h.check(size)
        return h

    def check(self, size: int) -> None:
        def inside(off: int, length: int) -> bool:
            return off >= PAGE and off + length <= self.alloc

        ok = (
            self.state in (0, 1)
            and PAGE <= self.alloc <= size
            and self.records <= MAX_SEQ
            and all(cap > 0 and cap & (cap - 1) == 0 for cap in (self.ids_cap, self.keys_cap))
            and self.ids_used < self.ids_cap
            and self.keys_used < self.keys_cap
            and inside(self.ids_off, self.ids_cap * _ID_SLOT.size)
            and inside(self.keys_off, self.keys_cap * _KEY_SLOT.size)
            and all(off == 0 or inside(off, (ROWS0 << k) * 8) for k, off in enumerate(self.rows))
            and (self.records == 0 or self.rows[_extent(self.records - 1)[0]] != 0)
        )
        if not ok:
            raise _BadIndex(f"{INDEX_NAME} has an inconsistent header")


def _extent(i: int) -> tuple[int, int]:
    """(extent, index inside it) of row ``i``."""
    k = (i // ROWS0 + 1).bit_length() - 1
    return k, i - ROWS0 * ((1 << k) - 1)


class _Sidecar:
    """events.idx, memory-mapped: lookups for everyone, updates for the writer."""

    def __init__(self, path: Path, fd: int, header: _Header, *, writable: bool) -> None:
        self.path = path
        self.fd = fd
        self.writable = writable
        self.h = header
        self.ino = os.fstat(fd).st_ino
        self.mm = self._map()
        self._page = b""  # the header page as last parsed (readers)
        self.written = self.mm[:PAGE]  # the header page as last written (the writer)
        self.max_ts: str | None = None
        self._session = False
        self._kcache: dict[bytes, list[int]] = {}

    # -- opening and closing ------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, writable: bool) -> _Sidecar:
        try:
            fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | _O_CLOEXEC)
        except FileNotFoundError:
            raise _BadIndex(f"{INDEX_NAME} is missing") from None
        try:
            size = os.fstat(fd).st_size
            if size < PAGE:
                raise _BadIndex(f"{INDEX_NAME} is too short")
            with mmap.mmap(fd, PAGE, access=mmap.ACCESS_READ) as first:
                header = _Header.read(first, size)
            return cls(path, fd, header, writable=writable)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def create(cls, path: Path, *, expected_events: int) -> _Sidecar:
        """A new, empty sidecar at ``path`` (replacing any file there)."""
        ids_cap = _pow2_at_least(max(256, 2 * expected_events + 1))
        keys_cap = _pow2_at_least(max(256, expected_events // 2))
        h = _Header(ids_cap=ids_cap, keys_cap=keys_cap)
        h.ids_off = PAGE
        h.keys_off = PAGE + ids_cap * _ID_SLOT.size
        h.alloc = h.keys_off + keys_cap * _KEY_SLOT.size
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, _align8(h.alloc) + 65536)
            os.pwrite(fd, h.pack(), 0)
            return cls(path, fd, h, writable=True)
        except BaseException:
            os.close(fd)
            raise

    def _map(self) -> mmap.mmap:
        size = os.fstat(self.fd).st_size
        access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
        return mmap.mmap(self.fd, size, access=access)

    def _remap(self) -> None:
        old, self.mm = self.mm, self._map()
        if self.writable:
            old.close()  # readers leave old maps to the garbage collector: a generator may use one

    def close(self) -> None:
        """Finish the writer session (fsync, state 0) and release the file."""
        try:
            if self._session and self.mm[:PAGE] == self.written:  # still ours to finish
                self.mm.flush()
                os.fsync(self.fd)
                self.h.state = 0
                self._write_header()
                self.mm.flush()
                os.fsync(self.fd)
                self._session = False
        finally:
            if self.writable:
                self.mm.close()
            os.close(self.fd)

    def abandon(self) -> None:
        """Release the file without finishing the session: the next writer repairs it."""
        self._session = False
        self.close()

    def reload(self) -> bool:
        """Re-read the header (readers); True when it changed. _BadIndex when replaced."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise _BadIndex(f"{INDEX_NAME} was removed") from None
        if st.st_ino != self.ino:
            raise _BadIndex(f"{INDEX_NAME} was replaced")
        for attempt in range(5):
            if os.fstat(self.fd).st_size > len(self.mm):
                self._remap()
            if self.mm[:PAGE] == self._page:
                return False
            try:
                header = _Header.read(self.mm, len(self.mm))
                self._page = self.mm[:PAGE]
                break
            except _BadIndex:  # perhaps torn by a writer rewriting the page right now
                if attempt == 4:
                    raise
                time.sleep(0.002)
        changed = header != self.h
        self.h = header
        return changed

    # -- reading --------------------------------------------------------------------------

    def _need(self, off: int, length: int) -> None:
        if off + length > len(self.mm):
            self._remap()
            if off + length > len(self.mm):
                raise _BadIndex(f"{INDEX_NAME} names byte {off + length} past its end")

    def _unpack(self, st: struct.Struct, off: int) -> tuple[Any, ...]:
        self._need(off, st.size)
        return st.unpack_from(self.mm, off)

    def row(self, seq: int) -> int:
        k, j = _extent(seq - 1)
        base = self.h.rows[k]
        if not base:
            raise _BadIndex(f"{INDEX_NAME} has no row for record {seq}")
        return int(self._unpack(_U64, base + 8 * j)[0])

    def span(self, seq: int) -> tuple[int, int]:
        """Where line ``seq`` (1 <= seq <= N) is in events.jsonl, newline included."""
        start = self.row(seq)
        end = self.row(seq + 1) if seq < self.h.records else self.h.data_bytes
        if not start < end <= self.h.data_bytes:
            raise _BadIndex(f"{INDEX_NAME} has a wrong row for record {seq}")
        return start, end

    def id_seqs(self, ident: str) -> Iterator[int]:
        """Records whose id hashes like ``ident`` (check them: hashes collide)."""
        want = _hash(_enc(ident))
        mask = self.h.ids_cap - 1
        pos = want & mask
        for _ in range(self.h.ids_cap):
            got, seq = self._unpack(_ID_SLOT, self.h.ids_off + pos * _ID_SLOT.size)
            if got == 0:
                return
            if got == want:
                yield seq
            pos = (pos + 1) & mask

    def _key_at(self, off: int) -> bytes:
        (length,) = self._unpack(_U32, off)
        self._need(off + 4, length)
        return self.mm[off + 4 : off + 4 + length]

    def _probe(self, key: bytes, want: int) -> tuple[int, int]:
        """(slot, head) of ``key``, or (empty slot, -1) when it is absent."""
        mask = self.h.keys_cap - 1
        pos = want & mask
        for _ in range(self.h.keys_cap):
            got, key_off, head = self._unpack(_KEY_SLOT, self.h.keys_off + pos * _KEY_SLOT.size)
            if got == 0:
                return pos, -1
            if got == want and self._key_at(key_off) == key:
                return pos, head
            pos = (pos + 1) & mask
        raise _BadIndex(f"{INDEX_NAME} has a full key table")

    def head(self, key: bytes) -> int:
        """The newest block of ``key``'s list (0 when there is none)."""
        return max(0, self._probe(key, _hash(key))[1])

    def block(self, off: int) -> tuple[int, int, int, int]:
        prev, base, cap, fill = self._unpack(_BLOCK, off)
        if prev >= off or fill > cap or fill == 0:
            raise _BadIndex(f"{INDEX_NAME} has a damaged posting block at {off}")
        self._need(off, _BLOCK.size + 4 * cap)
        return prev, base, cap, fill

    def entry(self, off: int, i: int) -> int:
        return int(_U32.unpack_from(self.mm, off + _BLOCK.size + 4 * i)[0])

    def run(self, off: int, lo: int, hi: int) -> tuple[int, ...]:
        """Entries ``lo <= i < hi`` of the block at ``off``."""
        return struct.unpack_from(f"<{hi - lo}I", self.mm, off + _BLOCK.size + 4 * lo)

    def count(self, key: bytes) -> int:
        """The length of ``key``'s list (may include entries after N)."""
        head = self.head(key)
        if not head:
            return 0
        _, base, _, fill = self.block(head)
        return base + fill

    def desc(self, key: bytes, *, below: int) -> Iterator[int]:
        """Entries of ``key``'s list that are < ``below``, newest first."""
        off = self.head(key)
        while off:
            prev, _, _, fill = self.block(off)
            i = _first_true(fill, lambda j: self.entry(off, j) >= below)  # noqa: B023
            while i > 0:
                lo = max(0, i - 1024)
                yield from reversed(self.run(off, lo, i))
                i = lo
            off = prev

    def blocks(self, key: bytes) -> list[tuple[int, int]]:
        """(offset, fill) of every block of ``key``'s list, oldest first."""
        out: list[tuple[int, int]] = []
        off = self.head(key)
        while off:
            prev, _, _, fill = self.block(off)
            out.append((off, fill))
            off = prev
        out.reverse()
        return out

    def asc(self, key: bytes, *, start: int, below: int) -> Iterator[int]:
        """Entries of ``key``'s list with ``start <= seq < below``, oldest first."""
        for off, fill in self.blocks(key):
            if self.entry(off, fill - 1) < start:
                continue
            i = _first_true(fill, lambda j: self.entry(off, j) >= start)  # noqa: B023
            while i < fill:
                hi = min(fill, i + 1024)
                for seq in self.run(off, i, hi):
                    if seq >= below:
                        return
                    yield seq
                i = hi

    def all_keys(self) -> Iterator[tuple[bytes, int]]:
        """Every (key, head) in the key table."""
        table = self.mm[self.h.keys_off : self.h.keys_off + self.h.keys_cap * _KEY_SLOT.size]
        for got, key_off, head in _KEY_SLOT.iter_unpack(table):
            if got:
                yield self._key_at(key_off), head

    def id_slots(self) -> Iterator[tuple[int, int]]:
        table = self.mm[self.h.ids_off : self.h.ids_off + self.h.ids_cap * _ID_SLOT.size]
        for got, seq in _ID_SLOT.iter_unpack(table):
            if got:
                yield got, seq

    # -- writing (the writer only) ---------------------------------------------------------

    def _write_header(self) -> None:
        self.written = self.h.pack()
        self.mm[:PAGE] = self.written

    def changed_elsewhere(self) -> bool:
        """True when another process has written or replaced the sidecar (writers)."""
        try:
            replaced = os.stat(self.path).st_ino != self.ino
        except FileNotFoundError:
            replaced = True
        return replaced or self.mm[:PAGE] != self.written

    def begin(self) -> None:
        """Mark a writer session (durably) before the first change."""
        if not self._session:
            self.h.state = 1
            self.h.boot = _boot_id() or bytes(16)
            self._write_header()
            self.mm.flush()
            os.fsync(self.fd)
            self._session = True

    def commit(self, last: Record, data_bytes: int) -> None:
        """Make records 1..last.seq visible: rewrite the header."""
        self.h.records = last.seq
        self.h.data_bytes = data_bytes
        self.h.head = _digest(last.hash)
        self._write_header()

    def _alloc(self, length: int) -> int:
        off = _align8(self.h.alloc)
        self.h.alloc = off + length
        if self.h.alloc > len(self.mm):
            size = len(self.mm)
            os.ftruncate(self.fd, max(self.h.alloc, size + max(65536, size // 4)))
            self._remap()
        return off

    def add(self, batch: Sequence[tuple[Record, int, EventKeys | None]]) -> None:
        """Index records (record, offset of its line, its keys when it is an event).

        Nothing is visible before :meth:`commit`. The entries of one key are
        written together, in ascending seq order.
        """
        lists: dict[bytes, list[int]] = {}
        for record, offset, keys in batch:
            seq = record.seq
            k, j = _extent(seq - 1)
            if not self.h.rows[k]:
                self.h.rows[k] = self._alloc((ROWS0 << k) * 8)
            _U64.pack_into(self.mm, self.h.rows[k] + 8 * j, offset)
            lists.setdefault(_KIND_KEYS[record.kind], []).append(seq)
            if keys is None:
                continue
            self._insert_id(keys.id, seq)
            for key in _event_keys(keys):
                lists.setdefault(key, []).append(seq)
            if self.max_ts is None or keys.ts > self.max_ts:
                lists.setdefault(b"T:", []).append(seq)
                self.max_ts = keys.ts
        for key, seqs in lists.items():
            self._post(key, seqs)

    def _insert_id(self, ident: str, seq: int) -> None:
        if (self.h.ids_used + 1) * 2 > self.h.ids_cap:
            self._grow_ids()
        self._put_id(self.h.ids_off, self.h.ids_cap, _hash(_enc(ident)), seq)
        self.h.ids_used += 1

    def _put_id(self, table: int, cap: int, want: int, seq: int) -> None:
        mask = cap - 1
        pos = want & mask
        while _U64.unpack_from(self.mm, table + pos * _ID_SLOT.size)[0]:
            pos = (pos + 1) & mask
        _ID_SLOT.pack_into(self.mm, table + pos * _ID_SLOT.size, want, seq)

    def _grow_ids(self) -> None:
        cap = self.h.ids_cap * 2
        table = self._alloc(cap * _ID_SLOT.size)
        self.mm[table : table + cap * _ID_SLOT.size] = bytes(cap * _ID_SLOT.size)
        for want, seq in list(self.id_slots()):
            self._put_id(table, cap, want, seq)
        self.h.ids_off, self.h.ids_cap = table, cap

    def _grow_keys(self) -> None:
        cap = self.h.keys_cap * 2
        table = self._alloc(cap * _KEY_SLOT.size)
        self.mm[table : table + cap * _KEY_SLOT.size] = bytes(cap * _KEY_SLOT.size)
        old = self.mm[self.h.keys_off : self.h.keys_off + self.h.keys_cap * _KEY_SLOT.size]
        mask = cap - 1
        for want, key_off, head in _KEY_SLOT.iter_unpack(old):
            if want:
                pos = want & mask
                while _U64.unpack_from(self.mm, table + pos * _KEY_SLOT.size)[0]:
                    pos = (pos + 1) & mask
                _KEY_SLOT.pack_into(self.mm, table + pos * _KEY_SLOT.size, want, key_off, head)
        self.h.keys_off, self.h.keys_cap = table, cap
        self._kcache.clear()

    def _slot_of(self, key: bytes) -> tuple[int, int]:
        """(slot, head) of ``key``, adding the key when it is new."""
        want = _hash(key)
        while True:
            pos, head = self._probe(key, want)
            if head >= 0:
                return pos, head
            if (self.h.keys_used + 1) * 10 > self.h.keys_cap * 7:
                self._grow_keys()
                continue
            key_off = self._alloc(4 + len(key))
            _U32.pack_into(self.mm, key_off, len(key))
            self.mm[key_off + 4 : key_off + 4 + len(key)] = key
            _KEY_SLOT.pack_into(self.mm, self.h.keys_off + pos * _KEY_SLOT.size, want, key_off, 0)
            self.h.keys_used += 1
            return pos, 0

    def _post(self, key: bytes, seqs: list[int]) -> None:
        """Append ascending ``seqs`` to ``key``'s list."""
        cached = self._kcache.get(key)
        if cached is None:
            pos, head = self._slot_of(key)
            cap = fill = base = 0
            if head:
                _, base, cap, fill = self.block(head)
            cached = [pos, head, cap, fill, base]
            if len(self._kcache) >= _KEY_CACHE_LIMIT:
                self._kcache.clear()
            self._kcache[key] = cached
        pos, head, cap, fill, base = cached
        done = 0
        if head and fill < cap:  # fill the head block: the entries, then its fill
            done = min(cap - fill, len(seqs))
            struct.pack_into(f"<{done}I", self.mm, head + _BLOCK.size + 4 * fill, *seqs[:done])
            fill += done
            _U32.pack_into(self.mm, head + 20, fill)
        while done < len(seqs):  # new blocks: the block, then the pointer to it
            cap = min(MAX_BLOCK, max(FIRST_BLOCK, 2 * cap)) if head else FIRST_BLOCK
            part = seqs[done : done + cap]
            off = self._alloc(_BLOCK.size + 4 * cap)
            _BLOCK.pack_into(self.mm, off, head, base + fill, cap, len(part))
            struct.pack_into(f"<{len(part)}I", self.mm, off + _BLOCK.size, *part)
            _U64.pack_into(self.mm, self.h.keys_off + pos * _KEY_SLOT.size + 16, off)
            head, base, fill = off, base + fill, len(part)
            done += len(part)
        cached[1:] = [head, cap, fill, base]

    def repair(self) -> None:
        """Undo what a writer that died before its commit left behind (same boot only)."""
        n, alloc = self.h.records, self.h.alloc
        ids_used = 0
        table = self.mm[self.h.ids_off : self.h.ids_off + self.h.ids_cap * _ID_SLOT.size]
        for pos, (got, seq) in enumerate(_ID_SLOT.iter_unpack(table)):
            if got and not 1 <= seq <= n:
                _ID_SLOT.pack_into(self.mm, self.h.ids_off + pos * _ID_SLOT.size, 0, 0)
            elif got:
                ids_used += 1
        keys_used = 0
        table = self.mm[self.h.keys_off : self.h.keys_off + self.h.keys_cap * _KEY_SLOT.size]
        for pos, (got, key_off, head) in enumerate(_KEY_SLOT.iter_unpack(table)):
            at = self.h.keys_off + pos * _KEY_SLOT.size
            if not got:
                continue
            if not PAGE <= key_off < alloc:
                _KEY_SLOT.pack_into(self.mm, at, 0, 0, 0)
                continue
            while head >= alloc:
                head = self.block(head)[0]
            while head:
                prev, _, _, fill = self.block(head)
                kept = _first_true(fill, lambda j: self.entry(head, j) > n)  # noqa: B023
                if kept:
                    _U32.pack_into(self.mm, head + 20, kept)
                    break
                head = prev  # only a block from the dead session can be left empty
            _KEY_SLOT.pack_into(self.mm, at, got, key_off, head)
            keys_used += 1
        if (ids_used, keys_used) != (self.h.ids_used, self.h.keys_used):
            raise _BadIndex(f"{INDEX_NAME} tables do not match its header")
        # Never reuse space the dead session wrote: a reader may still follow a pointer into it.
        self.h.alloc = max(alloc, len(self.mm))
        self._kcache.clear()
        self._session = True
        self._write_header()


# -- the driver ---------------------------------------------------------------------------


class JsonlDriver:
    """Records in ``events.jsonl`` with an ``events.idx`` sidecar index.

    Open it with ``writer=True`` only while holding the repository's write lock:
    the writer repairs a torn last line and keeps the sidecar up to date.
    Readers (``writer=False``) never change a file and always see the latest
    records, with or without a usable sidecar.
    """

    name = "jsonl"

    def __init__(
        self,
        folder: Path,
        *,
        create: bool = False,
        writer: bool = False,
        batch_end: str | None = None,
    ) -> None:
        self.folder = folder
        self.writer = writer
        #: the kind of record that ends every batch (the ledger's ``operation``): records
        #: after the last one are a batch a crash cut short, unseen and cut by the writer
        self.batch_end = batch_end
        self._data_path = folder / DATA_NAME
        self._index_path = folder / INDEX_NAME
        if create:
            self._create_files()
        self._read_meta()
        flags = (os.O_RDWR | os.O_APPEND) if writer else os.O_RDONLY
        try:
            self._fd = os.open(self._data_path, flags | _O_CLOEXEC)
        except FileNotFoundError:
            raise CorruptRepository(f"the ledger file {self._data_path} is missing") from None
        self._size = os.fstat(self._fd).st_size
        self._end = _visible_end(self._fd, self._size, self.batch_end)
        self._side: _Sidecar | None = None
        self._tail: list[Record] = []  # records after the index's N, read from the data
        self._tail_from = 0  # data_bytes of the index the tail was read against
        self._parsed_to = 0  # where reading the tail stopped
        self._index_sig: tuple[int, int, int] | None = None
        try:
            if writer:
                self._open_writer()
            else:
                self._open_reader()
        except BaseException:
            self.close()
            raise

    # -- files ----------------------------------------------------------------------------

    def _create_files(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = self.folder / META_NAME
        if not meta.exists():
            atomic_write(meta, canonical({"driver": "jsonl", "format": FORMAT}) + b"\n")
        if not self._data_path.exists():
            os.close(os.open(self._data_path, os.O_WRONLY | os.O_CREAT | _O_CLOEXEC, 0o644))
        fsync_dir(self.folder)

    def _read_meta(self) -> None:
        meta = self.folder / META_NAME
        try:
            raw = meta.read_bytes()
        except FileNotFoundError:
            raise CorruptRepository(f"the ledger {self.folder} is missing") from None
        try:
            info = json.loads(raw)
            found = info.get("format")
            driver = info.get("driver")
        except (ValueError, AttributeError):
            raise CorruptRepository(f"{meta} is not a ledger description") from None
        if found != FORMAT:
            raise UnsupportedFormat("the ledger", found, FORMAT)
        if driver != "jsonl":
            raise CorruptRepository(f"{meta} describes a {driver!r} ledger, not a JSONL one")

    def close(self) -> None:
        """Finish the writer session and release the files."""
        side, self._side = self._side, None
        try:
            if side is not None:
                side.close()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _lines(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """(offset, line without newline) of the lines in bytes [start, end)."""
        buf, at, pos = b"", start, start
        while pos < end:
            chunk = os.pread(self._fd, min(_CHUNK, end - pos), pos)
            if not chunk:
                raise CorruptRepository(f"{DATA_NAME} is shorter than its index says")
            pos += len(chunk)
            parts = (buf + chunk).split(b"\n")
            buf = parts.pop()
            for line in parts:
                yield at, line
                at += len(line) + 1
        if buf:
            raise CorruptRepository(f"{DATA_NAME} has a line that does not end where expected")

    def _records_from(self, start: int, end: int, seq: int) -> Iterator[tuple[int, Record]]:
        for offset, line in self._lines(start, end):
            yield offset, _parse(line, seq)
            seq += 1

    def _read(self, side: _Sidecar, seq: int) -> Record:
        start, end = side.span(seq)
        data = os.pread(self._fd, end - start, start)
        if len(data) != end - start or not data.endswith(b"\n"):
            raise CorruptRepository(f"{DATA_NAME} line {seq} is cut short")
        return _parse(data[:-1], seq)

    # -- opening --------------------------------------------------------------------------

    def _check_head(self, side: _Sidecar) -> None:
        """_BadIndex unless the sidecar's record N is the data's record N."""
        h = side.h
        if h.data_bytes > self._end:
            raise _BadIndex(f"{INDEX_NAME} covers more than {DATA_NAME} holds")
        if h.records == 0:
            if h.data_bytes:
                raise _BadIndex(f"{INDEX_NAME} is inconsistent")
            return
        start, end = side.span(h.records)
        line = os.pread(self._fd, end - start, start)
        try:
            record = Record.from_line(line[:-1]) if line.endswith(b"\n") else None
        except (CorruptRepository, RecursionError):
            record = None
        if record is None or record.seq != h.records or _digest(record.hash) != h.head:
            raise _BadIndex(f"{INDEX_NAME} does not match {DATA_NAME}")

    def _open_writer(self) -> None:
        if self._end < self._size:  # a torn last line: the append never finished
            os.ftruncate(self._fd, self._end)
            os.fsync(self._fd)
            self._size = self._end
        try:
            side = _Sidecar.open(self._index_path, writable=True)
        except _BadIndex:
            self._rebuild()
            return
        try:
            if side.h.state == 1:
                boot = _boot_id()
                if boot is None or side.h.boot != boot:
                    raise _BadIndex("the last writer did not finish before the system stopped")
                side.repair()
            self._check_head(side)
            side.max_ts = self._latest_ts(side)
            self._index_from(side, side.h.data_bytes, side.h.records + 1)
        except (_BadIndex, struct.error):
            side.abandon()
            self._rebuild()
            return
        except BaseException:
            side.abandon()
            raise
        self._side = side

    def _latest_ts(self, side: _Sidecar) -> str | None:
        last = next(side.desc(b"T:", below=side.h.records + 1), None)
        return None if last is None else EventKeys.of(self._read(side, last)).ts

    def _index_from(self, side: _Sidecar, start: int, seq: int) -> None:
        """Index the lines from byte ``start`` (record ``seq``) to the end, then commit."""
        batch: list[tuple[Record, int, EventKeys | None]] = []
        last: Record | None = None
        for offset, record in self._records_from(start, self._end, seq):
            batch.append((record, offset, EventKeys.of(record) if record.kind == "event" else None))
            last = record
            if len(batch) == 4096:
                side.begin()
                side.add(batch)
                batch = []
        if batch:
            side.begin()
            side.add(batch)
        if last is not None:
            side.commit(last, self._end)

    def _rebuild(self) -> None:
        """Write a new sidecar from the data, then swap it in (temp, fsync, rename)."""
        if self._side is not None:
            self._side.close()
            self._side = None
        tmp = self.folder / (INDEX_NAME + ".tmp")
        lines = sum(
            os.pread(self._fd, _CHUNK, at).count(b"\n") for at in range(0, self._end, _CHUNK)
        )
        side = _Sidecar.create(tmp, expected_events=lines)
        try:
            self._index_from(side, 0, 1)
            side.close()
        except BaseException:
            side.abandon()
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self._index_path)
        fsync_dir(self.folder)
        self._side = _Sidecar.open(self._index_path, writable=True)
        self._side.max_ts = self._latest_ts(self._side)
        self._tail, self._tail_from, self._parsed_to = [], self._end, self._end

    def _open_reader(self) -> None:
        self._side = self._try_reader_index()
        self._sync_tail()

    def _try_reader_index(self) -> _Sidecar | None:
        try:
            st = os.stat(self._index_path)
        except FileNotFoundError:
            self._index_sig = None
            return None
        self._index_sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        try:
            side = _Sidecar.open(self._index_path, writable=False)
        except (_BadIndex, OSError, ValueError):
            return None
        try:
            boot = _boot_id()
            if side.h.state == 1 and boot is not None and side.h.boot != boot:
                raise _BadIndex("the last writer did not finish before the system stopped")
            self._check_head(side)
        except (_BadIndex, struct.error):
            side.close()
            return None
        return side

    def _refresh(self) -> None:
        """Readers: pick up what a writer did since the last call."""
        if self.writer:
            side = self._side
            if os.fstat(self._fd).st_size == self._size and not (
                side is not None and side.changed_elsewhere()
            ):
                return
            self._demote()
        # The header first, then the data: a writer makes lines durable before the
        # header that names them, so the data read after it holds all it names.
        side = self._side
        changed = False
        if side is not None:
            try:
                changed = side.reload()
            except (_BadIndex, struct.error):
                side.close()
                self._side = side = None
        size = os.fstat(self._fd).st_size
        if size != self._size:
            self._size = size
            self._end = _visible_end(self._fd, size, self.batch_end)
        if side is not None and changed:
            try:
                self._check_head(side)
            except (_BadIndex, struct.error):
                side.close()
                self._side = side = None
        if side is None:
            try:
                st = os.stat(self._index_path)
                sig: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                sig = None
            if sig is not None and sig != self._index_sig:
                self._side = self._try_reader_index()
        self._sync_tail()

    def _demote(self) -> None:
        """Become a reader: another process wrote, so this one no longer holds the lock.

        A writer is only correct while it holds the write lock. One kept open after
        that finds the files changed under it; it then reads like any reader (and
        refuses to append) instead of acting on what it last knew.
        """
        self.writer = False
        if self._side is not None:
            self._side.abandon()
        self._side = None
        self._size = -1
        self._tail, self._tail_from, self._parsed_to = [], 0, 0
        self._index_sig = None
        self._refresh()

    def _sync_tail(self) -> None:
        side = self._side
        n, base = (side.h.records, side.h.data_bytes) if side is not None else (0, 0)
        if base != self._tail_from or self._end < self._parsed_to:
            keep = [r for r in self._tail if r.seq > n]
            ok = self._parsed_to >= base and (not keep or keep[0].seq == n + 1)
            if base >= self._tail_from and self._end >= self._parsed_to and ok:
                self._tail = keep
            else:
                self._tail, self._parsed_to = [], base
            self._tail_from = base
        if self._end > self._parsed_to:
            seq = n + len(self._tail) + 1
            self._tail.extend(r for _, r in self._records_from(self._parsed_to, self._end, seq))
            self._parsed_to = self._end

    def _view(self) -> tuple[_Sidecar | None, int, list[Record]]:
        """(sidecar, N, records after N) as of now."""
        self._refresh()
        side = self._side
        return side, (side.h.records if side is not None else 0), self._tail

    # -- writing --------------------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> None:
        """Append a batch: one write, fsync, then the index; all or nothing."""
        side, n, tail = self._view()
        if not self.writer:
            raise UsageError(
                "this JSONL ledger is open for reading (opened so, or another process wrote "
                "to it since); appending needs a writer opened under the write lock"
            )
        if not records:
            return
        expected = n + len(tail) + 1
        for record in records:
            if record.seq != expected:
                raise CorruptRepository(
                    f"append out of order: record {record.seq} after {expected - 1}"
                )
            if record.kind not in RECORD_KINDS:
                raise CorruptRepository(f"record {record.seq} has an unknown kind {record.kind!r}")
            expected += 1
        if expected - 1 > MAX_SEQ:
            raise CorruptRepository(f"a JSONL ledger holds at most {MAX_SEQ} records")
        keys = [EventKeys.of(r) if r.kind == "event" else None for r in records]
        fresh: set[str] = set()
        for record, k in zip(records, keys, strict=True):
            if k is not None:
                if k.id in fresh or self._find_event(side, n, tail, k.id) is not None:
                    raise CorruptRepository(
                        f"event id {k.id} is already in the ledger (record {record.seq})"
                    )
                fresh.add(k.id)
        lines = [record.to_line() + b"\n" for record in records]
        data = b"".join(lines)
        start = self._end
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, start)
            raise
        self._end = self._size = start + len(data)
        if side is None:
            self._tail.extend(records)
            self._parsed_to = self._end
            return
        try:
            side.begin()
            batch = []
            offset = start
            for record, line, k in zip(records, lines, keys, strict=True):
                batch.append((record, offset, k))
                offset += len(line)
            side.add(batch)
            side.commit(records[-1], self._end)
        except BaseException as exc:
            # The records are durable; the index is not. Serve them from events.jsonl
            # for now; the next writer repairs the sidecar (state 1) and catches up.
            side.abandon()
            self._side = None
            self._tail, self._tail_from, self._parsed_to = [], 0, 0
            self._sync_tail()
            if not isinstance(exc, OSError):
                raise

    # -- reading --------------------------------------------------------------------------

    def count(self) -> int:
        """How many records there are."""
        _, n, tail = self._view()
        return n + len(tail)

    def last(self) -> Record | None:
        """The newest record."""
        side, n, tail = self._view()
        if tail:
            return tail[-1]
        return self._read(side, n) if side is not None and n else None

    def get(self, seq: int) -> Record:
        """The record at ``seq``; KeyError when there is none."""
        side, n, tail = self._view()
        if side is not None and 1 <= seq <= n:
            return self._read(side, seq)
        if tail and tail[0].seq <= seq <= tail[-1].seq:
            return tail[seq - tail[0].seq]
        raise KeyError(seq)

    def scan(
        self,
        *,
        start: int = 1,
        stop: int | None = None,
        kind: str | None = None,
        reverse: bool = False,
    ) -> Iterator[Record]:
        """Records with ``start <= seq < stop``, optionally of one kind, in either order."""
        side, n, tail = self._view()
        lo = max(start, 1)
        hi = n + len(tail) + 1 if stop is None else min(stop, n + len(tail) + 1)
        if lo >= hi:
            return iter(())
        in_tail = [r for r in tail if lo <= r.seq < hi and (kind is None or r.kind == kind)]
        if side is None or lo > n:
            return iter(reversed(in_tail) if reverse else in_tail)
        top = min(hi, n + 1)  # index part: lo <= seq < top
        if kind is not None:
            key = _KIND_KEYS.get(kind, b"k:" + _enc(kind))
            seqs = side.desc(key, below=top) if reverse else side.asc(key, start=lo, below=top)
            indexed = self._by_seq(side, seqs, lo if reverse else 0)
        elif reverse:
            indexed = self._backward(side, lo, top)
        else:
            indexed = (r for _, r in self._records_from(side.row(lo), side.span(top - 1)[1], lo))
        if reverse:
            return self._chain(reversed(in_tail), indexed)
        return self._chain(indexed, in_tail)

    @staticmethod
    def _chain(*parts: Iterator[Record] | Sequence[Record]) -> Iterator[Record]:
        for part in parts:
            yield from part

    def _by_seq(self, side: _Sidecar, seqs: Iterator[int], stop_below: int) -> Iterator[Record]:
        for seq in seqs:
            if seq < stop_below:
                return
            yield self._read(side, seq)

    def _backward(self, side: _Sidecar, lo: int, top: int) -> Iterator[Record]:
        b = top
        while b > lo:
            a = max(lo, b - 256)
            first, end = side.row(a), side.span(b - 1)[1]
            batch = list(self._records_from(first, end, a))
            for _, record in reversed(batch):
                yield record
            b = a

    def last_of_kind(self, kind: str) -> Record | None:
        """The newest record of one kind."""
        side, n, tail = self._view()
        for record in reversed(tail):
            if record.kind == kind:
                return record
        if side is None:
            return None
        seq = next(side.desc(_KIND_KEYS.get(kind, b"k:" + _enc(kind)), below=n + 1), None)
        return None if seq is None else self._read(side, seq)

    def _find_event(
        self, side: _Sidecar | None, n: int, tail: list[Record], event_id: str
    ) -> Record | None:
        if side is not None:
            for seq in side.id_seqs(event_id):
                if 1 <= seq <= n:
                    record = self._read(side, seq)
                    if record.kind == "event" and EventKeys.of(record).id == event_id:
                        return record
        for record in tail:
            if record.kind == "event" and EventKeys.of(record).id == event_id:
                return record
        return None

    def seek_event(self, event_id: str) -> Record | None:
        """The event record with this full id, in O(1) through the id table."""
        side, n, tail = self._view()
        return self._find_event(side, n, tail, event_id)

    def snapshot_of(self, event_id: str) -> str | None:
        """The ``snapshot_ref`` of the event with this full id (its record, read)."""
        record = self.seek_event(event_id)
        return EventKeys.of(record).snapshot_ref if record is not None else None

    def seek_time(self, ts: str) -> int | None:
        """The seq of the first event whose ``ts`` is at or after ``ts``."""
        side, n, tail = self._view()
        if side is not None:
            found = self._seek_time_indexed(side, n, ts)
            if found is not None:
                return found
        for record in tail:
            if record.kind == "event" and EventKeys.of(record).ts >= ts:
                return record.seq
        return None

    def _seek_time_indexed(self, side: _Sidecar, n: int, ts: str) -> int | None:
        # The T: list holds the events that raised the latest ts seen so far; the first
        # event with ts >= wanted is the first list entry whose ts is >= wanted.
        def ts_of(seq: int) -> str:
            return EventKeys.of(self._read(side, seq)).ts

        blocks = side.blocks(b"T:")
        firsts = [side.entry(off, 0) for off, _ in blocks]
        usable = _first_true(len(firsts), lambda i: firsts[i] > n)
        later = _first_true(usable, lambda i: ts_of(firsts[i]) >= ts)
        if later > 0:
            off, fill = blocks[later - 1]
            size = _first_true(fill, lambda j: side.entry(off, j) > n)
            i = _first_true(size, lambda j: ts_of(side.entry(off, j)) >= ts)
            if i < size:
                return side.entry(off, i)
        return firsts[later] if later < usable else None

    def _candidates(self, side: _Sidecar | None, n: int, key: bytes | None) -> Iterator[Record]:
        """Indexed events under ``key`` (all events when None), newest first."""
        if side is None:
            return
        yield from self._by_seq(side, side.desc(key or b"k:event", below=n + 1), 0)

    def event_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Event ids that start with ``prefix``, sorted."""
        side, n, tail = self._view()
        ids: set[str] = set()
        for record in self._chain(self._candidates(side, n, _prefix_key("i", prefix)), tail):
            if record.kind == "event":
                ident = EventKeys.of(record).id
                if _in_prefix(ident, prefix):
                    ids.add(ident)
        return _limited(sorted(ids), limit)

    def snapshot_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Distinct snapshot ids named by events that start with ``prefix``, sorted."""
        side, n, tail = self._view()
        refs: set[str] = set()
        for record in self._chain(self._candidates(side, n, _prefix_key("s", prefix)), tail):
            if record.kind == "event":
                ref = _snapshot(EventKeys.of(record))
                if ref is not None and _in_prefix(ref, prefix):
                    refs.add(ref)
        return _limited(sorted(refs), limit)

    def newest_with_snapshot(self, snapshot_id: str) -> Record | None:
        """The newest event record that carries this snapshot."""
        side, n, tail = self._view()
        key = b"s4:" + _enc(snapshot_id[:4])
        for record in self._chain(reversed(tail), self._candidates(side, n, key)):
            if record.kind == "event" and _snapshot(EventKeys.of(record)) == snapshot_id:
                return record
        return None

    def find_events(
        self, where: EventFilter, *, limit: int | None = None, newest_first: bool = True
    ) -> Iterator[Record]:
        """Event records passing every filter, through the shortest posting list."""
        side, n, tail = self._view()
        wanted = [r for r in tail if r.kind == "event" and _matches(EventKeys.of(r), where)]
        indexed: Iterator[Record] = iter(())
        if side is not None:
            keys = _filter_keys(where) or [b"k:event"]
            key = min(keys, key=side.count)
            lists = [key]
            by_path = _path_keys(where)
            if by_path and sum(map(side.count, by_path)) <= side.count(key):
                lists = by_path
            streams = [
                side.desc(k, below=n + 1) if newest_first else side.asc(k, start=1, below=n + 1)
                for k in lists
            ]
            seqs: Iterator[int] = (
                streams[0] if len(streams) == 1 else _merged(streams, reverse=newest_first)
            )
            indexed = (r for r in self._by_seq(side, seqs, 0) if _matches(EventKeys.of(r), where))
        found = (
            self._chain(reversed(wanted), indexed) if newest_first else self._chain(indexed, wanted)
        )
        return _take(found, limit)

    # -- the index ------------------------------------------------------------------------

    def rebuild_index(self) -> None:
        """Rewrite events.idx from events.jsonl (temp file, fsync, rename)."""
        self._refresh()
        if not self.writer:
            raise UsageError(
                "this JSONL ledger is open for reading; rebuilding its index needs a writer "
                "opened under the write lock"
            )
        self._rebuild()

    def verify_index(self) -> list[str]:
        """Where events.idx disagrees with events.jsonl (empty when it agrees)."""
        side, n, tail = self._view()
        if side is None:
            return [f"index: {INDEX_NAME} is missing or unusable; rebuild_index makes a new one"]
        problems: list[str] = []
        if tail:
            problems.append(
                f"index: covers records 1 to {n}, but {DATA_NAME} holds {n + len(tail)}"
            )
        try:
            self._verify(side, n, problems)
        except (_BadIndex, struct.error) as exc:
            problems.append(f"index: {INDEX_NAME} is damaged: {exc}")
        except CorruptRepository as exc:
            problems.append(f"ledger: {exc}")
        return problems

    def _verify(self, side: _Sidecar, n: int, problems: list[str]) -> None:
        postings: dict[bytes, list[int]] = {}
        events = 0
        latest: str | None = None
        seq = 0
        for offset, record in self._records_from(0, side.h.data_bytes, 1):
            seq = record.seq
            stored = side.row(seq)
            if stored != offset:
                problems.append(f"index: row {seq} says byte {stored}, the line is at {offset}")
            postings.setdefault(_KIND_KEYS[record.kind], []).append(seq)
            if record.kind != "event":
                continue
            events += 1
            keys = EventKeys.of(record)
            if seq not in side.id_seqs(keys.id):
                problems.append(f"index: event {keys.id} (record {seq}) is not in the id table")
            for key in _event_keys(keys):
                postings.setdefault(key, []).append(seq)
            if latest is None or keys.ts > latest:
                postings.setdefault(b"T:", []).append(seq)
                latest = keys.ts
        if seq != n:
            problems.append(f"index: says it covers {n} records, {DATA_NAME} has {seq} there")
        indexed = sum(1 for _, s in side.id_slots() if 1 <= s <= n)
        if indexed != events:
            problems.append(f"index: the id table names {indexed} events, there are {events}")
        for key, _ in side.all_keys():
            name = key.decode("utf-8", "replace")
            have = list(side.asc(key, start=1, below=n + 1))
            want = postings.pop(key, [])
            if have != want:
                problems.append(
                    f"index: list {name!r} names {len(have)} records, expected {len(want)}"
                )
            older = 0
            for off, fill in side.blocks(key):
                if side.block(off)[1] != older:
                    problems.append(f"index: list {name!r} miscounts its entries")
                    break
                older += fill
        for key in sorted(postings):
            problems.append(f"index: no list for {key.decode('utf-8', 'replace')!r}")


def _merged(streams: list[Iterator[int]], *, reverse: bool) -> Iterator[int]:
    """Sorted streams of seqs merged into one, each seq once."""
    last = None
    for seq in heapq.merge(*streams, reverse=reverse):
        if seq != last:
            yield seq
            last = seq


def _first_true(size: int, test: Callable[[int], bool]) -> int:
    """The first i in range(size) where the monotone ``test`` holds (size when none)."""
    lo, hi = 0, size
    while lo < hi:
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _take(records: Iterator[Record], limit: int | None) -> Iterator[Record]:
    """At most ``limit`` records (SQLite's LIMIT: None or negative means all)."""
    if limit is None or limit < 0:
        yield from records
        return
    for i, record in enumerate(records):
        if i >= limit:
            return
        yield record
