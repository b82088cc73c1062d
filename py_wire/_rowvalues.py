"""Per-row Python values in encoded fields (a field's ``encoding = "utf8" | "json"``): one
packed ``uint8`` segment per row holding the value's UTF-8 text, so that ids, tags and dicts
(verl's ``uid``, ``data_source``, ``reward_model``, ...) travel inside the frame instead of in
side-channel pickles. Rows holding equal values share one stored segment (a GRPO group's
``uid`` is stored once). A value that would not come back equal (a tuple, NaN, a set, a
numpy array) is refused with the field and row named, never converted silently."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from py_wire._errors import with_context
from py_wire._native import BatchError
from py_wire._packed import PackedTensor

Encoding = Literal["utf8", "json"]


def _share(rows: Sequence[Any], key: Any) -> tuple[list[Any], list[int], list[int]]:
    """One entry (or none, for ``None``) per row; rows whose ``key`` is equal share one:
    ``(distinct values, row offsets, row references)``."""
    distinct: list[Any] = []
    seen: dict[Any, int] = {}
    offsets, refs = [0], []
    for row in rows:
        if row is not None:
            k = key(row)
            if k not in seen:
                seen[k] = len(distinct)
                distinct.append(row)
            refs.append(seen[k])
        offsets.append(len(refs))
    return distinct, offsets, refs


def shared_rows(rows: Sequence[Any], key: Any) -> PackedTensor:
    """One segment (or none, for ``None``) per row; rows whose ``key`` is equal share one."""
    return PackedTensor.from_csr(*_share(rows, key))


def _plain(value: Any) -> Any:
    """numpy scalars as the Python numbers they hold (verl's ``index`` column is often
    ``np.int64``); anything else ``json`` cannot write is refused by the caller."""
    if isinstance(value, np.generic) and not isinstance(value, np.void):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def json_text(value: Any) -> str:
    """``value`` as compact JSON, or a ``ValueError`` saying why it would not come back equal
    (a tuple, a non-str key, NaN, a set): the one rule for per-row JSON values and for
    metadata such as verl's ``meta_info``."""
    try:
        text = json.dumps(
            value, default=_plain, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
        same = json.loads(text) == value
    except (TypeError, ValueError, RecursionError) as e:
        raise ValueError(f"not a JSON value ({e})") from None
    if not same:
        raise ValueError(
            f"{value!r} would not come back equal from JSON (tuples become lists, dict keys "
            "become strings): store lists and str keys"
        )
    return text


def _text(name: str, row: int, value: Any, encoding: Encoding) -> str:
    if encoding == "utf8":
        if not isinstance(value, str):
            raise with_context(
                BatchError(f"field {name!r}, row {row}: holds {type(value).__name__}, not str"),
                field=name,
                row=row,
                kind="dtype",
            )
        return value
    try:
        return json_text(value)
    except ValueError as e:
        raise with_context(
            BatchError(f"field {name!r}, row {row}: {e}"), field=name, row=row, kind="dtype"
        ) from None


def encode_rows(name: str, values: Sequence[Any], encoding: Encoding) -> PackedTensor:
    """One segment of UTF-8 bytes per row (``utf8``: ``None`` is a row with no segment;
    ``json``: ``None`` is JSON ``null``); equal texts share a segment."""
    texts: list[str | None] = []
    # Rows holding the same object (a sample's record repeated over its rows, a string numpy
    # repeats) have one text: checked and written once. Each value is held in ``seen`` for
    # the loop (an iterator may make fresh objects), so an id is never reused within it.
    seen: dict[int, tuple[Any, str]] = {}
    for row, value in enumerate(values):
        if value is None and encoding == "utf8":
            texts.append(None)
            continue
        hit = seen.get(id(value))
        if hit is None:
            hit = seen[id(value)] = (value, _text(name, row, value, encoding))
        texts.append(hit[1])
    distinct, offsets, refs = _share(texts, lambda t: t)
    segments = [torch.from_numpy(np.frombuffer(bytearray(t.encode()), np.uint8)) for t in distinct]
    return PackedTensor.from_csr(segments, offsets, refs)


def decode_rows(name: str, value: PackedTensor, encoding: Encoding) -> list[Any]:
    """The rows of a decoded field as Python values (``utf8``: ``str``, ``None`` for a row
    without a segment; ``json``: the JSON value); rows that share a segment share one object.
    A row of two segments, text that is not UTF-8, or (``json``) not JSON is a
    :class:`BatchError` naming the field and row (the frame is valid; its rows are not what
    the encoding says)."""
    csr = value._csr()
    if csr is None:  # not frame-backed: its rows' own tensors
        rows: list[Any] = [r[0] if r else None for r in _one_each(name, value.rows())]
        return _parsed(name, rows, lambda seg: (seg.data_ptr(), seg.numel()), encoding)
    # A frame's tables, read once: each row's one segment, parsed once per segment.
    flat, _, seg_offsets, row_offsets, row_segments = csr
    data = flat.numpy()
    bounds = seg_offsets.tolist()
    refs = row_segments.tolist()
    offsets = row_offsets.tolist()
    counts = [b - a for a, b in itertools.pairwise(offsets)]
    _one_each(name, counts)
    segs = [refs[a] if n else None for a, n in zip(offsets, counts, strict=False)]
    texts = {s: data[bounds[s] : bounds[s + 1]].tobytes() for s in set(segs) if s is not None}
    return _parsed(name, segs, lambda seg: seg, encoding, texts.__getitem__)


def _one_each(name: str, rows: Any) -> Any:
    """``rows`` (each a row's segments, or their count), refused when a row holds two."""
    for i, row in enumerate(rows):
        n = row if isinstance(row, int) else len(row or ())
        if n > 1:
            raise with_context(
                BatchError(f"field {name!r}, row {i}: {n} values where a row holds one"),
                field=name,
                row=i,
            )
    return rows


def _parsed(
    name: str,
    segs: list[Any],
    key: Any,
    encoding: Encoding,
    text: Any = lambda seg: bytes(seg.numpy()),
) -> list[Any]:
    """Each row's value from its segment (None: a row without one), parsed once per ``key``."""
    out: list[Any] = [None] * len(segs)
    cache: dict[Any, Any] = {}
    for i, seg in enumerate(segs):
        if seg is None:
            continue
        k = key(seg)  # an empty segment shares its neighbour's ptr: the count is in the key
        if k not in cache:
            cache[k] = _parse(name, i, text(seg), encoding)
        out[i] = cache[k]
    return out


def _parse(name: str, row: int, data: bytes, encoding: Encoding) -> Any:
    try:
        text = data.decode()
        return text if encoding == "utf8" else json.loads(text)
    except UnicodeDecodeError as e:
        problem = f"not UTF-8 ({e.reason} at byte {e.start})"
    except ValueError as e:  # json.JSONDecodeError, or a nesting json cannot hold
        problem = f"not JSON ({e})"
    except RecursionError:
        problem = "JSON nested deeper than Python's recursion limit"
    raise with_context(BatchError(f"field {name!r}, row {row}: {problem}"), field=name, row=row)
