"""py_wire.interop.verl against the real verl (``verl==0.9.1`` from PyPI, installed by
``scripts/dev.sh``): DataProtos built by verl's own code paths (Qwen2.5-VL with mRoPE and
per-row media, and text) to a frame, to bytes and back, with no glue and no keyword arguments.

The batches follow verl's agent loop (verl/experimental/agent_loop/agent_loop.py): prompts
left-padded to ``rollout.prompt_length`` and responses right-padded to
``rollout.response_length`` with verl's ``pad_sequence_to_length`` / ``pad_2d_list_to_length``,
``response_mask`` 0 on tool tokens, text ``position_ids`` by ``compute_position_id_with_mask``,
mRoPE rows by ``verl.models.transformers.qwen2_vl.get_rope_index`` under the agent loop's text
row, ``rollout_log_probs`` padded with 0 and ``rm_scores`` on each response's last token,
the dataset's ``non_tensor_batch`` keys (``data_source``, ``reward_model``, ``extra_info``,
``index``, ``raw_prompt``, ``uid``, ``__num_turns__``), ``DataProto.repeat(interleave=True)``
sharing each prompt's ``multi_modal_inputs`` dict across its group, and a ``meta_info`` of
metrics. Model outputs (``old_log_probs``, ...) hold garbage in padded cells, as in verl."""

from __future__ import annotations

import types
import uuid
from typing import Any

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.models.transformers.qwen2_vl import get_rope_index
from verl.utils.model import compute_position_id_with_mask
from verl.utils.torch_functional import pad_2d_list_to_length, pad_sequence_to_length

import py_wire
from py_wire.interop import verl as pw_verl
from tests.helpers import with_metadata

PAD = 151643  # Qwen2.5 <|endoftext|>, verl's tokenizer.pad_token_id
VISION_START, IMAGE_PAD, VISION_END = 151652, 151655, 151653
P, R = 48, 24  # rollout.prompt_length, rollout.response_length
MODEL_KEYS = ("old_log_probs", "ref_log_prob", "advantages", "returns", "token_level_rewards")
#: What get_rope_index reads of a Qwen2.5-VL processor.
PROCESSOR = types.SimpleNamespace(
    image_processor=types.SimpleNamespace(merge_size=2),
    tokenizer=types.SimpleNamespace(
        convert_tokens_to_ids={
            "<|image_pad|>": IMAGE_PAD,
            "<|video_pad|>": 151656,
            "<|vision_start|>": VISION_START,
        }.__getitem__
    ),
)
META_INFO = {
    "metrics": [{"generate_sequences": 0.25, "tool_calls": 1.0}],
    "global_token_num": [61, 40],
    "temperature": 1.0,
}


def media(grids: list[tuple[int, int, int]], g: torch.Generator) -> dict[str, torch.Tensor]:
    thw = torch.tensor(grids, dtype=torch.int64)
    patches = int((thw[:, 0] * thw[:, 1] * thw[:, 2]).sum())
    return {
        "pixel_values": torch.randn(patches, 1176, generator=g),
        "image_grid_thw": thw,
        "images_seqlens": torch.repeat_interleave(thw[:, 1] * thw[:, 2], thw[:, 0]),
    }


def prompt_tokens(grids: list[tuple[int, int, int]], n_text: int, g: torch.Generator) -> list[int]:
    ids: list[int] = torch.randint(0, 150000, (n_text,), generator=g).tolist()
    for t, h, w in grids:
        ids += [VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END]
    return ids + torch.randint(0, 150000, (3,), generator=g).tolist()


def left_padded(rows: list[list[int]], fill: int) -> torch.Tensor:
    return torch.cat(
        [pad_sequence_to_length(torch.tensor([r]), P, fill, left_pad=True) for r in rows]
    )


def positions(input_ids: torch.Tensor, mask: torch.Tensor, mmi: dict[str, Any] | None) -> Any:
    """The agent loop's _compute_position_ids for Qwen2.5-VL: a text row (1 where padded, an
    arange where valid) on top of get_rope_index's three rows."""
    valid = mask.bool()
    text = torch.ones((1, input_ids.numel()), dtype=torch.long)
    text[0, valid] = torch.arange(int(valid.sum()))
    grid = (mmi or {}).get("image_grid_thw")
    vision = get_rope_index(PROCESSOR, input_ids, image_grid_thw=grid, attention_mask=mask)
    return torch.cat([text, vision])


