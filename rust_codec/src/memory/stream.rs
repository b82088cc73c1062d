//! Streaming (non-temporal) stores for frames larger than the last-level cache.
//!
//! An ordinary store first reads the destination line for ownership; a frame the copying thread
//! never reads back gains nothing from that read and pays for it in bandwidth (encode of a
//! 217 MB batch measured 1.5-1.8x a memcpy that streams). glibc's `memcpy` streams only above
//! its own threshold, which no single tensor of a batch reaches, so the codec chooses per frame:
//! frames above [`CacheReport::auto_threshold`] are written with streaming stores, smaller ones
//! with ordinary stores (the consumer reads them next, from cache).
//!
//! That threshold is the smaller of two figures. Half the last-level cache cpu0 reports, because
//! a copy holds its source and its destination in the cache together: above that the
//! destination's lines are evicted before anyone reads them (a 18 MB take_rows on a 32 MiB L3
//! measured 1.2x a memcpy with ordinary stores, 0.97x streaming). And glibc's own
//! `x86_non_temporal_threshold`, asked of this process's loader once: a hypervisor may report
//! a cache far larger than a guest's share of it (a 2-vCPU VM reporting a 480 MiB L3 kept
//! frames under 240 MiB from streaming while glibc streamed from 190 MB, and encode measured
//! 1.55x a memcpy there). With glibc's figure in the minimum, py_wire never streams later than
//! the platform's `memcpy` does, whatever the cache report, and `GLIBC_TUNABLES` moves both.
//!
//! `PY_WIRE_STREAMING` overrides the choice: `always`, `never`, `auto` (the default) or a byte
//! threshold.
//!
//! Streaming stores are weakly ordered: [`Stores`] issues the `sfence` they need before it is
//! dropped, so a buffer written through it is complete before it is handed to another thread.
//!
//! Only x86-64 has them here ([`STREAMING_STORES`]). On aarch64 every copy is an ordinary one
//! (`copy_from_slice`, glibc's `memcpy`), whatever the setting, and [`threshold`] says "none":
//! Arm's cores detect a run of whole-line writes and stop allocating those lines by themselves
//! (write streaming), so ordinary stores already skip the read for ownership that non-temporal
//! stores exist to skip there, and `STNP` is only a hint to that same machinery
//! (docs/performance.md, "aarch64").

use std::sync::OnceLock;

/// Runs shorter than this are copied with ordinary stores: their partial head and tail lines
/// would be most of the work, and a streaming store to a partial line costs a write-combining
/// flush of its own.
pub const MIN_STREAMED_RUN: usize = 512;
/// Half the last-level cache when the CPU reports no cache sizes.
const FALLBACK_THRESHOLD: usize = 16 << 20;
/// `auto` never streams a frame this small, whatever the report says: it fits in the cache of
/// any machine this runs on, and deciding it needs no question to the loader.
pub const AUTO_FLOOR: usize = 1 << 20;
/// Whether this build has a streaming-store copy (x86-64). Elsewhere nothing streams.
pub const STREAMING_STORES: bool = cfg!(target_arch = "x86_64");

/// `PY_WIRE_STREAMING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Stream above [`CacheReport::auto_threshold`].
    Auto,
    /// Stream every frame.
    Always,
    /// Never stream.
    Never,
    /// Stream frames larger than this many bytes.
    Above(usize),
}

impl Setting {
    /// `always` | `never` | `auto` | a byte count; anything else is `auto` (a tuning knob must
    /// not make a process fail to start).
    pub fn parse(setting: &str) -> Setting {
        match setting.trim().to_ascii_lowercase().as_str() {
            "always" => Setting::Always,
            "never" => Setting::Never,
            other => other.parse().map_or(Setting::Auto, Setting::Above),
        }
    }

    fn from_env() -> Setting {
        std::env::var("PY_WIRE_STREAMING").map_or(Setting::Auto, |s| Setting::parse(&s))
    }
}

/// What `auto` decides from: this machine's reports, each absent where it could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheReport {
    /// The last-level cache cpu0 reports (sysfs), in bytes.
    pub last_level_cache: Option<usize>,
    /// glibc's `x86_non_temporal_threshold` in this process: its `memcpy` streams above it.
    pub glibc_threshold: Option<usize>,
}

