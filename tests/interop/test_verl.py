"""py_wire.interop.verl: a verl-shaped DataProto (Qwen2.5-VL with mRoPE and per-row media, and
text) to a frame, to bytes and back, bit-exact on every cell the mask marks and on media, with a
GRPO group's media stored once. The batches are built the way verl's agent loop builds them
(verl/experimental/agent_loop/agent_loop.py): prompts left-padded to ``rollout.prompt_length``,
responses right-padded to ``rollout.response_length``, ``response_mask`` 0 on tool tokens,
``DataProto.repeat(interleave=True)`` sharing each prompt's ``multi_modal_inputs`` dict across
its group. Padded cells of model outputs hold garbage, as they do in verl."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire.interop import verl as pw_verl

PAD = 151643  # Qwen2.5 <|endoftext|>, verl's tokenizer.pad_token_id
VISION_START, IMAGE_PAD, VISION_END = 151652, 151655, 151653
P, R = 48, 24  # rollout.prompt_length, rollout.response_length
FLOAT_KEYS = ("old_log_probs", "ref_log_prob", "advantages", "returns", "token_level_rewards")


@dataclass
class StandInDataProto:
    """DataProto's documented attributes, used when verl is not importable."""

    batch: Any = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.batch["input_ids"].shape[0])


def make_dataproto(batch: dict[str, torch.Tensor], non_tensor: dict[str, np.ndarray]) -> Any:
    cls = pw_verl.dataproto_class()
    if cls is None:
        return StandInDataProto(batch, non_tensor, {"temperature": 1.0})
    return cls.from_dict(tensors=batch, non_tensors=non_tensor, meta_info={"temperature": 1.0})


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


