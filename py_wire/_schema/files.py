"""Schema files: the bundled schemas, reading a ``.toml`` file (its ``extends`` chain
resolved: a base's fields, ``drop_fields``, fields merged key by key), and ``load_schema``,
which holds every schema it returns in the codec's registry."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from py_wire._native import SchemaError
from py_wire._schema.constants import MAX_SCHEMA_BYTES
from py_wire._schema.registry import _hold
from py_wire._schema.text import parse_toml
from py_wire._schema.views import Schema

_SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


def bundled_schemas() -> list[str]:
    """Names of the schemas shipped with py_wire: the framework-neutral ones (``qwen2_5_vl``)
    and, under a framework's folder, the names and dtypes that framework sends
    (``nemo_rl/qwen2_5_vl``, ``verl/qwen2_5_vl``)."""
    return sorted(
        p.relative_to(_SCHEMA_DIR).with_suffix("").as_posix() for p in _SCHEMA_DIR.rglob("*.toml")
    )


#: A bundled schema's name: folders and a file stem of lowercase letters, digits and ``_``.
_BUNDLED_NAME = re.compile(r"[a-z0-9_]+(?:/[a-z0-9_]+)*")


def read_schema_file(path: Path, shown: str | None = None) -> str:
    """A schema file's text: a regular file of at most :data:`MAX_SCHEMA_BYTES` bytes of
    UTF-8. Every failure is a ``SchemaError`` naming the file."""
    shown = str(path) if shown is None else shown
    try:
        if not path.exists():
            raise SchemaError(f"schema file {shown} does not exist")
        if not path.is_file():
            raise SchemaError(f"schema file {shown} is not a regular file")
        with path.open("rb") as fh:
            data = fh.read(MAX_SCHEMA_BYTES + 1)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise SchemaError(f"schema file {shown}: cannot read: {e}") from None
    if len(data) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"schema file {shown} is larger than {MAX_SCHEMA_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchemaError(
            f"schema file {shown} is not UTF-8 text: byte {e.start} is {data[e.start]:#04x}"
        ) from None


@functools.lru_cache(maxsize=64)
def _load_path(path: Path, shown: str) -> Schema:
    return schema_from_file(path, shown)


#: How many ``extends`` a schema file may chain (a file, its base, the base's base, ...).
MAX_EXTENDS_DEPTH = 8


def schema_from_file(path: Path, shown: str | None = None) -> Schema:
    """The schema a ``.toml`` file declares, its ``extends`` chain resolved (uncached)."""
    shown = str(path) if shown is None else shown
    return Schema._validate(_resolved_file(path, shown, ()), shown)


def _resolved_file(path: Path, shown: str, chain: tuple[Path, ...]) -> dict[str, Any]:
    """A schema file's data with ``extends`` applied: the base's data (itself resolved), the
    fields in ``drop_fields`` removed, every ``[fields.X]`` of this file merged key by key over
    the base's ``X`` (or added; a field also in ``drop_fields`` replaces the base's whole),
    ``contracts`` replaced when this file gives any, and every
    other key of this file replacing the base's."""
    data = parse_toml(read_schema_file(path, shown), shown)
    base_ref = data.pop("extends", None)
    drop = data.pop("drop_fields", None)
    if base_ref is None:
        if drop is not None:
            raise SchemaError(f"{shown}: drop_fields needs extends (there is no base to drop from)")
        return data
    if not isinstance(base_ref, str):
        raise SchemaError(f"{shown}: extends must be a schema name or a path, not {base_ref!r}")
    if "name" not in data:
        raise SchemaError(f"{shown}: a schema that extends {base_ref!r} needs its own name")
    base_path, base_shown = _base_file(base_ref, path, shown)
    if base_path in (*chain, path):
        names = " -> ".join(str(p) for p in (*chain, path, base_path))
        raise SchemaError(f"{shown}: extends forms a loop: {names}")
    if len(chain) + 1 >= MAX_EXTENDS_DEPTH:
        raise SchemaError(f"{shown}: extends is chained more than {MAX_EXTENDS_DEPTH} deep")
    base = _resolved_file(base_path, base_shown, (*chain, path))
    fields: dict[str, Any] = dict(base.get("fields", {}))
    if drop is not None:
        if not isinstance(drop, list) or not all(isinstance(n, str) for n in drop):
            raise SchemaError(f"{shown}: drop_fields must be a list of field names, not {drop!r}")
        for name in drop:
            if name not in fields:
                raise SchemaError(
                    f"{shown}: drop_fields names {name!r}, which {base_ref!r} does not declare "
                    f"(its fields: {sorted(fields)})"
                )
            del fields[name]
    own = data.pop("fields", {})
    if not isinstance(own, dict):
        raise SchemaError(f"{shown}: fields must be a table, not {own!r}")
    for name, decl in own.items():
        # A field listed in drop_fields and declared again replaces the base's whole.
        inherited = fields.get(name)
        if isinstance(inherited, dict) and isinstance(decl, dict):
            fields[name] = {**inherited, **decl}
        else:
            fields[name] = decl
    return {**base, **data, "fields": fields}


def _base_file(ref: str, path: Path, shown: str) -> tuple[Path, str]:
    """``extends = ref``: a bundled schema's name, or a ``.toml`` path relative to ``path``."""
    if ref.endswith(".toml"):
        try:
            return (path.parent / ref).resolve(), ref
        except (OSError, ValueError, RuntimeError) as e:
            raise SchemaError(f"{shown}: extends {ref!r}: {e}") from None
    if not _BUNDLED_NAME.fullmatch(ref) or not (_SCHEMA_DIR / f"{ref}.toml").is_file():
        raise SchemaError(
            f"{shown}: extends {ref!r}, which is neither a bundled schema nor a .toml path; "
            f"bundled: {bundled_schemas()}"
        )
    return (_SCHEMA_DIR / f"{ref}.toml").resolve(), ref


def load_schema(name_or_path: str | Path | Schema) -> Schema:
    """A bundled schema by name (``"qwen2_5_vl"``, ``"nemo_rl/qwen2_5_vl"``: a name with a
    slash resolves under py_wire's schema folder) or a schema file by path (``.toml``)."""
    if isinstance(name_or_path, Schema):
        _hold(name_or_path)
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if path.suffix != ".toml":
        if not _BUNDLED_NAME.fullmatch(text):
            raise SchemaError(
                f"{text!r} is neither a bundled schema name nor a .toml file; "
                f"bundled: {bundled_schemas()}"
            )
        path = _SCHEMA_DIR / f"{text}.toml"
        try:
            bundled = path.is_file()
        except (OSError, ValueError):  # a name too long for the file system, say
            bundled = False
        if not bundled:
            raise SchemaError(f"no bundled schema {text!r}; bundled: {bundled_schemas()}")
    try:
        resolved = path.resolve()
    except (OSError, ValueError, RuntimeError) as e:
        raise SchemaError(f"schema file {text}: {e}") from None
    schema = _load_path(resolved, text)
    _hold(schema)
    return schema


def hold_schema(schema: Schema | str | Path) -> Schema:
    """The schema (``Schema``, bundled name or ``.toml`` path, as :func:`load_schema` takes),
    held for this process: compact frames naming its fingerprint can be read from then on.
    :func:`load_schema` holds every schema it returns, so this is what ``schema=`` of
    ``decode`` and ``Frame.from_buffer`` does."""
    if not isinstance(schema, Schema | str | Path):
        raise TypeError(f"schema must be a Schema, a name or a path, not {type(schema).__name__}")
    return load_schema(schema)
