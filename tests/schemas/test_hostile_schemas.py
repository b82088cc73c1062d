"""Hostile and careless schemas: every one is a ``SchemaError`` at load naming the file and the
field (or a ``FrameError`` when it arrives inside a frame), never a schema that loads wrong and
never another exception type. The field rules have one owner, the codec: the loader and the
encoder accept and reject the same field declarations."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest
import torch

import py_wire
from py_wire import BatchError, FrameError, SchemaError, WireError, _native
from py_wire.cli import main
from py_wire.synth.registry import generate

# -- schema files that load but should not -----------------------------------------------------

BASE = """
name = "hostile"
sequence_field = "input_ids"

[fields.input_ids]
tier = "per_token"
dtype = "int64"

[fields.pixel_values]
tier = "packed"
dtype = "float32"
shape = ["*", 1176]

[fields.image_grid_thw]
tier = "packed"
dtype = "int64"
shape = ["*", 3]

[fields.imgs_sizes]
tier = "packed"
dtype = "int64"
shape = ["*", 2]

[fields.advantages]
tier = "per_token"
dtype = "float32"
"""

GRID = """
[[contracts]]
name = "images"
media_field = "pixel_values"
token_id = 7
count = "grid_thw"
grid_field = "image_grid_thw"
"""

SIZES = """
[[contracts]]
name = "images"
media_field = "pixel_values"
token_id = 7
count = "image_size"
sizes_field = "imgs_sizes"
"""


def field(name: str, body: str) -> str:
    return f"\n[fields.{name}]\n{body}\n"


def test_the_base_schemas_load(tmp_path: Path) -> None:
    """The hostile cases below are one edit away from these valid schemas."""
    for extra in ("", GRID, SIZES):
        path = tmp_path / "ok.toml"
        path.write_text(BASE + extra)
        py_wire.load_schema(path)


# (case id, schema text, the words the error must name besides the file)
BAD_SCHEMAS = [
    ("newline_in_name", BASE + field('"abc\\n"', 'tier = "scalar"\ndtype = "int64"'), ["abc"]),
    ("leading_digit", BASE + field('"1abc"', 'tier = "scalar"\ndtype = "int64"'), ["1abc"]),
    ("dunder_name", BASE + field("__x", 'tier = "scalar"\ndtype = "int64"'), ["__x"]),
    ("dotted_name", BASE + field('"a.b"', 'tier = "scalar"\ndtype = "int64"'), ["a.b"]),
    ("long_name", BASE + field("a" * 129, 'tier = "scalar"\ndtype = "int64"'), ["a" * 129]),
    (
        "rank_9_packed",
        BASE + field("big", 'tier = "packed"\ndtype = "float32"\nshape = ["*", 1,1,1,1,1,1,1,1]'),
        ["big", "rank 9"],
    ),
    (
        "rank_8_per_token",
        BASE + field("big", 'tier = "per_token"\ndtype = "float32"\nshape = [1,1,1,1,1,1,1,1]'),
        ["big", "rank 8"],
    ),
    ("bool_dim", BASE + field("m", 'tier = "scalar"\ndtype = "int64"\nshape = [true]'), ["m"]),
    ("float_dim", BASE + field("m", 'tier = "scalar"\ndtype = "int64"\nshape = [2.0]'), ["m"]),
    (
        "huge_dim",
        BASE + field("m", 'tier = "scalar"\ndtype = "int64"\nshape = [9223372036854775808]'),
        ["m"],
    ),
    ("bool_required", BASE + field("m", 'tier = "scalar"\ndtype = "int64"\nrequired = 1'), ["m"]),
    (
        "pack_dim_out_of_range",
        BASE + field("m", 'tier = "packed"\ndtype = "int64"\nshape = ["*", 2]\npack_dim = -3'),
        ["m", "pack_dim -3"],
    ),
    (
        "widening_wire_cast",
        BASE + field("m", 'tier = "scalar"\ndtype = "bfloat16"\nwire_dtype = "float32"'),
        ["m", "bfloat16", "float32"],
    ),
    (
        "narrowing_not_lossy",
        BASE + field("m", 'tier = "scalar"\ndtype = "float32"\nwire_dtype = "bfloat16"'),
        ["m", "lossy"],
    ),
    (
        "integer_wire_cast",
        BASE + field("m", 'tier = "scalar"\ndtype = "int64"\nwire_dtype = "int32"\nlossy = true'),
        ["m", "int32"],
    ),
    # pad values that do not fit the dtype (300 as int8 would be 44, 1.5 as int64 would be 1)
    ("pad_300_int8", BASE + field("m", 'tier="per_token"\ndtype="int8"\npad_value=300'), ["300"]),
    ("pad_neg_uint8", BASE + field("m", 'tier="per_token"\ndtype="uint8"\npad_value=-1'), ["-1"]),
    ("pad_float_int", BASE + field("m", 'tier="per_token"\ndtype="int64"\npad_value=1.5'), ["1.5"]),
    (
        "pad_float_bool",
        BASE + field("m", 'tier="per_token"\ndtype="bool"\npad_value=0.5'),
        ["bool"],
    ),
    ("pad_2_bool", BASE + field("m", 'tier="per_token"\ndtype="bool"\npad_value=2'), ["bool"]),
    ("pad_bool_int", BASE + field("m", 'tier="per_token"\ndtype="int32"\npad_value=true'), ["int"]),
    (
        "pad_int64_overflow",
        BASE + field("m", 'tier="per_token"\ndtype="int64"\npad_value=9223372036854775808'),
        ["int64"],
    ),
    ("pad_f16", BASE + field("m", 'tier="per_token"\ndtype="float16"\npad_value=1e5'), ["float16"]),
    (
        "pad_wire_f16",  # fits float32, not the float16 stored on the wire
        BASE
        + field(
            "m",
            'tier="per_token"\ndtype="float32"\nwire_dtype="float16"\nlossy=true\npad_value=1e5',
        ),
        ["float16"],
    ),
    (
        "pad_inf_e4m3",
        BASE + field("m", 'tier="per_token"\ndtype="float8_e4m3fn"\npad_value=inf'),
        ["float8_e4m3fn"],
    ),
    # contracts
    ("merge_size_negative", BASE + GRID + "merge_size = -2\n", ["merge_size"]),
    ("merge_size_zero", BASE + GRID + "merge_size = 0\n", ["merge_size"]),
    ("merge_size_square_overflows", BASE + GRID + "merge_size = 4294967296\n", ["merge_size"]),
    ("patch_size_zero", BASE + SIZES + "patch_size = 0\n", ["patch_size"]),
    ("patch_size_negative", BASE + SIZES + "patch_size = -16\n", ["patch_size"]),
    ("ratio_nan", BASE + SIZES + "downsample_ratio = nan\n", ["downsample_ratio"]),
    ("ratio_inf", BASE + SIZES + "downsample_ratio = inf\n", ["downsample_ratio"]),
    ("ratio_zero", BASE + SIZES + "downsample_ratio = 0.0\n", ["downsample_ratio"]),
    ("ratio_negative", BASE + SIZES + "downsample_ratio = -0.5\n", ["downsample_ratio"]),
    ("ratio_bool", BASE + SIZES + "downsample_ratio = true\n", ["downsample_ratio"]),
    (
        "tokens_per_image_negative",
        BASE + GRID.replace('count = "grid_thw"', 'count = "fixed"') + "tokens_per_image = -1\n",
        ["tokens_per_image"],
    ),
    ("token_id_over_int64", BASE + GRID.replace("7", "9223372036854775808"), ["token_id"]),
    ("token_id_bool", BASE + GRID.replace("7", "true"), ["token_id"]),
    ("begin_is_placeholder", BASE + GRID + "begin_token_id = 7\n", ["begin_token_id"]),
    (
        "media_not_packed",
        BASE + GRID.replace('media_field = "pixel_values"', 'media_field = "advantages"'),
        ["advantages", "packed"],
    ),
    (
        "media_unknown",
        BASE + GRID.replace('media_field = "pixel_values"', 'media_field = "nope"'),
        ["nope"],
    ),
    (
        "grid_float",
        BASE.replace('dtype = "int64"\nshape = ["*", 3]', 'dtype = "float32"\nshape = ["*", 3]')
        + GRID,
        ["image_grid_thw", "float32"],
    ),
    (
        "grid_wrong_width",
        BASE.replace('shape = ["*", 3]', 'shape = ["*", 4]') + GRID,
        ["image_grid_thw", '["*", 4]'],
    ),
    (
        "sizes_not_packed",
        BASE + SIZES.replace('sizes_field = "imgs_sizes"', 'sizes_field = "input_ids"'),
        ["input_ids", "per_token"],
    ),
    (
        "count_field_float",
        BASE
        + field("num_tokens", 'tier = "packed"\ndtype = "float32"\nshape = ["*"]')
        + GRID.replace('count = "grid_thw"', 'count = "field"')
        + 'count_field = "num_tokens"\n',
        ["num_tokens", "float32"],
    ),
    ("count_rule_without_field", BASE + SIZES.replace('sizes_field = "imgs_sizes"', ""), ["sizes"]),
    ("duplicate_contract", BASE + GRID + GRID, ["images"]),
    (
        "contract_without_sequence",
        BASE.replace('sequence_field = "input_ids"', "")
        .replace('tier = "per_token"\ndtype = "int64"', 'tier = "scalar"\ndtype = "int64"')
        .replace('tier = "per_token"', 'tier = "scalar"')
        + GRID,
        ["sequence_field"],
    ),
    # the schema itself
    ("version_negative", "version = -1\n" + BASE, ["version"]),
    ("version_huge", "version = 2147483648\n" + BASE, ["version"]),
    ("version_bool", "version = true\n" + BASE, ["version"]),
    ("stage_not_a_string", BASE + field("m", 'tier="scalar"\ndtype="int64"\nstages=[1]'), ["m"]),
]


@pytest.mark.parametrize(
    ("text", "names"), [c[1:] for c in BAD_SCHEMAS], ids=[c[0] for c in BAD_SCHEMAS]
)
def test_bad_schema_is_a_schema_error_naming_file_and_field(
    tmp_path: Path, text: str, names: list[str]
) -> None:
    path = tmp_path / "hostile_schema.toml"
    path.write_text(text)
    with pytest.raises(SchemaError) as e:
        py_wire.load_schema(path)
    message = str(e.value)
    assert "hostile_schema.toml" in message
    for name in names:
        assert name in message, message


def test_pad_values_that_fit_load(tmp_path: Path) -> None:
    """The range checks are exact: the extremes of each dtype load, one past them does not."""
    ok = [
        ("int8", "-128"),
        ("int8", "127"),
        ("uint8", "255"),
        ("int64", "-9223372036854775808"),
        ("bool", "true"),
        ("bool", "1"),
        ("float16", "65504.0"),
        ("float16", "-inf"),
        ("float16", "nan"),
        ("float32", "-100"),
        ("bfloat16", "3.3895313892515355e38"),
        ("float8_e4m3fn", "448.0"),
    ]
    for dtype, pad in ok:
        schema = py_wire.Schema.from_toml(
            BASE + field("m", f'tier="per_token"\ndtype="{dtype}"\npad_value={pad}'), "ok.toml"
        )
        assert schema.fields["m"].pad_value == schema.fields["m"].pad_value or pad == "nan"
    for dtype, pad in [("int8", "128"), ("uint8", "256"), ("float16", "65505.0")]:
        with pytest.raises(SchemaError, match=dtype):
            py_wire.Schema.from_toml(
                BASE + field("m", f'tier="per_token"\ndtype="{dtype}"\npad_value={pad}'), "bad.toml"
            )


def test_negative_pack_dim_resolves_to_the_codecs_answer() -> None:
    schema = py_wire.Schema.from_toml(
        BASE + field("m", 'tier = "packed"\ndtype = "int64"\nshape = ["*", 2]\npack_dim = -1')
    )
    assert schema.fields["m"].pack_dim == 1
    assert schema._spec_dicts["m"]["pack_dim"] == 1


# -- one rule, one answer: the loader and the codec agree on every field rule -----------------

NAMES = ["x", "_x", "X9", "_", "1x", "__x", "x-y", "x.y", "abc\n", "", "é", "a" * 128, "a" * 129]
SHAPES: list[tuple[str, list[Any], int]] = [
    ("packed", [], 0),
    ("packed", ["*"], 0),
    ("packed", ["*", 3], 1),
    ("packed", ["*", 3], 2),
    ("packed", ["*", 1, 1, 1, 1, 1, 1, 1], 0),
    ("packed", ["*", 1, 1, 1, 1, 1, 1, 1, 1], 0),
    ("packed", [2, "*"], 1),
    ("per_token", [], 0),
    ("per_token", [3], 0),
    ("per_token", ["*"], 0),
    ("per_token", [1] * 7, 0),
    ("per_token", [1] * 8, 0),
    ("per_token", [], 1),
    ("scalar", [], 0),
    ("scalar", [2, 2], 0),
    ("scalar", ["*"], 0),
    ("scalar", [1] * 8, 0),
    ("scalar", [], 1),
]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
CASTS = [(a, b) for a in FLOATS for b in FLOATS] + [
    ("int64", "int32"),
    ("int32", "int64"),
    ("bool", "uint8"),
    ("float32", "complex64"),
    ("complex128", "complex64"),
    ("float32", "float8_e4m3fn"),
]


def _cases() -> list[dict[str, Any]]:
    cases = [{"name": n, "tier": "scalar", "dtype": "int64", "shape": []} for n in NAMES]
    cases += [
        {"name": "f", "tier": t, "dtype": "float32", "shape": s, "pack_dim": p}
        for t, s, p in SHAPES
    ]
    cases += [
        {"name": "f", "tier": "packed", "dtype": a, "wire_dtype": b, "shape": ["*", 2]}
        for a, b in CASTS
    ]
    return cases


def _loader_accepts(decl: dict[str, Any]) -> bool:
    name = decl["name"]
    body = {k: v for k, v in decl.items() if k != "name"}
    body["lossy"] = True  # a schema-only fact; its rule is tested below
    fields = {name: body}
    if name != "input_ids":
        fields["input_ids"] = {"tier": "per_token", "dtype": "int64"}
    data = {"name": "parity", "sequence_field": "input_ids", "fields": fields}
    try:
        py_wire.Schema.from_dict(data)
    except SchemaError:
        return False
    return True


def _codec_accepts(decl: dict[str, Any]) -> bool:
    """Hands the declaration to the encoder as a field spec (the frame's field-table form), with
    a one-row input of the right shape: a SchemaError is the codec's FieldSpec rules refusing."""
    spec = {**decl, "shape": [None if d == "*" else d for d in decl["shape"]]}
    if spec.get("wire_dtype") in (None, spec["dtype"]):
        spec.pop("wire_dtype", None)
    # Never more dims than an input may have: an over-rank spec must fail on its own rule.
    limit = 8 if spec["tier"] == "packed" else 7
    dims = [1 if d is None else d for d in spec["shape"]][:limit]
    dtype = getattr(torch, spec["dtype"])
    seq = '{"name": "seq", "tier": "per_token", "dtype": "int64", "shape": []}'
    fields: list[tuple[str, str, Any, Any]] = [
        ("seq", "rows", [torch.zeros(1, dtype=torch.int64)], None)
    ]
    name = spec["name"]
    if spec["tier"] == "scalar":
        fields.append((name, "dense", torch.zeros([1, *dims], dtype=dtype), None))
    elif spec["tier"] == "per_token":
        fields.append((name, "rows", [torch.zeros([1, *dims], dtype=dtype)], None))
    else:
        fields.append((name, "rows", [torch.zeros(dims, dtype=dtype)], None))
    try:
        codec = _native.Codec([seq, json.dumps(spec)], [], "seq", None, {})
        _native.encode(codec, fields)
    except SchemaError:
        return False
    return True


NARROWING_FLOAT_CASTS = {
    ("float32", "float16"),
    ("float32", "bfloat16"),
    ("float64", "float32"),
    ("float64", "float16"),
    ("float64", "bfloat16"),
}


def _documented_verdict(decl: dict[str, Any]) -> bool:
    """The field rules as the README's schema section states them, written out independently of
    the codec: a name is an identifier of at most 128 characters not starting with ``__``
    (reserved for the frame's own tensors); a packed field has 1 to 8 dims, one of them its
    pack dim; per-token and scalar fields add one leading dim (tokens, rows) to at most 7 fixed
    dims and have no pack dim; a wire dtype is the dtype itself or a narrowing float cast."""
    name, tier, shape = decl["name"], decl["tier"], decl["shape"]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name) or name.startswith("__"):
        return False
    pack_dim = decl.get("pack_dim", 0)
    if tier == "packed":
        if not 1 <= len(shape) <= 8 or not 0 <= pack_dim < len(shape):
            return False
    elif "*" in shape or len(shape) > 7 or pack_dim != 0:
        return False
    wire = decl.get("wire_dtype", decl["dtype"])
    return wire == decl["dtype"] or (decl["dtype"], wire) in NARROWING_FLOAT_CASTS


