//! A row selection as Python hands it over, read into the core's `ops::Rows` without a Python
//! object per row.

use pyo3::prelude::*;

use super::errors;

/// A row selection as Python hands it over: `None` (every row), a `range`, a list of step-1
/// ranges (spans), or ints (negative ones count from the end): a list, any sequence, or a 1-D
/// int64 buffer (a numpy array, a CPU tensor's `.numpy()`), read without a Python object per
/// row. `bool`s are refused: a mask is not a list of rows 0 and 1.
pub(super) fn row_selection(rows: Option<&Bound<'_, PyAny>>) -> PyResult<crate::ops::Rows> {
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
