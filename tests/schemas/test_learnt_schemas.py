"""Schemas learnt from received frames are bounded by the bytes they keep, not only by count:
a peer sending many large schemas cannot pin memory for the life of a receiver. The least
recently used learnt schema is let go first; schemas the process loads itself stay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
import torch

import py_wire
from py_wire import _native
from py_wire._schema import codecs, files, registry, view_cache


@contextmanager
def _unheld() -> Iterator[None]:
    """Encodes that do not hold their schema in this process (as a peer's would not): neither
    ``load_schema`` nor a compact codec pins it."""
    with (
        mock.patch.object(files, "_hold", lambda schema: None),
        mock.patch.object(codecs, "_hold", lambda schema: None),
    ):
        yield


def _peer_schema(i: int, description_bytes: int) -> py_wire.Schema:
    return py_wire.Schema.from_dict(
        {
            "name": f"learnt_{description_bytes}_{i}",
            "fields": {
                "r": {"tier": "scalar", "dtype": "float32", "description": "d" * description_bytes}
            },
        }
    )


def _peer_frames(schema: py_wire.Schema) -> tuple[bytes, bytes]:
    """An embedded and a compact frame of ``schema``, as a peer process sends them: this
    process holds no schema for having encoded them (writing a compact frame needs its schema
    held, so it is held as learnt meanwhile, and every learnt schema let go after)."""
    batch: dict[str, Any] = {"r": torch.tensor([1.0, 2.0])}
    with _unheld():
        embedded = bytes(memoryview(py_wire.encode(batch, schema)))
        _native.hold_schema(json.dumps(schema.model_dump()), True)
        compact = bytes(memoryview(py_wire.encode(batch, schema, compact=True)))
    _native.set_learnt_schema_budget(_native.set_learnt_schema_budget(0))
    assert _native.held_schema(schema.fingerprint) is None
    return embedded, compact


def _peer_embedded_frame(schema: py_wire.Schema) -> bytes:
    with _unheld():
        return bytes(memoryview(py_wire.encode({"r": torch.tensor([1.0, 2.0])}, schema)))


@pytest.fixture
def small_budget() -> Iterator[int]:
    # Each schema of 256 KB costs about 1 MB: its checked text, its entry (specs and text) and
    # its typed views, charged by their measured size.
    budget = 4 << 20
    previous = _native.set_learnt_schema_budget(budget)
    try:
        yield budget
    finally:
        _native.set_learnt_schema_budget(previous)


def test_learnt_schemas_stay_within_a_byte_budget_least_recently_used_out(
    small_budget: int,
) -> None:
    schemas = [_peer_schema(i, 256 << 10) for i in range(24)]
    frames = [_peer_frames(s) for s in schemas]
    for i, (embedded, _) in enumerate(frames):
        py_wire.decode(embedded)  # learnt from the frame
        # Schema 0's compact frames keep arriving: it is never the least recently used.
        assert py_wire.decode(frames[0][1])["r"].tolist() == [1.0, 2.0], i
        count, kept, budget = _native.learnt_schemas()
        assert kept <= budget == small_budget
    assert count < len(schemas)
    with pytest.raises(py_wire.FrameError, match=schemas[1].fingerprint):
        py_wire.decode(frames[1][1])
    assert py_wire.decode(frames[-1][1])["r"].tolist() == [1.0, 2.0]
    # Received again, a schema let go is learnt again.
    py_wire.decode(frames[1][0])
    assert py_wire.decode(frames[1][1])["r"].tolist() == [1.0, 2.0]
    # The typed views are charged to the same budget: those of schemas let go are dropped.
    count, kept, budget = _native.learnt_schemas()
    assert kept <= budget
    # Counted among this test's schemas only: other tests in the same process keep views too.
    ours = {s.fingerprint for s in schemas}
    views_kept = [key for key in list(view_cache._VIEWS._views) if key[0] in ours]
    assert len(views_kept) < 2 * len(schemas) - 4


def test_a_schema_view_is_served_only_while_the_codec_holds_its_schema() -> None:
    schema = _peer_schema(200, 64)
    frame = py_wire.Frame.from_buffer(_peer_embedded_frame(schema))
    learnt = py_wire.Schema.from_frame(frame)
    assert py_wire.Schema.from_frame(frame) is learnt  # held: its view is kept
    previous = _native.set_learnt_schema_budget(0)  # the codec lets go of every learnt schema
    try:
        assert _native.held_schema(schema.fingerprint) is None
        again = py_wire.Schema.from_frame(frame)
        # Python kept no view of its own of a schema the codec let go of.
        assert again is not learnt
        assert again.fingerprint == learnt.fingerprint == schema.fingerprint
        assert _native.held_schema(schema.fingerprint) is None
    finally:
        _native.set_learnt_schema_budget(previous)
    assert py_wire.Schema.from_frame(frame) is not learnt  # learnt again, viewed afresh


def test_a_learnt_schema_loaded_later_stays_when_learnt_ones_are_let_go() -> None:
    schema = _peer_schema(201, 64)
    learnt = py_wire.Schema.from_frame(py_wire.Frame.from_buffer(_peer_embedded_frame(schema)))
    py_wire.load_schema(learnt)  # the registry marks it loaded
    previous = _native.set_learnt_schema_budget(0)
    try:
        assert _native.held_schema(schema.fingerprint) is not None
    finally:
        _native.set_learnt_schema_budget(previous)


def test_a_loaded_schema_is_never_let_go(small_budget: int) -> None:
    loaded = _peer_schema(0, 1_000_000)
    _, compact = _peer_frames(loaded)
    py_wire.load_schema(loaded)
    for i in range(1, 12):
        py_wire.decode(_peer_embedded_frame(_peer_schema(i, 256 << 10)))
    assert py_wire.decode(compact)["r"].tolist() == [1.0, 2.0]


def test_the_default_budget_counts_what_received_schemas_keep() -> None:
    # At the default budget (64 MiB): each received schema of 1 MB counts what it keeps, so at
    # most about 20 of the largest a frame embeds are kept (1,024 of them kept 1.5 GiB before).
    # Letting go past the default budget is tested in the codec
    # (compact::tests::learnt_schemas_past_the_default_budget_are_let_go_oldest_first): 65
    # schemas of 1 MB through Python take 25 s here.
    count, kept, budget = _native.learnt_schemas()
    assert budget == 64 << 20
    schemas = [_peer_schema(100 + i, 1_000_000) for i in range(3)]
    for schema in schemas:
        py_wire.decode(_peer_embedded_frame(schema))
        assert _native.held_schema(schema.fingerprint) is not None
    now_count, now_kept, _ = _native.learnt_schemas()
    assert now_count == count + 6  # each: the schema learnt, and its text as checked
    # Each is charged what it keeps: its checked text, its held text and its typed view (the
    # description once more), at least.
    assert now_kept - kept >= 3 * 3_000_000


def test_the_budget_variable_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.LEARNT_SCHEMA_BYTES_ENV, "lots")
    with pytest.raises(py_wire.WireError, match="PY_WIRE_LEARNT_SCHEMA_BYTES='lots'"):
        registry._learnt_budget_from_env()
    monkeypatch.setenv(registry.LEARNT_SCHEMA_BYTES_ENV, str(3 << 20))
    previous = _native.learnt_schemas()[2]
    try:
        registry._learnt_budget_from_env()
        assert _native.learnt_schemas()[2] == 3 << 20
    finally:
        _native.set_learnt_schema_budget(previous)


def _packed_peer_schema() -> py_wire.Schema:
    return py_wire.Schema.from_dict(
        {
            "name": "learnt_held_frame",
            "fields": {
                "r": {"tier": "scalar", "dtype": "float32"},
                "img": {"tier": "packed", "dtype": "float32", "shape": ["*", 2]},
            },
        }
    )


@pytest.mark.parametrize("read_schema", [True, False], ids=["schema-read", "schema-unread"])
def test_a_held_compact_frame_decodes_after_its_learnt_schema_is_let_go(read_schema: bool) -> None:
    schema = _packed_peer_schema()
    batch: dict[str, Any] = {
        "r": torch.tensor([1.0, 2.0]),
        "img": [torch.ones(2, 2), None],
    }
    with _unheld():
        embedded = bytes(memoryview(py_wire.encode(batch, schema)))
        _native.hold_schema(json.dumps(schema.model_dump()), True)
        compact = bytes(memoryview(py_wire.encode(batch, schema, compact=True)))
    _native.set_learnt_schema_budget(_native.set_learnt_schema_budget(0))
    py_wire.decode(embedded)  # learnt from a peer's embedded frame
    frame = py_wire.Frame.from_buffer(compact)  # read-only bytes: decode copies the frame
    if read_schema:
        assert frame.schema.fingerprint == schema.fingerprint
    # Other traffic lets the learnt schema go.
    _native.set_learnt_schema_budget(_native.set_learnt_schema_budget(0))
    assert _native.held_schema(schema.fingerprint) is None
    for writable in ("auto", "copy", "view"):
        out = py_wire.decode(frame, writable=writable)
        assert out["r"].tolist() == [1.0, 2.0], writable
        assert out["img"][0][0].tolist() == [[1.0, 1.0], [1.0, 1.0]]
        assert out["img"][1] is None
    assert frame.schema.fingerprint == schema.fingerprint
    picked = py_wire.take_rows(frame, [1, 0])
    assert py_wire.decode(picked)["r"].tolist() == [2.0, 1.0]
    assert [py_wire.decode(f)["r"].tolist() for f in py_wire.split(frame, [1, 1])] == [[1.0], [2.0]]
    py_wire.check_contracts(frame)
    # A frame that is not held is still refused, naming the fingerprint.
    with pytest.raises(py_wire.FrameError, match=schema.fingerprint):
        py_wire.Frame.from_buffer(compact)
