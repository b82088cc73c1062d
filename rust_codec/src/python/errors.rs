//! The Python exception hierarchy, rooted in `WireError(ValueError)`, and the mapping from the
//! crate's one error enum.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::PyErr;

use crate::error::{Code, Error};
use crate::{frame_err, internal_err};

create_exception!(
    py_wire,
    WireError,
    PyValueError,
    "Base of every py_wire error."
);
create_exception!(
    py_wire,
    SchemaError,
    WireError,
    "A schema file is invalid, or a schema does not match a frame or a request."
);
create_exception!(
    py_wire,
    BatchError,
    WireError,
    "A batch breaks its schema (found while encoding)."
);
create_exception!(
    py_wire,
    ContractError,
    BatchError,
    "A cross-field contract is broken, e.g. placeholder tokens vs. image features."
);
create_exception!(
    py_wire,
    FrameError,
    WireError,
    "Bytes that are not a valid py_wire frame."
);
create_exception!(
    py_wire,
    RowIndexError,
    WireError,
    "A row selection names a row the frame does not have (`rows` out of range)."
);

create_exception!(
    py_wire,
    InternalError,
    WireError,
    "A broken invariant inside py_wire: a bug, not the caller's input (please report it)."
);

/// The structured attributes every py_wire exception carries (None where unknown), and the
/// class-level defaults of `kind`.
pub const CONTEXT: [&str; 6] = ["field", "row", "segment", "item", "expected", "found"];

/// Sets the class-level defaults, so exceptions raised from Python carry the attributes too.
pub fn init_classes(py: Python<'_>) -> PyResult<()> {
    let classes = [
        (py.get_type::<WireError>(), "argument"),
        (py.get_type::<SchemaError>(), "schema"),
        (py.get_type::<BatchError>(), "batch"),
        (py.get_type::<ContractError>(), "contract"),
        (py.get_type::<FrameError>(), "frame"),
        (py.get_type::<RowIndexError>(), "row_index"),
        (py.get_type::<InternalError>(), "internal"),
    ];
    for (class, kind) in classes {
        class.setattr("kind", kind)?;
    }
    let base = py.get_type::<WireError>();
    for name in CONTEXT {
        base.setattr(name, py.None())?;
    }
    Ok(())
}

fn json_to_py<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::IntoPyObjectExt;
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_bound_py_any(py)?,
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.into_bound_py_any(py)?,
            (None, Some(u), _) => u.into_bound_py_any(py)?,
            (None, None, f) => f.unwrap_or(f64::NAN).into_bound_py_any(py)?,
        },
        Value::String(s) => s.into_bound_py_any(py)?,
        Value::Array(items) => pyo3::types::PyList::new(
            py,
            items
                .iter()
                .map(|v| json_to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        Value::Object(_) => value.to_string().into_bound_py_any(py)?,
    })
}

fn set_context(py: Python<'_>, exc: &Bound<'_, PyAny>, err: &Error) -> PyResult<()> {
    let d = err.detail();
    exc.setattr("kind", err.kind())?;
    exc.setattr("field", d.field.as_deref())?;
    exc.setattr("row", d.row)?;
    exc.setattr("segment", d.segment)?;
    exc.setattr("item", d.item)?;
    let value = |v: &Option<serde_json::Value>| match v {
        Some(v) => json_to_py(py, v),
        None => Ok(py.None().into_bound(py)),
    };
    exc.setattr("expected", value(&d.expected)?)?;
    exc.setattr("found", value(&d.found)?)?;
    Ok(())
}

/// The Python exception for `err`, with its structured context as attributes (`kind`, `field`,
/// `row`, `segment`, `item`, `expected`, `found`).
pub fn to_py(err: Error) -> PyErr {
    let message = err.message().to_string();
    let pyerr = match &err {
        Error::Schema(_) => SchemaError::new_err(message),
        Error::Batch(_) => BatchError::new_err(message),
        Error::Contract(_) => ContractError::new_err(message),
        Error::Frame(_) => FrameError::new_err(message),
        Error::Argument(_) if err.kind() == Code::RowIndex.as_str() => {
            RowIndexError::new_err(message)
        }
        Error::Argument(_) => WireError::new_err(message),
        Error::Internal(_) => InternalError::new_err(message),
    };
    Python::attach(|py| {
        // Attributes are a convenience on top of the message; failing to set one must not
        // replace the error itself.
        let _ = set_context(py, pyerr.value(py).as_any(), &err);
    });
    pyerr
}

/// What a panic becomes if one ever escapes the core: never a `PanicException` (a
/// `BaseException` that `except Exception` misses).
#[derive(Clone, Copy)]
pub enum OnPanic {
    /// Reading a frame: its bytes are the only input, so they are reported as invalid.
    Frame,
    /// Anything else: an internal error.
    Internal,
}

/// Runs `work` (core byte work, usually without the GIL) and turns a panic into a `WireError`.
pub fn guarded<T>(on_panic: OnPanic, work: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(match on_panic {
            OnPanic::Frame => frame_err!(
                "the frame could not be read ({what}); was its buffer written while in use?"
            ),
            OnPanic::Internal => internal_err!("{what}"),
        })
    })
}
