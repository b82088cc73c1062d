//! What the codec knows of a schema: dtypes, per-field layout facts and their rules, wire casts.

#![forbid(unsafe_code)]

pub mod cast;
pub mod dtype;
pub mod spec;
