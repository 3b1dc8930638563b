"""The Workshop's context items: the situation, Agent Skills and the format style skills.

Seed 000's "Prompt Assembly" puts the active context items of the workspace in
every model call, after the file manifest and before the conversation. They
live in the repository's ``context/`` folder (never in the workspace: a
Draft's edits cannot reach them)::

    REPO/context/situation.md                    the situation: the project's state
    REPO/context/skills/NAME/SKILL.md            an Agent Skill (front matter: name, description)
    REPO/context/skills/NAME/references/...      files its SKILL.md names, sent with it
    REPO/context/skills/document-style/SKILL.md  the Document Style skill (the house style)

:func:`plan_context` chooses what a turn sends, in this order (the
**merge order**: an earlier item is the last one cut when the prompt's
budget runs out, and where two disagree the text says which wins):

1. the **situation context** (``Situation context``: seed 000's name);
2. the skills the message **names** (``$NAME``, or a hyphenated name as it
   is written: ``house-rules``), in the order named;
3. the **format style skills**: when the workspace holds, or the message
   asks for, ``.docx``, ``.pptx`` or ``.xlsx`` files (:func:`formats_of`),
   the bundled generic style skill of each format (``docx-style``,
   ``pptx-style``, ``xlsx-style``; a skill of the same name in
   ``context/skills`` replaces the bundled one). The Document Style skill,
   when there is one, is **merged** into each as one skill: the generic
   rules, then the house style's sections that apply to that format (a
   section whose heading names only other formats is left out), which win
   where the two differ. When no format applies, the Document Style skill
   is sent on its own;
4. the other skills **by relevance** to the message (:func:`relevance`: the
   words of the message found in the skill's name and description), at most
   :data:`MAX_RELEVANT`;
5. ``Skills available``: one line (name: description) per skill not sent.

Each item is ``(title, text)``; a skill's text is its ``SKILL.md`` body
followed by the files it references (``references/summary.md``...). The
prompt assembly (:func:`strata.workshop.context.build_prompt`, within the
model's budget: :mod:`strata.workshop.fit`) cuts or leaves out whatever does
not fit, last items first, and names the cut in the answer's ``context_notes``.

**The fallback notice.** What could not be used is said, never silently
dropped: :attr:`ContextPlan.notices` holds one line per problem (a skill
whose ``SKILL.md`` is invalid, a ``$NAME`` that names no skill, a referenced
file that is missing, a Document Style that could not be merged, in which
case the generic style skill is sent, a bundled style skill that could not
be loaded, in which case the Document Style is sent on its own); the Workshop
adds one per context item cut or left out to fit, and records them all as
a non-blocking ``context_notice`` system event before the turn's answer.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from strata.workshop.context import Manifest

#: the repository's folder of context items
CONTEXT_FOLDER = "context"
SITUATION_FILE = "situation.md"
SKILLS_FOLDER = "skills"
SKILL_FILE = "SKILL.md"
#: the Document Style skill's name
DOCUMENT_STYLE = "document-style"
#: the formats that have a style skill, in the order their skills are sent
STYLE_FORMATS: tuple[str, ...] = ("docx", "pptx", "xlsx")
#: skills sent for their relevance alone (named ones are always sent)
MAX_RELEVANT = 3
#: bytes of one SKILL.md, reference or situation read
MAX_FILE_BYTES = 64 * 1024
#: referenced files sent with one skill
MAX_REFERENCES = 8
#: skill folders read
MAX_SKILLS = 200
#: characters of a merged style skill (past it the merge fails: the generic skill is sent)
MAX_MERGED_CHARS = 24_000

SITUATION_TITLE = "Situation context"
INDEX_TITLE = "Skills available"

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_ASKED = re.compile(r"(?<![\w$])\$([a-z][a-z0-9-]{0,63})(?![\w-])")
_LINKED = re.compile(r"\]\(([^)\s#]+)\)|`([^`\s]+)`|(?<![\w/.-])(references/[^\s)`'\"]+)")
#: the words that name each format, in a request (a file to produce) or a style heading
_FORMAT_WORDS = {
    "docx": re.compile(r"\b(?:docx|word (?:documents?|files?|docs?))\b"),
    "pptx": re.compile(r"\b(?:pptx|powerpoint|slides?|(?:slide )?decks?|presentations?)\b"),
    "xlsx": re.compile(r"\b(?:xlsx|excel|spreadsheets?|workbooks?|sheets?)\b"),
}
#: words too common to tell one skill from another
_COMMON = (
    "the and for with what this that from into about please can could would should you "
    "your our are was were has have had not but all any how who why when where which will "
    "make use using file files one two some more most also its them they their then than"
)
_STOP = frozenset(_COMMON.split())


#: libyaml's safe loader when PyYAML was built with it (ten times faster), else PyYAML's own
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SkillInvalid(ValueError):
    """A skill folder whose ``SKILL.md`` cannot be used (the message says why)."""


@dataclass(frozen=True)
class Skill:
    """One Agent Skill: its front matter, its body and the files it references."""

    name: str
    description: str
    body: str
    #: (relative path, text) of each file the body references, in the order named
    references: tuple[tuple[str, str], ...] = ()
    #: ``repository`` (context/skills) or ``bundled`` (shipped with Strata)
    source: str = "repository"

    @property
    def title(self) -> str:
        """The skill's context item title."""
        return f"Skill: {self.name}"

    def text(self) -> str:
        """The body, then each reference under a ``### Reference: PATH`` heading."""
        parts = [self.body.strip()]
        for path, text in self.references:
            parts.append(f"### Reference: {path}\n{text.strip()}")
        return "\n\n".join(p for p in parts if p)


