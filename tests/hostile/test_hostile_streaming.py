"""The hostile-argument sweep of ``py_wire.streaming`` (issue 40): every public call of
:class:`RayBuffer`, :class:`TQStream`, :class:`StalenessSampler`, :class:`StreamConfig` and
the modules' functions, one argument hostile, the others valid; and the trainer's device
arguments. test_hostile_sweep's rule: the call works, or raises a :class:`WireError` or a
``TypeError`` naming the argument; nothing else escapes.

The streaming calls check their arguments before they reach Ray or TransferQueue, so the
sweep runs them offline (:func:`tests.streaming.offline.offline`): a call whose arguments all
pass goes on to Ray or TQ, which raise ``ReachedBackend`` here, counted as accepted. Neither is
started per call (a Ray actor per call would take seconds); what the backends do with accepted
values is the business of tests/streaming (real Ray and TQ). The Ray-free core of the Ray
buffer (``_Buffer``: the actor's state) is swept too, for real, so the arguments the actor
receives are checked where the state changes as well.

``PY_WIRE_HOSTILE_EXAMPLES`` (default 3) examples per target in CI, a hundred-odd calls;
``PY_WIRE_HOSTILE_EXAMPLES=500 PY_WIRE_HOSTILE_REPORT=/tmp/r.json pytest
tests/hostile/test_hostile_streaming.py -k test_sweep`` is the campaign (over 20,000 calls).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import py_wire
from py_wire import trainer
from py_wire.streaming import PendingPut, RayBuffer, StreamConfig
from py_wire.streaming import ray_buffer as pw_ray_buffer
from py_wire.streaming import tq as pw_tq
from py_wire.streaming.ray_buffer import _Buffer
from py_wire.streaming.tq import StalenessSampler, TQBuffer, TQStream
from tests.helpers import small_text_batch
from tests.hostile.test_hostile_arguments import FRAME, VLM_FRAME
from tests.hostile.test_hostile_sweep import (
    OUTCOMES,
    SWEEP_SETTINGS,
    VALUES,
    Target,
    _targets,
    check,
)
from tests.streaming.offline import ReachedBackend, offline, offline_ray_buffer

CONFIG = StreamConfig(max_staleness=1000, batch_groups=1000, admission_timeout_s=1.0)
SAMPLE = py_wire.encode(small_text_batch((2,)), "text_grpo")
VERSIONED = py_wire.encode(small_text_batch((2,)), "text_grpo", metadata={"policy_version": "0"})


@pytest.fixture(scope="module", autouse=True)
def _offline() -> Iterator[None]:
    with offline():
        yield


def _until_backend(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, where reaching Ray or TQ counts as the arguments being accepted."""

    def run(**kw: Any) -> Any:
        try:
            return call(**kw)
        except ReachedBackend:
            OUTCOMES["reached the backend"] += 1
            return None

    return run


def _ray(method: str, **valid: Any) -> Callable[..., Any]:
    return _until_backend(lambda **kw: getattr(offline_ray_buffer(CONFIG), method)(
        **{**valid, **kw}))  # fmt: skip


def _tq(method: str, **valid: Any) -> Callable[..., Any]:
    return _until_backend(lambda **kw: getattr(TQStream(CONFIG), method)(**{**valid, **kw}))


def _tqb(method: str, **valid: Any) -> Callable[..., Any]:
    return _until_backend(lambda **kw: getattr(TQBuffer(CONFIG), method)(**{**valid, **kw}))


def _core(method: str, **valid: Any) -> Callable[..., Any]:
    return lambda **kw: getattr(_Buffer(CONFIG), method)(**{**valid, **kw})


CONFIG_FIELDS = ("max_staleness", "batch_groups", "policy", "max_bytes", "lease_s",
                 "reservation_s", "admission_timeout_s")  # fmt: skip
