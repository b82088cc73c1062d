"""py_wire.interop.nemo_rl: NeMo-RL's train data (padded [B, L] tensors, int32 lengths,
NeMo-RL's own PackedTensor with its dedup CSR) to a frame and back, with no edits, bit-exact."""

from __future__ import annotations

import ast
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import py_wire
from py_wire import _micro, _native
from py_wire.interop import nemo_rl
from py_wire.synth.registry import generate
from tests import nemo_rl_model
from tests.helpers import small_text_batch, with_metadata
from tests.nemo_rl_model import PackedTensor as Nemo

#: Every bundled NeMo-RL schema: each goes through the round trip below.
NEMO_RL = [n for n in py_wire.bundled_schemas() if n.startswith("nemo_rl/")]


def test_every_nemo_rl_family_is_bundled() -> None:
    families = {"qwen2_5_vl", "qwen3_vl", "gemma3", "nemotron_omni", "smolvlm", "text"}
    assert {f"nemo_rl/{f}" for f in families} <= set(NEMO_RL)


@pytest.fixture
def with_nemo_rl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``nemo_rl.data.multimodal_utils.PackedTensor`` importable (a model of NeMo-RL's
    class, tests/nemo_rl_model.py)."""
    pkg, data = types.ModuleType("nemo_rl"), types.ModuleType("nemo_rl.data")
    monkeypatch.setitem(sys.modules, "nemo_rl", pkg)
    monkeypatch.setitem(sys.modules, "nemo_rl.data", data)
    monkeypatch.setitem(sys.modules, "nemo_rl.data.multimodal_utils", nemo_rl_model)


def _segments(row: object) -> list[torch.Tensor]:
    """A generator's row: None, one tensor, or a list of segments (one per processor call)."""
    if row is None:
        return []
    return list(row) if isinstance(row, list) else [row]  # type: ignore[arg-type]


