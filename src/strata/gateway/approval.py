"""The approval gate: who says yes to a risky command, and how.

An :data:`Approver` is any callable that takes an :class:`ApprovalRequest`
(the command, its risk class, the policy's reason, the workspace and the
state it would be judged against) and returns an :class:`ApprovalDecision`
(``approved``, a ``reason``, ``by`` whom). Three routes exist:

* the terminal (:func:`terminal_approver`): the request is shown on a
  terminal device (the CLI passes ``/dev/tty``) and a ``y`` approves; with
  no terminal the answer is a denial saying so. ``strata exec --yes``
  approves in advance (:func:`approve_all`);
* an API callback (:func:`callback_approver`): a function of the caller's
  that answers ``True``/``False`` or a whole decision;
* MCP elicitation (``strata mcp``) builds an approver of the same type.

:func:`ask` calls an approver and turns its failure into a denial, so an
approver that raises or returns something else never lets a command run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the most changed paths an :class:`ApprovalRequest` lists
STATE_PATHS = 20


@dataclass(frozen=True)
class ApprovalRequest:
    """A command waiting for a yes or a no, with what it would be judged against."""

    command: str
    """The command as it would run (a shell string, or an argv joined as a shell would read it)."""
    risk: str
    """Its risk class: ``low``, ``medium`` or ``high``."""
    reason: str
    """Why it needs approval: the policy's reason (the part, the rule)."""
    workspace: str
    """The workspace folder it runs in."""
    state: dict[str, Any] = field(default_factory=dict)
    """The workspace's state before it runs: ``strata status`` in short (:func:`state_summary`)."""
    cwd: str = ""
    """The folder it starts in (inside the workspace)."""
    rule: str | None = None
    """The policy rule that asked for the prompt (None: the profile)."""

    def to_json(self) -> dict[str, Any]:
        """The request as JSON (it is recorded in the ``approval_requested`` event)."""
        return {
            "command": self.command,
            "risk": self.risk,
            "reason": self.reason,
            "workspace": self.workspace,
            "cwd": self.cwd,
            "rule": self.rule,
            "state": self.state,
        }

    def describe(self) -> str:
        """The request as a person reads it: risk class first, then command, reason, state.

        Every value is shown with its control characters written out
        (:func:`strata.diff.display.printable`): a command's ``\\r`` or
        terminal escapes cannot make ``rm -rf src`` look like ``ls -la``.
        """
        from strata.diff.display import printable

        lines = [
            f"risk:      {printable(self.risk)}",
            f"command:   {printable(self.command)}",
            f"reason:    {printable(self.reason)}",
            f"workspace: {printable(self.workspace)}",
        ]
        state = self.state
        if state:
            changed = state.get("changes", [])
            head = state.get("head_event_id") or "(nothing recorded yet)"
            lines.append(f"state:     HEAD {str(head)[:12]}, {state.get('changed', 0)} unrecorded")
            lines += [f"             {printable(str(c))}" for c in changed]
            if state.get("more"):
                lines.append(f"             … and {state['more']} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class ApprovalDecision:
    """The answer to an :class:`ApprovalRequest`."""

    approved: bool
    reason: str
    by: str
    """Who or what answered: ``terminal``, ``--yes``, ``api``, ``mcp``…"""

    def to_json(self) -> dict[str, Any]:
        """The decision as JSON (it is recorded in the ``approval_decided`` event)."""
        return {"approved": self.approved, "reason": self.reason, "by": self.by}


Approver = Callable[[ApprovalRequest], ApprovalDecision]
"""Anything that answers an :class:`ApprovalRequest`."""


def state_summary(status: Any) -> dict[str, Any]:
    """The short ``strata status`` an approval is judged against (a ``StatusResult``)."""
    changes = [f"{c.status} {c.path}" for c in status.changes]
    return {
        "head_event_id": status.head.id if status.head else None,
        "branch": status.branch,
        "changed": len(changes),
        "changes": changes[:STATE_PATHS],
        "more": max(0, len(changes) - STATE_PATHS),
    }


def approve_all(*, by: str = "--yes", reason: str = "approved in advance") -> Approver:
    """An approver that says yes to everything (``strata exec --yes``)."""

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(True, reason, by)

    return approve


def deny_all(reason: str, *, by: str = "policy") -> Approver:
    """An approver that says no to everything, with ``reason``."""

    def deny(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(False, reason, by)

    return deny


def callback_approver(
    callback: Callable[[ApprovalRequest], bool | ApprovalDecision], *, by: str = "api"
) -> Approver:
    """An approver from an API callback that returns a bool or an :class:`ApprovalDecision`."""

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        answer = callback(request)
        if isinstance(answer, ApprovalDecision):
            return answer
        if answer is True:
            return ApprovalDecision(True, "approved by the callback", by)
        if answer is False:
            return ApprovalDecision(False, "denied by the callback", by)
        return ApprovalDecision(
            False, f"the callback answered {type(answer).__name__}, not True or False", by
        )

    return approve


def terminal_approver(tty: Path | str = "/dev/tty", *, by: str = "terminal") -> Approver:
    """An approver that asks on the terminal device ``tty``: ``y`` or ``yes`` approves.

    Anything else (an empty line, end of input) denies. When ``tty`` cannot
    be opened (no terminal: a pipeline, a CI job, an agent), the request is
    denied with a reason that says so and how to approve in advance.
    """

    def ask_terminal(request: ApprovalRequest) -> ApprovalDecision:
        try:
            fd = os.open(str(tty), os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return ApprovalDecision(
                False,
                "approval needed but there is no terminal to ask on (pass --yes to approve "
                "in advance)",
                by,
            )
        try:
            prompt = (
                "\nstrata: this command needs your approval\n"
                + request.describe()
                + "\nrun it? [y/N] "
            )
            os.write(fd, prompt.encode("utf-8", "replace"))
            line = _read_line(fd)
        finally:
            os.close(fd)
        if line is None:
            return ApprovalDecision(False, "no answer on the terminal (end of input)", by)
        answer = line.strip().lower()
        if answer in ("y", "yes"):
            return ApprovalDecision(True, "approved on the terminal", by)
        return ApprovalDecision(False, f"denied on the terminal (answered {answer!r})", by)

    return ask_terminal


def _read_line(fd: int) -> str | None:
    """One line typed on the terminal ``fd`` (None: end of input before any)."""
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 1)
        except (OSError, KeyboardInterrupt):
            chunk = b""
        if not chunk:
            return data.decode("utf-8", "replace") if data else None
        if chunk == b"\n":
            return data.decode("utf-8", "replace")
        data += chunk


def ask(approver: Approver, request: ApprovalRequest) -> ApprovalDecision:
    """Ask ``approver``; an approver that raises or answers oddly denies, with the reason why."""
    try:
        answer = approver(request)
    except Exception as exc:
        name = getattr(approver, "__name__", type(approver).__name__)
        return ApprovalDecision(False, f"the approver failed: {exc or type(exc).__name__}", name)
    if not isinstance(answer, ApprovalDecision):
        return ApprovalDecision(
            False, f"the approver answered {type(answer).__name__}, not an ApprovalDecision", "?"
        )
    if not isinstance(answer.approved, bool):
        return ApprovalDecision(False, "the approver's answer is not True or False", answer.by)
    return answer


@dataclass(frozen=True)
class PendingApproval:
    """A request waiting in an :class:`ApprovalQueue`."""

    id: str
    ts: str
    request: dict[str, Any]
    """The request as :meth:`ApprovalRequest.to_json` gives it."""


class ApprovalQueue:
    """Requests that wait for an answer given elsewhere (``strata studio``'s Approvals page).

    One JSON file per request under ``folder/pending``; an answer is a file
    under ``folder/answers`` (created once: a second answer is refused). Both
    are written atomically, so a reader never sees half a request.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def of(cls, repo_folder: Path) -> ApprovalQueue:
        """The queue of the repository kept in ``repo_folder`` (``REPO/approvals``)."""
        return cls(repo_folder / "approvals")

    def _pending(self, request_id: str) -> Path:
        return self.folder / "pending" / f"{request_id}.json"

    def _answer(self, request_id: str) -> Path:
        return self.folder / "answers" / f"{request_id}.json"

    def submit(self, request: ApprovalRequest) -> str:
        """Queue ``request``; return its id."""
        import json
        import secrets
        from datetime import UTC, datetime

        from strata.atomic import atomic_write

        request_id = secrets.token_hex(8)
        (self.folder / "pending").mkdir(parents=True, exist_ok=True)
        (self.folder / "answers").mkdir(parents=True, exist_ok=True)
        body = {
            "id": request_id,
            "ts": datetime.now(UTC).isoformat(timespec="seconds"),
            "request": request.to_json(),
        }
        atomic_write(self._pending(request_id), json.dumps(body).encode())
        return request_id

    def pending(self) -> list[PendingApproval]:
        """The requests still waiting, oldest first."""
        import json

        found = []
        for path in sorted((self.folder / "pending").glob("*.json")):
            if self._answer(path.stem).exists():
                continue
            try:
                body = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue  # withdrawn meanwhile
            found.append(PendingApproval(str(body["id"]), str(body["ts"]), dict(body["request"])))
        return sorted(found, key=lambda p: p.ts)

    def answer(self, request_id: str, decision: ApprovalDecision) -> None:
        """Answer a waiting request (:class:`~strata.errors.UsageError` when none waits)."""
        import json

        from strata.errors import UsageError

        if not request_id.isalnum() or not self._pending(request_id).exists():
            raise UsageError(f"no approval {request_id!r} is waiting (answered or withdrawn)")
        # written whole under a temporary name, then linked to its name: the link fails when
        # an answer is there already, and a reader never sees half of one
        from strata.atomic import atomic_write

        temporary = self.folder / "answers" / f".{request_id}.{os.getpid()}.tmp"
        atomic_write(temporary, json.dumps(decision.to_json()).encode(), mode=0o600)
        try:
            os.link(temporary, self._answer(request_id))
        except FileExistsError:
            raise UsageError(f"approval {request_id} was already answered") from None
        finally:
            temporary.unlink(missing_ok=True)

    def wait(
        self, request_id: str, timeout_s: float, *, poll_s: float = 0.1
    ) -> ApprovalDecision | None:
        """The answer to ``request_id`` once given, or None after ``timeout_s``."""
        import json
        import time

        deadline = time.monotonic() + timeout_s
        path = self._answer(request_id)
        while True:
            try:
                raw = json.loads(path.read_bytes())
                return ApprovalDecision(bool(raw["approved"]), str(raw["reason"]), str(raw["by"]))
            except (FileNotFoundError, ValueError):
                pass  # not answered yet (or being written: the next look reads it whole)
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)

    def withdraw(self, request_id: str) -> None:
        """Forget a request and its answer."""
        for path in (self._pending(request_id), self._answer(request_id)):
            path.unlink(missing_ok=True)


def queued_approver(queue: ApprovalQueue, *, timeout_s: float) -> Approver:
    """An approver that queues each request and waits up to ``timeout_s`` for its answer."""

    def wait_for_answer(request: ApprovalRequest) -> ApprovalDecision:
        request_id = queue.submit(request)
        try:
            decision = queue.wait(request_id, timeout_s)
        finally:
            queue.withdraw(request_id)
        if decision is None:
            return ApprovalDecision(
                False,
                f"no answer within {timeout_s:g} s (answer in 'strata studio', Approvals)",
                "studio",
            )
        return decision

    return wait_for_answer
