"""Schema files: one TOML file per batch kind, validated into frozen pydantic models.

A schema declares every field's tier, dtype, segment shape, stages and optional wire cast; the
frame carries the schema as canonical JSON, so a reader always knows what it holds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_serializer,
    model_validator,
)

from py_wire import _native
from py_wire._evolution import SchemaDiff
from py_wire._evolution import diff as schema_diff
from py_wire._native import FrameError, SchemaError

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
# The loader reports types (strict: `true` is not 1, 1.5 is not an int) in the codec's widths;
# the rules (ranks, pack dims, casts, names, contract parameters) are the codec's
# (`_native.validate_field_spec`, `_native.validate_contract`).
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]
UInt64 = Annotated[StrictInt, Field(ge=0, le=2**64 - 1)]
Dim = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] | Literal["*"]

#: The most items a declared list (a shape, stages, accepted dtypes, contracts) or table of
#: fields may hold: a schema file is at most MAX_SCHEMA_BYTES, which bounds any real one far below.
MAX_DECLARED_ITEMS = 4096


def _declared_list(value: Any) -> Any:
    """Only a list or tuple of at most MAX_DECLARED_ITEMS: pydantic would otherwise iterate any
    iterable (``range(2**62)``, a generator) into memory before a rule could refuse it."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"must be a list, not {type(value).__name__}")
    if len(value) > MAX_DECLARED_ITEMS:
        raise ValueError(f"{len(value)} items; at most {MAX_DECLARED_ITEMS}")
    return value


def _declared_table(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"must be a table (dict), not {type(value).__name__}")
    if len(value) > MAX_DECLARED_ITEMS:
        raise ValueError(f"{len(value)} entries; at most {MAX_DECLARED_ITEMS}")
    return value


Listed = BeforeValidator(_declared_list)

#: Input dtype → the dtypes it converts into exactly (every value representable, no rounding):
#: what a field's ``accept`` may list. The table is the codec's (``cast.rs``
#: ``widens_exactly``), which also decides whether a wire cast is lossy.
LOSSLESS_WIDENINGS: dict[str, frozenset[str]] = {
    src: frozenset(into) for src, into in _native.LOSSLESS_WIDENINGS.items()
}

DEFAULT_STAGES = ("generation", "logprob", "ref_logprob", "train")
#: The largest schema file, or schema string in a frame, that is parsed at all (the codec's
#: constant: its reader checks a frame's schema against it, ``frame::schema_text``).
MAX_SCHEMA_BYTES: int = _native.MAX_SCHEMA_BYTES
#: The deepest nesting of arrays and tables a schema file or a frame's schema JSON may have
#: (a real schema needs 3); checked before parsing, so no parser recurses on hostile input.
MAX_NESTING: int = _native.MAX_NESTING

_SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class FieldDef(BaseModel):
    """One field of a schema."""

    model_config = _FROZEN

    tier: Tier
    dtype: DTypeName
    shape: Annotated[tuple[Dim, ...], Listed] = Field(
        default=(),
        description="packed: the whole segment shape; per_token: the dims after the sequence "
        'dim; scalar: the static dims of one row ([] for 0-d). "*" marks a ragged dim.',
    )
    required: StrictBool = True
    stages: Annotated[tuple[StrictStr, ...], Listed] | None = Field(
        default=None, description="Stages that need this field; default: every stage."
    )
    pack_dim: Int64 = Field(
        default=0, description="packed only: the dim segments concatenate on (-1: the last)."
    )
    pad_value: StrictBool | StrictInt | StrictFloat = Field(
        default=0, description="per_token only: what layout='padded' fills with; must fit dtype."
    )
    wire_dtype: DTypeName | None = Field(
        default=None, description="dtype stored on the wire (a cast at encode)."
    )
    lossy: StrictBool = Field(default=False, description="Must be true when wire_dtype narrows.")
    accept: Annotated[tuple[DTypeName, ...], Listed] = Field(
        default=(),
        description="Input dtypes encode also takes, each widened losslessly into dtype "
        '(e.g. accept = ["int32"] on an int64 field). Never implicit for other dtypes.',
    )
    encoding: Literal["utf8", "json"] | None = Field(
        default=None,
        description='packed uint8 ["*"] only: each row is one segment holding a UTF-8 string '
        '("utf8") or a JSON value ("json"), for per-row Python objects (ids, tags, dicts) that '
        "travel beside the tensors; adapters turn them back into str / JSON values.",
    )
    gather: Annotated[tuple[StrictStr, ...], Listed] | None = Field(
        default=None,
        description='encoding = "json" only: glob patterns (fnmatch, case-sensitive) of a '
        "source's per-row keys that no other field declares (a verl reward function's "
        "non_tensor_batch keys, such as acc or pred), gathered into this field as one JSON "
        "object per row and spread back by the adapter (py_wire.interop.verl), each key with "
        "its numpy dtype. A key no field declares and no pattern matches is refused.",
    )
    column: Literal["text", "media"] = Field(
        default="text",
        description="Which stored column the field travels in where a batch is kept as columns "
        '(py_wire.interop.transfer_queue): "media" for images, their grids and masks, which a '
        'text-only fetch never moves; "text" (default) for everything else. The sequence field '
        "is in every column.",
    )
    description: StrictStr = ""

    @model_validator(mode="after")
    def _check(self) -> FieldDef:
        if self.encoding is not None and (
            self.tier != "packed" or self.dtype != "uint8" or self.shape != ("*",)
        ):
            raise ValueError(
                f'encoding = "{self.encoding}" needs tier = "packed", dtype = "uint8" and '
                f'shape = ["*"], not tier = "{self.tier}", dtype = "{self.dtype}", shape = '
                f"{list(self.shape)}"
            )
        if self.gather is not None and self.encoding != "json":
            raise ValueError(
                f'gather needs encoding = "json" (one JSON object per row), not encoding = '
                f"{self.encoding!r}"
            )
        # Only Python reads pad_value (the codec never sees it), so this rule lives here.
        for dtype in dict.fromkeys((self.dtype, self.stored_dtype)):
            problem = _pad_problem(self.pad_value, dtype)
            if problem:
                raise ValueError(f"pad_value {self.pad_value!r} does not fit {dtype}: {problem}")
        for src in self.accept:
            if src == self.dtype:
                raise ValueError(f"accept: {src} is the field's own dtype")
            if self.dtype not in LOSSLESS_WIDENINGS.get(src, ()):
                into = sorted(LOSSLESS_WIDENINGS.get(src, ()))
                raise ValueError(
                    f"accept: {src} does not widen losslessly into {self.dtype} (it does into "
                    f"{into or 'nothing'}); a narrowing is a wire_dtype with lossy = true"
                )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        # An unset encoding is left out, so that schemas which declare none keep the canonical
        # form (and fingerprint) they had before the key existed.
        # Likewise the default column.
        out = handler(self)
        if isinstance(out, dict):
            for key in ("encoding", "gather"):
                if out.get(key) is None:
                    out.pop(key, None)
            if out.get("column") == "text":
                out.pop("column", None)
        return out

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
    feature counts the media imply."""

    model_config = _FROZEN

    kind: Literal["placeholder"] = "placeholder"
    name: StrictStr
    media_field: StrictStr = Field(description="The packed field whose items are the images.")
    token_id: Int64
    begin_token_id: Int64 | None = None
    end_token_id: Int64 | None = None
    count: Literal["grid_thw", "fixed", "image_size", "field"]
    grid_field: StrictStr | None = None
    merge_size: UInt64 = 2
    tokens_per_image: UInt64 | None = None
    sizes_field: StrictStr | None = None
    count_field: StrictStr | None = Field(
        default=None, description='count = "field": a packed int field, one token count per image.'
    )
    patch_size: UInt64 = 16
    downsample_ratio: StrictFloat = 0.5
    # The rules (parameters in range, the count rule's field present, named fields of the right
    # tier, dtype and shape) are the codec's: `Schema` asks `_native.validate_contract`.


#: The contract kinds; ``kind`` defaults to "placeholder", the only one so far.
Contract = PlaceholderContract


class Schema(BaseModel):
    """A batch kind: its fields, sequence field, stages and contracts."""

    model_config = _FROZEN

    name: StrictStr
    version: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] = 1
    description: StrictStr = ""
    sequence_field: StrictStr | None = None
    lengths_field: StrictStr | None = Field(
        default=None, description="A scalar integer field equal to each row's sequence length."
    )
    stages: Annotated[tuple[StrictStr, ...], Listed] = DEFAULT_STAGES
    fields: Annotated[dict[StrictStr, FieldDef], BeforeValidator(_declared_table)]
    contracts: Annotated[tuple[Contract, ...], Listed] = ()

    @model_validator(mode="after")
    def _check(self) -> Schema:
        specs = {}
        for name, field in self.fields.items():
            specs[name] = field._resolve(name)  # the codec's field rules; SchemaError names it
            if field.pack_dim != specs[name]["pack_dim"]:  # -1 → the last dim, as resolved
                object.__setattr__(field, "pack_dim", specs[name]["pack_dim"])
            unknown = set(field.stages or ()) - set(self.stages)
            if unknown:
                raise ValueError(
                    f"field {name!r}: stages {sorted(unknown)} are not among the schema's "
                    f"stages {list(self.stages)}"
                )
        per_token = [n for n, f in self.fields.items() if f.tier == "per_token"]
        seq = self.sequence_field
        if per_token and seq is None:
            raise ValueError(f"per-token fields {per_token} need a sequence_field")
        if seq is not None and (seq not in self.fields or self.fields[seq].tier != "per_token"):
            raise ValueError(f"sequence_field {seq!r} must name a per_token field")
        lengths = self.lengths_field
        if lengths is not None:
            f = self.fields.get(lengths)
            if f is None or f.tier != "scalar" or f.shape or f.dtype not in ("int32", "int64"):
                raise ValueError(f"lengths_field {lengths!r} must name a 0-d int scalar field")
        if seq is not None and self.fields[seq].column != "text":
            raise ValueError(
                f"sequence_field {seq!r}: column = {self.fields[seq].column!r}, but the sequence "
                'field travels in every column (leave it "text")'
            )
        gathering = [n for n, f in self.fields.items() if f.gather is not None]
        if len(gathering) > 1:
            raise ValueError(
                f"fields {gathering} all declare gather: one field gathers a source's "
                "undeclared keys (list every pattern in it)"
            )
        spec_json = [json.dumps(s) for s in specs.values()]
        names = [c.name for c in self.contracts]
        for c in self.contracts:
            _check_contract_column(c, self.fields)
        for c in self.contracts:
            if names.count(c.name) > 1:
                raise ValueError(f"contract name {c.name!r} appears {names.count(c.name)} times")
            _native.validate_contract(c.model_dump_json(), spec_json, seq)
        return self

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

    def diff(self, other: Schema) -> SchemaDiff:
        """How ``other`` (usually this schema's next version) differs from this one, and
        whether frames written under either are read under the other (``.compatible``; why
        not: ``.problems``). The rule: :mod:`py_wire._evolution`."""
        return schema_diff(self, other)

    @functools.cached_property
    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def fingerprint(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical_json.encode()).hexdigest()

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
        A schema read from an embedded frame is held from then on (up to a cap), so that later
        compact frames of it can be read."""
        fingerprint, text = frame.schema_source  # one call: what the codec validated
        if fingerprint is None:
            raise FrameError("the frame carries no schema")
        if text is None:  # compact: the schema named by fingerprint
            held = _HELD.get(fingerprint)
            if held is None:
                raise FrameError(
                    f"the frame is compact: it names its schema by fingerprint "
                    f"{fingerprint[:80]} only, and this process holds no schema with that "
                    "fingerprint (load it with py_wire.load_schema, or pass schema= to decode / "
                    "Frame.from_buffer)"
                )
            return held
        return _schema_from_frame_text(text, fingerprint)

    @classmethod
    def _validate(cls, data: Any, source: str) -> Schema:
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise SchemaError(f"{source}: {_problems(e)}") from None
        except RecursionError:  # deeply nested Python data handed to from_dict
            raise SchemaError(f"{source}: nested too deeply") from None


def _check_contract_column(c: PlaceholderContract, fields: Mapping[str, FieldDef]) -> None:
    """A contract is checked on one column's frame: the fields it names share a column."""
    named = [
        f
        for f in (c.media_field, c.grid_field, c.sizes_field, c.count_field)
        if f is not None and f in fields
    ]
    columns = {f: fields[f].column for f in named}
    if len(set(columns.values())) > 1:
        raise ValueError(
            f"contract {c.name!r}: the fields it names must share a column, but their columns "
            f"are {columns}"
        )


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


@functools.lru_cache(maxsize=64)
def _schema_from_frame_text(text: str, fingerprint: str) -> Schema:
    """The schema an embedded frame's text describes. The codec's reader checked the text when
    the frame was wrapped (``frame::schema_text``: its size, fingerprint, nesting, JSON and
    canonical form, and the tensors against the field table it implies); what is left is
    meaning: the schema model's rules, and that the text is the whole model as py_wire writes
    it (no key left to a default), so that the schema read back has the frame's fingerprint."""
    where = "the frame's schema"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # unreachable past the codec's checks
        raise FrameError(f"{where} is not valid JSON: {e}") from None
    try:
        schema = Schema._validate(data, where)
    except SchemaError as e:
        raise FrameError(f"the frame's schema is invalid: {e}") from None
    if schema.fingerprint != fingerprint:
        raise FrameError(
            f"{where} is canonical JSON but not the schema model as py_wire writes it (a key "
            f"left out or a value py_wire would write otherwise); its fingerprint {fingerprint!r}"
        )
    _hold(schema, learnt=True)
    return schema


#: Every schema this process holds, by fingerprint: what compact frames may name. The codec
#: keeps the same set (``frame::compact``), so frames are validated against it without Python.
_HELD: dict[str, Schema] = {}


def _hold(schema: Schema, learnt: bool = False) -> None:
    """Hold ``schema`` (codec first, then here). ``learnt``: read from a frame, not loaded by
    the process; the codec keeps those only up to a cap."""
    fingerprint = schema.fingerprint
    if fingerprint in _HELD:
        return
    if _native.hold_schema(
        fingerprint, list(schema._specs.values()), schema.sequence_field, learnt
    ):
        _HELD[fingerprint] = schema


def hold_schema(schema: Schema | str | Path) -> Schema:
    """The schema (``Schema``, bundled name or ``.toml`` path, as :func:`load_schema` takes),
    held for this process: compact frames naming its fingerprint can be read from then on.
    :func:`load_schema` holds every schema it returns, so this is what ``schema=`` of
    ``decode`` and ``Frame.from_buffer`` does."""
    if not isinstance(schema, Schema | str | Path):
        raise TypeError(f"schema must be a Schema, a name or a path, not {type(schema).__name__}")
    return load_schema(schema)


# ``Frame.schema`` and ``Frame.from_buffer(schema=)`` call these (the codec imports no Python
# module).
_native.set_schema_hooks(Schema.from_frame, hold_schema)


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


#: The most and least a pad value may be, per dtype: integers exactly; floats up to the
#: largest finite value (NaN always, infinities where the dtype has them).
_INT_RANGE = {
    "uint8": (0, 2**8 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    # torch builds the pad element from a Python int through int64.
    "uint64": (0, 2**63 - 1),
}
_FLOAT_MAX = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
    "complex64": 3.4028234663852886e38,
    "complex128": 1.7976931348623157e308,
}
_NO_INF = {"float8_e4m3fn"}


def _pad_problem(value: bool | int | float, dtype: str) -> str | None:
    """Why ``value`` cannot be stored exactly as one ``dtype`` element, or None."""
    if dtype == "bool":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        return "a bool field pads with true, false, 0 or 1"
    if dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        if isinstance(value, bool) or not isinstance(value, int):
            return "an integer field needs an integer pad value"
        return None if lo <= value <= hi else f"expected {lo} <= pad_value <= {hi}"
    if isinstance(value, bool):
        return "a floating-point field needs a number, not a bool"
    limit = _FLOAT_MAX[dtype]
    try:
        x = float(value)
    except OverflowError:
        return f"expected |pad_value| <= {limit}"
    if math.isnan(x) or abs(x) <= limit:
        return None
    if math.isinf(x) and dtype not in _NO_INF:
        return None
    return f"expected |pad_value| <= {limit}" + (" (no infinities)" if dtype in _NO_INF else "")


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
    field's ``tier`` and ``dtype`` are required of the resolved schema, not of each file."""
    doc = Schema.model_json_schema()
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