impl CacheReport {
    /// This machine's report, read once per process (the loader is asked on the first frame
    /// larger than [`AUTO_FLOOR`]).
    pub fn current() -> CacheReport {
        static REPORT: OnceLock<CacheReport> = OnceLock::new();
        *REPORT.get_or_init(|| CacheReport {
            last_level_cache: last_level_cache_bytes(),
            glibc_threshold: glibc::non_temporal_threshold(),
        })
    }

    /// The frame size above which `auto` streams: half the last-level cache (16 MiB when none
    /// is reported), or glibc's threshold where that is lower; never below [`AUTO_FLOOR`].
    pub fn auto_threshold(&self) -> usize {
        let half_cache = self.last_level_cache.map_or(FALLBACK_THRESHOLD, |c| c / 2);
        half_cache
            .min(self.glibc_threshold.unwrap_or(usize::MAX))
            .max(AUTO_FLOOR)
    }
}

/// Whether a frame of `frame_len` bytes streams under `setting`, `report` read only for `auto`
/// and frames above [`AUTO_FLOOR`].
pub fn decide(setting: Setting, report: impl FnOnce() -> CacheReport, frame_len: usize) -> bool {
    match setting {
        Setting::Always => true,
        Setting::Never => false,
        Setting::Above(threshold) => frame_len > threshold,
        Setting::Auto => frame_len > AUTO_FLOOR && frame_len > report().auto_threshold(),
    }
}

/// `PY_WIRE_STREAMING`, read once per process.
pub fn setting() -> Setting {
    static SETTING: OnceLock<Setting> = OnceLock::new();
    *SETTING.get_or_init(Setting::from_env)
}

/// Whether a frame of `frame_len` bytes is written with streaming stores.
pub fn streams(frame_len: usize) -> bool {
    STREAMING_STORES && decide(setting(), CacheReport::current, frame_len)
}

/// The frame size from which copies stream in this process (0: every frame; `usize::MAX`: none).
pub fn threshold() -> usize {
    threshold_under(setting())
}

/// [`threshold`] under `setting`: `usize::MAX` whatever the setting where this build has no
/// streaming stores.
fn threshold_under(setting: Setting) -> usize {
    if !STREAMING_STORES {
        return usize::MAX;
    }
    match setting {
        Setting::Always => 0,
        Setting::Never => usize::MAX,
        Setting::Above(threshold) => threshold,
        Setting::Auto => CacheReport::current().auto_threshold(),
    }
}

/// The largest level-3 (else highest-level) data or unified cache cpu0 reports, in bytes.
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, usize)> = None;
    for entry in dir.flatten() {
        let path = entry.path();
        let read = |name: &str| std::fs::read_to_string(path.join(name)).ok();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        if read("type").is_some_and(|t| t.trim() == "Instruction") {
            continue;
        }
        let (Some(level), Some(size)) = (
            read("level").and_then(|l| l.trim().parse::<u32>().ok()),
            read("size").and_then(|s| parse_cache_size(s.trim())),
        ) else {
            continue;
        };
        if best.is_none_or(|(l, s)| (level, size) > (l, s)) {
            best = Some((level, size));
        }
    }
    best.map(|(_, size)| size)
}

