//! Floating-point dtype casts, fused into the encode copy (narrowing to a declared wire dtype)
//! and the decode restore (widening back to the declared source dtype).
//!
//! Every result is bit-identical to PyTorch's `tensor.to(dtype)` on a contiguous CPU tensor, as
//! measured on torch 2.15 (x86-64, AVX2 and AVX512 kernels):
//!
//! * Rounding is round-to-nearest-even, with IEEE subnormals (no flush to zero), overflow to
//!   ±inf and signed zeros.
//! * `float64 -> bfloat16` and `float64 -> float16` round twice, through `float32`, as torch
//!   does (`1 + 2^-8 + 2^-30` becomes bfloat16 `1.0`, not `1 + 2^-7`).
//! * NaN: `float32 -> bfloat16` writes `0xFFFF` for every NaN, whatever its sign or payload
//!   (torch's vectorised kernel; its scalar path, used for non-contiguous tensors, writes
//!   `0x7FC0` instead). Every other cast keeps the sign, sets the quiet bit and keeps the top
//!   bits of the payload, like the x86 conversion instructions; `bfloat16 -> float32` is a plain
//!   shift and keeps a signalling NaN signalling.
//!
//! The loops walk fixed-size element arrays with branch-free bodies so that LLVM vectorises them.

use crate::error::Result;
use crate::schema::dtype::DType;
use crate::schema_err;

/// What torch's vectorised `float32 -> bfloat16` kernel writes for any NaN input.
const BF16_NAN_FROM_F32: u16 = 0xFFFF;

/// Whether `from -> to` is a cast the codec implements.
pub fn is_supported(from: DType, to: DType) -> bool {
    use DType::*;
    from == to
        || matches!(
            (from, to),
            (F32, BF16)
                | (F32, F16)
                | (F64, F32)
                | (F64, BF16)
                | (F64, F16)
                | (BF16, F32)
                | (F16, F32)
                | (F32, F64)
                | (BF16, F64)
                | (F16, F64)
        )
}

/// Whether a schema may declare `to` as the wire dtype of a `from` field: the narrowing float
/// casts only (a widening one would only make frames larger). [`is_supported`] also lists the
/// widening casts back, which decoding to the source dtype uses.
pub fn is_wire_cast(from: DType, to: DType) -> bool {
    use DType::*;
    matches!(
        (from, to),
        (F32, BF16) | (F32, F16) | (F64, F32) | (F64, BF16) | (F64, F16)
    )
}

/// Whether the cast can lose information (a narrowing float cast, e.g. F32->BF16, F32->F16,
/// F64->F32, F64->BF16, F64->F16, BF16<->F16 either way).
///
/// Defined for every pair, supported or not: an identity is never lossy; between real floating
/// types (and between the two complex types) a cast is lossy unless every value of `from` is a
/// value of `to`. Any other pair (integers, bool, real <-> complex) is never cast by the codec and
/// is conservatively reported as lossy.
pub fn is_lossy(from: DType, to: DType) -> bool {
    from != to && !widens_exactly(from, to)
}

/// Whether every value of `from` is exactly a value of `to` (no rounding, no overflow): the
/// one table of lossless widenings. A schema field's `accept` list may name only these (the
/// Python loader reads the table as `_native.LOSSLESS_WIDENINGS`), and a wire cast that is not
/// one must be declared `lossy`.
pub fn widens_exactly(from: DType, to: DType) -> bool {
    use DType::*;
    match from {
        Bool => !matches!(to, Bool | F8E4M3 | F8E5M2 | C64 | C128),
        U8 => matches!(
            to,
            I16 | U16 | I32 | U32 | I64 | U64 | F16 | BF16 | F32 | F64
        ),
        I8 => matches!(to, I16 | I32 | I64 | F16 | BF16 | F32 | F64),
        U16 => matches!(to, I32 | U32 | I64 | U64 | F32 | F64),
        I16 => matches!(to, I32 | I64 | F32 | F64),
        U32 => matches!(to, I64 | U64 | F64),
        I32 => matches!(to, I64 | F64),
        // e4m3fn: 4 exponent bits, 3 mantissa bits, |x| <= 448, min subnormal 2^-9.
        // e5m2: float16's exponent range with 2 mantissa bits.
        F8E4M3 | F8E5M2 => matches!(to, F16 | BF16 | F32 | F64),
        F16 | BF16 => matches!(to, F32 | F64 | C64 | C128),
        F32 => matches!(to, F64 | C64 | C128),
        F64 | C64 => to == C128,
        I64 | U64 | C128 => false,
    }
}

