"""``py-wire``: list and check schema files, inspect frames without decoding them.

    py-wire schema list               bundled schemas: name, version, fields, description
    py-wire schema check FILE         validate a schema file and print its fields and contracts
    py-wire schema diff OLD NEW       whether frames of either version read under the other,
                                      and why (exit 0 compatible, 1 not)
    py-wire inspect FRAME_FILE        a frame's schema, rows, bytes and per-field layout
                                      (--schema S: hold S first, for a compact frame)

Maintenance: ``py-wire schema export-json-schema > schemas/schema-file.schema.json`` regenerates
the JSON Schema of the schema-file format from the pydantic model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from py_wire import _tiers as tiers
from py_wire._native import Frame, FrameError, WireError
from py_wire._schema import (
    Schema,
    bundled_schemas,
    frame_fingerprint,
    load_schema,
    schema_file_json_schema,
    schema_from_file,
)

#: Stages that run a forward pass over the media and so must see the same multimodal fields.
FORWARD_STAGES = ("logprob", "ref_logprob", "train")
DESCRIPTION_WIDTH = 80
MAX_ERROR_CHARS = 2000


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 invalid input, 2 usage error)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        status: int = args.run(args)
        return status
    except WireError as e:
        # One line: a hostile file's text must not spill over the terminal.
        message = " ".join(str(e).split())
        if len(message) > MAX_ERROR_CHARS:
            message = message[: MAX_ERROR_CHARS - 3] + "..."
        print(f"error: {message}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `py-wire ... | head`
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="py-wire",
        description="py_wire schema files and frames.",
    )
    commands = parser.add_subparsers(title="commands", metavar="{schema,inspect}")

    schema = commands.add_parser("schema", help="list or check schema files")
    schema_commands = schema.add_subparsers(title="schema commands", metavar="{list,check,diff}")
    schema.set_defaults(run=lambda _args: _help(schema))
    listing = schema_commands.add_parser("list", help="bundled schemas")
    listing.add_argument(
        "-v", "--verbose", action="store_true", help="full descriptions (default: truncated)"
    )
    listing.set_defaults(run=_schema_list)
    check = schema_commands.add_parser(
        "check", help="validate a schema file and print its fields and contracts"
    )
    check.add_argument("file", help="a schema .toml file (or a bundled schema's name)")
    check.add_argument(
        "--strict", action="store_true", help="exit 1 on warnings (e.g. stage parity) too"
    )
    check.set_defaults(run=_schema_check)
    diff = schema_commands.add_parser(
        "diff",
        help="whether two versions of a schema read each other's frames, and why "
        "(exit 0 compatible, 1 not)",
    )
    diff.add_argument("old", help="a schema .toml file or a bundled schema's name")
    diff.add_argument("new", help="a schema .toml file or a bundled schema's name")
    diff.set_defaults(run=_schema_diff)
    # Maintenance, not listed in the help: the JSON Schema of the schema-file format.
    export = schema_commands.add_parser(
        "export-json-schema", description="Print the schema-file format's JSON Schema."
    )
    export.set_defaults(run=_schema_export)

    inspect = commands.add_parser(
        "inspect", help="a frame's schema, rows, bytes and fields, without decoding it"
    )
    inspect.add_argument("frame", help="a frame file (a py_wire safetensors file)")
    inspect.add_argument(
        "--schema",
        help="a bundled schema name or .toml path to hold first: what a compact frame "
        "(its schema named by fingerprint only) needs",
    )
    inspect.set_defaults(run=_inspect)
    return parser


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# -- schema list -------------------------------------------------------------------------------


def _schema_list(args: argparse.Namespace) -> int:
    rows = []
    for name in bundled_schemas():
        schema = load_schema(name)
        description = schema.description
        if not args.verbose and len(description) > DESCRIPTION_WIDTH:
            description = description[: DESCRIPTION_WIDTH - 3].rstrip() + "..."
        rows.append([name, str(schema.version), str(len(schema.fields)), description])
    print(_table(["name", "version", "fields", "description"], rows))
    return 0


# -- schema check ------------------------------------------------------------------------------


def _schema_check(args: argparse.Namespace) -> int:
    schema = _load_schema_file(args.file)
    print(f"{args.file}: valid schema {schema.name!r} v{schema.version}")
    if schema.description:
        print(f"  {schema.description}")
    print(f"fingerprint: {schema.fingerprint}")
    print(f"stages: {', '.join(schema.stages)}")
    print(f"sequence field: {schema.sequence_field or '-'}")
    print(f"lengths field: {schema.lengths_field or '-'}")
    print()
    rows = []
    for name, f in schema.fields.items():
        rows.append(
            [
                name,
                f.tier,
                f.dtype,
                f.stored_dtype + (" (lossy)" if f.lossy and f.stored_dtype != f.dtype else ""),
                _shape(f.shape),
                "yes" if f.required else "no",
                ",".join(schema.field_stages(name)),
                str(f.pack_dim) if tiers.items(f.tier) == "segments" else "-",
            ]
        )
    headers = ["field", "tier", "dtype", "wire dtype", "shape", "required", "stages", "pack dim"]
    print(_table(headers, rows))
    print()
    if schema.contracts:
        print("contracts:")
        for c in schema.contracts:
            print(f"  {_describe_contract(c)}")
    else:
        print("contracts: none")
    warnings = _warnings(schema)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 1 if warnings and args.strict else 0


def _load_schema_file(file: str) -> Schema:
    path = Path(file)
    if path.suffix == ".toml" or "/" in file or path.exists():
        # Uncached, from this file's bytes (SchemaError: missing, not a file, not UTF-8, ...).
        return schema_from_file(path, file)
    return load_schema(file)  # a bundled name


def _describe_contract(c: Any) -> str:
    wrap = ""
    if c.begin_token_id is not None or c.end_token_id is not None:
        wrap = f", wrapped in {c.begin_token_id} ... {c.end_token_id}"
    if c.count == "grid_thw":
        rule = f"t*h*w/{c.merge_size**2} tokens per item of {c.grid_field!r}"
    elif c.count == "fixed":
        rule = f"{c.tokens_per_image} tokens per item of {c.media_field!r}"
    elif c.count == "field":
        rule = f"per image, the token count stored in {c.count_field!r}"
    else:
        rule = (
            f"int((H//{c.patch_size})*{c.downsample_ratio})*int((W//{c.patch_size})*"
            f"{c.downsample_ratio}) tokens per row of {c.sizes_field!r}"
        )
    return (
        f"{c.name}: {c.kind}, token {c.token_id} in {c.media_field!r} order{wrap}; "
        f"count {c.count}: {rule}"
    )


def _warnings(schema: Schema) -> list[str]:
    """Stage parity: every forward stage must see the same multimodal fields, or a worker runs
    image-blind without an error."""
    stages = [s for s in FORWARD_STAGES if s in schema.stages]
    multimodal = [
        n
        for n, f in schema.fields.items()
        if tiers.items(f.tier) == "segments" or n in ("mm_token_type_ids", "token_type_ids")
    ]
    out = []
    for name in multimodal:
        has = [s for s in stages if s in schema.field_stages(name)]
        if has and len(has) != len(stages):
            missing = [s for s in stages if s not in has]
            out.append(
                f"multimodal field {name!r} is in stages {has} but not {missing}: those "
                "forwards would run without it"
            )
    return out


# -- schema export-json-schema -----------------------------------------------------------------


def _schema_diff(args: argparse.Namespace) -> int:
    found = load_schema(args.old).diff(load_schema(args.new))
    print(found)
    return 0 if found.compatible else 1


def _schema_export(_args: argparse.Namespace) -> int:
    print(json.dumps(schema_file_json_schema(), indent=2, sort_keys=True))
    return 0


# -- inspect -----------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    path = Path(args.frame)
    try:
        with path.open("rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped
        raise FrameError(f"{args.frame}: cannot map: {e}") from None
    try:
        frame = Frame.from_buffer(mm, schema=args.schema)
        header = 8 + struct.unpack_from("<Q", mm, 0)[0]
        _print_frame(args.frame, frame, header)
        del frame
    finally:
        with contextlib.suppress(BufferError):  # a view is still alive: the mapping goes with it
            mm.close()
    return 0


def _print_frame(name: str, frame: Frame, header: int) -> None:
    meta = frame.metadata
    layout = frame.layout
    schema: Schema = frame.schema  # checked against its fingerprint, size and nesting: FrameError
    schema_name, version = schema.name, schema.version
    fields = layout.fields
    print(f"frame: {name}")
    print(f"schema: {schema_name} v{version}")
    print(f"fingerprint: {frame_fingerprint(frame) or '-'}")
    print(f"header form: {'compact' if frame.compact else 'embedded'}")
    print(f"format: {meta.get('py_wire.format', '-')}")
    print(f"rows: {layout.num_rows}")
    seq = layout.sequence_field
    if seq is not None and layout.seq_offsets is not None:
        print(f"sequence field: {seq} ({layout.total_tokens} tokens)")
    print(f"bytes: {frame.nbytes} ({_human(frame.nbytes)}; header {header})")
    print()
    rows = []
    for f in fields:
        nbytes = f.values.nbytes
        segments = "-"
        if tiers.items(f.tier) == "segments":
            tables = (f.seg_shapes, f.seg_offsets, f.row_offsets, f.row_segments)
            nbytes += sum(t.nbytes for t in tables if t is not None)
            segments = f"{f.num_segments}/{f.num_refs}"
        rows.append(
            [
                f.name,
                f.tier,
                f.dtype,
                f.stored_dtype,
                _shape(["*" if d is None else d for d in f.shape]),
                str(f.pack_dim) if tiers.items(f.tier) == "segments" else "-",
                _shape(f.values.shape),
                segments,
                str(nbytes),
                _human(nbytes),
            ]
        )
    headers = [
        "field",
        "tier",
        "dtype",
        "stored",
        "shape",
        "pack dim",
        "values",
        "segments",
        "bytes",
        "size",
    ]
    print(_table(headers, rows))
    print()
    print("segments: physical/referenced (rows sharing a segment store it once)")


# -- formatting --------------------------------------------------------------------------------


def _shape(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table, columns left-aligned; the last column is not padded."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = []
    for cells in [list(headers), ["-" * w for w in widths], *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
