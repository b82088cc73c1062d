"""Issue 43, items 2 and 4, on a real Ray: a :class:`RayBuffer` placed on a chosen node keeps
every group its producers on another node committed after that node is removed, and a take
refused after its lease gives its groups back at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig, StreamError, ray_buffer
from py_wire.synth.registry import generate
from tests.streaming.test_ray_kill import group_frame, trained_groups

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[2]


def nemo_frame(version: int) -> py_wire.Frame:
    batch = generate("nemo_rl/text", 2, seed=version)
    return py_wire.encode(batch, "nemo_rl/text", metadata={"policy_version": str(version)})


@pytest.mark.usefixtures("ray_session")
def test_a_take_refused_after_its_lease_gives_its_groups_back_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The step frame is refused (here by a stand-in for any refusal after the lease): the
    next take gets the same groups at once, not after the 60 s lease."""
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    for version in (0, 0):
        gid, _ = buffer.reserve(version)
        buffer.put(gid, nemo_frame(version))

    def refuse(groups: list[py_wire.Frame]) -> py_wire.Frame:
        raise StreamError("refused")

    monkeypatch.setattr(ray_buffer, "step_frame", refuse)
    with pytest.raises(StreamError, match="refused"):
        buffer.take(timeout_s=10)
    monkeypatch.undo()
    step = buffer.take(timeout_s=5)
    assert step.versions == [[0, 0]] and buffer.ack(step)
    assert buffer.stats()["lease_returns"] == 2


@pytest.mark.usefixtures("ray_session")
def test_a_nemo_rl_step_never_mixes_versions_the_bound_allows() -> None:
    """NeMo-RL's schema has no per-row version: groups of versions 0 and 1 (bound 1) make no
    step; two of version 1 do, and the take neither raises nor leaves anything leased."""
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    gid, _ = buffer.reserve(0)
    buffer.put(gid, nemo_frame(0))
    buffer.set_trainer_version(1)
    for _ in range(2):
        gid, _ = buffer.reserve(1)
        buffer.put(gid, nemo_frame(1))
    step = buffer.take(timeout_s=10)
    assert step.versions == [[1, 1]]
    assert step.frames[0] is not None and step.frames[0].metadata["policy_version"] == "1"
    assert buffer.ack(step)
    stats = buffer.stats()
    assert stats["open_groups"] == 1 and stats["lease_returns"] == 0


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
        "from tests.streaming.test_issue43_ray import placed_buffer_outlives_the_rollout_node"
        " as run; run()"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "rehomed" in done.stdout
