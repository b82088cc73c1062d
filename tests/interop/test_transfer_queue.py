"""py_wire frames through the real TransferQueue (PyPI ``transferqueue``): its controller and
storage on a local Ray, every test run once on each of two backends: SimpleStorage (TQ's
default: frames as jagged ``uint8`` columns through its storage units) and RayStore (each
group's frame one object in Ray's object store).

TQ's controller and each storage unit take one Ray CPU (``num_cpus=4``: with fewer,
``transfer_queue.init()`` hangs silently), so a watchdog ends the process, with tracebacks,
if the module runs past its budget instead of blocking CI forever."""

from __future__ import annotations

import faulthandler
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf

import py_wire
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.registry import generate
from tests.helpers import mapping_of

SCHEMA = "qwen2_5_vl"
GROUP = 4
#: Seconds the whole module may take (init included) before the watchdog fires.
WATCHDOG_S = 240


@pytest.fixture(scope="module", autouse=True, params=["SimpleStorage", "RayStore"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    # TQ logs an error that RayStore has no bootstrap (it needs none: its client makes its actor).
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    tq.init(OmegaConf.create({"backend": {"storage_backend": request.param}}))
    # TQ warns once per get that it caps threads at the core count: noise here.
    logging.getLogger("transfer_queue").setLevel(logging.ERROR)
    assert ptq.stores_frames_as_objects() == (request.param == "RayStore")
    try:
        yield request.param
    finally:
        tq.close()
        ray.shutdown()
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def batch() -> dict[str, Any]:
    return generate(SCHEMA, 12)


def assert_same(want: dict[str, Any], got: dict[str, Any]) -> None:
    assert list(got) == list(want) or set(got) == set(want)
    for name, a in want.items():
        b = got[name]
        if isinstance(a, py_wire.PackedTensor):
            assert len(a) == len(b), name
            for i, (ra, rb) in enumerate(zip(a.rows(), b.rows(), strict=True)):
                assert (ra is None) == (rb is None), (name, i)
                for sa, sb in zip(ra or [], rb or [], strict=True):
                    assert sa.dtype == sb.dtype and torch.equal(sa, sb), (name, i)
        elif isinstance(a, list):  # a field with an encoding: one value a row
            assert a == b, name
        elif a.is_nested:
            assert torch.equal(a.offsets(), b.offsets()), name
            assert a.dtype == b.dtype and torch.equal(a.values(), b.values()), name
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), name


def column_nbytes(value: Any) -> int:
    """The payload bytes TQ's get returned for one column, in either backend's form."""
    if isinstance(value, torch.Tensor):
        return value.values().numel()
    return sum(len(frame) for frame in value.tolist())


def keys(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_rows_come_back_bit_exact(batch: dict[str, Any]) -> None:
    want = py_wire.decode(py_wire.encode(batch, SCHEMA))
    meta = ptq.put(batch, SCHEMA, keys("exact", 3), "p", group_size=GROUP)
    assert meta.size == 3
    assert_same(want, ptq.get(keys("exact", 3), "p"))
    # any subset of groups, in any order: a group's rows in order, groups as asked
    got = ptq.get(["exact2", "exact0"], "p")
    assert_same(
        py_wire.decode(
            py_wire.take_rows(py_wire.encode(batch, SCHEMA), [8, 9, 10, 11, 0, 1, 2, 3])
        ),
        got,
    )


def test_media_stored_once_per_group(batch: dict[str, Any]) -> None:
    frames = ptq.get_frames(keys("exact", 3), "p", (ptq.MEDIA,))[ptq.MEDIA]
    shared_groups = 0
    for g, frame in enumerate(frames):
        pixels = py_wire.decode(frame)["pixel_values"]
        rows = batch["pixel_values"][g * GROUP : (g + 1) * GROUP]
        unique = {id(r): r for r in rows if r is not None}
        # the group's rows reference the same tensor: one physical segment on the wire
        values, _, seg_offsets, _, _ = pixels._csr()
        assert seg_offsets.numel() - 1 == len(unique)
        assert values.numel() == sum(r.numel() for r in unique.values())
        with_media = [r for r in rows if r is not None]
        if len(with_media) > len(unique):
            shared_groups += 1
            assert len(frame) < sum(r.numel() * 4 for r in with_media)
    # Else the test would pass without storing anything once: the batch must have such groups.
    assert shared_groups > 0, "no group of this batch shares an image"


def test_text_stage_fetch_moves_no_media(batch: dict[str, Any]) -> None:
    assert ptq.columns_for(SCHEMA, "generation") == (ptq.TEXT,)
    assert ptq.columns_for(SCHEMA, "train") == ptq.COLUMNS
    calls: list[Any] = []
    client = tq.get_client()
    real = client.get_data

    def spy(meta: Any) -> Any:
        out = real(meta)
        names = list(meta.field_names)
        calls.append((names, sum(column_nbytes(out[c]) for c in names)))
        return out

    client.get_data = spy
    try:
        got = ptq.get(keys("exact", 3), "p", stage="generation")
    finally:
        del client.get_data
    assert [c for c, _ in calls] == [[ptq.TEXT]]
    text_bytes = calls[0][1]
    assert text_bytes < 2_000_000  # the media column of this batch is tens of MB
    schema = py_wire.load_schema(SCHEMA)
    assert set(got) == set(schema.fields_for("generation")) & set(got)
    assert "pixel_values" not in got
    want = py_wire.decode(py_wire.encode(batch, SCHEMA), stage="generation")
    assert_same(want, got)


def test_dtype_drift_refused_at_the_producer(batch: dict[str, Any]) -> None:
    drifted = dict(batch, reward=batch["reward"].to(torch.bfloat16))
    before = tq.kv_list("p").get("p", {})
    with pytest.raises(py_wire.BatchError, match="reward"):
        ptq.put(drifted, SCHEMA, keys("drift", 3), "p", group_size=GROUP)
    assert not any(k.startswith("drift") for k in tq.kv_list("p").get("p", before))


def test_all_text_batch_has_text_column_only() -> None:
    text = generate("text_grpo", 6)
    ptq.put(text, "text_grpo", keys("text", 3), "p", group_size=2)
    assert ptq.columns_for("text_grpo") == (ptq.TEXT,)
    assert_same(py_wire.decode(py_wire.encode(text, "text_grpo")), ptq.get(keys("text", 3), "p"))


def test_text_only_groups_of_a_multimodal_schema() -> None:
    b = generate(SCHEMA, 8)
    b["pixel_values"] = [None] * 8
    b["image_grid_thw"] = [None] * 8
    b["input_ids"] = [torch.where(r == 151655, 0, r) for r in b["input_ids"]]
    b["input_ids"] = [torch.where((r == 151652) | (r == 151653), 0, r) for r in b["input_ids"]]
    b["mm_token_type_ids"] = [torch.zeros_like(r) for r in b["mm_token_type_ids"]]
    ptq.put(b, SCHEMA, keys("notext", 2), "p", group_size=4)
    got = ptq.get(keys("notext", 2), "p")
    assert got["pixel_values"].num_segments == 0
    assert_same(py_wire.decode(py_wire.encode(b, SCHEMA)), got)


def test_empty_batch_stores_nothing() -> None:
    empty = {k: v[:0] for k, v in generate("text_grpo", 2).items()}
    assert ptq.put(empty, "text_grpo", [], "p", group_size=2) is None
    with pytest.raises(py_wire.BatchError, match="keys") as err:
        ptq.get([], "p")
    assert err.value.field == "keys"


def test_bad_groups_and_keys_are_named(batch: dict[str, Any]) -> None:
    with pytest.raises(py_wire.BatchError, match="group_size") as err:
        ptq.put(batch, SCHEMA, keys("bad", 3), "p", group_size=5)
    assert err.value.field == "group_size"
    with pytest.raises(py_wire.BatchError, match="keys") as err:
        ptq.put(batch, SCHEMA, keys("bad", 2), "p", group_size=GROUP)
    assert err.value.field == "keys"
    # uneven groups (prompts with different n) are fine
    ptq.put(batch, SCHEMA, keys("uneven", 2), "p", group_size=[4, 8])
    assert_same(py_wire.decode(py_wire.encode(batch, SCHEMA)), ptq.get(keys("uneven", 2), "p"))


def test_tags_and_samplers_stay_tqs(batch: dict[str, Any]) -> None:
    ptq.put(
        batch, SCHEMA, keys("tag", 3), "q", group_size=GROUP, tags=[{"step": i} for i in range(3)]
    )
    listed = tq.kv_list("q")["q"]
    assert {k: v.get("step") for k, v in listed.items()} == {"tag0": 0, "tag1": 1, "tag2": 2}
    tq.kv_clear(keys=keys("tag", 3), partition_id="q")
    assert not tq.kv_list("q").get("q")


def test_a_foreign_column_is_a_frame_error(batch: dict[str, Any], backend: str) -> None:
    from tensordict import NonTensorStack, TensorDict

    if backend == "RayStore":
        text = NonTensorStack(*ptq.encode_group_frames(batch, SCHEMA, GROUP)[ptq.TEXT])
    else:
        text = ptq.encode_groups(batch, SCHEMA, GROUP)[ptq.TEXT]

    tq.kv_batch_put(
        keys=keys("swap", 3), partition_id="p", fields=TensorDict({ptq.MEDIA: text}, batch_size=[3])
    )
    with pytest.raises(py_wire.FrameError, match="column"):
        ptq.get_frames(keys("swap", 3), "p", (ptq.MEDIA,))


def test_raystore_frames_decode_in_the_object_store(batch: dict[str, Any], backend: str) -> None:
    """On RayStore a group's frame is read where Ray's object store holds it: the default decode
    maps it copy-on-write (no copy), and a write to a decoded view stays in this process."""
    if backend != "RayStore":
        assert not ptq.stores_frames_as_objects()
        return
    ptq.put(batch, SCHEMA, keys("cow", 3), "p", group_size=GROUP)
    (frame,) = ptq.get_frames(["cow1"], "p", (ptq.TEXT,))[ptq.TEXT]
    assert frame.storage == "pinned-buffer" and frame.pinned_by == "Ray's object store"
    assert frame.copy_on_write_refusal() is None
    got = ptq.get(["cow1"], "p")
    reward = got["reward"]
    perms, inode = mapping_of(reward.data_ptr()).split()[1:5:3]
    assert perms[3] == "p" and inode != "0"  # a private mapping of the store's file: no copy
    before = reward.clone()
    reward.add_(1.0)  # writable views, private pages
    (again,) = ptq.get_frames(["cow1"], "p", (ptq.TEXT,))[ptq.TEXT]
    assert torch.equal(py_wire.decode(again, writable="copy")["reward"], before)
    tq.kv_clear(keys=keys("cow", 3), partition_id="p")


# -- issue 28: a stage fetch is the whole batch's decode; columns by declaration -------------

MEDIA_SCHEMAS = [n for n in py_wire.bundled_schemas() if ptq.media_fields(n)]


def test_every_bundled_media_schema_declares_its_columns() -> None:
    assert set(MEDIA_SCHEMAS) == {
        n for n in py_wire.bundled_schemas() if n not in ("text_grpo", "nemo_rl/text", "verl/text")
    }
    assert ptq.media_fields("smolvlm") == ("pixel_values", "pixel_attention_mask")
    verl = py_wire.load_schema("verl/qwen2_5_vl")
    for name in ("old_log_probs", "ref_log_prob", "advantages", "returns", "values"):
        assert verl.fields[name].column == "text", name
    assert set(ptq.media_fields(verl)) == {"pixel_values", "image_grid_thw", "images_seqlens"}


@pytest.mark.parametrize("schema", MEDIA_SCHEMAS)
def test_stage_fetch_is_the_whole_batch_decode(schema: str) -> None:
    """For every bundled schema with media and every stage: get(stage=s) returns bit for bit
    what decoding the whole batch with stage s returns (the images are never lost)."""
    b = generate(schema, 6, seed=3)
    frame = py_wire.encode(b, schema)
    names = keys(f"st:{schema}:", 3)
    ptq.put(b, schema, names, "stages", group_size=2)
    sch = py_wire.load_schema(schema)
    for stage in (None, *sch.stages):
        want = py_wire.decode(frame, stage=stage)
        got = ptq.get(names, "stages", stage=stage)
        assert set(got) == set(want), (schema, stage)
        assert_same(want, got)
        # one key, as views of TQ's buffer
        assert_same(
            py_wire.decode(frame, stage=stage, rows=range(2, 4)),
            ptq.get(names[1], "stages", stage=stage),
        )
    tq.kv_clear(keys=names, partition_id="stages")


def test_fields_fetch_names_what_it_wants(batch: dict[str, Any]) -> None:
    ptq.put(batch, SCHEMA, keys("fld", 3), "p", group_size=GROUP)
    got = ptq.get(keys("fld", 3), "p", fields=["input_ids", "image_grid_thw"])
    assert set(got) == {"input_ids", "image_grid_thw"}
    want = py_wire.decode(py_wire.encode(batch, SCHEMA))
    assert_same({k: want[k] for k in got}, got)
    with pytest.raises(py_wire.BatchError, match="nope") as err:
        ptq.get(keys("fld", 3), "p", fields=["nope"])
    assert err.value.field == "nope"
    with pytest.raises(py_wire.BatchError, match="stage 'generation'") as err:
        ptq.get(keys("fld", 3), "p", stage="generation", fields=["pixel_values"])
    assert err.value.field == "pixel_values"


# -- issue 27, findings 12 and 13: columns that are not one group's; non-uint8 columns -------


def _columns(b: dict[str, Any], backend: str, schema: str = SCHEMA, group: int = GROUP) -> Any:
    if backend == "RayStore":
        from tensordict import NonTensorStack

        return {c: NonTensorStack(*f) for c, f in ptq.encode_group_frames(b, schema, group).items()}
    return ptq.encode_groups(b, schema, group)


def _raw_put(names: list[str], columns: dict[str, Any]) -> None:
    from tensordict import TensorDict

    tq.kv_batch_put(
        keys=names, partition_id="p", fields=TensorDict(columns, batch_size=[len(names)])
    )


def test_columns_of_other_groups_are_refused(batch: dict[str, Any], backend: str) -> None:
    cols = _columns(batch, backend)
    other = _columns(generate(SCHEMA, 12, seed=9), backend)
    _raw_put(keys("mix", 3), {ptq.TEXT: cols[ptq.TEXT], ptq.MEDIA: other[ptq.MEDIA]})
    with pytest.raises(py_wire.FrameError, match="not one group's") as err:
        ptq.get(keys("mix", 3), "p")
    assert err.value.field == ptq.MEDIA and "'mix0'" in str(err.value)
    # another schema's media beside qwen2_5_vl's text
    smol = generate("smolvlm", 12)
    _raw_put(
        keys("mixs", 3),
        {ptq.TEXT: cols[ptq.TEXT], ptq.MEDIA: _columns(smol, backend, "smolvlm")[ptq.MEDIA]},
    )
    with pytest.raises(py_wire.FrameError, match="schema 'smolvlm'"):
        ptq.get(keys("mixs", 3), "p")
    # a VLM batch stored without its images
    _raw_put(keys("noimg", 3), {ptq.TEXT: cols[ptq.TEXT]})
    with pytest.raises(py_wire.FrameError, match="media"):
        ptq.get(keys("noimg", 3), "p")
    with pytest.raises(py_wire.ContractError, match="pixel_values") as cerr:
        ptq.get(keys("noimg", 3), "p", stage="train")
    assert cerr.value.field in ("pixel_values", "image_grid_thw") and cerr.value.row == 0


def test_a_column_that_is_not_uint8_is_a_frame_error(backend: str) -> None:
    values = torch.arange(12, dtype=torch.float32)
    if backend == "RayStore":  # TQ's tensor path there needs NIXL: values as objects
        from tensordict import NonTensorStack

        column: Any = NonTensorStack(*[values[i : i + 4].numpy() for i in (0, 4, 8)])
    else:
        column = torch.nested.nested_tensor_from_jagged(values, torch.tensor([0, 4, 8, 12]))
    _raw_put(keys("f32", 3), {ptq.TEXT: column})
    with pytest.raises(py_wire.WireError, match=r"py_wire\.text"):
        ptq.get(keys("f32", 3), "p")


# -- issue 28: write-backs, rollout puts, samplers -------------------------------------------

NEMO = "nemo_rl/qwen2_5_vl"
NEMO_SEQ = "input_ids"


def _nemo_batch() -> dict[str, Any]:
    return generate(NEMO, 8, seed=5)


def test_write_backs_complete_a_rollout_batch() -> None:
    full = _nemo_batch()
    later = ("prev_logprobs", "reference_policy_logprobs")
    rollout = {k: v for k, v in full.items() if k not in later}
    names = keys("wb", 4)
    with pytest.raises(py_wire.BatchError, match="prev_logprobs"):
        ptq.put(rollout, NEMO, names, "w", group_size=2)
    ptq.put(rollout, NEMO, names, "w", group_size=2, stage="logprob")
    frame = py_wire.encode(full, NEMO)
    assert_same(py_wire.decode(frame, stage="logprob"), ptq.get(names, "w", stage="logprob"))
    with pytest.raises(py_wire.FrameError, match="prev_logprobs") as err:
        ptq.get(names, "w", stage="train")
    assert err.value.field == "prev_logprobs"
    ptq.write_back(names, "w", {"prev_logprobs": full["prev_logprobs"]})
    ptq.write_back(names, "w", {"reference_policy_logprobs": full["reference_policy_logprobs"]})
    for stage in (None, "train", "logprob"):
        assert_same(py_wire.decode(frame, stage=stage), ptq.get(names, "w", stage=stage))
    # a subset of keys, in another order
    assert_same(
        py_wire.decode(py_wire.take_rows(frame, [4, 5, 0, 1]), stage="train"),
        ptq.get([names[2], names[0]], "w", stage="train"),
    )
    tq.kv_clear(keys=names, partition_id="w")


def test_misaligned_write_backs_name_field_and_row() -> None:
    full = _nemo_batch()
    rollout = {
        k: v for k, v in full.items() if k not in ("prev_logprobs", "reference_policy_logprobs")
    }
    names = keys("mis", 4)
    ptq.put(rollout, NEMO, names, "w", group_size=2, stage="logprob")
    before = ptq.get_frames(names, "w", (ptq.TEXT,))
    logp = list(full["prev_logprobs"])
    short = [*logp[:5], logp[5][:-1], *logp[6:]]
    with pytest.raises(py_wire.BatchError, match="row 5") as err:
        ptq.write_back(names, "w", {"prev_logprobs": short})
    assert err.value.field == "prev_logprobs" and err.value.row == 5
    with pytest.raises(py_wire.BatchError, match="7 rows") as err:
        ptq.write_back(names, "w", {"prev_logprobs": logp[:7]})
    assert err.value.field == "prev_logprobs"
    with pytest.raises(py_wire.BatchError, match="stored already") as err:
        ptq.write_back(names, "w", {"input_lengths": full["input_lengths"]})
    assert err.value.field == "input_lengths"
    with pytest.raises(py_wire.BatchError, match="media") as err:
        ptq.write_back(names, "w", {"pixel_values": full["pixel_values"]})
    assert err.value.field == "pixel_values"
    with pytest.raises(py_wire.BatchError, match=r"dtype|float32") as err:
        ptq.write_back(names, "w", {"prev_logprobs": [r.double() for r in logp]})
    assert err.value.field == "prev_logprobs"
    # nothing reached TQ
    assert not [
        c
        for c in tq.get_client().kv_retrieve_meta(keys=names, partition_id="w").field_names
        if c.startswith(ptq.WRITE_BACK)
    ]
    # a padded [B, W] tensor (a non-contiguous view here) is cut to the stored lengths
    width = max(len(r) for r in logp) + 3
    padded = torch.full((width, 8), 7.0).t()
    for i, r in enumerate(logp):
        padded[i, : len(r)] = r
    ptq.write_back(names, "w", {"prev_logprobs": padded})
    with pytest.raises(py_wire.BatchError, match="written back already"):
        ptq.write_back(names, "w", {"prev_logprobs": logp})
    got = ptq.get(names, "w", fields=["prev_logprobs"])["prev_logprobs"]
    assert torch.equal(got.values(), torch.cat(logp))
    assert before[ptq.TEXT][0].num_rows == 2
    tq.kv_clear(keys=names, partition_id="w")


def test_groups_carry_total_lengths_for_tqs_sampler(batch: dict[str, Any]) -> None:
    names = keys("len", 3)
    ptq.put(batch, SCHEMA, names, "s", group_size=GROUP, tags=[{"step": 1}] * 3)
    listed = tq.kv_list("s")["s"]
    for g, name in enumerate(names):
        tokens = sum(len(r) for r in batch["input_ids"][g * GROUP : (g + 1) * GROUP])
        theirs = {k: v for k, v in listed[name].items() if not k.startswith("py_wire.")}
        assert theirs == {"step": 1, "total_lengths": tokens}
    meta = tq.get_client().kv_retrieve_meta(keys=[names[2], names[0]], partition_id="s")
    want = py_wire.decode(
        py_wire.take_rows(py_wire.encode(batch, SCHEMA), [8, 9, 10, 11, 0, 1, 2, 3])
    )
    assert_same(want, ptq.get_by_meta(meta))
    tq.kv_clear(keys=names, partition_id="s")


def test_samples_are_addressed_in_groups_stored_once(batch: dict[str, Any]) -> None:
    names = keys("smp", 3)
    ptq.put(batch, SCHEMA, names, "p", group_size=GROUP)
    frame = py_wire.encode(batch, SCHEMA)
    picks = [("smp2", 1), ("smp0", 3), ("smp2", 0)]
    for stage in (None, "train", "generation"):
        want = py_wire.decode(py_wire.take_rows(frame, [9, 3, 8]), stage=stage)
        assert_same(want, ptq.get_samples(picks, "p", stage=stage))
    with pytest.raises(py_wire.BatchError, match="named twice") as err:
        ptq.get_samples([*picks, ("smp0", 3)], "p")
    assert err.value.field == "samples" and err.value.row == 3
    with pytest.raises(py_wire.BatchError, match="holds 4 rows") as err:
        ptq.get_samples([("smp1", 4)], "p")
    assert err.value.row == 0


def test_a_key_handed_twice_is_refused(batch: dict[str, Any]) -> None:
    from types import SimpleNamespace

    names = keys("twice", 3)
    ptq.put(batch, SCHEMA, names, "p", group_size=GROUP)
    with pytest.raises(py_wire.BatchError, match="named twice") as err:
        ptq.get([names[0], names[1], names[0]], "p")
    assert err.value.field == "keys" and err.value.row == 2
    with pytest.raises(py_wire.BatchError, match="named twice"):
        ptq.get_by_meta(SimpleNamespace(keys=[names[1], names[1]], partition_id="p"))
    with pytest.raises(py_wire.BatchError, match="named twice"):
        ptq.write_back([names[2], names[2]], "p", {"advantages": batch["advantages"][:8]})


def test_each_dp_rank_writes_back_its_own_keys() -> None:
    """NeMo-RL's logprob workers write back per DP rank: each rank its own keys, the same
    field, one after the other; a get over every key merges them."""
    full = _nemo_batch()
    later = ("prev_logprobs", "reference_policy_logprobs")
    rollout = {k: v for k, v in full.items() if k not in later}
    names = keys("ranks", 4)
    ptq.put(rollout, NEMO, names, "ranks", group_size=2, stage="logprob")
    for field in later:
        rows = list(full[field])  # generate() gives per-token fields as lists of rows
        for rank in range(2):  # two ranks, two groups (four rows) each
            mine = rows[4 * rank : 4 * rank + 4]
            ptq.write_back(names[2 * rank : 2 * rank + 2], "ranks", {field: mine})
    frame = py_wire.encode(full, NEMO)
    assert_same(py_wire.decode(frame, stage="train"), ptq.get(names, "ranks", stage="train"))
    with pytest.raises(py_wire.BatchError, match="written back already"):
        ptq.write_back(names[1:3], "ranks", {"prev_logprobs": full["prev_logprobs"][2:6]})
    tq.kv_clear(keys=names, partition_id="ranks")


def test_replace_rewrites_a_stored_field_and_nothing_else() -> None:
    """NeMo-RL's driver rewrites sample_mask after filtering: write_back(replace=True) takes a
    field put stored, and get returns the new value; without replace it is refused by name."""
    full = _nemo_batch()
    later = ("prev_logprobs", "reference_policy_logprobs")
    rollout = {k: v for k, v in full.items() if k not in later}
    names = keys("replace", 4)
    ptq.put(rollout, NEMO, names, "replace", group_size=2, stage="logprob")
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    with pytest.raises(py_wire.BatchError, match="replace=True") as err:
        ptq.write_back(names, "replace", {"sample_mask": mask})
    assert err.value.field == "sample_mask"
    ptq.write_back(names, "replace", {"sample_mask": mask}, replace=True)
    got = ptq.get(names, "replace", stage="logprob")
    assert torch.equal(got["sample_mask"], mask)
    want = py_wire.decode(py_wire.encode({**full, "sample_mask": mask}, NEMO), stage="logprob")
    assert_same(want, got)
    # once more: the same write-back column, overwritten by TQ
    ptq.write_back(names[2:], "replace", {"sample_mask": mask[4:] * 0}, replace=True)
    assert torch.equal(ptq.get(names, "replace", stage="logprob")["sample_mask"][4:], mask[4:] * 0)
    for never, problem in ((NEMO_SEQ, "sequence field"), ("pixel_values", "media")):
        with pytest.raises(py_wire.BatchError, match=problem):
            ptq.write_back(names, "replace", {never: full[never]}, replace=True)
    ptq.write_back(
        names,
        "replace",
        {
            "prev_logprobs": full["prev_logprobs"],
            "reference_policy_logprobs": full["reference_policy_logprobs"],
        },
    )
    with pytest.raises(py_wire.BatchError, match="together"):
        ptq.write_back(names, "replace", {"prev_logprobs": full["prev_logprobs"]}, replace=True)
    tq.kv_clear(keys=names, partition_id="replace")


def test_nemo_rl_get_is_materialize_in_one_call() -> None:
    """py_wire.interop.nemo_rl.get: NeMo-RL's padded fetch (its materialize) from groups put
    by py_wire: per-token fields [B, longest fetched] with NeMo-RL's pad values, advantages
    broadcast into the padding, pad_to_seqlen exact; NeMo-RL's KVBatchMeta (sample_ids)."""
    from types import SimpleNamespace

    from py_wire.interop import nemo_rl

    full = _nemo_batch()
    names = keys("nemo_get", 4)
    ptq.put(full, NEMO, names, "nemo_get", group_size=2)
    frame = nemo_rl.to_frame(full, NEMO)
    rows = py_wire.decode(frame, layout="list")
    lengths = full["input_lengths"].tolist()
    got = nemo_rl.get(names, "nemo_get", stage="train")
    longest = max(lengths)
    assert got["input_ids"].shape == (8, longest)
    pad = py_wire.load_schema(NEMO).fields["input_ids"].pad_value
    for i, n in enumerate(lengths):
        assert torch.equal(got["input_ids"][i, :n], rows["input_ids"][i])
        assert bool((got["input_ids"][i, n:] == pad).all())
        adv = got["advantages"][i]
        assert torch.equal(adv[:n], rows["advantages"][i])
        assert bool((adv[n:] == rows["advantages"][i][0]).all())  # broadcast, as NeMo-RL's
    # the same as from_frame of the whole batch at the fetch's width
    whole = nemo_rl.from_frame(frame, stage="train", pad_to_seqlen=longest)
    for name in ("input_ids", "advantages", "token_mask", "prev_logprobs"):
        assert torch.equal(got[name], whole[name]), name
    wide = nemo_rl.get(names[1:3], "nemo_get", stage="train", pad_to_seqlen=longest + 5)
    assert wide["input_ids"].shape == (4, longest + 5)
    with pytest.raises(py_wire.WireError, match="pad_to_seqlen=1"):
        nemo_rl.get(names, "nemo_get", stage="train", pad_to_seqlen=1)
    only = nemo_rl.get(names, "nemo_get", fields=["advantages"])
    assert list(only) == ["advantages"] and torch.equal(only["advantages"], got["advantages"])
    # NeMo-RL's own KVBatchMeta carries sample_ids and partition_id
    meta = SimpleNamespace(partition_id="nemo_get", task_name=None, sample_ids=names[::-1])
    back = nemo_rl.get_by_meta(meta, stage="train")
    assert torch.equal(back["input_lengths"], full["input_lengths"].view(4, 2).flip(0).reshape(-1))
    tq.kv_clear(keys=names, partition_id="nemo_get")


def test_nemo_rl_put_takes_nemo_rl_s_packed_tensor_with_its_dedup() -> None:
    """NeMo-RL's producer side: its PackedTensor (the model of its class, dedup CSR on) goes in
    through nemo_rl.put; the groups come back as the whole batch decodes, images once."""
    from py_wire.interop import nemo_rl
    from tests.nemo_rl_model import PackedTensor as Nemo

    full = _nemo_batch()
    rows = full["pixel_values"]
    segments = list({id(r): r for r in rows if r is not None}.values())
    where = {id(t): i for i, t in enumerate(segments)}
    offsets, refs = [0], []
    for r in rows:
        refs.extend([] if r is None else [where[id(r)]])
        offsets.append(len(refs))
    nemo = dict(full)
    nemo["pixel_values"] = Nemo(
        segments, 0, _row_offsets=offsets, _segment_indices=refs
    ).enable_deduplication()
    assert any(r is not None for r in rows)  # the batch has media to check
    names = keys("nemo_put", 4)
    nemo_rl.put(nemo, NEMO, names, "nemo_put", group_size=2)
    got = ptq.get(names, "nemo_put")
    assert_same(py_wire.decode(py_wire.encode(full, NEMO)), got)
    with pytest.raises(py_wire.BatchError, match=r"nemo_rl\.from_nemo"):
        ptq.put(nemo, NEMO, keys("nemo_raw", 4), "nemo_put", group_size=2)
    tq.kv_clear(keys=names, partition_id="nemo_put")


# -- issue 43, item 1: per-sample keys at group cost ---------------------------------------------


def stored_nbytes(names: list[str], partition_id: str) -> int:
    """The frame bytes TQ holds for ``names``: every column they all hold, and the media
    column of the keys that hold one (with per-sample keys, each group's first)."""
    client = tq.get_client()
    meta = client.kv_retrieve_meta(keys=names, partition_id=partition_id)
    got = client.get_data(meta)
    total = sum(column_nbytes(got[c]) for c in meta.field_names)
    if ptq.MEDIA not in meta.field_names:
        listed = tq.kv_list(partition_id)[partition_id]
        holders = list(dict.fromkeys(listed[n].get(ptq.MEDIA_HOLDER) or n for n in names))
        media = tq.kv_batch_get(keys=holders, partition_id=partition_id, select_fields=ptq.MEDIA)
        total += column_nbytes(media[ptq.MEDIA])
    return total


def test_per_sample_keys_store_within_a_fifth_of_per_group(batch: dict[str, Any]) -> None:
    """One key per sample stores each group's images once: within 1.2x of one key per group
    (keyed per sample with group_size=1, every sample holds its own copy: more than 1.2x)."""
    ptq.put(batch, SCHEMA, keys("byg", 3), "bytes", group_size=GROUP)
    ptq.put(batch, SCHEMA, keys("bys", 12), "bytes", group_size=GROUP)
    ptq.put(batch, SCHEMA, keys("by1", 12), "bytes", group_size=1)
    per_group = stored_nbytes(keys("byg", 3), "bytes")
    per_sample = stored_nbytes(keys("bys", 12), "bytes")
    unshared = stored_nbytes(keys("by1", 12), "bytes")
    assert per_sample <= 1.2 * per_group, (per_sample, per_group)
    assert unshared > 1.2 * per_group, (unshared, per_group)
    listed = tq.kv_list("bytes")["bytes"]
    for i, name in enumerate(keys("bys", 12)):
        g = i // GROUP
        assert listed[name][ptq.MEDIA_HOLDER] == f"bys{g * GROUP}"
        assert listed[name][ptq.MEDIA_ROW] == i % GROUP
        assert listed[name][ptq.TOTAL_LENGTHS] == len(batch["input_ids"][i])
    tq.kv_clear(keys=keys("byg", 3) + keys("bys", 12) + keys("by1", 12), partition_id="bytes")


def test_a_per_sample_put_looks_its_keys_up_once(
    batch: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A per-sample put looks its keys up once (the check that no live sample reads a media key
    put over, which creates them) and puts their text rows through that lookup; the groups'
    media go under their first keys by ``kv_batch_put`` (its own lookup): two lookups and two
    puts, as TQ's own per-sample floor makes. Its returned tags are the keys' tags, py_wire's
    record of each key's rows (``STORED``) among them."""
    client = tq.get_client()
    calls: list[str] = []
    for name in ("kv_retrieve_meta", "async_kv_retrieve_meta", "put", "async_put"):
        real = getattr(client, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(client, name, counted)
    names = keys("pl", 12)
    meta = ptq.put(batch, SCHEMA, names, "pl", group_size=GROUP)
    monkeypatch.undo()
    assert sorted(calls) == ["async_kv_retrieve_meta", "async_put", "kv_retrieve_meta", "put"]
    lengths = [len(r) for r in batch["input_ids"]]
    assert [t[ptq.STORED].split(";")[0] for t in meta.tags] == [str(n) for n in lengths]
    assert meta.tags == [tq.kv_list("pl")["pl"][k] for k in names]
    assert_same(py_wire.decode(py_wire.encode(batch, SCHEMA)), ptq.get(names, "pl"))
    tq.kv_clear(keys=names, partition_id="pl")


def test_per_sample_fetch_is_the_whole_batch_decode(batch: dict[str, Any]) -> None:
    """Whatever samples a per-sample fetch names (all, some of several groups, any order), for
    every stage, it returns bit for bit what decoding the whole batch returns for those rows."""
    names = keys("pss", 12)
    meta = ptq.put(batch, SCHEMA, names, "pss", group_size=GROUP)
    assert meta.size == 12
    frame = py_wire.encode(batch, SCHEMA)
    picks = [9, 2, 3, 11, 0]
    for stage in (None, *py_wire.load_schema(SCHEMA).stages):
        assert_same(py_wire.decode(frame, stage=stage), ptq.get(names, "pss", stage=stage))
        want = py_wire.decode(py_wire.take_rows(frame, picks), stage=stage)
        assert_same(want, ptq.get([names[i] for i in picks], "pss", stage=stage))
        assert_same(want, ptq.get_samples([(names[i], 0) for i in picks], "pss", stage=stage))
    # one sample, and a TQ meta of samples (what a sampler hands out)
    assert_same(py_wire.decode(frame, rows=range(5, 6)), ptq.get(names[5], "pss"))
    tq_meta = tq.get_client().kv_retrieve_meta(keys=[names[7], names[4]], partition_id="pss")
    assert_same(py_wire.decode(py_wire.take_rows(frame, [7, 4])), ptq.get_by_meta(tq_meta))
    tq.kv_clear(keys=names, partition_id="pss")


@pytest.mark.parametrize("schema", py_wire.bundled_schemas())
def test_per_sample_keys_fetch_the_whole_batch_decode_for_every_bundled_schema(
    schema: str,
) -> None:
    """Keyed one per sample, every bundled schema and stage: all keys, and samples of both
    groups out of order, come back bit for bit as decoding those rows of the whole batch (a
    group's images stored once are never lost or handed to the wrong sample)."""
    b = generate(schema, 6, seed=5)
    frame = py_wire.encode(b, schema)
    names = keys(f"ps:{schema}:", 6)
    ptq.put(b, schema, names, "per-sample", group_size=3)
    picks = [4, 0, 5, 2]
    for stage in (None, *py_wire.load_schema(schema).stages):
        want = py_wire.decode(frame, stage=stage)
        got = ptq.get(names, "per-sample", stage=stage)
        assert set(got) == set(want), (schema, stage)
        assert_same(want, got)
        assert_same(
            py_wire.decode(py_wire.take_rows(frame, picks), stage=stage),
            ptq.get([names[i] for i in picks], "per-sample", stage=stage),
        )
    tq.kv_clear(keys=names, partition_id="per-sample")


def test_write_backs_per_sample_key() -> None:
    """NeMo-RL writes back per sample key, each DP rank its own samples (here across groups):
    the train fetch of every key, or of some, is the whole batch's decode."""
    full = _nemo_batch()
    later = ("prev_logprobs", "reference_policy_logprobs")
    rollout = {k: v for k, v in full.items() if k not in later}
    names = keys("wbs", 8)
    ptq.put(rollout, NEMO, names, "wbs", group_size=4, stage="logprob")
    frame = py_wire.encode(full, NEMO)
    assert_same(py_wire.decode(frame, stage="logprob"), ptq.get(names, "wbs", stage="logprob"))
    # checked against each sample key's stored row
    with pytest.raises(py_wire.BatchError, match="row 0 has 1 tokens") as err:
        ptq.write_back(names[:1], "wbs", {"prev_logprobs": [torch.zeros(1)]})
    assert err.value.field == "prev_logprobs"
    ranks = [[0, 5, 2, 7], [4, 1, 6, 3]]  # each rank's samples from both groups
    for field in later:
        rows = list(full[field])
        for mine in ranks:
            ptq.write_back([names[i] for i in mine], "wbs", {field: [rows[i] for i in mine]})
    assert_same(py_wire.decode(frame, stage="train"), ptq.get(names, "wbs", stage="train"))
    assert_same(
        py_wire.decode(py_wire.take_rows(frame, [6, 1]), stage="train"),
        ptq.get([names[6], names[1]], "wbs", stage="train"),
    )
    tq.kv_clear(keys=names, partition_id="wbs")


def test_a_sample_without_its_groups_media_is_a_frame_error(batch: dict[str, Any]) -> None:
    """A per-sample key whose group's media key was cleared, or whose tags name another
    group's media, is a FrameError naming the keys; never another sample's images."""
    names = keys("gone", 12)
    ptq.put(batch, SCHEMA, names, "gone", group_size=GROUP)
    tq.kv_clear(keys=names[:1], partition_id="gone")
    with pytest.raises(py_wire.FrameError, match=r"media keys \['gone0'\]"):
        ptq.get(names[1:3], "gone")
    assert_same(  # a text-only stage needs no media
        py_wire.decode(
            py_wire.take_rows(py_wire.encode(batch, SCHEMA), [1, 2]), stage="generation"
        ),
        ptq.get(names[1:3], "gone", stage="generation"),
    )
    tq.kv_batch_put(
        keys=[names[9]], partition_id="gone", tags=[{ptq.MEDIA_HOLDER: "gone4", ptq.MEDIA_ROW: 1}]
    )
    with pytest.raises(py_wire.FrameError, match="key 'gone9'") as err:
        ptq.get([names[8], names[9]], "gone")
    assert err.value.field == ptq.MEDIA
    with pytest.raises(py_wire.BatchError, match="3 tags for 12 samples"):
        ptq.put(batch, SCHEMA, keys("tg", 12), "gone", group_size=GROUP, tags=[{}] * 3)
    tq.kv_clear(keys=names[1:], partition_id="gone")
