//! The crate's one error type. The Python layer maps each variant to one class of the
//! `py_wire.WireError` hierarchy and copies the [`Detail`] onto the exception as attributes
//! (see `python/errors.rs`), so a trainer can act on `err.row` without parsing the message.

#![forbid(unsafe_code)]

use std::fmt;

/// A value named in an error: what was expected or what was found.
pub type Value = serde_json::Value;

/// A stable, machine-readable kind finer than an error's variant; Python reads it as
/// `err.kind` (see [`Code::as_str`]), so a trainer can tell a dtype from a shape mismatch
/// without parsing the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A field's dtype is neither the schema's nor its declared wire dtype.
    Dtype,
    /// A value has a different number of dims than the schema's shape pattern.
    Rank,
    /// A dim differs from the schema's shape pattern (a static dim, or a symbol bound elsewhere).
    Shape,
    /// Fields disagree on the number of rows in the batch.
    Rows,
    /// A per-token field's row length differs from the sequence field's in that row.
    Length,
    /// A declared lengths field disagrees with the sequence field's row lengths.
    LengthsField,
    /// A placeholder run's token count differs from the features its image implies.
    PlaceholderCount,
    /// A placeholder run is not preceded by the contract's begin token.
    PlaceholderBegin,
    /// A placeholder run is not followed by the contract's end token.
    PlaceholderEnd,
    /// A row has a placeholder run with no image left to match it.
    PlaceholderExtraRun,
    /// An image in a row has no placeholder run to match it.
    PlaceholderMissingRun,
    /// A media field's item count disagrees with the geometry that describes its images.
    MediaItems,
    /// A frame lacks the geometry field a contract needs to count each image's features.
    GeometryMissing,
    /// A frame's checksums are absent, malformed, unsupported or do not match its bytes.
    Checksum,
    /// A compact frame names a schema fingerprint this process does not hold.
    UnknownSchema,
    /// More rows than the frame's bytes could back (fields that store nothing per row).
    RowsUnbacked,
    /// A row selection names a row the frame does not have (Python: `RowIndexError`).
    RowIndex,
}

impl Code {
    /// The code's stable name, exactly what Python's `err.kind` reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Dtype => "dtype",
            Code::Rank => "rank",
            Code::Shape => "shape",
            Code::Rows => "rows",
            Code::Length => "length",
            Code::LengthsField => "lengths_field",
            Code::PlaceholderCount => "placeholder_count",
            Code::PlaceholderBegin => "placeholder_begin",
            Code::PlaceholderEnd => "placeholder_end",
            Code::PlaceholderExtraRun => "placeholder_extra_run",
            Code::PlaceholderMissingRun => "placeholder_missing_run",
            Code::MediaItems => "media_items",
            Code::GeometryMissing => "geometry_missing",
            Code::Checksum => "checksum",
            Code::UnknownSchema => "unknown_schema",
            Code::RowsUnbacked => "rows_unbacked",
            Code::RowIndex => "row_index",
        }
    }
}

/// What an error is about: its message and, where known, where and what. Dereferences to the
/// message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Detail {
    /// A complete sentence meant for the person who built the batch or sent the frame.
    pub message: String,
    /// What exactly went wrong, where a trainer may act on it (`None`: the variant says all
    /// there is, see [`Error::kind`]).
    pub code: Option<Code>,
    /// The field the error is about, by its schema name.
    pub field: Option<String>,
    /// The row of the batch or frame, counted from 0.
    pub row: Option<u64>,
    /// The segment of a packed field (an entry of its `seg_shapes`), counted from 0.
    pub segment: Option<u64>,
    /// An item inside a row, e.g. the image of a placeholder contract.
    pub item: Option<u64>,
    /// What the schema, contract or frame called for.
    pub expected: Option<Value>,
    /// What the batch or the bytes held instead.
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
    /// The error's message and context, whatever its variant.
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

    /// The complete sentence meant for the person who built the batch or sent the frame.
    pub fn message(&self) -> &str {
        &self.detail().message
    }

    /// The stable kind: the detail's code, else the variant's name.
    pub fn kind(&self) -> &'static str {
        if let Some(code) = self.detail().code {
            return code.as_str();
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

    /// Sets the finer kind that [`Error::kind`] reports (the builders below add context to an
    /// error as it is raised).
    pub fn code(mut self, code: Code) -> Self {
        self.detail_mut().code = Some(code);
        self
    }
    /// Names the field the error is about.
    pub fn field(mut self, name: &str) -> Self {
        self.detail_mut().field = Some(name.to_string());
        self
    }
    /// Names the row (dropped if it does not fit a `u64`).
    pub fn row(mut self, row: impl TryInto<u64>) -> Self {
        self.detail_mut().row = row.try_into().ok();
        self
    }
    /// Names the packed segment (dropped if it does not fit a `u64`).
    pub fn segment(mut self, segment: impl TryInto<u64>) -> Self {
        self.detail_mut().segment = segment.try_into().ok();
        self
    }
    /// Names the item inside the row (dropped if it does not fit a `u64`).
    pub fn item(mut self, item: impl TryInto<u64>) -> Self {
        self.detail_mut().item = item.try_into().ok();
        self
    }
    /// Records what was expected.
    pub fn expected(mut self, value: impl Into<Value>) -> Self {
        self.detail_mut().expected = Some(value.into());
        self
    }
    /// Records what was found instead.
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

/// The crate's result: every fallible call fails with an [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

// The one way to build an error: a macro per variant, formatting like `format!`; the builders
// on `Error` (`.code`, `.field`, `.row`, ...) then add its context.

/// An [`Error::Batch`](crate::error::Error::Batch) with a `format!` message: a batch that breaks
/// its schema.
#[macro_export]
macro_rules! batch_err {
    ($($arg:tt)*) => { $crate::error::Error::Batch(format!($($arg)*).into()) };
}
/// An [`Error::Frame`](crate::error::Error::Frame) with a `format!` message: bytes that are not a
/// valid frame.
#[macro_export]
macro_rules! frame_err {
    ($($arg:tt)*) => { $crate::error::Error::Frame(format!($($arg)*).into()) };
}
/// An [`Error::Schema`](crate::error::Error::Schema) with a `format!` message: inconsistent field
/// specs.
#[macro_export]
macro_rules! schema_err {
    ($($arg:tt)*) => { $crate::error::Error::Schema(format!($($arg)*).into()) };
}
/// An [`Error::Contract`](crate::error::Error::Contract) with a `format!` message: a broken
/// cross-field contract.
#[macro_export]
macro_rules! contract_err {
    ($($arg:tt)*) => { $crate::error::Error::Contract(format!($($arg)*).into()) };
}
/// An [`Error::Internal`](crate::error::Error::Internal) with a `format!` message: a bug in the
/// codec, never the caller's input.
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { $crate::error::Error::Internal(format!($($arg)*).into()) };
}
/// An [`Error::Argument`](crate::error::Error::Argument) with a `format!` message: an invalid
/// argument to a call.
#[macro_export]
macro_rules! argument_err {
    ($($arg:tt)*) => { $crate::error::Error::Argument(format!($($arg)*).into()) };
}