def verl_batch(vl: bool, n: int = 4, seed: int = 0, rollout: bool = False) -> DataProto:
    """Three GRPO prompts x n samples: two images, one image, text only (VL); plain (text).
    ``rollout``: only what the rollout writes (no model outputs yet)."""
    g = torch.Generator().manual_seed(seed)
    prompt_grids = [[(1, 4, 4), (1, 6, 4)], [(1, 4, 8)], []] if vl else [[], [], []]
    prompts = [prompt_tokens(grids, 5 + 3 * k, g) for k, grids in enumerate(prompt_grids)]
    non_tensor: dict[str, np.ndarray] = {
        "data_source": np.array(["openai/gsm8k", "geo3k", "geo3k"], dtype=object),
        "reward_model": np.array(
            [{"ground_truth": str(7 * k), "style": "rule"} for k in range(3)], dtype=object
        ),
        "extra_info": np.array(
            [{"index": k, "split": "train", "answer": f"#### {7 * k}"} for k in range(3)],
            dtype=object,
        ),
        "index": np.array([k for k in range(3)], dtype=object),
        # np.fromiter, as verl's collate_fn builds object columns (np.array would make a
        # [3, 1] array of the message lists).
        "raw_prompt": np.fromiter(
            ([{"role": "user", "content": f"question {k}"}] for k in range(3)),
            dtype=object,
            count=3,
        ),
        "uid": np.array([str(uuid.UUID(int=k + 1000 * seed)) for k in range(3)], dtype=object),
    }
    if vl:
        # The agent loop gives a text-only row an empty dict (_compute_multi_modal_inputs).
        mm = [media(grids, g) if grids else {} for grids in prompt_grids]
        non_tensor["multi_modal_inputs"] = np.array(mm, dtype=object)
    prompt_mask = left_padded([[1] * len(p) for p in prompts], 0)
    gen = DataProto.from_dict(
        tensors={"input_ids": left_padded(prompts, PAD), "attention_mask": prompt_mask},
        non_tensors=non_tensor,
    ).repeat(n, interleave=True)
    b = len(gen)
    responses = [
        torch.randint(0, 150000, ([R, 1, 9, 17][s % 4],), generator=g).tolist()
        for _ in range(3)
        for s in range(n)
    ]
    tools = [[1] * len(r) for r in responses]
    for t in tools:
        t[2:5] = [0] * len(t[2:5])  # tool / observation tokens inside the response
    resp_ids = pad_2d_list_to_length(responses, PAD, max_length=R)
    resp_attn = pad_2d_list_to_length([[1] * len(r) for r in responses], 0, max_length=R)
    input_ids = torch.cat([gen.batch["input_ids"], resp_ids], dim=1)
    attention_mask = torch.cat([gen.batch["attention_mask"], resp_attn], dim=1)
    rm_scores = torch.zeros((b, R), dtype=torch.float32)
    rm_scores[torch.arange(b), torch.tensor([len(r) - 1 for r in responses])] = 1.0
    batch: dict[str, torch.Tensor] = {
        "prompts": gen.batch["input_ids"],
        "responses": resp_ids,
        "response_mask": pad_2d_list_to_length(tools, 0, max_length=R) * resp_attn,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "rollout_log_probs": pad_2d_list_to_length(
            [(-torch.rand(len(r), generator=g)).tolist() for r in responses], 0.0, max_length=R
        ).float(),
        "rm_scores": rm_scores,
    }
    if vl:
        mmi = gen.non_tensor_batch["multi_modal_inputs"]
        batch["position_ids"] = torch.stack(
            [positions(input_ids[i], attention_mask[i], mmi[i]) for i in range(b)]
        )
    else:
        batch["position_ids"] = compute_position_id_with_mask(attention_mask)
    if not rollout:
        for key in MODEL_KEYS:  # model outputs: garbage in padded cells, as verl leaves them
            batch[key] = torch.randn((b, R), generator=g)
    non_tensor = dict(gen.non_tensor_batch)
    non_tensor["__num_turns__"] = np.array([2 + (i % 3) for i in range(b)], dtype=np.int32)
    return DataProto.from_dict(tensors=batch, non_tensors=non_tensor, meta_info=dict(META_INFO))