def nemo_batch(name: str, n: int, dedup: bool) -> dict:
    """What grpo.py builds: per-token fields padded to a multiple of 8 with the schema's pad
    values, media as NeMo-RL PackedTensors along the schema's pack dim (dedup: one physical
    segment per prompt's processor call, CSR rows; without: every row its own segments)."""
    schema = py_wire.load_schema(name)
    b = generate(name, n, seed=2)
    width = -(-max(len(t) for t in b["input_ids"]) // 8) * 8
    for k, field in schema.fields.items():
        if k not in b:
            continue
        if k in nemo_rl.BROADCAST_FIELDS:
            # GRPO's estimators: per-sample advantages expanded over [B, L] (padding included).
            per_sample = torch.stack([t[0] if len(t) else t.new_zeros(()) for t in b[k]])
            b[k] = per_sample.unsqueeze(-1).expand(n, width)
        elif field.tier == "per_token":
            pad = field.pad_value
            rows = [torch.nn.functional.pad(t, (0, width - len(t)), value=pad) for t in b[k]]
            b[k] = torch.stack(rows)
        elif field.tier == "packed":
            rows = b[k]
            if not dedup and all(not isinstance(r, list) for r in rows):
                b[k] = Nemo([None if r is None else r.clone() for r in rows], field.pack_dim)
                continue
            physical: dict[int, int] = {}
            tensors, indices, offsets = [], [], [0]
            for r in rows:
                for seg in _segments(r):
                    if not dedup:  # a copy per row: nothing shared
                        seg = seg.clone()
                    if id(seg) not in physical:
                        physical[id(seg)] = len(tensors)
                        tensors.append(seg)
                    indices.append(physical[id(seg)])
                offsets.append(len(indices))
            packed = Nemo(tensors, field.pack_dim, _row_offsets=offsets, _segment_indices=indices)
            b[k] = packed.enable_deduplication() if dedup else packed
    return b


@pytest.mark.parametrize("name", NEMO_RL)
@pytest.mark.parametrize("dedup", [False, True])
def test_round_trip_bit_exact(with_nemo_rl: None, name: str, dedup: bool) -> None:
    batch = nemo_batch(name, 16, dedup)
    schema = py_wire.load_schema(name)
    assert set(batch) == set(schema.fields)  # every field, optional ones included
    frame = nemo_rl.to_frame(batch, name)
    out = nemo_rl.from_frame(bytes(frame), pad_to_multiple_of=8)
    assert set(out) == set(batch)
    layouts = {f.name: f for f in frame.layout.fields}
    for k, v in batch.items():
        if isinstance(v, Nemo):
            got = out[k]
            assert type(got) is Nemo  # NeMo-RL's own class, as get_multimodal_dict expects
            assert got.dim_to_pack == v.dim_to_pack == schema.fields[k].pack_dim
            want_rows, got_rows = v.logical_rows(), got.logical_rows()
            assert len(got_rows) == len(want_rows) == 16
            # text-only rows and rows with several items (images, crops, tiles) both present
            items = [sum(s.shape[v.dim_to_pack] for s in r) for r in want_rows]
            assert 0 in items and max(items) >= 2, items
            for want, have in zip(want_rows, got_rows, strict=True):
                assert len(have) == len(want)
                for a, c in zip(want, have, strict=True):
                    assert c.dtype == a.dtype == getattr(torch, schema.fields[k].dtype), k
                    assert c.shape == a.shape and torch.equal(c, a), k
            if dedup:  # a GRPO group's media: stored once on the wire, shared after decode
                assert layouts[k].num_segments == len(v.tensors) < layouts[k].num_refs
                assert got._segment_indices == v._segment_indices and got.deduplication_enabled
                shared = [id(t) for t in got.tensors]
                assert len(set(shared)) == len(shared) == len(v.tensors)
            else:
                assert layouts[k].num_segments == layouts[k].num_refs
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
    with pytest.raises(py_wire.BatchError, match="loss_multiplier") as e:
        nemo_rl.to_frame(batch, "nemo_rl/text")
    assert e.value.field == "loss_multiplier"


def test_from_frame_restores_the_source_padded_width() -> None:
    batch = nemo_batch("nemo_rl/text", 8, False)
    ids = batch["input_ids"]
    longest = int(batch["input_lengths"].max())
    # NeMo-RL pads past the longest row (to a multiple, or a fixed width): keep that width.
    wide = torch.full((ids.shape[0], longest + 13), 7, dtype=ids.dtype)
    wide[:, : ids.shape[1]] = ids
    batch = {k: v for k, v in batch.items()}
    for k, v in list(batch.items()):
        if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[1] == ids.shape[1]:
            grown = torch.zeros((v.shape[0], longest + 13, *v.shape[2:]), dtype=v.dtype)
            grown[:, : v.shape[1]] = v
            batch[k] = grown
    frame = nemo_rl.to_frame(batch, "nemo_rl/text")
    assert frame.metadata[nemo_rl.PADDED_WIDTH_KEY] == str(longest + 13)
    out = nemo_rl.from_frame(frame)
    assert out["input_ids"].shape == (8, longest + 13)
    lengths = batch["input_lengths"]
    for r in range(8):
        n = int(lengths[r])
        assert torch.equal(out["input_ids"][r, :n], batch["input_ids"][r, :n])
    # A shard keeps the batch's width, as shard_by_batch_size does.
    shard = py_wire.shard(frame, 1, 2)
    assert nemo_rl.from_frame(shard)["input_ids"].shape == (4, longest + 13)
    # An explicit multiple rounds the longest row instead.
    assert nemo_rl.from_frame(frame, pad_to_multiple_of=4)["input_ids"].shape[1] == (
        -(-longest // 4) * 4
    )


@pytest.mark.parametrize("writable", ["auto", "view"])
def test_from_frame_of_read_only_bytes_follows_the_writable_policy(writable: str) -> None:
    """Packed fields and scalars come back as views: of the read-only source only with
    "view"; the default gives views of a private copy, safe to write in place."""
    frame = nemo_rl.to_frame(nemo_batch("nemo_rl/qwen2_5_vl", 8, False), "nemo_rl/qwen2_5_vl")
    raw = bytes(frame)
    lo = np.frombuffer(raw, dtype=np.uint8).ctypes.data
    out = nemo_rl.from_frame(raw, writable=writable)  # type: ignore[arg-type]
    pixels = out["pixel_values"].as_tensor()
    assert pixels is not None
    assert (lo <= pixels.data_ptr() < lo + len(raw)) == (writable == "view")
    if writable == "auto":
        pixels.zero_()
        out["sample_mask"].add_(1)
        assert raw == bytes(frame)


def test_advantages_are_broadcast_into_padding_as_nemo_rl_does() -> None:
    batch = nemo_batch("nemo_rl/qwen2_5_vl", 8, False)
    adv = batch["advantages"]
    assert adv.stride(1) == 0  # NeMo-RL's expand: a zero-stride view
    frame = nemo_rl.to_frame(batch, "nemo_rl/qwen2_5_vl")
    out = nemo_rl.from_frame(frame)
    assert out["advantages"].shape == adv.shape
    assert torch.equal(out["advantages"], adv)  # valid and padded cells, bit for bit
    # Other per-token fields keep their pad values.
    assert torch.equal(out["input_ids"], batch["input_ids"])
    assert torch.equal(out["token_mask"], batch["token_mask"])


def _nemo_slice(batch: dict, a: int, b: int) -> dict:
    """NeMo-RL's ``BatchedDataDict.slice``."""
    return {
        k: v.slice(list(range(a, b))) if hasattr(v, "tensors") else v[a:b] for k, v in batch.items()
    }


def _rows_of(v: object) -> list:
    rows = v.logical_rows() if hasattr(v, "logical_rows") else v.rows()  # type: ignore[attr-defined]
    return [[] if r is None else list(r) for r in rows]


@pytest.mark.parametrize("name", NEMO_RL)
@pytest.mark.parametrize("dedup", [False, True])
def test_micro_batches_are_nemo_rl_s(with_nemo_rl: None, name: str, dedup: bool) -> None:
    """Every bundled NeMo-RL schema: each micro-batch is, value for value, NeMo-RL's slice of
    the whole batch's ``from_frame`` (padded cells, pad values, images per row)."""
    batch = nemo_batch(name, 16, dedup)
    frame = nemo_rl.to_frame(batch, name)
    whole = nemo_rl.from_frame(frame)
    mbs = list(nemo_rl.iter_micro_batches(frame, 4))
    assert len(mbs) == 4
    for a, mb in zip(range(0, 16, 4), mbs, strict=True):
        want = _nemo_slice(whole, a, a + 4)
        assert mb.keys() == want.keys()
        for k, v in want.items():
            if isinstance(v, torch.Tensor):
                assert mb[k].shape == v.shape and torch.equal(mb[k], v), k  # the batch's L
            else:
                assert type(mb[k]) is Nemo
                for x, y in zip(_rows_of(mb[k]), _rows_of(v), strict=True):
                    assert len(x) == len(y) and all(
                        torch.equal(s, t) for s, t in zip(x, y, strict=True)
                    )
    # Per micro-batch widths: each its own longest row, rounded up; the same cells.
    lengths = batch["input_lengths"]
    fields = py_wire.load_schema(name).fields
    per_token = [k for k, f in fields.items() if f.tier == "per_token" and k in whole]
    assert per_token
    narrow = list(
        nemo_rl.iter_micro_batches(frame, 4, per_micro_batch_width=True, pad_to_multiple_of=8)
    )
    saved = 0
    for a, mb in zip(range(0, 16, 4), narrow, strict=True):
        w = -(-int(lengths[a : a + 4].max()) // 8) * 8
        for k in per_token:
            assert mb[k].shape[:2] == (4, w), k
            assert torch.equal(mb[k], whole[k][a : a + 4, :w]), k
        saved += whole["input_ids"].shape[1] - w
    assert saved > 0


@pytest.mark.parametrize("name", NEMO_RL)
def test_micro_batches_are_bit_for_bit_nemo_rl_s_own_slices(with_nemo_rl: None, name: str) -> None:
    """NeMo-RL's own path: its padded batch, sliced by ``make_microbatch_iterator``
    (``BatchedDataDict.slice``); py_wire's: the frame of that batch through
    ``iter_micro_batches``. Every tensor byte for byte (padding, broadcast advantages, -0.0
    and NaN payloads in the valid cells), at 8-row micro-batches with a shorter last one."""
    batch = nemo_batch(name, 19, False)
    lengths = batch["input_lengths"]
    for k, v in batch.items():
        floats = isinstance(v, torch.Tensor) and v.dim() == 2 and v.is_floating_point()
        if floats and k not in nemo_rl.BROADCAST_FIELDS:
            v[0, 0] = -0.0
            v[2, int(lengths[2]) - 1] = float("nan")
    frame = nemo_rl.to_frame(batch, name)
    mbs = list(nemo_rl.iter_micro_batches(frame, 8))
    assert len(mbs) == 3
    for a, mb in zip(range(0, 19, 8), mbs, strict=True):
        want = _nemo_slice(batch, a, min(a + 8, 19))
        assert mb.keys() == want.keys()
        for k, v in want.items():
            if isinstance(v, torch.Tensor):
                got = mb[k]
                assert got.shape == v.shape and got.dtype == v.dtype, k
                assert torch.equal(_byte_view(got), _byte_view(v)), k


def _byte_view(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes: -0.0 and NaN payloads compare as what they are."""
    return t if t.dtype == torch.bool else t.contiguous().view(-1).view(torch.uint8)


def _own_bytes(value: object) -> int:
    """The bytes of the tensors ``value`` holds, each once (a segment shared by rows: once)."""
    seen: dict[int, int] = {}

    def walk(v: object) -> None:
        if isinstance(v, torch.Tensor):
            seen[v.data_ptr()] = v.nbytes
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif hasattr(v, "tensors"):
            walk(v.tensors)  # type: ignore[attr-defined]

    walk(value)
    return sum(seen.values())


@pytest.mark.parametrize("dedup", [False, True])
def test_a_micro_batch_pickles_only_its_own_rows_bytes(with_nemo_rl: None, dedup: bool) -> None:
    """Micro-batches are cut from one padded decode and one NeMo-RL PackedTensor of the whole
    batch, yet each pickles as its rows' bytes, never the batch's."""
    batch = nemo_batch("nemo_rl/qwen2_5_vl", 16, dedup)
    frame = nemo_rl.to_frame(batch, "nemo_rl/qwen2_5_vl")
    whole = _own_bytes(nemo_rl.from_frame(frame))
    owns = []
    for mb in nemo_rl.iter_micro_batches(frame, 4):
        owns.append(_own_bytes(mb))
        pickled = len(pickle.dumps(mb, protocol=5))
        assert owns[-1] <= pickled <= owns[-1] * 1.02 + 16_384, (pickled, owns[-1])
    # Each row's bytes in one micro-batch (a segment shared by rows of two: in both).
    assert sum(owns) >= whole if dedup else sum(owns) == whole
    assert max(owns) < whole


def test_micro_batches_slice_one_nemo_rl_packed_tensor_of_the_batch(with_nemo_rl: None) -> None:
    """A row's segment tensor is built once for the batch: each micro-batch holds the very
    tensors of NeMo-RL's PackedTensor that ``MicroBatches.decoded`` holds, sliced as NeMo-RL's
    ``BatchedDataDict.slice`` slices it."""
    batch = nemo_batch("nemo_rl/qwen2_5_vl", 16, False)
    frame = nemo_rl.to_frame(batch, "nemo_rl/qwen2_5_vl")
    converted: list[object] = []

    def convert(value: py_wire.PackedTensor) -> object:
        converted.append(nemo_rl._as_nemo(value, Nemo))
        return converted[-1]

    options = {"layout": "padded", "writable": "auto"}
    batches = _micro.MicroBatches(frame, 4, options, narrow=False, packed_as=convert)
    packed = [k for k, v in batches.decoded.items() if isinstance(v, Nemo)]
    assert len(converted) == len(packed) == 2  # pixel_values, image_grid_thw: once each
    for a, mb in zip(range(0, 16, 4), batches, strict=True):
        for k in packed:
            whole = batches.decoded[k]
            assert type(mb[k]) is Nemo
            assert all(x is y for x, y in zip(mb[k].tensors, whole.tensors[a : a + 4], strict=True))


def test_padding_filled_with_each_rows_first_token_by_the_codec() -> None:
    """NeMo-RL's ``advantages`` broadcast, written by the codec into the padding cells only: a
    row without tokens keeps its padding; a length past the width is a FrameError naming the
    row (never a cell written outside it)."""
    fill_padding_with_first_token = _native.fill_padding_with_first_token
    out = torch.tensor([[1.0, 2.0, 0.0], [9.0, 9.0, 9.0], [4.0, 5.0, 6.0], [7.0, 0.0, 0.0]])
    fill_padding_with_first_token(out, torch.tensor([2, 0, 3, 1]))
    want = [[1.0, 2.0, 1.0], [9.0, 9.0, 9.0], [4.0, 5.0, 6.0], [7.0, 7.0, 7.0]]
    assert out.tolist() == want
    with pytest.raises(py_wire.FrameError, match="row 1: 4 tokens do not fit width 3"):
        fill_padding_with_first_token(out, torch.tensor([1, 4, 0, 0]))
    with pytest.raises(py_wire.FrameError, match="does not hold 2 rows"):
        fill_padding_with_first_token(out, torch.tensor([1, 1]))
    with pytest.raises(py_wire.BatchError, match="contiguous"):
        fill_padding_with_first_token(out.t(), torch.tensor([1, 1, 1]))
    assert out.tolist() == want


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("groups", [3, [[0, 5, 1], range(2, 5), [6]]], ids=["fixed", "gathered"])
def test_every_micro_batch_has_advantages_broadcast_into_its_padding(
    narrow: bool, groups: object
) -> None:
    """Every micro-batch (fixed, gathered rows, at the batch's width or its own) holds
    NeMo-RL's ``advantages``: each row's padding its first value (a row without tokens keeps
    0), the valid cells the frame's; the other fields keep their pad values."""
    lengths = (5, 0, 7, 1, 3, 2, 4)
    frame = py_wire.encode(small_text_batch(lengths), "text_grpo")
    plans = [[0, 1, 2], [3, 4, 5], [6]] if groups == 3 else [[0, 5, 1], [2, 3, 4], [6]]
    mbs = list(nemo_rl.iter_micro_batches(frame, groups, per_micro_batch_width=narrow))  # type: ignore[arg-type]
    assert len(mbs) == len(plans)
    for mb, rows in zip(mbs, plans, strict=True):
        adv, ids = mb["advantages"], mb["input_ids"]
        for i, r in enumerate(rows):
            n = lengths[r]
            assert torch.equal(adv[i, :n], torch.full((n,), 0.5)), (rows, r)
            assert torch.equal(adv[i, n:], torch.full((adv.shape[1] - n,), 0.5 if n else 0.0))
            assert torch.equal(ids[i, n:], torch.zeros(ids.shape[1] - n, dtype=ids.dtype))


def test_pad_to_seqlen() -> None:
    batch = nemo_batch("nemo_rl/text", 8, False)
    frame = nemo_rl.to_frame(batch, "nemo_rl/text")
    longest = int(batch["input_lengths"].max())
    out = nemo_rl.from_frame(frame, pad_to_seqlen=longest + 5)
    assert out["input_ids"].shape == (8, longest + 5)
    mb = next(iter(nemo_rl.iter_micro_batches(frame, 2, pad_to_seqlen=longest + 5)))
    assert mb["input_ids"].shape == (2, longest + 5)
    with pytest.raises(py_wire.WireError, match="pad_to_seqlen"):
        nemo_rl.from_frame(frame, pad_to_seqlen=longest - 1)
    with pytest.raises(py_wire.WireError, match="not both"):
        nemo_rl.from_frame(frame, pad_to_seqlen=longest, pad_to_multiple_of=8)


@pytest.fixture
def with_batched_data_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``nemo_rl.distributed.batched_data_dict.BatchedDataDict`` importable (a model of
    NeMo-RL's class, tests/nemo_rl_model.py)."""
    pkg, dist = types.ModuleType("nemo_rl"), types.ModuleType("nemo_rl.distributed")
    monkeypatch.setitem(sys.modules, "nemo_rl", pkg)
    monkeypatch.setitem(sys.modules, "nemo_rl.distributed", dist)
    monkeypatch.setitem(sys.modules, "nemo_rl.distributed.batched_data_dict", nemo_rl_model)


@pytest.mark.usefixtures("with_batched_data_dict")
def test_a_shard_keeps_its_micro_batch_plan() -> None:
    """``shard_by_batch_size`` leaves each shard its micro-batch plan (dynamic batching,
    sequence packing): the shard sent through a frame comes back with it, and a frame whose
    rows were taken since says it lost it rather than handing a plan of other rows."""
    shard = nemo_rl_model.BatchedDataDict(nemo_batch("nemo_rl/qwen2_5_vl", 4, dedup=True))
    shard.micro_batch_indices = [[[0, 1], [1, 4]]]
    shard.micro_batch_lengths = [[24, 40]]
    shard.elem_counts_per_gb = [4]
    frame = nemo_rl.to_frame(shard, "nemo_rl/qwen2_5_vl")
    out = nemo_rl.from_frame(pickle.loads(pickle.dumps(frame, protocol=5)))
    assert isinstance(out, nemo_rl_model.BatchedDataDict)
    assert out.micro_batch_indices == [[[0, 1], [1, 4]]]
    assert out.micro_batch_lengths == [[24, 40]]
    assert out.elem_counts_per_gb == [4]
    plain = nemo_rl.from_frame(
        nemo_rl.to_frame(nemo_batch("nemo_rl/qwen2_5_vl", 4, False), "nemo_rl/qwen2_5_vl")
    )
    assert plain.micro_batch_indices is None
    with pytest.warns(UserWarning, match="micro-batch plan"):
        taken = nemo_rl.from_frame(py_wire.take_rows(frame, [0, 1]))
    assert taken.micro_batch_indices is None


def test_json_columns_come_back_as_object_arrays() -> None:
    """NeMo-RL's data plane holds object columns (``message_log``, ``content``) as
    ``np.ndarray(dtype=object)``, one object a row: from_frame gives them so, rows of
    equal-length lists included."""
    schema = py_wire.Schema.from_dict(
        {
            "name": "nemo_objects",
            "sequence_field": "input_ids",
            "fields": {
                "input_ids": {"tier": "per_token", "dtype": "int64", "shape": []},
                "content": {"tier": "packed", "dtype": "uint8", "shape": ["*"], "encoding": "json"},
            },
        }
    )
    content = [["a", "b"], ["c", "d"], {"role": "user"}]
    column = np.empty(3, dtype=object)  # as NeMo-RL builds one
    for i, value in enumerate(content):
        column[i] = value
    batch = {"input_ids": [torch.arange(2), torch.arange(1), torch.arange(3)], "content": column}
    out = nemo_rl.from_frame(nemo_rl.to_frame(batch, schema))
    got = out["content"]
    assert isinstance(got, np.ndarray) and got.dtype == object and got.shape == (3,)
    assert list(got) == content


def assert_same_nemo(got: Nemo, want: Nemo) -> None:
    """Two of NeMo-RL's PackedTensors hold the same physical segments, bit for bit, with the
    same provenance and the same rows over them."""
    assert len(got.tensors) == len(want.tensors)
    for a, b in zip(got.tensors, want.tensors, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    assert got._row_offsets == want._row_offsets
    assert got._segment_indices == want._segment_indices
    assert got._segment_provenance == want._segment_provenance


def _two_shards(frame: py_wire.Frame, how: str) -> tuple[list[int], list[int], list[py_wire.Frame]]:
    """Two shards of one GRPO batch (every prompt's rows in both) and the rows each holds."""
    n = frame.num_rows
    if how == "take_rows":
        a, b = list(range(0, n, 2)), list(range(1, n, 2))
        return a, b, [py_wire.take_rows(frame, a), py_wire.take_rows(frame, b)]
    if how == "shard":
        # two ranks, two mini-batches: each rank's rows interleave the prompts
        a, b = [0, 1, 4, 5], [2, 3, 6, 7]
        return a, b, [py_wire.shard(frame, r, 2, batch_size=4) for r in range(2)]
    a, b = [0, 1, 2], list(range(3, n))
    return a, b, py_wire.split(frame, [3, n - 3])


@pytest.mark.parametrize("how", ["take_rows", "shard", "split"])
def test_a_gather_of_decoded_shards_stores_a_shared_image_once(
    with_nemo_rl: None, how: str
) -> None:
    """NeMo-RL's gather (BatchedDataDict.from_batches: PackedTensor.concat, interning by
    provenance) of two shards decoded from their own frames stores each image the shards'
    samples share once, bit for bit what its gather of the source shards gives: the
    provenance travels in the frame (f.seg_ids)."""
    name = "nemo_rl/qwen2_5_vl"
    batch = nemo_batch(name, 8, True)
    frame = nemo_rl.to_frame(batch, name)
    rows_a, rows_b, shards = _two_shards(frame, how)
    decoded = [nemo_rl.from_frame(bytes(s)) for s in shards]
    for k, v in batch.items():
        if not isinstance(v, Nemo):
            continue
        want = Nemo.concat([v.slice(rows_a), v.slice(rows_b)])
        got = Nemo.concat([d[k] for d in decoded])
        assert len(got.tensors) == len(v.tensors) < len(got._segment_indices), k
        assert_same_nemo(got, want)
        # and py_wire's own concat of the decoded values agrees
        mine = py_wire.PackedTensor.concat([nemo_rl.from_nemo_packed(d[k]) for d in decoded])
        assert len(mine.segments) == len(v.tensors)
    # concat of the shard frames: each shared image stored once in the frame, as the source
    joined = py_wire.concat(shards)
    layouts = {f.name: f for f in joined.layout.fields}
    whole = {f.name: f for f in frame.layout.fields}
    out = nemo_rl.from_frame(joined)
    for k, v in batch.items():
        if isinstance(v, Nemo):
            assert layouts[k].num_segments == whole[k].num_segments, k
            assert_same_nemo(out[k], Nemo.concat([v.slice(rows_a + rows_b)]))


def test_provenance_round_trips_and_a_foreign_one_is_refused(with_nemo_rl: None) -> None:
    name = "nemo_rl/qwen2_5_vl"
    batch = nemo_batch(name, 8, True)
    out = nemo_rl.from_frame(nemo_rl.to_frame(batch, name))
    assert_same_nemo(out["pixel_values"], batch["pixel_values"])
    # decoding twice gives the same provenance (no fresh ids per decode)
    frame = nemo_rl.to_frame(batch, name)
    again = [nemo_rl.from_frame(bytes(frame))["pixel_values"] for _ in range(2)]
    assert again[0]._segment_provenance == again[1]._segment_provenance
    # a legacy value (one entry per row) with provenance keeps it too
    pv = batch["pixel_values"]
    rows = [*[t for r in pv.logical_rows() for t in r[:1]][:3], None]
    legacy = Nemo(rows, pv.dim_to_pack, _segment_provenance=[bytes([i + 1]) * 16 for i in range(4)])
    back = nemo_rl.from_nemo_packed(legacy)
    assert back.segment_ids == [bytes([i + 1]) * 16 for i in range(3)]
    # provenance py_wire cannot carry as it is: refused, naming the field and the entry
    short = [b"short", *pv._segment_provenance[1:]]
    bad = Nemo(pv.tensors, pv.dim_to_pack, False, pv._row_offsets, pv._segment_indices, short)
    with pytest.raises(py_wire.BatchError, match=r"_segment_provenance\[0\] is 5 bytes"):
        nemo_rl.to_frame({**batch, "pixel_values": bad}, name)


def test_nemo_rl_recorded_width_is_bounded_by_the_frame() -> None:
    rows = py_wire.encode(small_text_batch((3,) * 64), "text_grpo")
    frame = with_metadata(rows, **{nemo_rl.PADDED_WIDTH_KEY: str(2**20)})
    with pytest.raises(py_wire.FrameError, match=r"nemo_rl\.padded_width") as info:
        nemo_rl.from_frame(frame)
    assert info.value.field == nemo_rl.PADDED_WIDTH_KEY
    honest = with_metadata(rows, **{nemo_rl.PADDED_WIDTH_KEY: "16"})
    assert tuple(nemo_rl.from_frame(honest)["input_ids"].shape) == (64, 16)


def test_the_adapter_uses_only_the_transfer_queue_packages_public_names() -> None:
    """``nemo_rl`` reaches the TQ adapter through its package (its ``__all__``), never a module
    inside it: what both adapters share comes from the core."""
    source = Path(nemo_rl.__file__).read_text()
    inside = [
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("py_wire.interop.transfer_queue.")
    ]
    assert inside == []
