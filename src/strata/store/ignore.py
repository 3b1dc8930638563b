"""The one ignore definition of a repository.

Precedence, highest first:

1. ``.strata`` and ``.git`` anywhere, and the temporary files a restore
   writes (``.strata-tmp-*``, left behind only by a crash): always ignored,
   nothing can re-include them;
2. ``.strataignore`` and ``.gitignore`` files, with git's semantics (a file in a
   deeper folder wins over one in a shallower folder; in one folder
   ``.strataignore`` wins over ``.gitignore``; the last matching line of a file
   wins; ``!pattern`` re-includes; an ignored folder is not descended into);
3. extra patterns given for one run (they behave as a root ``.strataignore``
   placed below all ignore files);
4. the defaults from ``config.toml`` (``.venv``, ``node_modules``, ``__pycache__``).

Matching is done by pathspec's ``GitIgnoreSpec``. Rules are layered per
folder: :meth:`IgnoreRules.child` returns the rules that apply inside a
subfolder given the ignore files found there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from strata.store.objects import hash_bytes

if TYPE_CHECKING:
    import pathspec

ALWAYS_IGNORED = frozenset({".strata", ".git"})
#: temporary files of workspace writes start with this; a crash can leave one behind
TEMP_PREFIX = ".strata-tmp-"
IGNORE_FILES = (".gitignore", ".strataignore")  # lower precedence first
DEFAULT_PATTERNS = (".venv/", "node_modules/", "__pycache__/")

_SPECS: dict[str, tuple[pathspec.GitIgnoreSpec, pathspec.PathSpec[Any]]] = {}


def _spec(lines: Sequence[str]) -> tuple[pathspec.GitIgnoreSpec, pathspec.PathSpec[Any]]:
    """(spec for files, spec for folders) of one ignore file's lines.

    Files use pathspec's ``GitIgnoreSpec``. Folders use plain gitwildmatch with
    last-match-wins, which is git's rule for a folder itself: ``GitIgnoreSpec``
    ranks folder-only patterns below others there, so the ``*``, ``!*/``,
    ``!*.py`` whitelist idiom would drop every subfolder.
    """
    key = hash_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    spec = _SPECS.get(key)
    if spec is None:
        import pathspec

        spec = (
            pathspec.GitIgnoreSpec.from_lines(lines),
            pathspec.PathSpec.from_lines("gitignore", lines),
        )
        _SPECS[key] = spec
    return spec


class IgnoreRules:
    """The ignore rules that apply inside one folder of the workspace."""

    __slots__ = ("_layers", "_specs", "fingerprint")

    def __init__(self, layers: tuple[tuple[str, tuple[str, ...]], ...], fingerprint: str) -> None:
        # each layer: (folder prefix ending in "/", or "", pattern lines); lowest first
        self._layers = layers
        self._specs: list[tuple[pathspec.GitIgnoreSpec, pathspec.PathSpec[Any]] | None] = [
            None
        ] * len(layers)
        self.fingerprint = fingerprint

    @classmethod
    def root(
        cls, *, defaults: Sequence[str] = DEFAULT_PATTERNS, extra: Sequence[str] = ()
    ) -> IgnoreRules:
        """Rules at the workspace root before its ignore files are read."""
        layers: list[tuple[str, tuple[str, ...]]] = []
        if defaults:
            layers.append(("", tuple(defaults)))
        if extra:
            layers.append(("", tuple(extra)))
        fp = hash_bytes(repr(layers).encode("utf-8", "surrogateescape"))
        return cls(tuple(layers), fp)

    def child(self, prefix: str, files: Sequence[bytes]) -> IgnoreRules:
        """Rules inside folder ``prefix`` ("" for the root, else "a/b/") given its ignore files.

        ``files`` holds the contents of the folder's ignore files in the order of
        :data:`IGNORE_FILES` (missing files left out).
        """
        if not files:
            return self
        layers = list(self._layers)
        digest = [self.fingerprint, prefix]
        for content in files:
            lines = tuple(content.decode("utf-8", "surrogateescape").splitlines())
            layers.append((prefix, lines))
            digest.append(hash_bytes(content))
        return IgnoreRules(
            tuple(layers), hash_bytes("\0".join(digest).encode("utf-8", "surrogateescape"))
        )

    def is_ignored(self, path: str, *, is_dir: bool) -> bool:
        """True when the workspace path ``path`` is ignored."""
        name = path.rsplit("/", 1)[-1]
        if name in ALWAYS_IGNORED or name.startswith(TEMP_PREFIX):
            return True
        for index in range(len(self._layers) - 1, -1, -1):
            prefix, lines = self._layers[index]
            if prefix and not path.startswith(prefix):
                continue
            spec = self._specs[index]
            if spec is None:
                spec = self._specs[index] = _spec(lines)
            rel = path[len(prefix) :]
            result = spec[1].check_file(rel + "/") if is_dir else spec[0].check_file(rel)
            if result.include is not None:
                return bool(result.include)
        return False

    def ignored_names(self, prefix: str, names: Sequence[tuple[str, bool]]) -> frozenset[str]:
        """Which of ``names`` (name, is_dir) inside folder ``prefix`` are ignored."""
        return frozenset(
            name for name, is_dir in names if self.is_ignored(prefix + name, is_dir=is_dir)
        )