def snapshot_of(dp: DataProto) -> DataProto:
    """A deep copy to check that to_frame edits nothing."""
    import copy

    return copy.deepcopy(dp)


def schema_of(vl: bool) -> str:
    return "verl/qwen2_5_vl" if vl else "verl/text"


def assert_same_dataproto(got: DataProto, want: DataProto, *, model_keys: bool) -> None:
    """Every cell verl's builders write equal, padding included; model outputs (garbage in
    their padding) equal on the cells the mask marks, 0 elsewhere."""
    assert isinstance(got, DataProto) and len(got) == len(want)
    resp_mask = want.batch["attention_mask"][:, P:].bool()
    assert sorted(got.batch.keys()) == sorted(want.batch.keys())
    for k in want.batch.keys():  # noqa: SIM118 (iterating a TensorDict walks its rows)
        a, b = got.batch[k], want.batch[k]
        assert a.dtype == b.dtype and a.shape == b.shape, k
        if model_keys and k in MODEL_KEYS:
            assert torch.equal(a[resp_mask], b[resp_mask]), k
            assert not a[~resp_mask].any(), k
        else:
            assert torch.equal(a, b), k
    assert sorted(got.non_tensor_batch) == sorted(want.non_tensor_batch)
    for k, b in want.non_tensor_batch.items():
        a = got.non_tensor_batch[k]
        assert a.dtype == b.dtype and a.shape == b.shape, k
        if k == "multi_modal_inputs":
            for i, (d, e) in enumerate(zip(a, b, strict=True)):
                assert isinstance(d, dict) and sorted(d) == sorted(e), i
                for key, t in e.items():
                    assert d[key].dtype == t.dtype and torch.equal(d[key], t), (i, key)
        else:
            assert a.tolist() == b.tolist(), k
    assert got.meta_info == want.meta_info


@pytest.mark.parametrize("vl", [True, False], ids=["qwen2_5_vl", "text"])
@pytest.mark.parametrize("rollout", [True, False], ids=["rollout", "train"])
def test_round_trip_with_no_glue_and_no_arguments(vl: bool, rollout: bool) -> None:
    dp = verl_batch(vl, rollout=rollout)
    before = snapshot_of(dp)
    # A rollout's batch goes to the logprob workers (the schema's stage for it).
    frame = pw_verl.to_frame(dp, schema_of(vl), "logprob" if rollout else None)
    assert_same_dataproto(dp, before, model_keys=False)  # no edits to the caller's object
    back = pw_verl.from_frame(bytes(frame))
    assert_same_dataproto(back, before, model_keys=not rollout)
    # A frame's rows are the mask's tokens: the sequence lengths are the mask's sums.
    ids = py_wire.decode(frame)["input_ids"]
    assert ids.offsets().diff().tolist() == before.batch["attention_mask"].sum(1).tolist()


def test_union_with_the_pre_transport_data() -> None:
    """verl's trainer unions what a worker sends back with the batch it kept: every common
    key must be equal (union_tensor_dict / union_numpy_dict assert it)."""
    kept = verl_batch(False, rollout=True)
    back = pw_verl.from_frame(pw_verl.to_frame(kept, "verl/text", "logprob"))
    merged = snapshot_of(kept).union(back)
    assert len(merged) == len(kept)
    # Qwen2.5-VL: verl's own union cannot compare two dicts of tensors (its _deep_equal meets
    # `tensor == tensor`), so, as the trainer does, the media stay on one side.
    kept = verl_batch(True, rollout=True)
    back = pw_verl.from_frame(pw_verl.to_frame(kept, "verl/qwen2_5_vl", "logprob"))
    back.non_tensor_batch.pop("multi_modal_inputs")
    assert len(snapshot_of(kept).union(back)) == len(kept)


