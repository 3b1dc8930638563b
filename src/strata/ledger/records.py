"""Ledger records and the hash chain that makes the ledger tamper-evident.

Everything the ledger stores is a :class:`Record`: an event, a ref move, a
bookmark change or an operation. Records are appended in one total order
(``seq``, starting at 1) and each is chained to the one before it::

    hash = BLAKE3( JCS({"kind": kind, "body": body, "prev": prev, "seq": seq}) )

where JCS is RFC 8785 canonical JSON and ``prev`` is the previous record's
hash (``""`` for the first). Editing, deleting or reordering any stored
record breaks the chain at that record, and :func:`verify_chain` names it.
The hash of the last record (the *chain head*) summarises the whole history:
written down elsewhere, it proves later that nothing was rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import blake3
import rfc8785

from strata.errors import CorruptRepository

RecordKind = Literal["event", "ref", "bookmark", "operation"]
RECORD_KINDS: tuple[str, ...] = ("event", "ref", "bookmark", "operation")


def canonical(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical JSON bytes of ``value``."""
    return rfc8785.dumps(value)


def record_hash(
    seq: int, kind: str, body: dict[str, Any], prev: str, *, body_jcs: bytes | None = None
) -> str:
    """The chain hash of one record (``body_jcs``: the body's JCS bytes, when already made)."""
    hasher = blake3.blake3()
    for piece in _hashed_pieces(seq, kind, body_jcs or canonical(body), prev):
        hasher.update(piece)  # the body is hashed where it is, not copied into one string
    return hasher.hexdigest()


def _hashed_pieces(seq: int, kind: str, body_jcs: bytes, prev: str) -> tuple[bytes, ...]:
    # JCS of {"body", "kind", "prev", "seq"}, built around the body's own JCS so that a
    # record's body is canonicalized once (JCS orders keys: body < kind < prev < seq)
    return (
        b'{"body":',
        body_jcs,
        b',"kind":',
        canonical(kind),
        b',"prev":',
        canonical(prev),
        b',"seq":',
        canonical(seq),
        b"}",
    )


@dataclass(frozen=True)
class Record:
    """One stored, chained ledger record."""

    seq: int
    kind: RecordKind
    body: dict[str, Any]
    prev: str
    hash: str
    body_jcs: bytes | None = field(default=None, compare=False, repr=False)

    @classmethod
    def seal(cls, seq: int, kind: RecordKind, body: dict[str, Any], prev: str) -> Record:
        """A new record chained after ``prev``."""
        body_jcs = canonical(body)
        digest = record_hash(seq, kind, body, prev, body_jcs=body_jcs)
        return cls(seq, kind, body, prev, digest, body_jcs)

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object (the JSONL line, and ``--json`` output)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "body": self.body,
            "prev": self.prev,
            "hash": self.hash,
        }

    def to_line(self) -> bytes:
        """The record as one canonical JSON line (without the newline)."""
        return b"".join(self.line_pieces())

    def line_pieces(self) -> tuple[bytes, ...]:
        """:meth:`to_line` in pieces, the body's JCS bytes one of them (not copied)."""
        body_jcs = self.body_jcs or canonical(self.body)
        return (
            b'{"body":',
            body_jcs,
            b',"hash":',
            canonical(self.hash),
            b',"kind":',
            canonical(self.kind),
            b',"prev":',
            canonical(self.prev),
            b',"seq":',
            canonical(self.seq),
            b"}",
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
        if (
            not isinstance(seq, int)
            or kind not in RECORD_KINDS
            or not isinstance(body, dict)
            or not isinstance(prev, str)
            or not isinstance(digest, str)
        ):
            raise CorruptRepository(f"ledger record {seq!r} is malformed")
        return cls(seq, kind, body, prev, digest)

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
    the previous record's hash, and that each hash matches its content.
    """
    expected_seq, prev = 1, ""
    for record in records:
        if record.seq != expected_seq:
            return (
                f"record {expected_seq} is missing or out of order "
                f"(found record {record.seq} in its place)"
            )
        if record.prev != prev:
            return f"record {record.seq} ({record.kind}) does not follow record {record.seq - 1}"
        if record_hash(record.seq, record.kind, record.body, record.prev) != record.hash:
            what = record.body.get("id") or record.body.get("name") or ""
            return f"record {record.seq} ({record.kind} {what}) was modified".replace(" )", ")")
        expected_seq, prev = record.seq + 1, record.hash
    return None
