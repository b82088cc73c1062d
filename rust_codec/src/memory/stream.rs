//! Streaming (non-temporal) stores for frames larger than the last-level cache.
//!
//! An ordinary store first reads the destination line for ownership; a frame the copying thread
//! never reads back gains nothing from that read and pays for it in bandwidth (encode of a
//! 217 MB batch measured 1.5-1.8x a memcpy that streams). glibc's `memcpy` streams only above
//! its own threshold (192 MiB here), which no single tensor of a batch reaches, so the codec
//! chooses: frames larger than half the last-level cache are written with streaming stores,
//! smaller ones with ordinary stores (the consumer reads them next, from cache). Half, because
//! a copy holds its source and its destination in the cache together: above that the
//! destination's lines are evicted before anyone reads them (a 18 MB take_rows on a 32 MiB L3
//! measured 1.2x a memcpy with ordinary stores, 0.97x streaming).
//!
//! `PY_WIRE_STREAMING` overrides the choice: `always`, `never`, `auto` (the default: half the
//! last-level cache the CPU reports) or a byte threshold.
//!
//! Streaming stores are weakly ordered: [`Stores`] issues the `sfence` they need before it is
//! dropped, so a buffer written through it is complete before it is handed to another thread.

use std::sync::OnceLock;

/// Runs shorter than this are copied with ordinary stores: their partial head and tail lines
/// would be most of the work, and a streaming store to a partial line costs a write-combining
/// flush of its own.
pub const MIN_STREAMED_RUN: usize = 512;
/// The threshold when the CPU reports no cache sizes.
const FALLBACK_THRESHOLD: usize = 16 << 20;

/// The frame size from which copies stream: `PY_WIRE_STREAMING` or half the last-level cache.
pub fn threshold() -> usize {
    static THRESHOLD: OnceLock<usize> = OnceLock::new();
    *THRESHOLD.get_or_init(|| {
        let cache = last_level_cache_bytes().map_or(FALLBACK_THRESHOLD, |c| c / 2);
        match std::env::var("PY_WIRE_STREAMING") {
            Ok(setting) => parse_setting(&setting, cache),
            Err(_) => cache,
        }
    })
}

/// Whether a frame of `frame_len` bytes is written with streaming stores.
pub fn streams(frame_len: usize) -> bool {
    frame_len > threshold()
}

/// `always` | `never` | `auto` | a byte count; anything else is `auto` (a tuning knob must not
/// make a process fail to start).
fn parse_setting(setting: &str, cache: usize) -> usize {
    match setting.trim().to_ascii_lowercase().as_str() {
        "always" => 0,
        "never" => usize::MAX,
        "auto" | "" => cache,
        other => other.parse().unwrap_or(cache),
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

    /// Stores that stream (`true`) or not, whatever the frame's size.
    pub fn new(streaming: bool) -> Stores {
        Stores {
            streaming,
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

    /// Streams `src` into `dst`: equal lengths, a multiple of 64, `dst` 64-byte aligned.
    ///
    /// # Safety
    /// The CPU must support AVX.
    #[target_feature(enable = "avx")]
    unsafe fn body_avx(dst: &mut [u8], src: &[u8]) {
        debug_assert!(dst.len() == src.len() && dst.len().is_multiple_of(LINE));
        debug_assert!((dst.as_ptr() as usize).is_multiple_of(LINE));
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

/// Elsewhere (aarch64 among them) a plain copy: no streaming stores, nothing to fence.
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
        assert_eq!(parse_setting("always", 7), 0);
        assert_eq!(parse_setting("NEVER", 7), usize::MAX);
        assert_eq!(parse_setting("auto", 7), 7);
        assert_eq!(parse_setting("1048576", 7), 1 << 20);
        assert_eq!(parse_setting("bogus", 7), 7);
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("x"), None);
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
