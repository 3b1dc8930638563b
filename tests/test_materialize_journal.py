"""A restore's journal holds every action exactly: read back, it is the same plan."""

from __future__ import annotations

import dataclasses
import json

from strata.store.materialize import Action, actions_from_record, journal_record


def test_a_journal_record_reads_back_as_the_same_actions() -> None:
    actions = [
        Action("mkdir", "a", mode=0o700),
        Action(
            "write", "a/f.txt", oid="ab" * 32, mode=0o644, before=[0o644, 3, 10, 11, 12, "cd" * 32]
        ),
        Action("write", "new.txt", oid="ef" * 32, mode=0o755),
        Action("symlink", "link", oid="01" * 32, before=[0o777, 5, -1, 7, 9, "23" * 32]),
        Action("remove", "gone", before=[0o600, 0, 1, 2, 3, "45" * 32]),
        Action("chmod", "a", mode=0o755),
        Action("rmdir", "old"),
    ]
    record = journal_record(actions, operation={"id": "op1"})
    assert record["operation"] == {"id": "op1"}
    assert record["actions"] == [dataclasses.asdict(a) for a in actions]
    assert actions_from_record(json.loads(json.dumps(record))) == actions
