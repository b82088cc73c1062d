"""Schemas: one TOML file per batch kind, read by the codec's schema model.

A schema declares every field's tier, dtype, segment shape, stages and optional wire cast; the
frame carries the schema as canonical JSON, so a reader always knows what it holds. The codec's
schema model (``rust_codec/src/schema/``) reads the data: every key's type and default, every
rule (what a stage needs included), the canonical form and the fingerprint; it also gates every
schema text and Python data before anything parses them, and holds the registry of schemas this
process holds (``frame::compact``). Python's side, one job a module:

- ``constants``: what the codec declares (metadata keys, defaults, limits, wire casts; the
  views read the dtype names from ``py_wire._dtypes`` and the tier names from
  ``py_wire._tiers.names``, so that a new tier touches ``py_wire/_tiers/`` alone);
- ``text``: TOML and JSON text, and Python data, through the codec's gates;
- ``views``: ``Schema``, ``FieldDef``, ``PlaceholderContract``, frozen pydantic views of what
  the model returns; ``stage_needs``: what a stage needs, read from the model's plan;
  ``codecs``: the codecs a view compiles, cached;
- ``view_cache``: the one cache of typed views, charged to the codec's schema memory budget;
  ``registry``: pins in the codec's registry, the learnt-schema budget, a frame's fingerprint;
- ``files``: bundled schemas, ``.toml`` files with ``extends``, ``load_schema``;
  ``json_schema``: the JSON Schema of a schema file; ``adapter_keys``: the keys only adapters
  act on (``gather``, ``column``).

This package re-exports the names the rest of py_wire uses.
"""

from py_wire._schema.adapter_keys import column_fields, gathering_field
from py_wire._schema.constants import (
    DEFAULT_STAGES,
    FINGERPRINT_KEY,
    KEY_DEFAULTS,
    LOSSLESS_WIDENINGS,
    MAX_DECLARED_ITEMS,
    MAX_NESTING,
    MAX_SCHEMA_BYTES,
    SCHEMA_KEY,
    SCHEMA_REF_KEY,
    WIRE_CASTS,
    Dim,
)
from py_wire._schema.files import (
    MAX_EXTENDS_DEPTH,
    bundled_schemas,
    hold_schema,
    load_schema,
    read_schema_file,
    schema_from_file,
)
from py_wire._schema.json_schema import schema_file_json_schema
from py_wire._schema.registry import LEARNT_SCHEMA_BYTES_ENV, frame_fingerprint
from py_wire._schema.views import Contract, FieldDef, PlaceholderContract, Schema

__all__ = [
    "DEFAULT_STAGES",
    "FINGERPRINT_KEY",
    "KEY_DEFAULTS",
    "LEARNT_SCHEMA_BYTES_ENV",
    "LOSSLESS_WIDENINGS",
    "MAX_DECLARED_ITEMS",
    "MAX_EXTENDS_DEPTH",
    "MAX_NESTING",
    "MAX_SCHEMA_BYTES",
    "SCHEMA_KEY",
    "SCHEMA_REF_KEY",
    "WIRE_CASTS",
    "Contract",
    "Dim",
    "FieldDef",
    "PlaceholderContract",
    "Schema",
    "bundled_schemas",
    "column_fields",
    "frame_fingerprint",
    "gathering_field",
    "hold_schema",
    "load_schema",
    "read_schema_file",
    "schema_file_json_schema",
    "schema_from_file",
]
