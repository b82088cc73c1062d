"""A real multimodal frame through Ray: the object store, task arguments, actor calls and
``ray.wait``. Workers decode it and report facts (a digest of the bytes, a checksum of a field,
and where the views lie), checked here for equality and zero-copy.

A store object is read-only and shared, so zero-copy is what ``writable="view"`` asks for; the
default (``"auto"``) decodes a private copy, which an in-place write cannot get past."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import ray  # requirements-dev.txt installs it: a missing ray is a failure, not a skip
import torch

import py_wire
from py_wire._decode import Writable
from py_wire.synth import registry
from tests.helpers import local_ray

pytestmark = pytest.mark.slow  # spawned processes (see pyproject's markers)

SCHEMA = "qwen2_5_vl"


def _span(frame: py_wire.Frame) -> tuple[int, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only store object
        base = torch.frombuffer(frame, dtype=torch.uint8)
    return base.data_ptr(), base.data_ptr() + base.numel()


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _tensors(v)


def facts(frame: py_wire.Frame, *, writable: Writable) -> dict[str, Any]:
    """What a worker reports about a frame it received: its bytes and where its views lie."""
    lo, hi = _span(frame)
    out = py_wire.decode(frame, SCHEMA, layout="list", writable=writable)
    inside = all(
        lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= hi
        for v in out.values()
        for t in _tensors(v)
        if t.numel()
    )
    pixels = torch.cat([s.flatten() for row in out["pixel_values"] for s in row])
    return {
        "sha": hashlib.sha256(memoryview(frame)).hexdigest(),
        "pixels": float(pixels.double().sum()),
        "reward": out["reward"].tolist(),
        "inside": inside,
        "span": (lo, hi),
        "readonly": frame.readonly_buffer,
    }


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    with local_ray(object_store_mb=200):
        yield


@pytest.fixture(scope="module")
def frame() -> py_wire.Frame:
    return py_wire.encode(registry.generate(SCHEMA, 4), SCHEMA)


@pytest.fixture(scope="module")
def expected(frame: py_wire.Frame) -> dict[str, Any]:
    return facts(frame, writable="view")


def _check(got: dict[str, Any], expected: dict[str, Any], *, zero_copy: bool = True) -> None:
    assert got["sha"] == expected["sha"]
    assert got["pixels"] == expected["pixels"]
    assert got["reward"] == expected["reward"]
    if zero_copy:
        assert got["inside"], "a decoded view lies outside the received frame's buffer"
    else:
        assert not got["inside"], "a default decode of a store object viewed the shared bytes"


def test_frame_through_ray(
    ray_session: None, frame: py_wire.Frame, expected: dict[str, Any]
) -> None:
    ref = ray.put(frame)

    # put/get in the driver: the object comes back zero-copy, read-only, from the store, and
    # two gets of one object map the same bytes (neither is a private copy).
    a, b = ray.get(ref), ray.get(ref)
    _check(facts(a, writable="view"), expected)
    _check(facts(a, writable="auto"), expected, zero_copy=False)
    assert a.readonly_buffer and _span(a) == _span(b) != _span(frame)

    @ray.remote
    def as_argument(f: py_wire.Frame, refs: list[Any]) -> tuple[dict[str, Any], tuple[int, int]]:
        # The argument and a get of the same object inside the worker: the same store bytes.
        return facts(f, writable="view"), _span(ray.get(refs[0]))

    got, span = ray.get(as_argument.remote(ref, [ref]))
    _check(got, expected)
    assert got["readonly"] and got["span"] == span

    @ray.remote
    class Consumer:
        def take(self, f: py_wire.Frame) -> dict[str, Any]:
            return facts(f, writable="view")

        def write(self, f: py_wire.Frame, writable: Writable) -> tuple[torch.Tensor, ...]:
            # The default ("auto") or "copy": an in-place op is private to this worker.
            assert f.readonly_buffer
            out = py_wire.decode(f, SCHEMA, writable=writable)
            before = out["reward"].clone()
            out["reward"].add_(100)
            out["pixel_values"][0][0].zero_()
            again = py_wire.decode(f, SCHEMA, writable="view")  # the store object, re-read here
            return before, out["reward"].clone(), again["reward"].clone()

        def write_default(self, f: py_wire.Frame) -> tuple[torch.Tensor, ...]:
            out = py_wire.decode(f, SCHEMA)
            before = out["reward"].clone()
            out["reward"].add_(100)
            out["pixel_values"][0][0].zero_()
            again = py_wire.decode(f, SCHEMA, writable="view")
            return before, out["reward"].clone(), again["reward"].clone()

    actor = Consumer.remote()  # type: ignore[attr-defined]
    _check(ray.get(actor.take.remote(ref)), expected)
    for call in (actor.write_default.remote(ref), actor.write.remote(ref, "copy")):
        before, after, shared = ray.get(call)
        assert torch.equal(after, before + 100)
        assert torch.equal(shared, before), "the write reached the shared object in the worker"
        # The shared object is untouched, byte for byte, for the driver too.
        _check(facts(ray.get(ref), writable="view"), expected)

    # A stream of results, collected as they finish.
    @ray.remote
    def produce(f: py_wire.Frame) -> py_wire.Frame:
        return f

    pending = [produce.remote(ref) for _ in range(3)] + [actor.take.remote(ref)]
    seen = 0
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        result = ray.get(done[0])
        if isinstance(result, py_wire.Frame):
            result = facts(result, writable="view")
        _check(result, expected)
        seen += 1
    assert seen == 4


def _mapping_of(address: int) -> list[str]:
    from pathlib import Path

    for line in Path("/proc/self/maps").read_text().splitlines():
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= address < hi:
            return line.split()
    raise AssertionError(f"{address:#x} is not mapped")


def test_default_decode_in_a_worker_is_copy_on_write(
    ray_session: None, frame: py_wire.Frame, expected: dict[str, Any]
) -> None:
    """Issue 18: a worker's default decode of a store object maps the object's pages again,
    privately (zero-copy), where the process may reopen them (root here: /proc/self/map_files),
    and copies where it may not; a write never reaches the object either way."""
    ref = ray.put(frame)

    @ray.remote
    def decode_and_write(f: py_wire.Frame) -> dict[str, Any]:
        import os

        refusal = f.copy_on_write_refusal()
        out = py_wire.decode(f, SCHEMA)
        pixels = out["pixel_values"].segments[0]
        source = _mapping_of(_span(f)[0])
        target = _mapping_of(pixels.data_ptr())
        pixels.zero_()
        out["reward"].add_(100)
        return {
            "root": os.geteuid() == 0,
            "refusal": refusal,
            "source": source,
            "target": target,
            "after": facts(f, writable="view"),
        }

    got = ray.get(decode_and_write.remote(ref))
    _check(got["after"], expected)  # the write stayed in the worker
    source, target = got["source"], got["target"]
    assert source[1][3] == "s", source  # the store object: a shared file mapping
    if got["root"]:
        assert got["refusal"] is None
        # A private mapping of the same inode: the pages were shared, not copied.
        assert target[1][3] == "p" and target[4] == source[4] != "0", (source, target)
    else:
        assert got["refusal"] is not None and "reopen" in got["refusal"]
        assert target[4] != source[4]
    _check(facts(ray.get(ref), writable="view"), expected)
