"""The ``py-wire`` command line, run in-process."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

import py_wire
from py_wire import _decode
from py_wire.cli import main
from py_wire.synth import generate

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_schema_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["name", "version", "fields", "description"]
    for name in py_wire.bundled_schemas():
        schema = py_wire.load_schema(name)
        line = next(ln for ln in lines if ln.startswith(name + " "))
        assert line.split()[1:3] == [str(schema.version), str(len(schema.fields))]
    assert main(["schema", "list", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert py_wire.load_schema("nemotron_omni").description in out


def test_schema_check_valid(capsys: pytest.CaptureFixture[str]) -> None:
    path = SCHEMAS / "smolvlm.toml"
    assert main(["schema", "check", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    assert "valid schema 'smolvlm' v1" in out
    assert "sequence field: input_ids" in out and "lengths field: input_lengths" in out
    header = next(ln for ln in out.splitlines() if ln.startswith("field "))
    assert header.split() == [
        "field",
        "tier",
        "dtype",
        "wire",
        "dtype",
        "shape",
        "required",
        "stages",
        "pack",
        "dim",
    ]
    row = next(ln for ln in out.splitlines() if ln.startswith("pixel_values "))
    assert row.split() == [
        "pixel_values",
        "packed",
        "float32",
        "float32",
        "[1,",
        "*,",
        "3,",
        "*,",
        "*]",
        "no",
        "logprob,ref_logprob,train",
        "1",
    ]
    assert "contracts: none" in out


def test_schema_check_shows_contracts_and_wire_casts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "check", "nemotron_omni"]) == 0  # a bundled name works too
    out = capsys.readouterr().out
    assert "bfloat16 (lossy)" in out
    assert "image_placeholders: placeholder, token 131072" in out
    assert "int((H//16)*0.5)*int((W//16)*0.5)" in out
    assert main(["schema", "check", str(SCHEMAS / "qwen2_5_vl_video.toml")]) == 0
    out = capsys.readouterr().out
    assert "image_placeholders" in out and "video_placeholders" in out


def test_schema_check_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "bad"\nsequence_field = "input_ids"\n'
        '[fields.input_ids]\ntier = "per_token"\ndtype = "int64"\n'
        '[fields.pixel_values]\ntier = "packed"\ndtype = "float32"\nshape = ["*", 1176]\n'
        'wire_dtype = "bfloat16"\n'
    )
    assert main(["schema", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert str(bad) in err and "pixel_values" in err and "lossy" in err
    bad.write_text("name = [\n")
    assert main(["schema", "check", str(bad)]) == 1
    assert "not valid TOML" in capsys.readouterr().err
    assert main(["schema", "check", str(tmp_path / "missing.toml")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_schema_check_warns_on_stage_parity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (SCHEMAS / "qwen2_5_vl.toml").read_text()
    blind = tmp_path / "blind.toml"
    blind.write_text(
        text.replace(
            'shape = ["*", 1176]\nrequired = false\nstages = ["logprob", "ref_logprob", "train"]',
            'shape = ["*", 1176]\nrequired = false\nstages = ["train"]',
        )
    )
    assert main(["schema", "check", str(blind)]) == 0
    err = capsys.readouterr().err
    assert "warning: multimodal field 'pixel_values'" in err and "ref_logprob" in err
    assert main(["schema", "check", "--strict", str(blind)]) == 1


def test_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    schema = py_wire.load_schema("nemotron_omni")
    frame = py_wire.encode(generate("nemotron_omni", 8, seed=1), schema)
    path = tmp_path / "batch.pywire"
    path.write_bytes(bytes(frame))

    # inspect reads the layout only: building decode views would fail the test.
    def no_decode(*args: object, **kwargs: object) -> None:
        raise AssertionError("inspect decoded the payload")

    monkeypatch.setattr(_decode.FrameViews, "__init__", no_decode)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "schema: nemotron_omni v1" in out
    assert f"fingerprint: {schema.fingerprint}" in out
    assert "rows: 8" in out
    assert f"bytes: {frame.nbytes} " in out
    for f in frame.layout.fields:
        line = next(ln for ln in out.splitlines() if ln.startswith(f.name + " "))
        cells = line.split()
        assert cells[1] == f.tier
        assert cells[2:4] == [f.dtype, f.stored_dtype]
        if f.tier == "packed":
            assert f"{f.num_segments}/{f.num_refs}" in cells
    pixels = next(ln for ln in out.splitlines() if ln.startswith("pixel_values "))
    assert pixels.split()[2:4] == ["float32", "bfloat16"]


def test_inspect_rejects_non_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert main(["inspect", str(empty)]) == 1
    assert capsys.readouterr().err.startswith("error: ")
    frame = bytes(py_wire.encode(generate("text_grpo", 4), "text_grpo"))
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(frame[: len(frame) // 2])
    assert main(["inspect", str(truncated)]) == 1
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["inspect", str(tmp_path / "missing.bin")]) == 1
    assert "cannot map" in capsys.readouterr().err


def test_export_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "export-json-schema"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == py_wire._schema.schema_file_json_schema()
    assert out == (SCHEMAS / "schema-file.schema.json").read_text()


def test_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "schema" in capsys.readouterr().out
    assert main(["schema"]) == 2
    out = capsys.readouterr().out
    assert "list" in out and "check" in out
    assert "export-json-schema" not in out  # maintenance, unlisted
    with pytest.raises(SystemExit) as e:
        main(["schema", "nope"])
    assert e.value.code == 2


def test_python_dash_m(monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m py_wire`` runs the same CLI (run in-process: no second torch import)."""
    monkeypatch.setattr(sys, "argv", ["py_wire", "schema", "list"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("py_wire", run_name="__main__")
    assert e.value.code == 0
    assert "qwen2_5_vl" in capsys.readouterr().out