/// `32768K`, `2M`, `1024` (sysfs writes `K` suffixes).
fn parse_cache_size(text: &str) -> Option<usize> {
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// glibc's `x86_non_temporal_threshold`. glibc keeps it in a hidden variable; the one public
/// way to read it is its loader's `--list-tunables` (glibc 2.33 and later), which computes it
/// from the same CPUID report and the same `GLIBC_TUNABLES` this process started with.
mod glibc {
    const TUNABLE: &str = "glibc.cpu.x86_non_temporal_threshold";

    /// This process's value, or `None` off x86-64 glibc, before glibc 2.33, or where the loader
    /// cannot be run (its answer takes about a millisecond; two seconds is the most it waits).
    pub fn non_temporal_threshold() -> Option<usize> {
        if !cfg!(all(
            target_arch = "x86_64",
            target_os = "linux",
            target_env = "gnu"
        )) {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let loader = own_loader(&maps)?;
        parse_listing(&run_briefly(loader)?)
    }

    /// The path of the dynamic loader mapped into this process (`ld-linux-x86-64.so.2`).
    pub fn own_loader(maps: &str) -> Option<&str> {
        maps.lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| {
                path.rsplit('/')
                    .next()
                    .is_some_and(|name| name.starts_with("ld-linux") && name.contains(".so"))
            })
    }

    fn run_briefly(loader: &str) -> Option<String> {
        use std::io::Read;
        use std::process::{Command, Stdio};
        use std::time::{Duration, Instant};
        let mut child = Command::new(loader)
            .arg("--list-tunables")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => {
                    // Killing an exited child fails harmlessly; `wait` reaps it either way.
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        };
        let mut listing = String::new();
        child.stdout.take()?.read_to_string(&mut listing).ok()?;
        status.success().then_some(listing)
    }

    /// The threshold from a `--list-tunables` listing:
    /// `glibc.cpu.x86_non_temporal_threshold: 0x7200000 (min: 0x4040, max: ...)`.
    pub fn parse_listing(listing: &str) -> Option<usize> {
        let line = listing
            .lines()
            .find(|l| l.trim_start().starts_with(TUNABLE))?;
        let value = line.split(':').nth(1)?.split_whitespace().next()?;
        match value.strip_prefix("0x") {
            Some(hex) => usize::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        }
        .filter(|&v| v > 0)
    }
}

/// A writer of copies into one output: ordinary or streaming stores, fenced when dropped (or at
/// [`Stores::fence`]) if any streaming store was issued.
pub struct Stores {
    streaming: bool,
    unfenced: bool,
}

impl Stores {
    /// Stores for a frame of `frame_len` bytes (see [`streams`]).
    pub fn for_frame(frame_len: usize) -> Stores {
        Stores::new(streams(frame_len))
    }

    /// Stores that stream (`true`, where this build has streaming stores) or not, whatever the
    /// frame's size.
    pub fn new(streaming: bool) -> Stores {
        Stores {
            streaming: streaming && STREAMING_STORES,
            unfenced: false,
        }
    }

    /// Whether these stores stream.
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    /// `dst.copy_from_slice(src)`, with streaming stores for the whole 64-byte lines of long runs.
    /// Panics if the lengths differ, as `copy_from_slice` does.
    pub fn copy(&mut self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(dst.len(), src.len(), "stream copy of unequal lengths");
        if dst.len() <= 16 {
            copy_short(dst, src);
            return;
        }
        if !self.streaming || dst.len() < MIN_STREAMED_RUN {
            dst.copy_from_slice(src);
            return;
        }
        self.unfenced |= arch::copy_streaming(dst, src);
    }

    /// Orders every streaming store issued so far before any later store (`sfence`).
    pub fn fence(&mut self) {
        if self.unfenced {
            arch::fence();
            self.unfenced = false;
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        self.fence();
    }
}

/// A copy of at most 16 bytes (one scalar of a row, a short token run) in two overlapping
/// fixed-size moves: a frame op makes one per row and field, and a call into `memcpy` costs
/// more than the copy. `dst` and `src` have the same length.
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

/// `dst.copy_from_slice(src)` with streaming stores, fenced (for one large copy).
pub fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    let mut stores = Stores::new(true);
    stores.copy(dst, src);
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_loadu_si256, _mm256_stream_si256, _mm_loadu_si128, _mm_sfence,
        _mm_stream_si128,
    };

    const LINE: usize = 64;

    fn has_avx() -> bool {
        std::arch::is_x86_feature_detected!("avx")
    }

    /// Ordinary stores up to the first 64-byte boundary of `dst`, streaming stores for every
    /// whole line after it, ordinary stores for the tail. Returns whether it streamed.
    pub fn copy_streaming(dst: &mut [u8], src: &[u8]) -> bool {
        let len = dst.len();
        let head = (dst.as_ptr() as usize).wrapping_neg() % LINE;
        let head = head.min(len);
        let body = (len - head) / LINE * LINE;
        let (dst_head, rest) = dst.split_at_mut(head);
        let (dst_body, dst_tail) = rest.split_at_mut(body);
        let (src_head, rest) = src.split_at(head);
        let (src_body, src_tail) = rest.split_at(body);
        dst_head.copy_from_slice(src_head);
        if body > 0 {
            if has_avx() {
                // SAFETY: AVX was detected at run time; both slices are `body` bytes long.
                unsafe { body_avx(dst_body, src_body) }
            } else {
                body_sse2(dst_body, src_body)
            }
        }
        dst_tail.copy_from_slice(src_tail);
        body > 0
    }

    /// Pages a streamed body is read from at once, in blocks of `PAGES * PAGE` bytes.
    const PAGES: usize = 4;
    const PAGE: usize = 4096;
    /// Bytes taken from one page before moving to the next: four lines.
    const STEP: usize = 4 * LINE;

    /// Streams `src` into `dst`: equal lengths, a multiple of 64, `dst` 64-byte aligned.
    ///
    /// Each block of four pages is copied four lines from each page in turn, as glibc's own
    /// non-temporal `memcpy` does: the hardware prefetchers follow each 4 KiB page on its own,
    /// so four streams in flight read faster than one (a 217 MB copy on an Intel Xeon measured
    /// 0.97-1.00x glibc's streaming `memcpy` this way, 1.10x one line after the next).
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[target_feature(enable = "avx")]
    unsafe fn body_avx(dst: &mut [u8], src: &[u8]) {
        debug_assert!(dst.len() == src.len() && dst.len().is_multiple_of(LINE));
        debug_assert!((dst.as_ptr() as usize).is_multiple_of(LINE));
        const BLOCK: usize = PAGES * PAGE;
        let blocks = dst.len() / BLOCK * BLOCK;
        let (dst_blocks, dst_rest) = dst.split_at_mut(blocks);
        let (src_blocks, src_rest) = src.split_at(blocks);
        for (d, s) in dst_blocks
            .chunks_exact_mut(BLOCK)
            .zip(src_blocks.chunks_exact(BLOCK))
        {
            for offset in (0..PAGE).step_by(STEP) {
                for page in 0..PAGES {
                    let at = page * PAGE + offset;
                    // SAFETY: AVX is enabled for this function; `at + STEP <= BLOCK` bytes
                    // of both chunks, and `d + at` is 64-byte aligned (`at` is a multiple of
                    // 64 inside an aligned body).
                    unsafe { lines_avx(&mut d[at..at + STEP], &s[at..at + STEP]) }
                }
            }
        }
        // SAFETY: AVX is enabled for this function; the rest starts 64-byte aligned (`blocks`
        // is a multiple of 64) and both halves have the same length, a multiple of 64.
        unsafe { lines_avx(dst_rest, src_rest) }
    }

    /// Streams whole lines one after another (the preconditions of `body_avx`).
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[target_feature(enable = "avx")]
    #[inline]
    unsafe fn lines_avx(dst: &mut [u8], src: &[u8]) {
        for (d, s) in dst.chunks_exact_mut(LINE).zip(src.chunks_exact(LINE)) {
            let (d, s) = (d.as_mut_ptr(), s.as_ptr());
            // SAFETY: `s` and `d` each point at 64 valid bytes (one chunk); loads are unaligned
            // loads; `d` is 64-byte aligned (the caller aligned the body), as the 32-byte
            // streaming store requires for both halves.
            unsafe {
                let a = _mm256_loadu_si256(s.cast::<__m256i>());
                let b = _mm256_loadu_si256(s.add(32).cast::<__m256i>());
                _mm256_stream_si256(d.cast::<__m256i>(), a);
                _mm256_stream_si256(d.add(32).cast::<__m256i>(), b);
            }
        }
    }

    /// As `body_avx`, with the SSE2 stores every x86-64 CPU has.
    fn body_sse2(dst: &mut [u8], src: &[u8]) {
        debug_assert!(dst.len() == src.len() && dst.len().is_multiple_of(LINE));
        debug_assert!((dst.as_ptr() as usize).is_multiple_of(LINE));
        for (d, s) in dst.chunks_exact_mut(LINE).zip(src.chunks_exact(LINE)) {
            let (d, s) = (d.as_mut_ptr(), s.as_ptr());
            for i in (0..LINE).step_by(16) {
                // SAFETY: `i + 16 <= 64` bytes of the chunk; SSE2 is part of x86-64; `d + i` is
                // 16-byte aligned (the body is 64-byte aligned) as the streaming store requires.
                unsafe {
                    let v = _mm_loadu_si128(s.add(i).cast::<__m128i>());
                    _mm_stream_si128(d.add(i).cast::<__m128i>(), v);
                }
            }
        }
    }

    pub fn fence() {
        // SAFETY: `sfence` (SSE, part of x86-64) only orders this thread's stores.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_sfence()
        }
    }
}

