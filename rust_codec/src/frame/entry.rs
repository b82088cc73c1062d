//! One tensor entry of a frame's header: what the safetensors table (or a compact header's
//! tensor list) says of a tensor. Its own module, so that the header and the tensor list both
//! use it without depending on each other.

use crate::schema::dtype::DType;

/// One tensor of the data section; offsets are relative to the data section's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The tensor's name (a field, one of its tables, `__seq_offsets` or a `__pad.K`).
    pub name: String,
    /// The dtype the header declares.
    pub dtype: DType,
    /// The shape the header declares.
    pub shape: Vec<u64>,
    /// The tensor's first byte, relative to the data section.
    pub begin: u64,
    /// The byte after the tensor's last, relative to the data section.
    pub end: u64,
}
