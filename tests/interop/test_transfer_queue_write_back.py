"""A write-back frame holds the written fields alone: the sequence field's tokens stay in the
text column (a get compares the rows' offsets with it, and the group identity binds the frame to
its rows), so a write-back moves about what NeMo-RL's wire moves, not that plus every token id."""

from __future__ import annotations

from typing import Any

import pytest
import ray
import torch
import transfer_queue as tq

import py_wire
from py_wire._schema import frame_fingerprint
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.frameworks import nemo_rl_qwen2_5_vl_batch
from tests.interop.test_transfer_queue import backend, keys  # noqa: F401  (module fixture)

SCHEMA = "nemo_rl/qwen2_5_vl"
GROUP = 4
LATER = ("prev_logprobs", "reference_policy_logprobs", "advantages")


@pytest.mark.parametrize("per_sample", [False, True])
def test_write_back_frames_hold_the_written_fields_alone(backend: str, per_sample: bool) -> None:  # noqa: F811
    batch = nemo_rl_qwen2_5_vl_batch(8, group_size=GROUP)
    rows = len(batch["input_ids"])
    names = keys(f"wbseq{int(per_sample)}_", rows if per_sample else rows // GROUP)
    rollout = {k: v for k, v in batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, names, "wbseq", group_size=GROUP, stage="logprob")
    ptq.write_back(names, "wbseq", {"prev_logprobs": batch["prev_logprobs"]})
    ptq.write_back(names, "wbseq", {"sample_mask": torch.zeros(rows)}, replace=True)
    column = ptq.WRITE_BACK + "prev_logprobs"
    frames = ptq.get_frames(names, "wbseq", [column])[column]
    assert [[f.name for f in fr.layout.fields] for fr in frames] == [["prev_logprobs"]] * len(names)
    payload = 4 * sum(len(r) for r in batch["prev_logprobs"])
    assert sum(len(f) for f in frames) < payload + 8192 * len(names)  # no int64 token ids
    got = ptq.get(names, "wbseq", fields=["input_ids", "prev_logprobs", "sample_mask"])
    offsets = got["prev_logprobs"].offsets()
    assert torch.equal(offsets, got["input_ids"].offsets())
    for i, row in enumerate(batch["prev_logprobs"]):
        assert torch.equal(got["prev_logprobs"].values()[offsets[i] : offsets[i + 1]], row)
    assert torch.equal(got["sample_mask"], torch.zeros(rows))


def test_a_write_back_of_other_rows_is_refused(backend: str) -> None:  # noqa: F811
    batch: dict[str, Any] = nemo_rl_qwen2_5_vl_batch(8, group_size=GROUP)
    rollout = {k: v for k, v in batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, ["wbo0", "wbo1"], "wbo", group_size=GROUP, stage="logprob")
    ptq.write_back(["wbo0", "wbo1"], "wbo", {"prev_logprobs": batch["prev_logprobs"]})
    column = ptq.WRITE_BACK + "prev_logprobs"
    (frame,) = ptq.get_frames(["wbo1"], "wbo", [column])[column]
    import transfer_queue as tq
    from tensordict import TensorDict

    from py_wire.interop.transfer_queue.columns import frames_column

    value: Any = [frame] if ptq.stores_frames_as_objects() else frames_column([frame])
    if ptq.stores_frames_as_objects():
        from tensordict import NonTensorStack

        value = NonTensorStack(frame)
    # group 1's write-back stored under group 0's key: refused, not merged
    tq.kv_batch_put(
        keys=["wbo0"], partition_id="wbo", fields=TensorDict({column: value}, batch_size=[1])
    )
    with pytest.raises(py_wire.FrameError, match="wbo0"):
        ptq.get(["wbo0"], "wbo", fields=["prev_logprobs"])


def test_a_write_back_frame_in_another_columns_place_is_refused(backend: str) -> None:  # noqa: F811
    """A write-back frame names no column: its fields do. One stored under another write-back
    column (TQ's put of the wrong frame) is refused, naming the key and both columns."""
    batch: dict[str, Any] = nemo_rl_qwen2_5_vl_batch(GROUP, group_size=GROUP)
    rollout = {k: v for k, v in batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, ["wbc0"], "wbc", group_size=GROUP, stage="logprob")
    ptq.write_back(["wbc0"], "wbc", {"prev_logprobs": batch["prev_logprobs"]})
    ptq.write_back(["wbc0"], "wbc", {"advantages": batch["advantages"]})
    theirs, ours = ptq.WRITE_BACK + "prev_logprobs", ptq.WRITE_BACK + "advantages"
    (frame,) = ptq.get_frames(["wbc0"], "wbc", [theirs])[theirs]
    from tensordict import NonTensorStack, TensorDict

    from py_wire.interop.transfer_queue.columns import frames_column

    value: Any = NonTensorStack(frame) if ptq.stores_frames_as_objects() else frames_column([frame])
    tq.kv_batch_put(keys=["wbc0"], partition_id="wbc", fields=TensorDict({ours: value}, [1]))
    with pytest.raises(py_wire.FrameError, match=r"wbc0.*py_wire\.fields:advantages.*prev_logp"):
        ptq.get_frames(["wbc0"], "wbc", [ours])
    with pytest.raises(py_wire.FrameError, match="wbc0"):
        ptq.get(["wbc0"], "wbc", fields=["advantages"])
    tq.kv_clear(keys=["wbc0"], partition_id="wbc")


def _written(per_sample: bool, part: str) -> tuple[dict[str, Any], list[str]]:
    """Two groups put (per group or per sample) and ``prev_logprobs`` written back to all."""
    batch = nemo_rl_qwen2_5_vl_batch(2 * GROUP, group_size=GROUP)
    rows = len(batch["input_ids"])
    names = keys(f"{part}_", rows if per_sample else rows // GROUP)
    rollout = {k: v for k, v in batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, names, part, group_size=GROUP, stage="logprob")
    ptq.write_back(names, part, {"prev_logprobs": batch["prev_logprobs"]})
    return batch, names


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_a_write_back_frame_carries_no_schema_text(backend: str, per_sample: bool) -> None:  # noqa: F811
    """Each key's write-back frame names the schema by fingerprint: its bytes are the written
    values, their offsets, alignment and a header of at most 384 bytes (the group identity
    included; no column name: its fields name its column), not the ~4.4 KB of the schema's
    text that made a per-sample write-back 2.2x NeMo-RL's bytes."""
    part = f"wbbytes{int(per_sample)}"
    batch, names = _written(per_sample, part)
    column = ptq.WRITE_BACK + "prev_logprobs"
    frames = ptq.get_frames(names, part, [column])[column]
    lengths = [len(r) for r in batch["prev_logprobs"]]
    per_key = [lengths[i : i + 1] for i in range(len(lengths))]
    if not per_sample:
        per_key = [lengths[i : i + GROUP] for i in range(0, len(lengths), GROUP)]
    fingerprint = py_wire.load_schema(SCHEMA).fingerprint
    for frame, rows in zip(frames, per_key, strict=True):
        values = -(-4 * sum(rows) // 64) * 64
        offsets = -(-8 * (len(rows) + 1) // 64) * 64
        assert len(frame) <= values + offsets + 384, (len(frame), values, offsets)
        assert frame.compact and frame.metadata[ptq.GROUP_KEY]
        assert ptq.COLUMN_KEY not in frame.metadata
        assert frame_fingerprint(frame) == fingerprint
    # the text frames: a key per group embeds the schema; per-sample keys, the group's first
    texts = ptq.get_frames(names, part, [ptq.TEXT])[ptq.TEXT]
    embeds = [i % GROUP == 0 for i in range(len(names))] if per_sample else [True] * len(names)
    assert [not f.compact for f in texts] == embeds
    tq.kv_clear(keys=names, partition_id=part)


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_many_keys_fetch_what_each_key_alone_fetches(backend: str, per_sample: bool) -> None:  # noqa: F811
    """The written fields of a multi-key fetch, bit for bit those of each key fetched alone (a
    replace of some keys' ``sample_mask`` included)."""
    part = f"wbmany{int(per_sample)}"
    batch, names = _written(per_sample, part)
    last = torch.zeros(1 if per_sample else GROUP)
    ptq.write_back(names[-1:], part, {"sample_mask": last}, replace=True)
    fields = ["prev_logprobs", "sample_mask"]
    whole = ptq.get(names, part, fields=fields)
    alone = [ptq.get([k], part, fields=fields) for k in names]
    values = torch.cat([a["prev_logprobs"].values() for a in alone])
    assert torch.equal(whole["prev_logprobs"].values().view(torch.int32), values.view(torch.int32))
    lengths = torch.cat([torch.diff(a["prev_logprobs"].offsets()) for a in alone])
    assert torch.equal(torch.diff(whole["prev_logprobs"].offsets()), lengths)
    mask = torch.cat([a["sample_mask"] for a in alone])
    assert torch.equal(whole["sample_mask"].view(torch.int32), mask.view(torch.int32))
    assert float(mask[-1]) == 0.0 and float(mask[0]) == 1.0
    flat = torch.cat(batch["prev_logprobs"])
    assert torch.equal(values.view(torch.int32), flat.view(torch.int32))
    tq.kv_clear(keys=names, partition_id=part)


def _counting(monkeypatch: Any, client: Any, name: str, calls: list[str]) -> None:
    real = getattr(client, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(client, name, counted)


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_a_stage_fetch_reads_its_columns_in_one_fetch(
    backend: str,  # noqa: F811
    per_sample: bool,
    monkeypatch: Any,
) -> None:
    """The keys' tags name their schema, which this process holds: a fetch for a stage reads
    the text, write-back and media columns it needs in one TQ fetch (per-sample keys: one more
    for their groups' media keys), not the text column first; the same batch as before. With
    tags naming another held schema the fetch reads what the stored frames need regardless."""
    part = f"wbone{int(per_sample)}"
    batch, names = _written(per_sample, part)
    client = tq.get_client()
    fetches: list[str] = []
    _counting(monkeypatch, client, "get_data", fetches)
    fields = ["input_ids", "pixel_values", "prev_logprobs"]
    got = ptq.get(names, part, stage="train", fields=fields)
    assert len(fetches) == (2 if per_sample else 1), fetches
    monkeypatch.undo()
    flat = torch.cat(batch["prev_logprobs"])
    assert torch.equal(got["prev_logprobs"].values().view(torch.int32), flat.view(torch.int32))
    assert torch.equal(got["input_ids"].values(), torch.cat(batch["input_ids"]))
    images = [torch.cat(r) if r else None for r in got["pixel_values"].rows()]
    for a, b in zip(images, batch["pixel_values"], strict=True):
        assert (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))

    other = py_wire.load_schema("text_grpo").fingerprint
    tq.kv_batch_put(keys=names, partition_id=part, tags=[{ptq.SCHEMA: other}] * len(names))
    stale = ptq.get(names, part, stage="train", fields=fields)
    assert torch.equal(stale["prev_logprobs"].values().view(torch.int32), flat.view(torch.int32))
    assert torch.equal(stale["input_ids"].values(), torch.cat(batch["input_ids"]))
    tq.kv_clear(keys=names, partition_id=part)


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_a_write_back_looks_its_keys_up_once(
    backend: str,  # noqa: F811
    per_sample: bool,
    monkeypatch: Any,
) -> None:
    """A write-back retrieves its keys' metadata once and puts through it (``kv_batch_put``
    would look them up again): one lookup and one put, no fetch (the rows it is checked
    against are in the keys' tags, ``STORED``); the written values read back bit for bit."""
    part = f"wbmeta{int(per_sample)}"
    batch, names = _written(per_sample, part)
    client = tq.get_client()
    calls: list[str] = []
    # kv_retrieve_meta: py_wire's lookups; async_kv_retrieve_meta: the one kv_batch_put makes
    for name in ("kv_retrieve_meta", "async_kv_retrieve_meta", "get_data", "put"):
        _counting(monkeypatch, client, name, calls)
    ptq.write_back(names, part, {"advantages": batch["advantages"]})
    monkeypatch.undo()
    assert sorted(calls) == ["kv_retrieve_meta", "put"], calls
    got = ptq.get(names, part, fields=["advantages"])
    flat = torch.cat(batch["advantages"])
    assert torch.equal(got["advantages"].values().view(torch.int32), flat.view(torch.int32))
    assert ptq.WRITE_BACK + "advantages" in tq.kv_list(part)[part][names[-1]][ptq.WRITE_BACKS]
    tq.kv_clear(keys=names, partition_id=part)


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_a_write_back_is_checked_against_the_frames_when_tags_do_not_record_them(
    backend: str,  # noqa: F811
    per_sample: bool,
    monkeypatch: Any,
) -> None:
    """Keys whose tags lack put's record of their rows (``STORED``: dropped, or garbled) have
    their text column fetched and the write-back checked against it, as before the record;
    a record that lies about the rows lets through a write-back that fits the lie, but the get
    compares the write-back's rows with the text frame's and refuses it, naming the key."""
    part = f"wbrec{int(per_sample)}"
    batch = nemo_rl_qwen2_5_vl_batch(2 * GROUP, group_size=GROUP)
    rows = len(batch["input_ids"])
    names = keys(f"{part}_", rows if per_sample else rows // GROUP)
    rollout = {k: v for k, v in batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, names, part, group_size=GROUP, stage="logprob")
    record = tq.kv_list(part)[part][names[0]][ptq.STORED]
    lengths = [len(r) for r in batch["input_ids"]]
    assert record.split(";")[0] == ",".join(map(str, lengths[: 1 if per_sample else GROUP]))
    (text,) = ptq.get_frames(names[:1], part, [ptq.TEXT])[ptq.TEXT]
    assert record.split(";")[1].split(",") == [f.name for f in text.layout.fields]

    client = tq.get_client()
    for garbled in (None, "not;a record"):
        tq.kv_batch_put(keys=names, partition_id=part, tags=[{ptq.STORED: garbled}] * len(names))
        fetches: list[str] = []
        _counting(monkeypatch, client, "get_data", fetches)
        short = [r[:-1] for r in batch["prev_logprobs"]]
        with pytest.raises(py_wire.BatchError, match=r"prev_logprobs.*row 0"):
            ptq.write_back(names, part, {"prev_logprobs": short})
        assert fetches == ["get_data"]  # the text column, read for the check
        monkeypatch.undo()
    ptq.write_back(names, part, {"prev_logprobs": batch["prev_logprobs"]})
    got = ptq.get(names, part, fields=["prev_logprobs"])
    flat = torch.cat(batch["prev_logprobs"])
    assert torch.equal(got["prev_logprobs"].values().view(torch.int32), flat.view(torch.int32))

    # a record that lies: the true rows are refused by write_back, the lie's by the get
    counts, fields = record.split(";")
    lie = ",".join(str(int(n) - 1) for n in counts.split(","))
    tq.kv_batch_put(keys=names[:1], partition_id=part, tags=[{ptq.STORED: f"{lie};{fields}"}])
    mine = batch["advantages"][: 1 if per_sample else GROUP]
    with pytest.raises(py_wire.BatchError, match=r"advantages.*row 0"):
        ptq.write_back(names[:1], part, {"advantages": mine})
    ptq.write_back(names[:1], part, {"advantages": [r[:-1] for r in mine]})
    with pytest.raises(py_wire.FrameError, match=names[0]):
        ptq.get(names[:1], part, fields=["advantages"])
    tq.kv_clear(keys=names, partition_id=part)


@ray.remote(num_cpus=0, max_restarts=0)
class _FreshReader:
    """A process that never loaded the schema (it loads ``text_grpo``, another one)."""

    def __init__(self, fingerprint: str) -> None:
        import transfer_queue as tq

        from py_wire import _native

        self.fingerprint = fingerprint
        self.held_at_start = _native.holds_schema(fingerprint)
        py_wire.load_schema("text_grpo")
        tq.init()

    def read(self, names: list[str], part: str) -> Any:
        """Whether it held the schema before, then what ``get`` of the written fields returns
        (values and offsets) or the FrameError it raises."""
        from py_wire import _native
        from py_wire.interop import transfer_queue as ptq

        held = self.held_at_start or _native.holds_schema(self.fingerprint)
        try:
            got = ptq.get(names, part, fields=["input_ids", "prev_logprobs"])
        except py_wire.FrameError as err:
            return held, ("FrameError", str(err), err.kind, err.found)
        return held, {k: (v.values(), v.offsets()) for k, v in got.items()}


def test_a_reader_in_another_process_resolves_the_schema_or_says_why(backend: str) -> None:  # noqa: F811
    """A process that never loaded the schema reads compact frames (write-backs, per-sample
    text rows) by learning the schema from the key whose text frame embeds it (their group's
    first key, not among the keys read); with that key cleared, or with tags that name another
    schema, it refuses by a FrameError naming the key and the fingerprint. (One process, its
    refusals first: once it has learnt the schema it reads regardless.)"""
    part = "wbfresh"
    _, names = _written(True, part)
    fingerprint = py_wire.load_schema(SCHEMA).fingerprint
    g0, g1 = names[1:GROUP], names[GROUP + 1 :]  # each group but its first key
    reader = _FreshReader.remote(fingerprint)

    # tags that name another schema, one the reader holds: refused by name (on RayStore TQ's
    # get unpickles the frames; on SimpleStorage py_wire wraps them)
    other = py_wire.load_schema("text_grpo").fingerprint
    tq.kv_batch_put(keys=g0, partition_id=part, tags=[{ptq.SCHEMA: other}] * len(g0))
    held, got = ray.get(reader.read.remote(g0, part))
    assert not held
    kind, message, err_kind, _ = got
    assert kind == "FrameError" and err_kind == "unknown_schema", got
    assert repr(g0[0]) in message and fingerprint in message
    tq.kv_batch_put(keys=g0, partition_id=part, tags=[{ptq.SCHEMA: fingerprint}] * len(g0))

    tq.kv_clear(keys=names[GROUP : GROUP + 1], partition_id=part)  # g1's first key
    held, got = ray.get(reader.read.remote(g1, part))
    assert not held
    kind, message, err_kind, found = got
    assert kind == "FrameError" and err_kind == "unknown_schema" and found == fingerprint
    assert repr(g1[0]) in message and fingerprint in message and repr(names[GROUP]) in message

    here = ptq.get(g0, part, fields=["input_ids", "prev_logprobs"])
    held, got = ray.get(reader.read.remote(g0, part))
    assert not held
    assert isinstance(got, dict), got
    for name, value in here.items():
        assert torch.equal(got[name][0], value.values())
        assert torch.equal(got[name][1], value.offsets())
    ray.kill(reader)
    tq.kv_clear(keys=names[:GROUP] + g1, partition_id=part)
