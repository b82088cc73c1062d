"""Schema files: one TOML file per batch kind, validated into frozen pydantic models.

A schema declares every field's tier, dtype, segment shape, stages and optional wire cast; the
frame carries the schema as canonical JSON, so a reader always knows what it holds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from py_wire._native import FrameError, SchemaError

if TYPE_CHECKING:
    from py_wire._native import Frame

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
Dim = int | Literal["*"]

DEFAULT_STAGES = ("generation", "logprob", "ref_logprob", "train")
_FLOATS = ("float16", "bfloat16", "float32", "float64")
#: (source, wire) casts the codec implements; the narrowing ones must be declared lossy.
WIRE_CASTS: dict[tuple[str, str], bool] = {
    ("float32", "bfloat16"): True,
    ("float32", "float16"): True,
    ("float64", "float32"): True,
    ("float64", "bfloat16"): True,
    ("float64", "float16"): True,
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class FieldDef(BaseModel):
    """One field of a schema."""

    model_config = _FROZEN

    tier: Tier
    dtype: DTypeName
    shape: tuple[Dim, ...] = Field(
        default=(),
        description="packed: the whole segment shape; per_token: the dims after the sequence "
        'dim; scalar: the static dims of one row ([] for 0-d). "*" marks a ragged dim.',
    )
    required: bool = True
    stages: tuple[str, ...] | None = Field(
        default=None, description="Stages that need this field; default: every stage."
    )
    pack_dim: int = Field(default=0, description="packed only: the dim segments concatenate on.")
    pad_value: float | int | bool = 0
    wire_dtype: DTypeName | None = Field(
        default=None, description="dtype stored on the wire (a cast at encode)."
    )
    lossy: bool = Field(default=False, description="Must be true when wire_dtype narrows.")
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> FieldDef:
        if any(isinstance(d, int) and d < 0 for d in self.shape):
            raise ValueError(f"shape {list(self.shape)} has a negative dim")
        if self.tier == "packed":
            if not self.shape:
                raise ValueError("a packed field needs a segment shape of rank >= 1")
            rank = len(self.shape)
            if not -rank <= self.pack_dim < rank:
                raise ValueError(f"pack_dim {self.pack_dim} is out of range for rank {rank}")
            if self.pack_dim < 0:
                object.__setattr__(self, "pack_dim", self.pack_dim + rank)
        else:
            if "*" in self.shape:
                raise ValueError(f'a {self.tier} field cannot have ragged ("*") dims')
            if self.pack_dim != 0:
                raise ValueError("pack_dim applies to packed fields only")
        if self.wire_dtype is not None and self.wire_dtype != self.dtype:
            lossy = WIRE_CASTS.get((self.dtype, self.wire_dtype))
            if lossy is None:
                raise ValueError(
                    f"no cast from {self.dtype} to wire dtype {self.wire_dtype} "
                    "(only floating-point narrowing casts exist; integers are never cast)"
                )
            if lossy and not self.lossy:
                raise ValueError(
                    f"wire dtype {self.wire_dtype} narrows {self.dtype}: declare lossy = true"
                )
        return self

    @property
    def stored_dtype(self) -> str:
        return self.wire_dtype or self.dtype


class PlaceholderContract(BaseModel):
    """In each row, the runs of ``token_id`` in the sequence field match, image by image, the
    feature counts the media imply."""

    model_config = _FROZEN

    kind: Literal["placeholder"] = "placeholder"
    name: str
    media_field: str = Field(description="The packed field whose items are the images.")
    token_id: int
    begin_token_id: int | None = None
    end_token_id: int | None = None
    count: Literal["grid_thw", "fixed", "image_size", "field"]
    grid_field: str | None = None
    merge_size: int = 2
    tokens_per_image: int | None = None
    sizes_field: str | None = None
    count_field: str | None = Field(
        default=None, description='count = "field": a packed int field, one token count per image.'
    )
    patch_size: int = 16
    downsample_ratio: float = 0.5

    @model_validator(mode="after")
    def _check(self) -> PlaceholderContract:
        needs = {
            "grid_thw": "grid_field",
            "fixed": "tokens_per_image",
            "image_size": "sizes_field",
            "field": "count_field",
        }
        if getattr(self, needs[self.count]) is None:
            raise ValueError(f"count = {self.count!r} needs {needs[self.count]}")
        return self


#: The contract kinds; ``kind`` defaults to "placeholder", the only one so far.
Contract = PlaceholderContract


class Schema(BaseModel):
    """A batch kind: its fields, sequence field, stages and contracts."""

    model_config = _FROZEN

    name: str
    version: int = 1
    description: str = ""
    sequence_field: str | None = None
    lengths_field: str | None = Field(
        default=None, description="A scalar integer field equal to each row's sequence length."
    )
    stages: tuple[str, ...] = DEFAULT_STAGES
    fields: dict[str, FieldDef]
    contracts: tuple[Contract, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Schema:
        for name, field in self.fields.items():
            if not _IDENT.match(name) or name.startswith("__"):
                raise ValueError(f"field name {name!r} must be an identifier not starting with __")
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
        for c in self.contracts:
            for ref in (c.media_field, c.grid_field, c.sizes_field, c.count_field):
                if ref is not None and ref not in self.fields:
                    raise ValueError(f"contract {c.name!r} names unknown field {ref!r}")
        return self

    # -- derived facts (cached: the model is frozen) --------------------------------------

    def field_stages(self, name: str) -> tuple[str, ...]:
        return self.fields[name].stages or self.stages

    def fields_for(self, stage: str) -> list[str]:
        """The fields a stage needs, in schema order."""
        if stage not in self.stages:
            raise SchemaError(
                f"schema {self.name!r} has no stage {stage!r}; stages: {list(self.stages)}"
            )
        return [n for n in self.fields if stage in self.field_stages(n)]

    @functools.cached_property
    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def fingerprint(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical_json.encode()).hexdigest()

    @functools.cached_property
    def _spec_dicts(self) -> dict[str, dict[str, Any]]:
        """Per field, the layout facts the codec needs (what a frame's field table holds)."""
        out = {}
        for name, f in self.fields.items():
            spec: dict[str, Any] = {
                "name": name,
                "tier": f.tier,
                "dtype": f.dtype,
                "shape": [None if d == "*" else d for d in f.shape],
                "pack_dim": f.pack_dim,
            }
            if f.wire_dtype and f.wire_dtype != f.dtype:
                spec["wire_dtype"] = f.wire_dtype
            out[name] = spec
        return out

    @functools.cached_property
    def _specs(self) -> dict[str, str]:
        """The same, as JSON for the codec."""
        return {name: json.dumps(spec) for name, spec in self._spec_dicts.items()}

    @functools.cached_property
    def _contracts_json(self) -> list[str]:
        return [c.model_dump_json() for c in self.contracts]

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> Schema:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise SchemaError(f"{source}: not valid TOML: {e}") from None
        return cls._validate(data, source)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> Schema:
        """Validate a schema given as Python data; errors are :class:`SchemaError`."""
        return cls._validate(data, source)

    @classmethod
    def from_json(cls, text: str, source: str = "<frame>") -> Schema:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{source}: not valid JSON: {e}") from None
        return cls._validate(data, source)

    @classmethod
    def from_frame(cls, frame: Frame) -> Schema:
        """The schema a frame carries, checked against its fingerprint (``FrameError`` if the
        two disagree: the header was damaged)."""
        meta = frame.metadata
        text = meta.get("py_wire.schema")
        if text is None:
            raise FrameError("the frame carries no schema")
        try:
            schema = cls.from_json(text, "frame metadata")
        except SchemaError as e:
            raise FrameError(f"the frame's schema is invalid: {e}") from None
        if schema.fingerprint != meta.get("py_wire.fingerprint"):
            raise FrameError(
                f"the frame's schema does not match its fingerprint "
                f"{meta.get('py_wire.fingerprint')!r} (damaged header?)"
            )
        return schema

    @classmethod
    def _validate(cls, data: Any, source: str) -> Schema:
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                for err in e.errors()
            )
            raise SchemaError(f"{source}: {problems}") from None


def bundled_schemas() -> list[str]:
    """Names of the schemas shipped with py_wire."""
    return sorted(p.stem for p in _SCHEMA_DIR.glob("*.toml"))


@functools.lru_cache(maxsize=64)
def _load_path(path: Path) -> Schema:
    return Schema.from_toml(path.read_text(), str(path))


def load_schema(name_or_path: str | Path | Schema) -> Schema:
    """A bundled schema by name (``"qwen2_5_vl"``) or a schema file by path."""
    if isinstance(name_or_path, Schema):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if path.suffix != ".toml" and "/" not in text:
        path = _SCHEMA_DIR / f"{text}.toml"
        if not path.exists():
            raise SchemaError(f"no bundled schema {text!r}; bundled: {bundled_schemas()}")
    if not path.exists():
        raise SchemaError(f"schema file {text} does not exist")
    return _load_path(path.resolve())
