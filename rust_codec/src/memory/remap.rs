//! Copy-on-write mappings of bytes that a shared file mapping shows.
//!
//! A reader handed read-only memory (a Ray object in plasma's shared-memory file, a read-only
//! `mmap` of a file or of `/dev/shm`) cannot give out views that may be written: a write would
//! reach every other reader, or fault. Copying makes them safe but costs a pass over every
//! byte. Where the pages come from a file that this process may open again, a second,
//! private (`MAP_PRIVATE`) mapping of the same file range shows the same page-cache pages at
//! no copy, and a write gets a private page that never reaches the file or other readers.
//!
//! The file is found through `/proc/self/maps`: reopened by its path when that still names
//! the same inode, else through `/proc/self/map_files/` (which needs `CAP_SYS_ADMIN` or
//! `CAP_CHECKPOINT_RESTORE`; a deleted file, such as Ray's plasma store, can be reopened only
//! there). Only shared mappings qualify: a private mapping may hold pages this process already
//! wrote, which the file does not show.

use std::fmt;

/// Why no copy-on-write mapping could be made (the caller copies instead).
#[derive(Debug)]
pub enum Refusal {
    /// No single mapping of `/proc/self/maps` holds the bytes.
    NotMapped,
    /// The bytes lie in anonymous or private memory, not a shared file mapping.
    NotSharedFile(String),
    /// The file could not be opened again (its path is gone and `map_files` is not permitted).
    CannotReopen(String),
    /// `mmap` refused, or the file is shorter than the mapping claims.
    MapFailed(String),
    /// Not supported on this platform.
    Unsupported,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotMapped => write!(f, "the bytes are not inside one mapping"),
            Refusal::NotSharedFile(why) => write!(f, "not a shared file mapping ({why})"),
            Refusal::CannotReopen(why) => write!(f, "cannot reopen the mapped file ({why})"),
            Refusal::MapFailed(why) => write!(f, "mmap failed ({why})"),
            Refusal::Unsupported => write!(f, "copy-on-write remapping needs Linux"),
        }
    }
}

/// One line of `/proc/self/maps`.
#[derive(Debug, PartialEq, Eq)]
struct MapsEntry {
    start: usize,
    end: usize,
    shared: bool,
    offset: u64,
    dev_major: u32,
    dev_minor: u32,
    inode: u64,
    path: String,
}

fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    let mut parts = line.splitn(6, ' ');
    let (range, perms, offset, dev, inode) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let path = parts.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    Some(MapsEntry {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        shared: perms.as_bytes().get(3) == Some(&b's'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    })
}

/// The entry of `maps` (the text of `/proc/self/maps`) that holds `[addr, addr + len)`.
fn find_entry(maps: &str, addr: usize, len: usize) -> Option<MapsEntry> {
    let end = addr.checked_add(len)?;
    maps.lines()
        .filter_map(parse_maps_line)
        .find(|e| e.start <= addr && end <= e.end)
}

/// The kernel's `struct procmap_query` (`linux/fs.h`, Linux 6.11 and later).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `_IOWR('f', 17, struct procmap_query)`.
#[cfg(target_os = "linux")]
const PROCMAP_QUERY: u64 =
    (3 << 30) | ((size_of::<ProcmapQuery>() as u64) << 16) | (0x66 << 8) | 17;
#[cfg(target_os = "linux")]
const PROCMAP_QUERY_VMA_SHARED: u64 = 0x08;

/// The mapping that holds `[addr, addr + len)`, asked of the kernel for that one address
/// (`PROCMAP_QUERY`): reading the whole of `/proc/self/maps` costs a millisecond or more in a
/// process with torch and Ray loaded. `None` when the kernel does not answer this query (before
/// Linux 6.11), so the caller reads the text instead; `Some(None)` when no one mapping holds
/// the range.
#[cfg(target_os = "linux")]
fn query_entry(addr: usize, len: usize) -> Option<Option<MapsEntry>> {
    use std::os::fd::AsRawFd;

    let end = addr.checked_add(len)?;
    let maps = std::fs::File::open("/proc/self/maps").ok()?;
    let mut name = vec![0u8; 4096];
    let mut query = ProcmapQuery {
        size: size_of::<ProcmapQuery>() as u64,
        query_addr: addr as u64,
        vma_name_size: name.len() as u32,
        vma_name_addr: name.as_mut_ptr() as u64,
        ..ProcmapQuery::default()
    };
    // SAFETY: `query` is a live, correctly sized `procmap_query`; the kernel writes at most
    // `vma_name_size` bytes to `name`, which outlives the call, and no build id (size 0).
    let rc = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut query) };
    if rc != 0 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOENT) => Some(None),
            _ => None,
        };
    }
    let (start, stop) = (
        usize::try_from(query.vma_start).ok()?,
        usize::try_from(query.vma_end).ok()?,
    );
    if !(start <= addr && end <= stop) {
        return Some(None);
    }
    let named = (query.vma_name_size as usize).min(name.len());
    let text = &name[..named];
    let text = text.split(|&b| b == 0).next().unwrap_or(&[]);
    Some(Some(MapsEntry {
        start,
        end: stop,
        shared: query.vma_flags & PROCMAP_QUERY_VMA_SHARED != 0,
        offset: query.vma_offset,
        dev_major: query.dev_major,
        dev_minor: query.dev_minor,
        inode: query.inode,
        path: String::from_utf8_lossy(text).into_owned(),
    }))
}

