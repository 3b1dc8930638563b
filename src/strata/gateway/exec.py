"""``terminal_exec``: one command through the policy, the approval gate and a recorded run.

The steps of :meth:`Gateway.exec`, each recorded in the ledger as it happens:

1. ``tool_call_started``;
2. the policy decides (:meth:`strata.gateway.policy.Policy.decide`): ``forbid``
   ends the call (``command_forbidden``); ``prompt`` records
   ``approval_requested``, asks the approver, records ``approval_decided``; a
   denial ends the call (``approval_denied``, with the reason);
3. ``terminal_step_started``; the command runs as a Strata run
   (:func:`strata.runs.flow.begin_run` / :func:`~strata.runs.flow.finish_run`):
   the workspace is snapshotted right before it, so an approved command is
   one ``strata undo`` away from being reverted, and after it, so its diff is
   recorded. It runs in its own session with no input, for at most
   ``timeout_s`` seconds (honoured even when tiny) and until it has written
   ``max_output`` bytes; either limit kills its whole process group. What it
   printed is kept up to ``max_output`` bytes, with ``truncated`` set when
   more came;
4. ``terminal_step_finished``, one ``file_artifact`` per changed file, and
   ``tool_call_finished``, recorded as part of the run: ``strata undo`` right
   after reverts the command's changes in one step.

Every event of one call carries the same ``tool_call_id`` in its data.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import (
    ApprovalDenied,
    CommandForbidden,
    GatewayError,
    PathOutsideWorkspace,
    StrataError,
    UsageError,
)
from strata.gateway.approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    ask,
    deny_all,
    state_summary,
)
from strata.gateway.decision import Call, GatewayDecision, confinement_of, decide
from strata.gateway.policy import Policy, PolicyDecision, configured_policy
from strata.ledger.events import Author, EventType
from strata.runs.process import kill_group, wait_session
from strata.sandbox.confine import confined_command

if TYPE_CHECKING:
    from strata.core import Core

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_OUTPUT = 1 << 20
"""The bytes of output kept by default (stdout and stderr together): 1 MiB."""
DEFAULT_MAX_STEPS = 50
"""How many commands one :class:`Gateway` runs before it refuses more."""
KILL_GRACE_S = 1.0

_NO_APPROVER = (
    "the command needs approval and no approver was given (pass approver=…, or --yes on the "
    "command line)"
)


@dataclass
class Bounded:
    """How a bounded command ended."""

    exit_code: int | None
    """Its exit status (128 + N for signal N); None when it timed out."""
    signal: int | None
    timed_out: bool
    truncated: bool
    """True when it printed more than ``max_output`` bytes (it was then killed)."""
    stdout: bytes
    stderr: bytes
    duration_ms: int


@dataclass
class ExecResult:
    """One ``terminal_exec`` call that ran: the decision, the approval, the outcome, the diff."""

    tool_call_id: str
    command: str
    argv: list[str]
    decision: PolicyDecision
    approval: ApprovalDecision | None
    exit_code: int | None
    timed_out: bool
    truncated: bool
    stdout: str
    stderr: str
    duration_ms: int
    run_id: str
    before_snapshot: str | None = None
    after_snapshot: str | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.truncated

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata exec --json`` prints."""
        return {
            "tool_call_id": self.tool_call_id,
            "command": self.command,
            "argv": self.argv,
            "decision": self.decision.decision,
            "risk": self.decision.risk,
            "reason": self.decision.reason,
            "rule": self.decision.rule,
            "approval": self.approval.to_json() if self.approval else None,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_ms": self.duration_ms,
            "run_id": self.run_id,
            "before_snapshot": self.before_snapshot,
            "after_snapshot": self.after_snapshot,
            "changes": self.changes,
            "warnings": self.warnings,
        }


def policy_for(core: Core, *, profile: str | None = None) -> Policy:
    """The policy of ``core``'s ``config.toml`` (``[gateway]``), ``profile`` overriding its own."""
    return configured_policy(core.config.raw, core.layout.config, core.root, profile=profile)


def workspace_folder(root: Path, cwd: Path | str | None) -> Path:
    """``cwd`` (relative to ``root``, or absolute) as a folder of the workspace ``root``.

    Raises :class:`~strata.errors.PathOutsideWorkspace` for a folder outside it
    and :class:`~strata.errors.UsageError` for one that is not a folder.
    """
    if cwd is None:
        return root
    path = Path(cwd)
    path = (root / path if not path.is_absolute() else path).resolve()
    if not path.is_relative_to(root.resolve()):
        raise PathOutsideWorkspace(str(cwd))
    if not path.is_dir():
        raise UsageError(f"{cwd} is not a folder of the workspace")
    return path


