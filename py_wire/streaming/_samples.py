"""Samples that arrive apart: each stored as its text part plus a reference to its media,
media stored once per content.

A GRPO prompt's ``n`` samples share the prompt's images. Put as one frame per group they are
one segment (the encoder stores a segment that rows share once); streamed one sample at a
time, each sample's frame holds its own copy. So a sample is split before it is stored: its
text column (every field the schema does not declare ``column = "media"``, and the sequence
field) and its media column (the media fields, and the sequence field, so that the part is
checked on its own), the two column frames :mod:`py_wire.interop.transfer_queue` stores. The
media part is named by the schema's fingerprint and a digest of the media fields' tensors
(XXH3-128 over their names, dtypes, shapes and bytes, computed in Rust): a buffer that already
holds that digest stores the sample's text part only.

When the group is whole, :func:`assemble` rebuilds its frame: the text parts concatenated, and
each row's media taken from the one media part its digest names, so rows that share images
reference one segment and the group's frame stores them once, as a group put whole does.
:func:`py_wire.encode` checks the result like any batch (placeholder tokens against the
images each row now holds): a sample paired with the wrong media is refused, never trained.
Fields with a wire cast are read back in their schema dtype (``source_dtype=True``) so that
encode casts them again: a widening, then the same narrowing, gives the stored bytes back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from py_wire import BatchError, Frame, concat, encode
from py_wire.adapters import checked_schema, content_digest, decode_selected
from py_wire.interop.transfer_queue import MEDIA, TEXT, encode_group_frames, media_fields


def split(frame: Frame) -> tuple[Frame, Frame | None, str | None]:
    """A one-row sample frame as (text part, media part, media digest). A schema that declares
    no media fields gives (the text part, None, None)."""
    if frame.num_rows != 1:
        raise BatchError(
            f"a sample frame holds one row (one sample), not {frame.num_rows}: put a whole group "
            "as one frame without sample="
        )
    sch = checked_schema(frame)
    names = media_fields(sch)
    rows = decode_selected(frame, None, layout="list", source_dtype=True)
    columns = encode_group_frames(rows, sch, group_size=1)
    text = columns[TEXT][0]
    if not names or MEDIA not in columns:
        return text, None, None
    held = [f.name for f in frame.layout.fields if f.name in names]
    digest = f"{sch.fingerprint}/{content_digest(frame, held)}"
    return text, columns[MEDIA][0], digest


def assemble(
    texts: Sequence[Frame],
    digests: Sequence[str | None],
    media: dict[str, Frame],
    metadata: Mapping[str, str],
) -> Frame:
    """A group's frame from its samples' text parts (in sample order), each sample's media
    digest and the media parts by digest, with the caller's ``metadata`` (its policy
    version)."""
    joined = concat(list(texts)) if len(texts) > 1 else texts[0]
    sch = checked_schema(joined)
    batch: dict[str, Any] = dict(decode_selected(joined, None, source_dtype=True))
    names = media_fields(sch)
    if names:
        parts: dict[str, dict[str, Any]] = {}
        for digest in dict.fromkeys(d for d in digests if d is not None):
            part = media[digest]
            parts[digest] = decode_selected(part, set(names), source_dtype=True)
        for name in names:
            rows = [None if d is None else parts[d].get(name) for d in digests]
            batch[name] = [None if r is None else r[0] for r in rows]
    return encode(batch, sch, metadata=metadata)
