//! The crate's one error type. The Python layer maps each variant to one class of the
//! `py_wire.WireError` hierarchy (see `python/errors.rs`).

use std::fmt;

/// Every way the codec can refuse its input. Messages name the field, row, segment, expected
/// and found values; they are complete sentences meant for the person who built the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The field specs handed to the codec are inconsistent (Python: `SchemaError`).
    Schema(String),
    /// A batch that breaks its schema, found while encoding (Python: `BatchError`).
    Batch(String),
    /// A cross-field contract is broken, e.g. placeholder runs vs. image features
    /// (Python: `ContractError`, a `BatchError`).
    Contract(String),
    /// Bytes that are not a valid frame (Python: `FrameError`).
    Frame(String),
    /// A call's arguments are invalid, e.g. a row index out of range (Python: `WireError`
    /// itself, a `ValueError`).
    Argument(String),
    /// A broken invariant inside the codec: a bug, never the caller's input
    /// (Python: `InternalError`).
    Internal(String),
}

impl Error {
    pub fn message(&self) -> &str {
        match self {
            Error::Schema(m)
            | Error::Batch(m)
            | Error::Contract(m)
            | Error::Frame(m)
            | Error::Argument(m)
            | Error::Internal(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand constructors that format like `format!`.
#[macro_export]
macro_rules! batch_err {
    ($($arg:tt)*) => { $crate::error::Error::Batch(format!($($arg)*)) };
}
#[macro_export]
macro_rules! frame_err {
    ($($arg:tt)*) => { $crate::error::Error::Frame(format!($($arg)*)) };
}
#[macro_export]
macro_rules! schema_err {
    ($($arg:tt)*) => { $crate::error::Error::Schema(format!($($arg)*)) };
}
#[macro_export]
macro_rules! contract_err {
    ($($arg:tt)*) => { $crate::error::Error::Contract(format!($($arg)*)) };
}
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { $crate::error::Error::Internal(format!($($arg)*)) };
}
#[macro_export]
macro_rules! argument_err {
    ($($arg:tt)*) => { $crate::error::Error::Argument(format!($($arg)*)) };
}