#: The alias an error of a list's item names it by (``frames[0]``) is the argument itself.
TARGETS: list[Target] = [
    *_targets("StreamConfig", lambda **kw: StreamConfig(**{"max_staleness": 1,
              "batch_groups": 1, **kw}), *CONFIG_FIELDS),
    *_targets("RayBuffer", _until_backend(lambda config=CONFIG, **kw: RayBuffer(config, **kw)),
              "config", "name", "num_cpus", "resources", "scheduling_strategy"),
    *_targets("RayBuffer.reserve", _ray("reserve"), "version", "timeout_s", "samples"),
    *_targets("RayBuffer.put", _ray("put", gid="g", frame=SAMPLE), "gid", "frame",
              "timeout_s", "sample", gid="group"),
    *_targets("RayBuffer.reserve_and_put", _ray("reserve_and_put", frame=VERSIONED), "frame",
              "timeout_s"),
    *_targets("RayBuffer.reserve_and_put_nowait", _ray("reserve_and_put_nowait",
              frame=VERSIONED), "frame"),
    *_targets("PendingPut.result", _until_backend(lambda timeout_s=None: PendingPut(
              offline_ray_buffer(CONFIG), None).result(timeout_s)), "timeout_s"),
    *_targets("RayBuffer.take", _ray("take"), "ranks", "timeout_s", "lease_s"),
    *_targets("RayBuffer.ack", _ray("ack", step="lease"), "step"),
    *_targets("RayBuffer.release", _ray("release", step="lease"), "step"),
    *_targets("RayBuffer.set_trainer_version", _ray("set_trainer_version", version=0),
              "version"),
    *_targets("step_frame", lambda groups: pw_ray_buffer.step_frame(groups), "groups",
              groups="frame Frame"),
    *_targets("_Buffer.reserve", _core("reserve", version=0), "version", "samples"),
    *_targets("_Buffer.take", _core("take", ranks=1, lease_s=None), "ranks", "lease_s"),
    *_targets("_Buffer.set_version", _core("set_version", version=0), "version"),
    *_targets("TQStream", _until_backend(lambda config=CONFIG, **kw: TQStream(config, **kw)),
              "config", "partition_id"),
    *_targets("TQStream.reserve", _tq("reserve", key="k", version=0), "key", "version",
              "timeout_s", "samples", key="group"),
    *_targets("TQStream.put", _tq("put", keys=["k"], frames=[SAMPLE], versions=[0]), "keys",
              "frames", "versions", "timeout_s", keys="group", frames="frame Frame"),
    *_targets("TQStream.put_sample", _tq("put_sample", key="k", index=0, frame=SAMPLE,
              version=0), "key", "index", "frame", "version", "timeout_s", key="group",
              index="sample", frame="sample"),
    *_targets("TQStream.take", _tq("take", trainer_version=0, step=0), "trainer_version",
              "step", "dp_rank", "dp_size", "timeout_s"),
    *_targets("TQStream.ack", _tq("ack"), "meta"),
    *_targets("TQBuffer", _until_backend(lambda config=CONFIG, **kw: TQBuffer(config, **kw)),
              "config", "partition_id"),
    *_targets("TQBuffer.reserve", _tqb("reserve"), "version", "timeout_s", "samples"),
    *_targets("TQBuffer.put", _tqb("put", gid="g", frame=SAMPLE), "gid", "frame",
              "timeout_s", "sample", gid="group"),
    *_targets("TQBuffer.reserve_and_put", _tqb("reserve_and_put", frame=VERSIONED), "frame",
              "timeout_s"),
    *_targets("TQBuffer.take", _tqb("take"), "ranks", "timeout_s", "lease_s"),
    *_targets("TQBuffer.ack", _tqb("ack", step="1"), "step"),
    *_targets("TQBuffer.release", _tqb("release", step="1"), "step"),
    *_targets("TQBuffer.set_trainer_version", _tqb("set_trainer_version", version=0),
              "version"),
    *_targets("groups_of", lambda meta: pw_tq.groups_of(meta), "meta"),
    *_targets("StalenessSampler", lambda config: StalenessSampler(config), "config"),
    *_targets("tq_config", lambda config: pw_tq.tq_config(config), "config"),
    *_targets("versions_of", lambda meta: pw_tq.versions_of(meta), "meta"),
    # py_wire.trainer's device arguments (its other arguments are test_hostile_sweep's).
    *_targets("trainer.iter_micro_batches", lambda **kw: list(trainer.iter_micro_batches(
        FRAME, 2, **{"device": "cpu", **kw})), "device", "pin_memory"),
    *_targets("trainer.to", lambda device: trainer.to(py_wire.decode(VLM_FRAME), device),
              "device"),
]  # fmt: skip

#: Public streaming calls the sweep does not call, each with the reason.
EXCLUDED = {
    "PendingPut": "built by RayBuffer.reserve_and_put_nowait, not by callers",
    "StalenessSampler.sample": "called by TQ's controller with TQ's own arguments "
    "(tests/streaming/test_tq.py runs it under TQ)",
    "StalenessSampler.has_cached_result": "called by TQ's controller (see sample)",
    "StalenessSampler.clear_cache": "called by TQ's controller (see sample)",
    "StalenessSampler.end_acked": "called in TQ's controller by TQStream.stats (see sample)",
}


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
@SWEEP_SETTINGS
@given(value=VALUES)
def test_sweep(target: Target, value: Any) -> None:
    check(target, value)


def _public() -> set[str]:
    """Every public call of py_wire.streaming's two backends and their rules that takes an
    argument."""
    names = {"StreamConfig"}
    for cls in (RayBuffer, PendingPut, TQStream, TQBuffer, StalenessSampler):
        names.add(cls.__name__)
        for method, f in inspect.getmembers(cls, inspect.isfunction):
            takes = len(inspect.signature(f).parameters) > 1  # more than self
            if takes and not method.startswith("_") and f.__qualname__.startswith(cls.__name__):
                names.add(f"{cls.__name__}.{method}")
    for module in (pw_ray_buffer, pw_tq):
        for name, f in inspect.getmembers(module, inspect.isfunction):
            if not name.startswith("_") and f.__module__ == module.__name__:
                names.add(name)
    return names


def test_every_public_streaming_call_is_swept() -> None:
    swept = {t.name for t in TARGETS}
    missing = _public() - swept - EXCLUDED.keys()
    assert not missing, f"public streaming calls neither swept nor excluded: {sorted(missing)}"
    assert not EXCLUDED.keys() - _public(), "EXCLUDED names a call that is gone"


def teardown_module() -> None:
    report = os.environ.get("PY_WIRE_HOSTILE_REPORT")
    if report:
        Path(report).write_text(json.dumps(dict(OUTCOMES), sort_keys=True) + "\n")
