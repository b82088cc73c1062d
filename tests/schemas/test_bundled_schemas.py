"""Bundled schemas and their generators: load, round-trip bit-exactly, keep placeholder runs
aligned with the media, give every forward stage the same multimodal fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import py_wire
from py_wire import ContractError, PackedTensor, PlaceholderContract, Schema
from py_wire._schema import column_fields, schema_file_json_schema
from py_wire.synth import GENERATORS, generate, nemotron_omni_batch, smolvlm_batch
from py_wire.testing import assert_batch_equal
from tests.helpers import VERL_RESPONSE_ALIGNED, media_fields

BUNDLED = py_wire.bundled_schemas()
WITH_CONTRACTS = [n for n in BUNDLED if py_wire.load_schema(n).contracts]
MULTIMODAL = [n for n in BUNDLED if n != "text_grpo" and not n.endswith("/text")]
#: Schemas under a framework's folder carry that framework's names and dtypes.
FRAMEWORK = [n for n in BUNDLED if "/" in n]
FORWARD_STAGES = ("logprob", "ref_logprob", "train")
TYPE_ID_FIELDS = ("mm_token_type_ids", "token_type_ids")
JSON_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "schema-file.schema.json"


def _media_rows(batch: dict[str, Any], *fields: str) -> list[int]:
    """Rows with at least one segment in any of ``fields``."""
    return [
        i for i in range(len(batch["input_ids"])) if any(batch[f][i] is not None for f in fields)
    ]


def _contract_media_rows(batch: dict[str, Any], schema: Schema) -> list[int]:
    return _media_rows(batch, *(c.media_field for c in schema.contracts))


# -- loading ---------------------------------------------------------------------------------


def test_every_family_is_bundled_with_a_generator() -> None:
    expected = {
        "gemma3",
        "nemotron_omni",
        "qwen2_5_vl",
        "qwen2_5_vl_video",
        "qwen3_vl",
        "smolvlm",
        "text_grpo",
    }
    expected |= {"nemo_rl/qwen2_5_vl", "nemo_rl/text", "verl/qwen2_5_vl", "verl/text"}
    assert expected <= set(BUNDLED)
    assert set(GENERATORS) == set(BUNDLED)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_schema_loads(name: str) -> None:
    schema = py_wire.load_schema(name)
    assert schema.name == name
    assert schema.description
    assert schema.sequence_field == "input_ids"
    # verl carries no lengths tensor: its rows are cut by attention_mask.
    assert schema.lengths_field == (None if name.startswith("verl/") else "input_lengths")


@pytest.mark.parametrize("name", BUNDLED)
def test_forward_stages_get_the_same_multimodal_fields(name: str) -> None:
    """logprob, ref_logprob and train must see the same media (the image-blind training bug
    class: a worker that silently runs without pixels)."""
    schema = py_wire.load_schema(name)
    multimodal = media_fields(name, schema)
    assert (
        multimodal
        >= {n for n, f in schema.fields.items() if f.tier == "packed" or n in TYPE_ID_FIELDS}
        - VERL_RESPONSE_ALIGNED
    )
    per_stage = {s: multimodal & set(schema.fields_for(s)) for s in FORWARD_STAGES}
    assert per_stage["logprob"] == per_stage["ref_logprob"] == per_stage["train"], per_stage
    if name in MULTIMODAL:
        assert per_stage["train"], f"{name}: no multimodal field reaches the trainer"
    for c in schema.contracts:
        for ref in (c.media_field, c.grid_field, c.sizes_field):
            if ref is not None:
                assert ref in per_stage["train"], f"{name}: contract field {ref} not in train"


def test_family_facts() -> None:
    """Widths, token ids and dtypes from the models' configs and processors."""
    qwen3 = py_wire.load_schema("qwen3_vl")
    assert qwen3.fields["pixel_values"].shape == ("*", 3 * 2 * 16 * 16)
    (c,) = qwen3.contracts
    assert (c.token_id, c.begin_token_id, c.end_token_id, c.merge_size) == (
        151655,
        151652,
        151653,
        2,
    )
    video = py_wire.load_schema("qwen2_5_vl_video")
    assert [c.token_id for c in video.contracts] == [151655, 151656]
    assert [c.grid_field for c in video.contracts] == ["image_grid_thw", "video_grid_thw"]
    assert video.fields["second_per_grid_ts"].shape == ("*",)
    gemma = py_wire.load_schema("gemma3")
    (c,) = gemma.contracts
    assert (c.count, c.tokens_per_image, c.token_id, c.begin_token_id, c.end_token_id) == (
        "fixed",
        256,
        262144,
        255999,
        256000,
    )
    assert gemma.fields["pixel_values"].shape == ("*", 3, 896, 896)
    nemotron = py_wire.load_schema("nemotron_omni")
    pixels = nemotron.fields["pixel_values"]
    assert (pixels.dtype, pixels.wire_dtype, pixels.lossy) == ("float32", "bfloat16", True)
    assert nemotron.fields["imgs_sizes"].dtype == "int64"
    (c,) = nemotron.contracts
    assert (c.count, c.sizes_field, c.patch_size, c.downsample_ratio) == (
        "image_size",
        "imgs_sizes",
        16,
        0.5,
    )
    smol = py_wire.load_schema("smolvlm")
    assert smol.fields["pixel_values"].pack_dim == 1
    assert smol.fields["pixel_attention_mask"].pack_dim == 1
    assert smol.fields["pixel_attention_mask"].dtype == "int64"
    # Only Nemotron's pixels are narrowed on the wire.
    for name in BUNDLED:
        for field_name, f in py_wire.load_schema(name).fields.items():
            if (name, field_name) != ("nemotron_omni", "pixel_values"):  # the only wire cast
                assert f.stored_dtype == f.dtype, (name, field_name)


