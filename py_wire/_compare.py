"""``assert_batch_equal``: what came out of a frame is, bit for bit, what went in, whatever form
each side uses. Needs only torch and numpy (the demo uses it; :mod:`py_wire.testing`, which
needs hypothesis, re-exports it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from py_wire import _tiers as tiers
from py_wire._dtypes import DTYPES
from py_wire._packed import PackedTensor
from py_wire._schema import FieldDef, Schema
from py_wire._typing import as_jagged

__all__ = ["assert_batch_equal"]


def _as_torch(value: Any) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise AssertionError(f"expected a tensor or numpy array, got {type(value).__name__}")
    return value


def _bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view of ``t``'s bits (same shape; complex128 gains a trailing 2)."""
    if t.dtype == torch.complex128:
        return torch.view_as_real(t).view(torch.int64)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(ints[t.dtype.itemsize])


def _fail(where: str, message: str) -> None:
    raise AssertionError(f"{where}: {message}")


def _compare(found: Any, expected: Any, where: str, field: FieldDef) -> None:
    """Bit-exact comparison of one tensor. For a field with a wire cast, ``found`` may hold the
    wire dtype or (``decode(..., source_dtype=True)``) the declared one; ``expected`` is cast
    the same way with torch, and any NaN matches any NaN."""
    found = _as_torch(found)
    expected = _as_torch(expected)
    source, stored = DTYPES[field.dtype], DTYPES[field.stored_dtype]
    if expected.dtype != source:
        _fail(where, f"input dtype {expected.dtype}, but the schema declares {source}")
    cast = stored != source
    if found.dtype == stored:
        expected = expected.to(stored)
    elif cast and found.dtype == source:
        expected = expected.to(stored).to(source)
    else:
        _fail(where, f"decoded dtype {found.dtype}, expected {stored}")
    dtype = found.dtype
    if tuple(found.shape) != tuple(expected.shape):
        _fail(where, f"decoded shape {tuple(found.shape)}, expected {tuple(expected.shape)}")
    a, b = _bits(found), _bits(expected)
    if torch.equal(a, b):
        return
    differ = a != b
    if cast and dtype.is_floating_point:
        differ &= ~(found.isnan() & expected.isnan())
        if not differ.any():
            return
    index = tuple(int(i) for i in differ.nonzero()[0])
    _fail(
        where,
        f"bits differ at index {index}: decoded {a[index].item():#x} ({_show(found, index)}), "
        f"expected {b[index].item():#x} ({_show(expected, index)}); "
        f"{int(differ.sum())} of {differ.numel()} elements differ",
    )


def _show(t: torch.Tensor, index: tuple[int, ...]) -> str:
    try:
        return repr(t[index[: t.dim()]].item())
    except (RuntimeError, TypeError):  # dtypes without a Python scalar
        return str(t.dtype)


def _packed_rows(value: Any, where: str) -> list[list[Any]]:
    """Rows of a packed value in any accepted form, as lists of segments ([] for none)."""
    if isinstance(value, PackedTensor):
        rows = [value[i] for i in range(len(value))]
    elif isinstance(value, list | tuple):
        rows = list(value)
    else:
        raise AssertionError(f"{where}: not a packed value: {type(value).__name__}")
    out: list[list[Any]] = []
    for row in rows:
        if row is None:
            out.append([])
        elif isinstance(row, torch.Tensor | np.ndarray):
            out.append([row])
        elif isinstance(row, list | tuple):
            out.append(list(row))
        else:
            raise AssertionError(f"{where}: a row is a {type(row).__name__}")
    return out


def _lengths_of(batch: Mapping[str, Any], schema: Schema, where: str) -> list[int]:
    for key in (schema.lengths_field, "lengths"):
        if key is not None and batch.get(key) is not None:
            return [int(n) for n in _as_torch(batch[key]).reshape(-1).tolist()]
    raise AssertionError(f"{where}: a padded per-token tensor but no lengths in the batch")


def _token_rows(
    value: Any, batch: Mapping[str, Any], schema: Schema, where: str
) -> tuple[list[Any], torch.Tensor | None]:
    """Rows of a per-token value in any accepted form. For a padded tensor also returns it,
    so the caller can check the padding."""
    if isinstance(value, list | tuple):
        return list(value), None
    if isinstance(value, torch.Tensor) and value.is_nested:
        if value.layout != torch.jagged:
            return list(value.unbind()), None
        values, offsets = value.values(), as_jagged(value).offsets().tolist()
        held = as_jagged(value).lengths()  # None unless rows have holes (narrowed)
        if held is not None:
            ends = [o + int(n) for o, n in zip(offsets, held.tolist(), strict=False)]
        else:
            ends = offsets[1:]
        return [values[offsets[i] : ends[i]] for i in range(len(offsets) - 1)], None
    padded = _as_torch(value)
    lengths = _lengths_of(batch, schema, where)
    if padded.dim() < 2 or padded.shape[0] != len(lengths):
        _fail(where, f"padded tensor of shape {tuple(padded.shape)} for {len(lengths)} lengths")
    return [padded[i, :n] for i, n in enumerate(lengths)], padded


def _check_padding(padded: torch.Tensor, lengths: list[int], field: FieldDef, where: str) -> None:
    pad = torch.full((), field.pad_value, dtype=padded.dtype)
    for row, n in enumerate(lengths):
        tail = padded[row, n:]
        if tail.numel() == 0:
            continue
        expected = pad.expand(tail.shape)
        if not torch.equal(_bits(tail), _bits(expected)):
            _fail(
                f"{where}, row {row}",
                f"padding after position {n} is not the pad value {field.pad_value!r}",
            )


