"""Frames as files and inside larger buffers: a frame's size from its first bytes, the exact
size of an encode (to size ``out=`` buffers), and atomic save / copy-on-write load."""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from py_wire import _native
from py_wire._encode import _fields, check_flag, plain_tensors
from py_wire._native import Frame, FrameError
from py_wire._schema import Schema, load_schema
from py_wire._source import as_frame


def frame_nbytes(prefix: Any) -> int:
    """The total size in bytes of the frame that starts ``prefix`` (any bytes-like object).

    It needs the frame's first ``8 + N`` bytes, where ``N`` is the little-endian u64 in its
    first 8 bytes (the JSON header's length, a few KB, 64-byte padded): read 8 bytes, then
    ``8 + N``, then the rest. A shorter prefix raises :class:`FrameError` saying how many bytes
    are needed; a header that is not a valid frame header raises it too. The data section is
    never read. Bytes after the frame (a reused shared-memory segment) are ignored.
    """
    return _native.frame_nbytes(prefix)


def encoded_nbytes(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    stage: str | None = None,
    *,
    checksum: bool = False,
) -> int:
    """The exact size of ``encode(batch, schema, stage=stage, checksum=checksum)``, to size an
    ``out=`` buffer. Validates the batch and its contracts as ``encode`` does (same errors),
    copies nothing."""
    schema = load_schema(schema)
    check_flag("checksum", checksum)
    fields = _fields(batch, schema, stage)
    with plain_tensors():
        return _native.encoded_nbytes(schema._codec_for(stage), fields, checksum=checksum)


def save(frame: Any, path: str | os.PathLike[str]) -> None:
    """Write ``frame`` (a :class:`Frame` or bytes-like frame, validated first) to ``path``
    atomically: into a temporary file beside it, flushed to disk, then renamed over ``path``.
    A reader never sees a partial file, and a process that mapped the old file keeps its
    bytes (the rename replaces the directory entry, not the old file's contents)."""
    frame = as_frame(frame)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(frame))
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | os.PathLike[str]) -> Frame:
    """Map the frame in ``path`` (validated; bytes after the frame are ignored) without
    reading it: views decoded from it lie in the mapping, pages are read on first touch.

    The mapping is private copy-on-write (``mmap.ACCESS_COPY``): writing to a decoded view
    works and changes only this process's copy of that page, never the file, and never
    faults as a read-only mapping would. The file must not be modified in place while
    mapped (pages not yet written would show the change); :func:`save` replaces files by
    rename, which is safe."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise FrameError(f"{os.fspath(path)!r} is empty, not a frame")
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    return Frame.from_buffer(mapped)
