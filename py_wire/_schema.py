"""Schema files: one TOML file per batch kind, read by the codec's schema model.

A schema declares every field's tier, dtype, segment shape, stages and optional wire cast; the
frame carries the schema as canonical JSON, so a reader always knows what it holds. This module
reads TOML, resolves ``extends`` and finds bundled schemas; the codec's schema model
(``rust_codec/src/schema/model.rs``) reads the data: every key's type and default, every rule,
the canonical form and the fingerprint. ``Schema``, ``FieldDef`` and ``PlaceholderContract`` are
frozen pydantic views of what it returns. The codec also holds the registry of schemas this
process holds (``frame::compact``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
import tomllib
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from py_wire import _native
from py_wire._evolution import SchemaDiff
from py_wire._evolution import diff as schema_diff
from py_wire._native import FrameError, SchemaError, WireError

if TYPE_CHECKING:
    from py_wire._native import Frame

#: ``__metadata__`` keys, declared once in the codec (rust_codec/src/spec.rs, ``meta``).
SCHEMA_KEY = _native.METADATA_KEYS["schema"]
FINGERPRINT_KEY = _native.METADATA_KEYS["fingerprint"]
#: A compact frame's only schema entry: the fingerprint of a schema its reader holds.
SCHEMA_REF_KEY = _native.METADATA_KEYS["schema_ref"]

#: dtype names a schema may use (torch's names).
DTypeName = Literal[
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "complex64",
    "complex128",
]
Tier = Literal["packed", "per_token", "scalar"]
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
#: constant: its reader checks a frame's schema against it, ``schema::embedded``).
MAX_SCHEMA_BYTES: int = _native.MAX_SCHEMA_BYTES
#: The deepest nesting of arrays and tables a schema file or a frame's schema JSON may have
#: (a real schema needs 3); checked before parsing, so no parser recurses on hostile input.
MAX_NESTING: int = _native.MAX_NESTING

_SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

_FROZEN = ConfigDict(extra="forbid", frozen=True)
#: The validation context of a whole schema (``Schema._validate``): its ``_read`` has the codec
#: read every field and contract with it, so theirs do not read them again.
_RESOLVED: dict[str, bool] = {"resolved": True}


def _plain(value: Any, at: str, depth: int = 0) -> Any:
    """``value`` as the JSON data the codec's schema model reads: dicts with string keys,
    lists, strings, numbers, bools and None (models as their dumps). Anything else, or data
    nested deeper than :data:`MAX_NESTING` or wider than :data:`MAX_DECLARED_ITEMS`, is a
    ``SchemaError`` naming where, before any of it is copied (``range(2**62)`` is refused, not
    listed)."""
    where = at or "the schema"
    if depth > MAX_NESTING:
        raise SchemaError(f"{where}: nested deeper than {MAX_NESTING} levels")
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if value.bit_length() > 256:  # past any range a schema has; json.dumps has digit limits
            raise SchemaError(f"{where}: an integer of {value.bit_length()} bits is out of range")
        return value
    if isinstance(value, dict):
        if len(value) > MAX_DECLARED_ITEMS:
            raise SchemaError(f"{where}: {len(value)} entries; at most {MAX_DECLARED_ITEMS}")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SchemaError(
                    f"{where}: keys are strings, not {type(key).__name__} {key!r:.80}"
                )
            out[key] = _plain(item, f"{at}.{key}" if at else key, depth + 1)
        return out
    if isinstance(value, list | tuple):
        if len(value) > MAX_DECLARED_ITEMS:
            raise SchemaError(f"{where}: {len(value)} items; at most {MAX_DECLARED_ITEMS}")
        return [
            _plain(item, f"{at}.{i}" if at else str(i), depth + 1) for i, item in enumerate(value)
        ]
    raise SchemaError(
        f"{where}: must be a table, list, string, number, bool or null, not {type(value).__name__}"
    )


def _json_text(value: Any) -> str:
    """The data as JSON text for the codec (NaN and the infinities as Python writes them)."""
    return json.dumps(_plain(value, ""))


class FieldDef(BaseModel):
    """One field of a schema: a typed view of what the codec's schema model reads (every key
    filled in; the defaults and rules are the model's, ``rust_codec/src/schema/model.rs``)."""

    model_config = _FROZEN

    tier: Tier
    dtype: DTypeName
    shape: tuple[Dim, ...] = Field(
        description="packed: the whole segment shape; per_token: the dims after the sequence "
        'dim; scalar: the static dims of one row ([] for 0-d). "*" marks a ragged dim.',
    )
    required: bool
    stages: tuple[str, ...] | None = Field(
        description="Stages that need this field; default: every stage."
    )
    pack_dim: int = Field(
        description="packed only: the dim segments concatenate on (-1: the last)."
    )
    pad_value: bool | int | float = Field(
        description="per_token only: what layout='padded' fills with; must fit dtype."
    )
    wire_dtype: DTypeName | None = Field(description="dtype stored on the wire (a cast at encode).")
    lossy: bool = Field(description="Must be true when wire_dtype narrows.")
    accept: tuple[DTypeName, ...] = Field(
        description="Input dtypes encode also takes, each widened losslessly into dtype "
        '(e.g. accept = ["int32"] on an int64 field). Never implicit for other dtypes.',
    )
    encoding: Literal["utf8", "json"] | None = Field(
        description='packed uint8 ["*"] only: each row is one segment holding a UTF-8 string '
        '("utf8") or a JSON value ("json"), for per-row Python objects (ids, tags, dicts) that '
        "travel beside the tensors; adapters turn them back into str / JSON values.",
    )
    gather: tuple[str, ...] | None = Field(
        description='encoding = "json" only: glob patterns (fnmatch, case-sensitive) of a '
        "source's per-row keys that no other field declares (a verl reward function's "
        "non_tensor_batch keys, such as acc or pred), gathered into this field as one JSON "
        "object per row and spread back by the adapter (py_wire.interop.verl), each key with "
        "its numpy dtype. A key no field declares and no pattern matches is refused.",
    )
    column: Literal["text", "media"] = Field(
        description="Which stored column the field travels in where a batch is kept as columns "
        '(py_wire.interop.transfer_queue): "media" for images, their grids and masks, which a '
        'text-only fetch never moves; "text" (default) for everything else. The sequence field '
        "is in every column.",
    )
    description: str

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        """The codec's schema model reads the field (types, defaults, the field's own rules),
        unless it read it already with its schema (:data:`_RESOLVED`)."""
        if isinstance(data, FieldDef) or info.context is _RESOLVED:
            return data
        return json.loads(_native.resolve_field(_json_text(data)))

    def _decl(self, name: str) -> dict[str, Any]:
        """The field as the codec's rules read it (`spec.rs` `FieldDecl`)."""
        return {
            "name": name,
            "tier": self.tier,
            "dtype": self.dtype,
            "wire_dtype": self.wire_dtype,
            "shape": [None if d == "*" else d for d in self.shape],
            "pack_dim": self.pack_dim,
            "lossy": self.lossy,
        }

    def _resolve(self, name: str) -> dict[str, Any]:
        """The codec's verdict on this field: the spec a frame stores (``SchemaError`` naming
        the field if it breaks a rule)."""
        spec: dict[str, Any] = json.loads(_native.validate_field_spec(json.dumps(self._decl(name))))
        return spec

    @property
    def stored_dtype(self) -> str:
        return self.wire_dtype or self.dtype


