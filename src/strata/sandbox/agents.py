"""What a coding agent needs in the sandbox: its configuration, its API hosts, its keys.

``strata run --draft --agent claude -- claude -p "…"`` gives the command, on
top of the usual sandbox:

* a **throwaway copy** of the agent's configuration from the user's home
  (``~/.claude`` and ``~/.claude.json``; ``~/.codex``; ``~/.aider*``), those
  that exist, in the sandbox's private home. The agent may write it (Claude
  Code rewrites ``~/.claude.json`` at every start and silently stops when it
  cannot), but the copy is dropped after the run: the host's files are never
  changed. Session logs and caches (``~/.claude/projects``,
  ``~/.codex/sessions`` …) are left out, so the copy stays small;
* the **network allow-list** of the agent's API hosts (:attr:`AgentPreset.hosts`);
* its **API key variables** (:attr:`AgentPreset.env_names`), those that are set.

This module knows nothing of Drafts: :func:`copy_agent_config` copies into a
folder the caller owns and removes.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from strata.errors import UsageError
from strata.sandbox.net import AllowedHost

__all__ = [
    "AGENTS",
    "AgentPreset",
    "agent_presets",
    "copy_agent_config",
    "private_home",
]


@dataclass(frozen=True)
class AgentPreset:
    """One agent's needs: the program, its configuration in the home folder, hosts, keys."""

    name: str
    program: str
    """The agent's command (whose install folder ``--agent`` exposes when the sandbox hides it)."""
    config: tuple[str, ...]
    """Names (``fnmatch`` patterns) in the user's home folder, copied when they exist."""
    skip: tuple[str, ...]
    """Sub-folders of a copied folder left out: session logs and caches, not configuration."""
    hosts: tuple[str, ...]
    """The API hosts the agent talks to (``--net allow=…`` when no ``--net`` is given)."""
    env_names: tuple[str, ...]
    """Variables passed in when set (API keys and endpoints)."""

    @property
    def allowed(self) -> tuple[AllowedHost, ...]:
        """:attr:`hosts` as allow-list entries."""
        return tuple(AllowedHost(host) for host in self.hosts)


#: The presets ``--agent`` knows, by name.
AGENTS: dict[str, AgentPreset] = {
    preset.name: preset
    for preset in (
        AgentPreset(
            name="claude",
            program="claude",
            config=(".claude", ".claude.json"),
            skip=("projects", "todos", "shell-snapshots", "statsig", "debug", "file-history"),
            hosts=("api.anthropic.com", "console.anthropic.com", "statsig.anthropic.com"),
            env_names=(
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_MODEL",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ),
        ),
        AgentPreset(
            name="codex",
            program="codex",
            config=(".codex",),
            skip=("sessions", "archived_sessions", "log"),
            hosts=("api.openai.com", "auth.openai.com", "chatgpt.com"),
            env_names=("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID"),
        ),
        AgentPreset(
            name="aider",
            program="aider",
            config=(".aider*",),
            skip=("caches",),
            hosts=("api.openai.com", "api.anthropic.com", "openrouter.ai"),
            env_names=(
                "OPENAI_API_KEY",
                "OPENAI_API_BASE",
                "ANTHROPIC_API_KEY",
                "OPENROUTER_API_KEY",
                "DEEPSEEK_API_KEY",
                "GEMINI_API_KEY",
            ),
        ),
    )
}


def agent_presets(names: Iterable[str]) -> list[AgentPreset]:
    """The presets named, in order, each once.

    Raises:
        UsageError: a name no preset has.

    """
    presets: list[AgentPreset] = []
    for name in names:
        preset = AGENTS.get(name.strip().lower())
        if preset is None:
            raise UsageError(
                f"unknown agent {name!r}; use one of {', '.join(AGENTS)}",
                hint="or expose its files with --bind-ro and its hosts with --net allow=…",
            )
        if preset not in presets:
            presets.append(preset)
    return presets


def copy_agent_config(
    presets: Sequence[AgentPreset], *, home: Path, into: Path
) -> list[tuple[Path, Path]]:
    """Copy the presets' configuration found in ``home`` into the folder ``into``.

    Returns (copy, path relative to the home folder) pairs, for binding each
    copy at its place in the sandbox's home. Symlinks are copied as symlinks
    (a link out of the home shows nothing in the sandbox); special files and
    unreadable entries are left out.
    """
    copies: list[tuple[Path, Path]] = []
    try:
        names = sorted(os.listdir(home))
    except OSError:
        return []
    for preset in presets:
        for pattern in preset.config:
            for name in names:
                if not fnmatch.fnmatchcase(name, pattern) or any(
                    r == Path(name) for _, r in copies
                ):
                    continue
                source, target = home / name, into / name
                try:
                    if source.is_symlink() or source.is_file():
                        shutil.copy2(source, target, follow_symlinks=False)
                    elif source.is_dir():
                        shutil.copytree(
                            source,
                            target,
                            symlinks=True,
                            ignore=_skipping(source, preset.skip),
                            ignore_dangling_symlinks=True,
                        )
                    else:
                        continue
                except (OSError, shutil.Error):
                    if not os.path.lexists(target):
                        continue  # unreadable: the agent sees it missing
                copies.append((target, Path(name)))
    return copies


def _skipping(top: Path, skip: Sequence[str]) -> Callable[[str, list[str]], set[str]]:
    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder) != top:
            return set()
        return {name for name in names if name in skip}

    return ignore


_HOME_PREFIX = "strata-agent-home-"


def private_home(*, folder: Path | None = None) -> Path:
    """Make the throwaway home folder for one run (mode 0700), named after this process.

    The caller removes it after the run. One left by a Strata that was killed
    (its process gone) holds copies of credentials: each such folder of this
    user is removed first. ``folder`` is where to make it (default: the
    system's temporary folder).
    """
    base = folder or Path(tempfile.gettempdir())
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if not name.startswith(_HOME_PREFIX):
            continue
        pid_text = name[len(_HOME_PREFIX) :].split("-", 1)[0]
        path = base / name
        try:
            if not pid_text.isdigit() or path.lstat().st_uid != os.geteuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)  # its Strata is gone
        except OSError:
            continue  # alive under another user, or not ours to judge
    return Path(tempfile.mkdtemp(prefix=f"{_HOME_PREFIX}{os.getpid()}-", dir=base))
