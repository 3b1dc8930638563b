"""``strata kb``: the local knowledge base: index a snapshot's files, search them, ask them."""

from __future__ import annotations

import os

import click

from strata.cli.common import (
    emit_json,
    environment_secrets,
    json_option,
    model_option,
    open_model,
    open_repo,
    short,
    warn,
)

MODES = ("bm25", "dense", "hybrid")


@click.group("kb")
def kb() -> None:
    """Search the workspace's documents and code, every hit cited (path, lines, snapshot).

    The index is of one recorded snapshot (HEAD by default, a ref, or the
    Draft) and is brought up to date incrementally: only files whose
    content changed are read again.

    \b
    Example:
      strata kb index
      strata kb search "how do I configure the cache"
      strata kb ask "which port does the server use?"
    """


@kb.command("index")
@click.option("--ref", default=None, metavar="REF", help="Index the files of this ref.")
@click.option("--draft", is_flag=True, help="Index the open Draft's newest revision.")
@click.option(
    "--no-record",
    is_flag=True,
    help="Index HEAD as recorded; do not record the working tree first.",
)
@click.option(
    "--dense/--no-dense",
    default=None,
    help="Also embed the passages for --mode dense and hybrid (the kb-dense extra); "
    "kept on for later runs until --no-dense.",
)
@json_option
def index(ref: str | None, draft: bool, no_record: bool, dense: bool | None, as_json: bool) -> None:
    """Index a snapshot's md, txt, rst, code, html, pdf and docx files.

    By default the working tree is recorded first (like 'strata snapshot';
    nothing is recorded when it is unchanged) and HEAD is indexed. Only the
    files whose content hash differs from the indexed snapshot's are read
    again. A file that cannot be read (binary, damaged, larger than
    [kb] max_file_bytes of config.toml, 16 MiB by default) is skipped with
    a warning.

    \b
    Example:
      strata kb index
      strata kb index --ref HEAD~3      # the files as they were
      strata kb index --draft --json
    """
    with open_repo() as repo:
        report = repo.kb.index(ref=ref, draft=draft, record=not no_record, dense=dense)
    if as_json:
        emit_json(report.to_json())
        return
    for skipped in report.skipped:
        warn(f"skipped {skipped.path}: {skipped.reason}")
    click.echo(
        f"Indexed snapshot {short(report.snapshot_id)} ({report.target}): {report.files} files, "
        f"{report.chunks} passages; {report.added} added, {report.changed} changed, "
        f"{report.removed} removed, {report.unchanged} unchanged, {len(report.skipped)} skipped "
        f"({report.duration_ms} ms)."
    )
    if report.dense:
        click.echo(f"Dense vectors: {report.embedded} passages embedded.")


def _search_options(func: click.decorators.FC) -> click.decorators.FC:
    func = click.option(
        "--draft", is_flag=True, help="Search the Draft's index ('kb index --draft')."
    )(func)
    func = click.option(
        "-k",
        "k",
        type=click.IntRange(min=1, max=100),
        default=5,
        show_default=True,
        help="How many passages.",
    )(func)
    return click.option(
        "--mode",
        type=click.Choice(MODES),
        default="bm25",
        show_default=True,
        help="bm25: keywords; dense: embeddings (needs 'kb index --dense'); hybrid: both, "
        "fused by reciprocal rank.",
    )(func)


@kb.command("search")
@click.argument("query")
@_search_options
@json_option
def search(query: str, mode: str, k: int, draft: bool, as_json: bool) -> None:
    """Find the passages that best match QUERY; each hit is cited.

    A citation is PATH:START-END@SNAPSHOT: the lines of the file in that
    snapshot (for a PDF, lines of its extracted text, with the page; for a
    DOCX, paragraph numbers).

    \b
    Example:
      strata kb search "retry policy"
      strata kb search "how are errors reported" --mode hybrid -k 10 --json
    """
    with open_repo() as repo:
        result = repo.kb.search(query, mode=mode, k=k, draft=draft)
    if as_json:
        emit_json(result.to_json())
        return
    for line in result.warnings:
        warn(line)
    if not result.hits:
        click.echo("No passage matches.")
    for n, hit in enumerate(result.hits, start=1):
        click.echo(f"[{n}] {hit.citation}  score {hit.score:.3g}")
        click.echo(_indent(hit.text))


@kb.command("ask")
@click.argument("question")
@_search_options
@model_option(
    "The provider (and model) to answer with; default $STRATA_MODEL or [model] default "
    "of config.toml. With none configured, the passages are printed."
)
@json_option
def ask(question: str, mode: str, k: int, draft: bool, model: str | None, as_json: bool) -> None:
    """Answer QUESTION from the indexed passages only, and print their citations.

    The model sees only the retrieved passages; its call is recorded (secrets
    redacted) as a trace linked from a kb_ask event, so it replays offline.
    With no provider configured, the passages are printed instead.

    \b
    Example:
      strata kb ask "how do I run the tests?"
      strata kb ask --model local "what does the cache key contain?" --json
    """
    from strata.providers.config import default_choice

    with open_repo() as repo:
        provider = None
        if model is not None or default_choice(repo.config.raw, os.environ) is not None:
            provider, _ = open_model(repo, model)
        secrets = environment_secrets()
        result = repo.kb.ask(
            question, provider=provider, k=k, mode=mode, draft=draft, secrets=secrets
        )
    if as_json:
        emit_json(result.to_json())
        return
    for line in result.search.warnings:
        warn(line)
    hits = result.search.hits
    if result.answer is not None:
        click.echo(result.answer.strip())
        click.echo()
        click.echo("Sources:")
        for n, hit in enumerate(hits, start=1):
            click.echo(f"[{n}] {hit.citation}")
        return
    click.echo("No model provider is configured; the passages that match:")
    if not hits:
        click.echo("No passage matches.")
    for n, hit in enumerate(hits, start=1):
        click.echo(f"[{n}] {hit.citation}  score {hit.score:.3g}")
        click.echo(_indent(hit.text))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) + "\n"


COMMANDS = [kb]
