//! The PyO3 layer: convert Python objects to views, call the core with the GIL released, map
//! errors. Nothing here decides meaning.

mod batch;
mod codec;
mod errors;
mod extract;
mod frame;
mod layout;
mod owners;
mod registry;
mod staged;
mod tensor_getters;
mod transport;

use std::collections::BTreeMap;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::contract::check_contracts;
use crate::encode::{EncodeOptions, EncodeRequest, FieldInput, Part};
use crate::schema::spec::FieldSpec;
use batch::{checked_plan, prepare, RawField};
use codec::Codec;
use errors::{guarded, to_py, BatchError, OnPanic, SchemaError};
use extract::{index_values, tensor_ref};
use frame::Frame;
use owners::{HeldViews, Owners};
use staged::{StageLimits, STAGE_MAX_ROW_BYTES};

/// Whether `bytes` (non-empty) share an address with `[start, start + len)`.
fn overlaps_range(bytes: &[u8], start: usize, len: usize) -> bool {
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
fn encode(
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
fn encode_parts(
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

/// Checks the schema's contracts against an already-encoded frame (e.g. one received).
#[pyfunction]
#[pyo3(name = "check_contracts")]
fn check_frame_contracts(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    codec: &Bound<'_, Codec>,
) -> PyResult<()> {
    let contracts = &codec.get().contracts;
    let bytes = frame.get().bytes();
    let known = frame.get().layout().held.as_ref();
    // Validate again: a borrowed buffer may have been written since the frame was wrapped.
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            let layout = crate::frame::layout::parse_frame_known(bytes, known)?;
            check_contracts(bytes, &layout, contracts)
        })
    })
    .map_err(to_py)
}

/// Per row, the lengths of the runs of `token_id` (rows: 1-D int64 tensors or arrays).
#[pyfunction]
fn placeholder_runs(
    py: Python<'_>,
    rows: &Bound<'_, PyAny>,
    token_id: i64,
) -> PyResult<Vec<Vec<u64>>> {
    let keep = Owners::default();
    let (segments, row_offsets) = extract::rows("input_ids", rows, &keep)?;
    let mut views = Vec::with_capacity(segments.len());
    for (row, w) in row_offsets.windows(2).enumerate() {
        let t = match w[1] - w[0] {
            1 => &segments[w[0] as usize],
            n => {
                return Err(BatchError::new_err(format!(
                    "row {row}: expected one 1-D token tensor, found {n}"
                )))
            }
        };
        if t.dtype != crate::DType::I64 || t.shape.len() != 1 {
            return Err(BatchError::new_err(format!(
                "row {row}: tokens must be a 1-D int64 tensor, got {} of shape {:?}",
                t.dtype.name(),
                t.shape
            )));
        }
        views.push(t);
    }
    let runs = py.detach(|| {
        guarded(OnPanic::Internal, || {
            views
                .iter()
                .map(|t| {
                    let tokens = t.to_i64_vec()?;
                    let table = crate::contract::placeholder::scan_runs(
                        &tokens,
                        &[0, tokens.len() as u64],
                        token_id,
                    )?;
                    Ok(table.run_lengths)
                })
                .collect::<crate::Result<Vec<_>>>()
        })
    });
    runs.map_err(to_py)
}

/// Fills `out` (a fresh contiguous `[B, W, ...]` tensor) with the rows of `values` padded by
/// the element whose bytes are `pad`.
#[pyfunction]
fn pad_rows(
    py: Python<'_>,
    values: &Bound<'_, PyAny>,
    offsets: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    pad: &[u8],
) -> PyResult<()> {
    let keep = Owners::default();
    let here = || "padded decode".to_string();
    let values = tensor_ref(values, &keep, &here)?;
    let offsets = index_values(offsets, &keep, &here)?;
    let target = tensor_ref(out, &keep, &here)?;
    if !values.is_contiguous() || !target.is_contiguous() || target.shape.len() < 2 {
        return Err(BatchError::new_err(
            "pad_rows needs contiguous values and [B, W, ...] output",
        ));
    }
    let token_bytes = values.nbytes() as usize / values.shape[0].max(1) as usize;
    let token_bytes = if values.shape[0] == 0 {
        target.shape[2..].iter().product::<u64>() as usize * values.dtype.size()
    } else {
        token_bytes
    };
    let width = target.shape[1] as usize;
    let (ptr, len) = (target.bytes.as_ptr() as usize, target.nbytes() as usize);
    let src = values.bytes.as_ptr_range();
    if (src.start as usize) < ptr + len && ptr < src.end as usize {
        return Err(errors::InternalError::new_err(
            "pad_rows: the output overlaps the values",
        ));
    }
    py.detach(|| {
        // SAFETY: [ptr, ptr+len) is `out`'s contiguous storage (checked above), which `keep`
        // holds alive; it does not overlap `values` (checked above), the only other memory this
        // call reads. `out` is a fresh tensor `_decode` allocated for this call.
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
        guarded(OnPanic::Internal, || {
            crate::frame::pad::pad_rows(values.bytes, token_bytes, &offsets, width, pad, dst)
        })
    })
    .map_err(to_py)
}

