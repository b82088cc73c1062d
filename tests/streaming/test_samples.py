"""Samples that arrive apart (``reserve(samples=n)``, ``put(..., sample=i)``): a prompt's
images stored once however its samples arrive, the group visible only once whole, and its
frame the one a group put whole would give. The buffer state without Ray here; the Ray actor
with producers in other processes in ``test_samples_ray.py``."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

import py_wire
from py_wire.streaming import StreamConfig, StreamError, _samples
from py_wire.streaming.ray_buffer import VERSION_KEY, _Buffer, _tokens
from py_wire.synth.qwen import qwen2_5_vl_batch
from py_wire.testing import assert_batch_equal
from tests.helpers import small_text_batch, small_vlm_batch

G = 4


def prompt_group(seed: int) -> dict[str, Any]:
    """A GRPO group: ``G`` samples of one prompt, sharing its images."""
    return qwen2_5_vl_batch(
        G, seed=seed, group_size=G, max_images=2, min_patches=16, max_patches=64, max_response=80
    )


def sample_frame(batch: dict[str, Any], row: int, schema: str = "qwen2_5_vl", **kw: Any) -> Any:
    """Row ``row`` of ``batch`` encoded alone, as a rollout worker streams it."""
    one = {k: v[row : row + 1] for k, v in batch.items() if v is not None}
    return py_wire.encode(one, schema, **kw)


def put_sample(buf: _Buffer, gid: str, index: int, frame: py_wire.Frame) -> None:
    """What ``RayBuffer.put(gid, frame, sample=index)`` does, against the state directly."""
    text, media, digest = _samples.split(frame)
    tokens = _tokens(frame)
    reason = buf.put_sample(gid, index, text, digest, None, tokens, None)
    if reason == "media":
        reason = buf.put_sample(gid, index, text, digest, media, tokens, None)
    assert reason is None


def taken_frames(buf: _Buffer) -> list[py_wire.Frame]:
    got = buf.take(1, None)
    assert got is not None
    out = []
    for _gid, version, parts in got[1][0]:
        texts, digests, media, metadata = parts
        metadata = {**metadata, VERSION_KEY: str(version)}
        out.append(_samples.assemble(texts, digests, media, metadata))
    return out


def test_a_prompts_images_are_stored_once_whatever_order_its_samples_arrive_in() -> None:
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=2))
    groups = [prompt_group(seed) for seed in (1, 2)]
    whole = [py_wire.encode(g, "qwen2_5_vl") for g in groups]
    slots = [buf.reserve(0, samples=G) for _ in groups]
    arrivals = [(g, i) for g in range(2) for i in range(G)]
    random.Random(0).shuffle(arrivals)
    for g, i in arrivals:
        assert buf.take(1, None) is None  # never half a group (a step needs both)
        frame = sample_frame(groups[g], i)
        slot = slots[g]
        assert slot is not None
        put_sample(buf, slot[0], i, frame)
    media_bytes = sum(g["pixel_values"][0].nbytes for g in groups)  # one copy per prompt
    stats = buf.stats()
    assert stats["stored"] == 2 and stats["media_parts"] == 2
    per_sample = sum(sample_frame(groups[g], i).nbytes for g in range(2) for i in range(G))
    # Each prompt's pixels (the bulk) once, not G times: near the groups' whole frames.
    assert stats["stored_bytes"] < 1.1 * sum(w.nbytes for w in whole)
    assert stats["stored_bytes"] < 0.4 * per_sample
    assert stats["stored_bytes"] > media_bytes
    frames = taken_frames(buf)
    for frame, batch, w in zip(frames, groups, whole, strict=True):
        assert_batch_equal(py_wire.decode(frame), batch, frame.schema)
        pixels = {f.name: f for f in frame.layout.fields}["pixel_values"]
        assert pixels.num_segments == 1 and pixels.num_refs == G  # the group's frame: once too
        assert frame.nbytes <= w.nbytes * 1.02
        assert frame.metadata["policy_version"] == "0"


def test_samples_with_their_own_images_keep_them() -> None:
    # Rows of small_vlm_batch: a shared image, none, and another image then the shared one.
    batch = small_vlm_batch()
    buf = _Buffer(StreamConfig(max_staleness=0, batch_groups=1))
    slot = buf.reserve(3, samples=3)
    assert slot is not None
    for i in (2, 0, 1):
        put_sample(buf, slot[0], i, sample_frame(batch, i, "qwen2_5_vl"))
    assert buf.stats()["media_parts"] == 3  # three different media columns, none dropped
    (frame,) = taken_frames(buf)
    assert_batch_equal(py_wire.decode(frame), batch, frame.schema)
    assert frame.metadata["policy_version"] == "3"


def test_a_text_only_schema_stores_text_parts() -> None:
    batch = small_text_batch((3, 0, 5))
    buf = _Buffer(StreamConfig(max_staleness=0, batch_groups=1))
    slot = buf.reserve(0, samples=3)
    assert slot is not None
    for i in range(3):
        put_sample(buf, slot[0], i, sample_frame(batch, i, "text_grpo"))
    assert buf.stats()["media_parts"] == 0
    (frame,) = taken_frames(buf)
    assert_batch_equal(py_wire.decode(frame), batch, frame.schema)


def test_bad_sample_puts_are_refused_by_name() -> None:
    group = prompt_group(3)
    buf = _Buffer(StreamConfig(max_staleness=0, batch_groups=2))
    slot = buf.reserve(2, samples=2)
    whole = buf.reserve(2)
    assert slot is not None and whole is not None
    gid = slot[0]
    frame = sample_frame(group, 0)
    text, media, digest = _samples.split(frame)
    tokens = _tokens(frame)
    assert digest is not None and media is not None
    assert buf.put_sample(gid, 0, text, digest, None, tokens, None) == "media"
    assert buf.stats()["stored_bytes"] == 0  # asking for the media stored nothing
    with pytest.raises(StreamError, match="sample 2 of a group of 2"):
        buf.put_sample(gid, 2, text, digest, media, tokens, None)
    with pytest.raises(StreamError, match=r"policy_version 5.*reserved with version 2"):
        buf.put_sample(gid, 0, text, digest, media, tokens, 5)
    assert buf.put_sample(gid, 0, text, digest, media, tokens, 2) is None
    with pytest.raises(StreamError, match="sample 0 was put already"):
        buf.put_sample(gid, 0, text, digest, media, tokens, None)
    with pytest.raises(StreamError, match="reserve\\(samples=n\\)"):
        buf.put_sample(whole[0], 0, text, digest, media, tokens, None)
    with pytest.raises(py_wire.BatchError, match="one row"):
        _samples.split(py_wire.encode(group, "qwen2_5_vl"))


def test_a_sample_paired_with_another_prompts_images_is_refused() -> None:
    def image_tokens(group: dict[str, Any]) -> int:
        return int((group["input_ids"][0] == 151655).sum())

    a = prompt_group(4)
    # The first seed after 4 whose prompt has a different image size.
    b = next(g for g in map(prompt_group, range(5, 50)) if image_tokens(g) != image_tokens(a))
    text_a, _, _ = _samples.split(sample_frame(a, 0))
    _, media_b, digest_b = _samples.split(sample_frame(b, 0))
    assert media_b is not None and digest_b is not None
    with pytest.raises(py_wire.ContractError):
        _samples.assemble([text_a], [digest_b], {digest_b: media_b}, {})


def test_a_partial_group_whose_producer_died_frees_its_samples() -> None:
    group = prompt_group(6)
    buf = _Buffer(StreamConfig(max_staleness=0, batch_groups=1, reservation_s=0.05))
    slot = buf.reserve(0, samples=G)
    assert slot is not None
    put_sample(buf, slot[0], 0, sample_frame(group, 0))
    put_sample(buf, slot[0], 1, sample_frame(group, 1))
    assert buf.stats()["stored_bytes"] > 0
    time.sleep(0.1)  # the rest never come
    stats = buf.stats()
    assert stats["abandoned"] == 1 and stats["stored_bytes"] == 0 and stats["media_parts"] == 0
    assert buf.take(1, None) is None


def test_acked_groups_free_the_media_they_shared() -> None:
    group = prompt_group(7)
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=1))
    slots = [buf.reserve(0, samples=2) for _ in range(2)]
    # Two groups of the same prompt (say a resample): its images stored once for both.
    for slot in slots:
        assert slot is not None
        for i in range(2):
            put_sample(buf, slot[0], i, sample_frame(group, i))
    assert buf.stats()["media_parts"] == 1
    first = buf.take(1, None)
    assert first is not None and buf.ack(first[0])
    assert buf.stats()["media_parts"] == 1  # the other group still uses them
    second = buf.take(1, None)
    assert second is not None and buf.ack(second[0])
    assert buf.stats()["media_parts"] == 0 and buf.stats()["stored_bytes"] == 0


def test_digest_names_content_not_memory() -> None:
    group = prompt_group(8)
    frames = [sample_frame(group, i) for i in range(2)]
    digests = [_samples.split(f)[2] for f in frames]
    assert digests[0] == digests[1]
    other = dict(group)
    pixels = group["pixel_values"][0].clone()
    pixels.view(-1)[0] += 1  # one value of one patch differs
    other["pixel_values"] = [pixels] * G
    assert _samples.split(sample_frame(other, 0))[2] != digests[0]


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
def test_samples_put_apart_come_back_as_the_whole_batch_decodes(name: str) -> None:
    """Every bundled schema's golden frame (media, text-only rows, shared segments), its rows
    streamed one at a time and the group rebuilt: every field, byte for byte, as decoding the
    whole frame gives it."""
    from tests.schemas.golden import digests, file_name, read

    whole = py_wire.Frame.from_buffer(read(file_name(name)))
    rows = [py_wire.take_rows(whole, [i]) for i in range(whole.num_rows)]
    parts = [_samples.split(row) for row in rows]
    media = {d: m for _, m, d in parts if d is not None and m is not None}
    group = _samples.assemble([t for t, _, _ in parts], [d for _, _, d in parts], media, {})
    expected = digests(py_wire.decode(whole, layout="list"))
    assert digests(py_wire.decode(group, layout="list")) == expected
    if _samples.media_fields(whole.schema):
        assert len(media) >= 1 and all(d is not None for _, _, d in parts)


def test_a_step_keeps_each_groups_version_or_refuses_groups_that_differ() -> None:
    """Where the schema declares ``policy_version`` each row carries its group's; a schema
    without the field (NeMo-RL's, verl's) takes groups of one version and refuses a mix,
    naming the key: a version is never dropped."""
    from py_wire.streaming.ray_buffer import step_frame
    from py_wire.synth.registry import generate

    def group(schema: str, batch: dict[str, Any], version: int) -> py_wire.Frame:
        return py_wire.encode(batch, schema, metadata={VERSION_KEY: str(version)})

    vlm = step_frame([group("qwen2_5_vl", small_vlm_batch(), v) for v in (0, 1)])
    assert py_wire.decode(vlm)["policy_version"].tolist() == [0, 0, 0, 1, 1, 1]
    nemo = generate("nemo_rl/text", 3, seed=1)  # NeMo-RL's fields: no policy_version
    assert step_frame([group("nemo_rl/text", nemo, v) for v in (2, 2)]).metadata[VERSION_KEY] == "2"
    with pytest.raises(py_wire.WireError, match=VERSION_KEY):
        step_frame([group("nemo_rl/text", nemo, v) for v in (2, 3)])
