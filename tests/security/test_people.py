"""Strata works for an unprivileged user as for root (the base of the security suite).

Every test in ``tests/security`` that touches permissions runs as both, through
the ``person`` and ``cli_as`` fixtures of ``tests/conftest.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import CliRunner, Person


def test_a_person_records_and_rewinds_in_a_folder_they_own(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    person.run(["mkdir", str(ws)])
    assert ws.stat().st_uid == person.uid
    assert cli_as("init", "--no-snapshot", cwd=ws)[0] == 0
    person.run(["sh", "-c", "echo one > a.txt"], cwd=ws)
    code, out, err = cli_as("snapshot", "-m", "one", "--json", cwd=ws)
    assert code == 0, err
    first = json.loads(out)["event_id"]
    person.run(["sh", "-c", "echo two > a.txt"], cwd=ws)
    assert cli_as("snapshot", "-m", "two", cwd=ws)[0] == 0
    code, _, err = cli_as("rewind", first, cwd=ws)
    assert code == 0, err
    assert (ws / "a.txt").read_text() == "one\n"
    # everything Strata wrote belongs to the person who ran it
    assert {p.stat().st_uid for p in (ws / ".strata").rglob("*")} == {person.uid}