def assert_batch_equal(
    decoded: Mapping[str, Any],
    original: Mapping[str, Any],
    schema: Schema,
    *,
    fields: Iterable[str] | None = None,
) -> None:
    """Assert that ``decoded`` (from ``py_wire.decode``) holds exactly ``original``'s data.

    Comparison is bit-exact (NaN payloads and -0.0 included; fields with a declared wire cast
    compare against the input cast with torch, any NaN matching any NaN), and dtypes and shapes
    must match exactly. Either side may use any form py_wire accepts or returns: packed rows as
    lists (of tensors, ``None``, lists of tensors) or :class:`py_wire.PackedTensor` (a row
    ``None`` and a row ``[]`` both mean "no segments"); fields with an ``encoding`` as lists
    of per-row values, compared with ``==`` and by type; per-token
    fields as lists of rows, jagged nested tensors, or padded ``[B, L, ...]`` tensors with the
    schema's lengths field (decoded padded tensors must be padded with the field's pad value);
    scalars as ``[B, ...]`` tensors; numpy arrays anywhere. Absent and ``None`` fields are the
    same; ``decoded`` may carry the lengths a padded decode adds. ``fields`` limits the check
    to those fields (e.g. ``schema.fields_for(stage)`` after ``decode(..., stage=stage)``);
    ``original`` still supplies the lengths that padded inputs need.

    Raises ``AssertionError`` naming the field, row and segment of the first mismatch.
    """
    present = {k for k, v in original.items() if v is not None}
    if fields is not None:
        present &= set(fields)
    got = {k for k, v in decoded.items() if v is not None}
    if fields is not None:
        got &= set(fields)
    missing = sorted(present - got)
    if missing:
        raise AssertionError(f"fields {missing} are in the batch but were not decoded")
    extra = sorted(got - present - {schema.lengths_field, "lengths"})
    if extra:
        raise AssertionError(f"decoded fields {extra} were not in the batch")
    rows: int | None = None
    for name in schema.fields:
        if name not in present:
            continue
        field = schema.fields[name]
        where = f"field {name!r}"
        if tiers.of(field.tier).items == "rows":
            _compare(decoded[name], original[name], where, field)
            n = _as_torch(decoded[name]).shape[0]
        elif field.encoding is not None:
            want_values, found_values = list(original[name]), list(decoded[name])
            if len(found_values) != len(want_values):
                _fail(where, f"decoded {len(found_values)} rows, expected {len(want_values)}")
            for r, (a, b) in enumerate(zip(found_values, want_values, strict=True)):
                if a != b or type(a) is not type(b):
                    _fail(f"{where}, row {r}", f"decoded {a!r:.80}, expected {b!r:.80}")
            n = len(found_values)
        elif tiers.items(field.tier) == "segments":
            want = _packed_rows(original[name], where)
            found_value = decoded[name]
            found = _packed_rows(found_value, where)
            if len(found) != len(want):
                _fail(where, f"decoded {len(found)} rows, expected {len(want)}")
            counts = [len(r) for r in want]
            if isinstance(found_value, PackedTensor):
                found_counts = found_value.segment_counts()
                if found_counts != counts:
                    row = next(
                        (
                            r
                            for r, (a, b) in enumerate(zip(found_counts, counts, strict=False))
                            if a != b
                        ),
                        min(len(found_counts), len(counts)),
                    )
                    _fail(
                        f"{where}, row {row}",
                        f"segment_counts() is {found_counts}, expected {counts}",
                    )
            for row, (f_row, w_row) in enumerate(zip(found, want, strict=True)):
                if len(f_row) != len(w_row):
                    _fail(
                        f"{where}, row {row}",
                        f"decoded {len(f_row)} segments, expected {len(w_row)}",
                    )
                for seg, (f_seg, w_seg) in enumerate(zip(f_row, w_row, strict=True)):
                    _compare(f_seg, w_seg, f"{where}, row {row}, segment {seg}", field)
            n = len(want)
        else:
            want_rows, _ = _token_rows(original[name], original, schema, where)
            found_rows, padded = _token_rows(decoded[name], decoded, schema, where)
            if len(found_rows) != len(want_rows):
                _fail(where, f"decoded {len(found_rows)} rows, expected {len(want_rows)}")
            for row, (f_row, w_row) in enumerate(zip(found_rows, want_rows, strict=True)):
                _compare(f_row, w_row, f"{where}, row {row}", field)
            if padded is not None:
                _check_padding(padded, _lengths_of(decoded, schema, where), field, where)
            n = len(want_rows)
        if rows is None:
            rows = n
        elif rows != n:
            _fail(where, f"{n} rows, but other fields have {rows}")
    _check_added_lengths(decoded, original, schema, sorted(got - present), present)


def _check_added_lengths(
    decoded: Mapping[str, Any],
    original: Mapping[str, Any],
    schema: Schema,
    added: list[str],
    present: set[str],
) -> None:
    """Lengths a padded decode added must be the sequence lengths, in the declared dtype."""
    seq = schema.sequence_field
    for key in added:
        where = f"field {key!r} (added by the decode)"
        found = _as_torch(decoded[key])
        if key in schema.fields:
            declared = DTYPES[schema.fields[key].dtype]
            if found.dtype != declared:
                _fail(where, f"dtype {found.dtype}, but the schema declares {declared}")
        if seq is not None and seq in present:
            rows, _ = _token_rows(original[seq], original, schema, where)
            want = [int(_as_torch(r).shape[0]) for r in rows]
            if found.reshape(-1).tolist() != want:
                _fail(where, f"lengths {found.tolist()}, expected {want}")