/// Convert a contiguous run of little-endian source elements into destination elements.
/// `src.len()` must be n*from.size() and `dst.len()` n*to.size(); otherwise Err(Error::Schema).
pub fn cast_run(from: DType, to: DType, src: &[u8], dst: &mut [u8]) -> Result<()> {
    if !is_supported(from, to) {
        return Err(schema_err!(
            "no cast from {} to {}: the codec casts only between floating types \
             (float32/float64 to a narrower wire dtype and back)",
            from.name(),
            to.name()
        ));
    }
    let (from_size, to_size) = (from.size(), to.size());
    let n = src.len() / from_size;
    if !src.len().is_multiple_of(from_size) || n.checked_mul(to_size) != Some(dst.len()) {
        return Err(schema_err!(
            "cast {} -> {}: a source of {} bytes and a destination of {} bytes do not hold the \
             same whole number of elements ({} and {} bytes each)",
            from.name(),
            to.name(),
            src.len(),
            dst.len(),
            from_size,
            to_size
        ));
    }
    use DType::*;
    match (from, to) {
        _ if from == to => dst.copy_from_slice(src),
        (F32, BF16) => map::<4, 2>(src, dst, |x| f32_to_bf16(u32le(x)).to_le_bytes()),
        (F32, F16) => map::<4, 2>(src, dst, |x| f32_to_f16(u32le(x)).to_le_bytes()),
        (F64, F32) => map::<8, 4>(src, dst, |x| f64_to_f32(u64le(x)).to_le_bytes()),
        (F64, BF16) => map::<8, 2>(src, dst, |x| {
            f32_to_bf16(f64_to_f32(u64le(x))).to_le_bytes()
        }),
        (F64, F16) => map::<8, 2>(src, dst, |x| f32_to_f16(f64_to_f32(u64le(x))).to_le_bytes()),
        (BF16, F32) => map::<2, 4>(src, dst, |x| bf16_to_f32(u16le(x)).to_le_bytes()),
        (F16, F32) => map::<2, 4>(src, dst, |x| f16_to_f32(u16le(x)).to_le_bytes()),
        (F32, F64) => map::<4, 8>(src, dst, |x| f32_to_f64(u32le(x)).to_le_bytes()),
        (BF16, F64) => map::<2, 8>(src, dst, |x| {
            f32_to_f64(bf16_to_f32(u16le(x))).to_le_bytes()
        }),
        (F16, F64) => map::<2, 8>(src, dst, |x| f32_to_f64(f16_to_f32(u16le(x))).to_le_bytes()),
        // is_supported() admitted the pair, so this arm is unreachable; refuse rather than panic.
        _ => return Err(schema_err!("no cast from {} to {}", from.name(), to.name())),
    }
    Ok(())
}

/// Apply `f` to every `S`-byte source element, writing `D`-byte destination elements. The
/// caller has checked that both slices hold the same number of elements.
#[inline(always)]
fn map<const S: usize, const D: usize>(src: &[u8], dst: &mut [u8], f: impl Fn([u8; S]) -> [u8; D]) {
    let (src, _) = src.as_chunks::<S>();
    let (dst, _) = dst.as_chunks_mut::<D>();
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        *d = f(*s);
    }
}

#[inline(always)]
fn u16le(b: [u8; 2]) -> u16 {
    u16::from_le_bytes(b)
}
#[inline(always)]
fn u32le(b: [u8; 4]) -> u32 {
    u32::from_le_bytes(b)
}
#[inline(always)]
fn u64le(b: [u8; 8]) -> u64 {
    u64::from_le_bytes(b)
}

// ---- element kernels, on bit patterns ------------------------------------------------------

/// float32 -> bfloat16, round to nearest even; every NaN becomes `BF16_NAN_FROM_F32`.
#[inline(always)]
fn f32_to_bf16(x: u32) -> u16 {
    // Adding 0x7FFF plus the lowest kept bit, then truncating, rounds the 16 dropped bits to
    // nearest with ties to even; a carry out of the mantissa bumps the exponent, which is the
    // correct result (up to +-inf) for every finite input.
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    let is_nan = (x & 0x7FFF_FFFF) > 0x7F80_0000;
    if is_nan {
        BF16_NAN_FROM_F32
    } else {
        rounded as u16
    }
}

