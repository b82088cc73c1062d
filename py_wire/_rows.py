"""One rule for every argument that selects rows, and row windows: rows ``[start, stop)`` of a
decoded frame as views.

A ``slice`` is resolved against the row count as Python resolves it, clamped to the rows (its
parts must be ints or ``None``; step 0 is an error). A ``range``, like a list of ints, names
rows: each must exist, else :class:`RowIndexError` naming the argument, the row and the row
count (``decode(rows=)``, micro-batch groups and :func:`py_wire.take_rows` alike; a range is
never clamped into fewer rows). Functions that copy rows (:func:`py_wire.take_rows`) take any
order; functions that return views (``decode(rows=)``, micro-batch views) take contiguous,
ascending rows only and refuse any other selection with a :class:`WireError` naming the
argument, never an empty batch.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from py_wire._errors import with_context
from py_wire._native import RowIndexError, WireError


def resolve_slice(rows: slice, num_rows: int, argument: str = "rows") -> range:
    """``rows`` resolved against ``num_rows`` rows."""
    parts: list[int | None] = []
    for part in (rows.start, rows.stop, rows.step):
        if part is None:
            parts.append(None)
            continue
        if isinstance(part, bool):
            raise TypeError(f"{argument}: slice bounds must be ints or None, not {part!r}")
        try:
            parts.append(operator.index(part))
        except (TypeError, RuntimeError):  # RuntimeError: a tensor without values (meta)
            raise TypeError(
                f"{argument}: slice bounds must be ints or None, not {type(part).__name__} {part!r}"
            ) from None
    if parts[2] == 0:
        raise WireError(f"{argument}: slice step cannot be zero")
    return range(num_rows)[slice(*parts)]


def row_range(rows: Any, num_rows: int, argument: str = "rows") -> range:
    """A contiguous, ascending row range (step 1) from a ``range`` or ``slice``."""
    if isinstance(rows, slice):
        picked = resolve_slice(rows, num_rows, argument)
    elif isinstance(rows, range):
        # No len(): a range past 2**63 rows has one, but Python cannot return it.
        if not rows:
            picked = range(0)
        else:
            for row in (rows[0], rows[-1]):  # the range's extremes
                if not 0 <= row < num_rows:
                    raise row_index_error(argument, row, num_rows, rows)
            picked = rows
    else:
        raise TypeError(f"{argument} must be a range or a slice, not {type(rows).__name__}")
    if picked.step != 1 and picked and picked[0] != picked[-1]:
        order = "in reverse order" if picked.step < 0 else f"with step {picked.step}"
        raise WireError(
            f"{argument}={rows!r} selects rows {order}; views need ascending, contiguous rows "
            "(take_rows copies rows in any order)"
        )
    start = picked.start if len(picked) else 0
    return range(start, start + len(picked))


def row_index_error(argument: str, row: int, num_rows: int, given: object = None) -> RowIndexError:
    """The one error for a row that is not in the frame (see the module docstring)."""
    shown = "" if given is None else f"={given!r}"
    return with_context(
        RowIndexError(f"{argument}{shown}: row {row} is out of range for {num_rows} rows"),
        row=row,
        expected=num_rows,
        found=row,
    )


class RowWindow:
    """Rows ``[start, stop)`` of a decoded frame: narrows each tier's views without copying."""

    def __init__(self, seq_offsets: torch.Tensor | None, num_rows: int, rows: Any) -> None:
        window = row_range(rows, num_rows)
        self.start = window.start
        self.stop = window.stop
        self.num_rows = len(window)
        self.seq_offsets: torch.Tensor | None = None
        if seq_offsets is not None:
            offsets = seq_offsets[self.start : self.stop + 1]
            self.token_start = int(offsets[0])
            self.token_stop = int(offsets[-1])
            self.seq_offsets = offsets - self.token_start

    def scalar(self, values: torch.Tensor) -> torch.Tensor:
        return values[self.start : self.stop]

    def per_token(self, values: torch.Tensor) -> torch.Tensor:
        return values[self.token_start : self.token_stop]

    def packed(
        self, values: torch.Tensor, tables: dict[str, torch.Tensor], in_order: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], bool]:
        """The window's rows of a packed field. Rows reference global segment ids, so the
        segment tables stay whole; when segments are stored once each in row order, the
        values and segment tables are narrowed to the window's segments too."""
        row_offsets = tables["row_offsets"][self.start : self.stop + 1]
        first, last = int(row_offsets[0]), int(row_offsets[-1])
        rows = {
            **tables,
            "row_offsets": row_offsets - first,
            "row_segments": tables["row_segments"][first:last],
        }
        if not in_order:
            return values, rows, False
        seg_offsets = tables["seg_offsets"][first : last + 1]
        e0, e1 = int(seg_offsets[0]), int(seg_offsets[-1])
        seg_shapes = tables["seg_shapes"][first:last]
        if values.dim() > 1:  # stacked along dim 0: [Σ items, static...]
            i0 = int(tables["seg_shapes"][:first, 0].sum())
            narrowed = values[i0 : i0 + int(seg_shapes[:, 0].sum())]
        else:
            narrowed = values[e0:e1]
        if "seg_ids" in tables:
            rows["seg_ids"] = tables["seg_ids"][first:last]
        rows.update(
            seg_offsets=seg_offsets - e0,
            seg_shapes=seg_shapes,
            row_segments=torch.arange(last - first, dtype=torch.int64),
        )
        return narrowed, rows, True