@dataclass(frozen=True)
class ContextPlan:
    """What a turn sends besides the files: the items in merge order and what went wrong."""

    items: tuple[tuple[str, str], ...]
    #: one line per source missing or not usable (the fallback notice)
    notices: tuple[str, ...] = ()
    #: the names of the skills sent in full (style skills as ``docx-style``...)
    skills: tuple[str, ...] = ()
    #: the Office formats the turn is about (:func:`formats_of`): their style tools are offered
    formats: tuple[str, ...] = ()


def context_folder(repo: Path) -> Path:
    """The context folder of the repository folder ``repo``."""
    return repo / CONTEXT_FOLDER


def _read_text(path: Path, what: str) -> str:
    """A regular file's text (UTF-8, at most :data:`MAX_FILE_BYTES`); never follows a symlink."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise SkillInvalid(f"{what} is missing") from None
    except OSError as exc:
        raise SkillInvalid(f"{what} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SkillInvalid(f"{what} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise SkillInvalid(f"{what} is {st.st_size} bytes, past the {MAX_FILE_BYTES} read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SkillInvalid(f"{what} cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SkillInvalid(f"{what} is past the {MAX_FILE_BYTES} bytes read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillInvalid(f"{what} is not UTF-8 text") from None


def parse_skill(text: str, *, folder_name: str | None = None) -> tuple[str, str, str]:
    """``SKILL.md``'s (name, description, body); :class:`SkillInvalid` when it is not one.

    The front matter is YAML between two ``---`` lines; ``name`` (lowercase
    letters, digits and hyphens, at most 64, the folder's name) and
    ``description`` (at most 1,024 characters) are required.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillInvalid("SKILL.md has no front matter (a first line '---')")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SkillInvalid("SKILL.md's front matter has no closing '---'") from None
    try:
        meta = yaml.load("\n".join(lines[1:end]), Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise SkillInvalid(f"SKILL.md's front matter is not YAML{where}") from None
    if not isinstance(meta, dict):
        raise SkillInvalid("SKILL.md's front matter is not a mapping of name and description")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or len(name) > 64 or not _NAME.fullmatch(name):
        raise SkillInvalid("its name is not 1-64 lowercase letters, digits and hyphens")
    if folder_name is not None and name != folder_name:
        raise SkillInvalid(f"its name {name!r} is not its folder's name {folder_name!r}")
    if not isinstance(description, str) or not description.strip() or len(description) > 1024:
        raise SkillInvalid("its description is missing, empty or past 1,024 characters")
    return name, " ".join(description.split()), "\n".join(lines[end + 1 :]).strip()


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def read_skill(folder: Path) -> tuple[Skill, list[str]]:
    """The skill in ``folder`` and a notice per reference that cannot be sent.

    :class:`SkillInvalid` when its ``SKILL.md`` is missing or invalid.
    """
    text = _read_text(folder / SKILL_FILE, SKILL_FILE)
    name, description, body = parse_skill(text, folder_name=folder.name)
    references: list[tuple[str, str]] = []
    problems: list[str] = []
    seen: set[str] = set()
    for match in _LINKED.finditer(body):
        ref = next(g for g in match.groups() if g)
        if ref in seen or "://" in ref or ref.startswith(("/", "..")) or "/../" in ref:
            continue
        if not (ref.startswith("references/") or _is_file(folder / ref)):
            continue
        seen.add(ref)
        if len(references) >= MAX_REFERENCES:
            problems.append(f"skill {name}: {ref} not sent (at most {MAX_REFERENCES} references)")
            continue
        try:
            references.append((ref, _read_text(folder / ref, ref)))
        except SkillInvalid as exc:
            problems.append(f"skill {name}: {exc}")
    return Skill(name, description, body, tuple(references)), problems


def load_skills(folder: Path) -> tuple[dict[str, Skill], list[str]]:
    """The skills of a ``skills`` folder by name, and a notice per one that cannot be used."""
    skills: dict[str, Skill] = {}
    problems: list[str] = []
    try:
        entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return skills, problems
    except OSError as exc:
        problems.append(f"no skill was read: {folder.name} cannot be listed ({exc.strerror})")
        return skills, problems
    for path in entries[:MAX_SKILLS]:
        try:
            if path.is_symlink() or not path.is_dir():
                continue
        except OSError:
            continue
        try:
            skill, notes = read_skill(path)
        except SkillInvalid as exc:
            problems.append(f"skill {path.name} not used: {exc}")
            continue
        skills[skill.name] = skill
        problems.extend(notes)
    if len(entries) > MAX_SKILLS:
        problems.append(f"only the first {MAX_SKILLS} skill folders were read")
    return skills, problems


@functools.lru_cache(maxsize=8)
def bundled_style(kind: str) -> Skill:
    """Strata's generic style skill of ``kind`` (``docx``, ``pptx``, ``xlsx``)."""
    name = f"{kind}-style"
    try:
        text = (
            resources.files("strata.workshop")
            .joinpath("style_skills", name, SKILL_FILE)
            .read_text(encoding="utf-8")
        )
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillInvalid(f"it cannot be read ({exc})") from None
    found, description, body = parse_skill(text, folder_name=name)
    return Skill(found, description, body, source="bundled")


def _words(text: str) -> set[str]:
    out = set()
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if len(word) < 3 or word in _STOP:
            continue
        out.add(word[:-1] if len(word) > 4 and word.endswith("s") else word)
    return out


def relevance(skill: Skill, request: str) -> int:
    """How relevant ``skill`` is to ``request``: its name's words twice, its description's once."""
    asked = _words(request)
    return 2 * len(asked & _words(skill.name.replace("-", " "))) + len(
        asked & _words(skill.description)
    )


def named_in(request: str, names: set[str]) -> tuple[list[str], list[str]]:
    """The skills ``request`` names (``$NAME`` or the name as a word) and the ``$NAME`` unknown."""
    lowered = request.lower()
    found: list[tuple[int, str]] = []
    missing: list[str] = []
    for asked in _ASKED.finditer(lowered):
        if asked.group(1) in names:
            found.append((asked.start(), asked.group(1)))
        elif asked.group(1) not in missing:
            missing.append(asked.group(1))
    for name in names:
        written = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", lowered)
        if written is not None and "-" in name:
            found.append((written.start(), name))
    order: list[str] = []
    for _, name in sorted(found):
        if name not in order:
            order.append(name)
    return order, missing


def formats_of(manifest: Manifest, request: str) -> list[str]:
    """The style formats a turn is about: those the workspace holds or the request asks for."""
    held = {entry.type for entry in manifest.files}
    lowered = request.lower()
    return [k for k in STYLE_FORMATS if k in held or _FORMAT_WORDS[k].search(lowered)]


def merge_style(generic: Skill, house: Skill, kind: str) -> str:
    """The generic style skill of ``kind`` with the house style's sections that apply to it.

    A house-style section (a ``#``/``##`` heading and what follows it) whose
    heading names only other formats is left out. :class:`SkillInvalid` when
    the merged text is past :data:`MAX_MERGED_CHARS`.
    """
    kept: list[str] = []
    section: list[str] = []

    def close() -> None:
        if section and _applies(section[0], kind):
            kept.append("\n".join(section).strip())
        section.clear()

    for line in house.text().splitlines():
        if re.match(r"#{1,2} ", line):
            close()
        section.append(line)
    close()
    house_text = "\n\n".join(k for k in kept if k)
    merged = (
        f"{generic.text()}\n\n"
        f"## House style (Document Style: where it differs from the rules above, it wins)\n"
        f"{house_text or '(no section of the Document Style applies to ' + kind + ' files)'}"
    )
    if len(merged) > MAX_MERGED_CHARS:
        raise SkillInvalid(
            f"the merged skill would be {len(merged)} characters, past {MAX_MERGED_CHARS}"
        )
    return merged


def _applies(first_line: str, kind: str) -> bool:
    if not re.match(r"#{1,2} ", first_line):
        return True  # the text before the first heading applies to every format
    heading = first_line.lower()
    named = {k for k, words in _FORMAT_WORDS.items() if words.search(heading)}
    return not named or kind in named


def read_situation(folder: Path) -> str | None:
    """The situation's text (None when there is none or it is empty); SkillInvalid when unusable."""
    path = folder / SITUATION_FILE
    try:
        path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SkillInvalid(f"{SITUATION_FILE} cannot be read ({exc.strerror or exc})") from None
    text = _read_text(path, SITUATION_FILE).strip()
    return text or None


def plan_context(folder: Path, request: str, manifest: Manifest) -> ContextPlan:
    """The context items of a turn on ``manifest`` for ``request`` (see the module's docstring).

    ``folder`` is the repository's context folder (:func:`context_folder`).
    """
    items: list[tuple[str, str]] = []
    notices: list[str] = []
    sent: list[str] = []
    try:
        situation = read_situation(folder)
    except SkillInvalid as exc:
        situation = None
        notices.append(f"the situation was not used: {exc}")
    if situation is not None:
        items.append((SITUATION_TITLE, situation))
    skills, problems = load_skills(folder / SKILLS_FOLDER)
    notices.extend(problems)
    house = skills.get(DOCUMENT_STYLE)
    house_broken = any(p.startswith(f"skill {DOCUMENT_STYLE} not used") for p in problems)

    named, missing = named_in(request, set(skills))
    for name in missing:
        known = ", ".join(sorted(skills)) or "none"
        notices.append(f"no skill is named {name!r} (skills: {known})")
    for name in named:
        if name == DOCUMENT_STYLE:
            continue  # sent with the style skills
        items.append((skills[name].title, skills[name].text()))
        sent.append(name)

    style_sent = False
    formats = formats_of(manifest, request)
    for kind in formats:
        name = f"{kind}-style"
        if name in sent:
            style_sent = True
            continue
        generic = skills.get(name)
        if generic is None:
            try:
                generic = bundled_style(kind)
            except SkillInvalid as exc:
                notices.append(
                    f"the bundled {kind} style skill could not be loaded ({exc})"
                    + (": the Document Style is sent on its own" if house is not None else "")
                )
                continue
        title = f"Style skill: {kind}"
        text = generic.text()
        if house is not None:
            try:
                text = merge_style(generic, house, kind)
                title += f" ({name} + {DOCUMENT_STYLE})"
                sent.append(DOCUMENT_STYLE)
            except SkillInvalid as exc:
                notices.append(
                    f"the Document Style could not be merged into the {kind} style skill "
                    f"({exc}): the generic {kind} style is used"
                )
        elif house_broken:
            notices.append(
                f"the Document Style could not be merged into the {kind} style skill (its "
                f"SKILL.md is not valid): the generic {kind} style is used"
            )
        items.append((title, text))
        sent.append(name)
        style_sent = True
    if house is not None and not style_sent:
        items.append((house.title, house.text()))
        sent.append(DOCUMENT_STYLE)

    ranked = sorted(
        ((relevance(s, request), s.name) for s in skills.values() if s.name not in sent),
        key=lambda pair: (-pair[0], pair[1]),
    )
    for score, name in ranked[:MAX_RELEVANT]:
        if score >= 2:
            items.append((skills[name].title, skills[name].text()))
            sent.append(name)
    rest = [s for s in skills.values() if s.name not in sent]
    if rest:
        lines = [f"- {s.name}: {s.description}" for s in rest]
        lines.append("(not sent with this message; the user sends one with $NAME)")
        items.append((INDEX_TITLE, "\n".join(lines)))
    return ContextPlan(
        tuple(items),
        tuple(dict.fromkeys(notices)),
        tuple(dict.fromkeys(sent)),
        tuple(formats),
    )


def cut_notices(notes: Sequence[str], titles: Sequence[str]) -> list[str]:
    """A notice per context item of ``titles`` that the prompt's ``notes`` say was cut.

    The ``Skills available`` index is no source of its own: its cut is only a note.
    """
    out = []
    for title in titles:
        if title == INDEX_TITLE:
            continue
        prefix = f"context {title}: "
        for note in notes:
            if not note.startswith(prefix):
                continue
            what = note[len(prefix) :]
            if what == "left out":
                out.append(f"{title} was left out: the prompt's budget is spent")
            else:
                out.append(f"{title} was cut to fit the prompt ({what} not sent)")
    return out
