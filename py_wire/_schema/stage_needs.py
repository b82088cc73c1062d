"""Which fields and contracts a stage needs, as the codec's schema model decides
(``rust_codec/src/schema/stages.rs`` holds the rules; the view reads its plan, once)."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from py_wire import _native
from py_wire._native import SchemaError


class StageLookups:
    """The stage facts of a ``Schema`` view, read from the codec's plan."""

    if TYPE_CHECKING:
        name: str
        stages: tuple[str, ...]

        def model_dump(self) -> dict[str, Any]: ...

    @functools.cached_property
    def _stage_plan(self) -> dict[str, Any]:
        """The codec's plan of this schema's stages (fields in declared order)."""
        plan: dict[str, Any] = json.loads(_native.schema_stages(json.dumps(self.model_dump())))
        return plan

    def _stage(self, stage: str) -> dict[str, Any]:
        """What ``stage`` needs (``SchemaError`` naming the schema's stages if it has none)."""
        if not isinstance(stage, str):
            raise TypeError(f"stage must be a str or None, not {type(stage).__name__}")
        needs: dict[str, Any] | None = self._stage_plan["stages"].get(stage)
        if needs is None:
            raise SchemaError(
                f"schema {self.name!r} has no stage {stage!r}; stages: {list(self.stages)}"
            )
        return needs

    def field_stages(self, name: str) -> tuple[str, ...]:
        """The stages that carry field ``name``."""
        return tuple(self._stage_plan["field_stages"][name])

    def fields_for(self, stage: str) -> list[str]:
        """The fields a stage needs, in schema order."""
        return list(self._stage(stage)["fields"])

    def required_for(self, stage: str | None = None) -> list[str]:
        """The fields ``encode(..., stage=stage)`` demands, in schema order: the ``required``
        fields among :meth:`fields_for` (every required field when ``stage`` is None). An
        optional field is never demanded."""
        if stage is None:
            return list(self._stage_plan["required"])
        return list(self._stage(stage)["required"])

    def _stage_contracts(self, stage: str) -> list[int]:
        """The indices of the contracts ``stage`` is held to: a stage is held to a contract when
        it carries the contract's media field (generation, which gets the images another way,
        is not)."""
        return list(self._stage(stage)["contracts"])
