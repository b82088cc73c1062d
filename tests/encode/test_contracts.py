"""Contracts: placeholder alignment, wire dtypes, stages, pack dims."""

from __future__ import annotations

import pytest
import torch

import py_wire
from py_wire import BatchError, ContractError, SchemaError
from py_wire.synth import qwen2_5_vl_batch
from tests.helpers import media_fields

QWEN = py_wire.load_schema("qwen2_5_vl")
PAD, START, END = 151655, 151652, 151653


def tiny_qwen(ids: list[list[int]], grids: list[list[list[int]] | None]) -> dict:
    rows = [torch.tensor(r, dtype=torch.int64) for r in ids]
    pixels = [
        None if g is None else torch.zeros(sum(t * h * w for t, h, w in g), 1176) for g in grids
    ]
    return {
        "input_ids": rows,
        "pixel_values": pixels,
        "image_grid_thw": [None if g is None else torch.tensor(g) for g in grids],
        "advantages": [torch.zeros(len(r)) for r in rows],
        "generation_logprobs": [torch.zeros(len(r)) for r in rows],
        "input_lengths": torch.tensor([len(r) for r in rows]),
        "loss_multiplier": torch.ones(len(rows)),
        "reward": torch.zeros(len(rows)),
    }


def test_aligned_batch_passes_and_misaligned_names_row_and_image():
    py_wire.encode(qwen2_5_vl_batch(8), QWEN)
    with pytest.raises(
        ContractError,
        match=r"row 5, image 0 .* has \d+ tokens but pixel_values "
        r"implies \d+ features; row 5 has",
    ):
        py_wire.encode(qwen2_5_vl_batch(8, misalign_row=5), QWEN)


def test_the_real_crash_is_reported_with_its_totals():
    # 16 images whose grids imply 2550 features each, but the engine left runs of 2010 tokens.
    run = [START] + [PAD] * 2010 + [END]
    grids = [[[1, 102, 100]] * 16]
    batch = tiny_qwen([[1] + run * 16], grids)
    with pytest.raises(ContractError) as info:
        py_wire.encode(batch, QWEN)
    message = str(info.value)
    assert "row 0, image 0" in message and "2010 tokens" in message
    assert "implies 2550 features" in message
    assert "16 runs totalling 32160 tokens for 16 images totalling 40800 features" in message


def test_tokens_without_media_and_media_without_tokens():
    with pytest.raises(ContractError, match="row 1"):
        py_wire.encode(tiny_qwen([[1, 2], [START, PAD, END]], [None, None]), QWEN)
    with pytest.raises(ContractError, match="row 0"):
        py_wire.encode(tiny_qwen([[1, 2, 3]], [[[1, 2, 2]]]), QWEN)
    py_wire.encode(tiny_qwen([[1, START, PAD, END]], [[[1, 2, 2]]]), QWEN)


def test_pixels_must_match_their_grid():
    batch = tiny_qwen([[START, PAD, END]], [[[1, 2, 2]]])
    batch["pixel_values"] = [torch.zeros(5, 1176)]
    with pytest.raises(
        ContractError, match="image_grid_thw implies 4 patches but pixel_values has 5"
    ):
        py_wire.encode(batch, QWEN)


def test_geometry_loss_is_an_error_not_image_blindness():
    batch = tiny_qwen([[START, PAD, END]], [[[1, 2, 2]]])
    del batch["image_grid_thw"]
    with pytest.raises(ContractError, match=r'lacks "image_grid_thw".*geometry lost'):
        py_wire.encode(batch, QWEN)
    assert issubclass(ContractError, BatchError)