/// Sets each row's padding in `out` (a contiguous `[B, W, ...]` host tensor, as `pad_rows`
/// writes) to a copy of the row's first token, `lengths[r]` the row's tokens (rows without
/// tokens keep their padding): NeMo-RL's `advantages` broadcast, in place.
#[pyfunction]
fn fill_padding_with_first_token(
    py: Python<'_>,
    out: &Bound<'_, PyAny>,
    lengths: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let keep = Owners::default();
    let here = || "padding fill".to_string();
    let lengths = index_values(lengths, &keep, &here)?;
    let target = tensor_ref(out, &keep, &here)?;
    if !target.is_contiguous() || target.shape.len() < 2 {
        return Err(BatchError::new_err(
            "fill_padding_with_first_token needs a contiguous [B, W, ...] output",
        ));
    }
    let token_bytes = target.shape[2..]
        .iter()
        .try_fold(target.dtype.size() as u64, |n, &d| n.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| BatchError::new_err("padding fill: a token's bytes overflow"))?;
    let width = usize::try_from(target.shape[1])
        .map_err(|_| BatchError::new_err("padding fill: the width overflows"))?;
    let (ptr, len) = (target.bytes.as_ptr() as usize, target.nbytes() as usize);
    py.detach(|| {
        // SAFETY: [ptr, ptr+len) is `out`'s contiguous storage (checked above), which `keep`
        // holds alive; `lengths` was copied into a Vec, so no other memory is read. `out` is
        // the padded layout's own tensor, written by no one else during this call.
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
        guarded(OnPanic::Internal, || {
            crate::frame::pad::fill_padding_with_first_token(dst, token_bytes, width, &lengths)
        })
    })
    .map_err(to_py)
}