# -- generators ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUNDLED)
def test_generated_batch_round_trips(name: str) -> None:
    schema = py_wire.load_schema(name)
    batch = generate(name, 8 if name != "text_grpo" else 16, seed=3)
    frame = py_wire.encode(batch, schema)
    assert_batch_equal(py_wire.decode(frame), batch, schema)
    assert_batch_equal(py_wire.decode(memoryview(frame), layout="list"), batch, schema)
    train = py_wire.decode(frame, stage="train")
    present = {k for k, v in batch.items() if v is not None}
    absent_packed = {
        n for n in schema.fields_for("train") if schema.fields[n].tier == "packed"
    } - present  # decode(stage=) presents them as rows without segments
    assert set(train) == (present & set(schema.fields_for("train"))) | absent_packed
    for n in absent_packed:
        if schema.fields[n].encoding is not None:  # per-row values: none in any row
            assert train[n] == [None] * frame.num_rows
        else:
            assert train[n].segment_counts() == [0] * frame.num_rows


@pytest.mark.parametrize("name", MULTIMODAL)
def test_default_batch_is_realistic(name: str) -> None:
    """Default size: text-only rows, GRPO groups sharing the prompt's media tensor, stored once."""
    schema = py_wire.load_schema(name)
    batch = GENERATORS[name]()
    # The first packed field of tensors (per-row strings and JSON values are not media).
    media = next(n for n, f in schema.fields.items() if f.tier == "packed" and f.encoding is None)
    if schema.contracts:  # the images the schema's contract checks
        media = schema.contracts[0].media_field
    rows = batch[media]
    assert any(r is None for r in rows), "no text-only row"
    assert any(r is not None for r in rows), "no row with media"
    shared = [i for i in range(1, len(rows)) if rows[i] is not None and rows[i] is rows[i - 1]]
    assert shared, "GRPO samples do not share the prompt's media tensor"
    frame = py_wire.encode(batch, schema)
    packed = {f.name: f for f in frame.layout.fields}[media]
    assert packed.num_segments < packed.num_refs


@pytest.mark.parametrize("name", BUNDLED)
def test_generators_are_deterministic(name: str) -> None:
    a = py_wire.encode(generate(name, 4, seed=7), name)
    b = py_wire.encode(generate(name, 4, seed=7), name)
    c = py_wire.encode(generate(name, 4, seed=8), name)
    assert bytes(a) == bytes(b)
    assert bytes(a) != bytes(c)


def _runs(ids: torch.Tensor, token_id: int) -> list[tuple[int, int]]:
    """(start, length) of every maximal run of ``token_id``."""
    out: list[tuple[int, int]] = []
    hits = (ids == token_id).tolist()
    i = 0
    while i < len(hits):
        if hits[i]:
            j = i
            while j < len(hits) and hits[j]:
                j += 1
            out.append((i, j - i))
            i = j
        else:
            i += 1
    return out


def _segments(row: Any) -> list[torch.Tensor]:
    if row is None:
        return []
    return [row] if isinstance(row, torch.Tensor) else list(row)


