//! Padded tensors cut by a mask (`encode::windows`): each row's window of marked cells and
//! the one value the cells outside hold, for adapters that encode such tensors as they are.

use pyo3::prelude::*;

use super::errors::{guarded, to_py, BatchError, OnPanic};
use super::extract::tensor_ref;
use super::owners::Owners;
use crate::encode::windows::{self, Windows};

/// One `(starts, lengths)` pair per column offset of `skips`, and for each `(tensor, skip)`
/// of `padded`: the (row, column) of the one value its cells outside its windows (those of
/// `skips[skip]`) hold, or None. None as a whole when `mask` (`[B, W]`) marks more than one
/// run in a row or is not an integer or bool tensor.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn mask_windows(
    mask: &Bound<'_, PyAny>,
    skips: Vec<u64>,
    padded: Vec<(Bound<'_, PyAny>, usize)>,
) -> PyResult<Option<(Vec<(Vec<u64>, Vec<u64>)>, Vec<Option<(u64, u64)>>)>> {
    let keep = Owners::default();
    let mask = tensor_ref(mask, &keep, &|| "mask".to_string())?;
    let mut tensors = Vec::with_capacity(padded.len());
    for (i, (t, skip)) in padded.iter().enumerate() {
        if *skip >= skips.len() {
            return Err(BatchError::new_err(format!(
                "padded tensor {i}: skip index {skip} but {} skips",
                skips.len()
            )));
        }
        tensors.push((
            tensor_ref(t, &keep, &|| format!("padded tensor {i}"))?,
            *skip,
        ));
    }
    let found = guarded(OnPanic::Internal, || {
        let Some(all) = windows::mask_windows(&mask, &skips)? else {
            return Ok(None);
        };
        let pads = tensors
            .iter()
            .map(|(t, skip)| windows::uniform_outside(t, &all[*skip]))
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(Some((all, pads)))
    })
    .map_err(to_py)?;
    Ok(found.map(|(all, pads)| {
        let pairs = all
            .into_iter()
            .map(|Windows { starts, lengths }| (starts, lengths))
            .collect();
        (pairs, pads)
    }))
}
