"""strata merge: known conflict sets, semantic merges, the review, resume, undo and check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ok
from strata import Repository
from strata.merge.semantic import _structured_merge, merge_file

BASE_JSON = b'{\n  "a": 1,\n  "b": 2\n}\n'


def test_text_three_way():
    clean = merge_file("t.txt", b"a\nb\nc\nd\ne\n", b"A\nb\nc\nd\ne\n", b"a\nb\nc\nd\nE\n")
    assert clean.merged == b"A\nb\nc\nd\nE\n"
    clash = merge_file("t.txt", b"a\nb\n", b"a\nB1\n", b"a\nB2\n")
    assert clash.merged is None and [c.kind for c in clash.conflicts] == ["text"]


def test_json_different_keys_merge_only_with_the_semantic_policy():
    ours = b'{\n  "a": 10,\n  "b": 2\n}\n'
    theirs = b'{\n  "a": 1,\n  "b": 20\n}\n'
    assert merge_file("c.json", BASE_JSON, ours, theirs, policy="text").merged is None
    merged = merge_file("c.json", BASE_JSON, ours, theirs, policy="semantic")
    assert merged.merged == b'{\n  "a": 10,\n  "b": 20\n}\n'
    same_key = merge_file(
        "c.json", BASE_JSON, ours, b'{\n  "a": 11,\n  "b": 2\n}\n', policy="semantic"
    )
    assert [(c.kind, c.where) for c in same_key.conflicts] == [("key", "/a")]


def test_yaml_nested_keys():
    base = b"web:\n  port: 80\n  host: a\n"
    ours = b"web:\n  port: 8080\n  host: a\n"
    theirs = b"web:\n  port: 80\n  host: b\n"
    result = merge_file("s.yaml", base, ours, theirs, policy="semantic")
    assert (
        result.merged is not None and b"port: 8080" in result.merged and b"host: b" in result.merged
    )
    clash = merge_file("s.yaml", base, ours, b"web:\n  port: 81\n  host: a\n", policy="semantic")
    assert [(c.kind, c.where) for c in clash.conflicts] == [("key", "/web/port")]


BASE_TOML = b"""# the service
[server]
host = "a"  # where it listens
port = 80

[limits]
# requests per second
rate = 10
burst = 20
"""


def test_toml_different_keys_merge_keeping_comments_and_order():
    ours = BASE_TOML.replace(b"port = 80", b"port = 8080")
    theirs = BASE_TOML.replace(b'host = "a"', b'host = "b"')
    assert merge_file("s.toml", BASE_TOML, ours, theirs, policy="text").merged is None  # adjacent
    result = merge_file("s.toml", BASE_TOML, ours, theirs, policy="semantic")
    assert result.merged == BASE_TOML.replace(b"port = 80", b"port = 8080").replace(
        b'host = "a"', b'host = "b"'
    )
    added = merge_file(
        "s.toml",
        BASE_TOML,
        ours,
        BASE_TOML.replace(b"port = 80\n", b"port = 81\ntls = true  # new\n").replace(
            b"burst = 20\n", b""
        ),
        policy="semantic",
    )
    assert added.merged is None  # port changed on both sides
    keys = merge_file(
        "s.toml",
        BASE_TOML,
        ours,
        BASE_TOML.replace(b"burst = 20\n", b"burst = 30\nqueue = 5  # new\n"),
        policy="semantic",
    )
    assert keys.merged is not None
    text = keys.merged.decode()
    assert (
        "# the service" in text and "# requests per second" in text and "# where it listens" in text
    )
    assert "port = 8080" in text and "burst = 30" in text and "queue = 5  # new" in text
    assert text.index("[server]") < text.index("[limits]")
    clash = merge_file(
        "s.toml", BASE_TOML, ours, BASE_TOML.replace(b"port = 80", b"port = 81"), policy="semantic"
    )
    assert [(c.kind, c.where) for c in clash.conflicts] == [("key", "/server/port")]


def test_yaml_merge_keeps_comments_and_order():
    base = b"# deployment\nweb:\n  image: app:1  # pinned\n  replicas: 2\ndb:\n  size: small\n"
    ours = base.replace(b"replicas: 2", b"replicas: 3")
    theirs = base.replace(b"replicas: 2", b"replicas: 2\n  debug: false")
    theirs = theirs.replace(b"size: small", b"size: large  # for the launch")
    assert merge_file("d.yml", base, ours, theirs, policy="text").merged is None
    result = merge_file("d.yml", base, ours, theirs, policy="semantic")
    assert result.merged == (
        b"# deployment\nweb:\n  image: app:1  # pinned\n  replicas: 3\n  debug: false\n"
        b"db:\n  size: large  # for the launch\n"
    )


COMPOSE = b"""# the stack
services:
  web:
    image: "web:1"   # pinned
    restart: always
    ports:
      - "80:80"
      - "443:443"
  db:
    image: postgres:16
