//! The crate's one error type. The Python layer maps each variant to one class of the
//! `py_wire.WireError` hierarchy and copies the [`Detail`] onto the exception as attributes
//! (see `python/errors.rs`), so a trainer can act on `err.row` without parsing the message.

use std::fmt;

/// A value named in an error: what was expected or what was found.
pub type Value = serde_json::Value;

/// What an error is about: its message and, where known, where and what. Dereferences to the
/// message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Detail {
    /// A complete sentence meant for the person who built the batch or sent the frame.
    pub message: String,
    /// A stable machine-readable kind, e.g. `"dtype"`, `"shape"`, `"length"`, `"placeholder"`
    /// (empty: the variant's own, see [`Error::kind`]).
    pub code: &'static str,
    pub field: Option<String>,
    pub row: Option<u64>,
    pub segment: Option<u64>,
    /// An item inside a row, e.g. the image of a placeholder contract.
    pub item: Option<u64>,
    pub expected: Option<Value>,
    pub found: Option<Value>,
}

impl From<String> for Detail {
    fn from(message: String) -> Detail {
        Detail {
            message,
            ..Default::default()
        }
    }
}

impl From<String> for Box<Detail> {
    fn from(message: String) -> Box<Detail> {
        Box::new(Detail::from(message))
    }
}

impl std::ops::Deref for Detail {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every way the codec can refuse its input (the detail is boxed: results stay small).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The field specs handed to the codec are inconsistent (Python: `SchemaError`).
    Schema(Box<Detail>),
    /// A batch that breaks its schema, found while encoding (Python: `BatchError`).
    Batch(Box<Detail>),
    /// A cross-field contract is broken, e.g. placeholder runs vs. image features
    /// (Python: `ContractError`, a `BatchError`).
    Contract(Box<Detail>),
    /// Bytes that are not a valid frame (Python: `FrameError`).
    Frame(Box<Detail>),
    /// A call's arguments are invalid, e.g. a row index out of range (Python: `WireError`
    /// itself, a `ValueError`).
    Argument(Box<Detail>),
    /// A broken invariant inside the codec: a bug, never the caller's input
    /// (Python: `InternalError`).
    Internal(Box<Detail>),
}

impl Error {
    pub fn detail(&self) -> &Detail {
        match self {
            Error::Schema(d)
            | Error::Batch(d)
            | Error::Contract(d)
            | Error::Frame(d)
            | Error::Argument(d)
            | Error::Internal(d) => d,
        }
    }

    fn detail_mut(&mut self) -> &mut Detail {
        match self {
            Error::Schema(d)
            | Error::Batch(d)
            | Error::Contract(d)
            | Error::Frame(d)
            | Error::Argument(d)
            | Error::Internal(d) => d,
        }
    }

    pub fn schema(message: impl Into<String>) -> Error {
        Error::Schema(Box::new(Detail::from(message.into())))
    }
    pub fn batch(message: impl Into<String>) -> Error {
        Error::Batch(Box::new(Detail::from(message.into())))
    }
    pub fn contract(message: impl Into<String>) -> Error {
        Error::Contract(Box::new(Detail::from(message.into())))
    }
    pub fn frame(message: impl Into<String>) -> Error {
        Error::Frame(Box::new(Detail::from(message.into())))
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::Internal(Box::new(Detail::from(message.into())))
    }

    pub fn message(&self) -> &str {
        &self.detail().message
    }

    /// The stable kind: the detail's code, else the variant's name.
    pub fn kind(&self) -> &'static str {
        let code = self.detail().code;
        if !code.is_empty() {
            return code;
        }
        match self {
            Error::Schema(_) => "schema",
            Error::Batch(_) => "batch",
            Error::Contract(_) => "contract",
            Error::Frame(_) => "frame",
            Error::Argument(_) => "argument",
            Error::Internal(_) => "internal",
        }
    }

    /// Builders that add context to an error as it is raised.
    pub fn code(mut self, code: &'static str) -> Self {
        self.detail_mut().code = code;
        self
    }
    pub fn field(mut self, name: &str) -> Self {
        self.detail_mut().field = Some(name.to_string());
        self
    }
    pub fn row(mut self, row: impl TryInto<u64>) -> Self {
        self.detail_mut().row = row.try_into().ok();
        self
    }
    pub fn segment(mut self, segment: impl TryInto<u64>) -> Self {
        self.detail_mut().segment = segment.try_into().ok();
        self
    }
    pub fn item(mut self, item: impl TryInto<u64>) -> Self {
        self.detail_mut().item = item.try_into().ok();
        self
    }
    pub fn expected(mut self, value: impl Into<Value>) -> Self {
        self.detail_mut().expected = Some(value.into());
        self
    }
    pub fn found(mut self, value: impl Into<Value>) -> Self {
        self.detail_mut().found = Some(value.into());
        self
    }
    /// The same error, its message preceded by `context` (what it is about).
    pub fn context(mut self, context: &str) -> Self {
        let detail = self.detail_mut();
        detail.message = format!("{context}: {}", detail.message);
        self
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
    ($($arg:tt)*) => { $crate::error::Error::Batch(format!($($arg)*).into()) };
}
#[macro_export]
macro_rules! frame_err {
    ($($arg:tt)*) => { $crate::error::Error::Frame(format!($($arg)*).into()) };
}
#[macro_export]
macro_rules! schema_err {
    ($($arg:tt)*) => { $crate::error::Error::Schema(format!($($arg)*).into()) };
}
#[macro_export]
macro_rules! contract_err {
    ($($arg:tt)*) => { $crate::error::Error::Contract(format!($($arg)*).into()) };
}
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { $crate::error::Error::Internal(format!($($arg)*).into()) };
}
#[macro_export]
macro_rules! argument_err {
    ($($arg:tt)*) => { $crate::error::Error::Argument(format!($($arg)*).into()) };
}