class PlaceholderContract(BaseModel):
    """In each row, the runs of ``token_id`` in the sequence field match, image by image, the
    feature counts the media imply. A typed view of what the codec's schema model reads."""

    model_config = _FROZEN

    kind: Literal["placeholder"]
    name: str
    media_field: str = Field(description="The packed field whose items are the images.")
    token_id: int
    begin_token_id: int | None
    end_token_id: int | None
    count: Literal["grid_thw", "fixed", "image_size", "field"]
    grid_field: str | None
    merge_size: int
    tokens_per_image: int | None
    sizes_field: str | None
    count_field: str | None = Field(
        description='count = "field": a packed int field, one token count per image.'
    )
    patch_size: int
    downsample_ratio: float

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        """The codec's schema model reads the contract (types, defaults, its parameters' rules;
        the fields it names are checked with the schema's), unless it read it already with its
        schema (:data:`_RESOLVED`)."""
        if isinstance(data, PlaceholderContract) or info.context is _RESOLVED:
            return data
        return json.loads(_native.resolve_contract(_json_text(data)))


#: The contract kinds; ``kind`` defaults to "placeholder", the only one so far.
Contract = PlaceholderContract


class Schema(BaseModel):
    """A batch kind: its fields, sequence field, stages and contracts. A typed view of what the
    codec's schema model (``rust_codec/src/schema/model.rs``) reads: it fills every default,
    applies every rule and writes the canonical form the fingerprint is taken of."""

    model_config = _FROZEN

    name: str
    version: int
    description: str
    sequence_field: str | None
    lengths_field: str | None = Field(
        description="A scalar integer field equal to each row's sequence length."
    )
    stages: tuple[str, ...]
    fields: dict[str, FieldDef]
    contracts: tuple[Contract, ...]

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        """The codec's schema model reads the schema; the view is built from what it returns."""
        if isinstance(data, Schema):
            return data
        _canonical, _fingerprint, full = _native.resolve_schema(_json_text(data))
        return json.loads(full)

    # -- derived facts (cached: the model is frozen) --------------------------------------

    def field_stages(self, name: str) -> tuple[str, ...]:
        return self.fields[name].stages or self.stages

    def fields_for(self, stage: str) -> list[str]:
        """The fields a stage needs, in schema order."""
        if not isinstance(stage, str):
            raise TypeError(f"stage must be a str or None, not {type(stage).__name__}")
        if stage not in self.stages:
            raise SchemaError(
                f"schema {self.name!r} has no stage {stage!r}; stages: {list(self.stages)}"
            )
        return [n for n in self.fields if stage in self.field_stages(n)]

    def gathering_field(self) -> tuple[str, tuple[str, ...]] | None:
        """The field that gathers undeclared per-row keys, and its patterns (None: none)."""
        for name, field in self.fields.items():
            if field.gather is not None:
                return name, field.gather
        return None

    def column_fields(self, column: str) -> list[str]:
        """The fields declared in ``column`` (``"text"`` or ``"media"``), in schema order."""
        return [n for n, f in self.fields.items() if f.column == column]

    def required_for(self, stage: str | None = None) -> list[str]:
        """The fields ``encode(..., stage=stage)`` demands, in schema order: the ``required``
        fields among :meth:`fields_for` (every required field when ``stage`` is None). An
        optional field is never demanded."""
        names = self.fields_for(stage) if stage is not None else list(self.fields)
        return [n for n in names if self.fields[n].required]

    def unchecked_contracts(self, written: Schema, stage: str | None) -> list[str]:
        """This (the reader's) schema's contracts, as the codec takes them (JSON), that a frame
        written under ``written`` was never checked against: those ``written`` does not
        declare, less those ``stage`` is not held to (a stage that does not carry the
        contract's media field)."""
        carried = None if stage is None else set(self.fields_for(stage))
        return [
            text
            for c, text in zip(self.contracts, self._contracts_json, strict=True)
            if c not in written.contracts and (carried is None or c.media_field in carried)
        ]

    def diff(self, other: Schema) -> SchemaDiff:
        """How ``other`` (usually this schema's next version) differs from this one, and
        whether frames written under either are read under the other (``.compatible``; why
        not: ``.problems``). The rule: :mod:`py_wire._evolution`."""
        return schema_diff(self, other)

    @functools.cached_property
    def _canonical(self) -> tuple[str, str]:
        """The codec's canonical form of this schema, and its fingerprint."""
        canonical, fingerprint, _full = _native.resolve_schema(json.dumps(self.model_dump()))
        return canonical, fingerprint

    @property
    def canonical_json(self) -> str:
        """The schema as frames embed it: the codec's canonical form (every key but a field's
        unset ``encoding`` and ``gather`` and default ``column``, sorted, no whitespace)."""
        return self._canonical[0]

    @property
    def fingerprint(self) -> str:
        """``"sha256:" + hex(sha256(canonical_json))``."""
        return self._canonical[1]

    @functools.cached_property
    def _spec_dicts(self) -> dict[str, dict[str, Any]]:
        """Per field, the layout facts the codec needs (what a frame's field table holds)."""
        return {name: f._resolve(name) for name, f in self.fields.items()}

    @functools.cached_property
    def _specs(self) -> dict[str, str]:
        """The same, as JSON for the codec."""
        return {name: json.dumps(spec) for name, spec in self._spec_dicts.items()}

    @functools.cached_property
    def _contracts_json(self) -> list[str]:
        return [c.model_dump_json() for c in self.contracts]

    def _contracts_for(self, stage: str | None) -> list[str]:
        """The contracts a stage's batch is checked against: all of them, except that a stage
        which does not carry a contract's media field (generation: the engine gets the images
        another way) is not held to it. A stage that carries the field, even as optional, is:
        placeholder tokens without media there is image-blind training."""
        if stage is None:
            return self._contracts_json
        carried = set(self.fields_for(stage))
        return [
            text
            for c, text in zip(self.contracts, self._contracts_json, strict=True)
            if c.media_field in carried
        ]

    def _schema_entries(self, compact: bool = False) -> dict[str, str]:
        """The header entries that name this schema: embedded (its canonical JSON and
        fingerprint) or compact (the fingerprint alone, under ``py_wire.schema_ref``)."""
        if compact:
            return {SCHEMA_REF_KEY: self.fingerprint}
        return {SCHEMA_KEY: self.canonical_json, FINGERPRINT_KEY: self.fingerprint}

    def _codec_for(
        self,
        stage: str | None,
        metadata: Mapping[str, str] | None = None,
        compact: bool = False,
    ) -> _native.Codec:
        """The schema compiled for the codec, once per stage and header form: it owns every
        field and contract rule (a stage's codec holds the contracts that stage is checked
        against). With ``metadata`` (the caller's, checked by ``_args.frame_metadata``), a
        codec that also writes those entries, built for this call. ``compact``: frames that
        name the schema by fingerprint only (the schema is held, so they can be read back)."""
        if stage is not None and not isinstance(stage, str):
            raise TypeError(f"stage must be a str or None, not {type(stage).__name__}")
        if compact:
            hold_schema(self)
        if metadata:
            return _native.Codec(
                list(self._specs.values()),
                self._contracts_for(stage),
                self.sequence_field,
                self.lengths_field,
                {**metadata, **self._schema_entries(compact)},
            )
        codec = self._codecs.get((stage, compact))
        if codec is None:
            codec = _native.Codec(
                list(self._specs.values()),
                self._contracts_for(stage),
                self.sequence_field,
                self.lengths_field,
                self._schema_entries(compact),
            )
            self._codecs[(stage, compact)] = codec
            _VIEWS.recharge(self)
        return codec

    @functools.cached_property
    def _codecs(self) -> dict[tuple[str | None, bool], _native.Codec]:
        return {}

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> Schema:
        """A schema from TOML text. ``extends`` needs a file to resolve paths against: load
        such a schema with :func:`load_schema` (a path or a bundled name)."""
        _text_arg(text, source)
        data = _parse_toml(text, source)
        if "extends" in data:
            raise SchemaError(
                f"{source}: extends {data['extends']!r} is resolved when a schema file is "
                f"loaded: use py_wire.load_schema(path)"
            )
        return cls._validate(data, source)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> Schema:
        """Validate a schema given as Python data; errors are :class:`SchemaError`."""
        return cls._validate(data, source)

    @classmethod
    def from_json(cls, text: str, source: str = "<frame>") -> Schema:
        """A schema from its JSON text (a frame's canonical form, or the full form)."""
        _text_arg(text, source)
        _check_size(text, source, SchemaError)
        _check_nesting(text, _JSON_TOKENS, source, SchemaError)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, int digit limits
            raise SchemaError(f"{source}: not valid JSON: {e}") from None
        return cls._validate(data, source)

    @classmethod
    def from_frame(cls, frame: Frame) -> Schema:
        """The schema a frame carries. The codec checked it when the frame was wrapped (its
        size, fingerprint, nesting and canonical form, before the text was parsed, and the
        tensors against the field table it derives from it); every failure is a
        ``FrameError``. A compact frame (``py_wire.schema_ref``) gives the schema this process
        holds under its fingerprint (``FrameError`` naming the fingerprint when it holds none).
        A schema read from an embedded frame is held from then on, within the bounds on schemas
        learnt from frames (least recently received let go first), so that later compact
        frames of it can be read."""
        fingerprint, text = frame.schema_source  # one call: what the codec validated
        if fingerprint is None:
            raise FrameError("the frame carries no schema")
        if text is None:  # compact: the schema named by fingerprint, as the codec holds it
            view = _VIEWS.get(fingerprint, held=True)
            if view is not None:
                return view
            held = _native.held_schema(fingerprint)
            if held is None and frame._held_text is not None:
                # Let go since the frame was read: the frame keeps the schema it was read under.
                return Schema._validate(json.loads(frame._held_text), "a held schema")
            if held is None:
                raise FrameError(
                    f"the frame is compact: it names its schema by fingerprint "
                    f"{fingerprint[:80]} only, and this process holds no schema with that "
                    "fingerprint (load it with py_wire.load_schema, or pass schema= to decode / "
                    "Frame.from_buffer)"
                )
            view = Schema._validate(json.loads(held), "a held schema")
            _VIEWS.put(fingerprint, True, view)
            return view
        view = _VIEWS.get(fingerprint, held=False)
        if view is None:
            view = _schema_from_frame_text(text, fingerprint)
            if _native.holds_schema(fingerprint) or _native.hold_schema(text, True)[0]:
                # a view is kept only of a schema the codec holds
                _VIEWS.put(fingerprint, False, view)
        return view

    @classmethod
    def _validate(cls, data: Any, source: str) -> Schema:
        try:
            return cls.model_validate(data, context=_RESOLVED)
        except ValidationError as e:
            raise SchemaError(f"{source}: {_problems(e)}") from None
        except RecursionError:  # deeply nested Python data handed to from_dict
            raise SchemaError(f"{source}: nested too deeply") from None


