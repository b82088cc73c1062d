"""A write-back frame holds the written fields alone: the sequence field's tokens stay in the
text column (a get compares the rows' offsets with it, and the group identity binds the frame to
its rows), so a write-back moves about what NeMo-RL's wire moves, not that plus every token id."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import py_wire
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
