//! The frame as bytes: the safetensors header, the validated layout of a frame (what every
//! reader trusts), the embedded and compact schema forms, checksums and padded rows out of it.
//! No `unsafe`: the memory a frame lives in, and the copies into it, are `crate::memory`'s.

#![forbid(unsafe_code)]

pub mod checksum;
pub mod compact;
pub mod entry;
pub mod header;
pub mod identity;
pub mod layout;
pub mod located;
pub mod pad;
pub mod tensor_list;
