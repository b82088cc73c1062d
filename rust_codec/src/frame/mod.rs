//! The frame as bytes: the safetensors header, the validated layout of a frame (what every
//! reader trusts), its aligned and pooled buffer, the copies into it (streaming stores for large frames) and padded rows out of it.

pub mod buffer;
pub mod checksum;
pub mod compact;
pub mod copy;
pub mod entry;
pub mod header;
pub mod layout;
pub mod monotone;
pub mod pad;
pub mod remap;
pub mod schema_text;
pub mod stream;
pub mod tensor_list;
