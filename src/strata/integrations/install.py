"""``strata hook install``: each agent's configuration, with Strata's hooks merged in.

- Claude Code: ``.claude/settings.json`` in the workspace gets a PreToolUse and
  a PostToolUse entry running ``strata hook claude-code`` (other keys, and other
  hooks, are kept as they are).
- Codex CLI: ``~/.codex/config.toml`` gets ``notify = ["strata", "hook", "codex"]``
  (Codex runs it after every turn, the turn's JSON as the last argument).
- Aider: ``.aider.conf.yml`` in the workspace gets ``auto-commits: false`` (Strata
  records instead of a commit per edit), ``auto-lint: true`` and
  ``lint-cmd: strata hook aider`` (Aider runs it with the edited files' names).

Each install is idempotent: a second one finds its entries and changes
nothing. A configuration file goes into a folder that exists: only the
agent's own folder at its default place (``.claude/`` in the workspace,
``~/.codex/``) is made when missing; any other missing folder is refused,
since a mistyped ``--config`` path would otherwise get a file no agent reads.
An entry that would replace something the user set (another Codex
``notify``, another Aider ``lint-cmd``) is refused, naming it, with nothing
written. :func:`plan` computes the change without writing; :meth:`Change.apply`
writes it atomically.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.errors import UsageError

AGENTS = ("claude-code", "codex", "aider")

CLAUDE_COMMAND = "strata hook claude-code"
CLAUDE_PRE_MATCHER = "Bash|Edit|MultiEdit|Write|NotebookEdit"
CLAUDE_POST_MATCHER = "Bash|Edit|MultiEdit|Write|NotebookEdit"
CODEX_NOTIFY = ["strata", "hook", "codex"]
AIDER_LINT = "strata hook aider"


class ConfigError(UsageError):
    """An agent's configuration Strata cannot merge into without clobbering it."""


@dataclass
class Change:
    """The configuration file of one agent, before and after Strata's entries."""

    agent: str
    path: Path
    before: str | None
    """The file's text, None when it does not exist."""
    after: str

    @property
    def changed(self) -> bool:
        """Whether installing writes anything."""
        return self.before != self.after

    def diff(self) -> str:
        """The unified diff of the change (empty when nothing changes)."""
        if not self.changed:
            return ""
        lines = difflib.unified_diff(
            (self.before or "").splitlines(keepends=True),
            self.after.splitlines(keepends=True),
            fromfile=str(self.path) if self.before is not None else "/dev/null",
            tofile=str(self.path),
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def apply(self) -> None:
        """Write the new configuration (atomically; its folder made when :func:`plan` allowed)."""
        if not self.changed:
            return
        from strata.atomic import atomic_write

        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = self.path.stat().st_mode & 0o777 if self.path.exists() else 0o644
        atomic_write(self.path, self.after.encode("utf-8"), mode=mode)

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata hook install --json`` prints."""
        return {
            "agent": self.agent,
            "path": str(self.path),
            "changed": self.changed,
            "created": self.before is None and self.changed,
            "diff": self.diff(),
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


# -- Claude Code ----------------------------------------------------------------------------


def _has_command(groups: Any, command: str) -> bool:
    if not isinstance(groups, list):
        return False
    for group in groups:
        hooks = group.get("hooks") if isinstance(group, dict) else None
        for hook in hooks if isinstance(hooks, list) else ():
            if isinstance(hook, dict) and hook.get("command") == command:
                return True
    return False


def claude_code(path: Path) -> Change:
    """Claude Code's settings with a PreToolUse and a PostToolUse hook running Strata."""
    before = _read(path)
    settings: Any = {}
    if before is not None and before.strip():
        try:
            settings = json.loads(before)
        except ValueError as exc:
            raise ConfigError(
                f"{path} is not valid JSON ({exc.args[0]})",
                hint="fix it by hand first: Strata does not rewrite a file it cannot read",
            ) from None
    if not isinstance(settings, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError(f"'hooks' in {path} is not an object")
    for event, matcher in (
        ("PreToolUse", CLAUDE_PRE_MATCHER),
        ("PostToolUse", CLAUDE_POST_MATCHER),
    ):
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f"'hooks.{event}' in {path} is not a list")
        if not _has_command(groups, CLAUDE_COMMAND):
            groups.append(
                {"matcher": matcher, "hooks": [{"type": "command", "command": CLAUDE_COMMAND}]}
            )
    after = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    if before is not None and json.loads(before or "{}") == settings:
        after = before  # already there: the file is left byte for byte
    return Change("claude-code", path, before, after)


# -- Codex CLI ------------------------------------------------------------------------------


def codex(path: Path) -> Change:
    """Codex's config.toml with ``notify`` running ``strata hook codex``."""
    before = _read(path)
    text = before or ""
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid TOML ({exc})",
            hint="fix it by hand first: Strata does not rewrite a file it cannot read",
        ) from None
    if "notify" in config:
        if config["notify"] == CODEX_NOTIFY:
            return Change("codex", path, before, text)
        raise ConfigError(
            f"{path} already sets notify = {json.dumps(config['notify'])}",
            hint=f"Codex runs one notify program: replace it with "
            f"notify = {json.dumps(CODEX_NOTIFY)} by hand, or call 'strata hook codex' from it",
        )
    # a top-level key must come before the first [table]: it goes first
    line = f"notify = {json.dumps(CODEX_NOTIFY)}\n"
    after = "# strata: a snapshot after every Codex turn ('strata hook install codex')\n" + line
    if text:
        after += "\n" + text
    assert tomllib.loads(after).get("notify") == CODEX_NOTIFY
    return Change("codex", path, before, after)


