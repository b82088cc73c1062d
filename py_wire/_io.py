"""Frames as files and inside larger buffers: a frame's size from its first bytes, the exact
size of an encode (to size ``out=`` buffers), and atomic save / copy-on-write load."""

from __future__ import annotations

import mmap
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from py_wire import _native
from py_wire._args import flag
from py_wire._args import path as path_arg
from py_wire._encode import checked_fields, plain_tensors
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
    compact: bool = False,
) -> int:
    """The exact size of ``encode(batch, schema, stage=stage, checksum=checksum,
    compact=compact)``, to size an ``out=`` buffer. Validates the batch and its contracts as
    ``encode`` does (same errors), copies nothing."""
    schema = load_schema(schema)
    flag("checksum", checksum)
    flag("compact", compact)
    fields = checked_fields(batch, schema, stage)
    codec = schema._codec_for(stage, None, compact)
    with plain_tensors():
        return _native.encoded_nbytes(codec, fields, checksum=checksum)


def save(frame: Any, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
    """Write ``frame`` (a :class:`Frame` or bytes-like frame, validated first) to ``path``
    atomically: into a temporary file beside it, flushed to disk, then renamed over ``path``.
    A reader never sees a partial file, and a process that mapped the old file keeps its
    bytes (the rename replaces the directory entry, not the old file's contents).

    ``fsync=True`` (the default) waits until the bytes are on the device, so a crash after
    ``save`` returns never leaves a replay buffer or checkpoint with a torn or empty file; it
    costs the device's write time (``torch.save`` does not wait, so it looks faster).
    ``fsync=False`` skips that wait, for scratch files a crash may lose: the rename still
    makes the write atomic for readers.

    A file describes itself: a compact frame (``encode(..., compact=True)``) is written with
    its schema embedded (``concat([frame], compact=False)``, one copy of its bytes); the
    payload bytes are the same."""
    flag("fsync", fsync)
    frame = as_frame(frame)
    if frame.compact:
        from py_wire._ops import concat

        frame = concat([frame], compact=False)
    path = Path(path_arg("path", path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(frame))
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | os.PathLike[str], *, verify: bool = True) -> Frame:
    """Map the frame in ``path`` (validated; bytes after the frame are ignored) without
    reading it: views decoded from it lie in the mapping, pages are read on first touch.

    Only the frame's own length is mapped (read from its header), so a frame at the start of
    a larger or sparse file maps what the frame needs. ``path`` must be a regular file: a
    directory, FIFO, socket or device is a :class:`FrameError` (a FIFO would otherwise block
    the reader forever).

    The mapping is private copy-on-write (``mmap.ACCESS_COPY``): writing to a decoded view
    works and changes only this process's copy of that page, never the file, and never
    faults as a read-only mapping would. The file must not be modified in place, and above
    all not truncated, while mapped: pages not yet read would show the change, and reading a
    view whose pages were cut off the file kills the process with ``SIGBUS`` (the kernel's
    answer, which no library can catch). :func:`save` replaces files by rename, which is safe.

    ``verify`` (default ``True``): when the frame carries payload checksums (``encode(...,
    checksum=True)``), check them now, reading every page once; a changed byte is a
    :class:`FrameError` naming the field. ``False`` keeps the load lazy.
    """
    flag("verify", verify)
    name = path = path_arg("path", path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else _file_kind(st.st_mode)
            raise FrameError(f"{name!r} is {kind}, not a regular file holding a frame")
        if st.st_size == 0:
            raise FrameError(f"{name!r} is empty, not a frame")
        nbytes = frame_nbytes(_prefix(fd, name, st.st_size))
        if nbytes > st.st_size:
            raise FrameError(
                f"{name!r} holds {st.st_size} bytes but its frame header describes a "
                f"{nbytes}-byte frame: the file is truncated"
            )
        mapped = mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    frame = Frame.from_buffer(mapped)
    if verify and frame.has_checksum:
        frame.verify()
    return frame


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _prefix(fd: int, name: str, size: int) -> bytes:
    """The frame's first ``8 + N`` bytes (the length word and the JSON header), read with
    ``pread``: what :func:`frame_nbytes` needs to tell the frame's length."""
    first = os.pread(fd, 8, 0)
    if len(first) < 8:
        raise FrameError(f"{name!r} is {size} bytes, shorter than a frame's 8-byte length word")
    header_len = int.from_bytes(first, "little")
    if header_len > _native.MAX_HEADER_BYTES:
        raise FrameError(
            f"{name!r}: header length {header_len} exceeds the "
            f"{_native.MAX_HEADER_BYTES}-byte limit"
        )
    if header_len > size - 8:
        raise FrameError(
            f"{name!r}: its frame header claims {header_len} bytes but the file holds "
            f"{size - 8} after the length word"
        )
    return first + os.pread(fd, header_len, 8)
