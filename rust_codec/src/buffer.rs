//! The frame's one allocation: 64-byte aligned, huge-page backed where the kernel offers it.

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
    /// Allocates `len` zeroed bytes. Large buffers are 2 MiB aligned and advised for
    /// transparent huge pages, which cuts the page-fault cost of the first write.
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
        // SAFETY: [raw, raw+map_len) is the mapping just created; madvise only changes the
        // paging policy and its failure is harmless, so the result is ignored.
        unsafe {
            libc::madvise(raw, map_len, libc::MADV_HUGEPAGE);
        }
        Some(AlignedBuf {
            ptr: NonNull::new(raw.cast())?,
            len,
            origin: Origin::Mapped(map_len),
        })
    }

    pub fn from_slice(bytes: &[u8]) -> Option<AlignedBuf> {
        let mut buf = AlignedBuf::zeroed(bytes.len())?;
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
            // SAFETY: mapped in `mapped` with exactly this length and not unmapped since.
            Origin::Mapped(map_len) => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), map_len);
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