def test_placeholder_runs_reads_back_the_engine_decision():
    batch = qwen2_5_vl_batch(4, seed=3)
    runs = py_wire.placeholder_runs(batch["input_ids"], PAD)
    for row, grid in zip(runs, batch["image_grid_thw"], strict=True):
        expected = [] if grid is None else (grid.prod(-1) // 4).tolist()
        assert row == expected
    nested = torch.nested.nested_tensor_from_jagged(
        torch.cat(batch["input_ids"]),
        torch.tensor([0, *torch.tensor([len(t) for t in batch["input_ids"]]).cumsum(0)]),
    )
    assert py_wire.placeholder_runs(nested, PAD) == runs
    assert py_wire.placeholder_runs(torch.tensor([PAD, 1, PAD, PAD]), PAD) == [[1, 2]]


def test_check_contracts_on_a_received_frame():
    batch = qwen2_5_vl_batch(4)
    frame = py_wire.encode(batch, QWEN)
    py_wire.check_contracts(py_wire.Frame.from_buffer(bytes(frame)))
    # A producer that skipped the check: one placeholder token of the first media row is
    # rewritten in the frame's bytes. The received frame is refused, naming that row.
    row = next(r for r, px in enumerate(batch["pixel_values"]) if px is not None)
    received = bytearray(bytes(frame))
    ids = py_wire.decode(py_wire.Frame.from_buffer(received))["input_ids"]
    tokens = ids.values()
    position = int(ids.offsets()[row]) + int((ids[row] == PAD).nonzero()[0])
    tokens[position] = 9  # the decoded view writes through to `received`
    with pytest.raises(ContractError, match=rf"row {row}\b"):
        py_wire.check_contracts(py_wire.Frame.from_buffer(bytes(received)))


# -- wire dtypes ---------------------------------------------------------------------------


def cast_schema(source: str = "float32", wire: str = "bfloat16", lossy: bool = True):
    return py_wire.Schema.from_dict(
        {
            "name": "cast",
            "fields": {
                "pixels": {
                    "tier": "packed",
                    "dtype": source,
                    "shape": ["*", 7],
                    "wire_dtype": wire,
                    "lossy": lossy,
                },
            },
        }
    )


def special_floats(n: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (n,), generator=gen, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32).to(dtype)
    specials = torch.tensor(
        [
            0.0,
            -0.0,
            float("inf"),
            -float("inf"),
            float("nan"),
            1e-40,
            -1e-45,
            3.4e38,
            65504.0,
            65520.0,
            1.00390625,
            1.01171875,
        ],
        dtype=dtype,
    )
    return torch.cat([specials, x])[:n]


@pytest.mark.parametrize(
    ("source", "wire"),
    [
        ("float32", "bfloat16"),
        ("float32", "float16"),
        ("float64", "float32"),
        ("float64", "bfloat16"),
    ],
)
def test_wire_cast_is_bit_identical_to_torch(source, wire):
    x = special_floats(7 * 3000, getattr(torch, source)).view(-1, 7)
    schema = cast_schema(source, wire)
    decoded = py_wire.decode(py_wire.encode({"pixels": [x[:1000], None, x[1000:].t().t()]}, schema))
    got = decoded["pixels"].as_tensor()
    want = x.to(getattr(torch, wire))
    assert got.dtype == want.dtype
    bits = {2: torch.int16, 4: torch.int32}[want.element_size()]
    assert torch.equal(got.view(bits), want.view(bits))
    back = py_wire.decode(py_wire.encode({"pixels": [x]}, schema), source_dtype=True)
    assert back["pixels"].as_tensor().dtype == getattr(torch, source)


def test_narrowing_must_be_declared_lossy_and_integers_never_cast():
    with pytest.raises(SchemaError, match="narrows float32: declare lossy = true"):
        py_wire.Schema.from_toml(
            'name = "x"\n[fields.p]\ntier = "packed"\ndtype = "float32"\nshape = ["*"]\n'
            'wire_dtype = "bfloat16"\n',
            "x.toml",
        )
    with pytest.raises(SchemaError, match="integers are never cast"):
        cast_schema("int64", "int32")


def test_wire_cast_takes_the_declared_dtype_or_the_wire_dtype():
    # Already-cast data (a decoded frame being re-encoded) goes through as is: nothing is lost.
    pre_cast = torch.randn(2, 7).to(torch.bfloat16)
    frame = py_wire.encode({"pixels": [pre_cast]}, cast_schema())
    assert torch.equal(py_wire.decode(frame)["pixels"].as_tensor(), pre_cast)
    with pytest.raises(
        BatchError,
        match="dtype float16 but the schema declares float32 \\(or its wire dtype bfloat16\\)",
    ):
        py_wire.encode({"pixels": [torch.zeros(2, 7, dtype=torch.float16)]}, cast_schema())


# -- stages and pack dims ------------------------------------------------------------------


def test_fields_for_and_unknown_stage():
    assert "pixel_values" in QWEN.fields_for("logprob")
    assert "advantages" not in QWEN.fields_for("logprob")
    with pytest.raises(SchemaError, match="no stage 'rollout'"):
        QWEN.fields_for("rollout")


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
def test_forward_stages_receive_the_same_media(name):
    schema = py_wire.load_schema(name)
    stages = [s for s in ("logprob", "ref_logprob", "train") if s in schema.stages]
    media = media_fields(name, schema)
    seen = [media & set(schema.fields_for(s)) for s in stages]
    assert all(s == seen[0] for s in seen), dict(zip(stages, seen, strict=True))


def test_pack_dim_one_round_trips():
    schema = py_wire.Schema.from_dict(
        {
            "name": "smol",
            "fields": {
                "pv": {
                    "tier": "packed",
                    "dtype": "float32",
                    "shape": [1, "*", 3, "*", "*"],
                    "pack_dim": 1,
                }
            },
        }
    )
    rows = [
        torch.randn(1, 2, 3, 4, 4),
        None,
        [torch.randn(1, 1, 3, 4, 4), torch.randn(1, 3, 3, 4, 4)],
    ]
    pt = py_wire.decode(py_wire.encode({"pv": py_wire.PackedTensor(rows, dim_to_pack=1)}, schema))
    assert pt["pv"].dim_to_pack == 1
    whole = pt["pv"].as_tensor()
    assert whole.shape == (1, 6, 3, 4, 4)
    assert torch.equal(whole, torch.cat([rows[0], *rows[2]], dim=1))


def test_count_from_a_token_count_field():
    img, image, end = 131073, 131072, 131074
    schema = py_wire.Schema.from_dict(
        {
            "name": "counted",
            "sequence_field": "input_ids",
            "fields": {
                "input_ids": {"tier": "per_token", "dtype": "int64"},
                "pixel_values": {"tier": "packed", "dtype": "float32", "shape": ["*", 3, "*", "*"]},
                "num_tokens": {"tier": "packed", "dtype": "int64", "shape": ["*"]},
            },
            "contracts": [
                {
                    "name": "tiles",
                    "media_field": "pixel_values",
                    "token_id": image,
                    "begin_token_id": img,
                    "end_token_id": end,
                    "count": "field",
                    "count_field": "num_tokens",
                }
            ],
        }
    )
    ids = [img, image, image, end, img, image, end]
    batch = {
        "input_ids": [torch.tensor(ids)],
        "pixel_values": [torch.zeros(2, 3, 4, 4)],
        "num_tokens": [torch.tensor([2, 1])],
    }
    py_wire.encode(batch, schema)
    batch["num_tokens"] = [torch.tensor([2, 2])]
    with pytest.raises(ContractError, match="row 0, image 1"):
        py_wire.encode(batch, schema)
    batch["num_tokens"] = [torch.tensor([2, 1, 1])]
    with pytest.raises(ContractError, match="num_tokens lists 3 images but pixel_values has 2"):
        py_wire.encode(batch, schema)
