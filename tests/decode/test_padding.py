"""Padding at decode: a pad value the field's dtype cannot hold is refused naming the field; one
it holds (infinities, nan, large floats) pads exactly as torch stores it. Every per-token field
padded in one codec call (``_native.pad_fields``) into one buffer, and the same cells by torch
where the values lie (``padded_by_scatter``, the device path), bit for bit against each row's own
values."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

import py_wire
from py_wire import WireError, _decode, _native
from py_wire.synth.registry import generate
from tests.helpers import small_text_batch

TEN = py_wire.encode(small_text_batch(tuple(range(1, 11))), "text_grpo")


@pytest.mark.parametrize("value", [1e39, -1e39, 2**80 * 2**300, 2**1100])
def test_a_float32_pad_value_out_of_range_names_the_field(value: float) -> None:
    with pytest.raises(WireError, match=r"pad_values\['advantages'\]"):
        py_wire.decode(TEN, layout="padded", pad_values={"advantages": value})


@pytest.mark.parametrize("value", [2**80, math.inf, -math.inf, math.nan, 3.4e38])
def test_a_float32_pad_value_it_holds_pads(value: float) -> None:
    out = py_wire.decode(TEN, layout="padded", pad_values={"advantages": value})
    got = float(out["advantages"][0, -1])
    assert (math.isnan(got) and math.isnan(value)) or got == float(
        torch.tensor(float(value)).float()
    )


SCHEMAS = ["text_grpo", "qwen2_5_vl", "nemotron_omni", "nemo_rl/text"]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes: -0.0 and NaN payloads compare as what they are."""
    return t.contiguous().view(-1).view(torch.uint8) if t.dtype != torch.bool else t


def _expected(frame: py_wire.Frame, name: str, width: int, pad: object) -> torch.Tensor:
    rows = py_wire.decode(frame, layout="list")[name]
    dtype = rows[0].dtype if rows else torch.float32
    element = torch.tensor(pad).to(dtype)
    out = torch.empty((len(rows), width, *rows[0].shape[1:]), dtype=dtype)
    out[:] = element
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


