//! The schema model's entry points: whole schemas, fields and contracts read and settled by
//! `schema::model`, canonical JSON, embedded-schema checks and reserved metadata keys. The
//! codec owns the rules; Python's loader asks here.

use pyo3::prelude::*;

use super::errors::{to_py, SchemaError};

/// Applies the field rules to one field as a schema declares it (JSON: name, tier, dtype,
/// shape with `null` for ragged dims, pack_dim, wire_dtype, lossy) and returns the field spec a
/// frame stores, as JSON (`SchemaError` naming the field if a rule is broken). The schema
/// loader calls this: the codec owns the rules.
#[pyfunction]
pub fn validate_field_spec(decl_json: &str) -> PyResult<String> {
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
pub fn resolve_schema(py: Python<'_>, text: &str) -> PyResult<(String, String, String)> {
    let value = schema_json(text)?;
    py.detach(|| crate::schema::model::resolve(&value))
        .map(|r| (r.canonical, r.fingerprint, r.full))
        .map_err(to_py)
}

/// Which fields and contracts each stage of a schema (given as JSON, fields in declared order)
/// needs, as JSON (`schema::stages`: the rules, which Python's view only reads).
#[pyfunction]
pub fn schema_stages(py: Python<'_>, text: &str) -> PyResult<String> {
    let value = schema_json(text)?;
    py.detach(|| crate::schema::model::stage_plan(&value))
        .map(|plan| plan.to_json())
        .map_err(to_py)
}

/// Reads one field outside a schema (`schema::model::resolve_field`); returns its full JSON.
#[pyfunction]
pub fn resolve_field(text: &str) -> PyResult<String> {
    crate::schema::model::resolve_field(&schema_json(text)?).map_err(to_py)
}

/// Reads one contract outside a schema (`schema::model::resolve_contract`); returns its full
/// JSON.
#[pyfunction]
pub fn resolve_contract(text: &str) -> PyResult<String> {
    crate::schema::model::resolve_contract(&schema_json(text)?).map_err(to_py)
}

/// The canonical form (`schema::text`) of the JSON `text` holds: what CPython's
/// `json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))` gives. `FrameError`
/// if `text` is not JSON as `json.loads` reads it, or nests deeper than `MAX_NESTING`.
#[pyfunction]
pub fn canonical_json(text: &str) -> PyResult<String> {
    crate::schema::text::check_nesting(text).map_err(to_py)?;
    let value = crate::schema::text::parse(text).map_err(to_py)?;
    Ok(crate::schema::text::canonical(&value))
}

/// Every check the reader makes on an embedded schema (`schema::embedded::check_text`: size,
/// fingerprint, nesting, JSON, canonical form, the field rules); `FrameError` naming what is
/// wrong.
#[pyfunction]
pub fn check_schema_text(text: &str, fingerprint: &str) -> PyResult<()> {
    crate::frame::compact::checked_facts(text, fingerprint)
        .map(|_| ())
        .map_err(to_py)
}

/// Whether a caller's `__metadata__` key is reserved for py_wire (see
/// `meta::reserved_unknown`; the known `py_wire.*` keys are reserved too): `encode` refuses it.
#[pyfunction]
pub fn reserved_metadata_key(key: &str) -> bool {
    key.starts_with(crate::schema::spec::meta::PREFIX)
        || crate::schema::spec::meta::reserved_unknown(key)
}