def _text_arg(text: object, source: object) -> None:
    """``from_json`` / ``from_toml``'s arguments: strings (``TypeError`` naming which)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (a schema's text), not {type(text).__name__}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, not {type(source).__name__}")


def _problems(e: ValidationError) -> str:
    out = []
    for err in e.errors(include_url=False):
        msg = err["msg"].removeprefix("Value error, ")
        given = err.get("input")
        if isinstance(given, str | int | float) and err["type"] != "value_error":
            msg = f"{msg}, got {given!r}"[:300]
        where = ".".join(str(p) for p in err["loc"])
        out.append(f"{where}: {msg}" if where else msg)
    return "; ".join(out)


#: Schemas learnt from frames may keep this many bytes in the codec's registry (their JSON and
#: specs; ``frame::compact``), the least recently used let go beyond it.
LEARNT_SCHEMA_BYTES_ENV = "PY_WIRE_LEARNT_SCHEMA_BYTES"


def _learnt_budget_from_env() -> None:
    raw = os.environ.get(LEARNT_SCHEMA_BYTES_ENV)
    if raw is None:
        return
    try:
        budget = int(raw)
    except ValueError:
        budget = -1
    if budget < 0:
        raise WireError(
            f"{LEARNT_SCHEMA_BYTES_ENV}={raw[:80]!r} must be a number of bytes (an int >= 0)"
        )
    _native.set_learnt_schema_budget(budget)


_learnt_budget_from_env()


class _Views:
    """Typed views of the schemas the codec holds (``frame::compact``, the one record of what
    this process holds), by fingerprint. A view is served only while the codec still holds its
    schema (asking it marks the schema used). Each view is charged to its schema's entry in the
    codec's one schema memory budget by its measured size (:func:`_view_bytes`, with the codecs
    it caches), so the codec lets go of the least recently used across its caches and these
    views together, and names the views it let go of (``released_schema_views``), which are
    dropped here. An embedded frame's view (its canonical text) and the held text's view (fields
    in declared order) are kept apart: the two list fields in another order."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, bool], Schema] = {}
        self._lock = threading.Lock()

    def _drop_released(self) -> None:
        released = _native.released_schema_views()
        if released:
            with self._lock:
                for fingerprint in released:
                    for form in (True, False):
                        self._views.pop((fingerprint, form), None)

    def get(self, fingerprint: str, held: bool) -> Schema | None:
        """The view of the schema held under ``fingerprint`` (``held``: of its held text, else
        of an embedded frame's), or None."""
        self._drop_released()
        if not _native.holds_schema(fingerprint):
            with self._lock:
                for form in (True, False):
                    self._views.pop((fingerprint, form), None)
            return None
        with self._lock:
            return self._views.get((fingerprint, held))

    def put(self, fingerprint: str, held: bool, view: Schema) -> None:
        """Keep ``view``, charged to its schema's entry in the codec (not kept when the codec
        does not hold the schema, or lets it go for the view's cost)."""
        if _native.charge_schema_view(fingerprint, held, _view_bytes(view)):
            with self._lock:
                self._views[(fingerprint, held)] = view
        self._drop_released()

    def recharge(self, view: Schema) -> None:
        """``view`` grew (it cached a codec): charge what it costs now, if it is kept here."""
        for held in (True, False):
            key = (view.fingerprint, held)
            kept = self._views.get(key) is view
            if kept and not _native.charge_schema_view(view.fingerprint, held, _view_bytes(view)):
                with self._lock:
                    self._views.pop(key, None)
        self._drop_released()

    def __len__(self) -> int:
        return len(self._views)


