//! Padded decode's two writes into a fresh `[B, W, ...]` tensor: rows padded with a value, and
//! NeMo-RL's first-token broadcast into the padding.

use pyo3::prelude::*;

use super::errors::{self, guarded, to_py, BatchError, OnPanic};
use super::extract::{index_values, tensor_ref};
use super::owners::Owners;

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
