//! Memory and OS machinery, apart from the byte format: the aligned, pooled frame buffer
//! (`buffer`), private copy-on-write mappings of read-only pages (`remap`), streaming stores
//! for large copies (`stream`), the threaded payload copy (`copy`) and the SIMD check that
//! offsets never decrease (`monotone`). With the PyO3 layer, the only place the crate uses
//! `unsafe`.

pub mod buffer;
pub mod copy;
pub mod monotone;
pub mod remap;
pub mod stream;