/// A private, writable, copy-on-write mapping of the file pages that show `len` bytes.
pub struct PrivateMapping {
    #[cfg(target_os = "linux")]
    base: std::ptr::NonNull<u8>,
    #[cfg(target_os = "linux")]
    map_len: usize,
    #[cfg(target_os = "linux")]
    skip: usize,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone and freed once, on drop; shared references
// only read it.
unsafe impl Send for PrivateMapping {}
// SAFETY: as above; `as_slice` hands out shared reads only.
unsafe impl Sync for PrivateMapping {}

impl PrivateMapping {
    /// Maps the file pages behind `[addr, addr + len)` again, privately. `addr` must be memory
    /// this process has mapped (it is only looked up, never read).
    #[cfg(target_os = "linux")]
    pub fn of(addr: usize, len: usize) -> Result<PrivateMapping, Refusal> {
        use std::os::unix::fs::MetadataExt;

        let entry = match query_entry(addr, len) {
            Some(found) => found.ok_or(Refusal::NotMapped)?,
            None => {
                let maps = std::fs::read_to_string("/proc/self/maps")
                    .map_err(|e| Refusal::CannotReopen(format!("/proc/self/maps: {e}")))?;
                find_entry(&maps, addr, len).ok_or(Refusal::NotMapped)?
            }
        };
        if !entry.shared || entry.inode == 0 || !entry.path.starts_with('/') {
            let kind = if entry.path.is_empty() {
                "anonymous".to_string()
            } else {
                entry.path.clone()
            };
            let sharing = if entry.shared { "shared" } else { "private" };
            return Err(Refusal::NotSharedFile(format!("{sharing} {kind}")));
        }
        let same_file = |m: &std::fs::Metadata| {
            m.ino() == entry.inode
                && libc::major(m.dev()) == entry.dev_major
                && libc::minor(m.dev()) == entry.dev_minor
        };
        let by_path = std::fs::File::open(&entry.path)
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| same_file(&m)));
        let file = match by_path {
            Some(f) => f,
            None => {
                let alias = format!("/proc/self/map_files/{:x}-{:x}", entry.start, entry.end);
                let f = std::fs::File::open(&alias)
                    .map_err(|e| Refusal::CannotReopen(format!("{}: {e}", entry.path)))?;
                if !f.metadata().is_ok_and(|m| same_file(&m)) {
                    return Err(Refusal::CannotReopen(format!("{alias} changed")));
                }
                f
            }
        };
        let file_size = file
            .metadata()
            .map_err(|e| Refusal::MapFailed(e.to_string()))?
            .len();
        let into = (addr - entry.start) as u64;
        let file_offset = entry
            .offset
            .checked_add(into)
            .ok_or_else(|| Refusal::MapFailed("offset overflows".into()))?;
        if file_offset.saturating_add(len as u64) > file_size {
            return Err(Refusal::MapFailed(format!(
                "the file holds {file_size} bytes, fewer than the mapping shows"
            )));
        }
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| *p > 0)
            .unwrap_or(4096);
        let aligned = file_offset - file_offset % page;
        let skip = (file_offset - aligned) as usize;
        let map_len = skip
            .checked_add(len)
            .ok_or_else(|| Refusal::MapFailed("length overflows".into()))?;
        if len == 0 {
            return Err(Refusal::MapFailed("an empty range".into()));
        }
        let offset = libc::off_t::try_from(aligned)
            .map_err(|_| Refusal::MapFailed("offset too large".into()))?;
        // SAFETY: a fresh mapping chosen by the kernel (null hint), of an open file descriptor,
        // at a page-aligned offset inside the file; nothing else references the new range.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Refusal::MapFailed(
                std::io::Error::last_os_error().to_string(),
            ));
        }
        let base = std::ptr::NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| Refusal::MapFailed("null mapping".into()))?;
        Ok(PrivateMapping {
            base,
            map_len,
            skip,
            len,
        })
    }

    /// Maps the file pages behind `[addr, addr + len)` again, privately (Linux only).
    #[cfg(not(target_os = "linux"))]
    pub fn of(_addr: usize, _len: usize) -> Result<PrivateMapping, Refusal> {
        Err(Refusal::Unsupported)
    }

    /// The mapped bytes' address (writable: the mapping is private to this value's owner).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: skip < map_len, inside the mapping.
            unsafe { self.base.as_ptr().add(self.skip) }
        }
        #[cfg(not(target_os = "linux"))]
        {
            std::ptr::null_mut()
        }
    }

    /// The bytes the mapping shows (the frame's length).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping shows no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes the mapping shows, from the frame's first.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` bytes from `as_mut_ptr` lie inside the live mapping owned by `self`.
        unsafe { std::slice::from_raw_parts(self.as_mut_ptr(), self.len) }
    }
}

