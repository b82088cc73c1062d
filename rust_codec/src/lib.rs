//! py_wire's byte layer. A frame is a safetensors file whose tensors are the batch's fields,
//! flattened per tier, each 64-byte aligned, with py_wire's facts in `__metadata__`.
//!
//! - `schema`: dtypes, field specs and their rules, wire casts
//! - `frame`: the header, the validated layout every reader uses, buffers, copies, padding
//! - `encode`: batch → frame (input kinds, checks, layout, writing)
//! - `contract`: cross-field contracts (placeholder runs against media features)
//! - `ops`: frame operations without decoding, and token-budget batching
//! - `python` (feature "python"): the thin PyO3 layer
//!
//! The core (everything but `python`) is plain Rust and tests with `cargo test`.

pub mod contract;
pub mod encode;
pub mod error;
pub mod frame;
pub mod ops;
pub mod schema;
pub mod tensor;

#[cfg(feature = "python")]
mod python;

// Short paths to the modules readers use most.
pub use contract::placeholder;
pub use frame::layout as decode;
pub use frame::{buffer, checksum, compact, copy, header, pad, stream};
pub use ops::batching;
pub use schema::{cast, dtype, spec};

pub use decode::{parse_frame, FrameLayout};
pub use dtype::DType;
pub use encode::{encode, EncodeOptions, EncodeRequest, FieldData, FieldInput};
pub use error::{Error, Result};
pub use spec::{FieldSpec, Tier};
