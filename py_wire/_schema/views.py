"""The typed views of a schema: ``FieldDef``, ``PlaceholderContract`` and ``Schema``, frozen
pydantic models of what the codec's schema model (``rust_codec/src/schema/model.rs``) returns.
The model reads the data: every key's type and default, every rule, the canonical form and the
fingerprint; the views hold no default or rule of their own. What a stage needs is the
codec's too (``stage_needs.py``); the codecs a view compiles are cached by ``codecs.py``."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from py_wire import _native
from py_wire._dtypes import DTypeName
from py_wire._evolution import SchemaDiff
from py_wire._evolution import diff as schema_diff
from py_wire._native import FrameError, SchemaError
from py_wire._schema.codecs import CompiledCodecs
from py_wire._schema.constants import Dim
from py_wire._schema.text import data_json, parse_json, parse_toml
from py_wire._schema.view_cache import _VIEWS
from py_wire._tiers.names import Tier

if TYPE_CHECKING:
    from py_wire._native import Frame

_FROZEN = ConfigDict(extra="forbid", frozen=True)
#: The validation context of a whole schema (``Schema._validate``): its ``_read`` has the codec
#: read every field and contract with it, so theirs do not read them again.
_RESOLVED: dict[str, bool] = {"resolved": True}


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
        return json.loads(_native.resolve_field(data_json(data)))

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
        return json.loads(_native.resolve_contract(data_json(data)))


#: The contract kinds; ``kind`` defaults to "placeholder", the only one so far.
Contract = PlaceholderContract


class Schema(BaseModel, CompiledCodecs):
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
        _canonical, _fingerprint, full = _native.resolve_schema(data_json(data))
        return json.loads(full)

    # -- derived facts (cached: the model is frozen; the stage facts: StageLookups) --------

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

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> Schema:
        """A schema from TOML text. ``extends`` needs a file to resolve paths against: load
        such a schema with :func:`load_schema` (a path or a bundled name)."""
        _text_arg(text, source)
        data = parse_toml(text, source)
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
        return cls._validate(parse_json(text, source), source)

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
            view = cls.held(fingerprint)
            if view is not None:
                return view
            if frame._held_text is not None:
                # Let go since the frame was read: the frame keeps the schema it was read under.
                return Schema._validate(json.loads(frame._held_text), "a held schema")
            raise FrameError(
                f"the frame is compact: it names its schema by fingerprint "
                f"{fingerprint[:80]} only, and this process holds no schema with that "
                "fingerprint (load it with py_wire.load_schema, or pass schema= to decode / "
                "Frame.from_buffer)"
            )
        embedded: Schema | None = _VIEWS.get(fingerprint, held=False)
        if embedded is not None:
            return embedded
        view = _schema_from_frame_text(text, fingerprint)
        if _native.holds_schema(fingerprint) or _native.hold_schema(text, True)[0]:
            # a view is kept only of a schema the codec holds
            _VIEWS.put(fingerprint, False, view)
        return view

    @classmethod
    def held(cls, fingerprint: str) -> Schema | None:
        """The schema this process holds under ``fingerprint`` (what a compact frame naming it
        reads with), or None when it holds none."""
        cached: Schema | None = _VIEWS.get(fingerprint, held=True)
        if cached is not None:
            return cached
        text = _native.held_schema(fingerprint)
        if text is None:
            return None
        view = Schema._validate(json.loads(text), "a held schema")
        _VIEWS.put(fingerprint, True, view)
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
