"""``strata hook install``: each agent's configuration, with Strata's hooks merged in.

Every command written names the ``strata`` program by its absolute path (the
one of the environment Strata is installed in): after a virtual environment's
install, a bare ``strata`` is not on the agent's ``PATH``, and a hook that
cannot start does not block anything.

- Claude Code: ``.claude/settings.local.json`` in the workspace (your own,
  not shared with the project; ``--shared`` writes ``.claude/settings.json``)
  gets PreToolUse, PostToolUse, UserPromptSubmit and Stop entries running
  ``STRATA hook claude-code`` (other keys, and other hooks, are kept as they are).
- Codex CLI (0.124 and later): the project's ``.codex/hooks.json`` (or with
  ``--user`` ``$CODEX_HOME/hooks.json``, ``~/.codex/hooks.json``) gets a
  PreToolUse, a PermissionRequest and a PostToolUse entry running ``STRATA
  hook codex`` for its ``Bash`` and ``apply_patch`` tools, in Claude Code's
  format. An older Codex (see :func:`codex_version`) gets
  ``notify = [STRATA, "hook", "codex"]`` in ``~/.codex/config.toml`` instead
  (Codex runs it after every turn, the turn's JSON as the last argument).
- Aider: ``.aider.conf.yml`` in the workspace gets ``auto-commits: false`` (Strata
  records instead of a commit per edit), ``auto-lint: true`` and
  ``lint-cmd: STRATA hook aider`` (Aider runs it with the edited files' names).

Each install is idempotent: a second one finds its entries and changes
nothing; an entry an earlier install wrote with another path to ``strata``
(a bare ``strata``, another environment) is replaced, not doubled. A
configuration file goes into a folder that exists: only the
agent's own folder at its default place (``.claude/`` or ``.codex/`` in the
workspace, ``~/.codex/``) is made when missing; any other missing folder is refused,
since a mistyped ``--config`` path would otherwise get a file no agent reads.
An entry that would replace something the user set (another Codex
``notify``, another Aider ``lint-cmd``) is refused, naming it, with nothing
written. :func:`plan` computes the change without writing; :meth:`Change.apply`
writes it atomically.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.errors import UsageError

AGENTS = ("claude-code", "codex", "aider")

CLAUDE_PRE_MATCHER = "Bash|Edit|MultiEdit|Write|NotebookEdit"
CLAUDE_POST_MATCHER = "Bash|Edit|MultiEdit|Write|NotebookEdit"
#: each hook Strata installs for Claude Code: its event and its matcher (None: none)
CLAUDE_EVENTS: tuple[tuple[str, str | None], ...] = (
    ("PreToolUse", CLAUDE_PRE_MATCHER),
    ("PostToolUse", CLAUDE_POST_MATCHER),
    ("UserPromptSubmit", None),
    ("Stop", None),
)
#: Codex's tools as its hooks name them: its shell tool (shell, shell_command, exec_command
#: alike) is Bash, its file tool apply_patch
CODEX_MATCHER = "Bash|apply_patch"
#: each hook Strata installs for Codex: its event and its matcher
CODEX_EVENTS: tuple[tuple[str, str | None], ...] = (
    ("PreToolUse", CODEX_MATCHER),
    ("PermissionRequest", CODEX_MATCHER),
    ("PostToolUse", CODEX_MATCHER),
    ("UserPromptSubmit", None),
    ("Stop", None),
)
#: the first Codex CLI that runs lifecycle hooks (hooks.json); an older one gets ``notify``
CODEX_HOOKS_SINCE = (0, 124, 0)
#: the names the ``strata`` program goes by (the native client, the Python launcher)
PROGRAM_NAMES = ("strata", "strata-py")


def claude_command(program: str, ask_studio: float | None = None) -> str:
    """The command Claude Code runs for Strata's hooks."""
    return f"{shlex.quote(program)} hook claude-code{_studio_words(ask_studio)}"


def codex_command(program: str, ask_studio: float | None = None) -> str:
    """The command Codex runs for Strata's lifecycle hooks."""
    return f"{shlex.quote(program)} hook codex{_studio_words(ask_studio)}"


def _studio_words(ask_studio: float | None) -> str:
    return "" if ask_studio is None else f" --ask-studio {ask_studio:g}"


#: what an agent may wait for a hook beyond the studio's time to answer (seconds): the
#: hook's own work before and after the wait
HOOK_MARGIN_S = 30


def hook_timeout(ask_studio: float | None) -> int | None:
    """The hook ``timeout`` (seconds) for waiting up to ``ask_studio``; None: the agent's own.

    Claude Code gives a hook 60 seconds by default and Codex 600: a hook
    killed while it waits would neither refuse nor allow as Strata decided.
    """
    return None if ask_studio is None else math.ceil(ask_studio) + HOOK_MARGIN_S


