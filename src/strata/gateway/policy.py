"""The command policy: a profile plus ordered prefix rules, from ``config.toml``'s ``[gateway]``.

A profile says what each risk class (:mod:`strata.gateway.classify`) gets:

================== ======= ======= =======
profile            low     medium  high
================== ======= ======= =======
``read-only``      allow   forbid  forbid
``workspace-write`` allow  prompt  prompt
``full``           allow   allow   prompt
================== ======= ======= =======

Rules come first, in order; the first rule whose pattern matches a simple
command decides it (first match wins), whatever its class. A pattern is a
prefix over argv tokens, each token a word or a list of alternatives, as in
Codex CLI's execpolicy::

    [gateway]
    profile = "workspace-write"
    network = "deny"   # "allow": confined commands may reach the network

    [[gateway.rules]]
    name = "git-read"
    pattern = ["git", ["status", "log", "diff"]]
    decision = "allow"
    match = ["git status", "git log --oneline"]
    not_match = ["git push", "git"]

    [[gateway.rules]]
    pattern = ["git", "push"]
    decision = "forbid"
    justification = "pushing is the human's job"

``match``/``not_match`` hold examples (shell words, or argv lists) that are
checked when the policy loads: an example under ``match`` that the rule's
pattern does not match, or one under ``not_match`` that it matches, refuses
the whole policy with an error naming the rule.

A command with several parts (``a && b``, ``a | b``, ``sh -c '…'``) is
decided part by part, and the strictest part decides: forbid over prompt
over allow. Input the shell parser cannot read has no parts and gets what
the profile gives ``high``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from strata.errors import PolicyInvalid

if TYPE_CHECKING:  # (the classifier is loaded when a command is classified, not for a path)
    from strata.gateway.classify import Finding, Part, RiskDecision

Decision = Literal["allow", "prompt", "forbid"]
DECISIONS: tuple[Decision, ...] = ("allow", "prompt", "forbid")
_STRICT = {"allow": 0, "prompt": 1, "forbid": 2}

#: findings no rule can allow past the profile: a write outside the workspace, or into
#: Strata's own records (an agent rewriting its policy or its ledger)
NOT_BY_RULE = frozenset({"write-outside", "write-repository"})

#: what each profile gives each risk class
PROFILES: dict[str, dict[str, Decision]] = {
    "read-only": {"low": "allow", "medium": "forbid", "high": "forbid"},
    "workspace-write": {"low": "allow", "medium": "prompt", "high": "prompt"},
    "full": {"low": "allow", "medium": "allow", "high": "prompt"},
}
DEFAULT_PROFILE = "workspace-write"

#: the keys of ``[gateway]`` and of each ``[[gateway.rules]]`` table
GATEWAY_SETTINGS: tuple[str, ...] = ("profile", "network", "rules")
RULE_SETTINGS: tuple[str, ...] = (
    "name",
    "pattern",
    "decision",
    "justification",
    "match",
    "not_match",
)


@dataclass(frozen=True)
class Rule:
    """One prefix rule: ``pattern`` (a tuple of alternatives per token) and its ``decision``."""

    name: str
    pattern: tuple[tuple[str, ...], ...]
    decision: Decision
    justification: str = ""
    match: tuple[tuple[str, ...], ...] = ()
    not_match: tuple[tuple[str, ...], ...] = ()

    def matches(self, argv: Sequence[str]) -> bool:
        """True when ``argv`` starts with this rule's pattern."""
        if len(argv) < len(self.pattern):
            return False
        return all(argv[i] in alts for i, alts in enumerate(self.pattern))

    def shown(self) -> str:
        """The pattern as written, e.g. ``git [status|log]``."""
        return " ".join(a[0] if len(a) == 1 else "[" + "|".join(a) + "]" for a in self.pattern)

    def to_json(self) -> dict[str, Any]:
        """The rule as JSON."""
        return {
            "name": self.name,
            "pattern": [list(a) for a in self.pattern],
            "decision": self.decision,
            "justification": self.justification,
        }


@dataclass(frozen=True)
class PartDecision:
    """What the policy decided for one part of a command, and by which rule (None: the profile)."""

    part: Part
    decision: Decision
    rule: Rule | None


@dataclass(frozen=True)
class PolicyDecision:
    """The policy's answer for a command: ``allow``, ``prompt`` or ``forbid``, its risk, why."""

    decision: Decision
    risk: str
    reason: str
    classification: RiskDecision
    rule: str | None = None
    """The name of the rule that decided (None when the profile did)."""
    profile: str = DEFAULT_PROFILE
    parts: tuple[PartDecision, ...] = field(default=())

    @property
    def allowed(self) -> bool:
        """True when the command runs without asking."""
        return self.decision == "allow"

    def to_json(self) -> dict[str, Any]:
        """The decision as JSON."""
        return {
            "decision": self.decision,
            "risk": self.risk,
            "reason": self.reason,
            "rule": self.rule,
            "profile": self.profile,
            "classification": self.classification.to_json(),
        }


