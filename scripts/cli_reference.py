"""Write docs/cli.md from the CLI's own help texts.

Usage: .venv/bin/python scripts/cli_reference.py [--check]
With --check, exit 1 when docs/cli.md is out of date instead of writing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from strata.cli import cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


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

    visit("", cli)
    return found


def render() -> str:
    """The reference as Markdown."""
    parts = [
        "# Command reference",
        "",
        "Generated from `strata --help` by `scripts/cli_reference.py`; a test keeps it current.",
        "",
        "Output with `--json`, the key names, the error object and the exit codes are",
        'described in [json.md](json.md): objects carry `"schema": 1`, errors exit 1,',
        "usage errors 2.",
        "",
    ]
    with click.Context(cli, info_name="strata", terminal_width=88, max_content_width=88) as ctx:
        parts += ["## strata", "", "```", cli.get_help(ctx), "```", ""]
    for full, command in commands():
        with click.Context(
            command, info_name=f"strata {full}", terminal_width=88, max_content_width=88
        ) as ctx:
            parts += [f"## strata {full}", "", "```", command.get_help(ctx), "```", ""]
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
