//! py_wire's byte layer. A frame is a safetensors file whose tensors are the batch's fields,
//! flattened per tier, each 64-byte aligned, with py_wire's facts in `__metadata__`.
//!
//! The core (everything but `python`) is plain Rust and tests with `cargo test`.

pub mod batching;
pub mod buffer;
pub mod cast;
pub mod contract;
pub mod copy;
pub mod decode;
pub mod dtype;
pub mod encode;
pub mod error;
pub mod header;
pub mod ops;
pub mod pad;
pub mod placeholder;
pub mod spec;
pub mod tensor;

#[cfg(feature = "python")]
mod python;

pub use decode::{parse_frame, FrameLayout};
pub use dtype::DType;
pub use encode::{encode, EncodeOptions, EncodeRequest, FieldData, FieldInput};
pub use error::{Error, Result};
pub use spec::{FieldSpec, Tier};
