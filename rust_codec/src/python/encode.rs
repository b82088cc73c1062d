//! `encode` and `encode_parts`: a batch's fields extracted (`batch`), planned and written by
//! the core with the GIL released; `encode(out=)` refuses inputs that overlap the buffer it
//! writes.

use std::sync::Arc;

use pyo3::prelude::*;

use super::batch::{checked_plan, prepare, RawField};
use super::codec::Codec;
use super::errors::{guarded, to_py, BatchError, OnPanic};
use super::frame::{self, Frame};
use super::owners::{HeldViews, Owners};
use super::staged::{StageLimits, STAGE_MAX_ROW_BYTES};
use crate::encode::{EncodeRequest, FieldInput, Part};

/// Whether `bytes` (non-empty) share an address with `[start, start + len)`.
pub(super) fn overlaps_range(bytes: &[u8], start: usize, len: usize) -> bool {
    let p = bytes.as_ptr() as usize;
    !bytes.is_empty() && p < start.saturating_add(len) && start < p.saturating_add(bytes.len())
}

/// Refuses any input whose bytes overlap `[start, start + len)`, the range `encode(out=)` is
/// about to write: reading a source while writing over it gives corrupted rows (and aliases a
/// `&mut [u8]`). O(segments): each source range is compared with the one destination range.
fn check_no_overlap(request: &EncodeRequest<'_>, start: usize, len: usize) -> PyResult<()> {
    let overlaps = |b: &[u8]| overlaps_range(b, start, len);
    let refuse = |name: &str, at: String| {
        BatchError::new_err(format!(
            "field {name:?}{at}: the input overlaps `out` ({len} bytes at {start:#x}); an input \
             cannot be a view of the buffer being encoded into (decoded from it, say): encode \
             into another buffer, or .clone() the input"
        ))
    };
    for field in &request.fields {
        let name = field.spec.name.as_str();
        match &field.input {
            FieldInput::Segments {
                segments,
                row_offsets,
                ..
            } => {
                if let Some(i) = segments.iter().position(|s| overlaps(s.bytes)) {
                    let row = row_offsets
                        .partition_point(|&o| o <= i as u64)
                        .saturating_sub(1);
                    let first = row_offsets.get(row).copied().unwrap_or(0);
                    let at = format!(", row {row}, segment {}", i as u64 - first);
                    return Err(refuse(name, at));
                }
            }
            FieldInput::Ranges { sources, .. } => {
                if sources.iter().any(|t| overlaps(t.bytes)) {
                    return Err(refuse(name, String::new()));
                }
            }
            FieldInput::Jagged { values: t, .. }
            | FieldInput::Padded { padded: t, .. }
            | FieldInput::Dense(t)
            | FieldInput::Csr { values: t, .. } => {
                if overlaps(t.bytes) {
                    return Err(refuse(name, String::new()));
                }
            }
        }
    }
    Ok(())
}

/// The address range of a buffer-protocol object, if it exports one.
fn buffer_range(obj: &Bound<'_, PyAny>) -> Option<(usize, usize)> {
    let buffer = pyo3::buffer::PyUntypedBuffer::get(obj).ok()?;
    Some((buffer.buf_ptr() as usize, buffer.len_bytes()))
}

/// Encodes a batch into a new frame, or into `out` (a writable buffer, reused across calls;
/// the frame then borrows it and is valid until `out` is overwritten).
#[pyfunction]
#[pyo3(signature = (codec, fields, threads=None, parallel_threshold=None, out=None, checksum=false))]
pub fn encode(
    py: Python<'_>,
    codec: &Bound<'_, Codec>,
    fields: Vec<RawField<'_>>,
    threads: Option<usize>,
    parallel_threshold: Option<usize>,
    out: Option<Bound<'_, PyAny>>,
    checksum: bool,
) -> PyResult<Frame> {
    let limits = StageLimits {
        max_row_bytes: STAGE_MAX_ROW_BYTES,
        out: out.as_ref().and_then(buffer_range),
    };
    let keep = Owners::default();
    let mut prepared = prepare(
        codec.get(),
        fields,
        threads,
        parallel_threshold,
        limits,
        &keep,
    )?;
    prepared.request.checksum = checksum;
    let frame = match out {
        None => {
            let (buf, layout) = py
                .detach(|| {
                    guarded(OnPanic::Internal, || {
                        let mut plan = checked_plan(&prepared)?;
                        let buf = plan.write(prepared.options)?;
                        let layout =
                            crate::frame::layout::layout_of_written(plan.written, buf.as_slice())?;
                        Ok((buf, layout))
                    })
                })
                .map_err(to_py)?;
            Frame::from_owned(buf, layout)
        }
        Some(out) => {
            let mut plan = py
                .detach(|| guarded(OnPanic::Internal, || checked_plan(&prepared)))
                .map_err(to_py)?;
            let request = &prepared.request;
            let check = |start: usize, len: usize| check_no_overlap(request, start, len);
            Frame::write_into_buffer(py, &out, plan.total_len, check, |dst| {
                guarded(OnPanic::Internal, || {
                    plan.write_into(dst, prepared.options)?;
                    crate::frame::layout::parse_frame(dst)
                })
            })?
        }
    };
    Ok(frame)
}

/// Encodes a batch as parts: read-only buffers over the caller's own tensors for payloads of at
/// least `min_borrow` bytes that need no cast, and `bytes` for everything else (header, index
/// tensors, padding, casts, non-contiguous inputs). Written one after another, the parts are
/// byte-identical to `encode`'s frame.
#[pyfunction]
#[pyo3(signature = (codec, fields, min_borrow=0, checksum=false))]
pub fn encode_parts(
    py: Python<'_>,
    codec: &Bound<'_, Codec>,
    fields: Vec<RawField<'_>>,
    min_borrow: usize,
    checksum: bool,
) -> PyResult<Vec<Py<PyAny>>> {
    // A staged row is a copy; rows under `min_borrow` bytes are copied into owned parts anyway.
    let limits = StageLimits {
        max_row_bytes: STAGE_MAX_ROW_BYTES.min(min_borrow.saturating_sub(1)),
        out: None,
    };
    // The borrowed parts' views, kept with their owners; the owned parts, `None` where the
    // next borrowed one goes.
    let (held, parts) = HeldViews::new(|keep| {
        let mut prepared = prepare(codec.get(), fields, None, None, limits, keep)?;
        prepared.request.checksum = checksum;
        let parts = py
            .detach(|| {
                guarded(OnPanic::Internal, || {
                    checked_plan(&prepared)?.parts(min_borrow)
                })
            })
            .map_err(to_py)?;
        let mut views = Vec::new();
        let parts: Vec<Option<Vec<u8>>> = parts
            .into_iter()
            .map(|part| match part {
                Part::Owned(bytes) => Some(bytes),
                Part::Borrowed(bytes) => {
                    views.push(bytes);
                    None
                }
            })
            .collect();
        Ok((views, parts))
    })?;
    let held = Arc::new(held);
    let mut next = 0;
    parts
        .into_iter()
        .map(|part| match part {
            Some(bytes) => Ok(pyo3::types::PyBytes::new(py, &bytes).into_any().unbind()),
            None => {
                let view = frame::BorrowedBytes::new(held.clone(), next);
                next += 1;
                Ok(Py::new(py, view)?.into_any())
            }
        })
        .collect()
}
