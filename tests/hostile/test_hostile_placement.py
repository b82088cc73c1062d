"""The hostile-argument sweep of :class:`RayBuffer`'s placement arguments on a real Ray
(issue 46): ``num_cpus``, ``resources``, ``scheduling_strategy`` and ``name``, one hostile, the
others valid, and the buffer then asked for its stats. test_hostile_sweep's rule: the
construction and the call work, or raise a :class:`WireError` or a ``TypeError`` naming the
argument; nothing of Ray's own escapes (no ``ValueError``, no ``ActorUnschedulableError``), and
no call hangs: an actor no node can place makes ``stats()`` a :class:`StreamError` after the
config's admission timeout, naming the placement.

The values are the sweep's hostile values plus placement-shaped ones: quantities finer than
Ray's 0.0001 unit, beyond any node, negative, ``nan``; resource names Ray keeps for itself;
placement groups live, removed or indexed past their bundles; nodes that do not exist; names a
live actor holds.

Two sweeps: ``test_sweep`` places each accepted buffer for real (an actor: seconds a call);
``test_sweep_to_actor_creation`` makes 50 times as many calls up to Ray's actor creation (every
check, Ray's own and the running cluster's included; ``ray.remote`` stubbed: microseconds a
call). ``PY_WIRE_HOSTILE_EXAMPLES`` (default 3) examples per argument: 12 placed and 600
checked calls in CI; the long profile, ``scripts/hostile_campaign.py --chunks 4 --examples 0
--schema-calls 0 --placement-examples 25``, makes 20,000 checked and 400 placed calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from hypothesis import given, settings
from hypothesis import strategies as st
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

import py_wire.streaming.tq  # noqa: F401 (imported, with TQ's actors, before offline() stubs Ray)
from py_wire.streaming import RayBuffer, StreamConfig
from tests.hostile.test_hostile_sweep import (
    EXAMPLES,
    OUTCOMES,
    SWEEP_SETTINGS,
    VALUES,
    Target,
    check,
)
from tests.streaming.offline import ReachedBackend, offline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

#: Each accepted buffer's stats() waits at most this long for its actor to be placed.
CONFIG = StreamConfig(max_staleness=1, batch_groups=1, admission_timeout_s=2.0)
#: Placement objects that need the running cluster, built once per module.
LIVE: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    live = placement_group([{"CPU": 1}])
    gone = placement_group([{"CPU": 1}])
    ray.get([live.ready(), gone.ready()], timeout=120)
    remove_placement_group(gone)
    LIVE.update(live=live, gone=gone, node=ray.get_runtime_context().get_node_id())
    patient = StreamConfig(max_staleness=1, batch_groups=1, admission_timeout_s=120.0)
    LIVE["holder"] = RayBuffer(patient, name="py_wire.hostile.taken")
    LIVE["holder"].stats()  # placed: its name is taken from now on
    try:
        yield
    finally:
        ray.shutdown()
        LIVE.clear()


def _strategy(kind: str, index: int, soft: bool, node: str) -> Any:
    if kind == "pg":
        return PlacementGroupSchedulingStrategy(LIVE["live"], placement_group_bundle_index=index)
    if kind == "gone":
        return PlacementGroupSchedulingStrategy(LIVE["gone"], placement_group_bundle_index=index)
    if kind == "here":
        return NodeAffinitySchedulingStrategy(LIVE["node"], soft=soft)
    return NodeAffinitySchedulingStrategy(node, soft=soft)


QUANTITIES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1e-3),
    st.sampled_from([0, 1, 4, 5, 1.5, 0.5, 0.00001, 1e-9, -1, 2**63, 1e300, 10_000.00005]),
    st.integers(),
)
RESOURCE_NAMES = st.one_of(
    st.sampled_from(["x", "CPU", "GPU", "memory", "object_store_memory", "node:", "", "bundle"]),
    st.text(max_size=20),
)
PLACEMENT = {
    "num_cpus": st.one_of(VALUES, QUANTITIES),
    "resources": st.one_of(
        VALUES,
        st.dictionaries(RESOURCE_NAMES, st.one_of(QUANTITIES, VALUES), max_size=3),
    ),
    "scheduling_strategy": st.one_of(
        VALUES,
        st.sampled_from(["DEFAULT", "SPREAD", "PACK", "default"]),
        st.builds(
            _strategy,
            st.sampled_from(["pg", "gone", "here", "other"]),
            st.integers(min_value=-3, max_value=3),
            st.booleans(),
            st.text("0123456789abcdef", min_size=56, max_size=56),
        ),
    ),
    "name": st.one_of(
        VALUES,
        st.sampled_from(["py_wire.hostile.taken", "", " ", "a" * 1000, "ns/name"]),
        st.text(max_size=40),
    ),
}


def _placed(**placement: Any) -> None:
    """A buffer with ``placement``, asked for its stats, then let go."""
    buffer = RayBuffer(CONFIG, **placement)
    try:
        buffer.stats()
    finally:
        ray.kill(buffer.actor)


def _checked(**placement: Any) -> None:
    """A buffer with ``placement`` up to Ray's actor creation: every check, Ray's own option
    checks and the running cluster's included; a placement they all pass reaches
    ``ray.remote``, stubbed (:func:`tests.streaming.offline.offline`), and counts as
    accepted."""
    with offline():
        try:
            RayBuffer(CONFIG, **placement)
        except ReachedBackend:
            OUTCOMES["reached the backend"] += 1


TARGETS = [Target("RayBuffer", _placed, argument) for argument in PLACEMENT]
CHECKED = [Target("RayBuffer", _checked, argument) for argument in PLACEMENT]
#: Calls up to actor creation cost microseconds, a placed actor seconds: this many checked
#: calls per placed one.
CHECKED_PER_PLACED = 50


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
@SWEEP_SETTINGS
@given(data=st.data())
def test_sweep(target: Target, data: st.DataObject) -> None:
    """Each buffer placed for real (or left pending) and asked for its stats."""
    check(target, data.draw(PLACEMENT[target.argument], label=target.argument))


@pytest.mark.parametrize("target", CHECKED, ids=[f"checks-{t.id}" for t in CHECKED])
@settings(SWEEP_SETTINGS, max_examples=EXAMPLES * CHECKED_PER_PLACED)
@given(data=st.data())
def test_sweep_to_actor_creation(target: Target, data: st.DataObject) -> None:
    check(target, data.draw(PLACEMENT[target.argument], label=target.argument))


def teardown_module() -> None:
    report = os.environ.get("PY_WIRE_HOSTILE_REPORT")
    if report:
        Path(report).write_text(json.dumps(dict(OUTCOMES), sort_keys=True) + "\n")