def test_chunks_and_shards_keep_the_source_widths() -> None:
    dp = verl_batch(True)
    frame = pw_verl.to_frame(dp, "verl/qwen2_5_vl")
    for i, chunk in enumerate(py_wire.chunk(frame, 3)):
        got = pw_verl.from_frame(chunk)
        want = dp.chunk(3)[i]
        assert got.batch["input_ids"].shape == want.batch["input_ids"].shape == (4, P + R)
        assert_same_dataproto(got, want, model_keys=True)
    # verl's own chunks, each sent as a frame: a chunk's rows are shorter than P + R, its
    # widths are still verl's.
    for chunk in dp.chunk(4):
        assert_same_dataproto(
            pw_verl.from_frame(pw_verl.to_frame(chunk, "verl/qwen2_5_vl")), chunk, model_keys=True
        )


def test_arguments_override_the_record() -> None:
    dp = verl_batch(False, rollout=True)
    frame = pw_verl.to_frame(dp, "verl/text", "logprob")
    back = pw_verl.from_frame(
        frame, pad_token_id=0, prompt_length=P + 2, response_length=R, meta_info={"a": 1}
    )
    assert back.batch["input_ids"].shape == (len(dp), P + 2 + R)
    mask = back.batch["attention_mask"].bool()
    assert torch.equal(
        back.batch["input_ids"][mask], dp.batch["input_ids"][dp.batch["attention_mask"].bool()]
    )
    assert not back.batch["input_ids"][~mask].any()  # padded with the given id
    assert back.meta_info == {"a": 1}
    with pytest.raises(py_wire.BatchError, match="prompt_length=3 is shorter"):
        pw_verl.from_frame(frame, prompt_length=3)


def test_a_frame_of_another_producer_gets_the_longest_rows() -> None:
    """With nothing recorded (a frame py_wire.encode made), widths are the longest rows."""
    dp = verl_batch(False, rollout=True)
    rows = py_wire.decode(pw_verl.to_frame(dp, "verl/text", "logprob"), layout="list")
    back = pw_verl.from_frame(py_wire.encode(rows, "verl/text", stage="logprob"))
    lengths = dp.batch["attention_mask"].sum(1)
    r = dp.batch["attention_mask"][:, P:].sum(1)
    assert back.batch["responses"].shape[1] == int(r.max()) == R
    assert back.batch["prompts"].shape[1] == int((lengths - r).max())
    assert back.meta_info == {}
    # prompts are left-padded: the last column is every row's last prompt token.
    assert torch.equal(back.batch["prompts"][:, -1], dp.batch["prompts"][:, -1])


def test_grpo_group_media_stored_once_and_shared_after_decode() -> None:
    dp = verl_batch(True, n=4)
    frame = pw_verl.to_frame(dp, "verl/qwen2_5_vl")
    fields = {f.name: f for f in frame.layout.fields}
    for k in ("pixel_values", "image_grid_thw", "images_seqlens"):
        # Two prompts with images x 4 samples: 8 references, 2 stored segments.
        assert (fields[k].num_segments, fields[k].num_refs) == (2, 8), k
    for k in ("uid", "reward_model", "extra_info", "raw_prompt"):
        assert (fields[k].num_segments, fields[k].num_refs) == (3, 12), k
    assert (fields["data_source"].num_segments, fields["data_source"].num_refs) == (2, 12)
    unshared = pw_verl.to_frame(_copy_media(dp), "verl/qwen2_5_vl")
    ufields = {f.name: f for f in unshared.layout.fields}
    assert ufields["pixel_values"].num_segments == ufields["pixel_values"].num_refs == 8
    assert len(bytes(unshared)) - len(bytes(frame)) >= 3 * (40 + 32) * 1176 * 4
    rows = pw_verl.from_frame(frame).non_tensor_batch["multi_modal_inputs"]
    for group in range(2):
        first = rows[4 * group]
        for s in range(1, 4):
            assert rows[4 * group + s] is first  # one dict per group, as DataProto.repeat gives
    assert rows[0]["pixel_values"].data_ptr() != rows[4]["pixel_values"].data_ptr()


