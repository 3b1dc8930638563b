"""Confinement holds where the command classifier errs.

Each attack below got past the classifier in a hostile-agent review: the
gateway allows it (or a person approves it, ``--yes``), and it runs through
``strata exec``, which runs every command inside bubblewrap with the profile's
confinement. What each tries to write must stay as it was. Run as root and as
an unprivileged user (the ``person`` fixture): root reads and writes
everything, so only confinement can stop it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, Person


def _workspace(person: Person, home_of: Path, cli_as: CliRunner, profile: str) -> Path:
    """A git repository and Strata workspace of ``person``'s, with ``profile`` configured."""
    ws = home_of / "ws"
    person.run(["mkdir", str(ws)])
    made = person.run(
        ["sh", "-c", "echo a > f.txt && git init -q && echo the-host > ../outside.txt"], cwd=ws
    )
    assert made.returncode == 0, made.stderr
    code, _, err = cli_as("init", cwd=ws)
    assert code == 0, err
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(f'\n[gateway]\nprofile = "{profile}"\n')
    return ws


def _exec(cli_as: CliRunner, ws: Path, command: str) -> dict[str, Any]:
    """``strata exec --yes --json --shell COMMAND``: its answer (the command ran)."""
    code, out, err = cli_as("exec", "--yes", "--json", "--shell", command, cwd=ws)
    assert out, f"exit {code}: {err}"
    answer: dict[str, Any] = json.loads(out)
    assert answer["ran"] is True, answer
    return answer


@pytest.mark.parametrize(
    ("command", "target"),
    [
        ("sed -n 'w out.txt' f.txt", "out.txt"),  # a text tool's own write feature
        ("git -c core.fsmonitor='touch pwned' status", "pwned"),  # per-command git config
    ],
)
def test_read_only_writes_nothing_though_the_classifier_allows_it(
    person: Person, home_of: Path, cli_as: CliRunner, command: str, target: str
) -> None:
    ws = _workspace(person, home_of, cli_as, "read-only")
    answer = _exec(cli_as, ws, command)
    assert answer["decision"] == "allow" and answer["risk"] == "low", answer  # the classifier
    assert not (ws / target).exists(), answer  # the confinement
    assert answer["changes"] == []


_HIDDEN = base64.b64encode(b"echo pwned > ../outside.txt; echo inside > in.txt").decode()


@pytest.mark.parametrize(
    "command",
    [
        "cd .strata && echo 'profile = \"full\"' >> config.toml",  # the policy, through cd
        "echo '[gateway]' >> cfg",  # the policy, through a symlink to it
        "echo pwned > out",  # a file outside, through a symlink to it
        f"echo {_HIDDEN} | base64 -d | sh",  # code piped into a shell
    ],
)
def test_workspace_write_keeps_strata_and_the_outside_unchanged(
    person: Person, home_of: Path, cli_as: CliRunner, command: str
) -> None:
    """Approved commands (--yes) that rewrite the policy through ``cd .strata`` or a
    symlink to it, write outside through a symlink, or hide it all in ``| base64 -d
    | sh``: only a write inside the workspace lands."""
    ws = _workspace(person, home_of, cli_as, "workspace-write")
    config = ws / ".strata" / "config.toml"
    policy = config.read_text()
    outside = home_of / "outside.txt"
    person.run(["ln", "-s", ".strata/config.toml", "cfg"], cwd=ws)
    person.run(["ln", "-s", "../outside.txt", "out"], cwd=ws)
    _exec(cli_as, ws, command)
    assert config.read_text() == policy
    assert outside.read_text() == "the-host\n"
    if "base64" in command:
        assert (ws / "in.txt").read_text() == "inside\n"  # the workspace itself is writable


def test_full_alone_lifts_it_and_only_from_the_configuration(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, "workspace-write")
    # a caller may ask for a looser profile: the decision follows it, the confinement not
    answer = _exec(cli_as, ws, "echo pwned > ../outside.txt")
    _, out, err = cli_as(
        "exec", "--yes", "--json", "--profile", "full", "--shell", "echo x > ../outside.txt",
        cwd=ws,
    )  # fmt: skip
    assert (home_of / "outside.txt").read_text() == "the-host\n", (answer, out, err)
    config = ws / ".strata" / "config.toml"
    config.write_text(config.read_text().replace('"workspace-write"', '"full"'))
    _exec(cli_as, ws, "echo lifted > ../outside.txt")
    assert (home_of / "outside.txt").read_text() == "lifted\n"