/// A row selection as Python hands it over: `None` (every row), a `range`, a list of step-1
/// ranges (spans), or ints (negative ones count from the end): a list, any sequence, or a 1-D
/// int64 buffer (a numpy array, a CPU tensor's `.numpy()`), read without a Python object per
/// row. `bool`s are refused: a mask is not a list of rows 0 and 1.
fn row_selection(rows: Option<&Bound<'_, PyAny>>) -> PyResult<crate::ops::Rows> {
    use crate::ops::Rows;
    use pyo3::types::{PyBool, PyList, PyRange};
    let Some(rows) = rows.filter(|r| !r.is_none()) else {
        return Ok(Rows::All);
    };
    if let Ok(range) = rows.cast::<PyRange>() {
        let int = |name: &str| -> PyResult<i64> {
            range.getattr(name)?.extract().map_err(|_| {
                errors::WireError::new_err(format!(
                    "rows: row range {range}: {name} does not fit in 64 bits"
                ))
            })
        };
        return Ok(Rows::Range {
            start: int("start")?,
            stop: int("stop")?,
            step: int("step")?,
        });
    }
    let not_rows = || {
        errors::WireError::new_err(format!(
            "rows must be a range, a slice, a list of ranges or a sequence of ints, not {}",
            rows.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    };
    let int = |i: usize, item: &Bound<'_, PyAny>| -> PyResult<i64> {
        if item.is_instance_of::<PyBool>() {
            return Err(errors::WireError::new_err(format!(
                "rows[{i}] is {item}, a bool: pass row indices (a mask's nonzero rows), not a mask"
            )));
        }
        item.extract::<i64>().map_err(|_| {
            let shown = item.repr().map(|r| r.to_string()).unwrap_or_default();
            errors::WireError::new_err(format!(
                "rows[{i}] is {shown}: rows must be a range, a slice, a list of ranges or a \
                 sequence of ints (64-bit)"
            ))
        })
    };
    if let Ok(list) = rows.cast::<PyList>() {
        let spans = list
            .get_item(0)
            .is_ok_and(|first| first.is_instance_of::<PyRange>());
        if !spans {
            let mut out = Vec::with_capacity(list.len());
            for (i, item) in list.iter().enumerate() {
                out.push(int(i, &item)?);
            }
            return Ok(Rows::List(out));
        }
    } else if let Ok(buffer) = pyo3::buffer::PyBuffer::<i64>::get(rows) {
        if buffer.dimensions() != 1 {
            return Err(errors::WireError::new_err(format!(
                "rows: an index array must be 1-D, not of shape {:?}",
                buffer.shape()
            )));
        }
        return Ok(Rows::List(buffer.to_vec(rows.py())?));
    }
    // Sequences only: a set or a dict has no order to take rows in. Nothing is sized from
    // `len()`, which any object may answer (2**62): a selection longer than `MAX_SELECTED` is
    // refused before a row is read, and one that yields more items than it claims stops there.
    let sequence = rows
        .cast::<pyo3::types::PySequence>()
        .map_err(|_| not_rows())?;
    let claimed = sequence.len().ok().filter(|&n| n <= MAX_SELECTED);
    let Some(claimed) = claimed else {
        let shown = rows
            .len()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "more than 2**63".to_string());
        return Err(errors::WireError::new_err(format!(
            "rows: a selection of {shown} rows (its len()) is more than {MAX_SELECTED}"
        )));
    };
    let items = sequence.try_iter().map_err(|_| not_rows())?;
    let mut out = Vec::with_capacity(claimed.min(1 << 16));
    let mut spans: Option<Vec<(u64, u64)>> = None; // a list of ranges: its first item is one
    for (i, item) in items.enumerate() {
        let item = item.map_err(|_| not_rows())?;
        if i >= claimed {
            return Err(errors::WireError::new_err(format!(
                "rows: the sequence yields more than the {claimed} rows its len() gives"
            )));
        }
        if i == 0 && item.is_instance_of::<PyRange>() {
            spans = Some(Vec::new());
        }
        match spans.as_mut() {
            Some(spans) => spans.extend(row_span(&item)?),
            None => out.push(int(i, &item)?),
        }
    }
    Ok(spans.map_or(Rows::List(out), Rows::Spans))
}

/// The most rows one selection lists (a list of ints or of row spans): 2**32.
const MAX_SELECTED: usize = 1 << 32;

/// One row span of a list of ranges: `start..stop`, step 1, non-negative bounds; `None` for an
/// empty range, which (as in Python) takes no rows.
fn row_span(r: &Bound<'_, PyAny>) -> PyResult<Option<(u64, u64)>> {
    let not_span = || {
        errors::WireError::new_err(format!(
            "rows: row spans must be ranges of non-negative rows, not {r}"
        ))
    };
    let r = r.cast::<pyo3::types::PyRange>().map_err(|_| not_span())?;
    let bounds = (|| -> PyResult<(u64, u64, i64)> {
        Ok((
            r.getattr("start")?.extract()?,
            r.getattr("stop")?.extract()?,
            r.getattr("step")?.extract()?,
        ))
    })();
    let (start, stop, step) = bounds.map_err(|_| not_span())?;
    if step != 1 {
        return Err(errors::WireError::new_err(format!(
            "rows: row span {r} must have step 1"
        )));
    }
    Ok((start < stop).then_some((start, stop)))
}

