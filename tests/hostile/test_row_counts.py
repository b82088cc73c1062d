"""Frames whose header claims more than their bytes back, and buffers written while in use:
each used to abort the process, hang, or escape the WireError hierarchy."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import py_wire
from py_wire.synth.registry import generate


def fieldless_frame(num_rows: int, schema_name: str = "qwen2_5_vl") -> bytes:
    """A frame with no tensors, the real schema and fingerprint, and a claimed row count."""
    schema = py_wire.load_schema(schema_name)
    meta = {
        "py_wire.format": "3",
        "py_wire.num_rows": str(num_rows),
        "py_wire.schema": schema.canonical_json,
        "py_wire.fingerprint": schema.fingerprint,
    }
    header = json.dumps({"__metadata__": meta}).encode()
    header += b" " * (-(8 + len(header)) % 64)
    return struct.pack("<Q", len(header)) + header


HUGE = [2**40, 2**61, 2**63 + 1, 2**64 - 1]


@pytest.mark.parametrize("rows", HUGE)
def test_a_row_count_the_bytes_do_not_back_is_a_frame_error_everywhere(rows):
    data = fieldless_frame(rows)
    assert len(data) < 4096
    calls = {
        "decode": lambda: py_wire.decode(data, "qwen2_5_vl"),
        "decode stage": lambda: py_wire.decode(data, stage="train"),
        "Frame.from_buffer": lambda: py_wire.Frame.from_buffer(data),
        "concat": lambda: py_wire.concat([data, data]),
        "select all": lambda: py_wire.take_rows(data, slice(None)),
        "split": lambda: py_wire.chunk(data, 2),
        "shard": lambda: py_wire.shard(data, 0, 2),
    }
    for what, call in calls.items():
        with pytest.raises(py_wire.FrameError, match=str(rows)) as caught:
            call()
        assert caught.value is not None, what


@pytest.mark.slow
def test_hostile_row_counts_do_not_kill_a_subprocess():
    """The same calls in a child process: an abort (the old failure) fails this test, not the
    suite."""
    code = textwrap.dedent(
        """
        import py_wire
        from tests.hostile.test_row_counts import fieldless_frame, HUGE
        for rows in HUGE:
            data = fieldless_frame(rows)
            for call in (
                lambda: py_wire.concat([py_wire.Frame.from_buffer(data)]),
                lambda: py_wire.decode(data, stage="train"),
            ):
                try:
                    call()
                except py_wire.FrameError:
                    pass
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_a_small_fieldless_frame_still_works():
    data = fieldless_frame(3)
    assert py_wire.decode(data) == {}
    assert py_wire.concat([data, data]).num_rows == 6
    assert [f.num_rows for f in py_wire.chunk(data, 2)] == [2, 1]
    # A stage needing media whose rows' tokens are absent too: nothing shows the rows hold no
    # placeholders, so decode refuses to make up empty media (issue 28) rather than guess.
    with pytest.raises(py_wire.ContractError, match="pixel_values"):
        py_wire.decode(data, stage="train")


def _writable_frame():
    schema = py_wire.load_schema("qwen2_5_vl")
    frame = py_wire.encode(generate("qwen2_5_vl", 4), schema)
    buf = bytearray(bytes(frame))
    return py_wire.Frame.from_buffer(buf), np.frombuffer(buf, np.uint8)


def _entry(frame: py_wire.Frame, name: str) -> tuple[int, int]:
    raw = bytes(memoryview(frame)[:8])
    (header_len,) = struct.unpack("<Q", raw)
    header = json.loads(bytes(memoryview(frame)[8 : 8 + header_len]))
    begin, end = header[name]["data_offsets"]
    return 8 + header_len + begin, 8 + header_len + end


@pytest.mark.parametrize(
    "table, value",
    [
        ("pixel_values.row_offsets", 2**40),
        ("pixel_values.row_segments", 99),
        ("pixel_values.seg_offsets", -5),
        ("pixel_values.seg_shapes", 2**50),
        ("__seq_offsets", 2**33),
    ],
)
def test_frame_ops_on_a_buffer_written_after_wrapping_raise_frame_error(table, value):
    frame, array = _writable_frame()
    begin, _ = _entry(frame, table)
    py_wire.take_rows(frame, [0])  # fine before the write
    array[begin + 8 : begin + 16] = np.frombuffer(struct.pack("<q", value), np.uint8)
    for call in (
        lambda: py_wire.take_rows(frame, [0]),
        lambda: py_wire.concat([frame, frame]),
        lambda: py_wire.chunk(frame, 2),
        lambda: py_wire.check_contracts(frame),
    ):
        with pytest.raises(py_wire.FrameError):
            call()


def test_a_thread_writing_during_frame_ops_never_escapes_the_hierarchy():
    frame, array = _writable_frame()
    begin, end = _entry(frame, "pixel_values.row_offsets")
    original = array[begin:end].copy()
    junk = np.frombuffer(struct.pack("<q", 2**40) * ((end - begin) // 8), np.uint8)
    stop = threading.Event()

    def scribble():
        while not stop.is_set():
            array[begin:end] = junk
            array[begin:end] = original

    expected = bytes(py_wire.take_rows(frame, [0, 1]))
    array[begin:end] = junk  # the state the writer flips to, on its own: refused
    with pytest.raises(py_wire.FrameError, match="pixel_values"):
        py_wire.take_rows(frame, [0, 1])
    array[begin:end] = original
    writer = threading.Thread(target=scribble)
    writer.start()
    outcomes = {"ok": 0, "FrameError": 0}
    try:
        for _ in range(300):
            try:
                picked = py_wire.take_rows(frame, [0, 1])
            except py_wire.FrameError as e:
                assert "pixel_values" in str(e), e  # the field whose table was changed
                outcomes["FrameError"] += 1
                continue
            # An op that passed read the tables once, validated: the rows of the real frame
            # (the junk offsets point past the frame), never a mix of the two states.
            assert bytes(picked) == expected
            outcomes["ok"] += 1
    finally:
        stop.set()
        writer.join()
    assert array[begin:end].tobytes() == original.tobytes()
