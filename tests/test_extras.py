"""A command whose extra is not installed names the extra in one line and exits 2.

The core (``pip install strata-workspace``) records, diffs, rewinds, runs and
serves MCP and the hooks; model providers, the Workshop and the knowledge
base's documents are extras. Here the extra's package is hidden from a child
``strata`` (``sys.modules[name] = None`` makes its import fail as a missing
package does), and the command must say which extra to install.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CliRunner, ok

HIDING = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from strata.cli import main\n"
    "main(sys.argv[2:])\n"
)

PROVIDER = (
    '\n[providers.srv]\nadapter = "openai-chat"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
)


def without(run_cli: CliRunner, hidden: str, *args: str, cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", HIDING, hidden, *args],
        cwd=cwd,
        env=run_cli.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("openai", ["agent", "--model", "srv", "fix it"], "providers"),
        ("prompt_toolkit,rich", ["chat"], "workshop"),
    ],
    ids=["providers", "workshop"],
)
def test_a_missing_extra_is_named_in_one_line_with_exit_2(
    ws: Path, run_cli: CliRunner, hidden: str, args: list[str], extra: str
) -> None:
    ok(run_cli("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as f:
        f.write(PROVIDER)
    code, _, err = without(run_cli, hidden, *args, cwd=ws)
    assert code == 2, err
    lines = err.splitlines()
    assert "Traceback" not in err and len(lines) <= 2, err
    assert lines[0].startswith("error: ") and f"needs the '{extra}' extra" in lines[0], err
    assert f"pip install 'strata-workspace[{extra}]'" in lines[0]


def test_the_core_records_and_rewinds_without_any_extra(ws: Path, run_cli: CliRunner) -> None:
    hidden = "openai,anthropic,duckdb,openpyxl,docx,pptx,pypdf,prompt_toolkit,rich"
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    for args in (["snapshot", "-m", "one"], ["run", "--", "sh", "-c", "echo two > a.txt"]):
        code, _, err = without(run_cli, hidden, *args, cwd=ws)
        assert code == 0, err
    code, _, err = without(run_cli, hidden, "rewind", "HEAD~1", cwd=ws)
    assert code == 0, err
    assert (ws / "a.txt").read_text() == "one\n"
