"""Every argument of the streaming calls is checked before any state changes (issue 40, items
5 and 6): a wrong type is a ``TypeError`` naming the argument, a bad value a ``StreamError``
naming it; a lease is never negative, a version never a float, a budget never ``nan``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig, StreamError
from py_wire.streaming._checks import MAX_RANKS
from py_wire.streaming.ray_buffer import _Buffer
from py_wire.streaming.tq import TQStream
from tests.helpers import small_text_batch
from tests.streaming.offline import ReachedBackend, offline, offline_ray_buffer

CONFIG = StreamConfig(max_staleness=1, batch_groups=1)


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline():
        yield


def _frame() -> py_wire.Frame:
    return py_wire.encode(small_text_batch((2,)), "text_grpo")


def _buffer_with_one_group() -> _Buffer:
    buf = _Buffer(CONFIG)
    slot = buf.reserve(0)
    assert slot is not None and buf.put(slot[0], _frame(), 2) is None
    return buf


def test_a_negative_lease_is_refused_not_a_group_delivered_twice() -> None:
    buf = _buffer_with_one_group()
    with pytest.raises(StreamError, match="lease_s"):
        buf.take(1, -100.0)
    first = buf.take(1, None)
    assert first is not None and len(first[1][0]) == 1
    assert buf.take(1, None) is None  # leased: no second delivery
    assert buf.stats()["delivered"] == 1


@pytest.mark.parametrize("ranks", [0, -1, MAX_RANKS + 1])
def test_bad_ranks_are_refused_before_the_group_is_leased(ranks: int) -> None:
    buf = _buffer_with_one_group()
    with pytest.raises(StreamError, match="ranks"):
        buf.take(ranks, None)
    got = buf.take(1, None)  # the group was not leased by the refused take
    assert got is not None and len(got[1][0]) == 1


@pytest.mark.parametrize("version", [1.7, math.inf, "3", b"5", True, torch.tensor([1, 2])])
def test_a_version_that_is_no_int_is_refused_not_recorded(version: Any) -> None:
    buf = _Buffer(CONFIG)
    with pytest.raises(TypeError, match="version"):
        buf.reserve(version)
    with pytest.raises(TypeError, match="version"):
        buf.set_version(version)
    assert buf.stats()["reserved"] == 0 and buf.trainer_version == 0


def test_integer_scalars_of_numpy_and_torch_are_versions() -> None:
    buf = _Buffer(CONFIG)
    slot = buf.reserve(np.int64(3))
    assert slot is not None and slot[1] == 3 and type(slot[1]) is int
    buf.set_version(torch.tensor(4))
    assert buf.trainer_version == 4 and type(buf.trainer_version) is int


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("max_bytes", math.nan, TypeError),
        ("max_bytes", 0, StreamError),
        ("max_bytes", np.zeros(2), TypeError),
        ("lease_s", math.inf, StreamError),
        ("lease_s", math.nan, StreamError),
        ("reservation_s", -1, StreamError),
        ("reservation_s", 10**400, StreamError),
        ("admission_timeout_s", "5", TypeError),
        ("admission_timeout_s", torch.zeros(2), TypeError),
        ("max_staleness", 1.0, TypeError),
        ("batch_groups", np.zeros(2), TypeError),
        ("policy", np.zeros(2), TypeError),
    ],
)
def test_config_refuses_by_name(field: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=field):
        StreamConfig(**{"max_staleness": 1, "batch_groups": 1, field: value})


def test_config_keeps_python_numbers() -> None:
    config = StreamConfig(
        max_staleness=np.int64(1), batch_groups=torch.tensor(2), lease_s=np.float32(1.5)
    )
    assert (config.max_staleness, config.batch_groups, config.lease_s) == (1, 2, 1.5)
    assert {type(config.max_staleness), type(config.batch_groups)} == {int}


#: (call, argument, value, error): each must be refused before Ray or TQ is reached.
RAY_CALLS = [
    ("take", {"lease_s": -100}, StreamError, "lease_s"),
    ("take", {"ranks": 0}, StreamError, "ranks"),
    ("take", {"ranks": np.zeros(2)}, TypeError, "ranks"),
    ("take", {"timeout_s": math.nan}, StreamError, "timeout_s"),
    ("reserve", {"version": math.inf}, TypeError, "version"),
    ("reserve", {"version": 1.7}, TypeError, "version"),
    ("reserve", {"version": "3"}, TypeError, "version"),
    ("reserve", {"version": b"5"}, TypeError, "version"),
    ("reserve", {"timeout_s": -1}, StreamError, "timeout_s"),
    ("set_trainer_version", {"version": torch.zeros(2)}, TypeError, "version"),
    ("set_trainer_version", {"version": -1}, StreamError, "version"),
    ("put", {"gid": "g", "frame": b"x"}, TypeError, "frame"),
    ("put", {"gid": 3, "frame": None}, TypeError, "gid"),
    ("ack", {"step": 3}, TypeError, "step"),
    ("reserve_and_put", {"frame": b"x"}, TypeError, "frame"),
    ("reserve_and_put", {"frame": _frame(), "timeout_s": -1}, StreamError, "timeout_s"),
    ("reserve_and_put", {"frame": _frame()}, StreamError, "policy_version=None"),
]


TQ_CALLS = [
    ("take", {"trainer_version": 1.7, "step": 0}, TypeError, "trainer_version"),
    ("take", {"trainer_version": 1, "step": 0, "dp_rank": 2, "dp_size": 2}, StreamError, "dp_rank"),
    ("take", {"trainer_version": 1, "step": 0, "dp_size": 0}, StreamError, "dp_size"),
    ("take", {"trainer_version": 1, "step": 0, "timeout_s": math.inf}, StreamError, "timeout_s"),
    ("reserve", {"key": "k", "version": "3"}, TypeError, "version"),
    ("reserve", {"key": "k", "version": -2}, StreamError, "version"),
    ("reserve", {"key": 5, "version": 0}, TypeError, "key"),
    ("put", {"keys": ["a"], "frames": [b"x"], "versions": [0]}, TypeError, r"frames\[0\]"),
    ("put", {"keys": ["a", "b"], "frames": [], "versions": [0]}, StreamError, "keys, frames"),
    ("put", {"keys": ["a"], "frames": [None], "versions": [1.5]}, TypeError, "frames"),
    ("put_sample", {"key": "k", "index": -1, "frame": None, "version": 0}, StreamError, "index"),
    ("ack", {"meta": None}, TypeError, "meta"),
]


BACKENDS = {"RayBuffer": offline_ray_buffer, "TQStream": TQStream}


@pytest.mark.parametrize(
    ("backend", "method", "kwargs", "error", "match"),
    [("RayBuffer", *call) for call in RAY_CALLS] + [("TQStream", *call) for call in TQ_CALLS],
)
def test_refused_before_ray_or_transfer_queue(
    backend: str, method: str, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    stream = BACKENDS[backend](CONFIG)
    with pytest.raises(error, match=match):
        getattr(stream, method)(**kwargs)


@pytest.mark.parametrize(
    ("placement", "error"),
    [
        ({"num_cpus": -1}, StreamError),
        ({"num_cpus": "1"}, TypeError),
        ({"resources": {"CPU": 1}}, StreamError),
        ({"resources": {"head": float("nan")}}, StreamError),
        ({"resources": ["head"]}, TypeError),
        ({"scheduling_strategy": "NEAREST"}, StreamError),
        ({"scheduling_strategy": object()}, TypeError),
    ],
)
def test_a_placement_ray_would_refuse_is_refused_before_ray_naming_it(
    placement: dict[str, Any], error: type[Exception]
) -> None:
    argument = next(iter(placement))
    with pytest.raises(error, match=argument):
        RayBuffer(StreamConfig(max_staleness=1, batch_groups=1), **placement)


def test_a_valid_placement_reaches_ray() -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy("ab" * 28, soft=False)
    with pytest.raises(ReachedBackend):
        RayBuffer(
            StreamConfig(max_staleness=1, batch_groups=1),
            num_cpus=0.5,
            resources={"head": 0.01},
            scheduling_strategy=strategy,
        )
