"""RayBuffer on a real Ray: what is the Ray backend's own (the contract every backend keeps is
test_contract.py's). Where its actor goes: placement Ray refuses, placement no node can serve
(every call still ends within its timeout and says why), a buffer pinned to the head outliving
its producers' node (a two-node ``Cluster``, in a subprocess); and the stream's caller
metadata through samples put apart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig, StreamError
from py_wire.synth.registry import generate
from tests.streaming.test_ray_kill import group_frame, trained_groups
from tests.streaming.test_samples import G, prompt_group, sample_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.usefixtures("ray_session")]

ROOT = Path(__file__).resolve().parents[2]
#: Calls without a timeout of their own wait this long for the actor to be placed.
QUICK = StreamConfig(max_staleness=1, batch_groups=1, admission_timeout_s=2.0)


def unplaced_calls(buffer: RayBuffer) -> list[tuple[str, Any]]:
    return [
        ("reserve", lambda: buffer.reserve(timeout_s=2.0)),
        ("put", lambda: buffer.put("g", nemo_frame(0), timeout_s=2.0)),
        ("take", lambda: buffer.take(timeout_s=2.0)),
        ("ack", lambda: buffer.ack("lease")),
        ("set_trainer_version", lambda: buffer.set_trainer_version(1)),
        ("stats", buffer.stats),
    ]


def nemo_frame(version: int, **metadata: str) -> py_wire.Frame:
    batch = generate("nemo_rl/text", 2, seed=version)
    meta = {"policy_version": str(version), **metadata}
    return py_wire.encode(batch, "nemo_rl/text", metadata=meta)


@pytest.mark.parametrize(
    ("placement", "why"),
    [
        ({"num_cpus": 5}, r"num_cpus = 5, but no alive node has that much 'CPU' \(the most one "
         r"has is 4\)"),
        ({"resources": {"rollout_node": 1}}, r"no alive node offers resource 'rollout_node' "
         r"\(resources\['rollout_node'\] = 1\)"),
    ],
    ids=["more-cpus-than-any-node", "a-resource-no-node-has"],
)  # fmt: skip
def test_every_call_on_an_unplaceable_buffer_ends_within_its_timeout_and_says_why(
    placement: dict[str, Any], why: str
) -> None:
    """The issue's ``RayBuffer(cfg, num_cpus=5)`` on a 4-CPU cluster: the buffer is built
    (Ray may yet add a node), and every call ends after its timeout (the config's admission
    timeout for the calls without one) saying the actor could not be placed and why."""
    buffer = RayBuffer(QUICK, **placement)
    for method, call in unplaced_calls(buffer):
        start = time.monotonic()
        expected = f"{method}.*could not be placed within 2 s \\(.*\\): {why}"
        with pytest.raises(StreamError, match=expected):
            call()
        assert time.monotonic() - start < 10.0, method
    ray.kill(buffer.actor)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ({"num_cpus": 0.00001}, r"num_cpus=1e-05 is refused by Ray: The precision"),
        ({"resources": {"x": 1e-9}}, r"resources=\{'x': 1e-09\} is refused by Ray"),
        ({"resources": {"object_store_memory": 1}}, r"resources names 'object_store_memory'"),
    ],
    ids=["cpus-finer-than-ray's-unit", "a-resource-finer-than-ray's-unit", "object-store-memory"],
)  # fmt: skip
def test_placement_values_ray_refuses_are_stream_errors_naming_the_argument(
    placement: dict[str, Any], message: str
) -> None:
    with pytest.raises(StreamError, match=message):
        RayBuffer(QUICK, **placement)


def test_a_placement_the_cluster_can_never_serve_is_refused_naming_the_argument() -> None:
    """A bundle index past the placement group, a removed placement group, a node that does
    not exist under ``soft=False``, a name a live actor holds: each a StreamError at once."""
    group = placement_group([{"CPU": 1}])
    ray.get(group.ready(), timeout=60)
    past = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=5)
    with pytest.raises(StreamError, match=r"scheduling_strategy's placement_group_bundle_index "
                       r"5 is past placement group \w+'s 1 bundles"):  # fmt: skip
        RayBuffer(QUICK, scheduling_strategy=past)
    remove_placement_group(group)
    removed = PlacementGroupSchedulingStrategy(group)
    deadline = time.monotonic() + 30
    while ray.util.placement_group_table(group).get("state") != "REMOVED":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(StreamError, match=r"scheduling_strategy names placement group \w+, "
                       "which was removed"):  # fmt: skip
        RayBuffer(QUICK, scheduling_strategy=removed)
    nowhere = NodeAffinitySchedulingStrategy("ab" * 28, soft=False)
    with pytest.raises(StreamError, match="scheduling_strategy pins the actor to node abab"):
        RayBuffer(QUICK, scheduling_strategy=nowhere)
    patient = StreamConfig(max_staleness=1, batch_groups=1, admission_timeout_s=120.0)
    held = RayBuffer(patient, name="py_wire.test.taken")
    assert held.stats()["open_groups"] == 0  # placed: the name is held
    with pytest.raises(StreamError, match=r"name 'py_wire\.test\.taken' is taken by a live"):
        RayBuffer(QUICK, name="py_wire.test.taken")
    ray.kill(held.actor)


def test_a_buffer_placed_where_it_fits_works_as_before() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=1), num_cpus=1.5)
    gid, version = buffer.reserve(timeout_s=60)
    buffer.put(gid, nemo_frame(version))
    step = buffer.take(timeout_s=60)
    assert step.versions == [[0]] and buffer.ack(step)
    ray.kill(buffer.actor)


def test_samples_put_apart_carry_the_streams_caller_metadata_into_the_step() -> None:
    """A group whose samples arrive apart is rebuilt at the take with the metadata its samples
    carried (the stream's), not only their version; a sample of other metadata is refused."""
    buffer = RayBuffer(StreamConfig(max_staleness=0, batch_groups=1, lease_s=60.0))
    gid, _ = buffer.reserve(0, samples=G)
    group = prompt_group(1)
    meta = {"policy_version": "0", "run": "r1"}
    buffer.put(gid, sample_frame(group, 0, metadata=meta), sample=0)
    other = sample_frame(group, 1, metadata={**meta, "run": "r2"})
    with pytest.raises(StreamError, match=rf"group {gid}, sample 1: .*'run' is 'r2', but 'r1'"):
        buffer.put(gid, other, sample=1)
    for index in range(1, G):
        buffer.put(gid, sample_frame(group, index, metadata=meta), sample=index)
    step = buffer.take(timeout_s=60)
    assert step.frames[0] is not None
    caller = {k: v for k, v in step.frames[0].metadata.items() if not k.startswith("py_wire.")}
    assert caller == {"run": "r1"}  # the version went into each row's policy_version field
    assert buffer.ack(step)


def placed_buffer_outlives_the_rollout_node() -> None:
    """Run in a fresh process (a ``Cluster`` needs a process where Ray never started): a head
    node, and a rollout node with a custom resource. The buffer is pinned to the head, its
    producers run on the rollout node, which is removed once their groups are committed;
    the trainer on the head then trains every group once, bit for bit."""
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}}
    )
    rollout = cluster.add_node(num_cpus=2, resources={"rollout": 2})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        head = next(node for node, res in nodes.items() if "head" in res)
        buffer = RayBuffer(
            StreamConfig(max_staleness=1, batch_groups=2),
            scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False),
        )

        def node_of_actor(actor: object) -> str:
            return str(ray.get_runtime_context().get_node_id())

        assert ray.get(buffer.actor.__ray_call__.remote(node_of_actor)) == head

        @ray.remote(num_cpus=0.5, resources={"rollout": 1}, max_restarts=0)
        class Producer:
            def produce(self, buffer: RayBuffer, group: int) -> str:
                gid, _ = buffer.reserve(0, timeout_s=30)
                buffer.put(gid, group_frame(group, 0))
                return str(ray.get_runtime_context().get_node_id())

        producers = [Producer.remote() for _ in range(2)]  # type: ignore[attr-defined]
        where = ray.get([producers[i % 2].produce.remote(buffer, i) for i in range(4)])
        assert set(where) == {rollout.node_id} != {head}
        cluster.remove_node(rollout)
        trained: list[int] = []
        for version in range(2):
            step = buffer.take(timeout_s=30)
            trained.extend(trained_groups(step))
            assert buffer.ack(step)
            buffer.set_trainer_version(version + 1)
        assert sorted(trained) == [0, 1, 2, 3]
        stats = buffer.stats()
        assert stats["acked"] == 4 and stats["open_groups"] == 0, stats
        print("rehomed", stats["rehomed"])
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_buffer_placed_on_the_head_outlives_its_producers_node() -> None:
    code = (
        "from tests.streaming.test_ray_buffer import placed_buffer_outlives_the_rollout_node"
        " as run; run()"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "rehomed" in done.stdout