/// Elsewhere (aarch64 among them) a plain copy: no streaming stores, nothing to fence
/// ([`Stores`] never comes here, as [`STREAMING_STORES`] is false; the tests do).
#[cfg(not(target_arch = "x86_64"))]
mod arch {
    pub fn copy_streaming(dst: &mut [u8], src: &[u8]) -> bool {
        dst.copy_from_slice(src);
        false
    }

    pub fn fence() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Copies `src[src_off..src_off+len]` into `dst[dst_off..]` both ways and compares the whole
    /// destination, so a store outside the range shows too.
    fn check(len: usize, src_off: usize, dst_off: usize) {
        let src = pattern(src_off + len + 70, 3);
        let mut streamed = pattern(dst_off + len + 70, 200);
        let mut plain = streamed.clone();
        {
            let mut stores = Stores::new(true);
            stores.copy(
                &mut streamed[dst_off..dst_off + len],
                &src[src_off..src_off + len],
            );
        }
        plain[dst_off..dst_off + len].copy_from_slice(&src[src_off..src_off + len]);
        assert_eq!(
            streamed, plain,
            "len {len} src_off {src_off} dst_off {dst_off}"
        );
    }

    /// Every short length, both kinds of stores, at every alignment within 8 bytes: the bytes
    /// of `copy_from_slice`, nothing written around them.
    #[test]
    fn short_copies_write_exactly_their_bytes() {
        for len in 0..=17 {
            for (src_off, dst_off) in [(0, 0), (1, 3), (5, 7), (7, 2)] {
                check(len, src_off, dst_off);
                let src = pattern(src_off + len + 8, 9);
                let mut dst = pattern(dst_off + len + 8, 77);
                let mut plain = dst.clone();
                Stores::new(false).copy(
                    &mut dst[dst_off..dst_off + len],
                    &src[src_off..src_off + len],
                );
                plain[dst_off..dst_off + len].copy_from_slice(&src[src_off..src_off + len]);
                assert_eq!(dst, plain, "len {len}");
            }
        }
    }