#: The one cache of typed schema views.
_VIEWS = _Views()

#: Objects every view shares (not charged to any one).
_SHARED = (type(None), bool, type, type(Ellipsis))


def _view_bytes(view: Schema) -> int:
    """What ``view`` keeps in memory: the sizes (``sys.getsizeof``, which counts the object
    header and the garbage collector's) of every object reachable from it (its fields, their
    values and the facts it cached), each once, and the bytes of each codec it caches
    (``Codec.nbytes``). Shared objects (None, bools, classes) are not charged; strings and
    small ints that other objects share are (an overestimate, never an under-count)."""
    seen: set[int] = set()
    total = 0
    stack: list[Any] = [view]
    while stack:
        obj = stack.pop()
        if isinstance(obj, _SHARED) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, _native.Codec):
            total += sys.getsizeof(obj) + obj.nbytes
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, BaseModel):
            stack.append(obj.__dict__)
            stack.append(obj.__pydantic_fields_set__)
            if obj.__pydantic_extra__ is not None:
                stack.append(obj.__pydantic_extra__)
            if obj.__pydantic_private__ is not None:
                stack.append(obj.__pydantic_private__)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
    return total


def _schema_from_frame_text(text: str, fingerprint: str) -> Schema:
    """The schema an embedded frame's text describes: its typed view. The codec's reader checked
    the text when the frame was wrapped (``schema::embedded``: size, fingerprint, nesting, JSON,
    canonical form, the schema model's types, defaults and rules, and that the text is the
    model as it is written), so this cannot fail on a frame's own text."""
    schema = Schema._validate(json.loads(text), "the frame's schema")
    if schema.fingerprint != fingerprint:  # the codec's reader and its model disagree
        raise _native.InternalError(
            f"the frame's schema reads back with fingerprint {schema.fingerprint}, not "
            f"{fingerprint[:80]}"
        )
    return schema


