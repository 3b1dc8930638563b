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
