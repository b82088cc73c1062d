//! Sizes and batching for moving frames and feeding trainers: a frame's size from its first
//! bytes, an encode's exact size without copying, token-budget micro-batches, sequence packing
//! and NeMo-RL's chunk-interleaved shards, all computed here over the sequence offsets.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use super::batch::{checked_plan, prepare, RawField};
use super::errors::{guarded, to_py, FrameError, OnPanic, WireError};
use super::frame::Frame;
use super::owners::Owners;
use crate::frame::header::{frame_size, FrameSize};
use crate::ops::batching::{self, Budget};

/// The total size in bytes of the frame that starts `prefix`. Needs the 8-byte length and the
/// JSON header (`8 + header_len` bytes, a few KB); a shorter prefix raises `FrameError` saying
/// how many bytes in all are needed.
#[pyfunction]
pub fn frame_nbytes(py: Python<'_>, prefix: &Bound<'_, PyAny>) -> PyResult<u64> {
    let (len, size) = read_prefix(py, prefix, |bytes| Ok((bytes.len(), frame_size(bytes)?)))?;
    match size {
        FrameSize::Known(n) => Ok(n),
        FrameSize::NeedAtLeast(n) => Err(FrameError::new_err(format!(
            "a {len}-byte prefix is too short to tell the frame's size: the header needs {n} \
             bytes, {} more",
            n - len as u64
        ))),
    }
}

/// Runs `read` over the bytes of a frame prefix (any C-contiguous buffer), without the GIL.
fn read_prefix<T: Send>(
    py: Python<'_>,
    prefix: &Bound<'_, PyAny>,
    read: impl FnOnce(&[u8]) -> crate::Result<T> + Send,
) -> PyResult<T> {
    let buffer: PyBuffer<u8> = PyBuffer::get(prefix)
        .map_err(|e| FrameError::new_err(format!("cannot read a frame prefix: {e}")))?;
    if !buffer.is_c_contiguous() {
        return Err(FrameError::new_err("frame prefix must be C-contiguous"));
    }
    let (ptr, len) = (buffer.buf_ptr() as *const u8, buffer.len_bytes());
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: a C-contiguous export of `len` bytes, pinned by `buffer` for this call.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    };
    let out = py
        .detach(|| guarded(OnPanic::Frame, || read(bytes)))
        .map_err(|e| to_py(e.context("frame prefix")));
    drop(buffer);
    out
}

/// `(frame_len, [(start, len), ...])`: the byte ranges of a frame that validation reads (its
/// header and index tables; see `validation_ranges`), from a prefix of `8 + header_len` bytes.
#[pyfunction]
pub fn frame_validation_ranges(
    py: Python<'_>,
    prefix: &Bound<'_, PyAny>,
) -> PyResult<(usize, Vec<(usize, usize)>)> {
    read_prefix(py, prefix, crate::frame::layout::validation_ranges)
}

/// The exact size of the frame `encode` would make of these fields (validated and laid out,
/// contracts checked, nothing copied).
#[pyfunction]
#[pyo3(signature = (codec, fields, checksum=false))]
pub fn encoded_nbytes(
    py: Python<'_>,
    codec: &Bound<'_, super::codec::Codec>,
    fields: Vec<RawField<'_>>,
    checksum: bool,
) -> PyResult<usize> {
    let keep = Owners::default();
    let limits = super::staged::StageLimits::NONE;
    let mut prepared = prepare(codec.get(), fields, None, None, limits, &keep)?;
    prepared.request.checksum = checksum;
    py.detach(|| guarded(OnPanic::Internal, || Ok(checked_plan(&prepared)?.total_len)))
        .map_err(to_py)
}

/// Per-row token counts of `frame` (from its validated sequence offsets).
fn row_lengths(frame: &Frame) -> crate::Result<Vec<u64>> {
    let offsets = crate::frame::layout::read_seq_offsets(frame.bytes(), frame.layout())?
        .ok_or_else(|| {
            crate::argument_err!("the frame has no per-token fields, so no sequence lengths")
        })?;
    Ok(batching::lengths_from_offsets(&offsets))
}

fn budget(padded: bool) -> Budget {
    if padded {
        Budget::Padded
    } else {
        Budget::Tokens
    }
}

/// Token-budget micro-batches of `frame`'s rows (see `batching::micro_batches`).
#[pyfunction]
pub fn micro_batch_rows(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    max_tokens: u64,
    sort: bool,
    padded: bool,
    multiple: u64,
) -> PyResult<Vec<Vec<usize>>> {
    let frame = frame.get();
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            batching::micro_batches(
                &row_lengths(frame)?,
                max_tokens,
                sort,
                budget(padded),
                multiple,
            )
        })
    })
    .map_err(to_py)
}

/// First-fit-decreasing bins of `frame`'s rows, with each row's token count.
#[pyfunction]
pub fn pack_rows(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    max_tokens: u64,
    multiple: u64,
) -> PyResult<(Vec<Vec<usize>>, Vec<u64>)> {
    let frame = frame.get();
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            let lengths = row_lengths(frame)?;
            let bins = batching::pack_first_fit_decreasing(&lengths, max_tokens, multiple)?;
            Ok((bins, lengths))
        })
    })
    .map_err(to_py)
}

/// Row ranges of NeMo-RL's chunk-interleaved `shard_by_batch_size` for one rank.
#[pyfunction]
#[pyo3(signature = (num_rows, rank, world_size, batch_size=None, allow_uneven=false))]
pub fn interleaved_shard_ranges(
    num_rows: u64,
    rank: u64,
    world_size: u64,
    batch_size: Option<u64>,
    allow_uneven: bool,
) -> PyResult<Vec<(u64, u64)>> {
    if batch_size == Some(0) {
        return Err(WireError::new_err("batch_size must be at least 1"));
    }
    batching::interleaved_shard(num_rows, rank, world_size, batch_size, allow_uneven).map_err(to_py)
}
