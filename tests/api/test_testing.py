"""``py_wire.testing``: ``assert_batch_equal`` (``py_wire/_compare.py``) fails on any bit or
structure that differs, and the strategies draw every tier a schema may name."""

from __future__ import annotations

import typing

import pytest
import torch
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import py_wire
from py_wire import Schema
from py_wire._tiers.names import Tier
from py_wire.testing import assert_batch_equal, batches, schemas
from tests.helpers import decoded_tensors


@settings(max_examples=30)
@given(st.data())
def test_assert_batch_equal_catches_a_flipped_bit(data: st.DataObject) -> None:
    """The checker is not vacuous: change one bit of one decoded tensor and it must complain."""
    schema = data.draw(schemas(), label="schema")
    batch = data.draw(batches(schema), label="batch")
    decoded = py_wire.decode(bytearray(py_wire.encode(batch, schema)), layout="list")
    targets = [(n, t) for n, t in decoded_tensors(decoded) if t.numel() and "offsets" not in n]
    if not targets:
        return
    _, target = data.draw(st.sampled_from(targets), label="target")
    index = data.draw(st.integers(0, target.numel() - 1), label="element")
    flat = target.reshape(-1)  # a view: decoded rows are contiguous views into the bytearray
    raw = flat[index : index + 1].view(torch.uint8)
    if target.dtype == torch.bool:
        raw ^= 1
    else:
        raw[data.draw(st.integers(0, raw.numel() - 1), label="byte")] ^= 1 << data.draw(
            st.integers(0, 7), label="bit"
        )
    with pytest.raises(AssertionError):
        assert_batch_equal(decoded, batch, schema)


def test_assert_batch_equal_catches_structure() -> None:
    schema = Schema.model_validate(
        {"name": "s", "fields": {"img": {"tier": "packed", "dtype": "uint8", "shape": ["*"]}}}
    )
    seg = torch.arange(3, dtype=torch.uint8)
    decoded = py_wire.decode(py_wire.encode({"img": [[seg, seg[:0]], None]}, schema))
    assert_batch_equal(decoded, {"img": [[seg, seg[:0]], []]}, schema)
    with pytest.raises(AssertionError, match="row 0"):
        assert_batch_equal(decoded, {"img": [[seg], None]}, schema)
    with pytest.raises(AssertionError, match="rows"):
        assert_batch_equal(decoded, {"img": [[seg, seg[:0]]]}, schema)
    with pytest.raises(AssertionError, match="row 1"):
        assert_batch_equal(decoded, {"img": [[seg, seg[:0]], [seg]]}, schema)


@pytest.mark.parametrize("tier", typing.get_args(Tier))
def test_the_schema_strategy_draws_every_tier(tier: str) -> None:
    no_shrinking = settings(phases=[Phase.generate], database=None, max_examples=200)
    drawn = find(
        schemas(), lambda s: any(f.tier == tier for f in s.fields.values()), settings=no_shrinking
    )
    assert any(f.tier == tier for f in drawn.fields.values())