def _hold(schema: Schema) -> None:
    """Hold ``schema``, loaded by this process, in the codec's registry (``frame::compact``),
    the one record of what this process holds: compact frames naming its fingerprint can then
    be read. Each ``Schema`` object pins its schema there once (a schema the registry holds
    already, learnt or loaded, is pinned without its text) and gives the pin back when it is
    freed: a schema the process builds, uses and drops is then let go within the learnt
    bounds, as one learnt from a frame is. (Schemas learnt from frames are held by
    :meth:`Schema.from_frame`.)"""
    if schema.__dict__.get(_PINNED):
        return
    with _PIN_LOCK:
        if schema.__dict__.get(_PINNED):
            return
        fingerprint = schema.fingerprint
        if not _native.pin_schema(fingerprint):
            _native.hold_schema(json.dumps(schema.model_dump()), False)
        weakref.finalize(schema, _native.unpin_schema, fingerprint)
        # In the instance's dict, as the cached properties are: the model is frozen.
        schema.__dict__[_PINNED] = True


#: Set on a ``Schema`` that holds a pin in the registry (see :func:`_hold`).
_PINNED = "_registry_pin"
_PIN_LOCK = threading.Lock()


def hold_schema(schema: Schema | str | Path) -> Schema:
    """The schema (``Schema``, bundled name or ``.toml`` path, as :func:`load_schema` takes),
    held for this process: compact frames naming its fingerprint can be read from then on.
    :func:`load_schema` holds every schema it returns, so this is what ``schema=`` of
    ``decode`` and ``Frame.from_buffer`` does."""
    if not isinstance(schema, Schema | str | Path):
        raise TypeError(f"schema must be a Schema, a name or a path, not {type(schema).__name__}")
    return load_schema(schema)


