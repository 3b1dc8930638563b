"""The gateway's one decision: allow, ask or refuse a command or a tool call, and its confinement.

Every front end that lets an agent act asks :func:`decide`: the Claude Code
and Codex hooks (``strata hook``), the MCP server (``exec``, ``draft_run``),
``strata exec`` and the host's terminal tool (through
:meth:`strata.gateway.exec.Gateway.exec`). It applies one set of rules, the
workspace's :class:`~strata.gateway.policy.Policy` (``[gateway]`` in
``config.toml``), and answers a :class:`GatewayDecision`: ``allow``, ``ask``
(a person must approve) or ``refuse``, why, and the
:class:`~strata.sandbox.confine.Confinement` the call runs under if it runs.
Front ends only translate the answer into their protocol (an exit code 2,
an MCP tool error, an approval question, a wrapped command line).

The judgement:

* a shell command is classified and judged by the policy
  (:meth:`Policy.decide`) under a time limit (:data:`CLASSIFY_TIMEOUT_S`):
  input the parser cannot judge in time is refused;
* a file tool's paths must lie inside the workspace, never in its
  repository (``.strata``, or a store kept elsewhere), judged as written
  and again with every symlink resolved;
* a call that asks to lift its own confinement (``draft_run`` with
  ``sandbox: none`` or ``net: allow``) is refused unless the configuration's
  profile is ``full`` (or, for the network, ``network = "allow"``).

Confinement comes from the configuration alone: a caller may ask for a
stricter profile (``--profile read-only``), never a looser one, so a tool
argument from a model cannot lift it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from strata.errors import PathError
from strata.gateway.policy import Policy, PolicyDecision
from strata.sandbox.confine import Confinement, stricter

Answer = Literal["allow", "ask", "refuse"]

#: the longest the command classifier may take; past it the command is refused
CLASSIFY_TIMEOUT_S = 2.0

#: what each policy decision is as an answer
_ANSWERS: dict[str, Answer] = {"allow": "allow", "prompt": "ask", "forbid": "refuse"}


@dataclass(frozen=True)
class Call:
    """What an agent asks to do: a shell ``command``, or a ``tool`` writing ``paths``."""

    tool: str = "shell"
    """``shell`` for a command; else the tool's own name (``Write``, ``apply_patch``…)."""
    command: str | tuple[str, ...] | None = None
    """The shell string or argv (a shell command, ``draft_run``'s argv)."""
    paths: tuple[str, ...] = ()
    """The paths a file tool writes, as given (relative to ``cwd``)."""
    cwd: Path | None = None
    """Where the call starts (default: the workspace)."""
    unconfined: bool = False
    """The call asks to run outside the sandbox (``draft_run``'s ``sandbox: none``)."""
    network: bool = False
    """The call asks for the network (``draft_run``'s ``net: allow``)."""


@dataclass(frozen=True)
class GatewayDecision:
    """The gateway's answer to one call: ``allow``, ``ask`` or ``refuse``, why, and how confined."""

    answer: Answer
    reason: str
    confinement: Confinement
    risk: str = "low"
    rule: str | None = None
    """The name of the ``[gateway]`` rule that decided (None: the profile, or a path check)."""
    tool: str = "shell"
    policy: PolicyDecision | None = field(default=None, compare=False)
    """The command policy's own decision, for a shell command it judged."""
    timed_out: bool = False
    """The classifier did not finish within its time limit (the call is refused)."""

    @property
    def allowed(self) -> bool:
        """True when the call goes ahead without asking."""
        return self.answer == "allow"

    def to_json(self) -> dict[str, Any]:
        """The decision as JSON (what is recorded with it)."""
        return {
            "answer": self.answer,
            "reason": self.reason,
            "risk": self.risk,
            "rule": self.rule,
            "tool": self.tool,
            "confinement": self.confinement.to_json(),
            "timed_out": self.timed_out,
        }


def confinement_of(policy: Policy) -> Confinement:
    """The confinement a policy's calls run under: the configured profile, or a stricter one."""
    profile = stricter(policy.profile, policy.configured or policy.profile)
    return Confinement(profile, policy.network or profile == "full")


