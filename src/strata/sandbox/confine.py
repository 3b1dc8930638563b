"""Confinement: a command run in the real workspace, allowed to write only what its profile says.

The Draft's sandbox (:mod:`strata.sandbox.bwrap`) shows a copy; confinement
runs a command for an agent where it is, in Published, so that the policy's
promise holds even when the command classifier errs. Three profiles:

``read-only``
    the whole file system read-only (the host's ``/`` bound read-only, every
    mount below it too): an editor's own write feature, ``git -c
    core.pager=…``, ``… | base64 -d | sh`` cannot change a file;
``workspace-write``
    the same, with the workspace bound read-write; its repository (``.strata``,
    or a store kept elsewhere with ``init --store``) is masked by an empty
    read-only folder, so neither ``cd .strata`` nor a symlink into it reaches
    the policy or the ledger, and a symlink to a file outside the workspace
    leads to a read-only file;
``full``
    no confinement at all (only the user's configuration may choose it).

In the first two, ``/tmp`` and ``/run`` are private and empty (thrown away
when the command ends: nothing written there is left on the host, and no
host socket is reachable), ``/proc`` and ``/dev`` are the sandbox's own,
every namespace is unshared (the network too unless ``network``), every
capability dropped, and the command runs in a session of its own (no
terminal to push keystrokes into). Killing bubblewrap kills every process
of the command (its PID namespace ends with it).

This module knows nothing of policies: callers give it the profile.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.errors import SandboxPolicyError

__all__ = ["CONFINED", "PROFILES_ORDER", "Confinement", "confined_command", "stricter"]

#: the profiles, least permissive first
PROFILES_ORDER: tuple[str, ...] = ("read-only", "workspace-write", "full")
#: the profiles that confine (all but ``full``)
CONFINED = frozenset({"read-only", "workspace-write"})


@dataclass(frozen=True)
class Confinement:
    """What a command run for an agent may do: its profile's writes, and the network or not."""

    profile: str = "workspace-write"
    network: bool = False

    @property
    def confined(self) -> bool:
        """False only for ``full``: the command runs as it is."""
        return self.profile in CONFINED

    def describe(self) -> str:
        """One line: what the command may write and reach."""
        if not self.confined:
            return "full: not confined"
        writes = "nothing" if self.profile == "read-only" else "the workspace (not .strata)"
        return f"{self.profile}: writes {writes}; network {'allowed' if self.network else 'denied'}"

    def to_json(self) -> dict[str, Any]:
        """The confinement as JSON."""
        return {"profile": self.profile, "network": self.network, "confined": self.confined}


def stricter(a: str, b: str) -> str:
    """The stricter of two profiles."""
    return min(a, b, key=PROFILES_ORDER.index)


def confined_command(
    argv: Sequence[str],
    *,
    confinement: Confinement,
    workspace: Path,
    cwd: Path,
    repository: Path | None = None,
    new_session: bool = True,
) -> list[str]:
    """``argv`` wrapped so that it runs with ``confinement`` in ``workspace`` (from ``cwd``).

    ``repository`` is the workspace's repository folder (masked).
    ``new_session`` off: the command stays in the caller's process group
    (for a caller that runs it in a session of its own and kills that group
    on a time-out); on, it gets a session of its own (no terminal). ``full``
    returns ``argv`` as it is. Raises
    :class:`~strata.errors.SandboxUnavailable` when bubblewrap cannot run here
    (the command must not run unconfined) and
    :class:`~strata.errors.SandboxPolicyError` for a workspace that cannot be
    confined (``/``, a system folder).
    """
    if not argv:
        raise SandboxPolicyError("no command to run confined")
    if not confinement.confined:
        return list(argv)
    root = Path(os.path.realpath(workspace))
    where = Path(os.path.realpath(cwd))
    if not where.is_relative_to(root):
        raise SandboxPolicyError(f"the folder {cwd} is outside the workspace {workspace}")
    masks = [root / ".strata"]
    if repository is not None:
        masks.append(Path(os.path.realpath(repository)))
    # (bubblewrap's module, loaded for a command that runs confined: a file tool's call is
    # judged without it)
    from strata.sandbox.bwrap import confinement_prefix

    prefix = confinement_prefix(
        root,
        writable=confinement.profile == "workspace-write",
        network=confinement.network,
        masks=masks,
        cwd=where,
        new_session=new_session,
    )
    return [*prefix, "--", *argv]