def _copy_media(dp: DataProto) -> DataProto:
    out = snapshot_of(dp)
    out.non_tensor_batch["multi_modal_inputs"] = np.array(
        [
            None if d is None else {k: t.clone() for k, t in d.items()}
            for d in dp.non_tensor_batch["multi_modal_inputs"]
        ],
        dtype=object,
    )
    return out


def _with(dp: DataProto, **non_tensor: np.ndarray) -> DataProto:
    out = snapshot_of(dp)
    out.non_tensor_batch.update(non_tensor)
    return out


def test_unpadding_follows_the_mask_not_a_side() -> None:
    """Rows are the tokens the mask marks: left padding of the prompt is skipped, not kept."""
    dp = verl_batch(False)
    rows = py_wire.decode(pw_verl.to_frame(dp, "verl/text"), layout="list")["input_ids"]
    for i, row in enumerate(rows):
        want = dp.batch["input_ids"][i][dp.batch["attention_mask"][i].bool()]
        assert torch.equal(row, want), i
        assert row[0] != PAD and row[-1] != PAD  # neither the left nor the right padding


def test_generation_stage_without_responses() -> None:
    dp = verl_batch(False)
    src = dp.batch
    prompt_only = DataProto.from_dict(
        tensors={
            "input_ids": src["prompts"],
            "attention_mask": src["attention_mask"][:, :P],
            "position_ids": src["position_ids"][:, :P],
        },
        non_tensors={"uid": dp.non_tensor_batch["uid"]},
    )
    frame = pw_verl.to_frame(prompt_only, "verl/text", stage="generation")
    got = pw_verl.from_frame(frame).batch
    for k in ("input_ids", "attention_mask", "position_ids"):
        assert torch.equal(got[k], prompt_only.batch[k]), k


@pytest.mark.parametrize(
    ("where", "key"),
    [("batch", "entropys"), ("non_tensor_batch", "acc"), ("mm", "video_grid_thw")],
)
def test_unknown_keys_refused_by_name(where: str, key: str) -> None:
    dp = snapshot_of(verl_batch(True))
    if where == "batch":
        dp.batch[key] = torch.zeros(len(dp), R)
    elif where == "non_tensor_batch":
        dp.non_tensor_batch[key] = np.ones(len(dp), dtype=np.float64)
    else:
        rows = [dict(d or {}) for d in dp.non_tensor_batch["multi_modal_inputs"]]
        rows[0][key] = torch.ones(1, 3, dtype=torch.int64)
        dp.non_tensor_batch["multi_modal_inputs"] = np.array(rows, dtype=object)
    with pytest.raises(py_wire.BatchError, match=key) as e:
        pw_verl.to_frame(dp, "verl/qwen2_5_vl")
    assert key in str(e.value.field)


def test_undeclared_keys_travel_once_a_schema_declares_them(tmp_path: Any) -> None:
    """A batch's own non_tensor_batch keys (reward extra info) are a schema that extends the
    bundled one: strings and JSON values, no glue in the adapter."""
    path = tmp_path / "my_verl.toml"
    path.write_text(
        'extends = "verl/text"\nname = "my_verl"\n'
        '[fields.acc]\ntier = "scalar"\ndtype = "float64"\nrequired = false\n'
        '[fields.pred]\ntier = "packed"\ndtype = "uint8"\nshape = ["*"]\n'
        'required = false\nencoding = "utf8"\n'
    )
    dp = verl_batch(False)
    b = len(dp)
    dp = _with(
        dp, acc=np.linspace(0, 1, b), pred=np.array([f"p{i}" for i in range(b)], dtype=object)
    )
    back = pw_verl.from_frame(pw_verl.to_frame(dp, py_wire.load_schema(path)))
    assert_same_dataproto(back, dp, model_keys=True)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("extra_info", {"pair": (1, 2)}, "would not come back equal"),
        ("reward_model", {"score": float("nan")}, "not a JSON value"),
        ("index", {1, 2}, "not a JSON value"),
        ("data_source", 3, "holds int, not str"),
    ],
)
def test_values_json_cannot_carry_are_refused_by_field_and_row(
    key: str, value: Any, match: str
) -> None:
    dp = verl_batch(False)
    column = dp.non_tensor_batch[key].copy()
    column[5] = value
    with pytest.raises(py_wire.BatchError, match=match) as e:
        pw_verl.to_frame(_with(dp, **{key: column}), "verl/text")
    assert (e.value.field, e.value.row) == (key, 5)


