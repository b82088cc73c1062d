//! Placement of a frame's tensors in its data section: 64-byte aligned, gaps covered by explicit
//! padding entries (safetensors forbids holes), payload copies queued per source tensor.

use crate::batch_err;
use crate::error::Result;
use crate::frame::header::Entry;
use crate::memory::buffer::ALIGNMENT;
use crate::memory::copy::CopyJob;
use crate::schema::dtype::DType;
use crate::schema::spec::FieldSpec;
use crate::tensor::TensorRef;

/// Lays data out relative to the data section, 64-byte aligned, with explicit padding entries.
pub(crate) struct Layout<'a> {
    pub(crate) cursor: u64,
    pub(crate) entries: Vec<Entry>,
    pub(crate) jobs: Vec<CopyJob<'a>>,
    pub(crate) blobs: Vec<(u64, Vec<u8>)>,
    pub(crate) pads: usize,
}

impl<'a> Layout<'a> {
    /// An empty data section.
    pub(crate) fn new() -> Layout<'a> {
        Layout {
            cursor: 0,
            entries: Vec::new(),
            jobs: Vec::new(),
            blobs: Vec::new(),
            pads: 0,
        }
    }

    /// Moves the cursor to the next 64-byte boundary, covering the gap with a padding entry
    /// (safetensors forbids holes in the data section).
    pub(crate) fn align(&mut self) -> Result<u64> {
        let aligned = self
            .cursor
            .checked_next_multiple_of(ALIGNMENT as u64)
            .ok_or_else(|| batch_err!("frame size overflows"))?;
        if aligned > self.cursor {
            self.entries
                .push(Entry::padding(self.pads, self.cursor, aligned));
            self.pads += 1;
            self.cursor = aligned;
        }
        Ok(aligned)
    }

    pub(crate) fn place(
        &mut self,
        name: String,
        dtype: DType,
        shape: Vec<u64>,
        nbytes: u64,
    ) -> Result<u64> {
        let aligned = self.align()?;
        let end = aligned
            .checked_add(nbytes)
            .ok_or_else(|| batch_err!("frame size overflows"))?;
        self.entries.push(Entry {
            name,
            dtype,
            shape,
            begin: aligned,
            end,
        });
        self.cursor = end;
        Ok(aligned)
    }

    pub(crate) fn blob_i64(&mut self, name: String, shape: Vec<u64>, values: &[u64]) -> Result<()> {
        if let Some(&v) = values.iter().find(|&&v| v > i64::MAX as u64) {
            return Err(batch_err!("{name}: index {v} exceeds i64"));
        }
        // Below 2^63 a u64's little-endian bytes are its i64's: one branch-free pass.
        let mut bytes = vec![0u8; values.len() * 8];
        for (dst, v) in bytes.chunks_exact_mut(8).zip(values) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        let offset = self.place(name, DType::I64, shape, bytes.len() as u64)?;
        self.blobs.push((offset, bytes));
        Ok(())
    }

    /// Places a `U8` table of `bytes` (written as they are).
    pub(crate) fn blob_u8(&mut self, name: String, shape: Vec<u64>, bytes: Vec<u8>) -> Result<()> {
        let offset = self.place(name, DType::U8, shape, bytes.len() as u64)?;
        self.blobs.push((offset, bytes));
        Ok(())
    }

    /// Places a values tensor and queues one copy per source segment, back to back.
    pub(crate) fn values(
        &mut self,
        spec: &FieldSpec,
        shape: Vec<u64>,
        sources: Vec<TensorRef<'a>>,
    ) -> Result<()> {
        let stored = spec.stored_dtype();
        let mut nbytes = 0u64;
        for s in &sources {
            nbytes = s
                .numel()
                .checked_mul(stored.size() as u64)
                .and_then(|n| n.checked_add(nbytes))
                .ok_or_else(|| batch_err!("field {:?}: payload size overflows", spec.name))?;
        }
        let mut offset = self.place(spec.name.clone(), stored, shape, nbytes)?;
        for src in sources {
            let len = src.numel() * stored.size() as u64;
            if len > 0 {
                self.jobs.push(CopyJob {
                    src,
                    dst_dtype: stored,
                    dst_offset: offset as usize,
                });
            }
            offset += len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tensor_starts_aligned_and_gaps_are_padding_entries() {
        let mut layout = Layout::new();
        layout.blob_i64("a".into(), vec![3], &[1, 2, 3]).unwrap();
        layout.blob_i64("b".into(), vec![1], &[4]).unwrap();
        let names: Vec<&str> = layout.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "__pad.0", "b"]);
        for e in &layout.entries {
            if !e.name.starts_with("__pad.") {
                assert_eq!(e.begin % ALIGNMENT as u64, 0, "{}", e.name);
            }
        }
        // The entries tile the data section: each starts where the previous ends.
        for w in layout.entries.windows(2) {
            assert_eq!(w[0].end, w[1].begin);
        }
        assert_eq!(layout.align().unwrap(), 128);
    }

    #[test]
    fn index_values_past_i64_are_refused() {
        let mut layout = Layout::new();
        let err = layout
            .blob_i64("x".into(), vec![1], &[u64::MAX])
            .unwrap_err();
        assert!(err.message().contains("exceeds i64"), "{err}");
    }
}
