"""Ledger records and the hash chain that makes the ledger tamper-evident.

Everything the ledger stores is a :class:`Record`: an event, a ref move, a
bookmark change or an operation. Records are appended in one total order
(``seq``, starting at 1) and each is chained to the one before it::

    hash = BLAKE3( JCS({"kind": kind, "body": body, "prev": prev, "seq": seq}) )

where JCS is RFC 8785 canonical JSON and ``prev`` is the previous record's
hash (``""`` for the first).

A ledger shared by several workspaces (PostgreSQL) keeps one chain per
branch instead, so that writers on different branches never wait for each
other: such a record has a ``lane`` (its branch), ``prev`` is the hash of the
previous record of the same lane (for a lane's first record, the hash of the
newest record without a lane before it, or ``""``), and its hash leaves the
``seq`` out, which the ledger assigns when it accepts the records::

    hash = BLAKE3( JCS({"body": body, "kind": kind, "lane": lane, "prev": prev}) )
 Editing, deleting or reordering any stored
record breaks the chain at that record, and :func:`verify_chain` names it.
The hash of the last record (the *chain head*) summarises the whole history:
written down elsewhere, it proves later that nothing was rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import blake3

from strata.errors import CorruptRepository, UsageError

RecordKind = Literal["event", "ref", "bookmark", "operation"]
RECORD_KINDS: tuple[str, ...] = ("event", "ref", "bookmark", "operation")


def canonical(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical JSON bytes of ``value``.

    A value made only of objects with ASCII names, lists, strings, integers
    of the safe range, booleans and nulls (every record Strata writes) is
    serialized by the interpreter's JSON encoder, whose output is then
    exactly JCS: members sorted by name (for ASCII names, sorting by UTF-16
    code units is sorting by characters), no whitespace, the same escapes
    (quote, backslash, the five short forms, other control characters as
    lowercase six-character escapes, nothing else), integers in decimal.
    Anything else (a float, a name beyond ASCII, a string that is not valid
    Unicode) is left to ``rfc8785``, about 5x slower.
    """
    if _plain(value):
        try:
            return _ENCODER.encode(value).encode()
        except UnicodeEncodeError:  # a lone surrogate: text given in bytes that are not UTF-8
            raise _not_utf8() from None
    try:
        return _dumps(value)
    except ValueError:  # rfc8785 refuses it: say so when the reason is text that is not UTF-8
        try:
            _ENCODER.encode(value).encode()
        except UnicodeEncodeError:
            raise _not_utf8() from None
        except (ValueError, TypeError):
            pass
        raise


def _not_utf8() -> UsageError:
    """What a record made of text in bytes that are not UTF-8 (a lone surrogate) gets."""
    return UsageError(
        "a message, name or author holds bytes that are not UTF-8: a record holds UTF-8 text only",
        hint="give the text in UTF-8",
    )


def _load_jcs(value: Any) -> bytes:
    """Import the JCS encoder on first use (1.4 ms: a no-op snapshot writes no record)."""
    global _dumps
    import rfc8785

    _dumps = rfc8785.dumps
    return _dumps(value)


#: ``rfc8785.dumps`` once a record was made or checked (called per item: no import per call)
_dumps: Callable[[Any], bytes] = _load_jcs


_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=False
)


