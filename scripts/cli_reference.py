"""Write docs/cli.md from the CLI's own help texts.

Usage: .venv/bin/python scripts/cli_reference.py [--check]
With --check, exit 1 when docs/cli.md is out of date instead of writing it.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import click

from strata.cli import cli, load_all

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
WIDTH = 88


def commands() -> list[tuple[str, click.Command]]:
    """Every command as (full name, command), groups expanded."""
    found: list[tuple[str, click.Command]] = []

    def visit(prefix: str, group: click.Group) -> None:
        for name in sorted(group.commands):
            command = group.commands[name]
            full = f"{prefix} {name}".strip()
            if isinstance(command, click.Group):
                if command.invoke_without_command:
                    found.append((full, command))
                visit(full, command)
            else:
                found.append((full, command))

    load_all()
    visit("", cli)
    return found


def _help_text(text: str | None) -> list[str]:
    """A help text as written: dedented, cut at ``\\f``, without click's ``\\b`` markers."""
    text = inspect.cleandoc(text or "").split("\f", 1)[0].rstrip()
    return [line for line in text.splitlines() if line.strip() != "\b"]


def _short_help(command: click.Command) -> str:
    """One line for a group's command list: ``short_help``, else the help's first sentence."""
    if command.short_help:
        return command.short_help
    lines = _help_text(command.help)
    first = lines[: lines.index("")] if "" in lines else lines
    paragraph = " ".join(line.strip() for line in first)
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _metavar(param: click.Parameter) -> str:
    """The placeholder for a parameter's value, spelled the same in every click version."""
    if param.metavar:
        return param.metavar
    if isinstance(param, click.Argument):
        return (param.name or "").upper()
    kind = param.type
    if isinstance(kind, click.Choice):
        return "[" + "|".join(str(choice) for choice in kind.choices) + "]"
    if isinstance(kind, click.Path):
        if not kind.file_okay:
            return "DIRECTORY"
        return "FILE" if not kind.dir_okay else "PATH"
    return kind.name.upper()


def _usage(full: str, command: click.Command, params: list[click.Parameter]) -> str:
    pieces = [f"Usage: strata {full}".rstrip()]
    if any(isinstance(p, click.Option) for p in params):
        pieces.append("[OPTIONS]")
    for param in params:
        if isinstance(param, click.Argument):
            piece = _metavar(param) + ("..." if param.nargs < 0 else "")
            pieces.append(piece if param.required else f"[{piece}]")
    if isinstance(command, click.Group):
        pieces.append(
            "[COMMAND] [ARGS]..." if command.invoke_without_command else "COMMAND [ARGS]..."
        )
    return " ".join(pieces)


def _option_rows(params: list[click.Parameter]) -> list[tuple[str, str]]:
    rows = []
    for param in params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        names = ", ".join(sorted(param.opts, key=len))
        if param.secondary_opts:
            names += " / " + ", ".join(param.secondary_opts)
        if not param.is_flag and not param.count:
            names += " " + _metavar(param)
        help_text = " ".join(line.strip() for line in _help_text(param.help))
        extra = []
        if param.show_default and param.default is not None and not param.is_flag:
            default = param.default
            shown = ", ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            extra.append(f"default: {shown}")
        if isinstance(param.type, (click.IntRange, click.FloatRange)):
            low, high = param.type.min, param.type.max
            if low is not None:
                extra.append(f"x{'>' if param.type.min_open else '>='}{low}")
            if high is not None:
                extra.append(f"x{'<' if param.type.max_open else '<='}{high}")
        if param.required:
            extra.append("required")
        if extra:
            help_text = f"{help_text}  [{'; '.join(extra)}]".strip()
        rows.append((names, help_text))
    return rows


def _table(rows: list[tuple[str, str]]) -> list[str]:
    """Two columns; the right one wrapped at ``WIDTH`` (by textwrap, whatever click does)."""
    width = max(len(left) for left, _ in rows)
    lines = []
    for left, right in rows:
        lines += textwrap.wrap(
            right,
            WIDTH,
            initial_indent=f"  {left.ljust(width)}  ",
            subsequent_indent=" " * (width + 4),
            break_on_hyphens=False,
        ) or [f"  {left}"]
    return lines


def help_page(full: str, command: click.Command) -> str:
    """A command's help, formatted here (not by click, whose layout changes between versions)."""
    # every command inherits the root's help option names, as on the command line
    help_names = cli.context_settings.get("help_option_names", ["--help"])
    with click.Context(
        command, info_name=f"strata {full}".strip(), help_option_names=help_names
    ) as ctx:
        params = command.get_params(ctx)
    lines = [_usage(full, command, params), ""]
    lines += [f"  {line}".rstrip() for line in _help_text(command.help)]
    options = _option_rows(params)
    if options:
        lines += ["", "Options:", *_table(options)]
    if isinstance(command, click.Group):
        subcommands = [
            (name, _short_help(sub))
            for name, sub in sorted(command.commands.items())
            if not sub.hidden
        ]
        lines += ["", "Commands:", *_table(subcommands)]
    return "\n".join(lines)


def render() -> str:
    """The reference as Markdown."""
    parts = [
        "# Command reference",
        "",
        "Generated from the help texts by `scripts/cli_reference.py`; a test keeps it current.",
        "",
        "Output with `--json`, the key names, the error object and the exit codes are",
        'described in [json.md](json.md): objects carry `"schema": 1`, errors exit 1,',
        "usage errors 2.",
        "",
    ]
    for full, command in [("", cli), *commands()]:
        parts += [f"## strata {full}".rstrip(), "", "```", help_page(full, command), "```", ""]
    return "\n".join(parts)


def main() -> None:
    """Write (or with --check, compare) docs/cli.md."""
    text = render()
    if "--check" in sys.argv[1:]:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print("docs/cli.md is out of date: run scripts/cli_reference.py", file=sys.stderr)
            sys.exit(1)
        return
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
