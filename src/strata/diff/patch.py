"""Git-format patches and line statistics for pairs of file versions.

This module turns two versions of one workspace entry into the section that
``git diff --full-index --binary`` would print for it, byte for byte where git's
output is deterministic, so that ``git apply`` (and anyone who reads git
patches) accepts it. It also counts inserted and deleted lines the way
``git diff --numstat`` does.

The line diff itself comes from libgit2's xdiff (through pygit2): git's own
algorithm, in C, with git's default indent heuristic. Everything around the
hunks -- the ``diff --git`` line, mode, rename and ``index`` lines, path
quoting -- is written here, because libgit2 cannot know a buffer's mode, and
abbreviates object ids, which ``git apply`` refuses for binary patches.

An entry is described by a :class:`FileSide`; ``None`` stands for a side where
the entry is absent (an added or deleted file). The rules followed are git's:

* A side is binary when a NUL byte occurs in its first 8000 bytes; when either
  side is binary the section carries a ``GIT binary patch``.
* Git knows three modes: ``100644``, ``100755`` (any user-execute bit) and
  ``120000`` (symlink, whose content is its target). Permission changes that
  do not change the git mode (``0o644`` to ``0o600``) are not shown.
* A change between a file and a symlink is printed as a deletion followed by an
  addition, as git does.
* Two sides with different paths are a rename, with git's similarity index.
* A file larger than :data:`BIG_FILE_BYTES` is never loaded whole: its
  section is git's ``Binary files … differ`` (:func:`render_big`), with blob
  ids hashed from a stream, as git does past ``core.bigFileThreshold``.

For a reader rather than ``git apply`` (``readable=True``), a file that was
text and now holds a NUL byte is shown as a text diff, flagged, instead of a
base85 blob; :mod:`strata.diff.display` then writes the NUL out as ``\\x00``.

pygit2 is imported inside the functions that need it, so that importing this
module costs nothing at command-line start-up.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.errors import DiffError

if TYPE_CHECKING:
    import pygit2

__all__ = [
    "BIG_FILE_BYTES",
    "FileSide",
    "LineStats",
    "git_blob_id",
    "git_mode",
    "is_binary",
    "git_blob_id_of_chunks",
    "line_stats",
    "render_big",
    "render_patch",
    "render_patches",
]

#: How many leading bytes git inspects for a NUL when deciding "binary".
BINARY_CHECK_BYTES = 8000

#: Files larger than this are compared as binary, from streams, never loaded whole
#: (the size the scanner streams too; git's ``core.bigFileThreshold`` idea).
BIG_FILE_BYTES = 16 * 1024 * 1024

#: The line a readable patch puts before a file that was text and now holds NUL bytes.
NOW_BINARY_NOTE = b"# %s: was text, now contains NUL bytes (binary to git); shown as text\n"

_NULL_ID = "0" * 40
_FILE_KINDS = frozenset({"file", "symlink"})


@dataclass(frozen=True)
class FileSide:
    """One version of a workspace entry, as one side of a diff.

    Attributes:
        path: POSIX path relative to the workspace root, e.g. ``"src/a.py"``.
        kind: ``"file"`` or ``"symlink"``.
        mode: Permission bits such as ``0o644`` or ``0o755``; ignored for
            symlinks. Only the user-execute bit reaches the patch.
        data: The file's content, or the symlink's target.
    """

    path: str
    kind: str
    mode: int
    data: bytes


@dataclass(frozen=True)
class LineStats:
    """Lines inserted and deleted between two versions, as ``git diff --numstat`` counts them.

    Attributes:
        insertions: Lines present only in the new version (0 when binary).
        deletions: Lines present only in the old version (0 when binary).
        binary: Whether either version is binary, in which case git prints
            ``-`` for both counts.
    """

    insertions: int
    deletions: int
    binary: bool


def is_binary(data: bytes) -> bool:
    """Tell whether git would treat ``data`` as binary.

    Git's rule: a NUL byte within the first 8000 bytes.

    Args:
        data: File content.

    Returns:
        ``True`` when git would not diff ``data`` line by line.
    """
    return b"\0" in data[:BINARY_CHECK_BYTES]


def git_mode(side: FileSide) -> str:
    """Return the git tree mode of ``side``.

    Args:
        side: A file or symlink.

    Returns:
        ``"120000"`` for a symlink, ``"100755"`` for a file with the
        user-execute bit (``0o100``) set, ``"100644"`` for any other file.

    Raises:
        DiffError: ``side.kind`` is neither ``"file"`` nor ``"symlink"``.
    """
    if side.kind == "symlink":
        return "120000"
    if side.kind == "file":
        return "100755" if side.mode & 0o100 else "100644"
    raise DiffError(f"cannot diff {side.path!r}: unknown entry kind {side.kind!r}")


def git_blob_id(data: bytes) -> str:
    """Return the id git gives a blob holding ``data``.

    Args:
        data: Blob content.

    Returns:
        40 lowercase hex digits: the SHA-1 of ``blob <len>``, a NUL byte, then ``data``.
    """
    digest = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()


def git_blob_id_of_chunks(size: int, chunks: Iterable[bytes]) -> str:
    """Return the id git gives a blob of ``size`` bytes read as ``chunks``.

    Raises:
        DiffError: The chunks do not add up to ``size`` bytes.
    """
    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    seen = 0
    for chunk in chunks:
        digest.update(chunk)
        seen += len(chunk)
    if seen != size:
        raise DiffError(f"a blob recorded as {size} bytes holds {seen}")
    return digest.hexdigest()


def line_stats(old: bytes | None, new: bytes | None) -> LineStats:
    """Count the lines inserted and deleted from ``old`` to ``new``.

    Args:
        old: The old content, or ``None`` when the file did not exist.
        new: The new content, or ``None`` when the file no longer exists.

    Returns:
        The counts ``git diff --numstat`` would print; when either side is
        binary, ``LineStats(0, 0, binary=True)``.
    """
    old_data = b"" if old is None else old
    new_data = b"" if new is None else new
    if is_binary(old_data) or is_binary(new_data):
        return LineStats(insertions=0, deletions=0, binary=True)
    if old_data == new_data:
        return LineStats(insertions=0, deletions=0, binary=False)
    counted = _plain_counts(old_data, new_data)
    if counted is not None:
        insertions, deletions = counted
    else:
        _, insertions, deletions = _xdiff(old_data, new_data, binary=False, context=0).line_stats
    return LineStats(insertions=insertions, deletions=deletions, binary=False)


def _lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` as xdiff compares them (an unterminated last line differs)."""
    lines = data.split(b"\n")
    last = lines.pop()
    if last:
        lines.append(last + b"\n")  # no complete line (split off its "\n") can equal it
    return lines