def _plain(value: Any) -> bool:
    """Whether ``value`` is one :func:`canonical` may hand to the interpreter's encoder."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    if kind is dict:
        return all(type(k) is str and k.isascii() and _plain(v) for k, v in value.items())
    if kind is list:
        return all(_plain(v) for v in value)
    return False


#: a body whose list values hold this many items in all is never held as one JCS string:
#: it is made item by item each time it is hashed or written (a first snapshot's event
#: names every file: 80,000 paths, 9 MB)
STREAMED_ITEMS = 10_000


def canonical_pieces(body: dict[str, Any]) -> Iterator[bytes]:
    """``canonical(body)`` in pieces, each item of a list value its own piece.

    JCS writes no whitespace, so an object is ``{``, its members sorted by
    name and joined by ``,``, then ``}``, and a list its items joined by
    ``,`` inside ``[]``. The names must be ASCII (where sorting by UTF-16
    code units, as JCS does, is sorting by characters): see :func:`_streamed`.
    """
    sep = b"{"
    for key in sorted(body):
        value = body[key]
        if type(value) is list:
            yield sep + canonical(key) + b":["
            comma = b""
            for item in value:
                yield comma + canonical(item)
                comma = b","
            yield b"]"
        else:
            yield sep + canonical(key) + b":" + canonical(value)
        sep = b","
    yield b"}" if sep == b"," else b"{}"


def _streamed(body: dict[str, Any]) -> bool:
    """Whether ``body`` is canonicalized in pieces (:data:`STREAMED_ITEMS`)."""
    items = sum(len(v) for v in body.values() if type(v) is list)
    return items >= STREAMED_ITEMS and all(type(k) is str and k.isascii() for k in body)


def record_hash(
    seq: int,
    kind: str,
    body: dict[str, Any],
    prev: str,
    *,
    body_jcs: bytes | None = None,
    lane: str | None = None,
) -> str:
    """The chain hash of one record (``body_jcs``: the body's JCS bytes, when already made)."""
    return _hashed(seq, kind, (body_jcs or canonical(body),), prev, lane)[0]


def _hashed(
    seq: int, kind: str, body_pieces: Iterable[bytes], prev: str, lane: str | None = None
) -> tuple[str, int]:
    """The chain hash of a record whose body's JCS is ``body_pieces``, and that JCS's length.

    The hashed bytes are the JCS of ``{"body", "kind", "prev", "seq"}``, built around
    the body's own JCS so that a record's body is canonicalized once (JCS orders the
    names: body < kind < prev < seq); the body is hashed where it is, not copied.
    """
    hasher = blake3.blake3()
    hasher.update(b'{"body":')
    length = 0
    for piece in body_pieces:
        hasher.update(piece)
        length += len(piece)
    if lane is not None:  # a lane's record: its place (seq) is given when it is accepted
        hasher.update(
            b',"kind":'
            + canonical(kind)
            + b',"lane":'
            + canonical(lane)
            + b',"prev":'
            + canonical(prev)
            + b"}"
        )
        return hasher.hexdigest(), length
    hasher.update(
        b',"kind":'
        + canonical(kind)
        + b',"prev":'
        + canonical(prev)
        + b',"seq":'
        + canonical(seq)
        + b"}"
    )
    return hasher.hexdigest(), length


@dataclass(frozen=True)
class Record:
    """One stored, chained ledger record."""

    seq: int
    kind: RecordKind
    body: dict[str, Any]
    prev: str
    hash: str
    body_jcs: bytes | None = field(default=None, compare=False, repr=False)
    #: the length of the body's JCS when it is made in pieces, not kept (:data:`STREAMED_ITEMS`)
    body_length: int = field(default=0, compare=False, repr=False)
    #: the branch whose chain this record continues (a shared ledger); None: the one chain
    lane: str | None = None

    @classmethod
    def seal(
        cls, seq: int, kind: RecordKind, body: dict[str, Any], prev: str, *, lane: str | None = None
    ) -> Record:
        """A new record chained after ``prev`` (in ``lane``'s chain when given)."""
        if _streamed(body):
            digest, length = _hashed(seq, kind, canonical_pieces(body), prev, lane)
            return cls(seq, kind, body, prev, digest, None, length, lane)
        body_jcs = canonical(body)
        digest = record_hash(seq, kind, body, prev, body_jcs=body_jcs, lane=lane)
        return cls(seq, kind, body, prev, digest, body_jcs, 0, lane)

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object (the JSONL line, and ``--json`` output)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "body": self.body,
            "prev": self.prev,
            "hash": self.hash,
            **({"lane": self.lane} if self.lane is not None else {}),
        }

    def to_line(self) -> bytes:
        """The record as one canonical JSON line (without the newline)."""
        return b"".join(self.line_pieces())

    def line_pieces(self) -> Iterator[bytes]:
        """:meth:`to_line` in pieces: the body's JCS as kept (not copied), or made in pieces."""
        yield b'{"body":'
        if self.body_jcs is not None:
            yield self.body_jcs
        elif self.body_length:
            yield from canonical_pieces(self.body)
        else:
            yield canonical(self.body)
        yield self._line_tail()

    def line_length(self) -> int:
        """The length of :meth:`to_line`, without making the line of a sealed record."""
        if self.body_jcs is not None:
            body = len(self.body_jcs)
        elif self.body_length:
            body = self.body_length
        else:
            body = len(canonical(self.body))
        return len(b'{"body":') + body + len(self._line_tail())

    def _line_tail(self) -> bytes:
        return (
            b',"hash":'
            + canonical(self.hash)
            + b',"kind":'
            + canonical(self.kind)
            + (b',"lane":' + canonical(self.lane) if self.lane is not None else b"")
            + b',"prev":'
            + canonical(self.prev)
            + b',"seq":'
            + canonical(self.seq)
            + b"}"
        )

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Record:
        """Parse a stored record; CorruptRepository when it is not one."""
        try:
            seq, kind, body, prev, digest = (
                raw["seq"],
                raw["kind"],
                raw["body"],
                raw["prev"],
                raw["hash"],
            )
        except (KeyError, TypeError):
            raise CorruptRepository("a ledger record is malformed") from None
        lane = raw.get("lane")
        if (
            not isinstance(seq, int)
            or kind not in RECORD_KINDS
            or not isinstance(body, dict)
            or not isinstance(prev, str)
            or not isinstance(digest, str)
            or not (lane is None or isinstance(lane, str))
        ):
            raise CorruptRepository(f"ledger record {seq!r} is malformed")
        return cls(seq, kind, body, prev, digest, lane=lane)

    @classmethod
    def from_line(cls, line: bytes) -> Record:
        """Parse one JSONL line."""
        try:
            raw = json.loads(line, parse_int=_parse_int)
        except (ValueError, RecursionError):
            raise CorruptRepository("a ledger line is not JSON") from None
        return cls.from_json(raw)