@pytest.mark.parametrize("decl", _cases(), ids=lambda d: repr(d)[:60])
def test_loader_and_codec_follow_the_documented_field_rules(decl: dict[str, Any]) -> None:
    """The schema loader (``Schema.from_dict``) and the encoder (a field spec as a frame's field
    table carries it) each give the answer the written rules give."""
    expected = _documented_verdict(decl)
    assert _loader_accepts(decl) == expected, f"loader; documented rule says {expected}"
    assert _codec_accepts(decl) == expected, f"codec; documented rule says {expected}"


def test_field_rule_cases_cover_both_answers() -> None:
    answers = {(d["name"], json.dumps(d)): _loader_accepts(d) for d in _cases()}
    assert any(answers.values()) and not all(answers.values())
    # The two disagreements of old: a widening cast and a leading digit, both refused now.
    assert not _codec_accepts({"name": "1x", "tier": "scalar", "dtype": "int64", "shape": []})
    bf16_to_f32 = {"name": "f", "tier": "scalar", "dtype": "bfloat16", "wire_dtype": "float32"}
    assert not _codec_accepts({**bf16_to_f32, "shape": []})


def test_lossy_is_the_codecs_rule_too() -> None:
    decl = {
        "name": "f",
        "tier": "scalar",
        "dtype": "float32",
        "wire_dtype": "bfloat16",
        "shape": [],
    }
    with pytest.raises(SchemaError, match="lossy"):
        _native.validate_field_spec(json.dumps(decl))
    _native.validate_field_spec(json.dumps({**decl, "lossy": True}))
    assert py_wire._schema.WIRE_CASTS == {
        ("float32", "bfloat16"): True,
        ("float32", "float16"): True,
        ("float64", "float32"): True,
        ("float64", "bfloat16"): True,
        ("float64", "float16"): True,
    }


