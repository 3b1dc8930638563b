"""Approvals: commands waiting in the workspace's approval queue, answered from the page.

``strata exec --ask-studio SECONDS`` (and any caller of
:func:`strata.gateway.queued_approver`) waits for the answer given here; the
gateway then records the decision in its ``approval_decided`` event, as for
an answer on the terminal.
"""

from __future__ import annotations

from starlette.responses import Response

from strata.errors import UsageError
from strata.gateway import ApprovalDecision, ApprovalQueue
from strata.studio.context import Ctx


def _queue(ctx: Ctx) -> ApprovalQueue:
    return ApprovalQueue.of(ctx.ws.repo.layout.repo)


def approvals_page(ctx: Ctx) -> Response:
    """The requests waiting, oldest first, with their risk, reason and workspace state."""
    return ctx.render("approvals.html", nav="approvals", waiting=_queue(ctx).pending())


def approvals_answer(ctx: Ctx) -> Response:
    """Approve or deny one waiting request."""
    answer = ctx.arg("answer")
    if answer not in ("approve", "deny"):
        raise UsageError(f"answer approve or deny, not {answer!r}")
    approved = answer == "approve"
    reason = ctx.arg("reason") or ("approved in the studio" if approved else "denied in the studio")
    request_id = ctx.arg("id")
    _queue(ctx).answer(request_id, ApprovalDecision(approved, reason, "studio"))
    verb = "Approved" if approved else "Denied"
    return ctx.done(verb, [f"{verb} {request_id}: {reason}"], ctx.url("approvals"))