"""


def test_yaml_merge_keeps_the_file_s_list_indentation_and_quotes():
    ours = COMPOSE.replace(b'"web:1"', b'"web:2"')
    theirs = COMPOSE.replace(b"restart: always", b"restart: unless-stopped")
    assert merge_file("compose.yaml", COMPOSE, ours, theirs, policy="text").merged is None
    result = merge_file("compose.yaml", COMPOSE, ours, theirs, policy="semantic")
    assert result.merged == ours.replace(b"restart: always", b"restart: unless-stopped")


def test_malformed_json_keeps_the_text_conflict():
    result = merge_file("c.json", BASE_JSON, b'{"a": 1,\n', b'{"a": 2,\n', policy="semantic")
    assert [c.kind for c in result.conflicts] == ["text"]


def test_python_by_top_level_definition():
    base = b"def f(): return 1\ndef g(): return 2\n"
    ours = b"def f(): return 10\ndef g(): return 2\n"
    theirs = b"def f(): return 1\ndef g(): return 20\n"
    assert merge_file("m.py", base, ours, theirs, policy="text").merged is None  # adjacent lines
    merged = merge_file("m.py", base, ours, theirs, policy="semantic")
    assert merged.merged == b"def f(): return 10\ndef g(): return 20\n"
    both = merge_file(
        "m.py", base, ours, b"def f(): return 11\ndef g(): return 2\n", policy="semantic"
    )
    assert [(c.kind, c.where) for c in both.conflicts] == [("definition", "m.py::f")]


def test_binary_is_never_merged():
    result = merge_file("i.bin", b"\0a", b"\0b", b"\0c", policy="semantic")
    assert result.merged is None and [c.kind for c in result.conflicts] == ["binary"]
    gone = merge_file("t.txt", b"a\n", None, b"b\n")
    assert [c.kind for c in gone.conflicts] == ["delete"]


def _fork(repo: Repository, ws: Path, ours: dict[str, bytes], theirs: dict[str, bytes]) -> None:
    repo.snapshot(message="base")
    repo.branch_create("side", "HEAD")
    for name, data in ours.items():
        (ws / name).write_bytes(data)
    repo.snapshot(message="ours")
    repo.branch_switch("side")
    for name, data in theirs.items():
        if data == b"<gone>":
            (ws / name).unlink()
        else:
            (ws / name).write_bytes(data)
    repo.snapshot(message="theirs")
    repo.branch_switch("main")


def test_semantic_merge_recorded_undone_and_checked(repo: Repository, ws: Path):
    (ws / "c.json").write_bytes(BASE_JSON)
    (ws / "keep.txt").write_text("k\n")
    _fork(
        repo,
        ws,
        {"c.json": b'{\n  "a": 10,\n  "b": 2\n}\n'},
        {"c.json": b'{\n  "a": 1,\n  "b": 20\n}\n', "new.txt": b"n\n"},
    )
    assert repo.merge("main", "side").event is None  # text: the lines conflict
    result = repo.merge("main", "side", policy="semantic", message="combine")
    assert result.event is not None and result.event.action_type == "merge"
    data = result.event.data
    assert data["policy"] == "semantic" and data["conflicts"] == [] and data["base"]
    assert (ws / "c.json").read_bytes() == b'{\n  "a": 10,\n  "b": 20\n}\n'
    assert (ws / "new.txt").read_text() == "n\n"
    assert repo.check() == []
    repo.undo()
    assert (ws / "c.json").read_bytes() == b'{\n  "a": 10,\n  "b": 2\n}\n'
    assert not (ws / "new.txt").exists()


def test_two_branches_changing_different_keys_of_a_toml_file(repo: Repository, ws: Path):
    (ws / "service.toml").write_bytes(BASE_TOML)
    _fork(
        repo,
        ws,
        {"service.toml": BASE_TOML.replace(b"rate = 10", b"rate = 15")},
        {"service.toml": BASE_TOML.replace(b"burst = 20", b"burst = 30")},
    )
    assert repo.merge("main", "side").event is None  # text: adjacent lines conflict
    result = repo.merge("main", "side", policy="semantic")
    assert result.event is not None and result.event.data["conflicts"] == []
    merged = (ws / "service.toml").read_bytes()
    assert merged == BASE_TOML.replace(b"rate = 10", b"rate = 15").replace(
        b"burst = 20", b"burst = 30"
    )
    assert repo.check() == []


def test_two_branches_changing_one_key_of_a_toml_file_conflict(repo: Repository, ws: Path):
    (ws / "service.toml").write_bytes(BASE_TOML)
    _fork(
        repo,
        ws,
        {"service.toml": BASE_TOML.replace(b"rate = 10", b"rate = 11")},
        {"service.toml": BASE_TOML.replace(b"rate = 10", b"rate = 12")},
    )
    head = repo.head()
    result = repo.merge("main", "side", policy="semantic")
    assert result.event is None
    assert [(c.kind, c.where) for c in result.plan.conflicts] == [("key", "/limits/rate")]
    assert repo.head().id == head.id  # nothing recorded
    assert (ws / "service.toml").read_bytes() == BASE_TOML.replace(b"rate = 10", b"rate = 11")


def test_mode_conflict_is_never_merged(repo: Repository, ws: Path):
    (ws / "run.sh").write_text("echo\n")
    repo.snapshot(message="base")
    repo.branch_create("side", "HEAD")
    os.chmod(ws / "run.sh", 0o755)
    (ws / "run.sh").write_text("echo ours\n")
    repo.snapshot(message="ours")
    repo.branch_switch("side")
    os.chmod(ws / "run.sh", 0o600)
    (ws / "run.sh").write_text("echo theirs\n")
    repo.snapshot(message="theirs")
    repo.branch_switch("main")
    result = repo.merge("main", "side", policy="semantic")
    assert result.event is None and [c.kind for c in result.plan.conflicts] == ["mode"]
    resolved = repo.merge(
        "main",
        "side",
        resolutions={"run.sh": {"choices": ["theirs"], "rationale": "theirs is safer"}},
    )
    assert resolved.event is not None and (ws / "run.sh").read_text() == "echo theirs\n"
    artifact = resolved.event.data["merge_resolution"]
    assert resolved.event.artifacts == (artifact,)
    assert b"theirs is safer" in repo.objects.get(artifact)


def test_rename_against_edit(repo: Repository, ws: Path):
    (ws / "old.txt").write_text("one\ntwo\nthree\n")
    _fork(
        repo,
        ws,
        {"old.txt": b"one\ntwo\nTHREE\n"},
        {"old.txt": b"<gone>", "new.txt": b"one\ntwo\nthree\n"},
    )
    result = repo.merge("main", "side")
    assert result.event is not None, result.plan.conflicts
    assert not (ws / "old.txt").exists()
    assert (ws / "new.txt").read_text() == "one\ntwo\nTHREE\n"


def test_merge_into_another_branch_moves_only_that_branch(repo: Repository, ws: Path):
    (ws / "a.txt").write_text("a\nb\nc\n")
    (ws / "b.txt").write_text("1\n")
    repo.snapshot(message="base")
    repo.branch_create("side", "HEAD")
    (ws / "a.txt").write_text("A\nb\nc\n")
    main_tip = repo.snapshot(message="main edits a").event
    repo.branch_switch("side")
    (ws / "b.txt").write_text("2\n")
    side_tip = repo.snapshot(message="side edits b").event
    repo.branch_switch("main")
    (ws / "c.txt").write_text("unrecorded\n")
    result = repo.merge("side", "main")
    assert result.event is not None and result.branch == "side" and not result.fast_forward
    assert result.event.branch == "side" and result.event.parent_event_id == side_tip.id
    assert result.event.data["right"] == main_tip.id
    # Published and HEAD did not move: main's files, the unrecorded work untouched
    assert (ws / "a.txt").read_text() == "A\nb\nc\n" and (ws / "b.txt").read_text() == "1\n"
    assert (ws / "c.txt").read_text() == "unrecorded\n"
    assert repo.head().id == main_tip.id
    assert repo.resolve("side").event.id == result.event.id
    merged = repo.show("side", "a.txt"), repo.show("side", "b.txt")
    assert merged == (b"A\nb\nc\n", b"2\n")
    assert repo.check() == []
    repo.undo()
    assert repo.resolve("side").event.id == side_tip.id


def test_fast_forward_and_no_ff(repo: Repository, ws: Path):
    (ws / "a.txt").write_text("a\n")
    repo.snapshot(message="base")
    repo.branch_create("side", "HEAD")
    base = repo.head()
    repo.branch_switch("side")
    (ws / "a.txt").write_text("side\n")
    side_tip = repo.snapshot(message="side ahead").event
    repo.branch_switch("main")
    assert (ws / "a.txt").read_text() == "a\n"
    ff = repo.merge("main", "side")
    assert ff.fast_forward and ff.event is not None and ff.event.id == side_tip.id
    assert repo.head().id == side_tip.id and repo.resolve("main").event.id == side_tip.id
    assert (ws / "a.txt").read_text() == "side\n"
    assert repo.check() == []
    repo.undo()
    assert repo.head().id == base.id and (ws / "a.txt").read_text() == "a\n"
    recorded = repo.merge("main", "side", no_ff=True)
    assert not recorded.fast_forward and recorded.event is not None
    assert recorded.event.action_type == "merge" and recorded.event.parent_event_id == base.id
    assert recorded.event.data["right"] == side_tip.id and recorded.event.data["base"] == base.id
    assert repo.head().id == recorded.event.id and (ws / "a.txt").read_text() == "side\n"
    # merged already: B is part of A now
    from strata.errors import UsageError

    with pytest.raises(UsageError, match="already part of"):
        repo.merge("main", "side")
    assert repo.check() == []


def test_merge_at_a_point_no_branch_ends_starts_a_branch(repo: Repository, ws: Path):
    (ws / "a.txt").write_text("a\nb\n")
    first = repo.snapshot(message="first").event
    (ws / "a.txt").write_text("A\nb\n")
    repo.snapshot(message="second")
    repo.branch_create("side", first.id)
    repo.branch_switch("side")
    (ws / "b.txt").write_text("b\n")
    repo.snapshot(message="side")
    repo.branch_switch("main")
    result = repo.merge(first.id, "side", no_ff=True)
    assert result.event is not None and result.branch == "main-2"
    assert repo.resolve("main-2").event.id == result.event.id
    assert repo.show("main-2", "a.txt") == b"a\nb\n"
    assert not (ws / "b.txt").exists()  # Published stays at main


def test_cli_no_ff_and_fast_forward(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("a\n")
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    ok(run_cli("branch", "create", "side", "HEAD", cwd=ws))
    ok(run_cli("branch", "switch", "side", cwd=ws))
    (ws / "a.txt").write_text("b\n")
    ok(run_cli("snapshot", "-m", "side", cwd=ws))
    ok(run_cli("branch", "switch", "main", cwd=ws))
    code, out, _ = run_cli("merge", "main", "side", "--no-ff", "--json", cwd=ws)
    data = json.loads(out)
    assert code == 0 and data["merged"] and not data["fast_forward"] and data["branch"] == "main"
    ok(run_cli("undo", cwd=ws))
    code, out, _ = run_cli("merge", "main", "side", cwd=ws)
    assert code == 0 and "Fast-forwarded main" in out
    assert (ws / "a.txt").read_text() == "b\n"


def _typed(run_cli, ws: Path, text: str) -> tuple[int, str, str]:
    """``strata merge --resume --review`` with ``text`` typed at its prompts."""
    proc = subprocess.run(
        [sys.executable, "-m", "strata", "merge", "--resume", "--review"],
        cwd=ws,
        env=run_cli.env(),
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_review_interrupted_then_resumed(run_cli, ws: Path):
    ok(run_cli("init", cwd=ws))
    (ws / "t.txt").write_text("a\nb\nc\nd\ne\nf\ng\n")
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    ok(run_cli("branch", "create", "side", "HEAD", cwd=ws))
    (ws / "t.txt").write_text("a\nB1\nc\nd\ne\nF1\ng\n")
    ok(run_cli("snapshot", "-m", "ours", cwd=ws))
    ok(run_cli("branch", "switch", "side", cwd=ws))
    (ws / "t.txt").write_text("a\nB2\nc\nd\ne\nF2\ng\n")
    ok(run_cli("snapshot", "-m", "theirs", cwd=ws))
    ok(run_cli("branch", "switch", "main", cwd=ws))
    code, out, _ = run_cli("merge", "main", "side", "--json", cwd=ws)
    assert code == 1
    listed = json.loads(out)
    assert listed["merged"] is False and [c["where"] for c in listed["conflicts"]] == [
        "hunk 1",
        "hunk 2",
    ]
    # the first hunk answered, then the input ends: the review is kept
    code, _, err = _typed(run_cli, ws, "ours\n")
    assert code == 1 and "--resume" in err and "Traceback" not in err
    code, out, err = _typed(run_cli, ws, "both\nkeep both fixes\n")
    assert code == 0, err
    assert (ws / "t.txt").read_text() == "a\nB1\nc\nd\ne\nF1\nF2\ng\n"
    ok(run_cli("check", cwd=ws))
    ok(run_cli("undo", cwd=ws))
    assert (ws / "t.txt").read_text() == "a\nB1\nc\nd\ne\nF1\ng\n"
    ok(run_cli("check", cwd=ws))


def test_compare_two_attempts_with_their_results(repo: Repository, ws: Path):
    (ws / "app.py").write_text("def f(): return 1\ndef g(): return 2\n")
    _fork(
        repo,
        ws,
        {"app.py": b"def f(): return 10\ndef g(): return 2\n"},
        {"app.py": b"def f(): return 11\ndef g(): return 20\n"},
    )
    repo.record_result("unit", exit_code=0, duration_ms=5, anchor="side")
    found = repo.compare("main", "side").to_json()
    assert found["both_changed"] == ["app.py::f"]
    assert found["only_right"] == ["app.py::g"] and found["only_left"] == []
    assert found["left"]["results"] == []
    assert [r["name"] for r in found["right"]["results"]] == ["unit"]


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "{\n", "}\n"]), max_size=12)


@settings(max_examples=60, deadline=None)
@given(base=lines, mine=lines)
def test_merge_of_one_side_is_that_side(base, mine):
    b, x = "".join(base).encode(), "".join(mine).encode()
    for policy in ("text", "semantic"):
        assert merge_file("t.txt", b, x, x, policy=policy).merged == x
        assert merge_file("t.txt", b, b, x, policy=policy).merged == x
        assert merge_file("t.txt", b, x, b, policy=policy).merged == x


def test_edited_hunk_and_both(repo: Repository, ws: Path):
    (ws / "t.txt").write_text("a\nb\nc\nd\ne\nf\ng\n")
    _fork(repo, ws, {"t.txt": b"a\nB1\nc\nd\ne\nF1\ng\n"}, {"t.txt": b"a\nB2\nc\nd\ne\nF2\ng\n"})
    pending = repo.merge("main", "side")
    assert [c.where for c in pending.plan.conflicts] == ["hunk 1", "hunk 2"]
    no_reason = {"t.txt": {"choices": [{"edit": "B3"}, "both"], "rationale": "  "}}
    assert repo.merge("main", "side", resolutions=no_reason).event is None
    done = repo.merge(
        "main",
        "side",
        resolutions={"t.txt": {"choices": [{"edit": "B3"}, "both"], "rationale": "B3 is both"}},
    )
    assert done.event is not None
    assert (ws / "t.txt").read_text() == "a\nB3\nc\nd\ne\nF1\nF2\ng\n"
    assert [c["where"] for c in done.event.data["conflicts"]] == ["hunk 1", "hunk 2"]


keys = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"])
scalars = st.one_of(st.integers(-5, 5), st.booleans(), st.sampled_from(["x", "y z", "#not"]))
tables = st.dictionaries(keys, st.one_of(scalars, st.dictionaries(keys, scalars, max_size=3)))


def _edit(doc: dict, changes: dict) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@settings(max_examples=60, deadline=None)
@given(base=tables, ours=st.dictionaries(keys, st.one_of(st.none(), scalars)), data=st.data())
def test_toml_and_yaml_merges_of_disjoint_keys_hold_both_sides(base, ours, data):
    import io

    import tomlkit
    from ruamel.yaml import YAML

    from strata.semantic.structured import load

    free = [k for k in ["alpha", "beta", "gamma", "delta", "eps", "zeta"] if k not in ours]
    theirs = data.draw(st.dictionaries(st.sampled_from(free), st.one_of(st.none(), scalars)))
    o, t = _edit(base, ours), _edit(base, theirs)
    want = _edit(o, theirs)

    def yaml_text(value: dict) -> bytes:
        out = io.StringIO()
        YAML().dump(value, out)
        return out.getvalue().encode()

    for path, write in (
        ("c.toml", lambda v: ("# settings\n" + tomlkit.dumps(v)).encode()),
        ("c.yaml", lambda v: b"# settings\n" + yaml_text(v)),
    ):
        result = merge_file(path, write(base), write(o), write(t), policy="semantic")
        assert result.merged is not None, result.conflicts
        kind = path.rsplit(".", 1)[1]
        assert (load(kind, result.merged.decode(), "merged") or {}) == want
        # the merge by key itself (used where the lines conflict), comments kept
        by_key = _structured_merge(path, kind, write(base), write(o), write(t))
        assert by_key is not None and by_key.merged is not None
        assert (load(kind, by_key.merged.decode(), "merged") or {}) == want
        assert by_key.merged.startswith(b"# settings\n")