def test_contract_rules_are_checked_at_encode_too() -> None:
    """A contract JSON that skipped the loader (merge_size 0) is refused by the codec before it
    is used, not divided by."""
    schema = py_wire.load_schema("qwen2_5_vl")
    bad = json.loads(schema._contracts_json[0])
    bad["merge_size"] = 0
    frame = py_wire.encode(generate("qwen2_5_vl", 2), schema)
    specs = list(schema._specs.values())
    with pytest.raises(SchemaError, match="merge_size"):
        _native.Codec(specs, [json.dumps(bad)], schema.sequence_field, None, {})
    # the frame is fine, and the schema's own codec checks it
    _native.check_contracts(frame, schema._codec_for(None))


# -- schema files that crash the parser or the reader ------------------------------------------


def test_deeply_nested_toml(tmp_path: Path) -> None:
    for text in (
        "a = " + "[" * 5000 + "]" * 5000,
        "a = " + "{b = " * 5000 + "1" + "}" * 5000,
        "a = " + "[" * 33 + "]" * 33,
    ):
        path = tmp_path / "deep.toml"
        path.write_text(text)
        with pytest.raises(SchemaError, match=r"deep\.toml: nested deeper than 32"):
            py_wire.load_schema(path)


def test_nesting_ignores_brackets_in_strings_and_comments() -> None:
    decoy = "[" * 40
    text = f'description = "{decoy}"\n# {decoy}\nversion = 1\n' + BASE.replace(
        'name = "hostile"', f"name = '''{decoy}'''"
    )
    assert py_wire.Schema.from_toml(text).name == decoy
    # An escaped quote does not end the string early.
    assert py_wire.Schema.from_toml('description = "\\"' + decoy + '"\n' + BASE).name == "hostile"


