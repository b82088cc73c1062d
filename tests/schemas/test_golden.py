"""Frames written by 1.0 are read by every later 1.x (``tests/golden/``, written by
``scripts/make_golden.py``): each decodes, bit for bit as 1.0 decoded it, with the schema it
carries and with the schema of that name bundled now, which may have gained optional fields or
stages since (the evolution rule) but nothing else."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

import py_wire
from py_wire.synth.registry import GENERATORS
from tests.schemas.golden import GOLDEN, MANIFEST, digests, read

ENTRIES: dict[str, Any] = json.loads(MANIFEST.read_text())


def test_every_bundled_schema_has_a_golden_frame() -> None:
    assert set(ENTRIES) == set(py_wire.bundled_schemas()) == set(GENERATORS)
    assert {p.name for p in GOLDEN.iterdir()} == {e["file"] for e in ENTRIES.values()} | {
        MANIFEST.name
    }


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_golden_frame_reads_as_written(name: str) -> None:
    entry = ENTRIES[name]
    frame = py_wire.Frame.from_buffer(read(entry["file"]))
    assert frame.num_rows == entry["num_rows"] and len(frame) == entry["nbytes"]
    frame.verify()  # the payload checksums 1.0 wrote
    own = py_wire.decode(frame, layout="list")
    assert digests(own) == entry["fields"]
    schema = frame.schema
    assert (schema.name, schema.version, schema.fingerprint) == (
        name,
        entry["version"],
        entry["fingerprint"],
    )


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_golden_frame_reads_with_the_schema_bundled_now(name: str) -> None:
    entry = ENTRIES[name]
    frame = py_wire.Frame.from_buffer(read(entry["file"]))
    current = py_wire.load_schema(name)
    # A SchemaError here means the bundled schema changed in a way 1.x promised it would not.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", py_wire.SchemaEvolutionWarning)
        warnings.simplefilter("always", py_wire.SchemaConflictWarning)
        out = py_wire.decode(frame, current, layout="list")
    # Bundled schemas gained optional fields and columns under their version: reported.
    conflicts = [w for w in caught if issubclass(w.category, py_wire.SchemaConflictWarning)]
    changed_in_place = (
        entry["version"] == current.version and entry["fingerprint"] != current.fingerprint
    )
    assert len(conflicts) == changed_in_place
    caught = [w for w in caught if w not in conflicts]
    dropped = {f for w in caught for f in w.message.extra_fields}  # type: ignore[union-attr]
    assert all(issubclass(w.category, py_wire.SchemaEvolutionWarning) for w in caught)
    assert dropped == set(entry["fields"]) - set(current.fields)
    assert set(out) == set(entry["fields"]) - dropped
    want = {k: v for k, v in entry["fields"].items() if k in out}
    assert digests(out) == want
