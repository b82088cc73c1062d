//! py_wire's byte layer. A frame is a safetensors file whose tensors are the batch's fields,
//! flattened per tier, each 64-byte aligned, with py_wire's facts in `__metadata__`.
//!
//! # The frame
//!
//! `docs/format.md` at the repository root is the one specification of the bytes (format
//! `"3"`). In short: 8 bytes of header length (little-endian `u64`); the safetensors JSON
//! header, space-padded so the data section starts at a multiple of 64, whose `__metadata__`
//! holds `py_wire.format`, `py_wire.num_rows` and either the embedded schema (canonical JSON,
//! `py_wire.schema`, with its `py_wire.fingerprint`) or, compact, `py_wire.schema_ref` and the
//! tensor list `py_wire.tensors` ([`frame::compact`], [`frame::tensor_list`]); then the data
//! section, per field and never per row, every tensor 64-byte aligned. The reader derives the
//! field table and sequence field from the schema ([`frame::layout::schema_field_table`]).
//! Only format `"3"` is read (the formats before it are refused by version), and every frame
//! carries a schema: a request encoded without one embeds the schema its fields declare
//! ([`schema::model::schema_of_specs`]).
//!
//! Every length, offset, shape and index read from a header is checked before use
//! ([`frame::layout::parse_frame`] is the one reader every consumer goes through).
//!
//! # Modules
//!
//! - [`schema`]: dtypes, field specs and their rules, wire casts
//! - [`frame`]: the byte format: the header, the validated layout every reader uses, padding
//! - [`memory`]: the pooled aligned buffer, remaps, streaming stores, threaded copies, SIMD
//! - [`encode`](mod@encode): batch → frame (input kinds, checks, layout, writing)
//! - `tier`: one implementation per tier of its checks, plan, tables and gather
//! - [`contract`]: cross-field contracts (placeholder runs against media features)
//! - [`ops`]: frame operations without decoding, and token-budget batching
//! - `python` (feature "python"): the thin PyO3 layer
//!
//! The core (everything but `python`) is plain Rust and tests with `cargo test`.

#![deny(missing_docs)]

pub mod contract;
pub mod encode;
pub mod error;
pub mod frame;
pub mod memory;
pub mod ops;
pub mod schema;
pub mod tensor;
mod tier;

#[cfg(feature = "python")]
mod python;

pub use encode::{encode, EncodeOptions, EncodeRequest, FieldData, FieldInput};
pub use error::{Error, Result};
pub use frame::layout::{parse_frame, FrameLayout};
pub use schema::dtype::DType;
pub use schema::spec::{FieldSpec, Tier};
