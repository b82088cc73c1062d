//! Whether int64 offsets never decrease: the check of every O(rows) index pass (a reader's
//! sequence and row offsets, a frame op's picked rows). Plain x86-64 has no 64-bit vector
//! compare, so the pass is compiled twice and the AVX2 copy is taken where the CPU has it.

/// Whether the little-endian int64s of `bytes` (8 bytes each; a shorter tail is ignored)
/// never decrease.
pub fn never_decrease(bytes: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected at run time.
        return unsafe { never_decrease_avx2(bytes) };
    }
    never_decrease_here(bytes)
}

/// The pass itself, branch-free so that it vectorises: each value against the one before it.
#[inline(always)]
fn never_decrease_here(bytes: &[u8]) -> bool {
    let later = bytes.get(8..).unwrap_or_default();
    let pairs = bytes.chunks_exact(8).zip(later.chunks_exact(8));
    pairs.fold(0u8, |bad, (a, b)| bad | u8::from(le_i64(b) < le_i64(a))) == 0
}

/// [`never_decrease_here`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn never_decrease_avx2(bytes: &[u8]) -> bool {
    never_decrease_here(bytes)
}

/// The little-endian int64 of an 8-byte chunk (0 for any other length, which is never passed).
#[inline(always)]
fn le_i64(bytes: &[u8]) -> i64 {
    <[u8; 8]>::try_from(bytes).map_or(0, i64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn decreases_anywhere_are_found() {
        assert!(never_decrease(&[]));
        assert!(never_decrease(&bytes(&[7])));
        let rising: Vec<i64> = (0..100).map(|i| i / 3).collect();
        assert!(never_decrease(&bytes(&rising)));
        for at in 1..100 {
            let mut v = rising.clone();
            v[at] = v[at - 1] - 1;
            assert!(!never_decrease(&bytes(&v)), "a decrease at {at}");
            assert!(!never_decrease_here(&bytes(&v)), "a decrease at {at}");
        }
        // As int64s: a value with the top bit set is negative, smaller than what precedes it.
        assert!(!never_decrease(&bytes(&[0, 5, i64::MIN])));
        assert!(never_decrease(&bytes(&[i64::MIN, -1, 0, i64::MAX])));
    }
}
