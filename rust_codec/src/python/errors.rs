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

pub fn to_py(err: Error) -> PyErr {
    match err {
        Error::Schema(m) => SchemaError::new_err(m),
        Error::Batch(m) => BatchError::new_err(m),
        Error::Contract(m) => ContractError::new_err(m),
        Error::Frame(m) => FrameError::new_err(m),
    }
}
