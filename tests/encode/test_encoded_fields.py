"""Fields with an ``encoding`` through the core ``encode`` and ``decode``: one Python value a row
(``utf8``: a str or None; ``json``: a JSON value), stored as UTF-8 bytes, equal values once."""

from __future__ import annotations

import pytest
import torch

import py_wire
from py_wire._rowvalues import encode_rows

SCHEMA = py_wire.Schema.from_dict(
    {
        "name": "encoded",
        "fields": {
            "score": {"tier": "scalar", "dtype": "float32", "shape": []},
            "uid": {"tier": "packed", "dtype": "uint8", "shape": ["*"], "encoding": "utf8"},
            "info": {
                "tier": "packed",
                "dtype": "uint8",
                "shape": ["*"],
                "encoding": "json",
                "required": False,
            },
        },
    }
)

UIDS = ["group-0", "group-0", None, "gruppe-ü", ""]
INFO = [{"acc": 1.0, "pred": "4"}, None, [1, "x", None], {"acc": 1.0, "pred": "4"}, 7]


def frame() -> py_wire.Frame:
    return py_wire.encode({"score": torch.arange(5.0), "uid": UIDS, "info": INFO}, SCHEMA)


@pytest.mark.parametrize("layout", [None, "list", "padded"])
def test_values_come_back_as_written_in_every_layout(layout: str | None) -> None:
    out = py_wire.decode(frame(), layout=layout)
    assert out["uid"] == UIDS and out["info"] == INFO
    assert all(type(a) is type(b) for a, b in zip(out["uid"], UIDS, strict=True))


def test_equal_values_are_stored_once_and_shared_after_decode() -> None:
    f = frame()
    layout = {d.name: d for d in f.layout.fields}
    assert (layout["uid"].num_segments, layout["uid"].num_refs) == (3, 4)  # None: no segment
    assert (layout["info"].num_segments, layout["info"].num_refs) == (4, 5)
    out = py_wire.decode(f)
    assert out["info"][0] is out["info"][3]


def test_rows_of_one_object_and_fresh_objects_each_keep_their_own_value() -> None:
    """A record repeated over rows (one object) is written once; values an iterator makes
    afresh per row (a numpy array's scalars, freed as the next is made) keep their own."""
    import numpy as np

    record = {"rows": 2, "fields": {"sample_id": "s0"}}
    scores = np.array([3, 1, 4, 1, 5], dtype=np.int64)
    for info in ([record] * 5, scores, np.array([record, {"x": 1}] * 2 + [7], dtype=object)):
        batch = {"score": torch.arange(5.0), "uid": UIDS, "info": info}
        got = py_wire.decode(py_wire.encode(batch, SCHEMA))["info"]
        assert got == [v.item() if isinstance(v, np.generic) else v for v in info]
    # The rows as they reach the field's writer: the numpy array itself, iterated once.
    rows = encode_rows("info", scores, "json")
    assert [bytes(r[0].numpy()).decode() for r in rows.rows()] == ["3", "1", "4", "1", "5"]


def test_rows_windows_and_frame_operations_keep_the_values() -> None:
    f = frame()
    assert py_wire.decode(f, rows=range(1, 4))["uid"] == UIDS[1:4]
    assert py_wire.decode(py_wire.take_rows(f, [4, 0]))["info"] == [INFO[4], INFO[0]]
    both = py_wire.decode(py_wire.concat([f, f]))
    assert both["uid"] == UIDS + UIDS


def test_an_absent_optional_field_stays_absent() -> None:
    f = py_wire.encode({"score": torch.zeros(2), "uid": ["a", "b"]}, SCHEMA)
    assert "info" not in py_wire.decode(f)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("uid", ["a", torch.zeros(2, dtype=torch.uint8)], r"'uid', row 1: holds Tensor, not str"),
        ("uid", ["a", 3], r"'uid', row 1: holds int, not str"),
        ("info", [(1, 2), None], r"'info', row 0: .*would not come back equal"),
        ("info", [float("nan"), None], r"'info', row 0: not a JSON value"),
    ],
)
def test_values_that_would_not_come_back_are_refused_by_field_and_row(
    field: str, value: list, match: str
) -> None:
    batch = {"score": torch.zeros(2), "uid": ["a", "b"], field: value}
    with pytest.raises(py_wire.BatchError, match=match) as e:
        py_wire.encode(batch, SCHEMA)
    assert (e.value.field, e.value.row) == (field, int(match.split("row ")[1][0]))