/// float32 -> float16, round to nearest even, with float16 subnormals and overflow to inf.
/// A NaN keeps its sign and the top 10 payload bits, with the quiet bit set.
#[inline(always)]
fn f32_to_f16(x: u32) -> u16 {
    let sign = (x >> 16) & 0x8000;
    let a = x & 0x7FFF_FFFF;
    // Normal range (|x| >= 2^-14): rebias the exponent from 127 to 15 (subtract 112 << 23) and
    // round away the 13 low mantissa bits to nearest even. A carry runs into the exponent; any
    // result at or past the infinity pattern is clamped to it.
    let normal = (a
        .wrapping_sub(112 << 23)
        .wrapping_add(0x0FFF + ((a >> 13) & 1))
        >> 13)
        .min(0x7C00);
    // Subnormal range (|x| < 2^-14): in [0.5, 1) float32 is spaced 2^-24 apart, which is the
    // float16 subnormal step, so the float32 sum |x| + 0.5 rounds |x| to a whole number of
    // float16 subnormal steps (nearest, ties to even); those steps are the sum's low bits.
    // 2^-14 itself may be reached by rounding up, giving 0x400, the smallest normal. Inputs
    // below 2^-25 round to zero anyway (2^-25 itself ties to even, to zero); replacing them by 0
    // keeps float32 subnormals, which are slow on x86, out of the addition.
    let addend = if a < 0x3300_0000 { 0 } else { a };
    let subnormal = (f32::from_bits(addend) + 0.5)
        .to_bits()
        .wrapping_sub(0x3F00_0000);
    let nan = 0x7E00 | ((a >> 13) & 0x03FF);
    let magnitude = if a > 0x7F80_0000 {
        nan
    } else if a < 0x3880_0000 {
        subnormal
    } else {
        normal
    };
    (sign | magnitude) as u16
}

/// float64 -> float32, round to nearest even. A NaN keeps its sign and top 22 payload bits,
/// with the quiet bit set.
#[inline(always)]
fn f64_to_f32(x: u64) -> u32 {
    let is_nan = (x & 0x7FFF_FFFF_FFFF_FFFF) > 0x7FF0_0000_0000_0000;
    // `as` between floats rounds to nearest, ties to even, for every non-NaN value.
    let value = (f64::from_bits(x) as f32).to_bits();
    let nan = ((x >> 32) as u32 & 0x8000_0000) | 0x7FC0_0000 | ((x >> 29) as u32 & 0x003F_FFFF);
    if is_nan {
        nan
    } else {
        value
    }
}

/// bfloat16 -> float32: exact, a shift (NaN payloads, signalling or not, are kept as they are).
#[inline(always)]
fn bf16_to_f32(h: u16) -> u32 {
    u32::from(h) << 16
}

/// float16 -> float32: exact. A NaN keeps its sign and payload, with the quiet bit set.
#[inline(always)]
fn f16_to_f32(h: u16) -> u32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7FFF;
    // A normal float16 only needs its exponent rebiased from 15 to 127 (add 112 << 23). A
    // subnormal one is em * 2^-24: the integer em converts exactly to float32 and the scaling by
    // a power of two is exact; no float32 subnormal (slow on x86) is involved.
    let normal = (em << 13).wrapping_add(112 << 23);
    let subnormal = ((em as i32) as f32 * f32::from_bits(0x3380_0000)).to_bits();
    let finite = if em < 0x0400 { subnormal } else { normal };
    let quiet = if em > 0x7C00 { 0x0040_0000 } else { 0 };
    let special = 0x7F80_0000 | ((em & 0x03FF) << 13) | quiet;
    sign | if em >= 0x7C00 { special } else { finite }
}