def test_meta_info_that_json_cannot_carry_is_never_dropped_silently() -> None:
    dp = snapshot_of(verl_batch(False))
    dp.meta_info["shape"] = (1, 2)
    with pytest.raises(py_wire.BatchError, match=r"meta_info\['shape'\]"):
        pw_verl.to_frame(dp, "verl/text")
    back = pw_verl.from_frame(pw_verl.to_frame(dp, "verl/text", drop_meta_info=True))
    assert back.meta_info == {}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("verl.prompt_length", "-3"),
        ("verl.prompt_length", "9" * 30),
        ("verl.pad_values", "[1]"),
        ("verl.pad_values", '{"input_ids": 1.5}'),
        ("verl.pad_values", '{"nope": 1}'),
        ("verl.meta_info", "{"),
        ("verl.non_tensor", '["not_a_field"]'),
    ],
)
def test_a_record_that_to_frame_did_not_write_is_a_frame_error(key: str, value: str) -> None:
    dp = verl_batch(False, rollout=True)
    rows = py_wire.decode(pw_verl.to_frame(dp, "verl/text", "logprob"), layout="list")
    frame = py_wire.encode(rows, "verl/text", stage="logprob", metadata={key: value})
    with pytest.raises(py_wire.FrameError, match=key.replace(".", r"\.")):
        pw_verl.from_frame(frame)


def test_prompts_that_disagree_with_input_ids_are_refused() -> None:
    dp = snapshot_of(verl_batch(False))
    dp.batch["prompts"][0, -1] += 1
    with pytest.raises(py_wire.BatchError, match="prompts"):
        pw_verl.to_frame(dp, "verl/text")


def test_mrope_channels_checked_against_the_schema() -> None:
    dp = snapshot_of(verl_batch(True))
    batch = {k: dp.batch[k] for k in dp.batch.keys()}  # noqa: SIM118
    batch["position_ids"] = batch["position_ids"][:, 1:]  # [B, 3, L]: older verl's layout
    old = DataProto.from_dict(tensors=batch, non_tensors=dp.non_tensor_batch)
    with pytest.raises(py_wire.BatchError, match="position_ids"):
        pw_verl.to_frame(old, "verl/qwen2_5_vl")


def test_dataproto_and_plain_mapping_give_the_same_frame() -> None:
    dp = verl_batch(True)
    a = pw_verl.to_frame(dp, "verl/qwen2_5_vl", drop_meta_info=True)
    tensors = {k: dp.batch[k] for k in dp.batch.keys()}  # noqa: SIM118
    plain = {**tensors, **dp.non_tensor_batch}
    b = pw_verl.to_frame(plain, "verl/qwen2_5_vl")
    assert bytes(a) == bytes(b)


def test_empty_response_and_empty_uid_rows() -> None:
    """A row with no response tokens (an [0] segment) and an empty uid string (an empty
    segment that starts where the next one does) come back as they went."""
    dp = snapshot_of(verl_batch(False))
    b = dp.batch
    b["attention_mask"][1, P:] = 0
    b["input_ids"][1, P:] = PAD
    b["responses"][1] = PAD
    b["response_mask"][1] = 0
    b["rollout_log_probs"][1] = 0
    b["rm_scores"][1] = 0
    b["position_ids"] = compute_position_id_with_mask(b["attention_mask"])
    uids = np.array([""] * 4 + ["x"] * 4 + ["yz"] * 4, dtype=object)
    dp.non_tensor_batch["uid"] = uids
    back = pw_verl.from_frame(bytes(pw_verl.to_frame(dp, "verl/text")))
    assert list(back.non_tensor_batch["uid"]) == list(uids)
    for k in ("input_ids", "attention_mask", "responses", "response_mask", "position_ids"):
        assert torch.equal(back.batch[k], b[k]), k
    assert not back.batch["advantages"][1].any()


