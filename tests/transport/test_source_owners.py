"""Issue 27, findings 1-3: under the default ``writable="auto"`` a decoded value never changes
after ``decode`` returns, and reading it never faults, whatever the source's owner does next.

A private mapping of a source's pages is used only where py_wire holds an owner that keeps the
bytes unchanged (Ray's object store, pinned while a view lives); every other read-only source
(a read-only ``mmap`` of ``/dev/shm``, a read-only view of shared anonymous memory, a read-only
numpy view of a shared mapping) is copied. Each source is rewritten (or truncated) by its owner
after the decode, and the decoded values are compared with what they were."""

from __future__ import annotations

import gc
import mmap
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray  # requirements-dev.txt installs it: a missing ray is a failure, not a skip
import torch

import py_wire
from py_wire._decode import _source_frame
from tests.helpers import local_ray

SCHEMA = "text_grpo"
SHM = Path("/dev/shm")


def _batch(rows: int, tokens: int, seed: float) -> dict[str, Any]:
    """A text GRPO batch whose every float value is ``seed`` plus a row-dependent offset."""
    lengths = [tokens] * rows
    return {
        "input_ids": [torch.full((n,), 7, dtype=torch.int64) for n in lengths],
        "advantages": [torch.full((n,), seed + i) for i, n in enumerate(lengths)],
        "generation_logprobs": [torch.full((n,), -seed) for n in lengths],
        "token_mask": [torch.ones(n, dtype=torch.bool) for n in lengths],
        "input_lengths": torch.tensor(lengths),
        "loss_multiplier": torch.ones(rows),
        "reward": torch.arange(rows, dtype=torch.float32) + seed,
    }


def _snapshot(out: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        "advantages": out["advantages"].values().clone(),
        "reward": out["reward"].clone(),
        "input_ids": out["input_ids"].values().clone(),
    }


def _unchanged(out: dict[str, Any], before: dict[str, torch.Tensor]) -> None:
    now = {
        "advantages": out["advantages"].values(),
        "reward": out["reward"],
        "input_ids": out["input_ids"].values(),
    }
    for name, value in before.items():
        assert torch.equal(now[name], value), f"decoded {name} changed after decode returned"


def _frame_bytes(seed: float) -> bytes:
    return bytes(py_wire.encode(_batch(8, 512, seed), SCHEMA))


@pytest.fixture
def shm_file() -> Iterator[Path]:
    path = SHM / f"py_wire_test_{uuid.uuid4().hex}"
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _readonly_shm_mmap(path: Path, data: bytes) -> mmap.mmap:
    path.write_bytes(data)
    with path.open("rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def test_read_only_shm_mmap_rewritten_by_its_producer(shm_file: Path) -> None:
    first, second = _frame_bytes(1.0), _frame_bytes(50.0)
    assert len(first) == len(second)
    source = _readonly_shm_mmap(shm_file, first)
    assert _source_frame(source, "auto", False)[0].storage == "owned"  # copied
    out = py_wire.decode(source, SCHEMA)
    before = _snapshot(out)
    source.close()  # the consumer is done with its mapping ...
    with shm_file.open("r+b") as f:  # ... and the producer writes its next frame in place
        f.write(second)
    _unchanged(out, before)


def test_read_only_view_of_shared_anonymous_memory_rewritten() -> None:
    first, second = _frame_bytes(2.0), _frame_bytes(60.0)
    shared = mmap.mmap(-1, len(first), flags=mmap.MAP_SHARED)
    shared[:] = first
    source = memoryview(shared).toreadonly()
    assert _source_frame(source, "auto", False)[0].storage == "owned"
    out = py_wire.decode(source, SCHEMA)
    before = _snapshot(out)
    source.release()
    shared[:] = second
    _unchanged(out, before)


def test_read_only_numpy_view_of_a_shared_mapping_rewritten(shm_file: Path) -> None:
    first, second = _frame_bytes(3.0), _frame_bytes(70.0)
    shm_file.write_bytes(first)
    with shm_file.open("r+b") as f:
        shared = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)
    view = np.frombuffer(shared, dtype=np.uint8)
    view.flags.writeable = False
    assert _source_frame(view, "auto", False)[0].storage == "owned"
    out = py_wire.decode(view, SCHEMA)
    before = _snapshot(out)
    shared[:] = second
    _unchanged(out, before)
    # A stage decode or a row window copies the tensors it returns, never views shared pages.
    window = py_wire.decode(view, SCHEMA, rows=range(2, 4))
    window_before = _snapshot(window)
    shared[:] = first
    _unchanged(window, window_before)


def test_truncated_shm_file_never_faults(shm_file: Path) -> None:
    """Finding 3: a decoded tensor of a read-only mapping whose file is truncated afterwards.
    Run in a child process: a regression kills the child with SIGBUS, not the test run."""
    shm_file.write_bytes(_frame_bytes(4.0))
    script = textwrap.dedent(
        f"""
        import mmap, os
        import py_wire
        with open({str(shm_file)!r}, "rb") as f:
            source = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        out = py_wire.decode(source, {SCHEMA!r})
        source.close()
        os.truncate({str(shm_file)!r}, 0)
        print(float(out["advantages"].values().sum()), float(out["reward"].sum()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    advantages, reward = (float(x) for x in done.stdout.split())
    expected = _batch(8, 512, 4.0)
    assert advantages == float(torch.cat(expected["advantages"]).sum())
    assert reward == float(expected["reward"].sum())


# -- Ray: a store object is pinned while any decoded view lives --------------------------------

FRAME_ROWS, FRAME_TOKENS = 64, 32 * 1024  # about 32 MB: four fill the 100 MB store


@pytest.fixture(scope="module")
def small_store() -> Iterator[None]:
    with local_ray(object_store_mb=100):
        yield


def _churn(count: int, put: Callable[[float], None]) -> None:
    for i in range(count):
        put(100.0 + i)
        gc.collect()


@pytest.mark.slow
def test_ray_object_reuse_never_changes_a_default_decode(small_store: None) -> None:
    """Finding 1: ``ray.get`` a Frame, decode it with the default, drop the object: the store
    must not recycle its memory while a decoded view lives, so later objects never show
    through."""
    ref = ray.put(py_wire.encode(_batch(FRAME_ROWS, FRAME_TOKENS, 5.0), SCHEMA))
    frame = ray.get(ref)
    assert frame.readonly_buffer and frame.pinned_by == "Ray's object store"
    assert frame.storage == "pinned-buffer"
    used = _source_frame(frame, "auto", False)[0]
    if os.geteuid() == 0:  # may reopen /proc/self/map_files: the pages are mapped again
        assert used.storage == "copy-on-write" and used.pinned_by == "Ray's object store"
    out = py_wire.decode(frame)
    before = _snapshot(out)
    del frame, ref, used
    gc.collect()

    def put_and_get(seed: float) -> None:
        other = ray.put(py_wire.encode(_batch(FRAME_ROWS, FRAME_TOKENS, seed), SCHEMA))
        got = ray.get(other)
        assert py_wire.decode(got, writable="view")["reward"][0] == seed
        del got, other

    _churn(6, put_and_get)
    _unchanged(out, before)
    out["reward"].add_(1)  # writable, private: the store object never sees it
    assert torch.equal(out["reward"], before["reward"] + 1)
