"""Per-sample keys store their text rows as compact frames (the schema named by fingerprint),
all but each group's first key, which embeds the schema; a reader that does not hold the schema
reads it from there before the compact frames arrive, and refuses clearly when it cannot."""

from __future__ import annotations

from typing import Any

import pytest
import ray
import torch
import transfer_queue as tq

import py_wire
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.frameworks import nemo_rl_qwen2_5_vl_batch
from tests.interop.test_transfer_queue import backend, keys  # noqa: F401  (module fixture)

SCHEMA = "nemo_rl/qwen2_5_vl"
GROUP = 4
LATER = ("prev_logprobs", "reference_policy_logprobs", "advantages")


@ray.remote(max_calls=1)
def fresh_get(names: list[str], partition: str, fingerprint: str) -> Any:
    """``ptq.get`` in a process that never held the schema (a worker used for this call only)."""
    from py_wire import _native

    held_before = _native.holds_schema(fingerprint)
    tq.init()
    try:
        out: Any = ptq.get(names, partition, fields=["input_ids", "prev_logprobs"])
    except py_wire.FrameError as err:
        out = (str(err), err.kind, err.found)
    return held_before, out


@pytest.fixture(scope="module")
def stored(backend: str) -> tuple[dict[str, Any], list[str]]:  # noqa: F811  (one a backend)
    batch = nemo_rl_qwen2_5_vl_batch(8, group_size=GROUP)
    names = keys("cs", 8)
    ptq.put(
        {k: v for k, v in batch.items() if k not in LATER},
        SCHEMA,
        names,
        "cs",
        group_size=GROUP,
        stage="logprob",
    )
    ptq.write_back(names, "cs", {"prev_logprobs": batch["prev_logprobs"]})
    return batch, names


def test_per_sample_rows_name_the_schema_once_a_group(
    stored: tuple[dict[str, Any], list[str]],
) -> None:
    _, names = stored
    text = ptq.get_frames(names, "cs", [ptq.TEXT])[ptq.TEXT]
    assert [not f.compact for f in text] == [i % GROUP == 0 for i in range(8)]
    listed = tq.kv_list("cs")["cs"]
    fingerprint = py_wire.load_schema(SCHEMA).fingerprint
    for i, name in enumerate(names):
        assert listed[name][ptq.SCHEMA_TAG] == fingerprint
        assert listed[name][ptq.SCHEMA_HOLDER] == names[i - i % GROUP]
    # a compact row is its embedded form less the schema's text
    embedded = py_wire.concat([text[1]], compact=False)
    schema_text = len(py_wire.load_schema(SCHEMA).canonical_json)
    assert len(embedded) - len(text[1]) >= schema_text - 64


def test_a_reader_without_the_schema_reads_it_from_the_groups_first_key(
    stored: tuple[dict[str, Any], list[str]],
) -> None:
    batch, names = stored
    fingerprint = py_wire.load_schema(SCHEMA).fingerprint
    held_before, got = ray.get(fresh_get.remote(names[5:7], "cs", fingerprint))
    assert not held_before
    for j, i in enumerate((5, 6)):
        for name in ("input_ids", "prev_logprobs"):
            lo, hi = (int(x) for x in got[name].offsets()[j : j + 2])
            assert torch.equal(got[name].values()[lo:hi], batch[name][i])


def test_a_schema_no_key_keeps_is_refused_naming_it(
    stored: tuple[dict[str, Any], list[str]],
) -> None:
    _, names = stored
    fingerprint = py_wire.load_schema(SCHEMA).fingerprint
    tq.kv_clear(keys=[names[4]], partition_id="cs")  # group 1's first key, which keeps the schema
    held_before, got = ray.get(fresh_get.remote(names[5:7], "cs", fingerprint))
    assert not held_before
    message, kind, found = got
    assert kind == "unknown_schema" and found == fingerprint
    assert "key 'cs5' holds compact frames" in message and "'cs4'" in message