@pytest.mark.parametrize("writable", ["auto", "view"])
def test_from_frame_of_read_only_bytes_follows_the_writable_policy(writable: str) -> None:
    """Media tensors come back as views: of the read-only source only with "view"; the default
    gives views of a private copy, so an in-place write never reaches the source."""
    dp = verl_batch(True, n=4)
    raw = bytes(pw_verl.to_frame(dp, "verl/qwen2_5_vl"))
    lo = np.frombuffer(raw, dtype=np.uint8).ctypes.data
    back = pw_verl.from_frame(raw, writable=writable)  # type: ignore[arg-type]
    pixels = back.non_tensor_batch["multi_modal_inputs"][0]["pixel_values"]
    inside = lo <= pixels.data_ptr() < lo + len(raw)
    assert inside == (writable == "view")
    if writable == "auto":
        pixels.zero_()
        assert raw == bytes(pw_verl.to_frame(dp, "verl/qwen2_5_vl"))


def _edited_frame(schema: str, edit: Any) -> py_wire.Frame:
    """A frame py_wire accepts whose rows were edited as a hostile producer could."""
    dp = verl_batch(schema.endswith("qwen2_5_vl"))
    frame = pw_verl.to_frame(dp, schema)
    rows = py_wire.decode(frame, layout="list")
    edit(rows)
    return py_wire.encode(rows, schema)


def test_position_rows_that_disagree_with_input_ids_are_refused() -> None:
    def move_a_column(rows: dict[str, Any]) -> None:
        # Same total, one token's positions moved from row 0 to row 1.
        (a,), (b,) = rows["position_ids"][0], rows["position_ids"][1]
        rows["position_ids"][0] = [a[:, :-1]]
        rows["position_ids"][1] = [torch.cat([a[:, -1:], b], dim=1)]

    frame = _edited_frame("verl/qwen2_5_vl", move_a_column)
    with pytest.raises(py_wire.BatchError, match=r"'position_ids', row 0: positions for") as e:
        pw_verl.from_frame(frame)
    assert (e.value.field, e.value.row) == ("position_ids", 0)


def _utf8(value: str) -> list[torch.Tensor]:
    return [torch.tensor(list(value.encode()), dtype=torch.uint8)]


def test_a_uid_row_of_two_strings_is_refused() -> None:
    def two_strings(rows: dict[str, Any]) -> None:
        raw = [_utf8(v) for v in rows["uid"]]
        raw[2] = [torch.tensor(list(b"abc"), dtype=torch.uint8)] * 2
        rows["uid"] = py_wire.PackedTensor(raw)  # the stored bytes, as a producer could write

    with pytest.raises(py_wire.BatchError, match=r"'uid', row 2: 2 values") as e:
        pw_verl.from_frame(_edited_frame("verl/text", two_strings))
    assert (e.value.field, e.value.row) == ("uid", 2)


def test_a_uid_that_is_not_utf8_is_a_batch_error() -> None:
    def not_utf8(rows: dict[str, Any]) -> None:
        raw = [_utf8(v) for v in rows["uid"]]
        raw[1] = [torch.tensor([0x61, 0xFF, 0x62], dtype=torch.uint8)]
        rows["uid"] = py_wire.PackedTensor(raw)

    with pytest.raises(py_wire.BatchError, match=r"'uid', row 1: not UTF-8") as e:
        pw_verl.from_frame(_edited_frame("verl/text", not_utf8))
    assert (e.value.field, e.value.row) == ("uid", 1)


@pytest.mark.parametrize(
    ("argument", "value", "error"),
    [
        ("response_length", -1, py_wire.WireError),
        ("response_length", "24", TypeError),
        ("prompt_length", 2**70, py_wire.WireError),
        ("pad_token_id", 2**64, py_wire.WireError),
        ("pad_token_id", 1.5, TypeError),
        ("meta_info", [("a", 1)], TypeError),
    ],
)
def test_from_frame_arguments_name_themselves(argument: str, value: Any, error: type) -> None:
    frame = pw_verl.to_frame(verl_batch(False), "verl/text")
    with pytest.raises(error, match=argument):
        pw_verl.from_frame(frame, **{argument: value})


# -- recorded facts are hostile: bounded by the frame -----------------------------------------


