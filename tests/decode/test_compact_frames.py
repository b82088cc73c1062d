"""Compact frames (issue 19): a header that names the schema by fingerprint
(``py_wire.schema_ref``) instead of embedding it. Same data section, bit for bit, as the
embedded form; its tensors listed in ``py_wire.tensors`` (format 3) over one ``__data`` byte
tensor, so stock safetensors still opens it; readable by a process that holds the schema, a
FrameError naming the fingerprint elsewhere; frame ops keep the form."""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch

import py_wire
from py_wire._schema import SCHEMA_REF_KEY
from py_wire.synth.registry import GENERATORS
from py_wire.testing import assert_batch_equal
from tests.helpers import small_text_batch
from tests.hostile.seeds import SMALL

TEXT = py_wire.load_schema("text_grpo")
REPO = Path(__file__).resolve().parents[2]


def header(frame: py_wire.Frame) -> tuple[int, dict]:
    """The header's length (8-byte prefix included) and its JSON."""
    raw = bytes(memoryview(frame)[:8])
    (n,) = struct.unpack("<Q", raw)
    return 8 + n, json.loads(bytes(memoryview(frame)[8 : 8 + n]))


def data_section(frame: py_wire.Frame) -> bytes:
    return bytes(memoryview(frame)[header(frame)[0] :])


def swap_ref(frame: py_wire.Frame, fingerprint: str) -> bytes:
    """The frame's bytes with its schema_ref replaced by ``fingerprint`` (same length)."""
    old = frame.metadata[SCHEMA_REF_KEY].encode()
    raw = bytes(frame)
    assert raw.count(old) == 1 and len(fingerprint) == len(old)
    return raw.replace(old, fingerprint.encode())


def small_batch(name: str) -> dict:
    gen = GENERATORS[name]
    return gen(2 if name.endswith("gemma3") else 3, seed=1, group_size=2, **SMALL.get(name, {}))


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
def test_round_trip_is_bit_exact_against_the_embedded_form(name):
    schema = py_wire.load_schema(name)
    batch = small_batch(name)
    embedded = py_wire.encode(batch, schema)
    compact = py_wire.encode(batch, schema, compact=True)
    assert compact.compact and not embedded.compact
    # The same data section, byte for byte: only the header differs.
    assert data_section(compact) == data_section(embedded)
    assert header(compact)[0] < header(embedded)[0]
    meta = compact.metadata
    assert meta[SCHEMA_REF_KEY] == schema.fingerprint
    assert not {"py_wire.schema", "py_wire.fingerprint", "py_wire.fields"} & meta.keys()
    # Read back from bytes (a fresh parse, the schema held by load_schema above).
    again = py_wire.Frame.from_buffer(bytes(compact))
    assert again.schema == schema and again.num_rows == embedded.num_rows
    assert [f.name for f in again.layout.fields] == [f.name for f in embedded.layout.fields]
    for layout in (None, "list"):
        got = py_wire.decode(bytes(compact), layout=layout)
        assert_batch_equal(got, batch, schema)
        want = py_wire.decode(embedded, layout=layout)
        assert got.keys() == want.keys()
    py_wire.check_contracts(again)
    assert py_wire.encoded_nbytes(batch, schema, compact=True) == len(compact)
    parts = py_wire.encode_parts(batch, schema, compact=True)
    assert b"".join(bytes(p) for p in parts) == bytes(compact)


def listed(frame: py_wire.Frame) -> list[tuple[str, str, list[int]]]:
    """A compact header's tensor list, as (name, dtype, shape) in data order."""
    text = header(frame)[1]["__metadata__"]["py_wire.tensors"]
    out = []
    for item in text.split(";"):
        name, dtype, dims = item.split(":")
        out.append((name, dtype, [int(d) for d in dims.split(",")] if dims else []))
    return out


def table_of(frame: py_wire.Frame) -> list[tuple[str, str, list[int]]]:
    """An embedded header's tensors but padding, as (name, dtype, shape) in data order."""
    entries = header(frame)[1]
    entries.pop("__metadata__")
    named = [(k, v) for k, v in entries.items() if not k.startswith("__pad.")]
    named.sort(key=lambda kv: (kv[1]["data_offsets"], kv[0]))
    return [(k, v["dtype"], v["shape"]) for k, v in named]


