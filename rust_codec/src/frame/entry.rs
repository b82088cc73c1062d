//! One tensor entry of a frame's header: what the safetensors table (or a compact header's
//! tensor list) says of a tensor. Its own module, so that the header and the tensor list both
//! use it without depending on each other.

use crate::schema::dtype::DType;
use crate::schema::spec::names;

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

impl Entry {
    /// The `k`-th alignment gap, `__pad.k`: U8 bytes covering `[begin, end)`.
    pub fn padding(k: usize, begin: u64, end: u64) -> Entry {
        Entry {
            name: format!("{}{k}", names::PAD_PREFIX),
            dtype: DType::U8,
            shape: vec![end - begin],
            begin,
            end,
        }
    }
}
