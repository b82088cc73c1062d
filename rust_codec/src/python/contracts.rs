//! Contracts checked over a received frame, and placeholder runs counted over token rows.

use pyo3::prelude::*;

use super::codec::Codec;
use super::errors::{guarded, to_py, BatchError, OnPanic};
use super::extract;
use super::frame::Frame;
use super::owners::Owners;
use crate::contract::check_contracts;

/// Checks the schema's contracts against an already-encoded frame (e.g. one received).
#[pyfunction]
#[pyo3(name = "check_contracts")]
pub fn check_frame_contracts(
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
pub fn placeholder_runs(
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
