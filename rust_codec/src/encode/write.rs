//! Writing a planned frame: into one buffer (each payload byte copied once, in parallel for
//! large payloads), or as scatter/gather parts that borrow the caller's memory.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::frame::header::write_header;
use crate::memory::buffer::AlignedBuf;
use crate::memory::copy::{run_jobs, CopyJob, DEFAULT_PARALLEL_THRESHOLD};
use crate::schema::spec::meta;
use crate::{batch_err, internal_err};

/// A sealed header (checksums filled in) and the metadata it holds.
type SealedHeader = (Vec<u8>, BTreeMap<String, String>);

#[derive(Debug, Clone, Copy)]
/// How an encode runs, not what it writes: the frame's bytes do not depend on these.
pub struct EncodeOptions {
    /// The most threads the payload copies use (0 counts as 1).
    pub threads: usize,
    /// Copies below this many bytes per thread run on fewer threads (default:
    /// [`crate::memory::copy::DEFAULT_PARALLEL_THRESHOLD`]).
    pub parallel_threshold: usize,
    /// The bytes the whole operation writes when it outputs several frames (`chunk`, `split`;
    /// 0: just this frame): whether copies stream is decided on it, because the frames written
    /// first leave the cache while the later ones are written.
    pub operation_bytes: usize,
}

impl EncodeOptions {
    /// Whether a frame of `frame_len` bytes, written under these options, streams.
    pub fn streams(&self, frame_len: usize) -> bool {
        crate::memory::stream::streams(frame_len.max(self.operation_bytes))
    }
}

impl Default for EncodeOptions {
    /// Copy threads: `PY_WIRE_THREADS` if set, else the core count.
    fn default() -> Self {
        let threads = std::env::var("PY_WIRE_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(core_count);
        EncodeOptions {
            threads,
            parallel_threshold: DEFAULT_PARALLEL_THRESHOLD,
            operation_bytes: 0,
        }
    }
}

/// The usable core count, read once: `available_parallelism` reads cgroup files on every call,
/// a cost that showed in the profile of frame ops on small frames.
fn core_count() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Everything needed to write a frame: its header, small index tensors and the payload copies.
pub struct Plan<'a> {
    /// The serialised safetensors header, padding included: the frame's first bytes.
    pub header: Vec<u8>,
    /// What `header` says, as `parse_header` would return it: a frame this process writes
    /// needs no JSON parse to be read (`layout::layout_of_written`).
    pub written: crate::frame::header::Header,
    /// The fields whose checksums the header carries (placeholders until the frame is written).
    pub checksum_fields: Option<Vec<String>>,
    /// The frame's row count.
    pub num_rows: u64,
    /// Offsets are absolute (from the frame's first byte).
    pub blobs: Vec<(usize, Vec<u8>)>,
    /// The payload copies, each from a caller's tensor into the frame.
    pub jobs: Vec<CopyJob<'a>>,
    /// The frame's length in bytes, 64-byte aligned.
    pub total_len: usize,
}

/// One piece of a scatter/gather frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<'a> {
    /// Header, index tensors, padding and small or cast payloads, gathered.
    Owned(Vec<u8>),
    /// A payload read straight from the caller's memory.
    Borrowed(&'a [u8]),
}

