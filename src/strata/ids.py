"""Typed identifiers and how they are made.

Three kinds of id appear in a repository:

* ``ObjectId``: 64 lowercase hex digits, the BLAKE3-256 hash of an object's
  uncompressed bytes (blobs, trees and snapshot manifests alike).
* ``SnapshotId``: the ``ObjectId`` of a snapshot manifest.
* ``EventId``: 20 letters from ``EVENT_ALPHABET`` (80 random bits), which
  shares no character with hex, so an event id prefix can never be mistaken
  for an object id prefix, and a short prefix is unique. Append order is kept
  by the ledger, not by the id.
"""

from __future__ import annotations

import random
import re
from typing import NewType

ObjectId = NewType("ObjectId", str)
SnapshotId = NewType("SnapshotId", str)
EventId = NewType("EventId", str)

EVENT_ALPHABET = "ghjkmnpqrstvwxyz"  # 16 letters, none of them hex digits
EVENT_ID_LENGTH = 20
_HEX = re.compile(r"[0-9a-f]{64}")
_EVENT = re.compile(rf"[{EVENT_ALPHABET}]{{{EVENT_ID_LENGTH}}}")
HEX_PREFIX = re.compile(r"[0-9a-f]{4,64}")
EVENT_PREFIX = re.compile(rf"[{EVENT_ALPHABET}]{{4,{EVENT_ID_LENGTH}}}")


def is_object_id(text: str) -> bool:
    """True when ``text`` is a full object id."""
    return _HEX.fullmatch(text) is not None


def is_event_id(text: str) -> bool:
    """True when ``text`` is a full event id."""
    return _EVENT.fullmatch(text) is not None


def looks_like_id(text: str) -> bool:
    """True when ``text`` could be read as an id prefix of either kind."""
    return bool(HEX_PREFIX.fullmatch(text) or EVENT_PREFIX.fullmatch(text))


def _encode(value: int, width: int) -> str:
    digits = []
    for _ in range(width):
        digits.append(EVENT_ALPHABET[value & 0xF])
        value >>= 4
    return "".join(reversed(digits))


def new_event_id(rng: random.Random) -> EventId:
    """Make an event id from the random source ``rng``."""
    return EventId(_encode(rng.getrandbits(4 * EVENT_ID_LENGTH), EVENT_ID_LENGTH))


def short(text: str, width: int = 12) -> str:
    """The prefix of an id that is shown to people."""
    return text[:width]
