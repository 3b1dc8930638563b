"""Ledger records: canonical JSON (RFC 8785), the hash chain, and reading stored lines."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from strata.errors import CorruptRepository, UsageError
from strata.ledger.records import (
    STREAMED_ITEMS,
    Record,
    canonical,
    canonical_pieces,
    record_hash,
    verify_chain,
)

# -- canonical JSON ------------------------------------------------------------------------


def test_keys_are_sorted_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3: the emoji (a surrogate pair, 0xD83D...) sorts before U+FB33,
    # although its code point is larger.
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    order = [json.loads(canonical(value))]
    assert list(order[0]) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_the_rfc_8785_example_serializes_exactly() -> None:
    # RFC 8785 section 3.2.2, the input and its canonical form
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert canonical(value) == (
        b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, b"0"),
        (-0.0, b"0"),
        (1.0, b"1"),
        (-7, b"-7"),
        (2**53 - 1, b"9007199254740991"),
        (-(2**53) + 1, b"-9007199254740991"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (1e-7, b"1e-7"),
        (0.1, b"0.1"),
        (5e-324, b"5e-324"),
    ],
)
def test_numbers_are_written_the_ecmascript_way(value: float, text: bytes) -> None:
    assert canonical(value) == text


@pytest.mark.parametrize("value", [2**53, -(2**53), 10**30, float("nan"), float("inf")])
def test_numbers_json_cannot_carry_exactly_are_refused(value: float) -> None:
    with pytest.raises(ValueError):
        canonical(value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("zoë", '"zoë"'.encode()),
        ("日本", '"日本"'.encode()),
        ("\U0001f600", '"\U0001f600"'.encode()),
        ("\u2028", '"\u2028"'.encode()),  # not escaped: only controls below U+0020 are
        ("\x1f\x00", b'"\\u001f\\u0000"'),
        ("\b\f\n\r\t", b'"\\b\\f\\n\\r\\t"'),
        ('"\\/', b'"\\"\\\\/"'),
    ],
)
def test_strings_are_raw_utf8_with_minimal_escapes(value: str, text: bytes) -> None:
    assert canonical(value) == text


def test_no_whitespace_and_nested_objects_are_sorted_too() -> None:
    assert (
        canonical({"b": [1, {"z": 1, "a": None}], "a": {}}) == b'{"a":{},"b":[1,{"a":null,"z":1}]}'
    )


def test_a_record_line_is_the_canonical_json_of_its_fields() -> None:
    record = Record.seal(3, "ref", {"name": "HEAD", "event_id": "gh"}, "ab")
    assert record.to_line() == (
        b'{"body":{"event_id":"gh","name":"HEAD"},"hash":"' + record.hash.encode() + b'",'
        b'"kind":"ref","prev":"ab","seq":3}'
    )
    assert record.hash == record_hash(3, "ref", {"name": "HEAD", "event_id": "gh"}, "ab")
    assert len(record.hash) == 64


def test_the_hash_covers_every_field() -> None:
    base = record_hash(2, "event", {"id": "x"}, "p")
    assert (
        len(
            {
                base,
                record_hash(3, "event", {"id": "x"}, "p"),
                record_hash(2, "ref", {"id": "x"}, "p"),
                record_hash(2, "event", {"id": "y"}, "p"),
                record_hash(2, "event", {"id": "x", "more": None}, "p"),
                record_hash(2, "event", {"id": "x"}, "q"),
            }
        )
        == 6
    )
    assert record_hash(2, "event", {"a": 1, "b": 2}, "p") == record_hash(
        2, "event", {"b": 2, "a": 1}, "p"
    )  # key order does not matter


texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(-(2.0**53) + 1, 2.0**53 - 1, allow_nan=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
bodies = st.dictionaries(texts, json_values, max_size=6)
kinds = st.sampled_from(["event", "ref", "bookmark", "operation"])


@settings(max_examples=150)
@given(st.integers(1, 2**40), kinds, bodies, st.text(max_size=70).filter(str.isascii))
def test_a_line_reads_back_as_the_same_record(seq: int, kind: Any, body: Any, prev: str) -> None:
    record = Record.seal(seq, kind, body, prev)
    line = record.to_line()
    back = Record.from_line(line)
    assert back == record
    assert back.to_line() == line
    assert b"\n" not in line  # one record, one line
    assert verify_chain([Record.seal(1, kind, body, "")]) is None


ascii_names = st.text(st.characters(max_codepoint=127), max_size=10)
# what records hold (the fast path) and what they may not (floats, names beyond ASCII,
# lone surrogates, integers past 2**53): every value goes the rfc8785 way or its equal
any_texts = st.text(st.characters(), max_size=10)
any_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**54), 2**54)
    | st.floats(allow_nan=False, allow_infinity=False)
    | any_texts,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(ascii_names, inner, max_size=4)
        | st.dictionaries(any_texts, inner, max_size=3)
    ),
    max_leaves=16,
)


def _rfc8785(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError) as exc:
        return type(exc)


@settings(max_examples=500)
@given(any_values)
@example({"b": '\x7f\u2028\x00\x1f"\\', "a": [True, None, -(2**53) + 1]})
@example({"paths": ["a\udc80b"]})
@example({"n": 2**53})
@example({"\ud800": None})
def test_canonical_is_exactly_what_rfc8785_makes(value: Any) -> None:
    # the interpreter's encoder serves plain values; its output must be byte for byte
    # rfc8785's, and what rfc8785 refuses is refused too: text that is not UTF-8 as the
    # user's mistake (UsageError), anything else with rfc8785's own error
    want = _rfc8785(value)
    try:
        got: bytes | type[Exception] = canonical(value)
    except UsageError:  # text that is not UTF-8 (rfc8785 may name another fault it met first)
        assert isinstance(want, type) and issubclass(want, ValueError)
        with pytest.raises(UnicodeEncodeError):
            json.dumps(value, ensure_ascii=False).encode()
        return
    except (rfc8785.CanonicalizationError, UnicodeError) as exc:
        got = type(exc)
    assert got == want


@settings(max_examples=300)
@given(st.dictionaries(ascii_names, json_values | st.lists(json_values, max_size=6), max_size=6))
def test_a_body_made_in_pieces_is_its_canonical_json(body: dict[str, Any]) -> None:
    assert b"".join(canonical_pieces(body)) == canonical(body)


def test_a_body_of_many_paths_is_sealed_as_the_same_record_without_its_json_kept() -> None:
    # a first snapshot's event names every file: its JCS is made item by item whenever it
    # is hashed or written, and must be the bytes (and the hash) of the JCS made whole
    body = {
        "id": "e1",
        "files": [f"src/d{i // 100}/f\u00e9{i}.py" for i in range(STREAMED_ITEMS)],
        "artifact_impacts": [{"path": f"b{i}.bin", "bytes_changed": i} for i in range(50)],
        "data": {"files_changed": STREAMED_ITEMS, "\u00e9": [1, 2.5, None]},
        "ts": "2026-11-26T10:00:00.000Z",
    }
    record = Record.seal(7, "event", body, "ab" * 32)
    assert record.body_jcs is None and record.body_length == len(canonical(body))
    assert record.hash == record_hash(7, "event", body, "ab" * 32)
    line = record.to_line()
    assert record.line_length() == len(line)
    back = Record.from_line(line)
    assert back == record and back.to_line() == line
    assert verify_chain([Record.seal(1, "event", body, "")]) is None


def test_big_integral_floats_survive_a_round_trip() -> None:
    record = Record.seal(1, "event", {"bytes": 1e16}, "")
    back = Record.from_line(record.to_line())
    assert verify_chain([back]) is None


# -- the chain -----------------------------------------------------------------------------


def chain(count: int) -> list[Record]:
    records: list[Record] = []
    prev = ""
    for seq in range(1, count + 1):
        if seq % 3 == 0:
            record = Record.seal(seq, "ref", {"name": "HEAD", "event_id": f"e{seq - 1}"}, prev)
        else:
            record = Record.seal(seq, "event", {"id": f"e{seq}", "ts": str(seq)}, prev)
        records.append(record)
        prev = record.hash
    return records


def test_a_good_chain_verifies() -> None:
    assert verify_chain([]) is None
    assert verify_chain(chain(1)) is None
    assert verify_chain(chain(30)) is None
    assert verify_chain(iter(chain(30))) is None


@pytest.mark.parametrize("at", [1, 2, 5, 10])
def test_an_edited_body_names_that_record(at: int) -> None:
    records = chain(10)
    old = records[at - 1]
    records[at - 1] = Record(old.seq, old.kind, {**old.body, "ts": "later"}, old.prev, old.hash)
    what = f"event e{at}" if old.kind == "event" else "ref HEAD"
    assert verify_chain(records) == f"record {at} ({what}) was modified"


def test_an_edit_with_its_hash_recomputed_breaks_the_next_link() -> None:
    records = chain(10)
    old = records[3]
    records[3] = Record.seal(old.seq, old.kind, {**old.body, "ts": "forged"}, old.prev)
    assert verify_chain(records) == "record 5 (event) does not follow record 4"


def test_a_record_without_id_or_name_is_still_named_by_seq() -> None:
    records = chain(3)
    records[1] = Record(2, "event", {"ts": "2"}, records[0].hash, records[1].hash)
    assert verify_chain(records) == "record 2 (event) was modified"


@pytest.mark.parametrize("at", [1, 4, 9])
def test_a_deleted_record_is_named(at: int) -> None:
    records = chain(10)
    del records[at - 1]
    assert verify_chain(records) == (
        f"record {at} is missing or out of order (found record {at + 1} in its place)"
    )


def test_the_last_record_deleted_cannot_be_seen_from_the_chain_alone() -> None:
    # This is why the chain head is written down elsewhere (see the module docstring).
    assert verify_chain(chain(10)[:-1]) is None


@pytest.mark.parametrize("at", [1, 4, 9])
def test_two_swapped_records_are_named(at: int) -> None:
    records = chain(10)
    records[at - 1], records[at] = records[at], records[at - 1]
    assert verify_chain(records) == (
        f"record {at} is missing or out of order (found record {at + 1} in its place)"
    )


def test_swapped_and_renumbered_records_break_the_links() -> None:
    records = chain(6)
    a, b = records[2], records[3]
    records[2] = Record(3, b.kind, b.body, b.prev, b.hash)
    records[3] = Record(4, a.kind, a.body, a.prev, a.hash)
    assert verify_chain(records) == "record 3 (event) does not follow record 2"


def test_a_first_record_that_points_somewhere_is_refused() -> None:
    first = Record.seal(1, "event", {"id": "e1"}, "f" * 64)
    assert verify_chain([first]) == "record 1 (event) does not follow record 0"


@settings(max_examples=200)
@given(st.integers(2, 12), st.data())
def test_any_single_edit_is_found_at_its_record(count: int, data: st.DataObject) -> None:
    records = chain(count)
    at = data.draw(st.integers(1, count))
    old = records[at - 1]
    body = data.draw(bodies.filter(lambda b: b != old.body))
    records[at - 1] = Record(old.seq, old.kind, body, old.prev, old.hash)
    problem = verify_chain(records)
    assert problem is not None
    assert problem.startswith(f"record {at} (")
    assert problem.endswith("was modified")


# -- reading stored lines ------------------------------------------------------------------

GOOD = Record.seal(7, "event", {"id": "gh"}, "")
GOOD_FIELDS: dict[str, Any] = GOOD.to_json()


def assert_read_as_written(record: Record, raw: dict[str, Any]) -> None:
    """A line that parses is a record holding exactly its five fields, and reads back the same."""
    assert record.to_json() == {name: raw[name] for name in GOOD_FIELDS}
    assert Record.from_line(record.to_line()) == record


@settings(max_examples=500)
@given(st.binary(max_size=200))
@example(GOOD.to_line())
@example(b' {"seq": 7, "kind": "ref", "body": {}, "prev": "", "hash": "h", "extra": 1}\n')
def test_arbitrary_bytes_parse_or_raise_corrupt_repository(data: bytes) -> None:
    try:
        record = Record.from_line(data)
    except CorruptRepository:
        return
    assert_read_as_written(record, json.loads(data))


record_like = st.fixed_dictionaries(
    {
        "seq": st.integers(-(2**53) + 1, 2**53 - 1) | json_values,
        "kind": kinds | json_values,
        "body": bodies | json_values,
        "prev": texts | json_values,
        "hash": texts | json_values,
    }
)


@settings(max_examples=500)
@given(json_values | record_like)
def test_arbitrary_json_parses_or_raises_corrupt_repository(value: Any) -> None:
    try:
        record = Record.from_line(json.dumps(value).encode())
    except CorruptRepository:
        return
    assert_read_as_written(record, value)


@settings(max_examples=500)
@given(st.sampled_from(sorted(GOOD_FIELDS)), json_values | st.just(...))
def test_a_record_with_one_bad_field_raises_only_corrupt_repository(name: str, value: Any) -> None:
    fields = dict(GOOD_FIELDS)
    if value is ...:
        del fields[name]
    else:
        fields[name] = value
    try:
        record = Record.from_line(json.dumps(fields).encode())
    except CorruptRepository:
        return
    assert record.kind in ("event", "ref", "bookmark", "operation")
    assert isinstance(record.body, dict)


@pytest.mark.parametrize(
    "line",
    [b"", b"\n", b"null", b"[]", b"{}", b'"text"', b"{", b"\xff\xfe", b"1" * 5000, b"NaN"],
)
def test_malformed_lines_raise_corrupt_repository(line: bytes) -> None:
    with pytest.raises(CorruptRepository):
        Record.from_line(line)


@pytest.mark.parametrize(
    ("field", "value"),
    [("seq", "7"), ("kind", "tag"), ("body", []), ("prev", None), ("hash", 5)],
)
def test_a_wrongly_typed_field_is_corrupt(field: str, value: Any) -> None:
    with pytest.raises(CorruptRepository, match="malformed"):
        Record.from_line(json.dumps({**GOOD_FIELDS, field: value}).encode())


def test_deeply_nested_json_is_corrupt_not_a_crash() -> None:
    with pytest.raises(CorruptRepository):
        Record.from_line(b"[" * 100_000 + b"]" * 100_000)