/// A new frame holding `rows` (see `row_selection`) of the concatenation of `frames`' rows.
///
/// The output takes the first frame's header form (embedded or compact) and metadata, unless
/// `schema_entries` is given: the schema entries of the output's header instead (the embedded
/// form's `py_wire.schema` and `py_wire.fingerprint`, or the compact form's
/// `py_wire.schema_ref`), replacing whichever the first frame carries.
///
/// The frames must agree on every caller metadata key (not `py_wire.*`) except those of
/// `per_row`, pairs of a key and the JSON spec of the scalar field each frame's value of that
/// key fills, row by row (see `ops::facts`).
#[pyfunction]
#[pyo3(signature = (frames, rows=None, schema_entries=None, per_row=None))]
fn gather(
    py: Python<'_>,
    frames: Vec<Bound<'_, Frame>>,
    rows: Option<Bound<'_, PyAny>>,
    schema_entries: Option<BTreeMap<String, String>>,
    per_row: Option<Vec<(String, String)>>,
) -> PyResult<Frame> {
    let rows = row_selection(rows.as_ref())?;
    let per_row = per_row
        .unwrap_or_default()
        .into_iter()
        .map(|(key, spec)| {
            let spec: FieldSpec = serde_json::from_str(&spec)
                .map_err(|e| SchemaError::new_err(format!("per_row {key:?}: {spec}: {e}")))?;
            Ok(crate::ops::PerRow { key, spec })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let frames: Vec<&Frame> = frames.iter().map(|f| f.get()).collect();
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            let sources: Vec<crate::ops::Source<'_>> = frames
                .iter()
                .map(|f| crate::ops::Source {
                    bytes: f.bytes(),
                    layout: f.layout(),
                })
                .collect();
            let options = EncodeOptions::default();
            let (buf, layout) =
                crate::ops::take_with(&sources, &rows, schema_entries.as_ref(), &per_row, options)?;
            Ok(Frame::from_owned(buf, layout))
        })
    })
    .map_err(to_py)
}

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
fn pack_into(
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

/// Holds a schema for this process (see `frame::compact::hold_text`), given as its JSON (the
/// full form, or a frame's canonical text): compact frames that name its fingerprint can be
/// read from then on, and `held_schema` returns the text. `learnt` marks a schema read from a
/// frame, kept only up to a cap. Returns whether it is held, and its fingerprint.
#[pyfunction]
#[pyo3(signature = (text, learnt=false))]
fn hold_schema(text: &str, learnt: bool) -> PyResult<(bool, String)> {
    crate::frame::compact::hold_text(text, learnt).map_err(to_py)
}

/// The JSON of the schema this process holds under `fingerprint` (`hold_schema`), or None.
#[pyfunction]
fn held_schema(fingerprint: &str) -> Option<String> {
    crate::frame::compact::held_text(fingerprint).map(|t| t.to_string())
}

/// Marks the schema this process holds under `fingerprint` as loaded (never let go, as
/// `hold_schema(text, learnt=False)` does); returns whether one is held (see
/// `frame::compact::pin`).
#[pyfunction]
fn pin_schema(fingerprint: &str) -> PyResult<bool> {
    crate::frame::compact::pin(fingerprint).map_err(to_py)
}

/// Whether this process holds a schema under `fingerprint`, marking it used (so that a learnt
/// schema still received is not let go first).
#[pyfunction]
fn holds_schema(fingerprint: &str) -> bool {
    crate::frame::compact::holds(fingerprint)
}

/// Schemas learnt from frames that this process holds: (count, bytes kept, byte budget).
#[pyfunction]
fn learnt_schemas() -> (usize, usize, usize) {
    crate::frame::compact::learnt_usage()
}

/// Sets the bytes schemas learnt from frames may keep (the least recently used beyond it are
/// let go); returns the budget it replaces.
#[pyfunction]
fn set_learnt_schema_budget(max_bytes: usize) -> PyResult<usize> {
    crate::frame::compact::set_learnt_budget(max_bytes).map_err(to_py)
}

/// Consecutive sections of `frame` of `sizes` rows each (adding up to its row count), reading
/// its tables once.
#[pyfunction]
fn split_rows(py: Python<'_>, frame: &Bound<'_, Frame>, sizes: Vec<u64>) -> PyResult<Vec<Frame>> {
    let frame = frame.get();
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            let source = crate::ops::Source {
                bytes: frame.bytes(),
                layout: frame.layout(),
            };
            let sections = crate::ops::split_frames(source, &sizes, EncodeOptions::default())?;
            Ok(sections
                .into_iter()
                .map(|(buf, layout)| Frame::from_owned(buf, layout))
                .collect())
        })
    })
    .map_err(to_py)
}

