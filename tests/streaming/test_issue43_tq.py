"""Issue 43, item 4, on real TransferQueue: with NeMo-RL's bundled schema (no per-row
``policy_version`` field) a step never mixes two versions the bound allows: the sampler hands
out groups of one version, so the take neither raises nor leaves groups leased; and a take
refused after the sampler leased its rows gives them back at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import py_wire
from py_wire.streaming import StreamConfig, StreamError
from py_wire.streaming import tq as tq_module
from py_wire.streaming.tq import TQStream, versions_of
from py_wire.synth.registry import generate
from tests.streaming.conftest import tq_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

CONFIG = StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0)


@pytest.fixture(scope="module", autouse=True)
def tq_session() -> Iterator[None]:
    with tq_running(CONFIG):
        yield


def nemo_frame(version: int) -> py_wire.Frame:
    batch = generate("nemo_rl/text", 2, seed=version)
    return py_wire.encode(batch, "nemo_rl/text", metadata={"policy_version": str(version)})


def test_a_nemo_rl_step_through_tq_never_mixes_versions_the_bound_allows() -> None:
    stream = TQStream(CONFIG, partition_id="issue43.nemo")
    stream.reserve("old", 0)
    stream.put(["old"], [nemo_frame(0)], [0])
    for key in ("new0", "new1"):
        stream.reserve(key, 1)
    stream.put(["new0", "new1"], [nemo_frame(1), nemo_frame(1)], [1, 1])
    meta, step = stream.take(1, step=0, timeout_s=30)
    assert versions_of(meta) == [1, 1]
    assert step is not None and step.metadata["policy_version"] == "1"
    stream.ack(meta)
    stats = stream.stats()
    assert stats["open_groups"] == 1 and stats["lease_returns"] == 0


def test_a_take_refused_after_the_sampler_leased_its_rows_gives_them_back_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The step frame is refused (a stand-in for any refusal after the lease): the next take
    gets the same groups at once, not after the 60 s lease."""
    stream = TQStream(CONFIG, partition_id="issue43.refused")
    for key in ("a", "b"):
        stream.reserve(key, 0)
    stream.put(["a", "b"], [nemo_frame(0), nemo_frame(0)], [0, 0])

    def refuse(groups: list[py_wire.Frame]) -> py_wire.Frame:
        raise StreamError("refused")

    monkeypatch.setattr(tq_module, "step_frame", refuse)
    with pytest.raises(StreamError, match="refused"):
        stream.take(0, step=0, timeout_s=30)
    monkeypatch.undo()
    meta, step = stream.take(0, step=1, timeout_s=5)
    assert versions_of(meta) == [0, 0] and step is not None
    stream.ack(meta)
    assert stream.stats()["lease_returns"] == 2
