"""Line attribution over versions (strata.diff.blame), the diff viewer's hunk credits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.diff.blame import blame


def test_each_line_is_credited_to_the_last_step_that_wrote_it():
    found = blame(
        b"a\nb\nc\n",
        [("e1", b"a\nB\nc\n"), ("e2", b"x\na\nB\nc\nd\n"), ("e3", b"x\na\nB\nd\n")],
    )
    assert found.written == ("e2", None, "e1", "e2")
    assert found.removed == {1: "e1", 2: "e3"}  # b removed by e1, c by e3


def test_an_unchanged_step_and_a_missing_final_newline():
    found = blame(b"", [("e1", b"one\ntwo"), ("e2", b"one\ntwo")])
    assert found.written == ("e1", "e1") and found.removed == {}


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n"]), max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.lists(lines, min_size=1, max_size=5))
def test_the_credits_match_the_last_version(versions: list[list[str]]):
    first, *rest = ("".join(v).encode() for v in versions)
    steps = [(f"e{i}", data) for i, data in enumerate(rest)]
    found = blame(first, steps)
    last = steps[-1][1] if steps else first
    assert len(found.written) == len(last.splitlines())
    # a line credited to no step is a line of the first version, never removed
    assert set(found.removed) <= set(range(len(first.splitlines())))
    if not steps or all(data == first for _, data in steps):
        assert found.written == (None,) * len(first.splitlines()) and not found.removed
