//! The schema: its text (JSON as CPython reads and writes it, the canonical form, the
//! fingerprint, the gate every schema text passes), its model (the one reader of a schema's
//! content: every default and rule), what each stage needs, the per-field layout facts a frame
//! stores, dtypes and wire casts.

#![forbid(unsafe_code)]

pub mod cast;
pub mod dtype;
pub mod embedded;
pub mod model;
pub mod spec;
pub mod stages;
pub mod text;