def frame_fingerprint(frame: Frame) -> str | None:
    """The fingerprint of the schema ``frame`` was encoded with: embedded or compact."""
    meta = frame.metadata
    return meta.get(SCHEMA_REF_KEY) or meta.get(FINGERPRINT_KEY)


def _check_size(text: str, source: str, error: type[Exception]) -> None:
    if len(text) > MAX_SCHEMA_BYTES:
        raise error(f"{source}: {len(text)} characters; a schema is at most {MAX_SCHEMA_BYTES}")


#: The characters that open or close strings, comments and brackets.
_TOML_TOKENS = re.compile(r"\"\"\"|'''|[\"'\\#\n\[\]{}]")
_JSON_TOKENS = re.compile(r'["\\\[\]{}]')
#: What ends each kind of string or comment (JSON strings follow the basic-string rules).
_STRING_ENDS: dict[str, tuple[str, ...]] = {
    '"': ('"', '"""', "\n"),
    "'": ("'", "'''", "\n"),
    '"""': ('"""',),
    "'''": ("'''",),
    "#": ("\n",),
}


def _check_nesting(text: str, tokens: re.Pattern[str], source: str, error: type[Exception]) -> None:
    """Reject text whose brackets nest deeper than :data:`MAX_NESTING`, before any parser
    recurses into it. Brackets in strings and comments do not count. One linear pass over the
    special characters (no backtracking regex: hostile text cannot make it quadratic)."""
    depth = 0
    state: str | None = None  # None: code; else the token that opened the string or comment
    skip = 0  # a backslash in a basic string escapes the next character
    for m in tokens.finditer(text):
        if m.start() < skip:
            continue
        t = m.group()
        if state is None:
            if t in ("[", "{"):
                depth += 1
                if depth > MAX_NESTING:
                    raise error(f"{source}: nested deeper than {MAX_NESTING} levels")
            elif t in ("]", "}"):
                depth = max(depth - 1, 0)
            elif t in _STRING_ENDS:
                state = t
        elif t == "\\" and state in ('"', '"""'):
            skip = m.start() + 2
        elif t in _STRING_ENDS[state]:
            state = None


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