#[cfg(target_os = "linux")]
impl Drop for PrivateMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly the mapping `of` created, unmapped once here.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let line = "7f3c1a000000-7f3c1a400000 rw-s 00001000 00:1a 4242   /dev/shm/plasma (deleted)";
        let e = parse_maps_line(line).expect("parses");
        assert_eq!(e.start, 0x7f3c_1a00_0000);
        assert_eq!(e.end, 0x7f3c_1a40_0000);
        assert!(e.shared);
        assert_eq!(e.offset, 0x1000);
        assert_eq!((e.dev_major, e.dev_minor, e.inode), (0, 0x1a, 4242));
        assert_eq!(e.path, "/dev/shm/plasma (deleted)");
        let anon = parse_maps_line("55d0-55e0 rw-p 00000000 00:00 0").expect("parses");
        assert!(!anon.shared);
        assert_eq!(anon.path, "");
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn finds_the_entry_holding_a_range() {
        let maps = "1000-2000 r--s 0 08:01 7 /a\n2000-3000 r--s 0 08:01 8 /b\n";
        assert_eq!(find_entry(maps, 0x1800, 0x800).map(|e| e.inode), Some(7));
        assert!(
            find_entry(maps, 0x1800, 0x900).is_none(),
            "spans two mappings"
        );
        assert!(find_entry(maps, usize::MAX, 2).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_shared_file_mapping_is_remapped_copy_on_write() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("py_wire_remap_{}", std::process::id()));
        let mut f = std::fs::File::create(&dir).expect("create");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).expect("write");
        drop(f);
        let f = std::fs::File::open(&dir).expect("open");
        // SAFETY: a fresh read-only shared mapping of the whole file, unmapped below.
        let src = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(src, libc::MAP_FAILED);
        let addr = src as usize + 100;
        // The kernel's one-address answer, where it gives one, is the line of the maps text.
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let heap = [1u8; 64];
        for (at, n) in [(addr, 5000), (heap.as_ptr() as usize, 64), (addr, 1 << 40)] {
            if let Some(answer) = query_entry(at, n) {
                assert_eq!(answer, find_entry(&maps, at, n), "{at:x}+{n}");
            }
        }
        let m = PrivateMapping::of(addr, 5000).expect("remapped");
        assert_eq!(m.as_slice(), &data[100..5100]);
        assert_ne!(m.as_mut_ptr() as usize, addr);
        // SAFETY: the private mapping is writable and owned by `m`.
        unsafe { *m.as_mut_ptr() = 7 };
        assert_eq!(m.as_slice()[0], 7);
        // SAFETY: `src` maps data.len() bytes.
        let seen = unsafe { std::slice::from_raw_parts(src as *const u8, data.len()) };
        assert_eq!(seen[100], data[100], "the write stayed private");
        assert_eq!(std::fs::read(&dir).expect("read")[100], data[100]);
        drop(m);
        // SAFETY: unmapping what was mapped above.
        unsafe { libc::munmap(src, data.len()) };
        std::fs::remove_file(&dir).expect("remove");
        let heap = [0u8; 100];
        assert!(matches!(
            PrivateMapping::of(heap.as_ptr() as usize, 100),
            Err(Refusal::NotSharedFile(_))
        ));
    }
}
