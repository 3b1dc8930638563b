"""One conformance suite for every object store, and the tree format."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata.errors import CorruptRepository, ObjectMissing
from strata.ids import ObjectId, is_object_id
from strata.store import pack
from strata.store.objects import (
    CHUNK,
    DiskObjectStore,
    MemoryObjectStore,
    ObjectStore,
    compress,
    hash_bytes,
    verified_chunks,
)
from strata.store.tree import (
    EMPTY_TREE,
    TREE_MAGIC,
    TreeEntry,
    decode_tree,
    encode_tree,
    lookup,
    read_tree,
    walk_tree,
    write_tree,
)

ABSENT = ObjectId("0" * 64)


@pytest.fixture(params=["disk", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "disk":
        return DiskObjectStore(tmp_path / "objects")
    return MemoryObjectStore()


def corrupt(store: ObjectStore, oid: ObjectId, stored: bytes) -> None:
    """Replace what is stored under ``oid``: ``stored`` is the raw stored form."""
    if isinstance(store, DiskObjectStore):
        path = store.root / oid[:2] / oid[2:]
        os.chmod(path, 0o644)
        path.write_bytes(stored)
    else:
        assert isinstance(store, MemoryObjectStore)
        store.corrupt(oid, stored)


# the two ways an object goes bad: a well-formed frame with other content, or garbage
CORRUPTIONS: dict[str, Callable[[ObjectStore], bytes]] = {
    "other content": lambda s: (
        compress(b"not the original") if isinstance(s, DiskObjectStore) else b"not the original"
    ),
    "garbage": lambda s: b"\x13\x37 garbage, not a frame \xff" * 3,
}


# -- the protocol ------------------------------------------------------------------


@pytest.mark.parametrize(
    "data", [b"", b"hello\n", bytes(range(256)) * 40, "ünïcødé\n".encode()], ids=len
)
def test_put_get_round_trip(store: ObjectStore, data: bytes) -> None:
    oid = store.put(data)
    assert is_object_id(oid)
    assert oid == hash_bytes(data)
    assert store.get(oid) == data
    assert b"".join(store.iter_chunks(oid)) == data


def test_the_same_content_is_stored_once(store: ObjectStore) -> None:
    first = store.put(b"same")
    second = store.put(b"same")
    third = store.put(b"same", oid=first)
    other = store.put(b"different")
    assert first == second == third != other
    assert sorted(store.ids()) == sorted([first, other])


def test_has(store: ObjectStore) -> None:
    assert not store.has(hash_bytes(b"x"))
    oid = store.put(b"x")
    assert store.has(oid)
    assert not store.has(ABSENT)


def test_an_absent_object_raises_object_missing(store: ObjectStore) -> None:
    with pytest.raises(ObjectMissing) as info:
        store.get(ABSENT)
    assert info.value.object_id == ABSENT
    assert ABSENT in str(info.value)
    with pytest.raises(ObjectMissing):
        list(store.iter_chunks(ABSENT))
    with pytest.raises(ObjectMissing):
        list(verified_chunks(store, ABSENT))


def test_ids_lists_every_object(store: ObjectStore) -> None:
    assert list(store.ids()) == []
    wanted = {store.put(f"object {i}".encode()) for i in range(50)}
    assert set(store.ids()) == wanted
    assert len(list(store.ids())) == 50


def test_streaming_writer_commit(store: ObjectStore) -> None:
    data = os.urandom(CHUNK) * 2 + b"tail"  # more than one chunk
    writer = store.writer()
    for i in range(0, len(data), 100_000):
        writer.write(data[i : i + 100_000])
    oid = writer.commit()
    assert oid == hash_bytes(data)
    assert store.get(oid) == data
    assert b"".join(store.iter_chunks(oid)) == data
    assert b"".join(verified_chunks(store, oid)) == data


def test_a_small_object_comes_in_one_chunk_and_a_large_one_in_bounded_chunks(
    tmp_path: Path,
) -> None:
    """One decompression for an object up to CHUNK; never more than CHUNK at once.

    3 MiB of zeros make a tiny frame: its size alone must not let it be
    decompressed whole. Loose and packed objects alike.
    """
    store = DiskObjectStore(tmp_path / "objects")
    small, large = os.urandom(20_000), bytes(3 * CHUNK)
    oids = {data: store.put(data) for data in (small, large, b"")}
    for packed in (False, True):
        if packed:
            store.repack(packs=store.packs(), loose=list(store.loose_ids()))
            assert list(store.loose_ids()) == []
        for data, oid in oids.items():
            chunks = list(store.iter_chunks(oid))
            assert b"".join(chunks) == data
            assert len(chunks) == (0 if not data else 1 if len(data) <= CHUNK else 3)
            assert all(len(c) <= CHUNK for c in chunks)


def test_streaming_writer_of_known_content_keeps_one_copy(store: ObjectStore) -> None:
    oid = store.put(b"already here")
    writer = store.writer()
    writer.write(b"already ")
    writer.write(b"here")
    assert writer.commit() == oid
    assert list(store.ids()) == [oid]
    assert store.get(oid) == b"already here"


def test_streaming_writer_abort_stores_nothing(store: ObjectStore) -> None:
    writer = store.writer()
    writer.write(b"half of something")
    writer.abort()
    assert list(store.ids()) == []
    assert not store.has(hash_bytes(b"half of something"))
    if isinstance(store, DiskObjectStore):
        leftovers = [p for p in store.root.rglob("*") if p.is_file()]
        assert leftovers == []


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_a_corrupted_object_fails_verification(store: ObjectStore, how: str) -> None:
    oid = store.put(b"the original content\n" * 10)
    corrupt(store, oid, CORRUPTIONS[how](store))
    with pytest.raises(CorruptRepository) as info:
        store.get(oid)
    assert not isinstance(info.value, ObjectMissing)
    assert oid in str(info.value)
    with pytest.raises(CorruptRepository):
        b"".join(verified_chunks(store, oid))
    assert store.has(oid)  # still listed: 'strata check' reports it, nothing hides it
    assert oid in set(store.ids())


def test_a_bit_flip_on_disk_is_detected(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    oid = store.put(b"precious data " * 100)
    path = store.root / oid[:2] / oid[2:]
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRepository):
        store.get(oid)


def test_disk_objects_survive_reopening_and_are_compressed(tmp_path: Path) -> None:
    data = b"compressible " * 10_000
    oid = DiskObjectStore(tmp_path / "objects").put(data)
    again = DiskObjectStore(tmp_path / "objects")
    assert again.get(oid) == data
    assert again.stored_size(oid) < len(data) // 10
    assert list(again.ids()) == [oid]


# -- trees -------------------------------------------------------------------------


def entry(name: str, kind: str = "file", mode: int = 0o644, data: bytes = b"x") -> TreeEntry:
    return TreeEntry(name, kind, mode, len(data), hash_bytes(data))  # type: ignore[arg-type]


NAMES = [
    "plain.txt",
    "with space",
    "ünïcødé",
    "日本語.md",
    "emoji-🙂",
    os.fsdecode(b"latin1-\xe9\xff"),  # not UTF-8: kept with surrogateescape
    "-leading-dash",
    "new\nline",
]


def test_tree_round_trip_keeps_every_kind_and_name() -> None:
    entries = [
        entry(NAMES[0]),
        entry(NAMES[1], mode=0o755),
        entry(NAMES[2], mode=0o600),
        entry(NAMES[3], "symlink", 0o777, b"../target"),
        entry(NAMES[4], "dir", 0o700, TREE_MAGIC),
        entry(NAMES[5]),
        entry(NAMES[6], mode=0o640),
        entry(NAMES[7]),
    ]
    data = encode_tree(entries)
    assert data.startswith(TREE_MAGIC)
    decoded = decode_tree(data)
    assert sorted(decoded, key=lambda e: os.fsencode(e.name)) == decoded
    assert set(decoded) == set(entries)
    assert encode_tree(reversed(entries)) == data  # order in, same bytes out


def test_empty_tree_needs_no_stored_object(store: ObjectStore) -> None:
    assert read_tree(store, EMPTY_TREE) == []
    assert write_tree(store, []) == EMPTY_TREE
    assert list(walk_tree(store, EMPTY_TREE)) == []


def test_trees_through_a_store(store: ObjectStore) -> None:
    blob = store.put(b"content")
    sub = write_tree(store, [TreeEntry("leaf.txt", "file", 0o600, 7, blob)])
    root = write_tree(
        store,
        [
            TreeEntry("sub", "dir", 0o755, 0, sub),
            TreeEntry("empty", "dir", 0o700, 0, EMPTY_TREE),
            TreeEntry("ünï", "file", 0o644, 7, blob),
        ],
    )
    paths = [p for p, _ in walk_tree(store, root)]
    assert paths == ["empty", "sub", "sub/leaf.txt", "ünï"]
    found = lookup(store, root, "sub/leaf.txt")
    assert found is not None and found.mode == 0o600 and found.oid == blob
    assert lookup(store, root, "sub/nope") is None
    assert lookup(store, root, "ünï/below-a-file") is None


_name_chars = st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",))
tree_names = st.one_of(
    st.text(_name_chars, min_size=1, max_size=20),
    st.binary(min_size=1, max_size=12).map(
        lambda b: os.fsdecode(b.replace(b"/", b"_").replace(b"\0", b"_"))
    ),
).filter(lambda n: n not in (".", ".."))

tree_entries = st.builds(
    TreeEntry,
    name=tree_names,
    kind=st.sampled_from(["file", "symlink", "dir"]),
    mode=st.sampled_from([0o600, 0o644, 0o700, 0o755, 0o777, 0o400]),
    size=st.integers(min_value=0, max_value=2**40),
    oid=st.binary(min_size=1, max_size=8).map(hash_bytes),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tree_entries, max_size=20, unique_by=lambda e: e.name))
def test_tree_encoding_round_trips(entries: list[TreeEntry]) -> None:
    decoded = decode_tree(encode_tree(entries))
    assert decoded == sorted(entries, key=lambda e: os.fsencode(e.name))
    assert encode_tree(decoded) == encode_tree(entries)


MALFORMED = [
    b"",
    b"not a tree at all",
    TREE_MAGIC[:-1],
    TREE_MAGIC + b"f 644 1 " + b"a" * 64 + b" name",  # no terminator
    TREE_MAGIC + b"x 644 1 " + b"a" * 64 + b" name\0",  # unknown kind
    TREE_MAGIC + b"f 9x9 1 " + b"a" * 64 + b" name\0",  # mode not octal
    TREE_MAGIC + b"f 644 one " + b"a" * 64 + b" name\0",  # size not a number
    TREE_MAGIC + b"f 644 1\0",  # too few fields
    TREE_MAGIC + b"f 644 1 \xff\xfe name\0",  # id not ASCII
    TREE_MAGIC + b"\0",
]


@pytest.mark.parametrize("data", MALFORMED)
def test_malformed_tree_bytes_raise_corrupt_repository(data: bytes) -> None:
    with pytest.raises(CorruptRepository):
        decode_tree(data, "some-id")


@settings(max_examples=300)
@given(st.one_of(st.binary(max_size=200), st.binary(max_size=200).map(TREE_MAGIC.__add__)))
@example(TREE_MAGIC)
@example(TREE_MAGIC + b"f 644 1 " + b"a" * 64 + b" b\0d 755 0 " + b"c" * 64 + b" a\0")
def test_arbitrary_bytes_decode_or_raise_only_corrupt_repository(data: bytes) -> None:
    try:
        entries = decode_tree(data)
    except CorruptRepository:
        return
    # every row became one entry (none skipped), and the entries survive a round trip
    assert len(entries) == data[len(TREE_MAGIC) :].count(b"\0")
    assert decode_tree(encode_tree(entries)) == sorted(entries, key=lambda e: os.fsencode(e.name))


@settings(max_examples=200)
@given(st.lists(tree_entries, min_size=1, max_size=5), st.data())
def test_damaged_tree_bytes_raise_only_corrupt_repository(
    entries: list[TreeEntry], data: st.DataObject
) -> None:
    raw = bytearray(encode_tree(entries))
    rows_end = [i + 1 for i, byte in enumerate(raw) if byte == 0 and i + 1 < len(raw)]
    position = data.draw(
        st.integers(0, len(raw) - 1) | st.sampled_from([len(TREE_MAGIC), *rows_end])
    )
    cut = data.draw(st.booleans())
    damaged = bytes(raw[:position]) if cut else bytes(raw[:position]) + b"\0 \n" + raw[position:]
    try:
        decoded = decode_tree(damaged)
    except CorruptRepository:
        return
    # damage that still decodes can only be a cut between entries: the first entries, unchanged
    assert cut
    assert decoded == sorted(entries, key=lambda e: os.fsencode(e.name))[: len(decoded)]
    assert encode_tree(decoded) == damaged


# -- large batches: packs ---------------------------------------------------------


def _batch(n: int) -> list[bytes]:
    return [f"object number {i}\n".encode() * (1 + i % 5) for i in range(n)]


def test_a_large_batch_reads_back_before_and_after_flush(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    datas = _batch(300)
    oids = [store.put(d) for d in datas]
    for oid, data in zip(oids, datas, strict=True):  # readable before the flush
        assert store.has(oid) and store.get(oid) == data
    store.flush()
    loose = [p for p in store.root.glob("??/*") if p.is_file()]
    assert len(loose) < len(oids), "a large batch is not stored as one file per object"

    again = DiskObjectStore(tmp_path / "objects")
    assert set(again.ids()) == set(oids)
    assert len(list(again.ids())) == len(oids)
    for oid, data in zip(oids, datas, strict=True):
        assert again.has(oid)
        assert again.get(oid) == data
        assert b"".join(verified_chunks(again, oid)) == data
    assert again.put(datas[123]) == oids[123]
    assert len(list(again.ids())) == len(oids), "a packed object is not stored twice"


@pytest.mark.parametrize("piece", [7, 150, 300, 4096])
def test_a_pack_index_written_in_pieces_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    # the index of a big pack is written a few thousand entries at a time (never whole in
    # memory); however it is cut, every object is found and the checksum holds
    monkeypatch.setattr(pack, "INDEX_PIECE", piece)
    store = DiskObjectStore(tmp_path / "objects")
    datas = _batch(300)
    oids = [store.put(d) for d in datas]
    store.flush()
    again = DiskObjectStore(tmp_path / "objects")
    assert again.pack_problems() == []
    assert sorted(again.ids()) == sorted(oids)
    for oid, data in zip(oids, datas, strict=True):
        assert again.get(oid) == data


def test_damage_inside_a_pack_is_detected(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    datas = _batch(300)
    oids = [store.put(d) for d in datas]
    store.flush()
    packs = sorted((store.root / "packs").glob("*.pack"))
    assert packs, "expected the batch to be packed"
    raw = bytearray(packs[0].read_bytes())
    for i in range(len(raw) // 2, len(raw) // 2 + 64):
        raw[i] ^= 0xA5
    packs[0].chmod(0o644)
    packs[0].write_bytes(bytes(raw))

    again = DiskObjectStore(tmp_path / "objects")
    bad = 0
    for oid, data in zip(oids, datas, strict=True):
        try:
            assert again.get(oid) == data
        except CorruptRepository:
            bad += 1
    assert bad >= 1