/// The content of `fields` in `frame` as one digest (`"xxh3-128:<32 hex>"`, see
/// `frame::checksum::content_digest`), without the GIL: what names a streamed sample's images,
/// so that a buffer stores a prompt's images once. `FrameError` names a field the frame lacks.
#[pyfunction]
fn content_digest(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    fields: Vec<String>,
) -> PyResult<String> {
    let frame = frame.get();
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            crate::frame::checksum::content_digest(&frame.layout().header, &fields, frame.bytes())
        })
    })
    .map_err(to_py)
}

/// Applies the field rules to one field as a schema declares it (JSON: name, tier, dtype,
/// shape with `null` for ragged dims, pack_dim, wire_dtype, lossy) and returns the field spec a
/// frame stores, as JSON (`SchemaError` naming the field if a rule is broken). The schema
/// loader calls this: the codec owns the rules.
#[pyfunction]
fn validate_field_spec(decl_json: &str) -> PyResult<String> {
    let decl: crate::schema::spec::FieldDecl = serde_json::from_str(decl_json)
        .map_err(|e| SchemaError::new_err(format!("field {decl_json}: {e}")))?;
    let spec = decl.resolve().map_err(to_py)?;
    serde_json::to_string(&spec).map_err(|e| SchemaError::new_err(e.to_string()))
}

/// The JSON value of `text` (what Python's `json.dumps` wrote of the data it was given), for the
/// schema model: a failure here is the data's, so a `SchemaError`.
fn schema_json(text: &str) -> PyResult<crate::schema::text::Json> {
    crate::schema::text::check_nesting(text)
        .and_then(|()| crate::schema::text::parse(text))
        .map_err(|e| SchemaError::new_err(e.message().replace("the frame's schema", "the schema")))
}

/// Reads a whole schema, given as JSON (`schema::model::resolve`): its keys typed, defaults
/// filled, every field and contract rule applied. Returns `(canonical, fingerprint, full)`:
/// the canonical form frames embed, its fingerprint, and every key (fields in declared order)
/// for the typed view. `SchemaError` names the key's path and the value.
#[pyfunction]
fn resolve_schema(py: Python<'_>, text: &str) -> PyResult<(String, String, String)> {
    let value = schema_json(text)?;
    py.detach(|| crate::schema::model::resolve(&value))
        .map(|r| (r.canonical, r.fingerprint, r.full))
        .map_err(to_py)
}

/// Reads one field outside a schema (`schema::model::resolve_field`); returns its full JSON.
#[pyfunction]
fn resolve_field(text: &str) -> PyResult<String> {
    crate::schema::model::resolve_field(&schema_json(text)?).map_err(to_py)
}

/// Reads one contract outside a schema (`schema::model::resolve_contract`); returns its full
/// JSON.
#[pyfunction]
fn resolve_contract(text: &str) -> PyResult<String> {
    crate::schema::model::resolve_contract(&schema_json(text)?).map_err(to_py)
}

/// The canonical form (`schema::text`) of the JSON `text` holds: what CPython's
/// `json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))` gives. `FrameError`
/// if `text` is not JSON as `json.loads` reads it, or nests deeper than `MAX_NESTING`.
#[pyfunction]
fn canonical_json(text: &str) -> PyResult<String> {
    crate::schema::text::check_nesting(text).map_err(to_py)?;
    let value = crate::schema::text::parse(text).map_err(to_py)?;
    Ok(crate::schema::text::canonical(&value))
}

/// Every check the reader makes on an embedded schema (`schema::embedded::check_text`: size,
/// fingerprint, nesting, JSON, canonical form, the field rules); `FrameError` naming what is
/// wrong.
#[pyfunction]
fn check_schema_text(text: &str, fingerprint: &str) -> PyResult<()> {
    crate::schema::embedded::checked_facts(text, fingerprint)
        .map(|_| ())
        .map_err(to_py)
}

/// Whether a caller's `__metadata__` key is reserved for py_wire (see
/// `meta::reserved_unknown`; the known `py_wire.*` keys are reserved too): `encode` refuses it.
#[pyfunction]
fn reserved_metadata_key(key: &str) -> bool {
    key.starts_with(crate::schema::spec::meta::PREFIX)
        || crate::schema::spec::meta::reserved_unknown(key)
}

