//! What the codec knows of a schema: dtypes, per-field layout facts and their rules, wire casts.

pub mod cast;
pub mod dtype;
pub mod spec;
