"""A schema's source text read into data: TOML (a schema file) and JSON (``Schema.from_json``),
each through the codec's gate first (``_native.check_schema_source``: its size and nesting,
before any parser recurses into it), and Python data handed to the codec's schema model
through its other gate (``_native.schema_data``). Python checks none of it itself."""

from __future__ import annotations

import json
import tomllib
from typing import Any

from pydantic import BaseModel

from py_wire import _native
from py_wire._native import SchemaError


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """TOML text as data (``SchemaError`` naming ``source``)."""
    _native.check_schema_source(text, "toml", source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SchemaError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:  # unreachable past the nesting gate; never let it escape
        raise SchemaError(f"{source}: nested too deeply") from None


def parse_json(text: str, source: str) -> Any:
    """JSON text as data (``SchemaError`` naming ``source``)."""
    _native.check_schema_source(text, "json", source)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, int digit limits
        raise SchemaError(f"{source}: not valid JSON: {e}") from None


def _dump(value: object) -> dict[str, Any] | None:
    """A model's data (a ``FieldDef`` inside a schema's ``fields``), for the codec's gate."""
    return value.model_dump() if isinstance(value, BaseModel) else None


def data_json(value: Any) -> str:
    """Python data as the JSON text the codec's schema model reads (the gate:
    ``rust_codec/src/python/schema_data.rs``)."""
    text: str = _native.schema_data(value, _dump)
    return text
