//! The schema gates: the one place a schema handed in as Python data (`Schema.from_dict`,
//! `Schema(...)`, `FieldDef(...)`) or as source text (a TOML file, `Schema.from_json`'s JSON) is
//! refused before the schema model (`schema::model`) or a parser reads it. Python repeats none
//! of these checks.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::errors::{to_py, SchemaError};
use crate::schema::model::MAX_DECLARED_ITEMS;
use crate::schema::text::{check_source, in_order, Json, Syntax, MAX_NESTING};

/// Past any range a schema has (and short of the digit limits of CPython's `int`).
const MAX_INT_BITS: u64 = 256;

/// Python data as the JSON text the schema model reads: dicts with string keys, lists and
/// tuples, strings, ints, floats, bools and None; anything else is handed to `dump` (which
/// gives a pydantic model's dump, or None). `SchemaError` naming the key's path (and the key or
/// type found) for anything else, for data nested deeper than `MAX_NESTING` or a table or list
/// of more than `MAX_DECLARED_ITEMS` entries (checked before any of it is read: `range(2**62)`
/// is refused, not listed), or an integer of more than 256 bits.
#[pyfunction]
pub fn schema_data(value: &Bound<'_, PyAny>, dump: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(in_order(&read(value, Some(dump), "", 0)?))
}

/// The gate of a schema's source text (`schema::text::check_source`): its size, and its
/// brackets' nesting outside strings and comments, before any parser reads it. `syntax` is
/// `"toml"` or `"json"`; the `SchemaError` names `source`.
#[pyfunction]
pub fn check_schema_source(
    text: &Bound<'_, PyString>,
    syntax: &str,
    source: &Bound<'_, PyString>,
) -> PyResult<()> {
    // Lossy: a lone surrogate (which Python strings may hold) is one character and no bracket.
    let (text, source) = (text.to_string_lossy(), source.to_string_lossy());
    let syntax = match syntax {
        "toml" => Syntax::Toml,
        "json" => Syntax::Json,
        other => {
            return Err(SchemaError::new_err(format!(
                "{source}: syntax must be 'toml' or 'json', not {other:?}"
            )))
        }
    };
    check_source(&text, syntax, &source).map_err(to_py)
}

fn read(
    value: &Bound<'_, PyAny>,
    dump: Option<&Bound<'_, PyAny>>,
    at: &str,
    depth: usize,
) -> PyResult<Json> {
    let place = if at.is_empty() { "the schema" } else { at };
    let refuse = |what: String| Err(SchemaError::new_err(format!("{place}: {what}")));
    if depth > MAX_NESTING {
        return refuse(format!("nested deeper than {MAX_NESTING} levels"));
    }
    let py = value.py();
    if value.is_none() {
        return Ok(Json::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Json::Bool(b.is_true()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Json::Str(code_points(s)?));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Json::Float(f.value()));
    }
    if value.cast::<PyInt>().is_ok() {
        // `int`'s own methods: a subclass (an IntEnum) is written as its value, as json does.
        let int = py.get_type::<PyInt>();
        let bits: u64 = int.getattr("bit_length")?.call1((value,))?.extract()?;
        if bits > MAX_INT_BITS {
            return refuse(format!("an integer of {bits} bits is out of range"));
        }
        let digits: String = int.getattr("__repr__")?.call1((value,))?.extract()?;
        return Ok(Json::Int(digits));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        if d.len() > MAX_DECLARED_ITEMS {
            return refuse(format!("{} entries; at most {MAX_DECLARED_ITEMS}", d.len()));
        }
        let mut items = Vec::with_capacity(d.len());
        // A copy of the items: a `dump` that changes the dict cannot change what is read.
        for pair in d.items().iter() {
            let (key, item) = pair.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            let Ok(key) = key.cast::<PyString>() else {
                let shown: String = key.repr()?.to_string().chars().take(80).collect();
                return refuse(format!(
                    "keys are strings, not {} {shown}",
                    key.get_type().name()?
                ));
            };
            let name = key.to_string_lossy();
            let inner = if at.is_empty() {
                name.to_string()
            } else {
                format!("{at}.{name}")
            };
            items.push((code_points(key)?, read(&item, dump, &inner, depth + 1)?));
        }
        return Ok(Json::Object(items));
    }
    let sequence = if let Ok(l) = value.cast::<PyList>() {
        Some(l.to_tuple())
    } else {
        value.cast::<PyTuple>().ok().cloned()
    };
    if let Some(items) = sequence {
        if items.len() > MAX_DECLARED_ITEMS {
            return refuse(format!(
                "{} items; at most {MAX_DECLARED_ITEMS}",
                items.len()
            ));
        }
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let inner = if at.is_empty() {
                    i.to_string()
                } else {
                    format!("{at}.{i}")
                };
                read(&item, dump, &inner, depth + 1)
            })
            .collect::<PyResult<Vec<Json>>>()
            .map(Json::Array);
    }
    if let Some(dump) = dump {
        let dumped = dump.call1((value,))?;
        if !dumped.is_none() {
            // A model's dump holds plain data only: nothing in it is dumped again.
            return read(&dumped, None, at, depth);
        }
    }
    refuse(format!(
        "must be a table, list, string, number, bool or null, not {}",
        value.get_type().name()?
    ))
}

/// A Python string's code points, lone surrogates included (as `json.dumps` writes them).
fn code_points(s: &Bound<'_, PyString>) -> PyResult<Vec<u32>> {
    if let Ok(text) = s.to_str() {
        return Ok(text.chars().map(u32::from).collect());
    }
    let encoded = s.py().get_type::<PyString>().getattr("encode")?.call1((
        s,
        "utf-32-le",
        "surrogatepass",
    ))?;
    let bytes = encoded.cast::<PyBytes>()?.as_bytes();
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}
