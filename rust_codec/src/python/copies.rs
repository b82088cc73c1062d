//! The copy machinery offered to Python: packing tensors into a staging buffer on copy threads,
//! and what this process's copies stream from.

use pyo3::prelude::*;

use super::encode::overlaps_range;
use super::errors::{guarded, to_py, BatchError, OnPanic};
use super::extract::tensor_ref;
use super::frame;
use super::owners::Owners;
use crate::encode::EncodeOptions;

/// A thread per 2 MiB when packing: a micro-batch of tens of MB is staged while the trainer's
/// step runs, and with the encoder's 8 MiB per thread the packing used a few of the cores
/// (16 GB/s on the H200 machine of docs/trainer.md).
const PACK_PARALLEL_THRESHOLD: usize = 2 << 20;

/// Packs `tensors` (CPU tensors or buffer-protocol arrays, any strides) into `out` (a
/// writable, C-contiguous byte buffer: a pinned staging buffer's `.numpy()`), each in C order
/// at its byte offset of `offsets` (ascending, not overlapping), on up to `threads` copy
/// threads (`PY_WIRE_THREADS` or the core count by default) with the GIL released.
#[pyfunction]
#[pyo3(signature = (tensors, offsets, out, threads=None))]
pub fn pack_into(
    py: Python<'_>,
    tensors: Vec<Bound<'_, PyAny>>,
    offsets: Vec<usize>,
    out: Bound<'_, PyAny>,
    threads: Option<usize>,
) -> PyResult<()> {
    let keep = Owners::default();
    let srcs = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| tensor_ref(t, &keep, &|| format!("pack_into: tensor {i}")))
        .collect::<PyResult<Vec<_>>>()?;
    let buffer = frame::writable_buffer(&out)?;
    let (start, len) = (buffer.buf_ptr() as usize, buffer.len_bytes());
    if let Some(i) = srcs
        .iter()
        .position(|t| overlaps_range(t.bytes, start, len))
    {
        return Err(BatchError::new_err(format!(
            "pack_into: tensor {i} overlaps `out` ({len} bytes at {start:#x}): pack into \
             another buffer"
        )));
    }
    let options = EncodeOptions::default();
    let threads = threads.unwrap_or(options.threads);
    // SAFETY: `buffer` is a writable, C-contiguous export of `len` bytes, held (and so kept
    // alive and unmoved) until this function returns; no source overlaps it (checked above),
    // so this is the only reference to those bytes while the copy runs.
    let dst = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    py.detach(|| {
        guarded(OnPanic::Internal, || {
            crate::memory::copy::pack(&srcs, &offsets, dst, threads, PACK_PARALLEL_THRESHOLD)
        })
    })
    .map_err(to_py)
}

/// What this process's copies stream from: the frame size (0: every frame; `usize::MAX`: none),
/// then what `PY_WIRE_STREAMING=auto` decides it from, the last-level cache cpu0 reports and
/// glibc's `x86_non_temporal_threshold` (each `None` where it could not be read).
#[pyfunction]
pub fn streaming_threshold() -> (usize, Option<usize>, Option<usize>) {
    let report = crate::memory::stream::CacheReport::current();
    (
        crate::memory::stream::threshold(),
        report.last_level_cache,
        report.glibc_threshold,
    )
}
