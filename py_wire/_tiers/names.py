"""The tier names a schema may use: the codec's (``rust_codec/src/tier/rules.rs``, ``Tier``),
for the typed views and the strategies that draw every tier. Imports nothing of py_wire, so
that the schema views (``py_wire._schema``) read them from here while the tiers' own
implementations read the views."""

from typing import Literal

Tier = Literal["packed", "per_token", "scalar"]