def decide(
    policy: Policy,
    call: Call,
    *,
    repository: Path | None = None,
    timeout_s: float = CLASSIFY_TIMEOUT_S,
) -> GatewayDecision:
    """The gateway's decision on ``call`` under ``policy`` (``repository``: the store's folder).

    Never raises for what the call holds: a command the classifier cannot
    judge in ``timeout_s`` seconds, or at all, is refused with the reason.
    """
    confinement = confinement_of(policy)
    root = policy.workspace
    cwd = call.cwd if call.cwd is not None else root
    lift = None
    if call.unconfined and confinement.confined:
        lift = (
            "outside the sandbox: only the workspace's configuration may allow it "
            '([gateway] profile = "full")'
        )
    elif call.network and not confinement.network:
        lift = (
            "with the network: only the workspace's configuration may allow it "
            '([gateway] network = "allow", or profile = "full")'
        )
    elif call.tool == "draft_run" and confinement.profile == "read-only":
        lift = "under the read-only profile, which lets no command write (the Draft included)"
    if lift is not None:
        return GatewayDecision(
            "refuse", f"a tool call may not run {lift}", confinement, tool=call.tool
        )
    for target in call.paths:
        refusal = _path_refusal(call.tool, target, root=root, cwd=cwd, repository=repository)
        if refusal is not None:
            return GatewayDecision("refuse", refusal, confinement, "high", tool=call.tool)
    if call.command is None or call.paths or call.tool == "draft_run":
        # (the Draft's command runs in the Draft's sandbox: a copy, no network, no .strata)
        return GatewayDecision("allow", "", confinement, tool=call.tool)
    command = call.command if isinstance(call.command, str) else list(call.command)
    judged = _judge_in_time(policy, command, cwd, timeout_s)
    if isinstance(judged, tuple):
        why, late = judged
        return GatewayDecision("refuse", why, confinement, "high", tool=call.tool, timed_out=late)
    return GatewayDecision(
        _ANSWERS[judged.decision],
        judged.reason,
        confinement,
        judged.risk,
        judged.rule,
        call.tool,
        judged,
    )


class _Abandoned(BaseException):
    """Raised inside a classification that ran past its time limit, to end it."""


def _judge_in_time(
    policy: Policy, command: str | Sequence[str], cwd: Path, timeout_s: float
) -> PolicyDecision | tuple[str, bool]:
    """The policy's decision, or why there is none and whether it ran out of time.

    The classifier runs in a thread of its own; past ``timeout_s`` an
    exception is raised inside it (the parser is pure Python, so it stops at
    its next bytecode) and the answer is a refusal.
    """
    box: list[PolicyDecision | BaseException] = []

    def work() -> None:
        try:
            box.append(policy.decide(command, cwd=cwd))
        except _Abandoned:
            pass
        except Exception as exc:  # any failure to judge is a refusal
            box.append(exc)

    worker = threading.Thread(target=work, name="strata-classify", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        threading.Thread(target=_stop, args=(worker,), name="strata-classify-stop").start()
        why = f"the command could not be judged within {timeout_s:g} s, so it is refused"
        return why, True
    result = box[0] if box else RuntimeError("the classifier ended without an answer")
    if isinstance(result, BaseException):
        from strata.errors import StrataError

        why = result.message if isinstance(result, StrataError) else repr(result)
        return f"the command could not be judged ({why}), so it is refused", False
    return result


def _stop(worker: threading.Thread) -> None:
    """End ``worker``'s classification: :class:`_Abandoned` raised in it until it ends.

    An exception raised into a thread lands at its next bytecode, which may be
    inside a finalizer run by the garbage collector there (which swallows it,
    printing "Exception ignored"): so it is raised again every 50 ms, for at
    most 5 s, rather than once.
    """
    import ctypes

    for _ in range(100):
        if not worker.is_alive():
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(worker.ident or 0), ctypes.py_object(_Abandoned)
        )
        worker.join(0.05)


def _path_refusal(
    tool: str, target: str, *, root: Path, cwd: Path, repository: Path | None
) -> str | None:
    """Why ``tool`` may not write ``target``, or None: outside the workspace, or its repository.

    Judged as written and again with every symlink on the way resolved (the
    file itself included): a link inside the workspace to a file outside it,
    or into the repository, is refused as that file would be.
    """
    from strata.layout import MARKER
    from strata.sandbox.paths import workspace_relative

    outside = (
        f"strata: {tool} of {target} refused: it is outside the workspace {root}, "
        "where Strata records every change; write inside it"
    )
    ours = f"strata: {tool} of {target} refused: {MARKER} is Strata's own repository"
    try:
        rel = workspace_relative(target, cwd=cwd, root=root)
    except PathError:
        return outside
    if rel == MARKER or rel.startswith(MARKER + "/"):
        return ours
    real = Path(os.path.realpath(os.path.join(cwd, target)))
    real_root = Path(os.path.realpath(root))
    repos = [real_root / MARKER]
    if repository is not None:
        repos.append(Path(os.path.realpath(repository)))
    if any(real.is_relative_to(r) for r in repos):
        return ours
    return None if real.is_relative_to(real_root) else outside