def test_not_utf8_not_a_file_too_big(tmp_path: Path) -> None:
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'name = "caf\xe9"\n' + BASE.encode())
    with pytest.raises(SchemaError, match=r"latin\.toml is not UTF-8 text: byte 11 is 0xe9"):
        py_wire.load_schema(latin)
    folder = tmp_path / "x.toml"
    folder.mkdir()
    with pytest.raises(SchemaError, match=r"x\.toml is not a regular file"):
        py_wire.load_schema(folder)
    big = tmp_path / "big.toml"
    big.write_text(BASE + "# " + "a" * (1 << 20) + "\n")
    with pytest.raises(SchemaError, match="larger than"):
        py_wire.load_schema(big)
    with pytest.raises(SchemaError, match="does not exist"):
        py_wire.load_schema(tmp_path / "missing.toml")
    with pytest.raises(SchemaError):
        py_wire.load_schema("a\0b.toml")


def _write(path: Path, data: str | bytes | None) -> Path:
    if data is None:
        path.mkdir()
    elif isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


CLI_HOSTILE = {
    "deep": ("deep.toml", "a = " + "[" * 5000 + "]" * 5000),
    "latin1": ("latin.toml", b"name = '\xff'"),
    "directory": ("x.toml", None),
    "newline_name": ("n.toml", BASE + field('"abc\\n"', 'tier="scalar"\ndtype="int64"')),
    "not_toml": ("t.toml", "[[[\n"),
}