def codex_notify(program: str) -> list[str]:
    """Codex's ``notify`` program and its arguments."""
    return [program, "hook", "codex"]


def aider_lint(program: str) -> str:
    """Aider's lint command."""
    return f"{shlex.quote(program)} hook aider"


def _is_ours(command: object, rest: list[str]) -> bool:
    """Whether ``command`` (a string or an argument list) runs ``strata REST...``."""
    if isinstance(command, str):
        try:
            words = shlex.split(command)
        except ValueError:
            return False
    elif isinstance(command, list) and all(isinstance(w, str) for w in command):
        words = list(command)
    else:
        return False
    if len(words) == len(rest) + 3 and words[-2] == "--ask-studio":
        words = words[:-2]  # an install with --ask-studio SECONDS
    return (
        len(words) == len(rest) + 1
        and os.path.basename(words[0]) in PROGRAM_NAMES
        and words[1:] == rest
    )


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


def _set_command(groups: list[Any], command: str, agent: str, timeout: int | None) -> bool:
    """Point every Strata hook of ``agent`` among ``groups`` at ``command``; False when none.

    Its ``timeout`` is set to ``timeout``, or dropped (the agent's default) when None.
    """
    found = False
    for group in groups:
        hooks = group.get("hooks") if isinstance(group, dict) else None
        for hook in hooks if isinstance(hooks, list) else ():
            if isinstance(hook, dict) and _is_ours(hook.get("command"), ["hook", agent]):
                hook["command"] = command
                if timeout is None:
                    hook.pop("timeout", None)
                else:
                    hook["timeout"] = timeout
                found = True
    return found


def claude_code(path: Path, program: str, ask_studio: float | None = None) -> Change:
    """Claude Code's settings with Strata's hooks: before and after each call, each prompt."""
    return _merge_hooks(
        "claude-code",
        path,
        claude_command(program, ask_studio),
        CLAUDE_EVENTS,
        hook_timeout(ask_studio),
    )


def codex_hooks(path: Path, program: str, ask_studio: float | None = None) -> Change:
    """Codex's hooks.json with PreToolUse, PermissionRequest and PostToolUse running Strata.

    Codex reads ``hooks.json`` beside each configuration layer (the user's
    ``$CODEX_HOME``, a project's ``.codex/``) in Claude Code's format.
    """
    return _merge_hooks(
        "codex", path, codex_command(program, ask_studio), CODEX_EVENTS, hook_timeout(ask_studio)
    )


def _merge_hooks(
    agent: str,
    path: Path,
    command: str,
    events: tuple[tuple[str, str | None], ...],
    timeout: int | None = None,
) -> Change:
    """The JSON hooks file at ``path`` (Claude Code's format) with ``events`` running ``command``.

    Each of ``events`` is an event and its matcher (None: an event without
    one). Other keys and other hooks are kept; an entry of an earlier install
    (another path to strata) is pointed at ``command`` rather than doubled.
    """
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
    for event, matcher in events:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f"'hooks.{event}' in {path} is not a list")
        if not _set_command(groups, command, agent, timeout):
            hook: dict[str, Any] = {"type": "command", "command": command}
            if timeout is not None:
                hook["timeout"] = timeout
            entry: dict[str, Any] = {"hooks": [hook]}
            groups.append({"matcher": matcher, **entry} if matcher else entry)
    after = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    if before is not None and json.loads(before or "{}") == settings:
        after = before  # already there: the file is left byte for byte
    return Change(agent, path, before, after)


# -- Codex CLI ------------------------------------------------------------------------------


