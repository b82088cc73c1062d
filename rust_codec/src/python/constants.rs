//! The module's constants: what Python reads of the codec's tables (metadata keys, lossless
//! widenings, error context fields, caps, schema defaults) rather than restating them.

use pyo3::prelude::*;

/// Adds the constants to the `_native` module `m`.
pub fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
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
    Ok(())
}
