"""py_wire.interop.nemo_rl: NeMo-RL's train data (padded [B, L] tensors, int32 lengths,
NeMo-RL's own PackedTensor with its dedup CSR) to a frame and back, with no edits, bit-exact."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import py_wire
from py_wire.interop import nemo_rl
from py_wire.synth.registry import generate
from tests import nemo_rl_model
from tests.nemo_rl_model import PackedTensor as Nemo

PER_TOKEN = ("input_ids", "token_mask", "generation_logprobs", "prev_logprobs",
             "reference_policy_logprobs", "advantages", "mm_token_type_ids")  # fmt: skip


@pytest.fixture
def with_nemo_rl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``nemo_rl.data.multimodal_utils.PackedTensor`` importable (a model of NeMo-RL's
    class, tests/nemo_rl_model.py)."""
    pkg, data = types.ModuleType("nemo_rl"), types.ModuleType("nemo_rl.data")
    monkeypatch.setitem(sys.modules, "nemo_rl", pkg)
    monkeypatch.setitem(sys.modules, "nemo_rl.data", data)
    monkeypatch.setitem(sys.modules, "nemo_rl.data.multimodal_utils", nemo_rl_model)


def nemo_batch(name: str, n: int, dedup: bool) -> dict:
    """What grpo.py builds: per-token fields padded to a multiple of 8 (pad id 151643 for ids),
    media as NeMo-RL PackedTensors (dedup: one physical segment per prompt, CSR rows)."""
    b = generate(name, n, seed=2)
    width = -(-max(len(t) for t in b["input_ids"]) // 8) * 8
    for k in PER_TOKEN:
        if k in b:
            pad = 151643 if k == "input_ids" and "pixel_values" in b else 0
            rows = [torch.nn.functional.pad(t, (0, width - len(t)), value=pad) for t in b[k]]
            b[k] = torch.stack(rows)
    for k in ("pixel_values", "image_grid_thw"):
        if k not in b:
            continue
        rows = b[k]
        if not dedup:
            b[k] = Nemo(list(rows), 0)
            continue
        physical: dict[int, int] = {}
        tensors, indices, offsets = [], [], [0]
        for r in rows:
            if r is not None:
                if id(r) not in physical:
                    physical[id(r)] = len(tensors)
                    tensors.append(r)
                indices.append(physical[id(r)])
            offsets.append(len(indices))
        b[k] = Nemo(
            tensors, 0, _row_offsets=offsets, _segment_indices=indices
        ).enable_deduplication()
    return b


@pytest.mark.parametrize("name", ["nemo_rl/qwen2_5_vl", "nemo_rl/text"])
@pytest.mark.parametrize("dedup", [False, True])
def test_round_trip_bit_exact(with_nemo_rl: None, name: str, dedup: bool) -> None:
    batch = nemo_batch(name, 16, dedup)
    frame = nemo_rl.to_frame(batch, name)
    out = nemo_rl.from_frame(bytes(frame), pad_to_multiple=8)
    assert set(out) == set(batch)
    for k, v in batch.items():
        if isinstance(v, Nemo):
            got = out[k]
            assert type(got) is Nemo  # NeMo-RL's own class, as get_multimodal_dict expects
            assert [len(r) for r in got.logical_rows()] == [len(r) for r in v.logical_rows()]
            assert torch.equal(got.as_tensor(), v.as_tensor())
            layout = {f.name: f for f in frame.layout.fields}[k]
            if dedup:  # a GRPO group's media: stored once on the wire, shared after decode
                assert layout.num_segments == len(v.tensors) < layout.num_refs
                assert got._segment_indices == v._segment_indices and got.deduplication_enabled
        else:
            assert out[k].dtype == v.dtype and torch.equal(out[k], v), k


def test_without_nemo_rl_packed_fields_are_py_wire_s() -> None:
    assert nemo_rl.nemo_packed_class() is None
    batch = nemo_batch("nemo_rl/qwen2_5_vl", 8, True)
    out = nemo_rl.from_frame(nemo_rl.to_frame(batch, "nemo_rl/qwen2_5_vl", stage="train"))
    assert isinstance(out["pixel_values"], py_wire.PackedTensor)
    assert out["input_lengths"].dtype == torch.int32


def test_unknown_key_is_never_dropped() -> None:
    batch = nemo_batch("nemo_rl/text", 4, False)
    batch["loss_multiplier"] = torch.ones(4)
    with pytest.raises(py_wire.BatchError, match="loss_multiplier"):
        nemo_rl.to_frame(batch, "nemo_rl/text")
