"""The workspace digest (seed 003): a task-agnostic summary of the workspace, reused by prompts.

- :mod:`strata.digest.scan`: the deterministic scan (README, commands,
  layout, languages, entry points) of a stored tree;
- :mod:`strata.digest.store`: the session slice, the overrides store, the
  key rule and the order session > override > placeholder;
- :mod:`strata.digest.optimize`: a model condenses the scan into the digest,
  recorded as a trace and replayable.

:class:`WorkspaceDigest` ties them to one repository (``Repository.digest()``
returns one), and :func:`digest_context_item` is the ``(title, text)`` item
the Workshop's prompt assembly includes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from strata.digest.scan import WorkspaceScan, scan_tree, scan_workspace
from strata.digest.store import (
    DEFAULT_KEY,
    DEFAULT_SESSION,
    DEFAULT_TAG,
    KEY_RULE,
    NAMESPACE,
    PLACEHOLDER,
    TITLE,
    DigestEntry,
    OverridesStore,
    Resolved,
    Scope,
    SessionDigests,
    normalize_key,
    prompt_key_for,
    resolve_digest,
)
from strata.errors import UsageError

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.digest.optimize import OptimizationResult
    from strata.ledger.events import Author
    from strata.providers.base import Provider

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_SESSION",
    "DEFAULT_TAG",
    "KEY_RULE",
    "PLACEHOLDER",
    "TITLE",
    "DigestEntry",
    "OptimizationResult",
    "OverridesStore",
    "Resolved",
    "Scope",
    "SessionDigests",
    "WorkspaceDigest",
    "WorkspaceScan",
    "digest_context_item",
    "normalize_key",
    "resolve_digest",
    "scan_tree",
    "scan_workspace",
]


@dataclass
class WorkspaceDigest:
    """One repository's digest: scan, show, set, clear, optimize.

    ``session`` names the session slice (``REPO/digest/sessions/``);
    ``overrides`` is the overrides store (None: overrides are neither read
    nor writable) and ``tag`` the tag read by :meth:`show` (None: no
    override is read).
    """

    core: Core
    session: str = DEFAULT_SESSION
    overrides: OverridesStore | None = None
    tag: str | None = None

    def __post_init__(self) -> None:
        self.session = normalize_key(self.session, what="session name")
        if self.tag is not None:
            self.tag = normalize_key(self.tag, what="tag")

    @property
    def sessions(self) -> SessionDigests:
        """The session slice."""
        return SessionDigests(self.core.layout.repo, self.session)

    @property
    def prompt_key(self) -> str:
        """The prompt key of this workspace in an overrides store."""
        return prompt_key_for(self.core.root)

    def scan(self) -> WorkspaceScan:
        """The deterministic scan of Published's files as they are now."""
        return scan_workspace(self.core)

    def show(self, key: str = DEFAULT_KEY) -> Resolved:
        """The digest a prompt gets: session, else override, else the placeholder (warned)."""
        return resolve_digest(
            self.sessions,
            key=key,
            overrides=self.overrides,
            prompt_key=self.prompt_key,
            tag=self.tag,
        )

    def _global(self, scope: Scope, tag: str | None) -> tuple[OverridesStore, str] | None:
        if scope is Scope.SESSION:
            return None
        from strata.digest.optimize import check_scope

        tag = normalize_key(tag, what="tag") if tag is not None else None
        check_scope(scope, self.overrides, tag)
        assert self.overrides is not None and tag is not None
        return self.overrides, tag

    def set(
        self,
        text: str,
        *,
        key: str = DEFAULT_KEY,
        scope: Scope = Scope.SESSION,
        tag: str | None = None,
    ) -> Path:
        """Store ``text`` as the digest: in the session slice, or (GLOBAL) as the tag's override.

        Returns the file written. The text is stored exactly as given.
        """
        key = normalize_key(key)
        if not text.strip():
            raise UsageError("the digest text is empty; use 'strata digest clear' to remove one")
        target = self._global(scope, tag)
        if target is not None:
            store, tag = target
            return store.set_override(
                NAMESPACE, self.prompt_key, tag, key, text, workspace=str(self.core.root)
            )
        sessions = self.sessions
        with self.core.writing(finish_journals=False):  # one read-modify-write at a time
            sessions.set(DigestEntry(key, text, "set", self.core.now_ms()))
        return sessions.path

    def clear(
        self, *, key: str = DEFAULT_KEY, scope: Scope = Scope.SESSION, tag: str | None = None
    ) -> int:
        """Remove the session's digests of ``key`` (or, GLOBAL, the tag's override); how many."""
        key = normalize_key(key)
        target = self._global(scope, tag)
        if target is not None:
            store, tag = target
            return int(store.delete(NAMESPACE, self.prompt_key, tag, key))
        with self.core.writing(finish_journals=False):
            return self.sessions.clear(key)

    def optimize(
        self,
        provider: Provider,
        *,
        key: str = DEFAULT_KEY,
        scope: Scope = Scope.SESSION,
        tag: str | None = None,
        focus: str | None = None,
        author: Author | None = None,
        secrets: tuple[str, ...] = (),
    ) -> OptimizationResult:
        """Ask ``provider`` for the digest (see :func:`strata.digest.optimize.optimize`)."""
        from strata.digest.optimize import optimize

        return optimize(
            self.core,
            provider,
            key=key,
            session=self.session,
            scope=scope,
            overrides=self.overrides,
            tag=tag if tag is not None else (self.tag if scope is Scope.GLOBAL else None),
            focus=focus,
            author=author,
            secrets=secrets,
        )


def __getattr__(name: str) -> object:
    # the optimizer (and the providers it needs) is loaded when used: 'digest scan' stays light
    if name == "OptimizationResult":
        from strata.digest.optimize import OptimizationResult

        return OptimizationResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def digest_context_item(
    core: Core,
    *,
    session: str = DEFAULT_SESSION,
    key: str = DEFAULT_KEY,
    overrides: Path | OverridesStore | None = None,
    tag: str | None = None,
    placeholder: bool = True,
) -> tuple[str, str] | None:
    """The digest as a prompt context item ``(title, text)``, for the Workshop's assembly.

    The text is resolved session > override > placeholder (:func:`resolve_digest`).
    With ``placeholder=False``, None instead of the placeholder (a caller
    that would rather leave the section out).
    """
    store = OverridesStore(overrides) if isinstance(overrides, Path) else overrides
    # the placeholder in a prompt is the design, not a problem to warn about on every turn
    # (the warning is for 'strata digest show'); it is still in resolved.warnings
    quiet = logging.getLogger("strata.digest")
    was = quiet.disabled
    quiet.disabled = True
    try:
        resolved = WorkspaceDigest(core, session, store, tag).show(key)
    finally:
        quiet.disabled = was
    if resolved.source == "placeholder" and not placeholder:
        return None
    return resolved.section()