def _verl_frame(rows: int) -> py_wire.Frame:
    return pw_verl.to_frame(
        {
            "input_ids": torch.tensor([[5, 6, 7, 8]] * rows),
            "attention_mask": torch.ones(rows, 4, dtype=torch.int64),
            "position_ids": torch.tensor([[0, 1, 2, 3]] * rows),
            "responses": torch.tensor([[7, 8]] * rows),
            "prompts": torch.tensor([[5, 6]] * rows),
            "response_mask": torch.ones(rows, 2, dtype=torch.int64),
            "old_log_probs": torch.full((rows, 2), -0.5),
            "advantages": torch.full((rows, 2), 0.5),
            "uid": np.array(["a"] * rows, dtype=object),
        },
        "verl/text",
    )


def test_verl_recorded_prompt_length_is_bounded_by_the_frame() -> None:
    frame = with_metadata(_verl_frame(64), **{"verl.prompt_length": str(2**24)})
    assert len(frame) < 64 * 1024
    with pytest.raises(py_wire.FrameError, match=r"verl\.prompt_length") as info:
        pw_verl.from_frame(frame)
    assert info.value.field == "verl.prompt_length"
    # The record of an honest frame still rebuilds the source's widths.
    out = pw_verl.from_frame(with_metadata(_verl_frame(64), **{"verl.prompt_length": "100"}))
    batch = out["batch"] if isinstance(out, dict) else out.batch
    assert tuple(batch["input_ids"].shape) == (64, 102)


def test_verl_recorded_pad_value_out_of_range_is_a_frame_error() -> None:
    frame = with_metadata(_verl_frame(2), **{"verl.pad_values": '{"advantages":1e39}'})
    with pytest.raises(py_wire.FrameError, match=r"verl\.pad_values"):
        pw_verl.from_frame(frame)


def test_to_fields_and_from_fields_are_to_frame_and_from_frame_around_a_callers_encode() -> None:
    """A caller that adds fields of its own (the verl stream's sample record) encodes what
    ``to_fields`` gives once, and rebuilds from its own decode with ``from_fields``, the record
    kept apart from the frame's metadata."""
    dp = verl_batch(True)
    before = snapshot_of(dp)
    fields, record = pw_verl.to_fields(dp, "verl/qwen2_5_vl")
    assert all(key.startswith("verl.") for key in record)
    frame = py_wire.encode(fields, "verl/qwen2_5_vl")  # no verl.* metadata in the frame
    assert not any(key.startswith("verl.") for key in frame.metadata)
    back = pw_verl.from_fields(py_wire.decode(frame), frame, record=record)
    assert_same_dataproto(back, before, model_keys=True)
    with_record = pw_verl.to_frame(dp, "verl/qwen2_5_vl")
    again = pw_verl.from_fields(py_wire.decode(with_record), with_record, meta_info={"a": 1})
    assert again.meta_info == {"a": 1}
    assert_same_dataproto(
        again, pw_verl.from_frame(with_record, meta_info={"a": 1}), model_keys=False
    )


def test_from_fields_refuses_values_that_are_not_the_frames_decode() -> None:
    frame = pw_verl.to_frame(verl_batch(False), "verl/text")
    other = pw_verl.to_frame(verl_batch(False, n=2), "verl/text")
    fields = py_wire.decode(frame)
    with pytest.raises(
        py_wire.BatchError, match=r"fields\[.responses.\].*12 rows.*PackedTensor of 6 rows"
    ):
        pw_verl.from_fields({**fields, "responses": py_wire.decode(other)["responses"]}, frame)
    with pytest.raises(py_wire.BatchError, match=r"fields\['old_log_probs'\].*list"):
        pw_verl.from_fields({**fields, "old_log_probs": [1.0] * 12}, frame)
    with pytest.raises(py_wire.BatchError, match=r"fields\['input_ids'\]"):
        pw_verl.from_fields({k: v for k, v in fields.items() if k != "input_ids"}, frame)
    with pytest.raises(py_wire.BatchError, match="'pixel_values' is not a field"):
        pw_verl.from_fields({**fields, "pixel_values": None}, frame)
    with pytest.raises(TypeError, match="record must be a mapping of str to str"):
        pw_verl.from_fields(fields, frame, record={"verl.prompt_length": 48})