    #[test]
    fn every_length_and_alignment_up_to_300() {
        for len in 0..=300 {
            for off in [0, 1, 7, 15, 31, 33, 63] {
                check(len, off, (off * 5) % 64);
                check(len, 0, off);
            }
        }
    }

    #[test]
    fn long_runs_with_unaligned_heads_and_tails() {
        for len in [
            512,
            513,
            575,
            576,
            4095,
            4096,
            4097,
            16_384,
            16_384 + 64,
            3 * 16_384 + 4_096 + 123,
            65_536 + 17,
            (3 << 20) + 5,
        ] {
            for (src_off, dst_off) in [(0, 0), (1, 0), (0, 1), (13, 63), (64, 32)] {
                check(len, src_off, dst_off);
            }
        }
    }

    #[test]
    fn the_arch_copy_itself_handles_short_and_unaligned_runs() {
        // Below MIN_STREAMED_RUN `Stores` never reaches it: test it directly.
        for len in 0..=300 {
            for (s, d) in [(0, 0), (3, 5), (0, 63), (17, 1)] {
                let src = pattern(s + len, 9);
                let mut out = pattern(d + len + 64, 1);
                let mut expected = out.clone();
                arch::copy_streaming(&mut out[d..d + len], &src[s..]);
                arch::fence();
                expected[d..d + len].copy_from_slice(&src[s..]);
                assert_eq!(out, expected, "len {len}");
            }
        }
    }

