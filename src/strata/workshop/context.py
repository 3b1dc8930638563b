"""What a Workshop model call is told about the workspace: the manifest, the maps, the prompt.

Seed 000's "Prompt Assembly + File Context Contract": every model call of the
Workshop carries the workspace's files, so the model never asks the user to
upload a file that is already there.

**The manifest** (:func:`build_manifest`) lists every file of a folder (the
Draft's or Published), honouring Strata's ignore rules (the repository's
:class:`~strata.store.ignore.IgnoreRules`: ``.strata``, ``.git``, ignore
files, configured defaults): its path, type, size and whether its content is
readable or opaque (and why). It is built walking the folder through
directory handles, never following a symlink (a symlink is listed as one,
opaque). If any folder cannot be listed the manifest is incomplete, and
:class:`~strata.errors.ManifestUnavailable` is raised: a turn fails rather
than being sent without its file context.

**The prompt** (:func:`build_prompt`)::

    prompt = build_prompt(
        folder,                       # Path: the folder whose files the model works on
        transcript,                   # Sequence[Message]: the conversation so far (oldest first)
        user_text="Sum the sales",    # str | None: the new user message, appended last
        context_items=[("Workspace digest", digest_text)],  # (title, text) pairs, in order
        rules=core.rules(),           # IgnoreRules | None: the repository's ignore rules
        limits=LIMITS,                # Limits: the sizes below
        manifest=None,                # Manifest | None: one built already (else built here)
    )
    request = Request(model=..., messages=prompt.messages, tools=toolbox.specs())

``prompt.system`` is the system text; ``prompt.messages`` is what to send:
the system message, then the last :attr:`Limits.messages` (8) messages of
``transcript`` + the new user message (a window never starts with a tool
result whose call was cut off). The system text holds, in this order and
within :attr:`Limits.total_chars` (24,000 characters) in all:

1. the instructions (the files are present; do not ask the user to upload
   them; read with selectors; prefer the table tools for CSV; ...);
2. the manifest (at most half the total; the rest is named by a marker);
3. each context item, delimited, in the order given (the workspace digest,
   situation context, skills);
4. file sections, files named in ``user_text`` first, then structured files
   (csv, tsv, xlsx, docx, pptx, pdf), then the other text files, each by
   path: a small text file inline, else its structural map.

Every section is cut at :attr:`Limits.file_chars` (8,000 characters) and
:attr:`Limits.file_lines` (200 lines); whatever is cut leaves a visible
``[truncated: ...]`` marker that says how much is missing and which tool
reads it. The same folder content, transcript and arguments give the same
bytes (everything is sorted; nothing depends on the clock).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.errors import ManifestUnavailable, StrataError
from strata.providers.base import Message
from strata.store.ignore import IGNORE_FILES, IgnoreRules
from strata.workshop.filemaps import (
    SNIFF_BYTES,
    STRUCTURED,
    TABULAR,
    FileMap,
    Sniffed,
    file_map,
    read_regular,
    sniff,
)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: a file modified less than this long ago is sniffed again (its stat may not show a change)
_RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class Limits:
    """The sizes a prompt keeps to (seed 000 and issue 13)."""

    #: characters of the whole system text
    total_chars: int = 24_000
    #: characters of one file's (or one context item's) section
    file_chars: int = 8_000
    #: lines of one file's (or one context item's) section
    file_lines: int = 200
    #: messages of the conversation sent (the new user message included)
    messages: int = 8


LIMITS = Limits()


def shown_path(path: str) -> str:
    """``path`` as the prompt shows it, control characters escaped (``\\n``).

    So no file name can start a line of its own in the system text.
    """
    if path.isprintable():
        return path
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in path)


@dataclass(frozen=True)
class FileEntry:
    """One file of the manifest."""

    path: str
    type: str
    size: int
    readable: bool
    encoding: str | None = None
    #: why the content is unavailable (opaque files)
    reason: str | None = None

    @property
    def availability(self) -> str:
        """``readable`` or ``opaque``."""
        return "readable" if self.readable else "opaque"

    def row(self) -> str:
        """The entry as one manifest line."""
        tail = self.availability + (f": {self.reason}" if self.reason else "")
        return f"- {shown_path(self.path)} ({self.type}, {self.size} bytes, {tail})"

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON."""
        return {
            "path": self.path,
            "type": self.type,
            "size": self.size,
            "content": self.availability,
            "encoding": self.encoding,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Manifest:
    """Every file of a folder, sorted by path."""

    folder: Path
    files: tuple[FileEntry, ...]
    _index: dict[str, FileEntry] = field(default_factory=dict, repr=False, compare=False)

    def get(self, path: str) -> FileEntry | None:
        """The entry of ``path``, or None."""
        if not self._index and self.files:
            self._index.update((f.path, f) for f in self.files)
        return self._index.get(path)

    @property
    def total_size(self) -> int:
        """The files' sizes added up."""
        return sum(f.size for f in self.files)

    def to_json(self) -> list[dict[str, Any]]:
        """The entries as JSON."""
        return [f.to_json() for f in self.files]


_sniffed: dict[tuple[str, int, int, int, int], Sniffed] = {}
_sniff_lock = threading.Lock()


def build_manifest(folder: Path, *, rules: IgnoreRules | None = None) -> Manifest:
    """The manifest of ``folder``; :class:`ManifestUnavailable` when it cannot be complete.

    ``rules`` are the repository's ignore rules at the root (its configured
    defaults); the folder's ``.gitignore``/``.strataignore`` files are read
    on the way. Without ``rules``, Strata's default rules apply.
    """
    base = rules if rules is not None else IgnoreRules.root()
    shown = str(folder)
    try:
        root_fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        raise ManifestUnavailable(shown, exc.strerror or str(exc)) from None
    entries: list[FileEntry] = []
    now = time.time_ns()
    stack: list[tuple[int, str, IgnoreRules]] = [(root_fd, "", base)]
    try:
        while stack:
            fd, prefix, parent = stack.pop()
            try:
                _list_folder(fd, prefix, parent, entries, stack, now)
            except OSError as exc:
                where = prefix.rstrip("/") or "the folder"
                raise ManifestUnavailable(
                    shown, f"{where} cannot be listed ({exc.strerror or exc})"
                ) from None
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    entries.sort(key=lambda e: e.path)
    return Manifest(folder, tuple(entries))


def _list_folder(
    fd: int,
    prefix: str,
    parent: IgnoreRules,
    entries: list[FileEntry],
    stack: list[tuple[int, str, IgnoreRules]],
    now: int,
) -> None:
    with os.scandir(fd) as found:
        listing = sorted(found, key=lambda e: e.name)
    names = {e.name for e in listing}
    contents: list[bytes] = []
    for name in IGNORE_FILES:
        if name in names:
            try:
                contents.append(_read_at(fd, name, -1))
            except OSError:
                continue
    rules = parent.child(prefix, contents)
    kinds = [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]
    ignored = rules.ignored_names(prefix, kinds)
    for entry in listing:
        if entry.name in ignored:
            continue
        path = prefix + entry.name
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed since the listing: it is not part of the folder any more
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue
            stack.append((sub, path + "/", rules))
        elif stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(entry.name, dir_fd=fd)
            except OSError:
                target = "?"
            reason = f"symlink to {target} (not followed)"
            entries.append(FileEntry(path, "symlink", 0, False, reason=reason))
        elif stat.S_ISREG(st.st_mode):
            entries.append(_entry(fd, entry.name, path, st, now))
        else:
            entries.append(FileEntry(path, "special", 0, False, reason="not a regular file"))


def _read_at(fd: int, name: str, limit: int) -> bytes:
    file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    try:
        with open(file_fd, "rb", closefd=False) as file:
            return file.read(limit) if limit >= 0 else file.read()
    finally:
        os.close(file_fd)


def _entry(fd: int, name: str, path: str, st: os.stat_result, now: int) -> FileEntry:
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _sniff_lock:
        found = _sniffed.get(key)
    if found is None:
        try:
            head = _read_at(fd, name, SNIFF_BYTES)
        except OSError as exc:
            return FileEntry(
                path,
                "unknown",
                st.st_size,
                False,
                reason=f"cannot be read ({exc.strerror or exc})",
            )
        found = sniff(path, head, st.st_size)
        if now - st.st_mtime_ns > _RACY_NS and now - st.st_ctime_ns > _RACY_NS:
            with _sniff_lock:
                if len(_sniffed) > 50_000:
                    _sniffed.clear()
                _sniffed[key] = found
    return FileEntry(path, found.type, st.st_size, found.readable, found.encoding, found.reason)


def map_of(folder: Path, entry: FileEntry) -> FileMap:
    """The structural map of ``entry`` (a map with an error when it cannot be read)."""
    if not entry.readable:
        return FileMap(entry.type, (), error=entry.reason or "opaque")
    try:
        data = read_regular(folder, entry.path)
    except (OSError, StrataError) as exc:
        return FileMap(entry.type, (), error=f"cannot be read ({exc})")
    return file_map(entry.path, data, encoding=entry.encoding)


# -- the prompt -----------------------------------------------------------------------------

INSTRUCTIONS = """\
You are the assistant of Strata's Workshop: you help the user with the files of their \
workspace, listed below.

How to work with the files:
- The files listed in the manifest are already present in the workspace. Do not ask the \
user to upload, attach or paste a file that appears in the manifest: read it with your tools.
- Use a file's structural map to see its layout, then read what you need with read_file and \
specific selectors (start_line/end_line, sheet and range, pages) or with the table tools. \
Read large files in chunks rather than all at once.
- For CSV/TSV files prefer table_describe, table_stats, table_query and table_export over \
reading lines. Count first (SELECT count(*)), then fetch in windows (LIMIT/OFFSET) rather \
than pulling a whole table in one result.
- A CSV's delimiter and header are sniffed, a best guess: check them before a write or \
export that depends on them.
- A file marked opaque has no readable content here; say so instead of guessing what it holds.
- Sections marked [truncated: ...] were cut to fit; the marker says which tool reads the rest.
- Your edits (write_file, edit_file, table_export) land in a Draft that the user reviews \
and publishes; you never change the published files directly.
- If context sections are present below, follow their instructions: skills give behavioural \
guidance, situation context gives the project's state."""


@dataclass(frozen=True)
class Prompt:
    """An assembled prompt: the system text, the messages to send, and what was cut."""

    system: str
    messages: tuple[Message, ...]
    manifest: Manifest
    #: one line per section or file that was cut or left out
    truncated: tuple[str, ...] = ()


def clip(text: str, *, chars: int, lines: int, hint: str = "") -> tuple[str, str | None]:
    """``text`` cut to ``lines`` lines and ``chars`` characters, with a visible marker.

    Returns the text (marker included) and a one-line note of what was cut
    (None when nothing was).
    """
    all_lines = text.splitlines()
    kept = all_lines[:lines]
    cut_lines = len(all_lines) - len(kept)
    out = "\n".join(kept)
    cut_chars = 0
    if len(out) > chars:
        cut_chars = len(out) - chars
        out = out[:chars]
        cut_lines = len(all_lines) - len(out.splitlines())
    if not cut_lines and not cut_chars:
        return text, None
    if cut_lines:
        shown = len(all_lines) - cut_lines
        note = f"{cut_lines} more lines (of {len(all_lines)}; {shown} shown)"
    else:
        note = f"{cut_chars} more characters"
    marker = f"[truncated: {note}{'; ' + hint if hint else ''}]"
    return out.rstrip("\n") + "\n" + marker, note


def _fence(text: str) -> str:
    longest = 0
    run = 0
    for c in text:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _mentioned(manifest: Manifest, user_text: str | None) -> list[FileEntry]:
    if not user_text:
        return []
    lowered = user_text.lower()
    out = []
    for entry in manifest.files:
        name = entry.path.rsplit("/", 1)[-1].lower()
        if entry.path.lower() in lowered or (len(name) >= 3 and name in lowered):
            out.append(entry)
    return out


def _window(transcript: Sequence[Message], user_text: str | None, count: int) -> list[Message]:
    messages = list(transcript)
    if user_text is not None:
        messages.append(Message("user", user_text))
    window = messages[-count:] if count > 0 else []
    while window and window[0].role == "tool":
        window.pop(0)
    return window


def build_prompt(
    folder: Path,
    transcript: Sequence[Message],
    *,
    user_text: str | None = None,
    context_items: Sequence[tuple[str, str]] = (),
    rules: IgnoreRules | None = None,
    limits: Limits = LIMITS,
    manifest: Manifest | None = None,
) -> Prompt:
    """The prompt of a Workshop model call on ``folder`` (see the module's docstring).

    Raises :class:`ManifestUnavailable` when the folder's manifest cannot be built.
    """
    if manifest is None:
        manifest = build_manifest(folder, rules=rules)
    notes: list[str] = []
    parts: list[str] = [INSTRUCTIONS]
    used = len(INSTRUCTIONS)
    # room for the closing marker of left-out files
    reserve = 200

    def room() -> int:
        return limits.total_chars - used - reserve - 2 * len(parts)

    # 2. the manifest
    files = manifest.files
    header = (
        f"## Workspace files ({len(files)} files, {manifest.total_size} bytes; every file "
        "listed here is already in the workspace)"
    )
    rows = [header]
    size = len(header)
    budget = min(room(), limits.total_chars // 2)
    listed = 0
    for entry in files:
        row = entry.row()
        if size + 1 + len(row) > budget - 120:
            break
        rows.append(row)
        size += 1 + len(row)
        listed += 1
    if not files:
        rows.append("(no files: the workspace is empty)")
    if listed < len(files):
        left = len(files) - listed
        rows.append(f"[truncated: {left} more files not listed; call list_files to see them all]")
        notes.append(f"manifest: {left} files not listed")
    section = "\n".join(rows)
    parts.append(section)
    used += len(section)

    # 3. context items
    for title, text in context_items:
        body, note = clip(
            text.strip(), chars=limits.file_chars, lines=limits.file_lines, hint="context item"
        )
        section = f"## Context: {title}\n<<<BEGIN {title}>>>\n{body}\n<<<END {title}>>>"
        if len(section) > room():
            keep = room() - len(title) * 2 - 80
            if keep < 200:
                marker = (
                    f"[context item {title!r} left out: the prompt's "
                    f"{limits.total_chars}-character limit is reached]"
                )
                parts.append(marker)
                used += len(marker)
                notes.append(f"context {title}: left out")
                continue
            body, note = clip(body, chars=keep, lines=limits.file_lines, hint="context item")
            section = f"## Context: {title}\n<<<BEGIN {title}>>>\n{body}\n<<<END {title}>>>"
        if note:
            notes.append(f"context {title}: {note}")
        parts.append(section)
        used += len(section)

    # 4. file sections
    mentioned = _mentioned(manifest, user_text)
    first = {e.path for e in mentioned}
    candidates = [
        *mentioned,
        *(e for e in files if e.path not in first and e.type in STRUCTURED and e.readable),
        *(e for e in files if e.path not in first and e.type not in STRUCTURED and e.readable),
    ]
    for index, entry in enumerate(candidates):
        made = _file_section(folder, entry, limits, room()) if room() >= 300 else None
        if made is None:
            left = len(candidates) - index
            marker = (
                f"[truncated: {left} more files have maps or content not shown here; "
                "call get_file_map or read_file]"
            )
            parts.append(marker)
            used += len(marker)
            notes.append(f"files: {left} not shown")
            break
        section, note = made
        if note:
            notes.append(f"{entry.path}: {note}")
        parts.append(section)
        used += len(section)
    system = "\n\n".join(parts)
    window = _window(transcript, user_text, limits.messages)
    return Prompt(
        system,
        (Message("system", system), *window),
        manifest,
        tuple(notes),
    )


#: room kept for a [truncated: ...] marker after a cut section
_MARKER_ROOM = 200


def _file_section(
    folder: Path, entry: FileEntry, limits: Limits, room: int
) -> tuple[str, str] | None:
    """The section of one file, at most ``room`` characters (None: it does not fit)."""
    made = map_of(folder, entry)
    title = f"### {shown_path(entry.path)} ({entry.type}, {entry.size} bytes)"
    if made.error is not None:
        section = f"{title}\n{made.render()}"
        return (section, "") if len(section) <= room else None
    if made.inline is not None:
        fence = _fence(made.inline)
        head = title
        if made.lines and entry.type in TABULAR:  # the table's reading first, then its text
            head += "\n" + "\n".join(made.lines)
        budget = min(limits.file_chars, room - _MARKER_ROOM) - len(head) - 2 * len(fence) - 40
        if budget >= 100:
            body, note = clip(
                made.inline.rstrip("\n"),
                chars=budget,
                lines=limits.file_lines,
                hint=f'read_file path="{shown_path(entry.path)}" start_line=N reads on',
            )
            label = "whole content" if note is None else "content (cut)"
            return f"{head}\n{label}:\n{fence}\n{body}\n{fence}", note or ""
    head = f"{title}: map"
    budget = min(limits.file_chars, room - _MARKER_ROOM) - len(head) - 1
    if budget < 100:
        return None
    body, note = clip(
        made.render(),
        chars=budget,
        lines=limits.file_lines,
        hint=f'get_file_map path="{shown_path(entry.path)}" shows it all',
    )
    return f"{head}\n{body}", note or ""
