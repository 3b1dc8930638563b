"""The docs name every command, and the CLI reference matches the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import cli_reference  # noqa: E402

COMMANDS = [name for name, _ in cli_reference.commands()]


def test_there_are_commands() -> None:
    assert {"init", "snapshot", "history", "diff", "rewind", "restore"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_readme_names_every_command(name: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(rf"`strata {re.escape(name)}\b", readme), f"README.md lacks `strata {name}`"


@pytest.mark.parametrize("name", COMMANDS)
def test_cli_reference_names_every_command(name: str) -> None:
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"## strata {name}\n" in doc


@pytest.mark.parametrize("name", COMMANDS)
def test_help_ends_with_an_example(name: str) -> None:
    command = dict(cli_reference.commands())[name]
    assert "Example:" in (command.help or ""), f"strata {name} --help has no example"


def test_cli_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_readme_starts_with_the_two_setup_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```sh") + 1 : lines.index("```")]
    assert [line.split("#")[0].strip() for line in block] == [
        "scripts/dev demo",
        "scripts/dev test",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/dev test" in ci


def test_the_readmes_python_examples_run_as_written(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    shared = tmp_path / "shared"  # the API examples make "my-project" and build on it
    shared.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    # the agent the examples name, as a user would have one on PATH
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "my-agent").write_text("#!/bin/sh\necho edited by my-agent >> agent.txt\n")
    (tools / "my-agent").chmod(0o755)
    env["PATH"] = f"{tools}:{env.get('PATH', '')}"
    for n, block in enumerate(blocks):
        if "my-project" in block:
            cwd = shared
        else:  # an example that works on the project it runs in
            cwd = tmp_path / f"project-{n}"
            cwd.mkdir()
            subprocess.run(
                [sys.executable, "-m", "strata", "init"],
                cwd=cwd,
                env=env,
                check=True,
                capture_output=True,
            )
        script = tmp_path / f"example-{n}.py"
        script.write_text(block, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"README example {n + 1}:\n{block}\n{done.stderr}"


def test_format_4_5_is_the_jsonl_drivers_module_documentation() -> None:
    """docs/format.md §4.5 quotes ``strata/ledger/drivers/jsonl.py``'s docstring, the spec."""
    import ast

    source = (ROOT / "src" / "strata" / "ledger" / "drivers" / "jsonl.py").read_text("utf-8")
    spec = ast.get_docstring(ast.parse(source), clean=False) or ""
    doc = (ROOT / "docs" / "format.md").read_text(encoding="utf-8")
    section = doc[doc.index("### 4.5 JSONL driver") :]
    start = section.index("```text\n") + len("```text\n")
    quoted = section[start : section.index("\n```", start)]
    assert quoted == spec.strip("\n"), (
        "docs/format.md §4.5 differs from the docstring of strata/ledger/drivers/jsonl.py: "
        "copy the docstring into the ```text block"
    )
