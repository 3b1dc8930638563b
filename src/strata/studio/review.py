"""The Draft's review: its change set against its base, revisions, publish, discard, checkpoints.

Publish runs what ``strata publish`` runs (with ``--preflight``: the
Repository's preflight first, publishing the verified tree only when it
passed); discard and checkpoint restore are the Draft's and the checkpoints'
own methods.
"""

from __future__ import annotations

import os

from starlette.responses import Response

from strata.errors import MergeConflict, PreflightFailed
from strata.studio.context import Ctx
from strata.studio.guard import Refused
from strata.studio.render import short
from strata.studio.timeline import rewind_lines
from strata.workbench.draft import Draft, current_draft, open_draft


def draft_page(ctx: Ctx) -> Response:
    """The open Draft against its base (the change set of its newest revision)."""
    repo = ctx.ws.repo
    draft = open_draft(repo)
    checkpoints = list(reversed(repo.checkpoints.list()))
    if draft is None:
        return ctx.render("draft.html", draft=None, checkpoints=checkpoints)
    base, tip = draft.base, draft.tip()
    diff = repo.diff_trees(repo.tree_of(base), repo.tree_of(tip))
    revisions = list(reversed(draft.revisions()))
    from strata.workbench.summaries import summaries_for

    return ctx.render(
        "draft.html",
        summaries=summaries_for(diff, revisions),
        draft=draft,
        base=base,
        tip=tip,
        diff=diff,
        revisions=revisions,
        checkpoints=checkpoints,
    )


def draft_act(ctx: Ctx) -> Response:
    """Record, publish (optionally after a preflight), discard; restore a checkpoint."""
    repo = ctx.ws.repo
    what = ctx.request.path_params["what"]
    back = ctx.url("draft")
    if what == "restore":
        checkpoint = ctx.arg("checkpoint")
        restored = repo.checkpoints.restore(checkpoint)
        said = rewind_lines(restored, f"Restored checkpoint {short(checkpoint)}, at")
        return ctx.done("Checkpoint restored", said, back)
    draft = current_draft(repo)
    if what == "record":
        reviewed = draft.review()
        return ctx.done(
            "Draft recorded",
            [
                f"Draft {short(reviewed.draft_event.id)}: {reviewed.diff.files_changed} files "
                "changed against its base"
            ],
            back,
        )
    if what == "discard":
        event = draft.discard()
        return ctx.done(
            "Draft discarded",
            [f"Discarded the Draft ({short(event.id)}); its revisions stay on its branch"],
            back,
        )
    if what == "publish":
        lines: list[str] = []
        stamp = verified = None
        if ctx.arg("preflight") == "on":
            checked = repo.preflight(
                check=ctx.arg("check") or None,
                sandbox=ctx.arg("sandbox") or "bwrap",
                environ=dict(os.environ),
            )
            lines.append(f"Preflight {'passed' if checked.ok else 'failed'}")
            if not checked.ok:
                raise PreflightFailed(
                    f"{checked.failure()}; nothing was published",
                    report=checked.report_artifact,
                )
            stamp, verified = checked.stamp, checked.expected_tree
        try:
            result = draft.publish(ctx.arg("message"), preflight=stamp, verified_tree=verified)
        except MergeConflict as conflict:
            return conflict_page(ctx, draft, conflict)
        n = result.files_changed
        lines.append(
            f"Published {short(result.event.id)}: {n} file{'s' if n != 1 else ''} changed "
            f"(checkpoint {short(result.checkpoint.id)}; 'strata undo' reverses it)"
        )
        lines += [
            f"merged {p} with changes made to Published meanwhile" for p in result.merged_paths
        ]
        lines += [
            f"warning: left {p} untouched: it changed while publishing"
            for p in result.skipped_paths
        ]
        return ctx.done("Published", lines, back)
    raise Refused(404, f"no action {what!r}")


def conflict_page(ctx: Ctx, draft: Draft, conflict: MergeConflict) -> Response:
    """A publish that would conflict: each file's hunks on both sides since the base (409)."""
    from strata.studio.diffview import render_files

    repo = ctx.ws.repo
    base, tip = draft.base, draft.tip()
    base_tree = repo.tree_of(base)
    scan = repo.workspace.scan(hash_only=True)  # Published as it is, unrecorded work included
    published = repo.diff_trees(base_tree, scan.tree, scan.store, paths=conflict.paths)
    drafted = repo.diff_trees(base_tree, repo.tree_of(tip), paths=conflict.paths)
    ours, _ = render_files(repo, published.changes, (0, 0, 0), None, None, store=scan.store)
    theirs, _ = render_files(repo, drafted.changes, (0, 0, 0), base, tip)
    return ctx.render(
        "conflict.html",
        status=409,
        nav="draft",
        message=str(conflict),
        paths=conflict.paths,
        published=ours,
        drafted=theirs,
    )
