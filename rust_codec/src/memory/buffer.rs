//! The frame's one allocation: 64-byte aligned (page aligned when large; huge pages on
//! request), and recycled: a fresh mapping costs a kernel page fault (and a page clear) per
//! page on first write, which triples the cost of a copy, so large buffers of dropped frames
//! are kept in a small pool and reused by the next encode.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Every tensor in a frame starts at a multiple of this.
pub const ALIGNMENT: usize = 64;
const HUGE_PAGE: usize = 2 << 20;
/// Buffers from this size up are page mappings, pooled and carved in `PIECE`s: below it the
/// allocator's own free lists recycle memory well, above it every fresh buffer pays a page fault
/// per 4 KiB (a 2 MB frame from the allocator measured 6x slower than a memcpy here).
const POOLED_MIN: usize = 256 << 10;
const PIECE: usize = 64 << 10;

/// What a mapping for `len` bytes spans: whole huge pages for large buffers (or when huge pages
/// are requested), whole pieces otherwise.
#[cfg(target_os = "linux")]
fn mapping_len(len: usize) -> Option<usize> {
    let unit = if len >= 2 * HUGE_PAGE || huge_pages_requested() {
        HUGE_PAGE
    } else {
        PIECE
    };
    len.checked_next_multiple_of(unit)
}

/// An owned, zero-initialised byte buffer with at least 64-byte alignment.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    origin: Origin,
}

enum Origin {
    Heap(Layout),
    /// Anonymous mapping of this many bytes: zero pages come from the kernel on first touch,
    /// so nothing is written twice.
    #[cfg(target_os = "linux")]
    Mapped(usize),
}

// SAFETY: AlignedBuf uniquely owns its allocation, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` bytes whose contents are unspecified (but initialised): a recycled
    /// frame's when one of the right size is pooled, else zeros. Callers overwrite every byte.
    pub fn recycled(len: usize) -> Option<AlignedBuf> {
        #[cfg(target_os = "linux")]
        if len >= POOLED_MIN {
            if let Some((ptr, map_len)) = pool::take(len) {
                return Some(AlignedBuf {
                    ptr,
                    len,
                    origin: Origin::Mapped(map_len),
                });
            }
        }
        Self::zeroed(len)
    }

    /// Allocates `len` zeroed bytes. Large buffers are fresh anonymous mappings.
    pub fn zeroed(len: usize) -> Option<AlignedBuf> {
        #[cfg(target_os = "linux")]
        if len >= POOLED_MIN {
            return Self::mapped(len);
        }
        let layout = Layout::from_size_align(len.max(1), ALIGNMENT).ok()?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)?;
        Some(AlignedBuf {
            ptr,
            len,
            origin: Origin::Heap(layout),
        })
    }

    #[cfg(target_os = "linux")]
    fn mapped(len: usize) -> Option<AlignedBuf> {
        let map_len = mapping_len(len)?;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        if huge_pages_requested() {
            // SAFETY: [raw, raw+map_len) is the mapping just created; madvise only changes the
            // paging policy and its failure is harmless, so the result is ignored.
            unsafe {
                libc::madvise(raw, map_len, libc::MADV_HUGEPAGE);
            }
        }
        Some(AlignedBuf {
            ptr: NonNull::new(raw.cast())?,
            len,
            origin: Origin::Mapped(map_len),
        })
    }

    /// A copy of `bytes` (`Frame.copy()`, a misaligned or writable source): with streaming
    /// stores when it is larger than the last-level cache (see `stream`).
    pub fn from_slice(bytes: &[u8]) -> Option<AlignedBuf> {
        let mut buf = AlignedBuf::recycled(bytes.len())?;
        crate::memory::stream::Stores::for_frame(bytes.len()).copy(buf.as_mut_slice(), bytes);
        Some(buf)
    }

    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of the buffer, for reading outside Rust.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The start of the buffer, with write provenance: for handing the memory to a writer
    /// outside Rust (a Python buffer export) without deriving it from a shared slice.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len initialised bytes and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match self.origin {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            Origin::Heap(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) },
            #[cfg(target_os = "linux")]
            Origin::Mapped(map_len) => pool::give(self.ptr, map_len),
        }
    }
}

/// Transparent huge pages are opt-in (`PY_WIRE_HUGE_PAGES=1`): with the common
/// `defrag = madvise` kernel setting, faulting in advised memory compacts synchronously, which
/// made a first 672 MB encode 5.6x slower here (1457 ms against 259 ms). The pool already spares
/// every later encode the faults.
#[cfg(target_os = "linux")]
fn huge_pages_requested() -> bool {
    static REQUESTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REQUESTED.get_or_init(|| std::env::var("PY_WIRE_HUGE_PAGES").is_ok_and(|v| v == "1"))
}

/// Mappings of dropped frames, kept for reuse within a byte budget
/// (`PY_WIRE_FRAME_POOL_BYTES`, default 2 GiB; 0 disables the pool).
///
/// A request takes the smallest pooled mapping that holds it and leaves the rest in the pool
/// (carving: `munmap` works on any page range, so the pieces of one mapping are independent),
/// and a returned piece merges with its neighbours: a full-size select, its `split(8)` and the
/// next full-size select all reuse the same warm pages. The most recent mapping is kept even
/// when it alone exceeds the budget, so a steady stream of frames larger than the budget does
/// not pay page faults on every encode.
#[cfg(target_os = "linux")]
mod pool {
    use std::ptr::NonNull;
    use std::sync::{Mutex, OnceLock};