def test_a_one_row_text_grpo_frame_is_small():
    """Issue 19's acceptance: a 1-row compact text_grpo frame has at most 512 bytes of header
    (the 8-byte length included): the schema named, the tensors listed without padding
    entries. The list stands for exactly the embedded form's table."""
    batch = small_text_batch((1,))
    compact = py_wire.encode(batch, TEXT, compact=True)
    embedded = py_wire.encode(batch, TEXT)
    size, table = header(compact)
    assert size <= 512, (size, table)
    assert table.keys() == {"__metadata__", "__data"}
    assert table["__data"] == {
        "dtype": "U8",
        "shape": [len(compact) - size],
        "data_offsets": [0, len(compact) - size],
    }
    assert listed(compact) == table_of(embedded)
    assert table["__metadata__"]["py_wire.format"] == "3"
    # Issue 17: the embedded header describes the fields once, by its schema (3,584 bytes
    # with the field table and sequence field beside it, 2,944 without; 3,392 since issue 30
    # declared the optional policy_version and token_policy_versions fields).
    assert (
        not {"py_wire.fields", "py_wire.sequence_field"}
        & header(embedded)[1]["__metadata__"].keys()
    )
    assert header(embedded)[0] <= 3392, header(embedded)[0]
    # A row of a VLM schema: the list grows with the tensors, not with the schema.
    qwen = py_wire.load_schema("qwen2_5_vl")
    vlm = small_batch("qwen2_5_vl")
    one = py_wire.take_rows(py_wire.encode(vlm, qwen, compact=True), [0])
    assert header(one)[0] * 4 <= header(py_wire.take_rows(py_wire.encode(vlm, qwen), [0]))[0]


def test_stock_safetensors_opens_a_compact_frame():
    """As one byte tensor, the data section; embedding the schema gives the fields' tensors."""
    batch = small_text_batch()
    compact = py_wire.encode(batch, TEXT, compact=True)
    tensors = safetensors.torch.load(bytes(compact))
    assert tensors.keys() == {"__data"}
    assert tensors["__data"].numpy().tobytes() == data_section(compact)
    embedded = safetensors.torch.load(bytes(py_wire.concat([compact], compact=False)))
    assert torch.equal(embedded["reward"], batch["reward"])
    assert torch.equal(embedded["input_ids"], torch.cat(batch["input_ids"]))


def rebuilt(frame: py_wire.Frame, table: dict, **meta: str) -> bytes:
    """``table`` (a header's JSON, edited) over ``frame``'s data section, metadata updated."""
    table["__metadata__"].update(meta)
    text = json.dumps(table, separators=(",", ":")).encode()
    pad = (-(8 + len(text))) % 64
    return struct.pack("<Q", len(text) + pad) + text + b" " * pad + data_section(frame)


def test_formats_before_3_are_refused_and_forms_do_not_mix():
    """Only format 3 is read: a format-2 compact header (it kept the safetensors table) is
    refused by its version. A compact header must list its tensors, and only a compact header
    may."""
    batch = small_text_batch((3, 1, 4))
    compact = py_wire.encode(batch, TEXT, compact=True)
    embedded = py_wire.encode(batch, TEXT)
    table = header(embedded)[1]
    for key in ("py_wire.schema", "py_wire.fingerprint"):
        del table["__metadata__"][key]
    old = rebuilt(embedded, table, **{"py_wire.format": "2", SCHEMA_REF_KEY: TEXT.fingerprint})
    with pytest.raises(py_wire.FrameError, match=r'version "2" is not supported') as err:
        py_wire.Frame.from_buffer(old)
    assert err.value.expected == "3"
    with pytest.raises(py_wire.FrameError, match=r'lists its tensors in "py_wire\.tensors"'):
        py_wire.Frame.from_buffer(rebuilt(embedded, table, **{"py_wire.format": "3"}))
    mine = header(compact)[1]
    del mine["__metadata__"][SCHEMA_REF_KEY]
    mine["__metadata__"]["py_wire.schema"] = TEXT.canonical_json
    mine["__metadata__"]["py_wire.fingerprint"] = TEXT.fingerprint
    with pytest.raises(py_wire.FrameError, match="only compact frames list their tensors"):
        py_wire.Frame.from_buffer(rebuilt(compact, mine))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("input_ids:I64:", "input_ids:I32:"), "stored as int32"),
        (lambda s: s.replace(";reward:F32:3", ""), "covers"),
        (lambda s: s.replace("reward:F32:3", "reward:F32:4"), "shape"),
        (lambda s: s + ";extra:U8:0", "belongs to no field"),
        (lambda s: s.replace("reward", "input_ids"), "listed twice"),
        (lambda s: s.replace(":I64:4", ":I64:04"), "not a dim"),
    ],
)
def test_a_lying_tensor_list_is_a_frame_error(edit, message):
    compact = py_wire.encode(small_text_batch((3, 1, 4)), TEXT, compact=True)
    table = header(compact)[1]
    text = table["__metadata__"]["py_wire.tensors"]
    assert edit(text) != text
    with pytest.raises(py_wire.FrameError, match=message):
        py_wire.Frame.from_buffer(rebuilt(compact, table, **{"py_wire.tensors": edit(text)}))