/// float32 -> float64: exact. A NaN keeps its sign and payload, with the quiet bit set.
#[inline(always)]
fn f32_to_f64(x: u32) -> u64 {
    let is_nan = (x & 0x7FFF_FFFF) > 0x7F80_0000;
    let value = f64::from(f32::from_bits(x)).to_bits();
    let nan = (u64::from(x & 0x8000_0000) << 32)
        | 0x7FF8_0000_0000_0000
        | (u64::from(x & 0x007F_FFFF) << 29);
    if is_nan {
        nan
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};
    use DType::*;

    const FLOATS: [DType; 4] = [BF16, F16, F32, F64];

    fn cast_vec(from: DType, to: DType, src: &[u8]) -> Vec<u8> {
        let n = src.len() / from.size();
        let mut dst = vec![0u8; n * to.size()];
        cast_run(from, to, src, &mut dst).expect("supported cast");
        dst
    }

    fn sha_hex(bytes: &[u8]) -> String {
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn le16(v: &[u16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn le32(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn le64(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// The deterministic generator the torch vector script also uses.
    struct SplitMix(u64);
    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    const SAMPLES: usize = 1 << 20;

    fn sample_f32() -> Vec<u32> {
        let mut g = SplitMix(0x5EED);
        let mut out = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES / 2 {
            let r = g.next();
            out.push(r as u32);
            out.push((r >> 32) as u32);
        }
        out
    }

    /// Raw bit patterns, values around float32's and float16's ranges, and values whose low bits
    /// sit on or next to a float32 / bfloat16 / float16 rounding tie.
    fn sample_f64() -> Vec<u64> {
        const LO: [u64; 8] = [
            0x1000_0000,
            0x1000_0001,
            0x0FFF_FFFF,
            0,
            0x1FFF_FFFF,
            1,
            0x1000_0000,
            0x0FFF_FFFF,
        ];
        let mut g = SplitMix(0xF00D);
        (0..SAMPLES)
            .map(|i| {
                let r = g.next();
                if i & 3 == 0 {
                    return r;
                }
                let sign = (r >> 63) << 63;
                let e = (r >> 52) & 0x7FF;
                let mut mant = r & ((1 << 52) - 1);
                let exp = match i & 3 {
                    1 => 863 + e % 300,
                    2 => 993 + e % 50,
                    _ => {
                        let lo = LO[((r >> 12) & 7) as usize];
                        if (r >> 15) & 1 == 1 {
                            mant = (mant & !((1 << 45) - 1)) | (0x8000 << 29);
                        } else if (r >> 16) & 1 == 1 {
                            mant = (mant & !((1 << 42) - 1)) | (0x1000 << 29);
                        }
                        mant = (mant & !((1 << 29) - 1)) | lo;
                        if (r >> 11) & 1 == 1 {
                            863 + e % 300
                        } else {
                            993 + e % 50
                        }
                    }
                };
                sign | (exp << 52) | mant
            })
            .collect()
    }

    fn is_nan16(to: DType, h: u16) -> bool {
        match to {
            BF16 => (h & 0x7FFF) > 0x7F80,
            _ => (h & 0x7FFF) > 0x7C00,
        }
    }

    /// A narrow (16-bit) value as f64, through the codec's own exact widening.
    fn widen16(dt: DType, h: u16) -> f64 {
        f64::from_bits(u64::from_le_bytes(
            cast_vec(dt, F64, &h.to_le_bytes())
                .try_into()
                .expect("8 bytes"),
        ))
    }

    /// Integer sources against what the targets hold: an integer target must contain the
    /// whole range, a real floating target must represent every integer in it exactly (up to
    /// 2^mantissa digits); complex targets take no integer. The table agrees with that rule.
    #[test]
    fn integer_widenings_follow_ranges_and_mantissas() {
        let range = |d: DType| -> Option<(i128, i128)> {
            Some(match d {
                Bool => (0, 1),
                U8 => (0, 255),
                I8 => (-128, 127),
                U16 => (0, 65_535),
                I16 => (-32_768, 32_767),
                U32 => (0, u32::MAX as i128),
                I32 => (i32::MIN as i128, i32::MAX as i128),
                U64 => (0, u64::MAX as i128),
                I64 => (i64::MIN as i128, i64::MAX as i128),
                _ => return None,
            })
        };
        let exact_integers = |d: DType| -> Option<i128> {
            Some(match d {
                F16 => 1 << 11,
                BF16 => 1 << 8,
                F32 => 1 << 24,
                F64 => 1 << 53,
                _ => return None,
            })
        };
        for from in DType::all() {
            let Some((lo, hi)) = range(from) else {
                continue;
            };
            for to in DType::all().filter(|&t| t != from) {
                let want = match (range(to), exact_integers(to)) {
                    (Some((tlo, thi)), _) => tlo <= lo && hi <= thi,
                    (None, Some(limit)) => lo.abs().max(hi) <= limit,
                    (None, None) => false,
                };
                assert_eq!(widens_exactly(from, to), want, "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn supported_pairs() {
        for dt in DType::all() {
            assert!(is_supported(dt, dt), "{dt:?} identity");
            assert!(!is_lossy(dt, dt));
        }
        let narrowing = [(F32, BF16), (F32, F16), (F64, F32), (F64, BF16), (F64, F16)];
        for (a, b) in narrowing {
            assert!(is_supported(a, b) && is_supported(b, a), "{a:?} <-> {b:?}");
            assert!(is_lossy(a, b) && !is_lossy(b, a), "{a:?} -> {b:?}");
        }
        assert!(is_lossy(BF16, F16) && is_lossy(F16, BF16));
        assert!(!is_supported(BF16, F16) && !is_supported(F16, BF16));
        for a in DType::all() {
            for b in DType::all() {
                if a != b && !(FLOATS.contains(&a) && FLOATS.contains(&b)) {
                    assert!(!is_supported(a, b), "{a:?} -> {b:?}");
                }
            }
        }
        assert!(!is_lossy(F8E4M3, BF16) && is_lossy(F32, F8E5M2) && is_lossy(I64, F32));
    }

    #[test]
    fn refuses_unsupported_pairs_and_bad_lengths() {
        let mut dst = [0u8; 8];
        for (a, b) in [
            (I64, F64),
            (F32, I32),
            (BF16, F16),
            (F32, F8E4M3),
            (U8, F32),
        ] {
            let err = cast_run(a, b, &[0u8; 8], &mut dst[..b.size()]).unwrap_err();
            assert!(matches!(err, Error::Schema(_)), "{a:?} -> {b:?}: {err:?}");
            assert!(err.message().contains(a.name()) && err.message().contains(b.name()));
        }
        let bad: [(DType, DType, usize, usize); 6] = [
            (F32, BF16, 6, 2),
            (F32, BF16, 8, 2),
            (F32, BF16, 4, 4),
            (F64, F16, 16, 2),
            (BF16, F64, 3, 8),
            (F32, F32, 4, 8),
        ];
        for (a, b, ns, nd) in bad {
            let src = vec![0u8; ns];
            let mut dst = vec![0u8; nd];
            let err = cast_run(a, b, &src, &mut dst).unwrap_err();
            assert!(matches!(err, Error::Schema(_)), "{a:?}->{b:?} {ns} {nd}");
        }
        // Empty runs are fine.
        cast_run(F32, BF16, &[], &mut []).expect("empty");
        cast_run(I64, I64, &[], &mut []).expect("empty");
    }

    #[test]
    fn identity_is_a_copy() {
        let src: Vec<u8> = (0..=255u8).collect();
        for dt in DType::all() {
            let n = src.len() / dt.size() * dt.size();
            assert_eq!(cast_vec(dt, dt, &src[..n]), &src[..n], "{dt:?}");
        }
    }

    #[test]
    fn torch_f32_vectors() {
        let src: Vec<u32> = f32_vectors().iter().map(|v| v.0).collect();
        let src = le32(&src);
        let bf = cast_vec(F32, BF16, &src);
        let hf = cast_vec(F32, F16, &src);
        let df = cast_vec(F32, F64, &src);
        for (i, &(x, want_bf, want_hf, want_df)) in f32_vectors().iter().enumerate() {
            let got_bf = u16::from_le_bytes([bf[2 * i], bf[2 * i + 1]]);
            let got_hf = u16::from_le_bytes([hf[2 * i], hf[2 * i + 1]]);
            let got_df = u64::from_le_bytes(df[8 * i..8 * i + 8].try_into().expect("8"));
            assert_eq!(got_bf, want_bf, "f32 {x:#010x} -> bf16");
            assert_eq!(got_hf, want_hf, "f32 {x:#010x} -> f16");
            assert_eq!(got_df, want_df, "f32 {x:#010x} -> f64");
            // The element kernels agree with the run loop.
            assert_eq!(f32_to_bf16(x), want_bf);
            assert_eq!(f32_to_f16(x), want_hf);
            assert_eq!(f32_to_f64(x), want_df);
        }
    }

    #[test]
    fn torch_f64_vectors() {
        let src: Vec<u64> = f64_vectors().iter().map(|v| v.0).collect();
        let src = le64(&src);
        let f = cast_vec(F64, F32, &src);
        let bf = cast_vec(F64, BF16, &src);
        let hf = cast_vec(F64, F16, &src);
        for (i, &(x, want_f, want_bf, want_hf)) in f64_vectors().iter().enumerate() {
            let got_f = u32::from_le_bytes(f[4 * i..4 * i + 4].try_into().expect("4"));
            let got_bf = u16::from_le_bytes([bf[2 * i], bf[2 * i + 1]]);
            let got_hf = u16::from_le_bytes([hf[2 * i], hf[2 * i + 1]]);
            assert_eq!(got_f, want_f, "f64 {x:#018x} -> f32");
            assert_eq!(got_bf, want_bf, "f64 {x:#018x} -> bf16");
            assert_eq!(got_hf, want_hf, "f64 {x:#018x} -> f16");
        }
    }

    #[test]
    fn named_edge_cases() {
        let bf = |x: f32| f32_to_bf16(x.to_bits());
        let hf = |x: f32| f32_to_f16(x.to_bits());
        assert_eq!(bf(1.0), 0x3F80);
        assert_eq!(bf(-0.0), 0x8000);
        assert_eq!(bf(f32::INFINITY), 0x7F80);
        assert_eq!(bf(f32::MAX), 0x7F80); // rounds up past the largest bfloat16
        assert_eq!(bf(f32::from_bits(0x3F80_8000)), 0x3F80); // tie, to even (down)
        assert_eq!(bf(f32::from_bits(0x3F81_8000)), 0x3F82); // tie, to even (up)
        assert_eq!(bf(f32::from_bits(0x0000_8001)), 0x0001); // subnormal rounds up
        for nan in [0x7FC0_0000u32, 0xFFC0_0000, 0x7F80_0001, 0xFFBF_FFFF] {
            assert_eq!(f32_to_bf16(nan), 0xFFFF, "{nan:#x}");
        }
        assert_eq!(hf(65504.0), 0x7BFF);
        assert_eq!(hf(65520.0), 0x7C00); // the tie above the largest float16 overflows
        assert_eq!(hf(2f32.powi(-24)), 0x0001);
        assert_eq!(hf(2f32.powi(-25)), 0x0000); // tie, to even (zero)
        assert_eq!(hf(3.0 * 2f32.powi(-25)), 0x0002); // tie, to even (2)
        assert_eq!(hf(-2f32.powi(-26)), 0x8000);
        assert_eq!(hf(2f32.powi(-14) - 2f32.powi(-30)), 0x0400); // rounds up to the first normal
        assert_eq!(f32_to_f16(0xFFA0_0000), 0xFF00); // NaN: sign and payload, quieted
                                                     // float64 rounds through float32 on the way to 16 bits, as torch does.
        let d = |x: f64| f64_to_f32(x.to_bits());
        assert_eq!(f32_to_bf16(d(1.0 + 2f64.powi(-8) + 2f64.powi(-30))), 0x3F80);
        assert_eq!(f32_to_f16(d(1.0 + 2f64.powi(-11) + 2f64.powi(-30))), 0x3C00);
        assert_eq!(f64_to_f32(0x7FF0_1234_5678_9ABC), 0x7FC0_91A2);
        assert_eq!(f16_to_f32(0x7C01), 0x7FC0_2000);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24).to_bits());
        assert_eq!(bf16_to_f32(0x7F81), 0x7F81_0000);
    }

    #[test]
    fn exhaustive_16_bit_widenings_match_torch() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let src = le16(&all);
        assert_eq!(sha_hex(&cast_vec(BF16, F32, &src)), sha("SHA_BF16_F32"));
        assert_eq!(sha_hex(&cast_vec(BF16, F64, &src)), sha("SHA_BF16_F64"));
        assert_eq!(sha_hex(&cast_vec(F16, F32, &src)), sha("SHA_F16_F32"));
        assert_eq!(sha_hex(&cast_vec(F16, F64, &src)), sha("SHA_F16_F64"));
    }

    #[test]
    fn sampled_narrowings_match_torch() {
        let s32 = le32(&sample_f32());
        assert_eq!(sha_hex(&cast_vec(F32, BF16, &s32)), sha("SHA_S32_BF16"));
        assert_eq!(sha_hex(&cast_vec(F32, F16, &s32)), sha("SHA_S32_F16"));
        assert_eq!(sha_hex(&cast_vec(F32, F64, &s32)), sha("SHA_S32_F64"));
        let s64 = le64(&sample_f64());
        assert_eq!(sha_hex(&cast_vec(F64, F32, &s64)), sha("SHA_S64_F32"));
        assert_eq!(sha_hex(&cast_vec(F64, BF16, &s64)), sha("SHA_S64_BF16"));
        assert_eq!(sha_hex(&cast_vec(F64, F16, &s64)), sha("SHA_S64_F16"));
    }

    /// Every float32 bit pattern, against torch. Slow in debug builds:
    /// `cargo test --release -- --ignored exhaustive_f32`.
    #[test]
    #[ignore]
    fn exhaustive_f32_narrowings_match_torch() {
        let (mut h_bf, mut h_hf, mut h_df) = (Sha256::new(), Sha256::new(), Sha256::new());
        const CHUNK: u64 = 1 << 24;
        let mut src = vec![0u8; CHUNK as usize * 4];
        let mut bf = vec![0u8; CHUNK as usize * 2];
        let mut hf = vec![0u8; CHUNK as usize * 2];
        let mut df = vec![0u8; CHUNK as usize * 8];
        for c in 0..(1u64 << 32) / CHUNK {
            for (i, d) in src.as_chunks_mut::<4>().0.iter_mut().enumerate() {
                *d = ((c * CHUNK + i as u64) as u32).to_le_bytes();
            }
            cast_run(F32, BF16, &src, &mut bf).expect("cast");
            cast_run(F32, F16, &src, &mut hf).expect("cast");
            cast_run(F32, F64, &src, &mut df).expect("cast");
            h_bf.update(&bf);
            h_hf.update(&hf);
            h_df.update(&df);
        }
        let hex =
            |h: Sha256| -> String { h.finalize().iter().map(|b| format!("{b:02x}")).collect() };
        assert_eq!(hex(h_bf), sha("SHA_X32_BF16"));
        assert_eq!(hex(h_hf), sha("SHA_X32_F16"));
        assert_eq!(hex(h_df), sha("SHA_X32_F64"));
    }

    #[test]
    fn exhaustive_widen_then_narrow_is_identity() {
        for (narrow, wide) in [(BF16, F32), (BF16, F64), (F16, F32), (F16, F64)] {
            let all: Vec<u16> = (0..=u16::MAX).filter(|&h| !is_nan16(narrow, h)).collect();
            let src = le16(&all);
            let back = cast_vec(wide, narrow, &cast_vec(narrow, wide, &src));
            assert_eq!(back, src, "{narrow:?} -> {wide:?} -> {narrow:?}");
        }
    }

    #[test]
    fn unaligned_buffers_and_ragged_lengths() {
        let vals: Vec<u32> = sample_f32().into_iter().take(131).collect();
        let bytes = le32(&vals);
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(&bytes);
        for n in 0..vals.len() {
            let src = &shifted[1..1 + 4 * n];
            let mut dst = vec![0u8; 2 * n + 1];
            cast_run(F32, BF16, src, &mut dst[1..]).expect("cast");
            for (i, &v) in vals[..n].iter().enumerate() {
                assert_eq!(
                    u16::from_le_bytes([dst[1 + 2 * i], dst[2 + 2 * i]]),
                    f32_to_bf16(v)
                );
            }
        }
    }

    fn f32_not_nan() -> impl Strategy<Value = f32> {
        any::<u32>()
            .prop_map(f32::from_bits)
            .prop_filter("not NaN", |x| !x.is_nan())
    }
    fn f64_not_nan() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            // around float32's (and so bfloat16's and float16's) range
            (any::<bool>(), 860u64..1170, 0u64..(1 << 52))
                .prop_map(|(s, e, m)| { f64::from_bits((u64::from(s) << 63) | (e << 52) | m) }),
        ]
        .prop_filter("not NaN", |x| !x.is_nan())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn widenings_invert_narrowings(h in any::<u16>(), x in f32_not_nan()) {
            for (narrow, wide) in [(BF16, F32), (BF16, F64), (F16, F32), (F16, F64)] {
                if is_nan16(narrow, h) {
                    continue;
                }
                let src = h.to_le_bytes();
                prop_assert_eq!(cast_vec(wide, narrow, &cast_vec(narrow, wide, &src)), src.to_vec());
            }
            let src = x.to_bits().to_le_bytes();
            prop_assert_eq!(cast_vec(F64, F32, &cast_vec(F32, F64, &src)), src.to_vec());
            // and the widening is the exact value
            let wide = cast_vec(F32, F64, &src);
            prop_assert_eq!(f64::from_le_bytes(wide.try_into().expect("8")), f64::from(x));
        }

        #[test]
        fn f32_narrowing_is_monotone(a in f32_not_nan(), b in f32_not_nan()) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            for to in [BF16, F16] {
                let n = |x: f32| {
                    let v = cast_vec(F32, to, &x.to_bits().to_le_bytes());
                    widen16(to, u16::from_le_bytes([v[0], v[1]]))
                };
                prop_assert!(n(lo) <= n(hi), "{:?}: {} -> {}, {} -> {}", to, lo, n(lo), hi, n(hi));
            }
        }

        #[test]
        fn f64_narrowing_is_monotone(a in f64_not_nan(), b in f64_not_nan()) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let n32 = |x: f64| {
                let v = cast_vec(F64, F32, &x.to_bits().to_le_bytes());
                f64::from(f32::from_le_bytes(v.try_into().expect("4")))
            };
            prop_assert!(n32(lo) <= n32(hi));
            for to in [BF16, F16] {
                let n = |x: f64| {
                    let v = cast_vec(F64, to, &x.to_bits().to_le_bytes());
                    widen16(to, u16::from_le_bytes([v[0], v[1]]))
                };
                prop_assert!(n(lo) <= n(hi), "{:?}: {} -> {}, {} -> {}", to, lo, n(lo), hi, n(hi));
            }
        }

        #[test]
        fn narrowing_rounds_to_a_nearest_neighbour(x in f32_not_nan()) {
            // The result is one of the two representable neighbours of x (or +-inf past the end).
            for to in [BF16, F16] {
                let v = cast_vec(F32, to, &x.to_bits().to_le_bytes());
                let h = u16::from_le_bytes([v[0], v[1]]);
                let y = widen16(to, h);
                let xd = f64::from(x);
                if y.is_infinite() {
                    let max = if to == BF16 { f64::from(f32::from_bits(0x7F7F_0000)) } else { 65504.0 };
                    prop_assert!(xd.abs() >= max);
                    continue;
                }
                // neighbour on the other side
                let step = if y.abs() < xd.abs() { 1i32 } else { -1 };
                let other = h.wrapping_add_signed(step as i16);
                let z = widen16(to, other);
                if y != xd && !z.is_infinite() && !is_nan16(to, other) {
                    prop_assert!((y - xd).abs() <= (z - xd).abs(), "{:?} {} -> {} vs {}", to, x, y, z);
                }
            }
        }
    }

    /// Golden data computed by torch (`scripts/cast_vectors.py` regenerates and checks it).
    const F32_DATA: &str = include_str!("../../tests/data/cast_f32.txt");
    const F64_DATA: &str = include_str!("../../tests/data/cast_f64.txt");
    const SHA_DATA: &str = include_str!("../../tests/data/cast_sha256.txt");

    /// The rows of a golden data file: hex columns, `#` comments skipped.
    fn rows(data: &str) -> Vec<Vec<u64>> {
        data.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                l.split_whitespace()
                    .map(|x| u64::from_str_radix(x, 16).expect("hex"))
                    .collect()
            })
            .collect()
    }

    /// (f32 bits, bf16 bits, f16 bits, f64 bits)
    fn f32_vectors() -> Vec<(u32, u16, u16, u64)> {
        rows(F32_DATA)
            .iter()
            .map(|r| (r[0] as u32, r[1] as u16, r[2] as u16, r[3]))
            .collect()
    }

    /// (f64 bits, f32 bits, bf16 bits, f16 bits)
    fn f64_vectors() -> Vec<(u64, u32, u16, u16)> {
        rows(F64_DATA)
            .iter()
            .map(|r| (r[0], r[1] as u32, r[2] as u16, r[3] as u16))
            .collect()
    }

    fn sha(name: &str) -> &'static str {
        SHA_DATA
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} is not in cast_sha256.txt"))
    }
}
