"""``decode(..., writable=)``: the default views the source; ``"copy"`` decodes a private copy,
so in-place writes never reach the source (a shared object, a read-only mapping)."""

from __future__ import annotations

import mmap
import warnings

import pytest
import torch

import py_wire
from py_wire.testing import assert_batch_equal
from tests.helpers import small_vlm_batch

SCHEMA = "qwen2_5_vl"
BATCH = small_vlm_batch()


def _span(data: object) -> tuple[int, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        base = torch.frombuffer(data, dtype=torch.uint8)  # type: ignore[call-overload]
    return base.data_ptr(), base.data_ptr() + base.numel()


def _inside(t: torch.Tensor, span: tuple[int, int]) -> bool:
    return span[0] <= t.data_ptr() and t.data_ptr() + t.nbytes <= span[1]


def test_default_views_the_source() -> None:
    source = bytearray(bytes(py_wire.encode(BATCH, SCHEMA)))
    out = py_wire.decode(source, SCHEMA)
    assert _inside(out["reward"], _span(source))
    out["reward"].add_(1)  # documented: this writes the source
    assert py_wire.decode(source, SCHEMA)["reward"].equal(out["reward"])


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "frame"])
def test_copy_is_private(kind: str) -> None:
    frame = py_wire.encode(BATCH, SCHEMA)
    source: object = {"bytes": bytes(frame), "bytearray": bytearray(bytes(frame)), "frame": frame}[
        kind
    ]
    before = bytes(memoryview(source))  # type: ignore[arg-type]
    out = py_wire.decode(source, SCHEMA, writable="copy")
    assert_batch_equal(out, BATCH, py_wire.load_schema(SCHEMA))
    span = _span(source)
    assert not _inside(out["reward"], span)
    assert not _inside(out["input_ids"].values(), span)
    assert not _inside(out["pixel_values"].as_tensor(), span)
    out["reward"].add_(100)
    out["input_ids"].values().zero_()
    out["pixel_values"].as_tensor().fill_(7)
    assert bytes(memoryview(source)) == before  # type: ignore[arg-type]


def test_copy_of_a_read_only_mapping_can_be_written(tmp_path: object) -> None:
    path = tmp_path / "f.bin"  # type: ignore[operator]
    path.write_bytes(bytes(py_wire.encode(BATCH, SCHEMA)))
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        assert py_wire.Frame.from_buffer(m).readonly_buffer
        out = py_wire.decode(m, SCHEMA, writable="copy")
        out["reward"].mul_(0)  # would fault on a view of the read-only mapping
        assert py_wire.decode(m, SCHEMA)["reward"].equal(BATCH["reward"])
        del out


def test_copy_with_rows_and_bad_value() -> None:
    frame = py_wire.encode(BATCH, SCHEMA)
    out = py_wire.decode(frame, SCHEMA, rows=range(1, 2), writable="copy")
    assert out["reward"].equal(BATCH["reward"][1:2])
    with pytest.raises(py_wire.WireError, match="writable"):
        py_wire.decode(frame, SCHEMA, writable="yes")  # type: ignore[arg-type]
