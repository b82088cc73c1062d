"""The schema keys only adapters act on: ``gather`` (the per-row keys verl's reward functions
add, gathered into one JSON field: ``py_wire.interop.verl``) and ``column`` (which stored
column a field travels in: ``py_wire.interop.transfer_queue``)."""

from __future__ import annotations

from py_wire._schema.views import Schema


def gathering_field(schema: Schema) -> tuple[str, tuple[str, ...]] | None:
    """The field that gathers undeclared per-row keys, and its patterns (None: none)."""
    for name, field in schema.fields.items():
        if field.gather is not None:
            return name, field.gather
    return None


def column_fields(schema: Schema, column: str) -> list[str]:
    """The fields declared in ``column`` (``"text"`` or ``"media"``), in schema order."""
    return [n for n, f in schema.fields.items() if f.column == column]
