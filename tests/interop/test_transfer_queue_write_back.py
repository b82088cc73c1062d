"""Write-backs move what NeMo-RL's wire moves: a write-back of one per-token or scalar field
holds each key's values as raw bytes (no header, no sequence field), checked on get against
the key's text rows; other write-backs are compact frames without the sequence field's tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transfer_queue as tq
from tensordict import NonTensorStack, TensorDict

import py_wire
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.frameworks import nemo_rl_qwen2_5_vl_batch
from tests.interop.test_transfer_queue import backend, keys  # noqa: F401  (module fixture)

SCHEMA = "nemo_rl/qwen2_5_vl"
GROUP = 4
LATER = ("prev_logprobs", "reference_policy_logprobs", "advantages")


@pytest.fixture(scope="module")
def nemo_batch() -> dict[str, Any]:
    return nemo_rl_qwen2_5_vl_batch(8, group_size=GROUP)


def stored(names: list[str], column: str, partition: str) -> list[int]:
    """The bytes TQ holds in ``column`` for each of ``names``."""
    got = tq.kv_batch_get(keys=names, partition_id=partition, select_fields=[column])[column]
    if isinstance(got, torch.Tensor):
        return torch.diff(got.offsets()).tolist()
    return [len(v) for v in got.tolist()]


@pytest.mark.parametrize("per_sample", [False, True])
def test_write_back_stores_the_values_alone(nemo_batch: dict[str, Any], per_sample: bool) -> None:
    rows = len(nemo_batch["input_ids"])
    names = keys(f"wbraw{int(per_sample)}_", rows if per_sample else rows // GROUP)
    rollout = {k: v for k, v in nemo_batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, names, "wb", group_size=GROUP, stage="logprob")
    ptq.write_back(names, "wb", {"prev_logprobs": nemo_batch["prev_logprobs"]})
    ptq.write_back(names, "wb", {"sample_mask": torch.zeros(rows)}, replace=True)
    lengths = [len(r) for r in nemo_batch["input_ids"]]
    per_key = 1 if per_sample else GROUP
    tokens = [sum(lengths[i : i + per_key]) for i in range(0, rows, per_key)]
    # NeMo-RL's wire moves each sample's float32 logprobs; so does the write-back, byte for byte
    assert stored(names, ptq.WRITE_BACK + "prev_logprobs", "wb") == [4 * n for n in tokens]
    assert stored(names, ptq.WRITE_BACK + "sample_mask", "wb") == [4 * per_key] * len(names)
    got = ptq.get(names, "wb", fields=["prev_logprobs", "sample_mask"])
    for i, row in enumerate(nemo_batch["prev_logprobs"]):
        lo, hi = int(got["prev_logprobs"].offsets()[i]), int(got["prev_logprobs"].offsets()[i + 1])
        assert torch.equal(got["prev_logprobs"].values()[lo:hi], row)
    assert torch.equal(got["sample_mask"], torch.zeros(rows))
    # a later write-back of two fields: a compact frame of the written fields alone
    ptq.write_back(
        names,
        "wb",
        {k: nemo_batch[k] for k in ("reference_policy_logprobs", "advantages")},
    )
    two = ("reference_policy_logprobs", "advantages")
    column = ptq.WRITE_BACK + ",".join(n for n in py_wire.load_schema(SCHEMA).fields if n in two)
    frames = ptq.get_frames(names, "wb", [column])[column]
    assert all(f.compact for f in frames)
    assert {f.name for f in frames[0].layout.fields} == set(two)
    got = ptq.get(names, "wb", stage="train")
    want = py_wire.decode(py_wire.encode({**nemo_batch, "sample_mask": torch.zeros(rows)}, SCHEMA))
    for name in ("input_ids", *LATER, "sample_mask"):
        a, b = want[name], got[name]
        if a.is_nested:
            assert torch.equal(a.values(), b.values()) and torch.equal(a.offsets(), b.offsets())
        else:
            assert torch.equal(a, b), name


def test_raw_rows_not_a_keys_tokens_are_refused(nemo_batch: dict[str, Any], backend: str) -> None:  # noqa: F811
    rows = len(nemo_batch["input_ids"])
    names = keys("wbbad", rows)
    rollout = {k: v for k, v in nemo_batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, names, "wbbad", group_size=GROUP, stage="logprob")
    ptq.write_back(names, "wbbad", {"prev_logprobs": nemo_batch["prev_logprobs"]})
    # another writer puts 4 bytes too few under key wbbad3's write-back column
    column = ptq.WRITE_BACK + "prev_logprobs"
    short = bytes(4 * (len(nemo_batch["input_ids"][3]) - 1))
    if backend == "RayStore":
        value: Any = NonTensorStack(short)
    else:
        value = torch.nested.nested_tensor_from_jagged(
            torch.frombuffer(bytearray(short), dtype=torch.uint8), torch.tensor([0, len(short)])
        )
    tq.kv_batch_put(
        keys=["wbbad3"], partition_id="wbbad", fields=TensorDict({column: value}, batch_size=[1])
    )
    with pytest.raises(py_wire.FrameError, match=r"key 'wbbad3'.*not this key's rows") as err:
        ptq.get(names, "wbbad", fields=["prev_logprobs"])
    assert err.value.field == column
    ptq.get(names[:3], "wbbad", fields=["prev_logprobs"])  # the other keys read as before
