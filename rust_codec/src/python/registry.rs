//! The schema registry's release: a `Schema` object that pinned its schema gives the pin back
//! when it is freed (`frame::compact::unpin`).

use pyo3::prelude::*;

use super::errors::to_py;

/// Releases one pin of the schema held under `fingerprint` (`pin_schema` or
/// `hold_schema(text, learnt=False)` took it); the last one lets the registry go of the schema
/// within the learnt bounds. Returns whether one is held afterwards.
#[pyfunction]
pub fn unpin_schema(fingerprint: &str) -> PyResult<bool> {
    crate::frame::compact::unpin(fingerprint).map_err(to_py)
}
