"""A ``Schema`` view compiled for the codec (``_native.Codec``), once per stage and header
form, and the field specs and contracts it is built from."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from py_wire import _native
from py_wire._schema.constants import FINGERPRINT_KEY, SCHEMA_KEY, SCHEMA_REF_KEY
from py_wire._schema.registry import _hold
from py_wire._schema.stage_needs import StageLookups
from py_wire._schema.view_cache import _VIEWS


def _field_decl(name: str, field: Any) -> dict[str, Any]:
    """A field as the codec's rules read it (`spec.rs` `FieldDecl`)."""
    return {
        "name": name,
        "tier": field.tier,
        "dtype": field.dtype,
        "wire_dtype": field.wire_dtype,
        "shape": [None if d == "*" else d for d in field.shape],
        "pack_dim": field.pack_dim,
        "lossy": field.lossy,
    }


class CompiledCodecs(StageLookups):
    """The codecs of a ``Schema`` view and what they are built from (cached: the view is
    frozen)."""

    if TYPE_CHECKING:
        fields: dict[str, Any]
        contracts: tuple[Any, ...]
        sequence_field: str | None
        lengths_field: str | None

        @property
        def fingerprint(self) -> str: ...

        @property
        def canonical_json(self) -> str: ...

    @functools.cached_property
    def _spec_dicts(self) -> dict[str, dict[str, Any]]:
        """Per field, the layout facts the codec needs (what a frame's field table holds): the
        codec's verdict on each field (``SchemaError`` naming the field if it breaks a rule)."""
        return {
            name: json.loads(_native.validate_field_spec(json.dumps(_field_decl(name, f))))
            for name, f in self.fields.items()
        }

    @functools.cached_property
    def _specs(self) -> dict[str, str]:
        """The same, as JSON for the codec."""
        return {name: json.dumps(spec) for name, spec in self._spec_dicts.items()}

    @functools.cached_property
    def _contracts_json(self) -> list[str]:
        return [c.model_dump_json() for c in self.contracts]

    def _contracts_for(self, stage: str | None) -> list[str]:
        """The contracts a stage's batch is checked against: all of them, except those the
        stage is not held to (the codec's rule, read by ``StageLookups._stage_contracts``)."""
        if stage is None:
            return self._contracts_json
        return [self._contracts_json[i] for i in self._stage_contracts(stage)]

    def unchecked_contracts(self, written: CompiledCodecs, stage: str | None) -> list[str]:
        """This (the reader's) schema's contracts, as the codec takes them (JSON), that a frame
        written under ``written`` was never checked against: those ``written`` does not
        declare, less those ``stage`` is not held to."""
        held = range(len(self.contracts)) if stage is None else self._stage_contracts(stage)
        return [self._contracts_json[i] for i in held if self.contracts[i] not in written.contracts]

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
            _hold(self)
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
            _VIEWS.recharge(self.fingerprint, self)
        return codec

    @functools.cached_property
    def _codecs(self) -> dict[tuple[str | None, bool], _native.Codec]:
        return {}