# -- Aider ----------------------------------------------------------------------------------

_AIDER_KEYS: list[tuple[str, str, str]] = [
    # key, the value Strata needs, whether another value set by the user may be replaced
    ("auto-commits", "false", "replace"),
    ("auto-lint", "true", "replace"),
    ("lint-cmd", AIDER_LINT, "refuse"),
]


def aider(path: Path) -> Change:
    """Aider's ``.aider.conf.yml`` with auto-commits off and ``strata hook aider`` as linter."""
    import yaml

    before = _read(path)
    text = before or ""
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} does not hold a YAML mapping")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    added: list[str] = []
    for key, value, on_other in _AIDER_KEYS:
        wanted = yaml.safe_load(value)
        have = config.get(key, None)
        if key in config and (have == wanted or have == [wanted]):
            continue
        if key in config and on_other == "refuse":
            raise ConfigError(
                f"{path} already sets {key}: {json.dumps(have)}",
                hint=f"add '{AIDER_LINT}' to it by hand (Aider runs every lint command)",
            )
        pattern = re.compile(rf"^{re.escape(key)}\s*:")
        found = [i for i, ln in enumerate(lines) if pattern.match(ln)]
        if len(found) == 1:
            lines[found[0]] = f"{key}: {value}\n"
        else:
            added.append(f"{key}: {value}\n")
    if added:
        lines += ["# strata: record Aider's edits ('strata hook install aider')\n", *added]
    after = "".join(lines)
    check = yaml.safe_load(after) or {}
    if any(check.get(k) != yaml.safe_load(v) for k, v, _ in _AIDER_KEYS):
        raise ConfigError(f"cannot merge Strata's settings into {path}", hint="edit it by hand")
    return Change("aider", path, before, after if after != text else text)


PLANNERS: dict[str, Callable[[Path], Change]] = {
    "claude-code": claude_code,
    "codex": codex,
    "aider": aider,
}


def default_path(agent: str, *, workspace: Path, home: Path, codex_home: str | None = None) -> Path:
    """Where ``agent`` reads the configuration Strata writes.

    Codex reads ``$CODEX_HOME/config.toml`` when ``CODEX_HOME`` is set (pass
    its value as ``codex_home``), ``~/.codex/config.toml`` otherwise.
    """
    if agent == "claude-code":
        return workspace / ".claude" / "settings.json"
    if agent == "codex":
        if codex_home:
            return Path(codex_home).expanduser().absolute() / "config.toml"
        return home / ".codex" / "config.toml"
    if agent == "aider":
        return workspace / ".aider.conf.yml"
    raise UsageError(f"unknown agent {agent!r}; use one of {', '.join(AGENTS)}")


def plan(agent: str, path: Path, *, make_folder: bool = False) -> Change:
    """What installing Strata's hooks for ``agent`` into ``path`` changes (nothing written).

    ``path``'s folder must exist, unless ``make_folder`` (the agent's default
    place, see :func:`default_path`): a :class:`ConfigError` names it otherwise.
    """
    if agent not in PLANNERS:
        raise UsageError(f"unknown agent {agent!r}; use one of {', '.join(AGENTS)}")
    folder = path.parent
    if not make_folder and not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(
            f"cannot write {path}: the folder {folder} {what}",
            hint="check the --config path (no agent would read a file there), or make "
            "the folder first",
        )
    return PLANNERS[agent](path)
