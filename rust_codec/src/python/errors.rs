//! The Python exception hierarchy, rooted in `WireError(ValueError)`, and the mapping from the
//! crate's one error enum.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

use crate::error::Error;

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
    InternalError,
    WireError,
    "A broken invariant inside py_wire: a bug, not the caller's input (please report it)."
);

pub fn to_py(err: Error) -> PyErr {
    match err {
        Error::Schema(m) => SchemaError::new_err(m),
        Error::Batch(m) => BatchError::new_err(m),
        Error::Contract(m) => ContractError::new_err(m),
        Error::Frame(m) => FrameError::new_err(m),
        Error::Argument(m) => WireError::new_err(m),
        Error::Internal(m) => InternalError::new_err(m),
    }
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
            OnPanic::Frame => Error::Frame(format!(
                "the frame could not be read ({what}); was its buffer written while in use?"
            )),
            OnPanic::Internal => Error::Internal(what),
        })
    })
}