    use super::mapping_len;

    struct Mapping(NonNull<u8>, usize);
    // SAFETY: a pooled mapping is owned by the pool alone; no reference to it exists.
    unsafe impl Send for Mapping {}

    impl Mapping {
        fn start(&self) -> usize {
            self.0.as_ptr() as usize
        }
        fn end(&self) -> usize {
            self.start() + self.1
        }
    }

    static POOL: Mutex<Vec<Mapping>> = Mutex::new(Vec::new());
    const MAX_ENTRIES: usize = 32;

    fn budget() -> usize {
        static BUDGET: OnceLock<usize> = OnceLock::new();
        *BUDGET.get_or_init(|| {
            std::env::var("PY_WIRE_FRAME_POOL_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(2 << 30)
        })
    }

    fn unmap(m: Mapping) {
        // SAFETY: [m.0, m.0 + m.1) is a whole number of pages of a mapping created by
        // `AlignedBuf::mapped` (or a piece of one), and nothing references it any more.
        unsafe {
            libc::munmap(m.0.as_ptr().cast(), m.1);
        }
    }

    /// `len` bytes (rounded up as `mapping_len` does) from the smallest pooled mapping that
    /// holds them; the rest of that mapping stays pooled. Returns the piece and its length.
    pub fn take(len: usize) -> Option<(NonNull<u8>, usize)> {
        let want = mapping_len(len)?;
        let mut pool = POOL.lock().ok()?;
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, m)| m.1 >= want)
            .min_by_key(|(_, m)| m.1)
            .map(|(i, _)| i)?;
        let m = pool.swap_remove(best);
        if m.1 > want {
            // SAFETY: want < m.1, so the offset stays inside the mapping and is non-null.
            let rest = unsafe { NonNull::new_unchecked(m.0.as_ptr().add(want)) };
            pool.push(Mapping(rest, m.1 - want));
        }
        Some((m.0, want))
    }

    pub fn give(ptr: NonNull<u8>, map_len: usize) {
        let Ok(mut pool) = POOL.lock() else {
            return unmap(Mapping(ptr, map_len));
        };
        if budget() == 0 {
            return unmap(Mapping(ptr, map_len));
        }
        let mut m = Mapping(ptr, map_len);
        // Merge with the pooled pieces on either side (pieces of the same original mapping).
        while let Some(i) = pool
            .iter()
            .position(|p| p.end() == m.start() || p.start() == m.end())
        {
            let p = pool.remove(i);
            m = if p.end() == m.start() {
                Mapping(p.0, p.1 + m.1)
            } else {
                Mapping(m.0, m.1 + p.1)
            };
        }
        pool.push(m);
        // Oldest first out, until within the entry and byte budgets; the newest always stays.
        while pool.len() > 1
            && (pool.len() > MAX_ENTRIES || pool.iter().map(|m| m.1).sum::<usize>() > budget())
        {
            let oldest = pool.remove(0);
            unmap(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_buffers_are_reused() {
        // A size no other test uses, so the parallel tests cannot take this mapping.
        let len = (97 << 20) + 12_345;
        let mut a = AlignedBuf::recycled(len).unwrap();
        a.as_mut_slice()[len - 1] = 7;
        let addr = a.as_ptr() as usize;
        drop(a);
        let b = AlignedBuf::recycled(len - 4096).unwrap();
        assert_eq!(b.as_ptr() as usize, addr, "the dropped mapping is reused");
        assert_eq!(b.len(), len - 4096);
        drop(b);
    }

    #[test]
    fn a_pooled_mapping_is_carved_and_merged_back() {
        // Sizes no other test uses (the pool is shared by the tests running in parallel).
        let len = 157 << 21;
        let whole = AlignedBuf::recycled(len).unwrap();
        let (lo, hi) = (whole.as_ptr() as usize, whole.as_ptr() as usize + len);
        drop(whole);
        // Two smaller frames are carved out of the warm mapping instead of mapping fresh pages.
        let a = AlignedBuf::recycled(len / 2).unwrap();
        let b = AlignedBuf::recycled(len / 3).unwrap();
        for part in [&a, &b] {
            let at = part.as_ptr() as usize;
            assert!(
                lo <= at && at + part.len() <= hi,
                "not carved from the pooled mapping"
            );
        }
        drop(a);
        drop(b);
        // Returned pieces merge: the full size is served from the same memory again.
        let again = AlignedBuf::recycled(len).unwrap();
        assert_eq!(again.as_ptr() as usize, lo);
    }

    #[test]
    fn mid_sized_buffers_are_pooled_too() {
        // 2.3 MB, the size of one chunk(8) of a 65k-row text frame; a size no other test uses.
        let len = 2_301_234;
        let a = AlignedBuf::recycled(len).unwrap();
        let addr = a.as_ptr() as usize;
        drop(a);
        let b = AlignedBuf::recycled(len).unwrap();
        assert_eq!(b.as_ptr() as usize, addr, "the dropped mapping is reused");
    }

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 63, 64, (256 << 10) + 1, 5 << 20] {
            let buf = AlignedBuf::zeroed(len).unwrap();
            assert_eq!(buf.as_ptr() as usize % ALIGNMENT, 0);
            assert_eq!(buf.len(), len);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
        }
    }
}