@dataclass(frozen=True)
class Policy:
    """A profile and ordered rules, bound to a workspace; :meth:`decide` judges a command."""

    workspace: Path
    profile: str = DEFAULT_PROFILE
    rules: tuple[Rule, ...] = ()
    network: bool = False
    """Whether a confined command may reach the network (``[gateway] network = "allow"``)."""
    configured: str | None = None
    """The profile the configuration chose (None: ``profile``); confinement follows it
    (or ``profile`` when stricter), never a looser profile asked for by a caller."""

    def rule_for(self, argv: Sequence[str]) -> Rule | None:
        """The first rule matching ``argv`` (None: no rule does)."""
        for rule in self.rules:
            if rule.matches(argv):
                return rule
        return None

    def decide(
        self, command: str | Sequence[str], *, cwd: Path | str | None = None
    ) -> PolicyDecision:
        """Classify ``command`` (a shell string or an argv) and decide: allow, prompt or forbid."""
        from strata.gateway.classify import classify

        risk = classify(command, workspace=self.workspace, cwd=cwd)
        return self.judge(risk)

    def judge(self, risk: RiskDecision) -> PolicyDecision:
        """The decision for a classified command: the strictest of its parts'.

        A part matched by a rule gets the rule's decision; any other part, and
        a finding of no single part (unparseable input, a pipe into a shell),
        gets what the profile gives its risk class. Among equally strict
        parts the riskiest decides, then the first.
        """
        from strata.gateway.classify import RISKS

        table = PROFILES[self.profile]
        judged: list[PartDecision] = []
        for part in risk.parts:
            rule = self.rule_for(part.argv) if part.argv else None
            decision = rule.decision if rule else table[part.risk]
            if rule is not None and any(f.rule in NOT_BY_RULE for f in part.findings):
                # a rule may make such a part stricter, never looser than its profile
                decision = max(decision, table[part.risk], key=_STRICT.__getitem__)
            judged.append(PartDecision(part, decision, rule))
        # (decision, risk, finding, rule) of every candidate, in order
        candidates: list[tuple[Decision, str, Finding, Rule | None]] = [
            (j.decision, j.part.risk, j.part.findings[0], j.rule) for j in judged if j.part.findings
        ]
        in_parts = {id(f) for p in risk.parts for f in p.findings}
        for f in risk.findings:
            if id(f) not in in_parts:
                candidates.append((table[f.risk], f.risk, f, None))
        if not candidates:
            return PolicyDecision(
                "allow", "low", "nothing to run", risk, None, self.profile, tuple(judged)
            )
        decision, _, top, rule = max(
            candidates,
            key=lambda c: (_STRICT[c[0]], RISKS.index(c[1])),
        )
        why = f"{top.risk} ({top.rule}): {top.reason} [{top.part}]"
        if rule is not None and decision != rule.decision:
            reason = (
                f"rule {rule.name} ({rule.shown()}) says {rule.decision}, but no rule may allow "
                f"this past profile {self.profile}; {why}"
            )
        elif rule is not None:
            just = f" ({rule.justification})" if rule.justification else ""
            reason = f"rule {rule.name} ({rule.shown()}) says {decision}{just}; {why}"
        else:
            reason = f"profile {self.profile}: {why}"
        return PolicyDecision(
            decision,
            risk.risk,
            reason,
            risk,
            rule.name if rule else None,
            self.profile,
            tuple(judged),
        )

    def to_json(self) -> dict[str, Any]:
        """The policy as JSON."""
        return {
            "workspace": str(self.workspace),
            "profile": self.profile,
            "network": self.network,
            "rules": [r.to_json() for r in self.rules],
        }


def load_policy(
    config: Mapping[str, Any] | None,
    *,
    workspace: Path | str,
    profile: str | None = None,
    origin: str = "config.toml",
) -> Policy:
    """The policy of a ``[gateway]`` table (``config``; None: the defaults), checked.

    ``profile`` overrides the table's. Every rule's examples are tried; a
    mistake raises :class:`~strata.errors.PolicyInvalid` naming ``origin``
    and the rule.
    """
    table = dict(config or {})
    unknown = sorted(set(table) - set(GATEWAY_SETTINGS))
    if unknown:
        raise PolicyInvalid(
            f"{origin}: gateway.{unknown[0]} is not a setting "
            f"(known: {', '.join(GATEWAY_SETTINGS)})"
        )
    configured = table.get("profile", DEFAULT_PROFILE)
    chosen = profile if profile is not None else configured
    for name in (configured, chosen):
        if not isinstance(name, str) or name not in PROFILES:
            raise PolicyInvalid(
                f"{origin}: unknown gateway profile {name!r}; use one of {', '.join(PROFILES)}"
            )
    network = table.get("network", "deny")
    if network not in ("allow", "deny"):
        raise PolicyInvalid(f'{origin}: gateway.network is {network!r}; use "allow" or "deny"')
    raw_rules = table.get("rules", [])
    if not isinstance(raw_rules, list):
        raise PolicyInvalid(f"{origin}: gateway.rules is not a list of [[gateway.rules]] tables")
    rules = tuple(_rule(raw, i + 1, origin) for i, raw in enumerate(raw_rules))
    names = [r.name for r in rules]
    for n in names:
        if names.count(n) > 1:
            raise PolicyInvalid(f"{origin}: two gateway rules are named {n!r}")
    return Policy(Path(workspace), chosen, rules, network == "allow", configured)