/// What this process's copies stream from: the frame size (0: every frame; `usize::MAX`: none),
/// then what `PY_WIRE_STREAMING=auto` decides it from, the last-level cache cpu0 reports and
/// glibc's `x86_non_temporal_threshold` (each `None` where it could not be read).
#[pyfunction]
fn streaming_threshold() -> (usize, Option<usize>, Option<usize>) {
    let report = crate::memory::stream::CacheReport::current();
    (
        crate::memory::stream::threshold(),
        report.last_level_cache,
        report.glibc_threshold,
    )
}

#[pymodule]
mod _native {
    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        super::errors::init_classes(m.py())?;
        let keys = pyo3::types::PyDict::new(m.py());
        for (short, key) in crate::schema::spec::meta::ALL {
            keys.set_item(short, key)?;
        }
        m.add("METADATA_KEYS", keys)?;
        let widenings = pyo3::types::PyDict::new(m.py());
        for from in crate::schema::dtype::DType::all() {
            let into: Vec<&str> = crate::schema::dtype::DType::all()
                .filter(|&to| crate::schema::cast::widens_exactly(from, to))
                .map(|to| to.name())
                .collect();
            if !into.is_empty() {
                widenings.set_item(from.name(), into)?;
            }
        }
        m.add("LOSSLESS_WIDENINGS", widenings)?;
        m.add(
            "ERROR_CONTEXT",
            pyo3::types::PyTuple::new(m.py(), super::errors::CONTEXT)?,
        )?;
        m.add("MAX_HEADER_BYTES", crate::frame::header::MAX_HEADER_BYTES)?;
        m.add("MAX_SCHEMA_BYTES", crate::schema::text::MAX_SCHEMA_BYTES)?;
        m.add("MAX_NESTING", crate::schema::text::MAX_NESTING)?;
        m.add(
            "MAX_DECLARED_ITEMS",
            crate::schema::model::MAX_DECLARED_ITEMS,
        )?;
        let defaults = pyo3::types::PyDict::new(m.py());
        for (kind, table) in [
            ("schema", &crate::schema::model::SCHEMA_DEFAULTS[..]),
            ("field", &crate::schema::model::FIELD_DEFAULTS[..]),
            ("contract", &crate::schema::model::CONTRACT_DEFAULTS[..]),
        ] {
            let entries = pyo3::types::PyDict::new(m.py());
            for (key, json) in table {
                entries.set_item(key, json)?;
            }
            defaults.set_item(kind, entries)?;
        }
        m.add("SCHEMA_DEFAULTS", defaults)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }

    #[pymodule_export]
    use super::codec::Codec;
    #[pymodule_export]
    use super::errors::{BatchError, ContractError, FrameError, SchemaError, WireError};
    #[pymodule_export]
    use super::errors::{InternalError, RowIndexError};
    #[pymodule_export]
    use super::extract::register_torch;
    #[pymodule_export]
    use super::frame::{BorrowedBytes, Frame, ReceiveBuffer};
    #[pymodule_export]
    use super::layout::{PyFieldLayout, PyFrameLayout, PyTensorLoc};
    #[pymodule_export]
    use super::registry::unpin_schema;
    #[pymodule_export]
    use super::transport::{
        encoded_nbytes, frame_nbytes, frame_validation_ranges, interleaved_shard_ranges,
        micro_batch_rows, pack_rows,
    };
    #[pymodule_export]
    use super::{canonical_json, check_schema_text, validate_field_spec};
    #[pymodule_export]
    use super::{check_frame_contracts, placeholder_runs};
    #[pymodule_export]
    use super::{
        content_digest, gather, held_schema, hold_schema, holds_schema, learnt_schemas, pack_into,
        pin_schema, reserved_metadata_key, set_learnt_schema_budget, split_rows,
        streaming_threshold,
    };
    #[pymodule_export]
    use super::{encode, encode_parts};
    #[pymodule_export]
    use super::{fill_padding_with_first_token, pad_rows};
    #[pymodule_export]
    use super::{resolve_contract, resolve_field, resolve_schema};
}
