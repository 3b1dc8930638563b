"""Where digests live, and which one a prompt gets: session > override > placeholder.

Seed 003's three sources, mapped onto Strata's storage:

- the **session slice**: ``REPO/digest/sessions/<session>.json`` in the
  repository's private folder (``.strata/`` or the ``init --store`` folder).
  It holds, per section key, the digests recorded in that session, newest
  last; the newest is the session's digest (:class:`SessionDigests`);
- the **overrides store**: a folder outside any one workspace (the CLI's
  default is ``$XDG_CONFIG_HOME/strata/overrides``, else
  ``~/.config/strata/overrides``) holding one file per
  ``(namespace, prompt key, tag, section key)``, written and read exactly as
  given: no template is expanded, so ``${x}``, ``{{x}}`` and ``$$`` stay as
  stored (:class:`OverridesStore`);
- the **placeholder**: :data:`PLACEHOLDER`, with a warning.

:func:`resolve_digest` applies the order: a session digest wins even when an
override exists (it is the fresher observation); an override is used only
when the session has none; otherwise the placeholder, and the warning.

Every write is atomic (:func:`strata.atomic.atomic_write`: temporary file,
fsync, rename, fsync of the folder), so a reader sees the old digest or the
new one, never a mix. A session file is read, changed and written back:
:class:`~strata.digest.WorkspaceDigest` does that under the repository's
write lock, so two writers never lose each other's entry.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import blake3

from strata.atomic import atomic_write
from strata.errors import DigestError, UsageError
from strata.schemas import fields_json

log = logging.getLogger("strata.digest")
log.addHandler(logging.NullHandler())  # a library logs; the application decides what is shown

#: the section key a digest has unless the caller chooses another
DEFAULT_KEY = "workspace-digest"
#: the markdown heading the section renders
TITLE = "Workspace Digest"
#: the session a caller that names none uses
DEFAULT_SESSION = "default"
#: the overrides tag a reader that names none uses
DEFAULT_TAG = "latest"
#: the namespace of Strata's prompts in an overrides store
NAMESPACE = "strata"
#: what the section renders when neither the session nor an override has a digest
PLACEHOLDER = (
    "No workspace digest is available yet. Before starting further tasks, explore the "
    "workspace: read the README and docs, note the layout, the build and test commands "
    "and the tooling defaults, then continue with what you learned."
)
#: the digests a session keeps per key (older ones are dropped)
SESSION_HISTORY = 20

KEY_RULE = "^[a-z0-9][a-z0-9._-]{0,63}$"
_KEY = re.compile(KEY_RULE)
_SESSION_FORMAT = "strata-digest-session"
_OVERRIDE_FORMAT = "strata-digest-override"
_FORMAT_VERSION = 1


class Scope(StrEnum):
    """Where an optimized or set digest is kept (seed 003's ``OptimizationScope``)."""

    SESSION = "session"
    GLOBAL = "global"


def normalize_key(key: str, *, what: str = "section key") -> str:
    """``key`` trimmed and lower-cased; :class:`UsageError` unless it then matches the key rule."""
    norm = key.strip().lower()
    if not _KEY.fullmatch(norm):
        raise UsageError(
            f"{what} {key!r} is not valid: it must match {KEY_RULE} (a lower-case letter or "
            "digit, then up to 63 of a-z 0-9 . _ -)"
        )
    return norm


def prompt_key_for(workspace: Path) -> str:
    """The prompt key of a workspace's prompts in an overrides store.

    ``workspace-`` and 16 hex digits of the BLAKE3 of the workspace's absolute
    path: one workspace's override never answers for another's.
    """
    digest = blake3.blake3(str(workspace.resolve()).encode()).hexdigest()[:16]
    return f"workspace-{digest}"


def _load(path: Path, fmt: str) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DigestError(f"{path} cannot be read: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        raise DigestError(f"{path} is not a {fmt} file")
    if raw.get("version") != _FORMAT_VERSION:
        raise DigestError(f"{path} has format version {raw.get('version')!r}, which is unknown")
    return raw


def _dump(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    atomic_write(path, data)


@dataclass(frozen=True)
class DigestEntry:
    """One recorded digest: its key, its text, where it came from, when."""

    key: str
    text: str
    origin: str  # set | optimize
    ts_ms: int
    event_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON."""
        return fields_json(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DigestEntry:
        """Parse :meth:`to_json`'s output."""
        return cls(
            str(raw["key"]),
            str(raw["text"]),
            str(raw.get("origin") or "set"),
            int(raw.get("ts_ms") or 0),
            raw.get("event_id"),
        )


class SessionDigests:
    """A session's workspace-digest slice: ``REPO/digest/sessions/<session>.json``."""

    def __init__(self, repo_folder: Path, session: str = DEFAULT_SESSION) -> None:
        self.session = normalize_key(session, what="session name")
        self.path = repo_folder / "digest" / "sessions" / f"{self.session}.json"

    def entries(self) -> list[DigestEntry]:
        """Every digest the session holds, oldest first."""
        raw = _load(self.path, _SESSION_FORMAT)
        if raw is None:
            return []
        try:
            return [DigestEntry.from_json(e) for e in raw.get("entries") or ()]
        except (KeyError, TypeError, ValueError):
            raise DigestError(f"{self.path} holds a malformed entry") from None

    def latest(self, key: str = DEFAULT_KEY) -> DigestEntry | None:
        """The newest digest of ``key`` (None: the session has none)."""
        key = normalize_key(key)
        found = [e for e in self.entries() if e.key == key]
        return found[-1] if found else None

    def set(self, entry: DigestEntry) -> None:
        """Record ``entry`` as the session's newest digest of its key."""
        kept = [*self.entries(), entry]
        same = [e for e in kept if e.key == entry.key]
        drop = {id(e) for e in same[:-SESSION_HISTORY]}
        self._write([e for e in kept if id(e) not in drop])

    def clear(self, key: str = DEFAULT_KEY) -> int:
        """Forget every digest of ``key``; how many were forgotten."""
        key = normalize_key(key)
        entries = self.entries()
        kept = [e for e in entries if e.key != key]
        if len(kept) != len(entries):
            self._write(kept)
        return len(entries) - len(kept)

    def _write(self, entries: list[DigestEntry]) -> None:
        _dump(
            self.path,
            {
                "format": _SESSION_FORMAT,
                "version": _FORMAT_VERSION,
                "session": self.session,
                "entries": [e.to_json() for e in entries],
            },
        )


@dataclass(frozen=True)
class Override:
    """An override as stored: its text exactly, and what it belongs to."""

    namespace: str
    prompt_key: str
    tag: str
    key: str
    text: str
    workspace: str = ""


class OverridesStore:
    """A prompt overrides store: one JSON file per (namespace, prompt key, tag, section key).

    ``ROOT/<namespace>/<prompt key>/<tag>/<section key>.json``; the text is
    stored and returned byte for byte.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, namespace: str, prompt_key: str, tag: str, key: str) -> Path:
        """Where an override lives (each part checked against the key rule)."""
        parts = (
            normalize_key(namespace, what="namespace"),
            normalize_key(prompt_key, what="prompt key"),
            normalize_key(tag, what="tag"),
        )
        return self.root.joinpath(*parts, normalize_key(key) + ".json")

    def get(self, namespace: str, prompt_key: str, tag: str, key: str) -> Override | None:
        """The override, or None."""
        path = self.path(namespace, prompt_key, tag, key)
        raw = _load(path, _OVERRIDE_FORMAT)
        if raw is None:
            return None
        text = raw.get("text")
        if not isinstance(text, str):
            raise DigestError(f"{path} holds no text")
        return Override(
            namespace, prompt_key, tag, normalize_key(key), text, str(raw.get("workspace") or "")
        )

    def set_override(
        self,
        namespace: str,
        prompt_key: str,
        tag: str,
        key: str,
        text: str,
        *,
        workspace: str = "",
    ) -> Path:
        """Store ``text`` as the override (atomically); its file."""
        path = self.path(namespace, prompt_key, tag, key)
        _dump(
            path,
            {
                "format": _OVERRIDE_FORMAT,
                "version": _FORMAT_VERSION,
                "namespace": namespace,
                "prompt_key": prompt_key,
                "tag": tag,
                "key": normalize_key(key),
                "workspace": workspace,
                "text": text,
            },
        )
        return path

    def delete(self, namespace: str, prompt_key: str, tag: str, key: str) -> bool:
        """Remove the override; whether there was one."""
        path = self.path(namespace, prompt_key, tag, key)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True


@dataclass
class Resolved:
    """The digest a prompt gets, and where it came from."""

    key: str
    text: str
    source: str  # session | override | placeholder
    session: str
    tag: str | None
    entry: DigestEntry | None = None
    warnings: list[str] = field(default_factory=list)

    def section(self) -> tuple[str, str]:
        """The digest as a context item: (title, text)."""
        return TITLE, self.text

    def render(self) -> str:
        """The section as markdown: the heading, then the body."""
        return f"## {TITLE}\n\n{self.text.rstrip()}\n"

    def to_json(self) -> dict[str, Any]:
        """The resolution as JSON."""
        return {
            "key": self.key,
            "source": self.source,
            "session": self.session,
            "tag": self.tag,
            "text": self.text,
            "origin": self.entry.origin if self.entry else None,
            "event_id": self.entry.event_id if self.entry else None,
            "warnings": list(self.warnings),
        }


def resolve_digest(
    sessions: SessionDigests,
    *,
    key: str = DEFAULT_KEY,
    overrides: OverridesStore | None = None,
    prompt_key: str | None = None,
    tag: str | None = None,
) -> Resolved:
    """The digest of ``key``: the session's newest, else the override, else the placeholder.

    The override is looked up only when ``overrides``, ``prompt_key`` and
    ``tag`` are given. The placeholder comes with a warning, logged on the
    ``strata.digest`` logger and returned in :attr:`Resolved.warnings`.
    """
    key = normalize_key(key)
    entry = sessions.latest(key)
    if entry is not None:
        return Resolved(key, entry.text, "session", sessions.session, tag, entry)
    if overrides is not None and prompt_key is not None and tag is not None:
        found = overrides.get(NAMESPACE, prompt_key, tag, key)
        if found is not None:
            return Resolved(key, found.text, "override", sessions.session, tag)
    warning = (
        f"no workspace digest for key {key!r} (session {sessions.session!r}"
        + (f", tag {tag!r}" if tag is not None and overrides is not None else "")
        + "): the placeholder is shown; run 'strata digest optimize' or 'strata digest set'"
    )
    log.warning(warning)
    return Resolved(key, PLACEHOLDER, "placeholder", sessions.session, tag, warnings=[warning])