_SAFE_INT = 2**53 - 1


def _parse_int(text: str) -> int | float:
    """JSON integers as RFC 8785 wrote them: beyond 2**53 they were floats."""
    value = int(text)
    return value if -_SAFE_INT <= value <= _SAFE_INT else float(value)


def verify_chain(records: Iterable[Record]) -> str | None:
    """The first problem in a sequence of records read in append order, or None.

    Checks that ``seq`` counts up from 1 without gaps, that each ``prev`` is
    the previous record's hash (for a record of a lane, the previous record of
    its lane, or for its first one the newest record without a lane), and that
    each hash matches its content.
    """
    expected_seq, prev, unlaned = 1, "", ""
    lanes: dict[str, tuple[int, str]] = {}
    for record in records:
        if record.seq != expected_seq:
            return (
                f"record {expected_seq} is missing or out of order "
                f"(found record {record.seq} in its place)"
            )
        lane = record.lane
        if lane is None:
            if record.prev != prev:
                return (
                    f"record {record.seq} ({record.kind}) does not follow record {record.seq - 1}"
                )
        else:
            before, want = lanes.get(lane, (0, unlaned))
            if record.prev != want:
                after = f"record {before} of its branch" if before else "the chain before it"
                return f"record {record.seq} ({record.kind}, branch {lane}) does not follow {after}"
        if record_hash(record.seq, record.kind, record.body, record.prev, lane=lane) != record.hash:
            what = record.body.get("id") or record.body.get("name") or ""
            return f"record {record.seq} ({record.kind} {what}) was modified".replace(" )", ")")
        expected_seq, prev = record.seq + 1, record.hash
        if lane is None:
            unlaned = record.hash
        else:
            lanes[lane] = (record.seq, record.hash)
    return None


def chain_heads(records: Iterable[Record]) -> dict[str, str]:
    """The hash of the last record of each lane (``""``: of the records without one).

    On a ledger of one chain, ``{"": head}``. On a shared ledger each branch's
    chain ends at its own head: the last record's hash covers only its branch,
    so a stretch of history is summed up by every lane's head.
    """
    heads: dict[str, str] = {}
    for record in records:
        heads[record.lane or ""] = record.hash
    return heads
