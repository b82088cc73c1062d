//! The registry of schemas this process holds (`frame::compact`), asked from Python.

use pyo3::prelude::*;

use super::errors::to_py;

/// Holds a schema for this process (see `frame::compact::hold_text`), given as its JSON (the
/// full form, or a frame's canonical text): compact frames that name its fingerprint can be
/// read from then on, and `held_schema` returns the text. `learnt` marks a schema read from a
/// frame, kept only up to a cap. Returns whether it is held, and its fingerprint.
#[pyfunction]
#[pyo3(signature = (text, learnt=false))]
pub fn hold_schema(text: &str, learnt: bool) -> PyResult<(bool, String)> {
    crate::frame::compact::hold_text(text, learnt).map_err(to_py)
}

/// The JSON of the schema this process holds under `fingerprint` (`hold_schema`), or None.
#[pyfunction]
pub fn held_schema(fingerprint: &str) -> Option<String> {
    crate::frame::compact::held_text(fingerprint).map(|t| t.to_string())
}

/// Pins the schema this process holds under `fingerprint` (not let go until each pin is
/// released by `unpin_schema`, as `hold_schema(text, learnt=False)` pins it); returns whether
/// one is held (see `frame::compact::pin`).
#[pyfunction]
pub fn pin_schema(fingerprint: &str) -> PyResult<bool> {
    crate::frame::compact::pin(fingerprint).map_err(to_py)
}

/// Whether this process holds a schema under `fingerprint`, marking it used (so that a learnt
/// schema still received is not let go first).
#[pyfunction]
pub fn holds_schema(fingerprint: &str) -> bool {
    crate::frame::compact::holds(fingerprint)
}

/// What this process keeps for schemas it no longer references (`frame::compact`: learnt and
/// released schemas, checked texts, Python's views of them): (count, bytes kept, byte budget).
#[pyfunction]
pub fn learnt_schemas() -> (usize, usize, usize) {
    crate::frame::compact::learnt_usage()
}

/// Sets the bytes everything kept for schemas the process no longer references may take (the
/// least recently used beyond it are let go, whichever cache holds it); returns the budget it
/// replaces.
#[pyfunction]
pub fn set_learnt_schema_budget(max_bytes: usize) -> PyResult<usize> {
    crate::frame::compact::set_learnt_budget(max_bytes).map_err(to_py)
}

/// Releases one pin of the schema held under `fingerprint` (`pin_schema` or
/// `hold_schema(text, learnt=False)` took it); the last one lets the registry go of the schema
/// within the learnt bounds. Returns whether one is held afterwards.
#[pyfunction]
pub fn unpin_schema(fingerprint: &str) -> PyResult<bool> {
    crate::frame::compact::unpin(fingerprint).map_err(to_py)
}

/// Charges the schema held under `fingerprint` the measured bytes of a typed view Python keeps
/// of it (`held`: of its held text, else of an embedded frame's), in place of that view's
/// previous charge (`frame::compact::charge_view`). Returns whether it is held afterwards.
#[pyfunction]
pub fn charge_schema_view(fingerprint: &str, held: bool, nbytes: usize) -> PyResult<bool> {
    crate::frame::compact::charge_view(fingerprint, held, nbytes).map_err(to_py)
}

/// The fingerprints of schemas let go since the last call whose views Python was charged for:
/// it drops those views.
#[pyfunction]
pub fn released_schema_views() -> PyResult<Vec<String>> {
    crate::frame::compact::released_views().map_err(to_py)
}