@pytest.mark.parametrize("case", list(CLI_HOSTILE))
def test_cli_schema_check_hostile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    name, data = CLI_HOSTILE[case]
    path = _write(tmp_path / name, data)
    assert main(["schema", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert path.name in err


def test_cli_describes_a_count_field_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "counted.toml"
    path.write_text(
        BASE
        + field("num_tokens", 'tier = "packed"\ndtype = "int64"\nshape = ["*"]')
        + GRID.replace('count = "grid_thw"', 'count = "field"')
        + 'count_field = "num_tokens"\n'
    )
    assert main(["schema", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "count field: per image, the token count stored in 'num_tokens'" in out
    assert "of None" not in out and "H//" not in out


# -- schema JSON inside a frame ----------------------------------------------------------------


@pytest.fixture(scope="module")
def real_frame() -> bytes:
    return bytes(py_wire.encode(generate("qwen2_5_vl", 2), "qwen2_5_vl"))


def with_schema_text(frame: bytes, text: str, fingerprint: str | None = None) -> bytes:
    """The frame with its embedded schema replaced by ``text`` and, unless given, a fingerprint
    that matches it; the data section is kept, the header re-padded to 64-byte alignment."""
    n = struct.unpack("<Q", frame[:8])[0]
    header = json.loads(frame[8 : 8 + n])
    if fingerprint is None:
        fingerprint = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    header["__metadata__"]["py_wire.schema"] = text
    header["__metadata__"]["py_wire.fingerprint"] = fingerprint
    raw = json.dumps(header).encode()
    raw += b" " * ((-(8 + len(raw))) % 64)
    assert (8 + len(raw)) % 64 == 0
    return struct.pack("<Q", len(raw)) + raw + frame[8 + n :]


def _canonical(real_frame: bytes) -> dict[str, Any]:
    return json.loads(py_wire.Frame.from_buffer(real_frame).metadata["py_wire.schema"])


def _dump(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def hostile_texts(real_frame: bytes) -> dict[str, tuple[str, str | None]]:
    schema = _canonical(real_frame)
    name_newline = json.loads(_dump(schema))
    name_newline["fields"]["abc\n"] = name_newline["fields"]["input_lengths"]
    return {
        "deep_brackets": ("[" * 100_000, None),
        "deep_but_closed": ("[" * 100 + "]" * 100, None),
        "version_5000_digits": (
            _dump(schema).replace('"version":1', '"version":' + "9" * 5000),
            None,
        ),
        "version_out_of_range": (_dump({**schema, "version": 2**40}), None),
        "too_big": (_dump({**schema, "description": "a" * (1 << 20)}), None),
        "not_canonical": (json.dumps(schema), None),
        "not_json": ("{", None),
        "not_an_object": ("[]", None),
        "field_name_newline": (_dump(name_newline), None),
        "fingerprint_mismatch": (_dump(schema), "sha256:" + "0" * 64),
    }


ENTRY_POINTS = {
    "decode": lambda b: py_wire.decode(b),
    "decode_with_schema": lambda b: py_wire.decode(b, "qwen2_5_vl"),
    "check_contracts": lambda b: py_wire.check_contracts(py_wire.Frame.from_buffer(b)),
    "select_schema": lambda b: py_wire.take_rows(py_wire.Frame.from_buffer(b), [0]).schema,
    "frame_schema": lambda b: py_wire.Frame.from_buffer(b).schema,
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_hostile_embedded_schema_is_a_frame_error(real_frame: bytes, entry: str) -> None:
    call = ENTRY_POINTS[entry]
    for case, (text, fingerprint) in hostile_texts(real_frame).items():
        try:
            data = with_schema_text(real_frame, text, fingerprint)
            py_wire.Frame.from_buffer(data)
        except FrameError:
            continue  # the codec refused the header already (e.g. its size): fine too
        with pytest.raises(FrameError):
            call(data)
        # And never anything outside the hierarchy, nor an answer.
        try:
            call(data)
        except WireError:
            pass
        else:  # pragma: no cover
            pytest.fail(f"{case}: {entry} accepted the frame")


def test_embedded_schema_fingerprint_is_checked_before_parsing(real_frame: bytes) -> None:
    data = with_schema_text(real_frame, "[" * 100_000, "sha256:" + "0" * 64)
    with pytest.raises(FrameError, match="does not match its fingerprint"):
        py_wire.Frame.from_buffer(data).schema  # noqa: B018
    data = with_schema_text(real_frame, "[" * 100_000)
    with pytest.raises(FrameError, match="nested deeper than 32"):
        py_wire.Frame.from_buffer(data).schema  # noqa: B018


def test_the_real_embedded_schema_still_reads(real_frame: bytes) -> None:
    text = _dump(_canonical(real_frame))
    data = with_schema_text(real_frame, text)
    assert py_wire.decode(data, "qwen2_5_vl").keys() == py_wire.decode(real_frame).keys()


def test_cli_inspect_hostile_schema(
    tmp_path: Path, real_frame: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    for case, (text, fingerprint) in hostile_texts(real_frame).items():
        path = tmp_path / f"{case}.safetensors"
        path.write_bytes(with_schema_text(real_frame, text, fingerprint))
        assert main(["inspect", str(path)]) == 1, case
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, (case, err[:300])
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    assert main(["inspect", str(folder)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


# -- other escapes ----------------------------------------------------------------------------


def test_bad_layout_is_a_wire_error(real_frame: bytes) -> None:
    with pytest.raises(WireError, match="layout must be 'nested', 'padded' or 'list', not 'bogus'"):
        py_wire.decode(real_frame, layout="bogus")  # type: ignore[arg-type]


def test_ragged_segments_whose_other_dims_differ() -> None:
    pt = py_wire.PackedTensor([torch.zeros(2, 3), [torch.zeros(1, 3), torch.zeros(4, 5)]])
    with pytest.raises(BatchError) as e:
        pt.as_tensor()
    message = str(e.value)
    for part in ("row 1 segment 1", "[4, 5]", "row 0 segment 0", "[2, 3]", "dim 1 is 5, not 3"):
        assert part in message, message
    assert "pad_to_max_shape=True" in message
    assert pt.as_tensor(pad_to_max_shape=True).shape == (7, 5)
    # .segments lists them: nothing to concatenate, nothing to fail
    assert [list(t.shape) for t in pt.segments] == [[2, 3], [1, 3], [4, 5]]
    with pytest.raises(BatchError, match="rank 3 differs from rank 2"):
        py_wire.PackedTensor([torch.zeros(2, 3), torch.zeros(2, 3, 1)]).as_tensor()
    with pytest.raises(BatchError, match="one rank"):
        py_wire.PackedTensor([torch.zeros(2, 3), torch.zeros(2, 3, 1)]).as_tensor(
            pad_to_max_shape=True
        )


def test_ragged_decoded_segments_name_rows() -> None:
    schema = py_wire.Schema.from_dict(
        {"name": "r", "fields": {"m": {"tier": "packed", "dtype": "float32", "shape": ["*", "*"]}}}
    )
    frame = py_wire.encode({"m": [torch.zeros(2, 3), None, torch.ones(1, 4)]}, schema)
    m = py_wire.decode(frame)["m"]
    with pytest.raises(BatchError, match=r"row 2 segment 0 \(shape \[1, 4\]\).*row 0 segment 0"):
        m.as_tensor()
    assert m.as_tensor(pad_to_max_shape=True).shape == (3, 4)