def _expected_counts(batch: dict[str, Any], c: PlaceholderContract, row: int) -> list[int]:
    """Feature counts per image, by the contract's rule (an independent reference)."""
    if c.count == "grid_thw":
        assert c.grid_field is not None
        grids = _segments(batch[c.grid_field][row])
        return [int(t * h * w) // c.merge_size**2 for g in grids for t, h, w in g.tolist()]
    if c.count == "fixed":
        assert c.tokens_per_image is not None
        items = sum(s.shape[0] for s in _segments(batch[c.media_field][row]))
        return [c.tokens_per_image] * items
    assert c.sizes_field is not None
    sizes = _segments(batch[c.sizes_field][row])
    r = c.downsample_ratio
    p = c.patch_size
    return [int((h // p) * r) * int((w // p) * r) for s in sizes for h, w in s.tolist()]


def _check_alignment(batch: dict[str, Any], schema: Schema) -> list[int]:
    """Rows whose placeholder runs do not match their media; also checks the wrapping."""
    bad = set()
    for c in schema.contracts:
        for row, ids in enumerate(batch["input_ids"]):
            runs = _runs(ids, c.token_id)
            if [n for _, n in runs] != _expected_counts(batch, c, row):
                bad.add(row)
                continue
            for start, n in runs:
                assert int(ids[start - 1]) == c.begin_token_id, (schema.name, row, start)
                assert int(ids[start + n]) == c.end_token_id, (schema.name, row, start)
    return sorted(bad)


@pytest.mark.parametrize("name", WITH_CONTRACTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_placeholder_runs_match_media(name: str, seed: int) -> None:
    schema = py_wire.load_schema(name)
    batch = generate(name, 8, seed=seed)
    assert _check_alignment(batch, schema) == []
    row = _contract_media_rows(batch, schema)[0]
    broken = generate(name, 8, seed=seed, misalign_row=row)
    assert _check_alignment(broken, schema) == [row]
    assert len(broken["input_ids"][row]) == len(batch["input_ids"][row]) - 1
    if schema.lengths_field is not None:  # verl has none
        assert int(broken[schema.lengths_field][row]) == len(broken["input_ids"][row])
    py_wire.encode(batch, schema)  # aligned batches always encode


def test_misalign_row_needs_a_media_row() -> None:
    batch = generate("qwen3_vl", 8)
    text_only = [i for i, r in enumerate(batch["pixel_values"]) if r is None]
    with pytest.raises(ValueError, match="no placeholder run"):
        generate("qwen3_vl", 8, misalign_row=text_only[0])
    with pytest.raises(ValueError, match="out of range"):
        generate("qwen3_vl", 4, misalign_row=4)
    with pytest.raises(ValueError, match="no placeholder runs"):
        generate("text_grpo", 4, misalign_row=0)
    with pytest.raises(ValueError, match="no generator"):
        generate("llava", 4)


@pytest.mark.parametrize("name", WITH_CONTRACTS)
def test_misaligned_batch_raises_contract_error(name: str) -> None:
    schema = py_wire.load_schema(name)
    aligned = generate(name, 8, seed=2)
    row = _contract_media_rows(aligned, schema)[-1]
    with pytest.raises(ContractError, match=rf"\brow {row}\b"):
        py_wire.encode(generate(name, 8, seed=2, misalign_row=row), schema)


# -- family specifics ------------------------------------------------------------------------


def test_qwen_video_fields() -> None:
    batch = generate("qwen2_5_vl_video", 16, seed=1)
    videos = _media_rows(batch, "pixel_values_videos")
    assert videos
    for row in videos:
        grid = batch["video_grid_thw"][row]
        seconds = batch["second_per_grid_ts"][row]
        assert seconds.shape == (grid.shape[0],) and seconds.dtype == torch.float32
        assert batch["pixel_values_videos"][row].shape[0] == int(grid.prod(-1).sum())
        types, ids = batch["mm_token_type_ids"][row], batch["input_ids"][row]
        assert torch.equal(types == 2, ids == 151656)
        assert torch.equal(types == 1, ids == 151655)


def test_gemma3_crops_and_token_types() -> None:
    batch = generate("gemma3", 16, seed=0)
    assert any(int(c.sum()) for c in batch["num_crops"] if c is not None), "no pan-and-scan"
    for row in range(16):
        ids, types = batch["input_ids"][row], batch["token_type_ids"][row]
        assert torch.equal(types, (ids == 262144).to(torch.int64))
        crops, pixels = batch["num_crops"][row], batch["pixel_values"][row]
        if crops is None:
            assert pixels is None
        else:
            assert pixels.shape[0] == len(crops) + int(crops.sum())


def test_nemotron_pixels_are_bf16_on_the_wire() -> None:
    schema = py_wire.load_schema("nemotron_omni")
    batch = nemotron_omni_batch(8, seed=4, two_turn_fraction=1.0)
    assert any(r is not None and len(r) > 1 for r in batch["pixel_values"]), "no multi-turn row"
    out = py_wire.decode(py_wire.encode(batch, schema))
    for row, segs in enumerate(batch["pixel_values"]):
        got = out["pixel_values"][row]
        if segs is None:
            assert got is None
            continue
        for seg, sizes, decoded in zip(segs, batch["imgs_sizes"][row], got, strict=True):
            assert seg.dtype == torch.float32 and decoded.dtype == torch.bfloat16
            assert torch.equal(decoded, seg.to(torch.bfloat16))
            # A turn is padded to its largest image; imgs_sizes keeps the true sizes.
            assert list(seg.shape[2:]) == sizes.max(0).values.tolist()
            for k, (h, w) in enumerate(sizes.tolist()):
                assert not seg[k, :, h:, :].any() and not seg[k, :, :, w:].any()


def test_smolvlm_round_trips_along_pack_dim_1() -> None:
    schema = py_wire.load_schema("smolvlm")
    batch = smolvlm_batch(12, seed=5, tile_sizes=(128, 192), image_seq_len=16)
    out = py_wire.decode(py_wire.encode(batch, schema))
    assert_batch_equal(out, batch, schema)
    pixels, mask = out["pixel_values"], out["pixel_attention_mask"]
    assert isinstance(pixels, PackedTensor) and pixels.dim_to_pack == 1
    assert mask.dim_to_pack == 1
    segments = [s for r in batch["pixel_values"] if r is not None for s in _segments(r)]
    sizes = {s.shape[-1] for s in segments}
    assert len(sizes) > 1, "tile sizes should differ between processor calls"
    padded = pixels.as_tensor(pad_to_max_shape=True)
    assert padded.shape == (1, sum(s.shape[1] for s in segments), 3, max(sizes), max(sizes))
    start = 0
    for s in segments:  # each segment's tiles, in order along dim 1, zero-padded
        n, size = s.shape[1], s.shape[-1]
        assert torch.equal(padded[:, start : start + n, :, :size, :size], s)
        assert not padded[:, start : start + n, :, size:, :].any()
        start += n
    masks = [s for r in batch["pixel_attention_mask"] if r is not None for s in _segments(r)]
    assert all(set(m.unique().tolist()) <= {0, 1} for m in masks)
    # Tiles of one size across the batch: as_tensor concatenates along dim 1, no padding.
    uniform = py_wire.load_schema("smolvlm")
    batch = smolvlm_batch(8, seed=5, tile_sizes=(128,), image_seq_len=16)
    out = py_wire.decode(py_wire.encode(batch, uniform))
    segments = [s for r in batch["pixel_values"] if r is not None for s in _segments(r)]
    whole = out["pixel_values"].as_tensor()
    assert whole is not None and torch.equal(whole, torch.cat(segments, dim=1))
    masks = [s for r in batch["pixel_attention_mask"] if r is not None for s in _segments(r)]
    assert torch.equal(out["pixel_attention_mask"].as_tensor(), torch.cat(masks, dim=1))


# -- the schema-file JSON Schema -------------------------------------------------------------


def test_json_schema_file_matches_the_model() -> None:
    """Fails when the pydantic model changes without re-exporting:
    ``python -m py_wire.cli schema export-json-schema > schemas/schema-file.schema.json``."""
    assert json.loads(JSON_SCHEMA.read_text()) == schema_file_json_schema()


def test_json_schema_describes_the_bundled_files() -> None:
    """Every key the bundled files use is a property the JSON Schema declares."""
    import tomllib

    doc = json.loads(JSON_SCHEMA.read_text())
    defs = doc["$defs"]
    for name in BUNDLED:
        data = tomllib.loads((JSON_SCHEMA.parent / f"{name}.toml").read_text())
        assert set(data) <= set(doc["properties"]), name
        for field in data["fields"].values():
            assert set(field) <= set(defs["FieldDef"]["properties"]), name
        for contract in data.get("contracts", []):
            assert set(contract) <= set(defs["PlaceholderContract"]["properties"]), name


# -- framework schemas -----------------------------------------------------------------------


def test_framework_schemas_use_the_frameworks_names_and_dtypes() -> None:
    nemo = py_wire.load_schema("nemo_rl/qwen2_5_vl")
    dtypes = {n: f.dtype for n, f in nemo.fields.items()}
    assert dtypes["input_lengths"] == "int32"
    assert dtypes["token_mask"] == "int64"
    assert dtypes["pixel_values"] == "bfloat16"
    assert dtypes["sample_mask"] == "float32"
    assert {"prev_logprobs", "reference_policy_logprobs", "generation_logprobs"} <= set(nemo.fields)
    assert not {"reward", "loss_multiplier"} & set(nemo.fields)
    assert nemo.fields["mm_token_type_ids"].required is False
    assert set(py_wire.load_schema("nemo_rl/text").fields) == set(nemo.fields) - {
        "pixel_values", "image_grid_thw", "mm_token_type_ids"}  # fmt: skip
    verl = py_wire.load_schema("verl/qwen2_5_vl")
    for name in ("input_ids", "responses", "response_mask", "old_log_probs", "ref_log_prob",
                 "advantages", "returns", "token_level_scores", "token_level_rewards",
                 "position_ids", "pixel_values", "image_grid_thw", "uid"):  # fmt: skip
        assert name in verl.fields, name
    pos = verl.fields["position_ids"]
    assert (pos.tier, pos.shape, pos.pack_dim) == ("packed", (4, "*"), 1)
    assert py_wire.load_schema("verl/text").fields["position_ids"].tier == "per_token"


NEMO_RL_MEDIA = ["qwen2_5_vl", "qwen3_vl", "gemma3", "nemotron_omni", "smolvlm"]
NEMO_RL_TRAIN = {"input_ids", "input_lengths", "token_mask", "sample_mask", "generation_logprobs",
                 "prev_logprobs", "reference_policy_logprobs", "advantages"}  # fmt: skip


@pytest.mark.parametrize("family", NEMO_RL_MEDIA)
def test_nemo_rl_schemas_are_the_neutral_media_with_nemo_rl_train_names(family: str) -> None:
    """nemo_rl/<family> = the neutral <family>'s media, geometry and contracts (pixels in bf16,
    as get_multimodal_dict(pixel_dtype=...) casts them) + NeMo-RL's train-data fields."""
    neutral, nemo = py_wire.load_schema(family), py_wire.load_schema(f"nemo_rl/{family}")
    # policy_version / token_policy_versions serve async RL: not NeMo-RL's.
    neutral_core = {"input_ids", "input_lengths", "token_mask", "loss_multiplier", "reward",
                    "generation_logprobs", "advantages",
                    "policy_version", "token_policy_versions"}  # fmt: skip
    extra = set(neutral.fields) - neutral_core  # media, geometry, per-token type ids
    assert set(nemo.fields) == extra | NEMO_RL_TRAIN
    assert nemo.contracts == neutral.contracts
    keys = ("tier", "shape", "pack_dim", "required", "stages")
    for name in extra:
        a, b = neutral.fields[name], nemo.fields[name]
        assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys], name
        want = "bfloat16" if name == "pixel_values" else a.dtype
        assert (b.dtype, b.wire_dtype, b.lossy, b.accept) == (want, None, False, ()), name
    reference = py_wire.load_schema("nemo_rl/qwen2_5_vl")
    for name in NEMO_RL_TRAIN:
        a, b = reference.fields[name], nemo.fields[name]
        keys_t = ("tier", "dtype", "shape", "required", "stages")
        assert [getattr(a, k) for k in keys_t] == [getattr(b, k) for k in keys_t], name
    assert nemo.fields["input_lengths"].dtype == "int32"
    assert nemo.fields["token_mask"].dtype == "int64"
    assert nemo.fields["reference_policy_logprobs"].required is False


@pytest.mark.parametrize("name", FRAMEWORK)
def test_framework_generators_send_the_declared_dtypes(name: str) -> None:
    schema = py_wire.load_schema(name)
    batch = generate(name, 8, seed=1)
    for field, value in batch.items():
        encoding = schema.fields[field].encoding
        if encoding is not None:  # one value a row, of the encoding's kind
            assert value and all(isinstance(v, str) for v in value) == (encoding == "utf8")
            continue
        rows = value if isinstance(value, list) else [value]
        # a row is None, a tensor, or a list of segments (Nemotron Omni: one per turn)
        tensors = [t for r in rows for t in (r if isinstance(r, list) else [r]) if t is not None]
        assert tensors, field
        for t in tensors:
            assert str(t.dtype).removeprefix("torch.") == schema.fields[field].dtype, field


def test_slash_names_resolve_only_under_the_schema_folder(tmp_path: Path) -> None:
    assert py_wire.load_schema("verl/text").name == "verl/text"
    for bad in ("../qwen2_5_vl", "nemo_rl/../qwen2_5_vl", "/etc/passwd", "nemo_rl/", "NEMO/x"):
        with pytest.raises(py_wire.SchemaError):
            py_wire.load_schema(bad)
    with pytest.raises(py_wire.SchemaError, match="no bundled schema 'nemo_rl/llava'"):
        py_wire.load_schema("nemo_rl/llava")
    # A .toml path still loads a file.
    path = tmp_path / "mine.toml"
    path.write_text((Path(py_wire.__file__).parent / "schemas/verl/text.toml").read_text())
    assert py_wire.load_schema(path).name == "verl/text"


# -- issue 28: which stored column a field travels in is declared --------------------------

COLUMN_BASE = """
name = "cols"
sequence_field = "input_ids"

[fields.input_ids]
tier = "per_token"
dtype = "int64"

[fields.pixel_values]
tier = "packed"
dtype = "float32"
shape = ["*", 4]
required = false
column = "media"

[fields.image_grid_thw]
tier = "packed"
dtype = "int64"
shape = ["*", 3]
required = false
column = "media"

[[contracts]]
name = "images"
media_field = "pixel_values"
token_id = 7
count = "grid_thw"
grid_field = "image_grid_thw"
"""


def test_columns_are_declared_and_checked_at_load() -> None:
    schema = Schema.from_toml(COLUMN_BASE)
    assert column_fields(schema, "media") == ["pixel_values", "image_grid_thw"]
    assert column_fields(schema, "text") == ["input_ids"]
    # the default column is left out of the canonical form: fingerprints of schemas that
    # declare none are unchanged
    assert '"column":"text"' not in schema.canonical_json
    assert '"column":"media"' in schema.canonical_json
    text = py_wire.load_schema("text_grpo")
    assert "column" not in text.canonical_json
    with pytest.raises(py_wire.SchemaError, match="column"):
        Schema.from_toml(COLUMN_BASE.replace('column = "media"', 'column = "images"', 1))
    with pytest.raises(py_wire.SchemaError, match="must share a column"):
        Schema.from_toml(
            COLUMN_BASE.replace(
                'column = "media"\n\n[fields.image_grid_thw]', "\n[fields.image_grid_thw]"
            )
        )
    seq_media = COLUMN_BASE.replace('dtype = "int64"\n', 'dtype = "int64"\ncolumn = "media"\n', 1)
    with pytest.raises(py_wire.SchemaError, match="sequence_field 'input_ids'"):
        Schema.from_toml(seq_media)


def test_a_decode_never_makes_up_media_for_placeholder_rows() -> None:
    """A frame encoded for a stage without the images (generation) decoded for a stage that
    needs them: rows whose tokens hold placeholder runs are a ContractError naming the field,
    never rows without media."""
    batch = generate("qwen2_5_vl", 4)
    text_only = {k: v for k, v in batch.items() if k not in ("pixel_values", "image_grid_thw")}
    frame = py_wire.encode(text_only, "qwen2_5_vl", stage="generation")
    with pytest.raises(ContractError, match="pixel_values") as err:
        py_wire.decode(frame, stage="logprob")
    assert err.value.field == "pixel_values" and err.value.row is not None
    # rows without placeholder tokens: no media is the truth
    plain = {**text_only, "input_ids": [torch.where(r >= 151652, 0, r) for r in batch["input_ids"]]}
    plain["mm_token_type_ids"] = [torch.zeros_like(r) for r in batch["mm_token_type_ids"]]
    got = py_wire.decode(py_wire.encode(plain, "qwen2_5_vl", stage="generation"), stage="logprob")
    assert got["pixel_values"].num_segments == 0 and len(got["pixel_values"]) == 4
