"""The JSON Schema of a schema *file* (for editors and validators): the ``Schema`` view's, with
the codec's defaults and the file-only keys ``extends`` and ``drop_fields``."""

from __future__ import annotations

import re
from typing import Any

from py_wire._schema.constants import KEY_DEFAULTS
from py_wire._schema.views import Schema


def schema_file_json_schema() -> dict[str, Any]:
    """The JSON Schema of a schema *file*: the :class:`Schema` model's, plus ``extends`` and
    ``drop_fields``. A file that extends another may declare only the keys it changes, so a
    field's ``tier`` and ``dtype`` are required of the resolved schema, not of each file. The
    defaults it documents are the codec's (:data:`KEY_DEFAULTS`)."""
    doc = Schema.model_json_schema()
    for kind, part in (
        ("schema", doc),
        ("field", doc["$defs"]["FieldDef"]),
        ("contract", doc["$defs"]["PlaceholderContract"]),
    ):
        # The docstring's first sentence: what the key is, not how the view is built.
        part["description"] = (
            re.split(r":? a typed view|\. A typed view", part["description"])[0] + "."
        )
        defaults = KEY_DEFAULTS[kind]
        for key, value in defaults.items():
            part["properties"][key]["default"] = value
        part["required"] = [k for k in part["properties"] if k not in defaults]
    doc["properties"]["extends"] = {
        "description": "A bundled schema's name or a .toml path (relative to this file) whose "
        "fields, contracts and settings this file starts from.",
        "title": "Extends",
        "type": "string",
    }
    doc["properties"]["drop_fields"] = {
        "description": "Fields of the base (extends) that this schema does not have.",
        "items": {"type": "string"},
        "title": "Drop Fields",
        "type": "array",
    }
    doc["required"] = ["name"]
    doc["$defs"]["FieldDef"].pop("required", None)
    return doc