def _rule(raw: Any, index: int, origin: str) -> Rule:
    where = f"{origin}: gateway rule {index}"
    if not isinstance(raw, dict):
        raise PolicyInvalid(f"{where} is not a table")
    name = raw.get("name", f"rule-{index}")
    if not isinstance(name, str) or not name:
        raise PolicyInvalid(f"{where}: name is not a non-empty string")
    where = f"{origin}: gateway rule {index} ({name})"
    unknown = sorted(set(raw) - set(RULE_SETTINGS))
    if unknown:
        raise PolicyInvalid(
            f"{where}: {unknown[0]} is not a rule setting (known: {', '.join(RULE_SETTINGS)})"
        )
    pattern = raw.get("pattern")
    if not isinstance(pattern, list) or not pattern:
        raise PolicyInvalid(
            f'{where}: pattern must be a non-empty list of words, e.g. ["git", ["status", "log"]]'
        )
    tokens: list[tuple[str, ...]] = []
    for token in pattern:
        if isinstance(token, str) and token:
            tokens.append((token,))
        elif isinstance(token, list) and token and all(isinstance(t, str) and t for t in token):
            tokens.append(tuple(token))
        else:
            raise PolicyInvalid(
                f"{where}: pattern token {token!r} is neither a word nor a list of words"
            )
    decision = raw.get("decision")
    if decision not in DECISIONS:
        raise PolicyInvalid(f"{where}: decision {decision!r} is not one of {', '.join(DECISIONS)}")
    justification = raw.get("justification", "")
    if not isinstance(justification, str):
        raise PolicyInvalid(f"{where}: justification is not a string")
    match = _examples(raw.get("match", []), where, "match")
    not_match = _examples(raw.get("not_match", []), where, "not_match")
    rule = Rule(name, tuple(tokens), decision, justification, match, not_match)
    for example in match:
        if not rule.matches(example):
            raise PolicyInvalid(
                f"{where}: its match example {shlex.join(example)!r} does not match "
                f"its pattern {rule.shown()!r}",
                hint="fix the pattern or the example",
            )
    for example in not_match:
        if rule.matches(example):
            raise PolicyInvalid(
                f"{where}: its not_match example {shlex.join(example)!r} matches "
                f"its pattern {rule.shown()!r}",
                hint="fix the pattern or the example",
            )
    return rule


def _examples(raw: Any, where: str, key: str) -> tuple[tuple[str, ...], ...]:
    if not isinstance(raw, list):
        raise PolicyInvalid(f"{where}: {key} is not a list of example commands")
    out: list[tuple[str, ...]] = []
    for example in raw:
        if isinstance(example, str):
            try:
                words = shlex.split(example)
            except ValueError as exc:
                raise PolicyInvalid(f"{where}: {key} example {example!r}: {exc}") from None
        elif isinstance(example, list) and all(isinstance(w, str) for w in example):
            words = list(example)
        else:
            raise PolicyInvalid(f"{where}: {key} example {example!r} is not a command")
        if not words:
            raise PolicyInvalid(f"{where}: {key} has an empty example")
        out.append(tuple(words))
    return tuple(out)


def configured_policy(
    raw: Mapping[str, Any], config: Path, workspace: Path, *, profile: str | None = None
) -> Policy:
    """The policy of a ``config.toml`` read as ``raw`` (from ``config``) for ``workspace``.

    Needs no open repository: the Claude Code hook judges a command with it
    and opens the repository only to record a refusal.
    """
    from strata.errors import PolicyInvalid
    from strata.layout import misspelt_table

    table = raw.get("gateway")
    if table is not None and not isinstance(table, dict):
        raise PolicyInvalid(f"{config}: [gateway] is not a table")
    if table is None and (near := misspelt_table(dict(raw), "gateway")) is not None:
        # a policy the user wrote must not be dropped for a typo
        raise PolicyInvalid(
            f"{config} has [{near}], which Strata does not read",
            hint="rename it [gateway] (see docs/gateway.md)",
        )
    return load_policy(table, workspace=workspace, profile=profile, origin=str(config))