def verl_batch(vl: bool, n: int = 4, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """Three GRPO prompts x n samples: two images, one image, text only (VL); plain (text)."""
    g = torch.Generator().manual_seed(seed)
    prompt_grids = [[(1, 4, 4), (1, 6, 4)], [(1, 4, 8)], []] if vl else [[], [], []]
    rows, mm_rows, uids = [], [], []
    for k, grids in enumerate(prompt_grids):
        prompt = prompt_tokens(grids, 5 + 3 * k, g)
        mmi = media(grids, g) if grids else ({} if k % 2 else None)
        uid = str(uuid.UUID(int=k + 1000 * seed))
        for s in range(n):
            r_len = [R, 1, 9, 17][s % 4]  # one full response (no right padding), one of 1 token
            rows.append((prompt, torch.randint(0, 150000, (r_len,), generator=g).tolist()))
        mm_rows.append(mmi)
        uids.append(uid)
    b = len(rows)
    input_ids = torch.full((b, P + R), PAD, dtype=torch.int64)
    attention_mask = torch.zeros((b, P + R), dtype=torch.int64)
    response_mask = torch.zeros((b, R), dtype=torch.int64)
    for i, (prompt, resp) in enumerate(rows):
        input_ids[i, P - len(prompt) : P] = torch.tensor(prompt)
        input_ids[i, P : P + len(resp)] = torch.tensor(resp)
        attention_mask[i, P - len(prompt) : P + len(resp)] = 1
        response_mask[i, : len(resp)] = 1
        response_mask[i, 2:5] = 0  # tool / observation tokens inside the response
    batch: dict[str, torch.Tensor] = {
        "prompts": input_ids[:, :P].clone(),
        "responses": input_ids[:, P:].clone(),
        "response_mask": response_mask,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
    }
    valid = attention_mask.bool()
    text_pos = torch.clamp(
        torch.cumsum(attention_mask, 1) - 1, min=0
    )  # compute_position_id_with_mask
    if vl:
        pos = torch.ones((b, 4, P + R), dtype=torch.int64)  # get_rope_index fills with 1
        for i in range(b):
            nv = int(valid[i].sum())
            pos[i, 0, valid[i]] = torch.arange(nv)
            pos[i, 1:, valid[i]] = torch.randint(0, 4096, (3, nv), generator=g)
        batch["position_ids"] = pos
    else:
        batch["position_ids"] = text_pos
    for key in FLOAT_KEYS:  # model outputs: garbage in padded cells, as verl leaves them
        batch[key] = torch.randn((b, R), generator=g)
    non_tensor = {"uid": np.repeat(np.array(uids, dtype=object), n)}
    if vl:  # DataProto.repeat(interleave=True): np.repeat shares each prompt's dict object
        non_tensor["multi_modal_inputs"] = np.repeat(np.array(mm_rows, dtype=object), n)
    snapshot = {
        "batch": {k: v.clone() for k, v in batch.items()},
        "mm": [
            None if d is None else {k: t.clone() for k, t in d.items()}
            for d in non_tensor.get("multi_modal_inputs", [None] * b)
        ],
        "uid": list(non_tensor["uid"]),
    }
    return make_dataproto(batch, non_tensor), snapshot


def parts(data: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    if isinstance(data, dict):
        return data["batch"], data["non_tensor_batch"], data["meta_info"]
    return data.batch, data.non_tensor_batch, data.meta_info


def assert_unchanged(dp: Any, snapshot: dict[str, Any]) -> None:
    batch, non_tensor, _ = parts(dp)
    assert sorted(batch.keys()) == sorted(snapshot["batch"])
    for k, v in snapshot["batch"].items():
        assert torch.equal(batch[k], v), k
    assert list(non_tensor["uid"]) == snapshot["uid"]
    if "multi_modal_inputs" in non_tensor:
        for d, want in zip(non_tensor["multi_modal_inputs"], snapshot["mm"], strict=True):
            assert (d is None) == (want is None)
            for k, t in (want or {}).items():
                assert torch.equal(d[k], t)


def assert_round_trip(dp: Any, back: Any, vl: bool) -> None:
    src, src_nt, _ = parts(dp)
    got, got_nt, _ = parts(back)
    mask = src["attention_mask"].bool()
    resp_mask = mask[:, P:]
    # The mask and everything verl pads with constants: equal cell for cell, padding included.
    for k in ("attention_mask", "input_ids", "prompts", "responses", "response_mask"):
        assert got[k].dtype == src[k].dtype, k
        assert torch.equal(got[k], src[k]), k
    # Model outputs: bit-exact on the cells the mask marks; padded cells come back as 0.
    for k in FLOAT_KEYS:
        assert got[k].shape == src[k].shape and got[k].dtype == src[k].dtype, k
        assert torch.equal(got[k][resp_mask], src[k][resp_mask]), k
        assert not got[k][~resp_mask].any(), k
    # position_ids: bit-exact everywhere (padded cells filled as verl fills them).
    assert torch.equal(got["position_ids"], src["position_ids"])
    assert list(got_nt["uid"]) == list(src_nt["uid"])
    assert got_nt["uid"].dtype == object
    if not vl:
        assert "multi_modal_inputs" not in got_nt
        return
    for i, (d, want) in enumerate(
        zip(got_nt["multi_modal_inputs"], src_nt["multi_modal_inputs"], strict=True)
    ):
        assert sorted(d) == sorted(want or {}), i
        for k, t in (want or {}).items():
            assert d[k].dtype == t.dtype and torch.equal(d[k], t), (i, k)


@pytest.mark.parametrize("vl", [True, False], ids=["qwen2_5_vl", "text"])
def test_round_trip_bit_exact(vl: bool) -> None:
    dp, snapshot = verl_batch(vl)
    schema = "verl/qwen2_5_vl" if vl else "verl/text"
    frame = pw_verl.to_frame(dp, schema, stage="train", drop_meta_info=True)
    assert_unchanged(dp, snapshot)  # no edits to the caller's object
    wire = bytes(frame)
    back = pw_verl.from_frame(
        wire, meta_info={"temperature": 1.0}, pad_token_id=PAD, prompt_length=P, response_length=R
    )
    cls = pw_verl.dataproto_class()
    if cls is not None:
        assert isinstance(back, cls) and len(back) == len(dp)
    else:
        assert isinstance(back, dict)
    assert parts(back)[2] == {"temperature": 1.0}
    assert_round_trip(dp, back, vl)
    # A frame's rows are the mask's tokens: the sequence lengths are the mask's sums.
    ids = py_wire.decode(wire)["input_ids"]
    assert ids.offsets().diff().tolist() == snapshot["batch"]["attention_mask"].sum(1).tolist()


def test_grpo_group_media_stored_once_and_shared_after_decode() -> None:
    dp, _ = verl_batch(True, n=4)
    frame = pw_verl.to_frame(dp, "verl/qwen2_5_vl", drop_meta_info=True)
    fields = {f.name: f for f in frame.layout.fields}
    for k in ("pixel_values", "image_grid_thw", "images_seqlens"):
        # Two prompts with images x 4 samples: 8 references, 2 stored segments.
        assert (fields[k].num_segments, fields[k].num_refs) == (2, 8), k
    assert (fields["uid"].num_segments, fields["uid"].num_refs) == (3, 12)
    unshared = pw_verl.to_frame(_copy_media(dp), "verl/qwen2_5_vl", drop_meta_info=True)
    ufields = {f.name: f for f in unshared.layout.fields}
    assert ufields["pixel_values"].num_segments == ufields["pixel_values"].num_refs == 8
    assert len(bytes(unshared)) - len(bytes(frame)) >= 3 * (40 + 32) * 1176 * 4
    back = pw_verl.from_frame(frame, pad_token_id=PAD)
    rows = parts(back)[1]["multi_modal_inputs"]
    for group in range(2):
        first = rows[4 * group]
        for s in range(1, 4):
            assert rows[4 * group + s] is first  # one dict per group, as DataProto.repeat gives
    assert rows[0]["pixel_values"].data_ptr() != rows[4]["pixel_values"].data_ptr()


def _copy_media(dp: Any) -> Any:
    batch, non_tensor, _ = parts(dp)
    nt = dict(non_tensor)
    nt["multi_modal_inputs"] = np.array(
        [
            None if d is None else {k: t.clone() for k, t in d.items()}
            for d in nt["multi_modal_inputs"]
        ],
        dtype=object,
    )
    return StandInDataProto({k: batch[k] for k in pw_verl._keys(batch)}, nt, {})


def test_unpadding_follows_the_mask_not_a_side() -> None:
    """Rows are the tokens the mask marks: left padding of the prompt is skipped, not kept."""
    dp, snapshot = verl_batch(False)
    frame = pw_verl.to_frame(dp, "verl/text", drop_meta_info=True)
    rows = py_wire.decode(frame, layout="list")["input_ids"]
    src = snapshot["batch"]
    for i, row in enumerate(rows):
        want = src["input_ids"][i][src["attention_mask"][i].bool()]
        assert torch.equal(row, want), i
        assert row[0] != PAD and row[-1] != PAD  # neither the left nor the right padding


def test_default_widths_are_the_longest_rows() -> None:
    dp, snapshot = verl_batch(False)
    back = pw_verl.from_frame(
        pw_verl.to_frame(dp, "verl/text", drop_meta_info=True), pad_token_id=PAD
    )
    batch = parts(back)[0]
    lengths = snapshot["batch"]["attention_mask"].sum(1)
    r = snapshot["batch"]["attention_mask"][:, P:].sum(1)
    assert batch["responses"].shape[1] == int(r.max()) == R
    assert batch["prompts"].shape[1] == int((lengths - r).max())
    # prompts are left-padded: the last column is every row's last prompt token.
    assert torch.equal(batch["prompts"][:, -1], snapshot["batch"]["prompts"][:, -1])


def test_generation_stage_without_responses() -> None:
    dp, snapshot = verl_batch(False)
    src = snapshot["batch"]
    prompt_only = StandInDataProto(
        {
            "input_ids": src["prompts"],
            "attention_mask": src["attention_mask"][:, :P],
            "position_ids": src["position_ids"][:, :P],
        },
        {"uid": parts(dp)[1]["uid"]},
    )
    frame = pw_verl.to_frame(prompt_only, "verl/text", stage="generation")
    got = parts(pw_verl.from_frame(frame, pad_token_id=PAD, prompt_length=P))[0]
    for k in ("input_ids", "attention_mask", "position_ids"):
        assert torch.equal(got[k], prompt_only.batch[k]), k


@pytest.mark.parametrize(
    ("where", "key"),
    [("batch", "rm_scores"), ("non_tensor_batch", "__num_turns__"), ("mm", "video_grid_thw")],
)
def test_unknown_keys_refused_by_name(where: str, key: str) -> None:
    dp, _ = verl_batch(True)
    batch, non_tensor, _ = parts(dp)
    b = {k: batch[k] for k in pw_verl._keys(batch)}
    nt = dict(non_tensor)
    if where == "batch":
        b[key] = torch.zeros(len(dp), R)
    elif where == "non_tensor_batch":
        nt[key] = np.ones(len(dp), dtype=np.int32)
    else:
        rows = [dict(d or {}) for d in nt["multi_modal_inputs"]]
        rows[0][key] = torch.ones(1, 3, dtype=torch.int64)
        nt["multi_modal_inputs"] = np.array(rows, dtype=object)
    with pytest.raises(py_wire.BatchError, match=key):
        pw_verl.to_frame(StandInDataProto(b, nt, {}), "verl/qwen2_5_vl")


def test_meta_info_is_never_dropped_silently() -> None:
    dp, _ = verl_batch(False)
    with pytest.raises(py_wire.BatchError, match="temperature"):
        pw_verl.to_frame(dp, "verl/text")


def test_prompts_that_disagree_with_input_ids_are_refused() -> None:
    dp, snapshot = verl_batch(False)
    b = dict(snapshot["batch"])
    b["prompts"] = b["prompts"].clone()
    b["prompts"][0, -1] += 1
    with pytest.raises(py_wire.BatchError, match="prompts"):
        pw_verl.to_frame(StandInDataProto(b, {"uid": parts(dp)[1]["uid"]}), "verl/text")


def test_mrope_channels_checked_against_the_schema() -> None:
    dp, snapshot = verl_batch(True)
    b = dict(snapshot["batch"])
    b["position_ids"] = b["position_ids"][:, 1:]  # [B, 3, L]: older verl's layout
    nt = dict(parts(dp)[1])
    with pytest.raises(py_wire.BatchError, match="position_ids"):
        pw_verl.to_frame(StandInDataProto(b, nt), "verl/qwen2_5_vl")


def test_stand_in_and_plain_mapping_give_the_same_frame() -> None:
    dp, snapshot = verl_batch(True)
    nt = parts(dp)[1]
    a = pw_verl.to_frame(StandInDataProto(dict(snapshot["batch"]), dict(nt)), "verl/qwen2_5_vl")
    b = pw_verl.to_frame({**snapshot["batch"], **nt}, "verl/qwen2_5_vl")
    assert bytes(a) == bytes(b)


def test_empty_response_and_empty_uid_rows() -> None:
    """A row with no response tokens (an [0] segment) and an empty uid string (an empty
    segment that starts where the next one does) come back as they went."""
    _, snapshot = verl_batch(False)
    b = {k: v.clone() for k, v in snapshot["batch"].items()}
    b["attention_mask"][1, P:] = 0
    b["input_ids"][1, P:] = PAD
    b["responses"][1] = PAD
    b["response_mask"][1] = 0
    b["position_ids"] = torch.clamp(torch.cumsum(b["attention_mask"], 1) - 1, min=0)
    uids = np.array([""] * 4 + ["x"] * 4 + ["yz"] * 4, dtype=object)
    frame = pw_verl.to_frame(StandInDataProto(b, {"uid": uids}), "verl/text")
    got, nt, _ = parts(
        pw_verl.from_frame(bytes(frame), pad_token_id=PAD, prompt_length=P, response_length=R)
    )
    assert list(nt["uid"]) == list(uids)
    for k in ("input_ids", "attention_mask", "responses", "response_mask", "position_ids"):
        assert torch.equal(got[k], b[k]), k
    assert not got["advantages"][1].any()


@pytest.mark.parametrize("writable", ["auto", "view"])
def test_from_frame_of_read_only_bytes_follows_the_writable_policy(writable: str) -> None:
    """Media tensors come back as views: of the read-only source only with "view"; the default
    gives views of a private copy, so an in-place write never reaches the source."""
    dp, _ = verl_batch(True, n=4)
    raw = bytes(pw_verl.to_frame(dp, "verl/qwen2_5_vl", drop_meta_info=True))
    lo = np.frombuffer(raw, dtype=np.uint8).ctypes.data
    back = pw_verl.from_frame(raw, pad_token_id=PAD, writable=writable)  # type: ignore[arg-type]
    pixels = parts(back)[1]["multi_modal_inputs"][0]["pixel_values"]
    inside = lo <= pixels.data_ptr() < lo + len(raw)
    assert inside == (writable == "view")
    if writable == "auto":
        pixels.zero_()
        assert raw == bytes(pw_verl.to_frame(dp, "verl/qwen2_5_vl", drop_meta_info=True))


def _edited_frame(schema: str, edit: Any) -> py_wire.Frame:
    """A frame py_wire accepts whose rows were edited as a hostile producer could."""
    dp, _ = verl_batch(schema.endswith("qwen2_5_vl"))
    frame = pw_verl.to_frame(dp, schema, drop_meta_info=True)
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


def test_a_uid_row_of_two_strings_is_refused() -> None:
    def two_strings(rows: dict[str, Any]) -> None:
        rows["uid"][2] = [torch.tensor(list(b"abc"), dtype=torch.uint8)] * 2

    with pytest.raises(py_wire.BatchError, match=r"'uid', row 2: 2 strings") as e:
        pw_verl.from_frame(_edited_frame("verl/text", two_strings))
    assert (e.value.field, e.value.row) == ("uid", 2)


def test_a_uid_that_is_not_utf8_is_a_batch_error() -> None:
    def not_utf8(rows: dict[str, Any]) -> None:
        rows["uid"][1] = [torch.tensor([0x61, 0xFF, 0x62], dtype=torch.uint8)]

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
    dp, _ = verl_batch(False)
    frame = pw_verl.to_frame(dp, "verl/text", drop_meta_info=True)
    with pytest.raises(error, match=argument):
        pw_verl.from_frame(frame, **{argument: value})
