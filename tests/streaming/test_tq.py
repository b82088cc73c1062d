"""What is TransferQueue's own (the contract every backend keeps is test_contract.py's):
StalenessSampler in TQ's controller, versions in TQ's tags, leases on TQ's consumption table,
keys the caller names, partitions. A step's groups are split across two DP ranks; one rank's
groups are never cleared (its consumer died) and come back after the lease; a reserved key
without columns (a producer mid-put) is never handed out; a second put of a key, a put
without a reservation and racing producers' byte budget; and ``stats()["acked"]`` exact
after the last ack."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import transfer_queue as tq

import py_wire
from py_wire.streaming import AdmissionTimeout, StreamConfig, StreamError
from py_wire.streaming.tq import SCHEMA_KEY, TQStream, versions_of
from py_wire.synth.registry import generate
from tests.helpers import END, PAD, START, small_text_batch
from tests.streaming.conftest import tq_running
from tests.streaming.test_policy import text_group

# Ray start-up (and the benchmark) on a loaded 2-core machine can take minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # spawned processes: see markers

CONFIG = StreamConfig(max_staleness=1, batch_groups=2, lease_s=2.0, reservation_s=2.0)


@pytest.fixture(scope="module", autouse=True)
def tq_session() -> Iterator[None]:
    with tq_running(CONFIG):
        yield


def frame(group: int, version: int) -> py_wire.Frame:
    batch = small_text_batch((3, 4))
    batch["reward"] = torch.full((2,), float(group))
    return py_wire.encode(batch, "text_grpo", metadata={"policy_version": str(version)})


def groups_of(f: py_wire.Frame | None) -> list[int]:
    assert f is not None
    return [int(r) for r in py_wire.decode(f)["reward"].tolist()[::2]]


def test_steps_leases_and_reservations() -> None:
    stream = TQStream(CONFIG)
    for g in range(4):  # the window: (k + 1) * batch_groups
        stream.reserve(f"g{g}", 0)
    # g3 stays reserved: its producer died mid-put. Once its reservation lapses, pace no
    # longer waits for it.
    stream.put([f"g{g}" for g in range(3)], [frame(g, 0) for g in range(3)], [0] * 3)
    meta0, f0 = stream.take(0, step=0, dp_rank=0, dp_size=2)
    meta1, f1 = stream.take(0, step=0, dp_rank=1, dp_size=2)
    assert versions_of(meta0) == [0] and versions_of(meta1) == [0]
    assert sorted(groups_of(f0) + groups_of(f1)) == [0, 1]
    assert py_wire.decode(f0)["policy_version"].tolist() == [0, 0]  # type: ignore[arg-type]
    stream.ack(meta0)  # rank 1 dies: never acks
    time.sleep(max(CONFIG.lease_s, CONFIG.reservation_s) + 0.5)
    meta, f = stream.take(1, step=1, dp_rank=0, dp_size=1, timeout_s=30)
    trained = groups_of(f0) + groups_of(f)
    # rank 1's group came back, with the one left; nothing doubled, g3 (reserved, never
    # put) never appears
    assert groups_of(f1)[0] in groups_of(f)
    stream.ack(meta)
    assert sorted(trained) == [0, 1, 2]
    assert versions_of(meta) == [0, 0]


def test_a_reservation_that_becomes_visible_late_still_counts_the_earlier_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two producers race for the last slot. A stamps its reservation first, but B's becomes
    visible first (A's call to TQ is slow). Counted by the producers' clocks, each would find
    the other later than itself and both would be admitted: one group more than the staleness
    bound allows, which trained 2 versions stale under the bound 1 in a CI run. Counted in the
    order TQ's controller created the keys, A finds B before it and waits."""
    config = StreamConfig(max_staleness=0, batch_groups=1, admission_timeout_s=0.5)
    a = TQStream(config, partition_id="race")
    b = TQStream(config, partition_id="race")
    real_put = tq.kv_put
    raced: list[str] = []

    def slow_put(*args: object, **kwargs: object) -> object:
        if kwargs.get("key") == "a" and not raced:
            raced.append("b")
            b.reserve("b", 0)  # B reserves, and is admitted, while A's call is on its way
        return real_put(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_put", slow_put)
    with pytest.raises(AdmissionTimeout, match="1 groups are open"):
        a.reserve("a", 0)
    assert raced == ["b"]
    listed = tq.kv_list(partition_id="race")["race"]
    assert list(listed) == ["b"]  # A withdrew its reservation; B's stands
    assert listed["b"]["state"] == "reserved"


def test_a_key_created_but_not_yet_tagged_counts_as_open_until_a_reservation_would_lapse() -> None:
    """TQ's ``kv_put`` creates a key, then sets its tags: two calls. A key between the two is a
    reservation on its way and must count in the re-check (else both producers are admitted),
    but a producer that died between the calls must not hold its slot for ever."""
    from transfer_queue.interface import _maybe_create_tq_client

    config = StreamConfig(
        max_staleness=0, batch_groups=1, admission_timeout_s=0.3, reservation_s=1.5
    )
    stream = TQStream(config, partition_id="ghost")
    _maybe_create_tq_client().kv_retrieve_meta(keys=["ghost"], partition_id="ghost", create=True)
    assert tq.kv_list(partition_id="ghost")["ghost"] == {"ghost": {}}  # listed, no tags
    with pytest.raises(AdmissionTimeout, match="1 groups are open"):
        stream.reserve("late", 0)
    assert list(tq.kv_list(partition_id="ghost")["ghost"]) == ["ghost"]  # withdrawn
    assert "ghost" in stream._untagged
    time.sleep(1.6)  # past reservation_s since the stream first saw it untagged
    assert stream.reserve("late", 0, timeout_s=2.0) == 0
    tq.kv_clear(keys=["ghost"], partition_id="ghost")
    stream._open()
    assert stream._untagged == {}  # forgotten once gone from the partition


def vlm_group(group: int, n: int = 3) -> dict[str, Any]:
    """A GRPO group of ``n`` samples of one prompt: the prompt's image shared by every sample,
    responses of different lengths."""
    lengths = tuple(6 + 2 * k for k in range(n))
    batch: dict[str, Any] = small_text_batch(lengths)
    batch["input_ids"] = [
        torch.tensor([1, START, PAD, PAD, END] + [100 + group] * (1 + 2 * k)) for k in range(n)
    ]
    image = torch.randn(8, 1176)
    batch["pixel_values"] = [image] * n
    batch["image_grid_thw"] = [torch.tensor([[1, 2, 4]])] * n
    batch["reward"] = torch.full((n,), float(group))
    return batch


def test_samples_put_apart_come_back_as_their_groups_with_the_images_stored_once() -> None:
    """Two producers put the samples of two prompts one at a time, interleaved. Neither group
    is handed out until its last sample is stored; then each comes back as its group's frame,
    bit for bit, with the prompt's image stored once in TQ and once in the frame."""
    # Its reservations must outlive five puts and a take's wait on a loaded machine.
    patient = dataclasses.replace(CONFIG, reservation_s=60.0)
    a = TQStream(patient, partition_id="samples")
    b = TQStream(patient, partition_id="samples")
    groups = {g: vlm_group(g) for g in (1, 2)}

    def sample(g: int, i: int) -> py_wire.Frame:
        row = {k: v[i : i + 1] for k, v in groups[g].items()}
        return py_wire.encode(row, "qwen2_5_vl", metadata={"policy_version": "0"})

    for g in groups:
        a.reserve(f"p{g}", 0, samples=3)
    for stream, g, i in [(a, 1, 0), (b, 2, 0), (b, 1, 1), (a, 2, 2), (a, 1, 2)]:
        stream.put_sample(f"p{g}", i, sample(g, i), 0)
    with pytest.raises(StreamError, match="p1: sample 3 of a group of 3 samples"):
        a.put_sample("p1", 3, sample(1, 0), 0)
    with pytest.raises(AdmissionTimeout, match="take step 0"):
        a.take(0, 0, timeout_s=1.0)  # p2's sample 1 is still out: no step of 2 groups
    b.put_sample("p2", 1, sample(2, 1), 0)

    listed = tq.kv_list(partition_id="samples")["samples"]
    media = {k: t for k, t in listed.items() if t.get("state") == "media"}
    assert sorted(t["group"] for t in media.values()) == ["p1", "p2"]  # sent by both, kept once
    texts = [t for t in listed.values() if t.get("state") == "sample"]
    assert len(texts) == 6
    one_image = sample(1, 0).layout.fields
    pixels = next(f for f in one_image if f.name == "pixel_values").values.nbytes
    assert sum(t["nbytes"] for t in texts) < pixels  # the samples' rows hold no pixels

    meta, got = a.take(0, 0, timeout_s=10.0)
    assert got is not None and got.num_rows == 6
    assert versions_of(meta) == [0, 0]
    out = py_wire.decode(got, layout="list")
    field = next(f for f in got.layout.fields if f.name == "pixel_values")
    assert field.num_segments == 2  # one image per prompt, shared by its samples' rows
    for g, batch in groups.items():
        rows = [i for i, r in enumerate(out["reward"].tolist()) if r == g]
        assert len(rows) == 3
        for k, i in enumerate(rows):
            assert torch.equal(out["input_ids"][i], batch["input_ids"][k])
            pixels_of_row = out["pixel_values"][i]
            if isinstance(pixels_of_row, list):
                pixels_of_row = torch.cat(pixels_of_row)
            assert torch.equal(pixels_of_row, batch["pixel_values"][k])
        assert out["policy_version"].tolist() == [0] * 6
    a.ack(meta)
    left = tq.kv_list(partition_id="samples").get("samples", {})
    assert [k for k in left if not k.startswith(SCHEMA_KEY)] == []  # the partition's schema stays


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
def test_every_bundled_schemas_samples_put_apart_come_back_as_the_whole_frame_decodes(
    name: str,
) -> None:
    """Each bundled schema's golden frame (media, text-only rows, shared segments) as two
    groups whose samples are put one at a time, last first: the step taken from TQ decodes,
    field by field and byte for byte, as the whole frame does, once per group."""
    from tests.schemas.golden import digests, file_name, read

    whole = py_wire.Frame.from_buffer(read(file_name(name)))
    n = whole.num_rows
    rows = [py_wire.take_rows(whole, [i]) for i in range(n)]
    stream = TQStream(CONFIG, partition_id=f"golden-{name.replace('/', '-')}")
    for group in ("a", "b"):  # a step is batch_groups=2 groups
        stream.reserve(group, 0, samples=n)
    for i in reversed(range(n)):
        for group in ("a", "b"):
            stream.put_sample(group, i, rows[i], 0)
    meta, got = stream.take(0, 0, timeout_s=30.0)
    assert got is not None and got.num_rows == 2 * n
    expected = digests(py_wire.decode(whole, layout="list"))
    for half in (range(n), range(n, 2 * n)):
        out = digests(py_wire.decode(py_wire.take_rows(got, list(half)), layout="list"))
        assert out == expected  # the golden schemas hold no policy_version field
    assert got.metadata["policy_version"] == "0"
    stream.ack(meta)


#: The rules of the puts below (each take sends its stream's config to the sampler).
PACE = StreamConfig(max_staleness=1, batch_groups=1, lease_s=1.0, reservation_s=60.0)


def rewards(frame: py_wire.Frame | None) -> list[float]:
    assert frame is not None
    return [float(r) for r in py_wire.decode(frame)["reward"].tolist()]


def listed(partition: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = tq.kv_list(partition_id=partition).get(partition, {})
    return out


def test_a_second_put_of_a_key_is_refused_and_the_first_group_kept() -> None:
    stream = TQStream(PACE, partition_id="twice")
    stream.reserve("g", 0)
    stream.put(["g"], [text_group(1.0)], [0])
    with pytest.raises(StreamError, match="group g: put already"):
        stream.put(["g"], [text_group(2.0)], [0])
    meta, frame = stream.take(0, 0, timeout_s=30.0)
    assert rewards(frame) == [1.0, 1.0]
    stream.ack(meta)

    row = py_wire.encode(
        {k: v[:1] for k, v in small_text_batch((3,)).items()},  # type: ignore[index]
        "text_grpo",
    )
    stream.reserve("s", 0, samples=2)
    stream.put_sample("s", 0, row, 0)
    with pytest.raises(StreamError, match="group s: sample 0 was put already"):
        TQStream(PACE, partition_id="twice").put_sample("s", 0, row, 0)


def test_ten_puts_without_a_reservation_are_refused_so_a_window_of_four_holds() -> None:
    window = StreamConfig(max_staleness=1, batch_groups=2, admission_timeout_s=0.3)
    stream = TQStream(window, partition_id="window")
    for i in range(10):
        with pytest.raises(StreamError, match=f"group u{i}: not reserved.*= 4 groups"):
            stream.put([f"u{i}"], [text_group(float(i))], [0])
    assert listed("window") == {}
    for i in range(4):
        stream.reserve(f"r{i}", 0)
    with pytest.raises(AdmissionTimeout, match="4 groups are open"):
        stream.reserve("r4", 0)
    stream.put([f"r{i}" for i in range(4)], [text_group(float(i)) for i in range(4)], [0] * 4)
    with pytest.raises(StreamError, match="given twice in one put"):
        stream.put(["r0", "r0"], [text_group(), text_group()], [0, 0])


def test_four_racing_producers_stay_within_the_documented_byte_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget is checked, not reserved: each producer admits its put on the bytes stored,
    and puts of others in flight land after. Worst case here: all four producers check
    before any of them writes. Stored bytes then end at most ``max(max_bytes, largest put) +
    (producers - 1) * largest put`` (docs/streaming.md), and never further."""
    group = text_group()
    n = group.nbytes
    budget = StreamConfig(max_staleness=8, batch_groups=1, max_bytes=3 * n)
    streams = [TQStream(budget, partition_id="bytes") for _ in range(4)]
    for i in range(7):
        streams[0].reserve(f"g{i}", 0)
    streams[0].put(["g0", "g1"], [group, group], [0, 0])  # 2 of the budget's 3 groups
    real_put = tq.kv_batch_put
    waiting = list(range(1, 4))

    def racing_put(*args: object, **kwargs: object) -> object:
        # Before this producer's bytes land, the next one checks the budget and puts.
        if waiting:
            p = waiting.pop(0)
            streams[p].put([f"g{p + 2}"], [group], [0])
        return real_put(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_put", racing_put)
    streams[0].put(["g2"], [group], [0])
    stored = streams[0].stored_bytes()
    assert stored == 6 * n  # every producer saw 2 groups stored, and added its own
    assert stored <= max(3 * n, n) + (len(streams) - 1) * n
    monkeypatch.setattr(tq, "kv_batch_put", real_put)
    with pytest.raises(AdmissionTimeout, match="budget"):  # a put checked after them waits
        streams[0].put(["g6"], [group], [0], timeout_s=0.3)


def nemo_group(version: int) -> py_wire.Frame:
    batch = generate("nemo_rl/text", 2, seed=version)
    return py_wire.encode(batch, "nemo_rl/text", metadata={"policy_version": str(version)})


def test_stats_count_every_ack_at_once() -> None:
    """Issue 46, item 6: ``acked`` equals ``delivered`` right after the last ack (the sampler
    counted an ack only when it next ran: one step behind, for ever after the last)."""
    stream = TQStream(StreamConfig(max_staleness=1, batch_groups=1, lease_s=60.0), "acked")
    for step in range(2):
        stream.reserve(f"g{step}", 0)
        stream.put([f"g{step}"], [nemo_group(0)], [0])
        meta, _ = stream.take(0, step=step, timeout_s=30.0)
        stream.ack(meta)
        stats = stream.stats()
        assert stats["delivered"] == stats["acked"] == step + 1


def test_a_one_version_wait_says_the_versions_differ() -> None:
    """Issue 46, item 6: a take of NeMo-RL's schema (one version a step) with two groups
    ready, of versions 0 and 1, says they are of different versions, not that none is
    ready."""
    config = StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0)
    stream = TQStream(config, partition_id="one-version")
    stream.reserve("old", 0)
    stream.reserve("new", 1)
    stream.put(["old", "new"], [nemo_group(0), nemo_group(1)], [0, 1])
    with pytest.raises(AdmissionTimeout, match=r"2 groups are ready \(1 of version 0, 1 of "
                       r"version 1\), but of different versions"):  # fmt: skip
        stream.take(1, step=0, timeout_s=1.0)
    stream.reserve("new2", 1)
    stream.put(["new2"], [nemo_group(1)], [1])
    meta, _ = stream.take(1, step=1, timeout_s=30.0)
    assert versions_of(meta) == [1, 1]
    stream.ack(meta)