@pytest.mark.parametrize("name", SCHEMAS)
@pytest.mark.parametrize("multiple", [None, 8])
def test_one_call_pads_every_field_as_each_row_says(name: str, multiple: int | None) -> None:
    frame = py_wire.encode(generate(name, 7, seed=5), name)
    schema = py_wire.load_schema(name)
    out = py_wire.decode(frame, layout="padded", pad_to_multiple_of=multiple)
    lengths = torch.tensor(
        [len(r) for r in py_wire.decode(frame, layout="list")[schema.sequence_field]]
    )  # type: ignore[index]
    width = int(lengths.max())
    if multiple:
        width = -(-width // multiple) * multiple
    per_token = [n for n, f in schema.fields.items() if f.tier == "per_token" and n in out]
    assert per_token
    for n in per_token:
        want = _expected(frame, n, width, schema.fields[n].pad_value)
        assert out[n].shape == want.shape and torch.equal(_bits(out[n]), _bits(want)), n
        # Each field a tensor over exactly its own bytes: it pickles as itself, not the buffer.
        assert out[n].untyped_storage().nbytes() == out[n].nbytes, n
        assert len(pickle.dumps(out[n], protocol=5)) < out[n].nbytes + 2048, n


def test_pad_values_that_compare_equal_keep_their_own_bits() -> None:
    """-0.0 == 0.0 and True == 1: the padding plan cached per schema and pad values must not
    hand one the other's bytes."""
    frame = py_wire.encode(generate("text_grpo", 4, seed=1), "text_grpo")
    for pad in (0.0, -0.0, 0.0):
        out = py_wire.decode(frame, layout="padded", pad_values={"advantages": pad})
        mask = torch.arange(out["advantages"].shape[1]) >= out["input_lengths"][:, None]
        assert mask.any()
        cells = out["advantages"][mask]
        assert torch.equal(torch.signbit(cells), torch.full_like(cells, pad).signbit()), pad


def test_padding_is_one_codec_call_for_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = py_wire.encode(generate("text_grpo", 5, seed=2), "text_grpo")
    want = py_wire.decode(frame, layout="padded")
    calls = []
    real = _native.pad_fields

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args[1])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a per-field padding call")

    monkeypatch.setattr(_native, "pad_fields", counted)
    monkeypatch.setattr(_native, "pad_rows", refused)
    got = py_wire.decode(frame, layout="padded")
    per_token = {
        k for k, f in py_wire.load_schema("text_grpo").fields.items() if f.tier == "per_token"
    }
    assert len(calls) == 1 and {n for n, _ in calls[0]} == per_token & want.keys()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_padded_decode_builds_no_offsets_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The codec pads from the frame's own sequence offsets: a padded decode of the whole frame
    builds no Python tensor of them (a few microseconds of a 1-row decode's ~40); one that needs
    them (the jagged layout, a row window) still does, and decodes as before."""
    frame = py_wire.encode(generate("text_grpo", 5, seed=2), "text_grpo")
    want = {
        "padded": py_wire.decode(frame, layout="padded"),
        "nested": py_wire.decode(frame),
        "window": py_wire.decode(frame, layout="padded", rows=range(1, 4)),
    }
    seq = frame.layout.seq_offsets
    built: list[object] = []
    real = _decode.FrameViews.view

    def view(self: _decode.FrameViews, loc: _native.TensorLoc) -> torch.Tensor:
        if seq is not None and (loc.offset, loc.nbytes) == (seq.offset, seq.nbytes):
            built.append(loc)
        return real(self, loc)

    monkeypatch.setattr(_decode.FrameViews, "view", view)
    got = py_wire.decode(frame, layout="padded")
    assert built == []
    assert got.keys() == want["padded"].keys()
    assert all(torch.equal(got[k], want["padded"][k]) for k in got)
    nested = py_wire.decode(frame)
    assert len(built) == 1
    assert all(
        torch.equal(nested[k].values(), want["nested"][k].values())
        for k in nested
        if nested[k].is_nested
    )
    window = py_wire.decode(frame, layout="padded", rows=range(1, 4))
    assert all(torch.equal(window[k], want["window"][k]) for k in window)


def test_pad_fields_refuses_what_is_not_a_per_token_field() -> None:
    frame = py_wire.encode(generate("text_grpo", 3, seed=2), "text_grpo")
    with pytest.raises(py_wire.WireError, match='"reward" is not a per-token field'):
        _native.pad_fields(frame, [("reward", b"\0" * 4)])
    with pytest.raises(py_wire.WireError, match='does not tile a token of "input_ids"'):
        _native.pad_fields(frame, [("input_ids", b"\0" * 3)])
    with pytest.raises(py_wire.WireError, match="pad_to_multiple_of"):
        _native.pad_fields(frame, [("input_ids", b"\0" * 8)], 0)


@pytest.mark.parametrize("name", SCHEMAS)
def test_torch_padding_is_the_codec_s_bit_for_bit(name: str) -> None:
    """The device path's padding (fill, then one index_copy_ a field) run on the host: the same
    cells as the codec's, NaN payloads, -0.0 and bfloat16 included."""
    batch = generate(name, 6, seed=4)
    schema = py_wire.load_schema(name)
    for n, f in schema.fields.items():
        rows = batch.get(n)
        if f.tier == "per_token" and rows is not None and torch.is_floating_point(rows[0]):
            rows[0].view(-1)[:1] = -0.0
            rows[-1].view(-1)[-1:] = float("nan")
    frame = py_wire.encode(batch, name)
    host = py_wire.decode(frame, layout="padded", pad_to_multiple_of=4)
    payload = torch.frombuffer(bytearray(bytes(frame)), dtype=torch.uint8)
    by_torch = _decode.decode_fields(
        frame,
        _decode.checked_schema(frame),
        None,
        fill_missing=False,
        clone=False,
        payload=payload,
        layout="padded",
        pad_to_multiple_of=4,
        torch_padding=True,
    )
    assert host.keys() == by_torch.keys()
    for k, v in host.items():
        if isinstance(v, torch.Tensor):
            assert v.shape == by_torch[k].shape and torch.equal(_bits(v), _bits(by_torch[k])), k
