//! The frame's one allocation: 64-byte aligned (page aligned when large; huge pages on
//! request), and recycled: a fresh mapping costs a kernel page fault (and a page clear) per
//! page on first write, which triples the cost of a copy, so large buffers of dropped frames
//! are kept in a small pool and reused by the next encode.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Every tensor in a frame starts at a multiple of this.
pub const ALIGNMENT: usize = 64;
const HUGE_PAGE: usize = 2 << 20;

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
        if len >= 2 * HUGE_PAGE {
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
        if len >= 2 * HUGE_PAGE {
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
        let map_len = len.checked_add(HUGE_PAGE - 1)? / HUGE_PAGE * HUGE_PAGE;
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

    pub fn from_slice(bytes: &[u8]) -> Option<AlignedBuf> {
        let mut buf = AlignedBuf::recycled(bytes.len())?;
        buf.as_mut_slice().copy_from_slice(bytes);
        Some(buf)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

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
#[cfg(target_os = "linux")]
mod pool {
    use std::ptr::NonNull;
    use std::sync::{Mutex, OnceLock};

    struct Mapping(NonNull<u8>, usize);
    // SAFETY: a pooled mapping is owned by the pool alone; no reference to it exists.
    unsafe impl Send for Mapping {}

    static POOL: Mutex<Vec<Mapping>> = Mutex::new(Vec::new());
    const MAX_ENTRIES: usize = 4;

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
        // SAFETY: the mapping was created by `AlignedBuf::mapped` with exactly this length and
        // nothing references it any more.
        unsafe {
            libc::munmap(m.0.as_ptr().cast(), m.1);
        }
    }

    /// The smallest pooled mapping that holds `len` bytes without wasting more than half.
    pub fn take(len: usize) -> Option<(NonNull<u8>, usize)> {
        let mut pool = POOL.lock().ok()?;
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, m)| m.1 >= len && m.1 / 2 <= len)
            .min_by_key(|(_, m)| m.1)
            .map(|(i, _)| i)?;
        let m = pool.swap_remove(best);
        Some((m.0, m.1))
    }

    pub fn give(ptr: NonNull<u8>, map_len: usize) {
        let Ok(mut pool) = POOL.lock() else {
            return unmap(Mapping(ptr, map_len));
        };
        if map_len > budget() {
            return unmap(Mapping(ptr, map_len));
        }
        pool.push(Mapping(ptr, map_len));
        // Oldest first out, until within the entry and byte budgets.
        while pool.len() > MAX_ENTRIES || pool.iter().map(|m| m.1).sum::<usize>() > budget() {
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
        // Too large a mapping for a small request is not handed out.
        let c = AlignedBuf::recycled(len / 4).unwrap();
        assert_ne!(c.as_ptr() as usize, addr);
    }

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 63, 64, 5 << 20] {
            let buf = AlignedBuf::zeroed(len).unwrap();
            assert_eq!(buf.as_ptr() as usize % ALIGNMENT, 0);
            assert_eq!(buf.len(), len);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
        }
    }
}