def _plain_counts(old: bytes, new: bytes) -> tuple[int, int] | None:
    """(insertions, deletions) when no diff algorithm can disagree, else None.

    xdiff first sets aside the lines both sides share at the start and the
    end, then diffs the middle. When one middle is empty, or the two share
    no line, every line of the middles is inserted or deleted whatever the
    algorithm: this is what a typical edit (lines added, a line rewritten)
    looks like, and it is counted here without loading libgit2.
    """
    a_mid, b_mid = _middles(old, new)
    if a_mid and b_mid and not set(a_mid).isdisjoint(b_mid):
        return None
    return len(b_mid), len(a_mid)


def _middles(old: bytes, new: bytes) -> tuple[list[bytes], list[bytes]]:
    """The lines of each side once the lines both share at the start and the end are set aside."""
    a, b = _lines(old), _lines(new)
    limit = min(len(a), len(b))
    start = 0
    while start < limit and a[start] == b[start]:
        start += 1
    end = 0
    while end < limit - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return a[start : len(a) - end], b[start : len(b) - end]


def _size(lines: list[bytes]) -> int:
    """The bytes of ``lines`` with their newlines (:func:`_lines` keeps only the last one's)."""
    return sum(len(line) + (not line.endswith(b"\n")) for line in lines)


def text_bytes_changed(old: bytes, new: bytes) -> int:
    """The bytes a text change touched: per hunk, the larger of the lines removed and added.

    A two-line change at both ends of a 40 KB file is those two lines, not the
    40 KB between them (what the common prefix and suffix of the bytes give).
    """
    a_mid, b_mid = _middles(old, new)
    if not a_mid or not b_mid or set(a_mid).isdisjoint(b_mid):  # one hunk, whatever the algorithm
        return max(_size(a_mid), _size(b_mid))
    total = 0
    for hunk in _xdiff(old, new, binary=False, context=0).hunks:
        removed = added = 0
        for line in hunk.lines:
            if line.origin == "-":
                removed += len(line.raw_content)
            elif line.origin == "+":
                added += len(line.raw_content)
        total += max(removed, added)
    return total


