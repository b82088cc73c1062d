"""The hostile-argument sweep of ``py_wire.interop.transfer_queue``'s calls that talk to a
running TransferQueue: ``put``, ``get``, ``get_frames``, ``get_samples``, ``get_by_meta``,
``write_back`` and ``decode_columns``, every argument, against real TQ (SimpleStorage) on a
local Ray. The rule is test_hostile_sweep's: a bad value is a ``WireError`` naming the
argument, a wrong type a ``TypeError`` naming it; nothing else escapes (TQ's own errors
included: the adapter checks before TQ sees a value).

Each call that may store something writes under fresh keys, so calls never see each other's
groups. ``PY_WIRE_HOSTILE_EXAMPLES`` sets the examples per target, as in the sweep.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray
import transfer_queue as tq
from hypothesis import given
from omegaconf import OmegaConf

from py_wire.interop import nemo_rl
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.registry import generate
from tests.hostile.test_hostile_sweep import (
    OUTCOMES,
    SWEEP_SETTINGS,
    VALUES,
    Target,
    _targets,
    check,
)

NEMO = "nemo_rl/qwen2_5_vl"
LATER = ("prev_logprobs", "reference_policy_logprobs")
FULL = generate(NEMO, 4, seed=11)
ROLLOUT = {k: v for k, v in FULL.items() if k not in LATER}
PARTITION = "hostile"
_names = itertools.count()


def _fresh(n: int = 2) -> list[str]:
    """``n`` keys nothing has used, holding the rollout batch in groups of 2 (a logprob-stage
    put: the write-back fields are not stored yet)."""
    keys = [f"k{next(_names)}" for _ in range(n)]
    ptq.put(ROLLOUT, NEMO, keys, PARTITION, group_size=2, stage="logprob")
    return keys


@pytest.fixture(scope="module", autouse=True)
def transfer_queue() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    tq.init(OmegaConf.create({"backend": {"storage_backend": "SimpleStorage"}}))
    try:
        yield
    finally:
        tq.close()
        ray.shutdown()


def _put_with(put: Any, batch_argument: str, **kw: Any) -> Any:
    args = {
        batch_argument: ROLLOUT,
        "schema": NEMO,
        "keys": [f"k{next(_names)}", f"k{next(_names)}"],
        "partition_id": PARTITION,
        "group_size": 2,
        "stage": "logprob",
        **kw,
    }
    return put(args.pop(batch_argument), args.pop("schema"), args.pop("keys"), **args)


def _put(**kw: Any) -> Any:
    return _put_with(ptq.put, "batch", **kw)


def _nemo_put(**kw: Any) -> Any:
    return _put_with(nemo_rl.put, "batched_data_dict", **kw)


def _stored() -> list[str]:
    """Keys stored once per process, read by every fetching target."""
    global _STORED
    if _STORED is None:
        _STORED = _fresh()
    return _STORED


_STORED: list[str] | None = None


def _get(**kw: Any) -> Any:
    args = {"keys": _stored(), "partition_id": PARTITION, **kw}
    return ptq.get(args.pop("keys"), args.pop("partition_id"), **args)


def _get_frames(**kw: Any) -> Any:
    args = {"keys": _stored(), "partition_id": PARTITION, **kw}
    return ptq.get_frames(args.pop("keys"), args.pop("partition_id"), **args)


def _get_samples(**kw: Any) -> Any:
    keys = _stored()
    args = {"samples": [(keys[1], 0), (keys[0], 1)], "partition_id": PARTITION, **kw}
    return ptq.get_samples(args.pop("samples"), args.pop("partition_id"), **args)


def _get_by_meta(**kw: Any) -> Any:
    args = {"meta": SimpleNamespace(keys=_stored(), partition_id=PARTITION), **kw}
    return ptq.get_by_meta(args.pop("meta"), **args)


def _write_back(**kw: Any) -> Any:
    args = {"fields": {"prev_logprobs": FULL["prev_logprobs"]}, "partition_id": PARTITION, **kw}
    keys = args.pop("keys") if "keys" in args else _fresh()
    return ptq.write_back(keys, args.pop("partition_id"), args.pop("fields"), **args)


def _meta_keys(**kw: Any) -> Any:
    args = {"meta": SimpleNamespace(keys=_stored(), partition_id=PARTITION), **kw}
    return ptq.meta_keys(args.pop("meta"))


def _nemo_get(**kw: Any) -> Any:
    args = {"keys": _stored(), "partition_id": PARTITION, "stage": "logprob", **kw}
    return nemo_rl.get(args.pop("keys"), args.pop("partition_id"), **args)


def _nemo_get_by_meta(**kw: Any) -> Any:
    meta = SimpleNamespace(sample_ids=_stored(), partition_id=PARTITION)  # NeMo-RL's form
    args = {"meta": meta, "stage": "logprob", **kw}
    return nemo_rl.get_by_meta(args.pop("meta"), **args)


def _decode_columns(**kw: Any) -> Any:
    keys = _stored()
    args = {"frames": ptq.get_frames(keys, PARTITION), "keys": keys, "stage": "logprob", **kw}
    return ptq.decode_columns(args.pop("frames"), args.pop("keys"), **args)


TQ_ALIASES = {
    "keys": "key",
    "partition_id": "partition",
    "batch": "field",
    "batched_data_dict": "batch field",
    "schema": "Schema",
    "fields": "field",
    "samples": "sample",
    "frames": "frame column",
    "meta": "keys partition_id",
    "tags": "tag",
}

TARGETS: list[Target] = [
    *_targets("transfer_queue.put", _put, "batch", "schema", "keys", "partition_id",
              "group_size", "tags", "stage", **TQ_ALIASES),
    *_targets("transfer_queue.get", _get, "keys", "partition_id", "stage", "fields", "columns",
              "writable", **TQ_ALIASES),
    *_targets("transfer_queue.get_frames", _get_frames, "keys", "partition_id", "columns",
              **TQ_ALIASES),
    *_targets("transfer_queue.get_samples", _get_samples, "samples", "partition_id", "stage",
              "fields", **TQ_ALIASES),
    *_targets("transfer_queue.get_by_meta", _get_by_meta, "meta", "stage", "fields", "writable",
              **TQ_ALIASES),
    *_targets("transfer_queue.write_back", _write_back, "keys", "partition_id", "fields",
              "replace", **TQ_ALIASES),
    *_targets("transfer_queue.meta_keys", _meta_keys, "meta", **TQ_ALIASES),
    *_targets("nemo_rl.put", _nemo_put, "batched_data_dict", "schema", "keys",
              "partition_id", "group_size", "tags", "stage", **TQ_ALIASES),
    *_targets("nemo_rl.get", _nemo_get, "keys", "partition_id", "stage", "fields",
              "pad_to_multiple_of", "pad_to_seqlen", "writable", **TQ_ALIASES),
    *_targets("nemo_rl.get_by_meta", _nemo_get_by_meta, "meta", "stage", "fields",
              "pad_to_multiple_of", "pad_to_seqlen", "writable", **TQ_ALIASES),
    *_targets("transfer_queue.decode_columns", _decode_columns, "frames", "keys", "stage",
              "fields", "writable", **TQ_ALIASES),
]  # fmt: skip


def test_the_valid_calls_pass() -> None:
    """Every target with all its arguments valid succeeds: a refusal below is the argument's."""
    for name, call in {t.name: t.call for t in TARGETS}.items():
        assert call() is not None, name


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
@SWEEP_SETTINGS
@given(value=VALUES)
def test_tq_sweep(target: Target, value: Any) -> None:
    check(target, value)


def test_the_sweep_excludes_only_what_is_swept_here() -> None:
    """test_hostile_sweep leaves these calls to this module: each one is a target here."""
    from tests.hostile.test_hostile_sweep import EXCLUDED

    left_here = {n for n, why in EXCLUDED.items() if "test_hostile_tq" in why}
    assert left_here == {t.name for t in TARGETS}


def teardown_module() -> None:
    report = os.environ.get("PY_WIRE_HOSTILE_REPORT")
    if report:  # the outcome counts of this module's calls (a campaign reads them)
        Path(report).write_text(json.dumps(dict(OUTCOMES), sort_keys=True) + "\n")