def test_frame_ops_keep_compact_frames_compact():
    batch = small_text_batch((3, 1, 4, 1, 5))
    compact = py_wire.encode(batch, TEXT, compact=True, metadata={"step": "7"})
    embedded = py_wire.encode(batch, TEXT, metadata={"step": "7"})

    def ops(frame: py_wire.Frame) -> dict[str, list[py_wire.Frame]]:
        return {
            "take_rows": [py_wire.take_rows(frame, [4, 0, 0])],
            "chunk": py_wire.chunk(frame, 2),
            "split": py_wire.split(frame, [2, 3]),
            "shard": [py_wire.shard(frame, 1, 2)],
            "concat": [py_wire.concat([frame, frame])],
            "truncate": [py_wire.truncate(frame, 2)],
        }

    outputs, twins = ops(compact), ops(embedded)
    for op, frames in outputs.items():
        for got, want in zip(frames, twins[op], strict=True):
            assert got.compact, op
            assert data_section(got) == data_section(want), op
            if op != "truncate":  # truncate re-encodes, without the caller's metadata
                assert got.metadata["step"] == "7", op
            again = py_wire.Frame.from_buffer(bytes(got))
            assert_batch_equal(py_wire.decode(again), py_wire.decode(want), TEXT)


def test_concat_of_compact_and_embedded_takes_the_first_frames_form():
    batch = small_text_batch()
    compact = py_wire.encode(batch, TEXT, compact=True)
    embedded = py_wire.encode(batch, TEXT)
    assert py_wire.concat([compact, embedded]).compact
    assert not py_wire.concat([embedded, compact]).compact
    # compact= chooses the form: converting either way, same data section.
    to_embedded = py_wire.concat([compact], compact=False)
    to_compact = py_wire.concat([embedded], compact=True)
    assert not to_embedded.compact and to_compact.compact
    assert bytes(to_embedded) == bytes(embedded)
    assert bytes(to_compact) == bytes(compact)
    with pytest.raises(TypeError, match="compact"):
        py_wire.concat([compact], compact="yes")  # type: ignore[arg-type]


def test_checksums_cover_the_compact_header():
    batch = small_text_batch()
    compact = py_wire.encode(batch, TEXT, compact=True, checksum=True)
    assert compact.compact and compact.has_checksum
    compact.verify()
    py_wire.take_rows(compact, [2, 1]).verify()
    # Naming another (held) schema's fingerprint changes the header digest.
    other = py_wire.load_schema("qwen2_5_vl").fingerprint
    with pytest.raises(py_wire.FrameError):
        py_wire.decode(swap_ref(compact, other), verify=True)


def test_save_embeds_the_schema(tmp_path):
    batch = small_text_batch()
    compact = py_wire.encode(batch, TEXT, compact=True)
    path = tmp_path / "f.safetensors"
    py_wire.save(compact, path)
    loaded = py_wire.load(path)
    assert not loaded.compact
    assert bytes(loaded) == bytes(py_wire.encode(batch, TEXT))


