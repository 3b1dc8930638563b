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

Matching is done by pathspec's ``GitIgnoreSpec``; bracket expressions
(``[a-z]``, ``[!...]``, ``[[:alpha:]]``, ``[z-a]``, ``[\\]]``) are read as git's
wildmatch reads them (:func:`_pattern`), since pathspec rejects or misreads
some that git accepts. A line git accepts but can never match (a lone ``!``,
a trailing lone ``\\``, an unterminated ``[``, a class that matches nothing)
matches nothing here too: an ignore file never stops a scan. The ignore files
themselves (``.gitignore``, ``.strataignore``) are never ignored, so no
pattern can hide a change to the rules. Rules are layered per
folder: :meth:`IgnoreRules.child` returns the rules that apply inside a
subfolder given the ignore files found there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from strata.atomic import TEMP_PREFIX
from strata.store.objects import hash_bytes

if TYPE_CHECKING:
    import pathspec

ALWAYS_IGNORED = frozenset({".strata", ".git"})
IGNORE_FILES = (".gitignore", ".strataignore")  # lower precedence first
DEFAULT_PATTERNS = (".venv/", "node_modules/", "__pycache__/")

#: bumped when the matching changes, so stat caches re-match their folders
RULES_VERSION = "2"

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
            pathspec.GitIgnoreSpec.from_lines(lines, _pattern),
            pathspec.PathSpec.from_lines(_pattern, lines),
        )
        _SPECS[key] = spec
    return spec