def bundled_schemas() -> list[str]:
    """Names of the schemas shipped with py_wire: the framework-neutral ones (``qwen2_5_vl``)
    and, under a framework's folder, the names and dtypes that framework sends
    (``nemo_rl/qwen2_5_vl``, ``verl/qwen2_5_vl``)."""
    return sorted(
        p.relative_to(_SCHEMA_DIR).with_suffix("").as_posix() for p in _SCHEMA_DIR.rglob("*.toml")
    )


#: A bundled schema's name: folders and a file stem of lowercase letters, digits and ``_``.
_BUNDLED_NAME = re.compile(r"[a-z0-9_]+(?:/[a-z0-9_]+)*")


def read_schema_file(path: Path, shown: str | None = None) -> str:
    """A schema file's text: a regular file of at most :data:`MAX_SCHEMA_BYTES` bytes of
    UTF-8. Every failure is a ``SchemaError`` naming the file."""
    shown = str(path) if shown is None else shown
    try:
        if not path.exists():
            raise SchemaError(f"schema file {shown} does not exist")
        if not path.is_file():
            raise SchemaError(f"schema file {shown} is not a regular file")
        with path.open("rb") as fh:
            data = fh.read(MAX_SCHEMA_BYTES + 1)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise SchemaError(f"schema file {shown}: cannot read: {e}") from None
    if len(data) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"schema file {shown} is larger than {MAX_SCHEMA_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchemaError(
            f"schema file {shown} is not UTF-8 text: byte {e.start} is {data[e.start]:#04x}"
        ) from None


@functools.lru_cache(maxsize=64)
def _load_path(path: Path, shown: str) -> Schema:
    return schema_from_file(path, shown)


#: How many ``extends`` a schema file may chain (a file, its base, the base's base, ...).
MAX_EXTENDS_DEPTH = 8


def schema_from_file(path: Path, shown: str | None = None) -> Schema:
    """The schema a ``.toml`` file declares, its ``extends`` chain resolved (uncached)."""
    shown = str(path) if shown is None else shown
    return Schema._validate(_resolved_file(path, shown, ()), shown)


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    _check_size(text, source, SchemaError)
    _check_nesting(text, _TOML_TOKENS, source, SchemaError)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SchemaError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:  # unreachable past the nesting cap; never let it escape
        raise SchemaError(f"{source}: nested too deeply") from None


def _resolved_file(path: Path, shown: str, chain: tuple[Path, ...]) -> dict[str, Any]:
    """A schema file's data with ``extends`` applied: the base's data (itself resolved), the
    fields in ``drop_fields`` removed, every ``[fields.X]`` of this file merged key by key over
    the base's ``X`` (or added; a field also in ``drop_fields`` replaces the base's whole),
    ``contracts`` replaced when this file gives any, and every
    other key of this file replacing the base's."""
    data = _parse_toml(read_schema_file(path, shown), shown)
    base_ref = data.pop("extends", None)
    drop = data.pop("drop_fields", None)
    if base_ref is None:
        if drop is not None:
            raise SchemaError(f"{shown}: drop_fields needs extends (there is no base to drop from)")
        return data
    if not isinstance(base_ref, str):
        raise SchemaError(f"{shown}: extends must be a schema name or a path, not {base_ref!r}")
    if "name" not in data:
        raise SchemaError(f"{shown}: a schema that extends {base_ref!r} needs its own name")
    base_path, base_shown = _base_file(base_ref, path, shown)
    if base_path in (*chain, path):
        names = " -> ".join(str(p) for p in (*chain, path, base_path))
        raise SchemaError(f"{shown}: extends forms a loop: {names}")
    if len(chain) + 1 >= MAX_EXTENDS_DEPTH:
        raise SchemaError(f"{shown}: extends is chained more than {MAX_EXTENDS_DEPTH} deep")
    base = _resolved_file(base_path, base_shown, (*chain, path))
    fields: dict[str, Any] = dict(base.get("fields", {}))
    if drop is not None:
        if not isinstance(drop, list) or not all(isinstance(n, str) for n in drop):
            raise SchemaError(f"{shown}: drop_fields must be a list of field names, not {drop!r}")
        for name in drop:
            if name not in fields:
                raise SchemaError(
                    f"{shown}: drop_fields names {name!r}, which {base_ref!r} does not declare "
                    f"(its fields: {sorted(fields)})"
                )
            del fields[name]
    own = data.pop("fields", {})
    if not isinstance(own, dict):
        raise SchemaError(f"{shown}: fields must be a table, not {own!r}")
    for name, decl in own.items():
        # A field listed in drop_fields and declared again replaces the base's whole.
        inherited = fields.get(name)
        if isinstance(inherited, dict) and isinstance(decl, dict):
            fields[name] = {**inherited, **decl}
        else:
            fields[name] = decl
    return {**base, **data, "fields": fields}


