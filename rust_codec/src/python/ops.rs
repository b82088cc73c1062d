//! Frame operations without decoding: rows of frames gathered into one, a frame split into
//! consecutive sections.

use std::collections::BTreeMap;

use pyo3::prelude::*;

use super::errors::{guarded, to_py, OnPanic, SchemaError};
use super::frame::Frame;
use super::rows::row_selection;
use crate::encode::EncodeOptions;
use crate::schema::spec::FieldSpec;

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
pub fn gather(
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

/// Consecutive sections of `frame` of `sizes` rows each (adding up to its row count), reading
/// its tables once.
#[pyfunction]
pub fn split_rows(
    py: Python<'_>,
    frame: &Bound<'_, Frame>,
    sizes: Vec<u64>,
) -> PyResult<Vec<Frame>> {
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
