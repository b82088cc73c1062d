"""Schema evolution: which versions of a schema read each other's frames (what 1.x promises).

Two schemas of one name are *compatible* when a frame written under either means the same bytes
under the other: every field both declare has the same tier, dtype, wire dtype, shape, pack dim,
encoding and ``required`` flag; a field only one declares is optional there; and the sequence
and lengths fields agree. Everything else (stages added or removed, descriptions, pad values,
accepted input dtypes, contracts, keys added to a later version) is reported, not refused.

``decode(frame, schema)`` with a compatible schema of another version reads the frame: it
returns the fields the reader's schema declares and reports the frame's fields it does not
(:class:`SchemaEvolutionWarning`); an incompatible one is a :class:`SchemaError` naming the field
and both versions. Contracts are a note for the diff, never for the data: the reader's
contracts that the frame's schema does not declare were never checked on the frame, so
``decode`` checks them (:meth:`py_wire.Schema.unchecked_contracts`). A schema of the frame's
name and version with another fingerprint is reported (:class:`SchemaConflictWarning`).
``Schema.diff`` and ``py-wire schema diff OLD NEW`` say which, and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from py_wire._native import SchemaError


class Schema(Protocol):
    """What evolution reads of a schema (``py_wire.Schema`` is one): its identity and its
    canonical document. A protocol, so that this module needs nothing of ``_schema`` (which
    imports it)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def fingerprint(self) -> str: ...
    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


#: The field keys that decide what a frame's bytes mean: a change to any is incompatible. Keys
#: not listed (description, stages, pad_value, accept, lossy, and any a later version adds) are
#: reported as notes.
LAYOUT_KEYS = ("tier", "dtype", "wire_dtype", "shape", "pack_dim", "encoding", "required")
#: Schema keys that must agree (the field table and sequence offsets are derived from them).
SCHEMA_LAYOUT_KEYS = ("name", "sequence_field", "lengths_field")
#: Schema keys compared elsewhere or not at all.
_SKIPPED = ("fields", "version")


class SchemaEvolutionWarning(UserWarning):
    """``decode(frame, schema)`` read a frame written under another, compatible version of the
    schema, which carries fields the reader's schema does not declare: they are left out of the
    result (``decode(frame)`` without a schema returns them). ``extra_fields`` names them;
    ``reader_version`` and ``frame_version`` are the two versions."""

    def __init__(
        self, message: str, extra_fields: tuple[str, ...], reader_version: int, frame_version: int
    ) -> None:
        super().__init__(message)
        self.extra_fields = extra_fields
        self.reader_version = reader_version
        self.frame_version = frame_version


class SchemaConflictWarning(UserWarning):
    """``decode(frame, schema)`` was handed a schema of the frame's name and version that is not
    the frame's (another fingerprint): one of the two was edited without its version bumped.
    The frame is read by the evolution rule all the same (any layout change is a
    :class:`SchemaError`); ``name``, ``version``, ``reader_fingerprint`` and
    ``frame_fingerprint`` say which two schemas disagree."""

    def __init__(
        self,
        message: str,
        name: str,
        version: int,
        reader_fingerprint: str,
        frame_fingerprint: str,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.version = version
        self.reader_fingerprint = reader_fingerprint
        self.frame_fingerprint = frame_fingerprint


def _show(value: Any) -> str:
    return json.dumps(value)


@dataclass(frozen=True)
class SchemaDiff:
    """What changed from ``old`` to ``new`` (two schemas, usually two versions of one name).

    ``added``/``removed``: fields only ``new``/``old`` declares; ``problems``: why a frame of one
    cannot be read under the other (empty when compatible); ``notes``: compatible changes."""

    old_name: str
    old_version: int
    new_name: str
    new_version: int
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: The fields a problem names.
    problem_fields: frozenset[str] = field(default=frozenset())

    @property
    def compatible(self) -> bool:
        """A frame written under either schema is read under the other."""
        return not self.problems

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.problems or self.notes)

    def __str__(self) -> str:
        head = f"{self.old_name} v{self.old_version} -> {self.new_name} v{self.new_version}: "
        if self.identical:
            return head + "identical"
        lines = [head + ("compatible" if self.compatible else "NOT compatible")]
        lines += [f"  incompatible: {p}" for p in self.problems]
        bad = self.problem_fields
        lines += [f"  added optional field {n!r}" for n in self.added if n not in bad]
        lines += [f"  removed optional field {n!r}" for n in self.removed if n not in bad]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def diff(old: Schema, new: Schema) -> SchemaDiff:
    """How ``new`` differs from ``old``, and whether their frames read each other's."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    va, vb = f"v{old.version}", f"v{new.version}"
    if va == vb:
        va, vb = f"v{old.version} (old)", f"v{new.version} (new)"
    problems: list[str] = []
    notes: list[str] = []
    bad: set[str] = set()
    for key in sorted(set(a) | set(b)):
        if key in _SKIPPED or a.get(key) == b.get(key):
            continue
        change = f"{key} {_show(a.get(key))} in {va}, {_show(b.get(key))} in {vb}"
        (problems if key in SCHEMA_LAYOUT_KEYS else notes).append(change)
    fa, fb = a["fields"], b["fields"]
    added = tuple(n for n in fb if n not in fa)
    removed = tuple(n for n in fa if n not in fb)
    for name, only, there in [(n, fb[n], vb) for n in added] + [(n, fa[n], va) for n in removed]:
        if only.get("required", True):
            missing = va if there == vb else vb
            problems.append(
                f"field {name!r} is required in {there} and {missing} does not declare it"
            )
            bad.add(name)
    for name in (n for n in fa if n in fb):
        for key in sorted(set(fa[name]) | set(fb[name])):
            x, y = fa[name].get(key), fb[name].get(key)
            if x == y:
                continue
            change = f"field {name!r}: {key} {_show(x)} in {va}, {_show(y)} in {vb}"
            if key in LAYOUT_KEYS:
                problems.append(change)
                bad.add(name)
            else:
                notes.append(change)
    return SchemaDiff(
        old.name,
        old.version,
        new.name,
        new.version,
        added,
        removed,
        tuple(problems),
        tuple(notes),
        frozenset(bad),
    )


def check_readable(reader: Schema, written: Schema) -> SchemaDiff:
    """The diff from the reader's schema to the one a frame was written under; a
    :class:`SchemaError` naming the field and both versions when the reader cannot read it."""
    d = diff(reader, written)
    if not d.compatible:
        raise SchemaError(
            f"schema {reader.name!r} v{reader.version} (the reader's, {reader.fingerprint}) "
            f"cannot read a frame written under {written.name!r} v{written.version} "
            f"({written.fingerprint}): " + "; ".join(d.problems)
        )
    return d