def test_pickle_and_decode_schema_argument():
    batch = small_text_batch()
    compact = py_wire.encode(batch, TEXT, compact=True)
    again = pickle.loads(pickle.dumps(compact, protocol=5))
    assert again.compact and again.schema == TEXT
    assert_batch_equal(py_wire.decode(bytes(compact), "text_grpo"), batch, TEXT)
    with pytest.raises(py_wire.SchemaError, match="text_grpo"):
        py_wire.decode(bytes(compact), "qwen2_5_vl")
    with pytest.raises(TypeError, match="schema"):
        py_wire.Frame.from_buffer(bytes(compact), schema=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compact"):
        py_wire.encode(batch, TEXT, compact=1)  # type: ignore[arg-type]


def test_unknown_fingerprint_is_a_frame_error_naming_it():
    compact = py_wire.encode(small_text_batch(), TEXT, compact=True)
    unknown = "sha256:" + "0" * 64
    data = swap_ref(compact, unknown)
    for read in (py_wire.Frame.from_buffer, py_wire.decode, lambda d: py_wire.take_rows(d, [0])):
        with pytest.raises(py_wire.FrameError, match=unknown) as info:
            read(data)
        assert info.value.kind == "unknown_schema"
        assert info.value.found == unknown
    not_a_fingerprint = swap_ref(compact, "sha256:" + "Z" * 64)
    with pytest.raises(py_wire.FrameError, match="not a schema fingerprint"):
        py_wire.Frame.from_buffer(not_a_fingerprint)


def test_a_process_that_never_loaded_the_schema():
    """In a fresh process: FrameError naming the fingerprint; ``schema=`` (or load_schema, or
    any embedded frame of the schema read first) makes the frame readable."""
    compact = py_wire.encode(small_text_batch(), TEXT, compact=True)
    embedded = py_wire.encode(small_text_batch(), TEXT)
    child = f"""
import sys, py_wire
data, embedded = sys.stdin.buffer.read().split(b"|SPLIT|")
try:
    py_wire.decode(data)
except py_wire.FrameError as e:
    assert {TEXT.fingerprint!r} in str(e), e
    print("refused")
frame = py_wire.Frame.from_buffer(data, schema="text_grpo")
print(frame.num_rows, frame.schema.name)
"""
    learn = """
import sys, py_wire
data, embedded = sys.stdin.buffer.read().split(b"|SPLIT|")
py_wire.decode(embedded)  # an embedded frame of the schema teaches the process its schema
print(py_wire.decode(data)["reward"].tolist())
"""
    for code, want in ((child, "refused\n3 text_grpo\n"), (learn, "[0.0, 1.0, 2.0]\n")):
        done = subprocess.run(
            [sys.executable, "-c", code],
            input=bytes(compact) + b"|SPLIT|" + bytes(embedded),
            capture_output=True,
            cwd=REPO,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode() == want


def test_a_lying_fingerprint_is_a_frame_error():
    """The header names schema X; its tensors are schema Y's."""
    qwen = py_wire.load_schema("qwen2_5_vl")
    vlm = py_wire.encode(small_batch("qwen2_5_vl"), qwen, compact=True)
    with pytest.raises(py_wire.FrameError, match=TEXT.fingerprint) as info:
        py_wire.Frame.from_buffer(swap_ref(vlm, TEXT.fingerprint))
    assert "belongs to no field" in str(info.value)
    # Same field names, one dtype changed: the held schema's layout disagrees.
    doubled = TEXT.model_dump(mode="json")
    doubled["fields"]["reward"]["dtype"] = "float64"
    doubled["name"] = "text_grpo_f64"
    other = py_wire.Schema.from_dict(doubled)
    py_wire.load_schema(other)
    text = py_wire.encode(small_text_batch(), TEXT, compact=True)
    with pytest.raises(py_wire.FrameError, match="reward"):
        py_wire.Frame.from_buffer(swap_ref(text, other.fingerprint))
    # A missing required tensor of the held schema's is no error of the frame's (optional
    # fields may be absent); tensors beyond it are.
    with pytest.raises(py_wire.FrameError):
        py_wire.decode(swap_ref(vlm, other.fingerprint))


def test_an_embedded_schema_that_disagrees_with_the_tensors_names_the_field():
    """Issue 17: the embedded form derives its field table from its schema, as the compact
    form does; a schema (with a matching fingerprint) whose layout the tensors break is a
    FrameError naming the field."""
    from tests.hostile.mutate import Parsed

    doubled = TEXT.model_dump(mode="json")
    doubled["fields"]["reward"]["dtype"] = "float64"
    doubled["name"] = "text_grpo_f64_embedded"
    other = py_wire.Schema.from_dict(doubled)
    parsed = Parsed.of(bytes(py_wire.encode(small_text_batch(), TEXT)))
    parsed.meta_set("py_wire.schema", other.canonical_json)
    parsed.meta_set("py_wire.fingerprint", other.fingerprint)
    with pytest.raises(py_wire.FrameError, match='field "reward" is stored as float32'):
        py_wire.Frame.from_buffer(parsed.build())


def test_compact_headers_refuse_embedded_keys():
    compact = py_wire.encode(small_text_batch(), TEXT, compact=True)
    raw = rebuilt(compact, header(compact)[1], **{"py_wire.fields": "[]"})
    with pytest.raises(py_wire.FrameError, match="a compact frame never carries"):
        py_wire.Frame.from_buffer(raw)


def test_cli_inspect_of_a_compact_frame(tmp_path, capsys):
    from py_wire.cli import main

    path = tmp_path / "compact.pywire"
    path.write_bytes(bytes(py_wire.encode(small_text_batch(), TEXT, compact=True)))
    assert main(["inspect", str(path), "--schema", "text_grpo"]) == 0
    out = capsys.readouterr().out
    assert f"fingerprint: {TEXT.fingerprint}" in out
    assert "header form: compact" in out
    assert main(["inspect", str(path), "--schema", "no_such_schema"]) == 1