def render_patch(
    old: FileSide | None, new: FileSide | None, *, context: int = 3, readable: bool = False
) -> bytes:
    """Render the change from ``old`` to ``new`` as ``git diff`` prints it.

    The output is what ``git diff --full-index --binary -M`` prints for the
    change, and ``git apply`` accepts it (with ``context=0``, only given
    ``--unidiff-zero``, as for git's own ``-U0`` output).

    Args:
        old: The entry before the change, or ``None`` if it was added.
        new: The entry after the change, or ``None`` if it was deleted.
        context: Lines of unchanged context around each hunk.
        readable: For a reader, not ``git apply``: a text file that now
            holds a NUL byte is shown as a text diff after a
            :data:`NOW_BINARY_NOTE` line.

    Returns:
        One git-format section (two for a change between a file and a
        symlink), or ``b""`` when nothing git records differs.

    Raises:
        DiffError: A path is empty or contains a NUL byte, a kind is unknown,
            or ``context`` is negative.
    """
    if context < 0:
        raise DiffError(f"context must be zero or more lines, not {context}")
    for side in (old, new):
        if side is not None:
            _check_side(side)
    if old is not None and new is not None and old.kind != new.kind:
        return _render(old, None, context=context) + _render(None, new, context=context)
    return _render(old, new, context=context, readable=readable)


def render_big(
    old: FileSide | None, new: FileSide | None, *, old_id: str | None, new_id: str | None
) -> bytes:
    """The section of a change to a file too big to diff: git's ``Binary files … differ``.

    The sides' ``data`` is not used (pass ``b""``); ``old_id`` and ``new_id``
    are the git blob ids (:func:`git_blob_id_of_chunks`). Both sides, when
    present, are files.
    """
    for side in (old, new):
        if side is not None:
            _check_side(side)
    if old is None and new is None:
        return b""
    old_path = old.path if old is not None else new.path  # type: ignore[union-attr]
    new_path = new.path if new is not None else old_path
    out, same = _header(old, new, old_path, new_path, old_id == new_id)
    if same is not None:
        return same
    index = f"index {old_id or _NULL_ID}..{new_id or _NULL_ID}"
    old_mode = None if old is None else git_mode(old)
    new_mode = None if new is None else git_mode(new)
    if old_mode == new_mode:
        index += f" {old_mode}"
    out.append(index.encode() + b"\n")
    minus = b"/dev/null" if old is None else _quote("a/" + old_path)
    plus = b"/dev/null" if new is None else _quote("b/" + new_path)
    out.append(b"Binary files " + minus + b" and " + plus + b" differ\n")
    return b"".join(out)


def _mode_lines(old_mode: str | None, new_mode: str | None) -> list[bytes]:
    """A git diff header's mode lines: a new or deleted file's, or a mode change."""
    if old_mode is None:
        return [f"new file mode {new_mode}\n".encode()]
    if new_mode is None:
        return [f"deleted file mode {old_mode}\n".encode()]
    if old_mode != new_mode:
        return [f"old mode {old_mode}\nnew mode {new_mode}\n".encode()]
    return []