    #[test]
    fn settings_parse() {
        assert_eq!(Setting::parse("always"), Setting::Always);
        assert_eq!(Setting::parse("NEVER"), Setting::Never);
        assert_eq!(Setting::parse("auto"), Setting::Auto);
        assert_eq!(Setting::parse(""), Setting::Auto);
        assert_eq!(Setting::parse(" 1048576 "), Setting::Above(1 << 20));
        assert_eq!(Setting::parse("bogus"), Setting::Auto);
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("x"), None);
    }

    const MIB: usize = 1 << 20;

    /// The Intel Xeon kind of issue 41: a 2-vCPU VM reporting a 480 MiB L3, where glibc 2.36
    /// streams from 190 MB. Half the reported cache (240 MiB) alone kept the 217 MB frame from
    /// streaming while glibc's memcpy of it streamed.
    #[test]
    fn a_frame_past_glibcs_threshold_streams_under_an_inflated_cache_report() {
        let intel = CacheReport {
            last_level_cache: Some(480 * MIB),
            glibc_threshold: Some(190_000_000),
        };
        assert_eq!(intel.auto_threshold(), 190_000_000);
        assert!(decide(Setting::Auto, || intel, 217_000_000));
        assert!(!decide(Setting::Auto, || intel, 189_000_000));
        // Where glibc streams later than half the cache, the cache rule stands (the AMD kind:
        // a 32 MiB L3 and a 288 MiB glibc threshold).
        let amd = CacheReport {
            last_level_cache: Some(32 * MIB),
            glibc_threshold: Some(288 * MIB),
        };
        assert_eq!(amd.auto_threshold(), 16 * MIB);
        assert!(decide(Setting::Auto, || amd, 17 * MIB));
    }

    #[test]
    fn missing_reports_fall_back_and_overrides_win() {
        let nothing = CacheReport {
            last_level_cache: None,
            glibc_threshold: None,
        };
        assert_eq!(nothing.auto_threshold(), FALLBACK_THRESHOLD);
        let tiny = CacheReport {
            last_level_cache: Some(64 << 10),
            glibc_threshold: Some(0x4040),
        };
        assert_eq!(tiny.auto_threshold(), AUTO_FLOOR);
        let unread = || -> CacheReport { panic!("the report is not needed here") };
        assert!(!decide(Setting::Auto, unread, AUTO_FLOOR));
        assert!(decide(Setting::Always, unread, 1));
        assert!(!decide(Setting::Never, unread, usize::MAX));
        assert!(decide(Setting::Above(100), unread, 101));
        assert!(!decide(Setting::Above(100), unread, 100));
    }

    #[test]
    fn the_loader_listing_and_map_are_read() {
        let listing = "glibc.cpu.x86_shared_cache_size: 0x12e00000 (min: 0x0, max: 0xff)\n\
                       glibc.cpu.x86_non_temporal_threshold: 0x7200000 (min: 0x4040, max: 0xf)\n";
        assert_eq!(glibc::parse_listing(listing), Some(0x720_0000));
        assert_eq!(
            glibc::parse_listing("glibc.cpu.x86_non_temporal_threshold: 4096 (min: 0)"),
            Some(4096)
        );
        assert_eq!(glibc::parse_listing("glibc.malloc.check: 0x0"), None);
        let maps = "7f00-7f01 r--p 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f02-7f03 r--p 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n\
                    7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(
            glibc::own_loader(maps),
            Some("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        );
        assert_eq!(glibc::own_loader("7f00-7f01 r--p 0 0:0 0 [vdso]\n"), None);
    }

    /// The copies stream on x86-64 as the setting says; on aarch64 (and any other target) none
    /// does and the threshold says so (`usize::MAX`), whatever the setting: run by
    /// `scripts/dev.sh test-aarch64` under emulation.
    #[test]
    fn streaming_stores_exist_only_where_the_build_has_them() {
        let every = [
            Setting::Auto,
            Setting::Always,
            Setting::Never,
            Setting::Above(0),
        ];
        if cfg!(target_arch = "x86_64") {
            assert!(Stores::new(true).streaming());
            assert_eq!(threshold_under(Setting::Always), 0);
            assert_eq!(threshold_under(Setting::Above(4096)), 4096);
        } else {
            assert!(!Stores::new(true).streaming());
            assert!(!Stores::for_frame(usize::MAX).streaming());
            assert!(!streams(usize::MAX));
            for setting in every {
                assert_eq!(threshold_under(setting), usize::MAX, "{setting:?}");
            }
            assert_eq!(threshold(), usize::MAX);
            assert_eq!(CacheReport::current().glibc_threshold, None);
        }
        assert_eq!(threshold_under(Setting::Never), usize::MAX);
        // The copy is the same bytes either way.
        let src = pattern(1 << 16, 5);
        let mut dst = vec![0u8; src.len()];
        Stores::new(true).copy(&mut dst, &src);
        assert_eq!(dst, src);
    }

    /// On x86-64 glibc from 2.33 (this project's machines: 2.36) the loader answers.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    #[test]
    fn this_processs_loader_reports_its_threshold() {
        let threshold = glibc::non_temporal_threshold();
        assert!(threshold.is_some_and(|t| t >= 0x4040), "{threshold:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn streamed_copy_equals_copy_from_slice(
            len in 0usize..=300,
            big in proptest::bool::ANY,
            src_off in 0usize..64,
            dst_off in 0usize..64,
        ) {
            let len = if big { len * 97 + 512 } else { len };
            check(len, src_off, dst_off);
        }
    }
}
