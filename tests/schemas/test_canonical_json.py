"""The canonical form behind fingerprints, as the codec's reader checks it
(``rust_codec/src/schema/text.rs``): byte for byte CPython's
``json.dumps(value, sort_keys=True, separators=(",", ":"))``, so that every fingerprint stays what
it was and the reader refuses exactly the texts Python would not write."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import py_wire
from py_wire import _native
from py_wire._native import FrameError


def dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
def test_every_bundled_schema_is_canonical_to_the_reader(name: str) -> None:
    schema = py_wire.load_schema(name)
    text = schema.canonical_json
    assert _native.canonical_json(text) == text
    _native.check_schema_text(text, schema.fingerprint)  # the reader's checks pass
    # Any other layout of the same value has the same canonical form.
    data = json.loads(text)
    assert _native.canonical_json(json.dumps(data, indent=2)) == text
    assert _native.canonical_json(json.dumps(data, ensure_ascii=False)) == text


def test_the_constants_are_the_codecs() -> None:
    from py_wire import _schema

    assert _schema.MAX_SCHEMA_BYTES == _native.MAX_SCHEMA_BYTES == 1 << 20
    assert _schema.MAX_NESTING == _native.MAX_NESTING == 32


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_serializer_is_cpythons(value: object) -> None:
    text = dumps(value)
    assert _native.canonical_json(text) == text
    assert _native.canonical_json(json.dumps(value, indent=1, sort_keys=False)) == text


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False) | st.integers(min_value=-(2**70), max_value=2**70).map(float))
def test_floats_are_reprs(x: float) -> None:
    assert _native.canonical_json(dumps(x)) == dumps(x)
    if math.isfinite(x) and "e" not in repr(x):
        assert _native.canonical_json(f"{x!r}e0") == dumps(x)  # another spelling, same value
        assert _native.canonical_json(f"{x:.17e}") == dumps(x)


def test_float_ties_go_to_the_nearest_even_string() -> None:
    # Near 2**40..2**53 a double's exact value often lies halfway between the two shortest
    # strings that read back as it (562949953421312.25: "….2" and "….3"); repr writes the even.
    values = [
        math.ldexp(1.0, k) + i * math.ulp(math.ldexp(1.0, k))
        for k in range(40, 54)
        for i in range(1, 600)
    ]
    assert 562949953421312.25 in values
    text = dumps(values)
    assert _native.canonical_json(text) == text


def test_lone_surrogates_and_python_only_numbers() -> None:
    for value in ["\ud800", "a\udfff\ud800b", "\U0001f600", float("nan"), [float("-inf")], -0.0]:
        assert _native.canonical_json(dumps(value)) == dumps(value)
    assert _native.canonical_json("-0") == "0"
    assert _native.canonical_json('{"b":1,"a":2,"b":3}') == '{"a":2,"b":3}'


REFUSED = ["{", "[1,]", "01", "'a'", '"\t"', "9" * 4301]


@pytest.mark.parametrize("text", REFUSED)
def test_what_cpython_refuses_the_reader_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(FrameError):
        _native.canonical_json(text)


def test_the_nesting_cap() -> None:
    ok = "[" * _native.MAX_NESTING + "]" * _native.MAX_NESTING
    assert _native.canonical_json(ok) == ok
    with pytest.raises(FrameError, match="nested deeper than 32"):
        _native.canonical_json("[" + ok + "]")