#: spec -> one regex matching where any of its patterns matches (None: not made)
_ANY: dict[int, tuple[object, re.Pattern[str] | None]] = {}
#: a named group of a pattern's regex (each pattern names its own: they clash when joined)
_NAMED_GROUP = re.compile(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>")


def _any_match(spec: pathspec.PathSpec[Any]) -> re.Pattern[str] | None:
    """A regex that finds a match wherever one of ``spec``'s patterns would.

    A spec decides nothing for a path none of its patterns matches, and
    most paths match none: one search of the patterns joined costs much
    less than asking each (the per-file cost of a first snapshot's walk).
    None where the patterns cannot be joined safely (then each is asked).
    """
    known = _ANY.get(id(spec))
    if known is not None and known[0] is spec:
        return known[1]
    parts = []
    joined: re.Pattern[str] | None = None
    try:
        for pattern in spec.patterns:
            regex = getattr(pattern, "regex", None)
            if getattr(pattern, "include", None) is None or regex is None:
                continue
            if not isinstance(regex.pattern, str) or regex.flags & ~re.UNICODE:
                raise ValueError("a pattern with flags of its own")
            if "(?P=" in regex.pattern:
                raise ValueError("a pattern that refers to a named group")
            parts.append("(?:" + _NAMED_GROUP.sub("(?:", regex.pattern) + ")")
        joined = re.compile("|".join(parts)) if parts else re.compile(r"(?!)")
    except (ValueError, re.error):
        joined = None
    _ANY[id(spec)] = (spec, joined)
    return joined


def _normalize(path: str) -> str:
    """The path as pathspec matches it (``normalize_file``)."""
    from pathspec.util import normalize_file

    return normalize_file(path)


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
        fp = hash_bytes(repr((RULES_VERSION, layers)).encode("utf-8", "surrogateescape"))
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
        if name in IGNORE_FILES and not is_dir:
            return False  # the rules themselves are always recorded (and rolled back)
        for index in range(len(self._layers) - 1, -1, -1):
            prefix, lines = self._layers[index]
            if prefix and not path.startswith(prefix):
                continue
            spec = self._specs[index]
            if spec is None:
                spec = self._specs[index] = _spec(lines)
            rel = path[len(prefix) :]
            which = 1 if is_dir else 0
            if is_dir:
                rel += "/"
            quick = _any_match(spec[which])
            if quick is not None and quick.search(_normalize(rel)) is None:
                continue  # no line of this layer matches: it decides nothing
            result = spec[which].check_file(rel)
            if result.include is not None:
                return bool(result.include)
        return False

    def ignored_names(self, prefix: str, names: Sequence[tuple[str, bool]]) -> frozenset[str]:
        """Which of ``names`` (name, is_dir) inside folder ``prefix`` are ignored."""
        return frozenset(
            name for name, is_dir in names if self.is_ignored(prefix + name, is_dir=is_dir)
        )


# -- git's bracket expressions ---------------------------------------------------------

#: stands for the i-th bracket expression of a line while pathspec translates the rest
_PLACEHOLDER = 0xF0000
_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "blank": " \t",
    "cntrl": "\x00-\x1f\x7f",
    "digit": "0-9",
    "graph": "\x21-\x7e",
    "lower": "a-z",
    "print": "\x20-\x7e",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \t\n\r\x0b\x0c",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


class _NeverMatches(Exception):
    """A line git accepts that can match no path."""


def _char(c: str) -> str:
    return f"\\U{ord(c):08x}"


def _bracket(line: str, start: int) -> tuple[str, int]:
    """The regex of the bracket expression at ``line[start]`` (``[``) and the index after it.

    Follows git's ``wildmatch``: ``!`` or ``^`` negates; a ``]`` first is a
    member; ``\\`` escapes; ``a-z`` is a range (when reversed, only its first end); ``[:name:]``
    is a POSIX class; a ``/`` never matches. Raises :class:`_NeverMatches` for
    what git aborts on (no closing ``]``, an unknown class) or a set of nothing.
    """
    i = start + 1
    negated = i < len(line) and line[i] in "!^"
    if negated:
        i += 1
    items: list[str] = []
    prev: str | None = None
    first = True
    while True:
        if i >= len(line):
            raise _NeverMatches
        c = line[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\":
            i += 1
            if i >= len(line):
                raise _NeverMatches
            c = line[i]
            items.append(_char(c))
            prev = c
        elif c == "-" and prev is not None and i + 1 < len(line) and line[i + 1] != "]":
            i += 1
            hi = line[i]
            if hi == "\\":
                i += 1
                if i >= len(line):
                    raise _NeverMatches
                hi = line[i]
            if prev <= hi:  # the low end is a member already: "[z-a]" matches "z"
                items.append(f"{_char(prev)}-{_char(hi)}")
            prev = None
        elif c == "[" and i + 1 < len(line) and line[i + 1] == ":":
            end = line.find("]", i + 2)
            if end < 0:
                raise _NeverMatches
            if end - (i + 2) < 1 or line[end - 1] != ":":
                items.append(_char("["))  # no ":]": a plain "["
                prev = "["
            else:
                name = line[i + 2 : end - 1]
                if name not in _CLASSES:
                    raise _NeverMatches
                items.append(_CLASSES[name])
                prev = None
                i = end
        else:
            items.append(_char(c))
            prev = c
        i += 1
    if negated:
        return "[^/" + "".join(items) + "]", i
    if not items:
        raise _NeverMatches
    return "(?!/)[" + "".join(items) + "]", i


def _pattern(line: str) -> pathspec.patterns.gitignore.spec.GitIgnoreSpecPattern:
    """One line of an ignore file as git reads it (see the module's docstring)."""
    from pathspec.patterns.gitignore import GitIgnorePatternError
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    null = GitIgnoreSpecPattern(None)
    if line.startswith("#"):
        return null
    classes: list[str] = []
    text: list[str] = []
    i = 0
    try:
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                text.append(line[i : i + 2])
                i += 2
            elif c == "*":
                run = len(line[i:]) - len(line[i:].lstrip("*"))
                text.append("**" if run > 1 else "*")  # to wildmatch, "***" is "**"
                i += run
            elif c == "[":
                regex, i = _bracket(line, i)
                text.append(chr(_PLACEHOLDER + len(classes)))
                classes.append(regex)
            else:
                text.append(c)
                i += 1
        raw, include = GitIgnoreSpecPattern.pattern_to_regex("".join(text))
    except (_NeverMatches, GitIgnorePatternError, ValueError):
        return null
    if raw is None or include is None:
        return null
    for index, regex in enumerate(classes):
        raw = raw.replace(re.escape(chr(_PLACEHOLDER + index)), regex)
    return GitIgnoreSpecPattern(re.compile(raw), include)
