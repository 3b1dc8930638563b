"""The tool gateway: risk classification, the command policy, approvals and ``terminal_exec``.

Public entry points (names kept stable for ``strata mcp`` and ``strata hook``):

* :func:`classify` ``(command: str | Sequence[str], *, workspace: Path, cwd=None)
  -> RiskDecision`` — the risk class (``low``/``medium``/``high``) of a shell
  string (parsed with bashlex) or an argv, with the part and rule that decided
  (:mod:`strata.gateway.classify`).
* :func:`load_policy` ``(config: Mapping | None, *, workspace, profile=None,
  origin="config.toml") -> Policy`` — a profile plus ordered prefix rules from
  a ``[gateway]`` table, every rule's examples checked;
  :func:`policy_for` ``(core, *, profile=None) -> Policy`` reads it from a
  repository's ``config.toml`` (:mod:`strata.gateway.policy`).
* :meth:`Policy.decide` ``(command, *, cwd=None) -> PolicyDecision`` —
  ``decision`` (``allow``/``prompt``/``forbid``), ``risk``, ``reason``,
  ``rule`` (the rule's name, or None when the profile decided).
* :class:`ApprovalRequest`, :class:`ApprovalDecision`, :data:`Approver`
  ``= Callable[[ApprovalRequest], ApprovalDecision]`` and the routes
  :func:`terminal_approver`, :func:`callback_approver`, :func:`approve_all`,
  :func:`deny_all`; :func:`ask` calls an approver safely
  (:mod:`strata.gateway.approval`).
* :class:`Gateway` ``(core, *, policy=None, profile=None, approver=None,
  author=None, max_steps=50)`` with ``.decide(...)`` and ``.exec(command, *,
  timeout_s, max_output, cwd, env) -> ExecResult``; :func:`terminal_exec`
  ``(core, command, *, policy=None, profile=None, approver=None, …) ->
  ExecResult`` is the one-call form (:mod:`strata.gateway.exec`).
  :func:`record_decision` ``(core, command, *, outcome, reason, by,
  decision=None, tool, cwd, author) -> str`` records the gate's answer to a
  call that runs elsewhere (an agent's hook refused it, or handed it to the
  agent's own prompt), as record-only events ``strata undo`` steps over.
  ``Repository.exec(...)`` and ``Repository.gateway(...)`` are the facade's.
* :func:`decide` ``(policy, call: Call, *, repository=None) -> GatewayDecision``
  — the gateway's one decision, asked by every front end (hooks, MCP,
  ``exec``, the host): ``allow``/``ask``/``refuse``, why, and the
  :class:`~strata.sandbox.confine.Confinement` the call runs under; the
  classifier runs under a time limit (:mod:`strata.gateway.decision`).
* :func:`run_capability` ``(core, kind, args, *, gateway=None) -> dict`` —
  the capability registry: ``terminal_exec``, ``docx``, ``excel``
  (:mod:`strata.gateway.capabilities`).

Errors: :class:`~strata.errors.CommandForbidden` (``command_forbidden``),
:class:`~strata.errors.ApprovalDenied` (``approval_denied``),
:class:`~strata.errors.WorkspaceRequired` (``workspace_required``),
:class:`~strata.errors.PolicyInvalid`, :class:`~strata.errors.UnsupportedCapability`;
each has a ``code``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata.gateway.approval import (
        ApprovalDecision,
        ApprovalQueue,
        ApprovalRequest,
        Approver,
        PendingApproval,
        approve_all,
        ask,
        callback_approver,
        deny_all,
        queued_approver,
        state_summary,
        terminal_approver,
    )
    from strata.gateway.capabilities import CAPABILITIES, run_capability
    from strata.gateway.classify import RISKS, Finding, Part, Risk, RiskDecision, classify
    from strata.gateway.decision import Call, GatewayDecision, decide
    from strata.gateway.exec import (
        ExecResult,
        Gateway,
        policy_for,
        record_decision,
        terminal_exec,
    )
    from strata.gateway.policy import (
        DECISIONS,
        PROFILES,
        Decision,
        Policy,
        PolicyDecision,
        Rule,
        load_policy,
    )

#: where each public name lives: a submodule is imported when one of its names is first used
#: (an agent's hook judging an Edit loads the policy and the decision, not the shell
#: classifier, the approval routes or the executor)
_HOME = {
    "ApprovalDecision": "strata.gateway.approval",
    "ApprovalQueue": "strata.gateway.approval",
    "ApprovalRequest": "strata.gateway.approval",
    "Approver": "strata.gateway.approval",
    "CAPABILITIES": "strata.gateway.capabilities",
    "Call": "strata.gateway.decision",
    "DECISIONS": "strata.gateway.policy",
    "Decision": "strata.gateway.policy",
    "ExecResult": "strata.gateway.exec",
    "Finding": "strata.gateway.classify",
    "Gateway": "strata.gateway.exec",
    "GatewayDecision": "strata.gateway.decision",
    "PROFILES": "strata.gateway.policy",
    "Part": "strata.gateway.classify",
    "PendingApproval": "strata.gateway.approval",
    "Policy": "strata.gateway.policy",
    "PolicyDecision": "strata.gateway.policy",
    "RISKS": "strata.gateway.classify",
    "Risk": "strata.gateway.classify",
    "RiskDecision": "strata.gateway.classify",
    "Rule": "strata.gateway.policy",
    "approve_all": "strata.gateway.approval",
    "ask": "strata.gateway.approval",
    "callback_approver": "strata.gateway.approval",
    "classify": "strata.gateway.classify",
    "decide": "strata.gateway.decision",
    "deny_all": "strata.gateway.approval",
    "load_policy": "strata.gateway.policy",
    "policy_for": "strata.gateway.exec",
    "queued_approver": "strata.gateway.approval",
    "record_decision": "strata.gateway.exec",
    "run_capability": "strata.gateway.capabilities",
    "state_summary": "strata.gateway.approval",
    "terminal_approver": "strata.gateway.approval",
    "terminal_exec": "strata.gateway.exec",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its submodule on first use (PEP 562)."""
    import importlib

    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'strata.gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


__all__ = [
    "CAPABILITIES",
    "DECISIONS",
    "PROFILES",
    "RISKS",
    "ApprovalDecision",
    "ApprovalQueue",
    "ApprovalRequest",
    "Approver",
    "Call",
    "Decision",
    "ExecResult",
    "Finding",
    "Gateway",
    "GatewayDecision",
    "Part",
    "PendingApproval",
    "Policy",
    "PolicyDecision",
    "Risk",
    "RiskDecision",
    "Rule",
    "approve_all",
    "ask",
    "callback_approver",
    "classify",
    "decide",
    "deny_all",
    "load_policy",
    "policy_for",
    "queued_approver",
    "record_decision",
    "run_capability",
    "state_summary",
    "terminal_approver",
    "terminal_exec",
]