/// What occupies a byte range of the frame.
enum Piece<'p, 'a> {
    Blob(&'p [u8]),
    Job(&'p CopyJob<'a>),
}

impl<'a> Plan<'a> {
    /// The frame as a list of parts whose concatenation is byte-identical to `write`'s output.
    /// Contiguous payloads of at least `min_borrow` bytes that need no cast are borrowed, not
    /// copied; everything else is gathered into owned chunks.
    pub fn parts(&self, min_borrow: usize) -> Result<Vec<Part<'a>>> {
        let mut pieces: Vec<(usize, Piece<'_, 'a>)> = self
            .blobs
            .iter()
            .map(|(o, b)| (*o, Piece::Blob(b)))
            .chain(self.jobs.iter().map(|j| (j.dst_offset, Piece::Job(j))))
            .collect();
        pieces.sort_by_key(|(o, _)| *o);
        let mut parts = Vec::new();
        let mut chunk = self.header.clone();
        let mut cursor = self.header.len();
        for (offset, piece) in pieces {
            chunk.resize(chunk.len() + (offset - cursor), 0);
            match piece {
                Piece::Blob(bytes) => {
                    chunk.extend_from_slice(bytes);
                    cursor = offset + bytes.len();
                }
                Piece::Job(job) => {
                    let len = job.dst_len();
                    let borrowable = job.src.dtype == job.dst_dtype && job.src.is_contiguous();
                    if borrowable && len >= min_borrow {
                        if !chunk.is_empty() {
                            parts.push(Part::Owned(std::mem::take(&mut chunk)));
                        }
                        let bytes: &'a [u8] = job.src.bytes;
                        parts.push(Part::Borrowed(&bytes[..len]));
                    } else {
                        let start = chunk.len();
                        chunk.resize(start + len, 0);
                        crate::memory::copy::copy_tensor(
                            &job.src,
                            job.dst_dtype,
                            &mut chunk[start..],
                        )?;
                    }
                    cursor = offset + len;
                }
            }
        }
        chunk.resize(chunk.len() + (self.total_len - cursor), 0);
        if !chunk.is_empty() {
            parts.push(Part::Owned(chunk));
        }
        let mut chunks = Vec::with_capacity(parts.len());
        let mut at = 0;
        for part in &parts {
            let bytes: &[u8] = match part {
                Part::Owned(b) => b,
                Part::Borrowed(b) => b,
            };
            chunks.push((at, bytes));
            at += bytes.len();
        }
        if let Some((header, _)) = self.sealed_header(&chunks)? {
            match parts.first_mut() {
                Some(Part::Owned(first)) if first.len() >= header.len() => {
                    first[..header.len()].copy_from_slice(&header)
                }
                _ => return Err(internal_err!("the first part does not hold the header")),
            }
        }
        Ok(parts)
    }

    /// The header with its checksums filled in from the written frame (`chunks`, see
    /// `checksum::sealed`), and the metadata it holds; `None` without checksums.
    fn sealed_header(&self, chunks: &[(usize, &[u8])]) -> Result<Option<SealedHeader>> {
        let Some(fields) = &self.checksum_fields else {
            return Ok(None);
        };
        let entry = crate::frame::checksum::sealed(&self.written, fields, chunks)?;
        let mut metadata = self.written.metadata.clone();
        metadata.insert(meta::CHECKSUM.into(), entry);
        let header = write_header(&metadata, &self.written.entries)?;
        if header.len() != self.header.len() {
            return Err(internal_err!(
                "the sealed header is {} bytes, the placeholder {}",
                header.len(),
                self.header.len()
            ));
        }
        Ok(Some((header, metadata)))
    }

    /// Writes the frame into `out` (exactly `total_len` bytes). Padding bytes are zeroed so the
    /// result does not depend on what `out` held before.
    pub fn write_into(&mut self, out: &mut [u8], options: EncodeOptions) -> Result<()> {
        if out.len() != self.total_len {
            return Err(batch_err!(
                "output buffer is {} bytes but the frame needs {}",
                out.len(),
                self.total_len
            ));
        }
        out[..self.header.len()].copy_from_slice(&self.header);
        let mut written = Vec::with_capacity(self.blobs.len() + self.jobs.len());
        for (offset, blob) in &self.blobs {
            out[*offset..offset + blob.len()].copy_from_slice(blob);
            written.push((*offset, blob.len()));
        }
        written.extend(self.jobs.iter().map(|j| (j.dst_offset, j.dst_len())));
        written.sort_unstable();
        let mut cursor = self.header.len();
        for (offset, len) in written {
            if offset > cursor {
                out[cursor..offset].fill(0);
            }
            cursor = cursor.max(offset + len);
        }
        out[cursor..].fill(0);
        let streaming = options.streams(out.len());
        run_jobs(
            &self.jobs,
            out,
            options.threads,
            options.parallel_threshold,
            streaming,
        )?;
        if let Some((header, metadata)) = self.sealed_header(&[(0, out)])? {
            out[..header.len()].copy_from_slice(&header);
            self.header = header;
            self.written.metadata = metadata;
        }
        Ok(())
    }

    /// Writes the frame into a new (or recycled) aligned buffer.
    pub fn write(&mut self, options: EncodeOptions) -> Result<AlignedBuf> {
        let mut buf = AlignedBuf::recycled(self.total_len)
            .ok_or_else(|| batch_err!("could not allocate a frame of {} bytes", self.total_len))?;
        self.write_into(buf.as_mut_slice(), options)?;
        Ok(buf)
    }
}
