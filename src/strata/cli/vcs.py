"""The Git sync: ``strata vcs sync|commit|tag|push|fetch|verify`` and ``strata import``."""

from __future__ import annotations

import click

from strata.cli.common import emit_json, json_option, open_repo, short
from strata.diff.display import printable


def _sync_lines(result: dict[str, object]) -> None:
    commits = result["commits"]
    assert isinstance(commits, list)
    for c in commits:
        branch, operation = printable(c["branch"]), short(c["operation_id"])
        click.echo(f"{short(c['commit'])} strata/{branch}  operation {operation}")
    where = result["git_dir"]
    verified = result["verified"]
    if commits:
        click.echo(f"Synced {len(commits)} commit(s) to {where}; {verified} snapshot(s) verified.")
    else:
        click.echo(f"Already synced to {where}.")


@click.group()
def vcs() -> None:
    """Sync the ledger to Git: one commit per operation on strata/<branch>, bookmarks as tags.

    The commits go to the workspace's git repository (or to the bare
    repository named by [sync] repository in .strata/config.toml); only
    strata/* branches and tags are written: your branches, index, HEAD and
    stash are never touched.

    \b
    Example:
      strata vcs sync
      strata vcs push origin
      strata import git:origin/strata/main     # on another machine
    """


@vcs.command("sync")
@click.option("--no-verify", is_flag=True, help="Skip hashing the new commits again.")
@json_option
def vcs_sync(no_verify: bool, as_json: bool) -> None:
    """Write a commit for every operation not yet synced, move the tags, verify.

    Idempotent: a second sync writes only new operations; an interrupted one
    resumes with the same commits.

    \b
    Example:
      strata vcs sync
      # then: git log --oneline strata/main
    """
    from strata.sync.git import GitSync

    with open_repo() as repo, repo.writing(), GitSync(repo) as sync:
        result = sync.sync(verify=not no_verify).to_json()
    if as_json:
        emit_json(result)
    else:
        _sync_lines(result)


@vcs.command("commit")
@click.option("--operation", "operation", required=True, help="The operation id to sync up to.")
@json_option
def vcs_commit(operation: str, as_json: bool) -> None:
    """Sync the operations up to OPERATION (its commit and those before it).

    \b
    Example:
      strata op log --limit 3
      strata vcs commit --operation qhtvz8mk2n4p6r8t0v2x
    """
    from strata.sync.git import GitSync

    with open_repo() as repo, repo.writing(), GitSync(repo) as sync:
        result = sync.sync(until_operation=operation).to_json()
    if as_json:
        emit_json(result)
    else:
        _sync_lines(result)


@vcs.command("tag")
@click.argument("bookmark")
@json_option
def vcs_tag(bookmark: str, as_json: bool) -> None:
    """Sync, then show the tag strata/BOOKMARK that names the bookmark's commit.

    \b
    Example:
      strata bookmark add reviewed
      strata vcs tag reviewed
    """
    from strata.sync.git import GitSync

    with open_repo() as repo, repo.writing(), GitSync(repo) as sync:
        result = sync.tag(bookmark)
    if as_json:
        emit_json(result)
    else:
        click.echo(f"Tag {printable(result['tag'])} -> {short(result['commit'])}")


@vcs.command("verify")
@json_option
def vcs_verify(as_json: bool) -> None:
    """Hash every synced commit again and compare it with the ledger's snapshots.

    Exits 1 naming the first file that differs.

    \b
    Example:
      strata vcs verify
    """
    from strata.sync.git import GitSync

    with open_repo() as repo, GitSync(repo) as sync:
        checked = sync.verify()
    if as_json:
        emit_json({"schema": 1, "ok": True, "verified": checked})
    else:
        click.echo(f"ok: {checked} synced snapshot(s) match the ledger")


@vcs.command("push")
@click.argument("remote", default="origin")
@json_option
def vcs_push(remote: str, as_json: bool) -> None:
    """Sync, then send the strata/* branches and tags to REMOTE (default origin).

    REMOTE is a git remote name or URL of the synced repository; git's own
    transport (file, SSH, HTTPS) and credentials are used.

    \b
    Example:
      strata vcs push origin
      # (a remote added with: git remote add origin git@example.com:team/project.git)
    """
    from strata.sync.git import GitSync

    with open_repo() as repo, repo.writing(), GitSync(repo) as sync:
        sync.sync()
        result = sync.push(remote)
    if as_json:
        emit_json(result)
    else:
        click.echo(f"Pushed {len(result['branches'])} branch(es), {len(result['tags'])} tag(s).")


@vcs.command("fetch")
@click.argument("remote", default="origin")
@json_option
def vcs_fetch(remote: str, as_json: bool) -> None:
    """Fetch REMOTE's strata/* branches and tags (nothing is imported yet).

    \b
    Example:
      strata vcs fetch origin
      strata import git:origin/strata/main
    """
    from strata.sync.git import GitSync

    with open_repo() as repo, GitSync(repo) as sync:
        result = sync.fetch(remote)
    if as_json:
        emit_json(result)
    else:
        for name, commit in sorted(result["branches"].items()):
            click.echo(f"{short(commit)} {remote}/strata/{printable(name)}")


@click.command("import")
@click.argument("source")
@click.option("--no-fetch", is_flag=True, help="Use what the last fetch brought.")
@json_option
def import_(source: str, no_fetch: bool, as_json: bool) -> None:
    """Bring another machine's history in: SOURCE is git:REMOTE/strata/BRANCH.

    Every remote branch B met becomes the branch REMOTE/B here, and every
    shared bookmark REMOTE/NAME; events keep their ids, authors and times.
    Each object is hashed on the way in. One operation: 'strata undo' takes
    the branches away again.

    \b
    Example:
      strata import git:origin/strata/main
      strata history --branch origin/main
    """
    from strata.sync.git import GitSync, import_ref

    with open_repo() as repo, GitSync(repo) as sync:
        result = import_ref(repo, sync, source, fetch=not no_fetch).to_json()
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"Imported {result['events']} event(s) ({result['skipped']} already here) "
            f"as {', '.join(printable(b) for b in result['branches']) or 'no branch'}"
        )


COMMANDS = [vcs, import_]
