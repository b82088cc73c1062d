"""Schema evolution (what 1.x promises): a reader holding one version of a schema reads frames of
another version of the same name when the two differ only by optional fields or stages, and
reports the frame's fields it does not know; any other change is refused naming the field and
both versions. ``Schema.diff`` and ``py-wire schema diff`` say which."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import py_wire
from py_wire._dtypes import DTYPES
from py_wire.cli import main as cli
from py_wire.synth.registry import generate
from py_wire.testing import assert_batch_equal, batches, schemas

V1: dict[str, Any] = {
    "name": "evo",
    "version": 1,
    "sequence_field": "input_ids",
    "stages": ["generation", "train"],
    "fields": {
        "input_ids": {"tier": "per_token", "dtype": "int64"},
        "reward": {"tier": "scalar", "dtype": "float32"},
        "pixels": {"tier": "packed", "dtype": "float32", "shape": ["*", 4], "required": False},
    },
}


def schema(version: int, change: Any = None) -> py_wire.Schema:
    data = copy.deepcopy(V1)
    data["version"] = version
    if change is not None:
        change(data)
    return py_wire.Schema.from_dict(data)


def add_optional(data: dict[str, Any]) -> None:
    data["fields"]["logprobs"] = {
        "tier": "per_token",
        "dtype": "float32",
        "required": False,
        "stages": ["train"],
    }


def batch(with_logprobs: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "input_ids": [torch.tensor([1, 2, 3]), torch.tensor([4])],
        "reward": torch.tensor([1.0, -1.0]),
        "pixels": [torch.ones(2, 4), None],
    }
    if with_logprobs:
        out["logprobs"] = [torch.zeros(3), torch.ones(1)]
    return out


def batch_for(s: py_wire.Schema) -> dict[str, Any]:
    """:func:`batch` as schema ``s`` declares ``reward`` (tier, dtype, shape)."""
    b = batch(with_logprobs="logprobs" in s.fields)
    reward = s.fields["reward"]
    dtype = DTYPES[reward.dtype]
    if reward.tier == "per_token":
        b["reward"] = [torch.ones(3, dtype=dtype), torch.ones(1, dtype=dtype)]
    else:
        b["reward"] = torch.ones(2, *reward.shape, dtype=dtype)  # type: ignore[misc]
    return b


def test_a_reader_of_v1_reads_v2_frames_and_reports_the_added_field() -> None:
    v1, v2 = schema(1), schema(2, add_optional)
    frame = py_wire.encode(batch(with_logprobs=True), v2)
    with pytest.warns(py_wire.SchemaEvolutionWarning, match="logprobs") as caught:
        out = py_wire.decode(frame, v1)
    warning = caught[0].message
    assert isinstance(warning, py_wire.SchemaEvolutionWarning)
    assert warning.extra_fields == ("logprobs",)
    assert (warning.reader_version, warning.frame_version) == (1, 2)
    assert set(out) == {"input_ids", "reward", "pixels"}
    assert_batch_equal(out, batch(), v1)
    # Without a schema every field comes back, as the frame's own schema declares it.
    assert set(py_wire.decode(frame)) == {"input_ids", "reward", "pixels", "logprobs"}


def test_a_reader_of_v2_reads_v1_frames() -> None:
    v1, v2 = schema(1), schema(2, add_optional)
    frame = py_wire.encode(batch(), v1)
    out = py_wire.decode(frame, v2)  # no warning: the frame has nothing v2 lacks
    assert_batch_equal(out, batch(), v1)
    assert "logprobs" not in out
    # A stage v2 gives the field: the frame simply lacks it (optional).
    assert set(py_wire.decode(frame, v2, stage="train")) == {"input_ids", "reward", "pixels"}


def test_an_added_stage_is_compatible() -> None:
    def add_stage(data: dict[str, Any]) -> None:
        data["stages"].append("critic")

    v1, v2 = schema(1), schema(2, add_stage)
    assert v1.diff(v2).compatible and "critic" in str(v1.diff(v2))
    frame = py_wire.encode(batch(), v1)
    assert set(py_wire.decode(frame, v2, stage="critic")) == {"input_ids", "reward", "pixels"}
    with pytest.raises(py_wire.SchemaError, match="critic"):
        py_wire.decode(py_wire.encode(batch(), v2), v1, stage="critic")


def _dtype(data: dict[str, Any]) -> None:
    data["fields"]["reward"]["dtype"] = "float64"


def _tier(data: dict[str, Any]) -> None:
    data["fields"]["reward"]["tier"] = "per_token"


def _shape(data: dict[str, Any]) -> None:
    data["fields"]["reward"]["shape"] = [2]


def _wire(data: dict[str, Any]) -> None:
    data["fields"]["reward"].update(wire_dtype="bfloat16", lossy=True)


def _required_added(data: dict[str, Any]) -> None:
    data["fields"]["logprobs"] = {"tier": "per_token", "dtype": "float32"}


def _made_required(data: dict[str, Any]) -> None:
    data["fields"]["pixels"]["required"] = True


@pytest.mark.parametrize(
    ("change", "field", "why"),
    [
        (_dtype, "reward", 'dtype "float32" in v1, "float64" in v2'),
        (_tier, "reward", 'tier "scalar" in v1, "per_token" in v2'),
        (_shape, "reward", "shape [] in v1, [2] in v2"),
        (_wire, "reward", 'wire_dtype null in v1, "bfloat16" in v2'),
        (_required_added, "logprobs", "required in v2 and v1 does not declare it"),
        (_made_required, "pixels", "required false in v1, true in v2"),
    ],
)
def test_any_other_change_is_refused_naming_the_field_and_both_versions(
    change: Any, field: str, why: str
) -> None:
    v1, v2 = schema(1), schema(2, change)
    found = v1.diff(v2)
    assert not found.compatible and field in found.problem_fields
    assert any(why in p for p in found.problems), found.problems
    # Either direction: the reader of v1 refuses v2's frames and the other way round.
    for reader, writer in ((v1, v2), (v2, v1)):
        frame = py_wire.encode(batch_for(writer), writer)
        with pytest.raises(py_wire.SchemaError) as raised:
            py_wire.decode(frame, reader)
        message = str(raised.value)
        assert f"{field!r}" in message
        assert f"v{reader.version} (the reader's" in message
        assert f"'evo' v{writer.version}" in message


def test_another_schema_name_is_refused() -> None:
    other = py_wire.Schema.from_dict({**copy.deepcopy(V1), "name": "other"})
    with pytest.raises(py_wire.SchemaError, match="not 'other' v1"):
        py_wire.decode(py_wire.encode(batch(), schema(1)), other)
    assert not schema(1).diff(other).compatible


def test_identical_and_noted_changes() -> None:
    assert schema(1).diff(schema(1)).identical
    assert "identical" in str(schema(1).diff(schema(1)))

    def describe(data: dict[str, Any]) -> None:
        data["fields"]["reward"]["description"] = "the group's reward"

    found = schema(1).diff(schema(2, describe))
    assert found.compatible and not found.identical
    assert found.notes == ('field \'reward\': description "" in v1, "the group\'s reward" in v2',)


def test_cli_diff_says_compatible_or_not_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def toml(s: py_wire.Schema, name: str) -> Path:
        path = tmp_path / name
        lines = [f'name = "{s.name}"', f"version = {s.version}", 'sequence_field = "input_ids"']
        lines.append(f"stages = {list(s.stages)!r}".replace("'", '"'))
        for fname, f in s.fields.items():
            lines += [f"[fields.{fname}]", f'tier = "{f.tier}"', f'dtype = "{f.dtype}"']
            lines.append(f"shape = {list(f.shape)!r}".replace("'", '"'))
            lines.append(f"required = {str(f.required).lower()}")
        path.write_text("\n".join(lines) + "\n")
        return path

    old = toml(schema(1), "v1.toml")
    assert cli(["schema", "diff", str(old), str(toml(schema(2, add_optional), "v2.toml"))]) == 0
    out = capsys.readouterr().out
    assert "evo v1 -> evo v2: compatible" in out and "added optional field 'logprobs'" in out
    assert cli(["schema", "diff", str(old), str(toml(schema(2, _dtype), "bad.toml"))]) == 1
    out = capsys.readouterr().out
    assert "NOT compatible" in out and "field 'reward': dtype \"float32\" in v1" in out
    assert cli(["schema", "diff", "text_grpo", "text_grpo"]) == 0
    assert "identical" in capsys.readouterr().out


# -- generated pairs of versions ---------------------------------------------------------------

_NEW = "zz_added"


#: Each kind of change between two versions, and whether it keeps them compatible.
KINDS = {
    "add_optional": True,
    "add_stage": True,
    "drop_optional": True,
    "add_required": False,
    "flip_required": False,
    "dtype": False,
    "shape": False,
}


@st.composite
def _mutations(draw: st.DrawFn, data: dict[str, Any], kind: str) -> tuple[str, str | None]:
    """(mutation, the field a refusal must name) of ``kind`` on schema ``data``."""
    fields = data["fields"]
    named = (data.get("sequence_field"), data.get("lengths_field"))
    optional = [n for n, f in fields.items() if not f.get("required", True) and n not in named]
    plain = [n for n in fields if n != data.get("sequence_field")]
    if kind in ("add_optional", "add_stage"):
        return kind, None
    if kind == "add_required":
        return kind, _NEW
    assume(optional if kind == "drop_optional" else plain)
    if kind == "drop_optional":
        return f"{kind}:{draw(st.sampled_from(optional))}", None
    name = draw(st.sampled_from(plain))
    return f"{kind}:{name}", name


def _apply(data: dict[str, Any], mutation: str, tier: str) -> None:
    kind, _, name = mutation.partition(":")
    fields = data["fields"]
    if kind == "add_optional":
        fields[_NEW] = {"tier": tier, "dtype": "float32", "required": False}
        if tier == "packed":
            fields[_NEW]["shape"] = ["*"]
    elif kind == "add_required":
        fields[_NEW] = {"tier": "scalar", "dtype": "float32"}
    elif kind == "add_stage":
        data["stages"] = [*data["stages"], "zz_stage"]
    elif kind == "drop_optional":
        del fields[name]
    elif kind == "flip_required":
        fields[name]["required"] = not fields[name].get("required", True)
    elif kind == "dtype":
        f = fields[name]
        f["dtype"] = "int16" if f["dtype"] != "int16" else "int32"
        f.update(wire_dtype=None, lossy=False, accept=[], pad_value=0)
        f.pop("encoding", None)
    elif kind == "shape":
        f = fields[name]
        f["shape"] = [*f["shape"], 3]
        f.pop("encoding", None)


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=8)
@given(data=st.data())
def test_generated_pairs_of_versions(kind: str, data: st.DataObject) -> None:
    old = data.draw(schemas(max_fields=4), label="old")
    dumped = old.model_dump(mode="json")
    assume(_NEW not in dumped["fields"] and "zz_stage" not in dumped["stages"])
    mutation, field = data.draw(_mutations(dumped, kind), label="mutation")
    compatible = KINDS[kind]
    tier = data.draw(st.sampled_from(["scalar", "packed"]), label="added tier")
    changed = copy.deepcopy(dumped)
    changed["version"] = old.version + 1
    _apply(changed, mutation, tier)
    try:
        new = py_wire.Schema.from_dict(changed)
    except (py_wire.SchemaError, ValueError):
        assume(False)  # the mutation broke another rule (a contract, a lengths field)
        raise
    forward, backward = old.diff(new), new.diff(old)
    assert forward.compatible == backward.compatible == compatible, (mutation, forward.problems)
    if not compatible:
        assert field in forward.problem_fields and field in backward.problem_fields
    # Frames of each version, read by the other.
    for writer, reader in ((old, new), (new, old)):
        b = data.draw(batches(writer), label=f"batch v{writer.version}")
        frame = py_wire.encode(b, writer)
        if not compatible:
            with pytest.raises(py_wire.SchemaError, match=f"{field!r}"):
                py_wire.decode(frame, reader)
            continue
        extra = [f.name for f in frame.layout.fields if f.name not in reader.fields]
        if extra:
            with pytest.warns(py_wire.SchemaEvolutionWarning) as caught:
                out = py_wire.decode(frame, reader, layout="list")
            assert caught[0].message.extra_fields == tuple(extra)  # type: ignore[union-attr]
        else:
            out = py_wire.decode(frame, reader, layout="list")
        kept = [n for n in writer.fields if n in reader.fields]
        assert_batch_equal(out, b, writer, fields=kept)
        assert not set(out) - set(reader.fields) - {"lengths"}


def _qwen_without_contracts(version: int) -> py_wire.Schema:
    data = py_wire.load_schema("qwen2_5_vl").model_dump(mode="json")
    data["contracts"] = []
    data["version"] = version
    return py_wire.Schema.from_dict(data)


@pytest.mark.parametrize("version", [1, 2])
def test_the_readers_contracts_are_checked_on_a_frame_written_without_them(
    version: int,
) -> None:
    # Written under a copy of qwen2_5_vl without its contracts, row 2's image placeholders one
    # token short: its encode never checked them, so the reader's decode must.
    writer = _qwen_without_contracts(version)
    broken = generate("qwen2_5_vl", 4, misalign_row=2)
    frame = py_wire.encode(broken, writer)
    with pytest.raises(py_wire.ContractError, match="row 2") as raised:
        py_wire.decode(frame, "qwen2_5_vl")
    assert raised.value.row == 2
    assert "image_placeholders" in str(raised.value)
    # A stage that does not carry the media is not held to the contract (as encode's stages).
    same_version = version == 1
    with pytest.warns(py_wire.SchemaConflictWarning) if same_version else contextlib.nullcontext():
        out = py_wire.decode(frame, "qwen2_5_vl", stage="generation")
    assert "pixel_values" not in out


def test_a_frame_that_keeps_the_readers_contracts_decodes() -> None:
    writer = _qwen_without_contracts(2)
    good = generate("qwen2_5_vl", 4)
    out = py_wire.decode(py_wire.encode(good, writer), "qwen2_5_vl")
    assert_batch_equal(good, out, py_wire.load_schema("qwen2_5_vl"))


def test_another_schema_of_the_frames_name_and_version_is_reported() -> None:
    def describe(data: dict[str, Any]) -> None:
        data["fields"]["reward"]["description"] = "edited, version not bumped"

    frame = py_wire.encode(batch(), schema(1, describe))
    with pytest.warns(py_wire.SchemaConflictWarning, match="'evo' v1") as caught:
        out = py_wire.decode(frame, schema(1))
    warning = caught[0].message
    assert isinstance(warning, py_wire.SchemaConflictWarning)
    assert (warning.name, warning.version) == ("evo", 1)
    assert warning.reader_fingerprint == schema(1).fingerprint
    assert warning.frame_fingerprint == frame.schema.fingerprint != warning.reader_fingerprint
    assert torch.equal(out["reward"], batch()["reward"])


def _readers() -> list[Any]:
    from py_wire import trainer
    from py_wire.interop import nemo_rl

    return [
        py_wire.decode,
        lambda frame: list(trainer.iter_micro_batches(frame, 2)),
        nemo_rl.from_frame,
    ]


@pytest.mark.parametrize("reader", range(3), ids=["decode", "iter_micro_batches", "nemo_rl"])
def test_a_frame_wrapped_under_a_readers_schema_is_checked_against_its_contracts(
    reader: int,
) -> None:
    # Frame.from_buffer(data, schema=R): every reader of the frame reads bytes checked against
    # R's contracts, not only decode(frame, schema=R). Row 2's placeholders are one token short.
    writer = _qwen_without_contracts(2)
    data = bytes(memoryview(py_wire.encode(generate("qwen2_5_vl", 4, misalign_row=2), writer)))
    read = _readers()[reader]
    with pytest.raises(py_wire.ContractError, match="row 2") as raised:
        read(py_wire.Frame.from_buffer(data, schema="qwen2_5_vl"))
    assert raised.value.row == 2
    good = bytes(memoryview(py_wire.encode(generate("qwen2_5_vl", 4), writer)))
    read(py_wire.Frame.from_buffer(good, schema="qwen2_5_vl"))


def test_a_frame_wrapped_under_a_conflicting_schema_is_reported() -> None:
    from py_wire.interop import verl as pw_verl

    def describe(data: dict[str, Any]) -> None:
        data["fields"]["reward"]["description"] = "edited, version not bumped"

    data = bytes(memoryview(py_wire.encode(batch(), schema(1, describe))))
    with pytest.warns(py_wire.SchemaConflictWarning, match="'evo' v1") as caught:
        frame = py_wire.Frame.from_buffer(data, schema=schema(1))
    warning = caught[0].message
    assert isinstance(warning, py_wire.SchemaConflictWarning)
    assert warning.reader_fingerprint == schema(1).fingerprint
    assert torch.equal(py_wire.decode(frame)["reward"], batch()["reward"])
    # verl's reader, over a verl frame, as the others.
    verl_schema = py_wire.load_schema("verl/text").model_dump(mode="json")
    verl_schema["description"] = "edited, version not bumped"
    data = bytes(memoryview(py_wire.encode(generate("verl/text", 2), "verl/text")))
    with pytest.warns(py_wire.SchemaConflictWarning):
        frame = py_wire.Frame.from_buffer(data, schema=py_wire.Schema.from_dict(verl_schema))
    pw_verl.from_frame(frame)
