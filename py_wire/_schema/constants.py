"""What the codec declares of schemas, read from it once: the ``__metadata__`` keys that name a
schema, every key's default, the limits, and the casts it implements. Python holds none of
these of its own. (The dtype names are ``py_wire._dtypes``'s, the tier names
``py_wire._tiers.names``'.)"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from py_wire import _native
from py_wire._dtypes import DTypeName
from py_wire._native import SchemaError

#: ``__metadata__`` keys, declared once in the codec (rust_codec/src/schema/spec.rs, ``meta``).
SCHEMA_KEY = _native.METADATA_KEYS["schema"]
FINGERPRINT_KEY = _native.METADATA_KEYS["fingerprint"]
#: A compact frame's only schema entry: the fingerprint of a schema its reader holds.
SCHEMA_REF_KEY = _native.METADATA_KEYS["schema_ref"]

#: A declared dim: a size, or ``"*"`` for a ragged one.
Dim = int | Literal["*"]

#: What the codec's schema model (``rust_codec/src/schema/model.rs``, the one reader of a
#: schema's content) fills in for each key a schema leaves out, per kind (``"schema"``,
#: ``"field"``, ``"contract"``). Read from the codec: Python holds no default of its own.
KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    kind: {key: json.loads(value) for key, value in table.items()}
    for kind, table in _native.SCHEMA_DEFAULTS.items()
}
#: The most items a declared list (a shape, stages, accepted dtypes, contracts) or table of
#: fields may hold (the codec's constant).
MAX_DECLARED_ITEMS: int = _native.MAX_DECLARED_ITEMS

#: Input dtype → the dtypes it converts into exactly (every value representable, no rounding):
#: what a field's ``accept`` may list. The table is the codec's (``cast.rs``
#: ``widens_exactly``), which also decides whether a wire cast is lossy.
LOSSLESS_WIDENINGS: dict[str, frozenset[str]] = {
    src: frozenset(into) for src, into in _native.LOSSLESS_WIDENINGS.items()
}

DEFAULT_STAGES: tuple[str, ...] = tuple(KEY_DEFAULTS["schema"]["stages"])
#: The largest schema file, or schema string in a frame, that is parsed at all (the codec's
#: constant: its gates check a schema's text against it, ``schema::text::check_source``).
MAX_SCHEMA_BYTES: int = _native.MAX_SCHEMA_BYTES
#: The deepest nesting of arrays and tables a schema file or a frame's schema JSON may have
#: (a real schema needs 3); the codec checks it before any parser reads the text.
MAX_NESTING: int = _native.MAX_NESTING


def _wire_casts() -> dict[tuple[str, str], bool]:
    """The codec's wire-cast table, read from the codec: (source, wire) → lossy."""
    out = {}
    for src in get_args(DTypeName):
        for wire in get_args(DTypeName):
            if src == wire:
                continue
            decl = {"name": "x", "tier": "scalar", "dtype": src, "wire_dtype": wire, "shape": []}
            try:
                _native.validate_field_spec(json.dumps({**decl, "lossy": True}))
            except SchemaError:
                continue
            try:
                _native.validate_field_spec(json.dumps(decl))
                out[(src, wire)] = False
            except SchemaError:
                out[(src, wire)] = True
    return out


#: (source, wire) casts the codec implements, and whether each must be declared lossy.
WIRE_CASTS: dict[tuple[str, str], bool] = _wire_casts()