def _base_file(ref: str, path: Path, shown: str) -> tuple[Path, str]:
    """``extends = ref``: a bundled schema's name, or a ``.toml`` path relative to ``path``."""
    if ref.endswith(".toml"):
        try:
            return (path.parent / ref).resolve(), ref
        except (OSError, ValueError, RuntimeError) as e:
            raise SchemaError(f"{shown}: extends {ref!r}: {e}") from None
    if not _BUNDLED_NAME.fullmatch(ref) or not (_SCHEMA_DIR / f"{ref}.toml").is_file():
        raise SchemaError(
            f"{shown}: extends {ref!r}, which is neither a bundled schema nor a .toml path; "
            f"bundled: {bundled_schemas()}"
        )
    return (_SCHEMA_DIR / f"{ref}.toml").resolve(), ref


def schema_file_json_schema() -> dict[str, Any]:
    """The JSON Schema of a schema *file*: the :class:`Schema` model's, plus ``extends`` and
    ``drop_fields``. A file that extends another may declare only the keys it changes, so a
    field's ``tier`` and ``dtype`` are required of the resolved schema, not of each file. The
    defaults it documents are the codec's (:data:`KEY_DEFAULTS`)."""
    doc = Schema.model_json_schema()
    for kind, part in (
        ("schema", doc),
        ("field", doc["$defs"]["FieldDef"]),
        ("contract", doc["$defs"]["PlaceholderContract"]),
    ):
        # The docstring's first sentence: what the key is, not how the view is built.
        part["description"] = (
            re.split(r":? a typed view|\. A typed view", part["description"])[0] + "."
        )
        defaults = KEY_DEFAULTS[kind]
        for key, value in defaults.items():
            part["properties"][key]["default"] = value
        part["required"] = [k for k in part["properties"] if k not in defaults]
    doc["properties"]["extends"] = {
        "description": "A bundled schema's name or a .toml path (relative to this file) whose "
        "fields, contracts and settings this file starts from.",
        "title": "Extends",
        "type": "string",
    }
    doc["properties"]["drop_fields"] = {
        "description": "Fields of the base (extends) that this schema does not have.",
        "items": {"type": "string"},
        "title": "Drop Fields",
        "type": "array",
    }
    doc["required"] = ["name"]
    doc["$defs"]["FieldDef"].pop("required", None)
    return doc


def load_schema(name_or_path: str | Path | Schema) -> Schema:
    """A bundled schema by name (``"qwen2_5_vl"``, ``"nemo_rl/qwen2_5_vl"``: a name with a
    slash resolves under py_wire's schema folder) or a schema file by path (``.toml``)."""
    if isinstance(name_or_path, Schema):
        _hold(name_or_path)
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if path.suffix != ".toml":
        if not _BUNDLED_NAME.fullmatch(text):
            raise SchemaError(
                f"{text!r} is neither a bundled schema name nor a .toml file; "
                f"bundled: {bundled_schemas()}"
            )
        path = _SCHEMA_DIR / f"{text}.toml"
        try:
            bundled = path.is_file()
        except (OSError, ValueError):  # a name too long for the file system, say
            bundled = False
        if not bundled:
            raise SchemaError(f"no bundled schema {text!r}; bundled: {bundled_schemas()}")
    try:
        resolved = path.resolve()
    except (OSError, ValueError, RuntimeError) as e:
        raise SchemaError(f"schema file {text}: {e}") from None
    schema = _load_path(resolved, text)
    _hold(schema)
    return schema