class Gateway:
    """The tool gateway of one workspace: its policy, its approver, ``exec`` and the step count.

    ``approver`` answers commands the policy wants approved (default: none,
    so they are denied with a reason saying so). ``max_steps`` bounds how
    many commands this gateway runs.
    """

    def __init__(
        self,
        core: Core,
        *,
        policy: Policy | None = None,
        profile: str | None = None,
        approver: Approver | None = None,
        author: Author | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        if max_steps < 1:
            raise UsageError("max_steps must be at least 1")
        self.core = core
        self.policy = policy if policy is not None else policy_for(core, profile=profile)
        self.approver = approver
        self.author = author
        self.max_steps = max_steps
        self.steps = 0
        self.confinement = confinement_of(self.policy)
        """How the commands run: the configured profile's confinement (or a stricter one)."""

    def decide(
        self, command: str | Sequence[str], *, cwd: Path | str | None = None
    ) -> PolicyDecision:
        """What the policy says about ``command`` (nothing runs, nothing is recorded)."""
        return self.policy.decide(command, cwd=self._cwd(cwd))

    def judge(
        self, command: str | Sequence[str], *, cwd: Path | str | None = None
    ) -> GatewayDecision:
        """The gateway's decision on ``command`` (:func:`strata.gateway.decision.decide`)."""
        shown = command if isinstance(command, str) else tuple(str(a) for a in command)
        return self.ask_gateway(Call("shell", shown, cwd=self._cwd(cwd)))

    def ask_gateway(self, call: Call) -> GatewayDecision:
        """The gateway's decision on any ``call`` (a tool's, such as ``draft_run``)."""
        return decide(self.policy, call, repository=self.core.layout.repo)

    def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_output: int = DEFAULT_MAX_OUTPUT,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command`` (a shell string, run by bash, or an argv) through the gate.

        Raises :class:`~strata.errors.CommandForbidden` or
        :class:`~strata.errors.ApprovalDenied` (nothing ran) when the gate
        says no. ``env`` is the command's environment (default: this
        process's).
        """
        if timeout_s <= 0:
            raise UsageError("the timeout must be above 0 seconds")
        if max_output < 0:
            raise UsageError("max_output must be 0 or more")
        if self.steps >= self.max_steps:
            raise GatewayError(
                f"step limit reached: this gateway already ran {self.max_steps} commands",
                hint="start a new task (or raise max_steps)",
            )
        core = self.core
        where = self._cwd(cwd)
        shell = isinstance(command, str)
        if shell:
            assert isinstance(command, str)
            text = command
            if not text.strip():
                raise UsageError("the command is empty")
            argv = [_shell(), "-c", text]
        else:
            argv = [str(a) for a in command]
            if not argv or not argv[0]:
                raise UsageError("the command is empty")
            text = shlex.join(argv)
        verdict = self.judge(command, cwd=where)
        self.steps += 1
        call = core.ledger.new_id()
        author = self.author or core.author
        # one operation group (unless inside another: a host run's, a prompt's): the call, its
        # approval, the run and its record are one line of 'strata op log' and one 'strata
        # undo' (the run's, on its last step)
        from strata.core.groups import Group, open_group

        with contextlib.ExitStack() as held:
            if core.group is None:  # leased: should this process die, the next writer closes it
                group = Group(call, "exec", f"exec: {text}"[:200], author, {"undo": "handler"})
                held.enter_context(open_group(core, group, "exec", call))
            base = {"tool_call_id": call, "tool": "terminal_exec"}
            _annotate(
                core,
                EventType.TOOL_CALL_STARTED,
                {
                    **base,
                    "command": text,
                    "shell": shell,
                    "cwd": str(where),
                    "argv": argv,
                    "gateway": verdict.to_json(),
                },
                f"terminal_exec: {text}",
                author=author,
                operation=call,
            )
            decision, approval = self._gate(verdict, text, where, author=author, base=base)
            return self._run(
                decision, approval, text, argv, where, env, timeout_s, max_output, base
            )

    # -- the gate ----------------------------------------------------------------------

    def _gate(
        self,
        verdict: GatewayDecision,
        text: str,
        where: Path,
        *,
        author: Author,
        base: dict[str, Any],
    ) -> tuple[PolicyDecision, ApprovalDecision | None]:
        core = self.core
        call = base["tool_call_id"]
        decision = verdict.policy
        if verdict.answer == "refuse" or decision is None:
            _annotate(
                core,
                EventType.TOOL_CALL_FINISHED,
                {
                    **base,
                    "status": "forbidden",
                    "reason": verdict.reason,
                    "risk": verdict.risk,
                    "decision": verdict.to_json(),
                },
                f"forbidden: {text} — {verdict.reason}",
                author=author,
                operation=call,
            )
            raise CommandForbidden(text, verdict.reason)
        if verdict.answer == "allow":
            return decision, None
        request = ApprovalRequest(
            command=text,
            risk=decision.risk,
            reason=decision.reason,
            workspace=str(core.root),
            state=state_summary(core.status()) if hasattr(core, "status") else {},
            cwd=str(where),
            rule=decision.rule,
        )
        _annotate(
            core,
            EventType.APPROVAL_REQUESTED,
            {**base, **request.to_json()},
            f"approval requested ({decision.risk}): {text}",
            author=author,
            operation=call,
        )
        answer = ask(self.approver or deny_all(_NO_APPROVER, by="none"), request)
        _annotate(
            core,
            EventType.APPROVAL_DECIDED,
            {**base, "command": text, "risk": decision.risk, **answer.to_json()},
            f"approved by {answer.by}: {text}"
            if answer.approved
            else f"denied by {answer.by}: {text} — {answer.reason}",
            author=author,
            operation=call,
        )
        if not answer.approved:
            _annotate(
                core,
                EventType.TOOL_CALL_FINISHED,
                {**base, "status": "denied", "reason": answer.reason, "by": answer.by},
                f"denied: {text}",
                author=author,
                operation=call,
            )
            raise ApprovalDenied(text, answer.reason, by=answer.by)
        return decision, answer

    # -- the run ---------------------------------------------------------------------------

    def _run(
        self,
        decision: PolicyDecision,
        approval: ApprovalDecision | None,
        text: str,
        argv: list[str],
        where: Path,
        env: Mapping[str, str] | None,
        timeout_s: float,
        max_output: int,
        base: dict[str, Any],
    ) -> ExecResult:
        from strata.runs.flow import begin_run, finish_run
        from strata.runs.process import ProcessOutcome

        core = self.core
        call = base["tool_call_id"]
        author = self.author or core.author
        _annotate(
            core,
            EventType.TERMINAL_STEP_STARTED,
            {
                **base,
                "step": self.steps,
                "command": text,
                "risk": decision.risk,
                "confinement": self.confinement.to_json(),
            },
            f"step {self.steps}: {text}",
            author=author,
            operation=call,
        )
        # the 'before' snapshot: taken right before the command, after any approval
        try:
            # confined as the configuration says: the policy's promise holds when the
            # classifier errs (a missing bubblewrap refuses the command, never runs it bare)
            confined = confined_command(
                argv,
                confinement=self.confinement,
                workspace=core.root,
                cwd=where,
                repository=core.layout.repo,
                new_session=False,  # run_bounded's session: a time-out kills the group
            )
            begun = begin_run(core, argv, author=author, label=f"terminal_exec {call}", cwd=where)
        except StrataError as exc:  # the program is missing, the workspace is busy…
            _annotate(
                core,
                EventType.TOOL_CALL_FINISHED,
                {**base, "status": "error", "reason": exc.message, "error": type(exc).__name__},
                f"could not start: {text}",
                author=author,
                operation=call,
            )
            raise
        try:
            bounded = run_bounded(
                confined, cwd=where, env=env, timeout_s=timeout_s, max_output=max_output
            )
        except BaseException:
            begun.lease.abandon()  # the next command that writes records the run as interrupted
            raise
        code = bounded.exit_code if bounded.exit_code is not None else 124
        outcome = ProcessOutcome(code, bounded.signal, False, None, bounded.duration_ms)
        result = finish_run(core, begun, outcome)
        ws = result.workspace
        changes: list[dict[str, Any]] = []
        if ws is not None and ws.before_snapshot != ws.after_snapshot:
            diff = core.diff_trees(
                core.resolve(ws.before_snapshot).tree, core.resolve(ws.after_snapshot).tree
            )
            changes = [
                {
                    "path": f.path,
                    "status": f.status,
                    "insertions": f.insertions,
                    "deletions": f.deletions,
                }
                for f in diff.files
            ]
        status = (
            "timed_out"
            if bounded.timed_out
            else "truncated"
            if bounded.truncated
            else ("ok" if bounded.exit_code == 0 else "failed")
        )
        finished = {
            **base,
            "step": self.steps,
            "run_id": begun.run_id,
            "exit_code": bounded.exit_code,
            "timed_out": bounded.timed_out,
            "truncated": bounded.truncated,
            "duration_ms": bounded.duration_ms,
            "files_changed": len(changes),
        }
        events: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
            (EventType.TERMINAL_STEP_FINISHED, finished, f"step {self.steps} {status}: {text}", ())
        ]
        for c in changes:
            events.append(
                (
                    EventType.FILE_ARTIFACT,
                    {**base, "run_id": begun.run_id, **c},
                    f"{c['status']} {c['path']}",
                    (c["path"],),
                )
            )
        events.append(
            (
                EventType.TOOL_CALL_FINISHED,
                {**base, "status": status, "exit_code": bounded.exit_code, "run_id": begun.run_id},
                f"{status}: {text}",
                (),
            )
        )
        # one operation that belongs to the run, so 'strata undo' reverts the command
        with core.transaction(EventType.RUN, author, run_id=begun.run_id) as tx:
            head = tx.head()
            for action, data, rationale, files in events:
                tx.annotate(
                    action,
                    anchor=head.id if head else None,
                    data=data,
                    rationale=rationale,
                    files=files,
                    operation_id=begun.run_id,
                )
        return ExecResult(
            call,
            text,
            argv,
            decision,
            approval,
            bounded.exit_code,
            bounded.timed_out,
            bounded.truncated,
            bounded.stdout.decode("utf-8", "replace"),
            bounded.stderr.decode("utf-8", "replace"),
            bounded.duration_ms,
            begun.run_id,
            ws.before_snapshot if ws else None,
            ws.after_snapshot if ws else None,
            changes,
            list(result.warnings),
        )

    def _cwd(self, cwd: Path | str | None) -> Path:
        return workspace_folder(self.core.root, cwd)


def record_decision(
    core: Core,
    command: str,
    *,
    outcome: str,
    reason: str,
    by: str,
    decision: PolicyDecision | None = None,
    tool: str = "terminal_exec",
    cwd: Path | str | None = None,
    author: Author | None = None,
    gateway: GatewayDecision | None = None,
) -> str:
    """Record the gate's answer to a command that runs elsewhere (an agent's own tool).

    An agent's hook (``strata hook claude-code``) judges a call the agent
    makes itself; nothing runs here. Its answer is recorded with the events
    :meth:`Gateway.exec` records for the same answer, in one record-only operation
    (``strata undo`` steps over it), and the operation's id, which every
    event carries as ``tool_call_id``, is returned. ``outcome`` is
    ``forbidden`` (the policy, or a rule of the hook's, refuses it),
    ``denied`` (it needs approval and ``by`` refused it: ``reason`` says
    why), ``approved`` (it needs approval and ``by`` approved it, ``reason``
    as given: the agent then runs it) or ``asked`` (it needs approval and was
    handed to ``by``, whose answer Strata does not see). ``decision`` is the policy's, when the
    policy judged it (its risk class and reason are recorded); ``gateway``
    the gateway's whole decision (:func:`strata.gateway.decision.decide`),
    recorded as ``Gateway.exec`` records its own (``gateway`` in
    ``tool_call_started``).
    """
    if outcome not in ("forbidden", "denied", "approved", "asked"):
        raise UsageError(f"unknown outcome {outcome!r}; use forbidden, denied, approved or asked")
    if outcome != "forbidden" and decision is None:
        raise UsageError(f"an approval {outcome} needs the policy's decision (decision=...)")
    author = author or core.author
    risk = decision.risk if decision is not None else None
    where = str(cwd) if cwd is not None else str(core.root)
    command_type = {
        "forbidden": EventType.TOOL_CALL_FINISHED,
        "denied": EventType.APPROVAL_DECIDED,
        "approved": EventType.APPROVAL_DECIDED,
        "asked": EventType.APPROVAL_REQUESTED,
    }[outcome]
    with core.transaction(command_type, author) as tx:
        base = {"tool_call_id": tx.id, "tool": tool}
        events: list[tuple[str, dict[str, Any], str]] = [
            (
                EventType.TOOL_CALL_STARTED,
                {
                    **base,
                    "command": command,
                    "cwd": where,
                    "judged_by": by,
                    **({"gateway": gateway.to_json()} if gateway is not None else {}),
                },
                f"{tool}: {command}",
            )
        ]
        if outcome == "forbidden":
            events.append(
                (
                    EventType.TOOL_CALL_FINISHED,
                    {**base, "status": "forbidden", "reason": reason, "risk": risk},
                    f"forbidden: {command} — {reason}",
                )
            )
        else:
            assert decision is not None
            request = ApprovalRequest(
                command=command,
                risk=decision.risk,
                reason=decision.reason,
                workspace=str(core.root),
                cwd=where,
                rule=decision.rule,
            )
            asked = {"asked": by} if outcome == "asked" else {}
            events.append(
                (
                    EventType.APPROVAL_REQUESTED,
                    {**base, **request.to_json(), **asked},
                    f"approval requested ({decision.risk}): {command}",
                )
            )
        if outcome == "approved":
            approval = ApprovalDecision(True, reason, by)
            events.append(
                (
                    EventType.APPROVAL_DECIDED,
                    {**base, "command": command, "risk": risk, **approval.to_json()},
                    f"approved by {by}: {command}",
                )
            )
        if outcome == "denied":
            answer = ApprovalDecision(False, reason, by)
            events += [
                (
                    EventType.APPROVAL_DECIDED,
                    {**base, "command": command, "risk": risk, **answer.to_json()},
                    f"denied by {by}: {command} — {reason}",
                ),
                (
                    EventType.TOOL_CALL_FINISHED,
                    {**base, "status": "denied", "reason": reason, "by": by},
                    f"denied: {command}",
                ),
            ]
        head = tx.head()
        for action, data, rationale in events:
            tx.annotate(action, anchor=head.id if head else None, data=data, rationale=rationale)
        return tx.id


def terminal_exec(
    core: Core,
    command: str | Sequence[str],
    *,
    policy: Policy | None = None,
    profile: str | None = None,
    approver: Approver | None = None,
    author: Author | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_output: int = DEFAULT_MAX_OUTPUT,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> ExecResult:
    """Run one command in ``core``'s workspace through the policy and the approval gate.

    A shortcut for ``Gateway(core, …).exec(command, …)``; see :class:`Gateway`.
    """
    gateway = Gateway(core, policy=policy, profile=profile, approver=approver, author=author)
    return gateway.exec(command, timeout_s=timeout_s, max_output=max_output, cwd=cwd, env=env)


def _annotate(
    core: Core,
    action: str,
    data: dict[str, Any],
    rationale: str,
    *,
    author: Author,
    operation: str,
) -> None:
    with core.transaction(action, author) as tx:
        head = tx.head()
        tx.annotate(
            action,
            anchor=head.id if head else None,
            data=data,
            rationale=rationale,
            operation_id=operation,
        )


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


# -- the bounded process ------------------------------------------------------------------------


def run_bounded(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None,
    timeout_s: float,
    max_output: int,
) -> Bounded:
    """Run ``argv`` with no input, at most ``timeout_s`` seconds and ``max_output`` bytes of output.

    It runs in a session of its own; a timeout or too much output kills the
    whole process group (SIGTERM, then SIGKILL after a grace), and whatever it
    left running in its group is killed when it ends.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    budget = _Budget(max_output, proc.pid)
    readers = [budget.reader(proc.stdout, 0), budget.reader(proc.stderr, 1)]
    try:
        status, timed_out = wait_session(proc, timeout_s=timeout_s, grace_s=KILL_GRACE_S)
        timed_out = timed_out and not budget.over  # the output's overflow killed it first
    finally:
        for r in readers:
            r.join(timeout=KILL_GRACE_S)
        proc.stdout.close()
        proc.stderr.close()
    duration = int((time.monotonic() - start) * 1000)
    sig = -status if status < 0 else None
    code: int | None = 128 + sig if sig is not None else status
    if timed_out:
        code = None
    return Bounded(
        code,
        sig,
        timed_out,
        budget.over,
        bytes(budget.kept[0]),
        bytes(budget.kept[1]),
        duration,
    )


class _Budget:
    """The output both streams share; going over it kills the process group."""

    def __init__(self, limit: int, pid: int) -> None:
        self.limit = limit
        self.pid = pid
        self.used = 0
        self.over = False
        self.kept = (bytearray(), bytearray())
        self.lock = threading.Lock()

    def reader(self, stream: Any, index: int) -> threading.Thread:
        thread = threading.Thread(target=self._read, args=(stream, index), daemon=True)
        thread.start()
        return thread

    def _read(self, stream: Any, index: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := stream.read1(65536):
                with self.lock:
                    room = self.limit - self.used
                    if len(chunk) > room:
                        self.kept[index].extend(chunk[: max(room, 0)])
                        self.used = self.limit
                        if not self.over:
                            self.over = True
                            kill_group(self.pid, signal.SIGKILL)
                        continue  # drain what is left so the writer is not blocked
                    self.kept[index].extend(chunk)
                    self.used += len(chunk)
