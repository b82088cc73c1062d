//! Padded decode's two writes into a fresh `[B, W, ...]` tensor: rows padded with a value, and
//! NeMo-RL's first-token broadcast into the padding.

use pyo3::prelude::*;

use super::errors::{self, guarded, to_py, BatchError, OnPanic};
use super::extract::{index_values, tensor_ref};
use super::frame::{Frame, ReceiveBuffer};
use super::owners::Owners;
use crate::frame::pad::{self, PadField};
use crate::memory::buffer::AlignedBuf;
use crate::tier::{self, Items};

/// The per-token fields `fields` (`(name, pad element's bytes)`) of `frame` padded to
/// `[rows, width, ...]` in one call, into one new buffer: `(buffer, width, lengths_at,
/// [each field's first byte])`, the rows' int64 lengths at `lengths_at` (see
/// `frame::pad::pad_fields`). The copy runs without the GIL; the frame's values and sequence
/// offsets are read from its validated layout, so nothing but names and pad bytes crosses.
#[pyfunction]
#[pyo3(signature = (frame, fields, multiple=None))]
pub fn pad_fields(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    fields: Vec<(String, Vec<u8>)>,
    multiple: Option<u64>,
) -> PyResult<(ReceiveBuffer, usize, usize, Vec<usize>)> {
    let fields: Vec<_> = fields.into_iter().map(|(n, p)| (n, p, false)).collect();
    let frame = frame.get();
    let picked = picked_fields(frame, &fields)?;
    let (buf, plan) = padded(py, frame, &picked, |offsets, sizes| {
        pad::padded_plan(offsets, sizes, multiple)
    })?;
    Ok((buf, plan.width, plan.lengths_at, plan.blocks))
}

/// `pad_fields` for a step's micro-batches: each row group of `groups` (`(start, stop)`)
/// padded at its own width (its longest row rounded up to `narrow`, never past the batch's
/// width; `narrow=None`: the batch's width) into one new buffer, one pass without the GIL.
/// `fields` are `(name, pad element's bytes, first_token)`: `first_token` pads each row that
/// has tokens with copies of its first token. Returns `(buffer, batch width, [each group's
/// width], lengths_at, [each field's first byte], mask's first byte or None)`: a field's block
/// holds the groups' `[rows, width, ...]` one after another (`frame::pad::grouped_plan`);
/// `mask=True` adds one bool a cell, True on real tokens.
#[pyfunction]
#[pyo3(signature = (frame, fields, groups, multiple=None, narrow=None, mask=false))]
#[allow(clippy::type_complexity)]
pub fn pad_micro_batches(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    fields: Vec<(String, Vec<u8>, bool)>,
    groups: Vec<(usize, usize)>,
    multiple: Option<u64>,
    narrow: Option<u64>,
    mask: bool,
) -> PyResult<(
    ReceiveBuffer,
    usize,
    Vec<usize>,
    usize,
    Vec<usize>,
    Option<usize>,
)> {
    let frame = frame.get();
    let picked = picked_fields(frame, &fields)?;
    let (buf, plan) = padded(py, frame, &picked, |offsets, sizes| {
        pad::grouped_plan(offsets, sizes, multiple, &groups, narrow, mask)
    })?;
    Ok((
        buf,
        plan.width,
        plan.widths,
        plan.lengths_at,
        plan.blocks,
        plan.mask_at,
    ))
}

/// Each named per-token field's values in `frame` with its pad, checked: a name that is not a
/// per-token field of the frame, or a pad that does not tile its tokens, is a `BatchError`.
fn picked_fields<'a>(
    frame: &'a Frame,
    fields: &'a [(String, Vec<u8>, bool)],
) -> PyResult<Vec<PadField<'a>>> {
    let layout = frame.layout();
    let bytes = frame.bytes();
    let mut picked = Vec::with_capacity(fields.len());
    for (name, pad, first_token) in fields {
        let field = layout
            .field(name)
            .filter(|f| tier::of(f.spec.tier).items() == Items::Tokens)
            .ok_or_else(|| {
                BatchError::new_err(format!(
                    "padded decode: {name:?} is not a per-token field of the frame"
                ))
            })?;
        let loc = &field.values;
        let token_bytes = loc.shape[1..]
            .iter()
            .try_fold(loc.dtype.size() as u64, |n, &d| n.checked_mul(d))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                BatchError::new_err(format!("padded decode: a token of {name:?} overflows"))
            })?;
        if pad.is_empty() || token_bytes % pad.len() != 0 {
            return Err(BatchError::new_err(format!(
                "padded decode: a pad of {} bytes does not tile a token of {name:?} ({token_bytes} bytes)",
                pad.len()
            )));
        }
        let values = bytes
            .get(loc.offset..loc.offset.saturating_add(loc.nbytes))
            .ok_or_else(|| {
                errors::InternalError::new_err("padded decode: values outside the frame")
            })?;
        picked.push(PadField {
            values,
            token_bytes,
            pad,
            first_token: *first_token,
        });
    }
    Ok(picked)
}

/// `picked` padded by the plan `plan_of` makes from the frame's sequence offsets and the
/// fields' token sizes, into one new (pooled) buffer, without the GIL.
fn padded(
    py: Python<'_>,
    frame: &Frame,
    picked: &[PadField<'_>],
    plan_of: impl FnOnce(&[u64], &[usize]) -> crate::error::Result<pad::PaddedPlan> + Send,
) -> PyResult<(ReceiveBuffer, pad::PaddedPlan)> {
    let (bytes, layout) = (frame.bytes(), frame.layout());
    py.detach(|| {
        guarded(OnPanic::Frame, || {
            let offsets =
                crate::frame::layout::read_seq_offsets(bytes, layout)?.ok_or_else(|| {
                    crate::frame_err!("padded decode: the frame has no sequence offsets")
                })?;
            let sizes: Vec<usize> = picked.iter().map(|f| f.token_bytes).collect();
            let plan = plan_of(&offsets, &sizes)?;
            let mut buf = AlignedBuf::recycled(plan.nbytes).ok_or_else(|| {
                crate::frame_err!("padded decode: cannot allocate {} bytes", plan.nbytes)
            })?;
            pad::pad_fields(&offsets, picked, &plan, buf.as_mut_slice())?;
            Ok((ReceiveBuffer::from_buf(buf), plan))
        })
    })
    .map_err(to_py)
}

/// Fills `out` (a fresh contiguous `[B, W, ...]` tensor) with the rows of `values` padded by
/// the element whose bytes are `pad`.
#[pyfunction]
pub fn pad_rows(
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
pub fn fill_padding_with_first_token(
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