def _header(
    old: FileSide | None, new: FileSide | None, old_path: str, new_path: str, same_content: bool
) -> tuple[list[bytes], bytes | None]:
    """The lines up to the index line; the whole section instead when only they differ."""
    old_mode = None if old is None else git_mode(old)
    new_mode = None if new is None else git_mode(new)
    same_content = same_content and old is not None and new is not None
    renamed = old_path != new_path
    if same_content and not renamed and old_mode == new_mode:
        return [], b""
    out = [b"diff --git " + _quote("a/" + old_path) + b" " + _quote("b/" + new_path) + b"\n"]
    out += _mode_lines(old_mode, new_mode)
    if renamed:
        out.append(b"similarity index 100%\n" if same_content else b"similarity index 0%\n")
        out.append(b"rename from " + _quote(old_path) + b"\n")
        out.append(b"rename to " + _quote(new_path) + b"\n")
    return out, (b"".join(out) if same_content else None)


def render_patches(
    pairs: Iterable[tuple[FileSide | None, FileSide | None]],
    *,
    context: int = 3,
    readable: bool = False,
) -> bytes:
    """Render several changes, in the order given, as one patch.

    Args:
        pairs: ``(old, new)`` pairs as :func:`render_patch` takes them.
        context: Lines of unchanged context around each hunk.
        readable: As :func:`render_patch`.

    Returns:
        The concatenated sections; ``b""`` when nothing differs.

    Raises:
        DiffError: As :func:`render_patch`.
    """
    return b"".join(
        render_patch(old, new, context=context, readable=readable) for old, new in pairs
    )


def _check_side(side: FileSide) -> None:
    if side.kind not in _FILE_KINDS:
        raise DiffError(f"cannot diff {side.path!r}: unknown entry kind {side.kind!r}")
    if not side.path or "\0" in side.path:
        raise DiffError(f"cannot diff the entry at {side.path!r}: not a usable path")


def _render(
    old: FileSide | None, new: FileSide | None, *, context: int, readable: bool = False
) -> bytes:
    """Render one section; the sides, when both present, are of the same kind."""
    if old is None:
        if new is None:
            return b""
        old_path = new_path = new.path
    else:
        old_path = new_path = old.path
        if new is not None:
            new_path = new.path
    old_data = b"" if old is None else old.data
    new_data = b"" if new is None else new.data
    old_mode = None if old is None else git_mode(old)
    new_mode = None if new is None else git_mode(new)
    same_content = old is not None and new is not None and old_data == new_data
    renamed = old_path != new_path
    if same_content and not renamed and old_mode == new_mode:
        return b""

    binary = is_binary(old_data) or is_binary(new_data)
    note = b""
    if readable and binary and old is not None and new is not None and not is_binary(old_data):
        binary = False  # was text: a reader sees the lines, NULs and all
        note = NOW_BINARY_NOTE % _quote(new_path)
    a_label = _quote("a/" + old_path)
    b_label = _quote("b/" + new_path)
    out = [note, b"diff --git " + a_label + b" " + b_label + b"\n"]
    out += _mode_lines(old_mode, new_mode)
    if renamed:
        score = 100 if same_content else _similarity(old_data, new_data)
        out.append(b"similarity index %d%%\n" % score)
        out.append(b"rename from " + _quote(old_path) + b"\n")
        out.append(b"rename to " + _quote(new_path) + b"\n")
    if same_content:
        return b"".join(out)

    old_id = _NULL_ID if old is None else git_blob_id(old_data)
    new_id = _NULL_ID if new is None else git_blob_id(new_data)
    index = f"index {old_id}..{new_id}"
    if old_mode == new_mode:
        index += f" {old_mode}"
    out.append(index.encode() + b"\n")
    if old_data == new_data:
        # An empty file added or deleted: git prints no file names and no hunks.
        return b"".join(out)

    body = _body(_xdiff(old_data, new_data, binary=binary, context=context).data, binary=binary)
    if not binary:
        minus = b"/dev/null" if old is None else a_label
        plus = b"/dev/null" if new is None else b_label
        out.append(b"--- " + minus + _tab_if_spaced(minus) + b"\n")
        out.append(b"+++ " + plus + _tab_if_spaced(plus) + b"\n")
    out.append(body)
    return b"".join(out)


