"""The thin client's JSON (``strata._wire``) is ``json``'s, byte for byte, without its import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata import _wire

# what the client sends and reads: strings (lone surrogates too: undecodable argv bytes),
# numbers, booleans, null, lists and str-keyed objects
_TEXT = st.text(st.characters(codec=None, exclude_categories=()))
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


@given(_VALUES)
def test_dumps_writes_what_json_writes(value: object) -> None:
    assert _wire.dumps(value) == json.dumps(value)
    assert _wire.dumps(value, ensure_ascii=False) == json.dumps(value, ensure_ascii=False)


@given(_VALUES)
def test_loads_reads_what_json_reads(value: object) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=2) + "\n"):
        assert _wire.loads(text) == json.loads(text)
    assert _wire.loads(json.dumps(value).encode()) == json.loads(json.dumps(value))  # as received


@pytest.mark.parametrize(
    "text", ["", "{", '{"a": 1} x', "[1, 2", "NaN", '{"a": Infinity}', "'a'", '{"a" 1}']
)
def test_anything_else_is_refused_with_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        _wire.loads(text)


def test_what_json_cannot_write_is_refused() -> None:
    with pytest.raises(ValueError):
        _wire.dumps({"a": float("nan")})
    with pytest.raises(TypeError):
        _wire.dumps({1: "a"})
    with pytest.raises(TypeError):
        _wire.dumps({"a": object()})


def test_importing_it_loads_neither_json_nor_re() -> None:
    code = "import sys, strata._wire; print(sorted({'json', 're'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