def codex_version(program: str | None = None) -> tuple[int, int, int] | None:
    """The version of the Codex CLI on ``PATH`` (``codex --version``); None when none answers."""
    import shutil
    import subprocess

    found = program or shutil.which("codex")
    if found is None:
        return None
    try:
        proc = subprocess.run(
            [found, "--version"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", proc.stdout)
    if proc.returncode != 0 or match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def codex_notify_installed(config: Path) -> bool:
    """Whether Codex's ``config`` (its config.toml) runs ``strata hook codex`` as ``notify``."""
    try:
        notify = tomllib.loads(config.read_text(encoding="utf-8")).get("notify")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return _is_ours(notify, ["hook", "codex"])


def codex(path: Path, program: str) -> Change:
    """Codex's config.toml with ``notify`` running ``strata hook codex`` (a Codex without hooks)."""
    before = _read(path)
    text = before or ""
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid TOML ({exc})",
            hint="fix it by hand first: Strata does not rewrite a file it cannot read",
        ) from None
    notify = codex_notify(program)
    line = f"notify = {json.dumps(notify)}\n"
    if "notify" in config:
        if config["notify"] == notify:
            return Change("codex", path, before, text)
        found = re.compile(r"^notify\s*=.*$", re.MULTILINE)
        if _is_ours(config["notify"], ["hook", "codex"]) and len(found.findall(text)) == 1:
            # an earlier install's, with another path to strata: pointed at this one
            after = found.sub(lambda _: line.rstrip("\n"), text)
            if tomllib.loads(after).get("notify") == notify:
                return Change("codex", path, before, after)
        raise ConfigError(
            f"{path} already sets notify = {json.dumps(config['notify'])}",
            hint=f"Codex runs one notify program: replace it with "
            f"notify = {json.dumps(notify)} by hand, or call 'strata hook codex' from it",
        )
    # a top-level key must come before the first [table]: it goes first
    after = "# strata: a snapshot after every Codex turn ('strata hook install codex')\n" + line
    if text:
        after += "\n" + text
    assert tomllib.loads(after).get("notify") == notify
    return Change("codex", path, before, after)


# -- Aider ----------------------------------------------------------------------------------


def _aider_keys(program: str) -> list[tuple[str, str, str]]:
    """Each key Strata sets, its value, and whether another value set by the user may go."""
    return [
        ("auto-commits", "false", "replace"),
        ("auto-lint", "true", "replace"),
        ("lint-cmd", json.dumps(aider_lint(program)), "refuse"),
    ]


def aider(path: Path, program: str) -> Change:
    """Aider's ``.aider.conf.yml`` with auto-commits off and ``strata hook aider`` as linter."""
    import yaml

    keys = _aider_keys(program)
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
    for key, value, on_other in keys:
        wanted = yaml.safe_load(value)
        have = config.get(key, None)
        if key in config and (have == wanted or have == [wanted]):
            continue
        earlier = key == "lint-cmd" and _is_ours(have, ["hook", "aider"])
        if key in config and on_other == "refuse" and not earlier:
            raise ConfigError(
                f"{path} already sets {key}: {json.dumps(have)}",
                hint=f"add '{wanted}' to it by hand (Aider runs every lint command)",
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
    if any(check.get(k) != yaml.safe_load(v) for k, v, _ in keys):
        raise ConfigError(f"cannot merge Strata's settings into {path}", hint="edit it by hand")
    return Change("aider", path, before, after if after != text else text)


PLANNERS: dict[str, Callable[[Path, str], Change]] = {
    "claude-code": claude_code,
    "codex": codex_hooks,
    "codex-notify": codex,  # a Codex older than its hooks (CODEX_HOOKS_SINCE)
    "aider": aider,
}


def default_path(
    agent: str,
    *,
    workspace: Path,
    home: Path,
    codex_home: str | None = None,
    shared: bool = False,
    user: bool = False,
) -> Path:
    """Where ``agent`` reads the configuration Strata writes.

    Claude Code: the workspace's ``.claude/settings.local.json`` (the user's
    own), or with ``shared`` its ``.claude/settings.json`` (the project's,
    committed). Codex's hooks: the workspace's ``.codex/hooks.json``, or
    with ``user`` the user's ``hooks.json`` in Codex's home. Codex's home is
    ``$CODEX_HOME`` when set (pass its value as ``codex_home``), ``~/.codex``
    otherwise; ``codex-notify`` (a Codex without hooks) is its ``config.toml``.
    """
    if agent == "claude-code":
        return workspace / ".claude" / ("settings.json" if shared else "settings.local.json")
    if agent in ("codex", "codex-notify"):
        if agent == "codex" and not user:
            return workspace / ".codex" / "hooks.json"
        base = Path(codex_home).expanduser().absolute() if codex_home else home / ".codex"
        return base / ("hooks.json" if agent == "codex" else "config.toml")
    if agent == "aider":
        return workspace / ".aider.conf.yml"
    raise UsageError(f"unknown agent {agent!r}; use one of {', '.join(AGENTS)}")


def plan(
    agent: str,
    path: Path,
    *,
    program: str,
    make_folder: bool = False,
    ask_studio: float | None = None,
) -> Change:
    """What installing Strata's hooks for ``agent`` into ``path`` changes (nothing written).

    ``program`` is the absolute path of the ``strata`` command the hooks run.
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
    if ask_studio is not None:
        if agent == "claude-code":
            return claude_code(path, program, ask_studio)
        if agent == "codex":
            return codex_hooks(path, program, ask_studio)
        raise UsageError("--ask-studio is for the hooks of claude-code and codex")
    return PLANNERS[agent](path, program)