def _xdiff(old: bytes, new: bytes, *, binary: bool, context: int) -> pygit2.Patch:
    """Diff two buffers with libgit2, forcing git's binary decision made here."""
    import pygit2
    from pygit2.enums import DiffOption

    flag = DiffOption.INDENT_HEURISTIC
    flag |= DiffOption.FORCE_BINARY | DiffOption.SHOW_BINARY if binary else DiffOption.FORCE_TEXT
    try:
        # The names are placeholders: the header is written by _render.
        return pygit2.Patch.create_from(
            old, new, old_as_path="x", new_as_path="x", flag=flag, context_lines=context
        )
    except pygit2.GitError as error:  # libgit2 refuses inputs past 1 GiB, for one
        raise DiffError(f"cannot diff these versions: {error}") from error


def _body(patch_data: bytes, *, binary: bool) -> bytes:
    """Cut libgit2's own header (made with placeholder names) off a patch."""
    marker = b"\nGIT binary patch\n" if binary else b"\n@@ -"
    start = patch_data.find(marker)
    if start < 0:
        raise DiffError("the diff engine produced no hunks for two different versions")
    return patch_data[start + 1 :]


# Git's quoting (quote.c, cq_lookup with core.quotePath on): these bytes get a
# backslash and a letter, the other control bytes, DEL and every byte >= 0x80
# an octal escape; a name needing any of this is put in double quotes.
_NAMED_ESCAPES = {
    0x07: b"\\a",
    0x08: b"\\b",
    0x09: b"\\t",
    0x0A: b"\\n",
    0x0B: b"\\v",
    0x0C: b"\\f",
    0x0D: b"\\r",
    0x22: b'\\"',
    0x5C: b"\\\\",
}
_MUST_QUOTE = re.compile(rb'[\x00-\x1f"\\\x7f-\xff]')


def _escape_byte(match: re.Match[bytes]) -> bytes:
    byte = match.group()[0]
    return _NAMED_ESCAPES.get(byte) or b"\\%03o" % byte


def _quote(name: str) -> bytes:
    """Quote a path as git does in patch headers."""
    raw = name.encode("utf-8", "surrogateescape")
    if not _MUST_QUOTE.search(raw):
        return raw
    return b'"' + _MUST_QUOTE.sub(_escape_byte, raw) + b'"'


def _tab_if_spaced(label: bytes) -> bytes:
    # Git ends a ---/+++ line whose name holds a space with a tab, so that
    # GNU patch does not take the space for the start of a timestamp.
    return b"\t" if b" " in label else b""


# Git's similarity (diffcore-delta.c): content cut into chunks that end after a
# newline or at 64 bytes; the score is the bytes of old chunks found again in
# the new content, over the size of the larger side.
_CHUNK = re.compile(rb"[^\n]{0,63}\n|[^\n]{1,64}")


def _chunk_bytes(data: bytes, *, text: bool) -> Counter[bytes]:
    if text:
        data = data.replace(b"\r\n", b"\n")
    return Counter(_CHUNK.findall(data))


def _similarity(old: bytes, new: bytes) -> int:
    """Return git's similarity index (0-100) between two versions of a renamed file."""
    largest = max(len(old), len(new))
    if not new or not largest:
        return 0
    old_chunks = _chunk_bytes(old, text=not is_binary(old))
    new_chunks = _chunk_bytes(new, text=not is_binary(new))
    copied = sum(
        len(chunk) * min(count, new_chunks[chunk])
        for chunk, count in old_chunks.items()
        if chunk in new_chunks
    )
    return copied * 100 // largest
