//! py_wire's byte layer. A frame is a safetensors file whose tensors are the batch's fields,
//! flattened per tier, each 64-byte aligned, with py_wire's facts in `__metadata__`.
//!
//! # The frame, byte by byte
//!
//! 1. 8 bytes: `N`, the header's length, a little-endian `u64`.
//! 2. `N` bytes: the safetensors JSON header, space-padded so the data section starts at a
//!    multiple of 64. One entry per tensor (`dtype`, `shape`, `data_offsets` relative to the
//!    data section) and `__metadata__`, strings only: `py_wire.format` (`"2"`),
//!    `py_wire.num_rows`, then either the embedded schema (`py_wire.schema` and its
//!    `py_wire.fingerprint`) or, in a compact frame, only `py_wire.schema_ref` (the
//!    fingerprint; see [`frame::compact`]). Either way the reader derives the field table and
//!    sequence field from the schema ([`frame::layout::schema_field_table`]). A caller's own
//!    keys and `py_wire.checksum` ([`frame::checksum`]) may sit beside them. Format `"1"`
//!    embedded headers also carry the field table `py_wire.fields` and
//!    `py_wire.sequence_field`; they are still read, and must agree with their schema. A bare
//!    codec frame, encoded without any schema (the codec's own tests and fuzz targets; the
//!    Python layer never writes or accepts one), carries those two instead of a schema.
//! 3. The data section: every tensor 64-byte aligned from the frame's first byte, gaps as
//!    explicit `__pad.K` U8 tensors, the end 64-aligned. Per frame: `__seq_offsets` (I64,
//!    `[B+1]`) when the schema has per-token fields. Per field `f`: per-token `[T, ...]` (all
//!    rows' tokens), scalar `[B, ...]`, packed `f` (distinct segments back to back) with its CSR
//!    tables `f.seg_shapes` `[S, rank]`, `f.seg_offsets` `[S+1]`, `f.row_offsets` `[B+1]` and
//!    `f.row_segments` `[R]` (two rows may share a segment).
//!
//! Every length, offset, shape and index read from a header is checked before use
//! ([`frame::layout::parse_frame`] is the one reader every consumer goes through).
//!
//! # Modules
//!
//! - [`schema`]: dtypes, field specs and their rules, wire casts
//! - [`frame`]: the header, the validated layout every reader uses, buffers, copies, padding
//! - [`encode`](mod@encode): batch → frame (input kinds, checks, layout, writing)
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
pub mod ops;
pub mod schema;
pub mod tensor;

#[cfg(feature = "python")]
mod python;

pub use encode::{encode, EncodeOptions, EncodeRequest, FieldData, FieldInput};
pub use error::{Error, Result};
pub use frame::layout::{parse_frame, FrameLayout};
pub use schema::dtype::DType;
pub use schema::spec::{FieldSpec, Tier};
