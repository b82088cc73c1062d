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

use crate::dtype::DType;
use crate::error::{Error, Result};

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
    use DType::*;
    if from == to {
        return false;
    }
    let exact = match (from, to) {
        (F16 | BF16, F32 | F64) | (F32, F64) => true,
        // e4m3fn: 4 exponent bits, 3 mantissa bits, |x| <= 448, min subnormal 2^-9.
        // e5m2: float16's exponent range with 2 mantissa bits.
        (F8E4M3 | F8E5M2, F16 | BF16 | F32 | F64) => true,
        (C64, C128) => true,
        _ => false,
    };
    !exact
}

/// Convert a contiguous run of little-endian source elements into destination elements.
/// `src.len()` must be n*from.size() and `dst.len()` n*to.size(); otherwise Err(Error::Schema).
pub fn cast_run(from: DType, to: DType, src: &[u8], dst: &mut [u8]) -> Result<()> {
    if !is_supported(from, to) {
        return Err(Error::schema(format!(
            "no cast from {} to {}: the codec casts only between floating types \
             (float32/float64 to a narrower wire dtype and back)",
            from.name(),
            to.name()
        )));
    }
    let (from_size, to_size) = (from.size(), to.size());
    let n = src.len() / from_size;
    if !src.len().is_multiple_of(from_size) || n.checked_mul(to_size) != Some(dst.len()) {
        return Err(Error::schema(format!(
            "cast {} -> {}: a source of {} bytes and a destination of {} bytes do not hold the \
             same whole number of elements ({} and {} bytes each)",
            from.name(),
            to.name(),
            src.len(),
            dst.len(),
            from_size,
            to_size
        )));
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
        _ => {
            return Err(Error::schema(format!(
                "no cast from {} to {}",
                from.name(),
                to.name()
            )))
        }
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
        let src: Vec<u32> = F32_VECTORS.iter().map(|v| v.0).collect();
        let src = le32(&src);
        let bf = cast_vec(F32, BF16, &src);
        let hf = cast_vec(F32, F16, &src);
        let df = cast_vec(F32, F64, &src);
        for (i, &(x, want_bf, want_hf, want_df)) in F32_VECTORS.iter().enumerate() {
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
        let src: Vec<u64> = F64_VECTORS.iter().map(|v| v.0).collect();
        let src = le64(&src);
        let f = cast_vec(F64, F32, &src);
        let bf = cast_vec(F64, BF16, &src);
        let hf = cast_vec(F64, F16, &src);
        for (i, &(x, want_f, want_bf, want_hf)) in F64_VECTORS.iter().enumerate() {
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
        assert_eq!(sha_hex(&cast_vec(BF16, F32, &src)), SHA_BF16_F32);
        assert_eq!(sha_hex(&cast_vec(BF16, F64, &src)), SHA_BF16_F64);
        assert_eq!(sha_hex(&cast_vec(F16, F32, &src)), SHA_F16_F32);
        assert_eq!(sha_hex(&cast_vec(F16, F64, &src)), SHA_F16_F64);
    }

    #[test]
    fn sampled_narrowings_match_torch() {
        let s32 = le32(&sample_f32());
        assert_eq!(sha_hex(&cast_vec(F32, BF16, &s32)), SHA_S32_BF16);
        assert_eq!(sha_hex(&cast_vec(F32, F16, &s32)), SHA_S32_F16);
        assert_eq!(sha_hex(&cast_vec(F32, F64, &s32)), SHA_S32_F64);
        let s64 = le64(&sample_f64());
        assert_eq!(sha_hex(&cast_vec(F64, F32, &s64)), SHA_S64_F32);
        assert_eq!(sha_hex(&cast_vec(F64, BF16, &s64)), SHA_S64_BF16);
        assert_eq!(sha_hex(&cast_vec(F64, F16, &s64)), SHA_S64_F16);
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
        assert_eq!(hex(h_bf), SHA_X32_BF16);
        assert_eq!(hex(h_hf), SHA_X32_F16);
        assert_eq!(hex(h_df), SHA_X32_F64);
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

    // Generated from torch 2.15.0+cu132 (CPU capability AVX512) with `tensor.to(dtype)` on contiguous tensors.
    /// (f32 bits, bf16 bits, f16 bits, f64 bits)
    const F32_VECTORS: [(u32, u16, u16, u64); 300] = [
        (0x00000000, 0x0000, 0x0000, 0x0000000000000000),
        (0x00000001, 0x0000, 0x0000, 0x36a0000000000000),
        (0x00000002, 0x0000, 0x0000, 0x36b0000000000000),
        (0x00000003, 0x0000, 0x0000, 0x36b8000000000000),
        (0x00007fff, 0x0000, 0x0000, 0x378fffc000000000),
        (0x00008000, 0x0000, 0x0000, 0x3790000000000000),
        (0x00008001, 0x0001, 0x0000, 0x3790002000000000),
        (0x0000ffff, 0x0001, 0x0000, 0x379fffe000000000),
        (0x00012345, 0x0001, 0x0000, 0x37a2345000000000),
        (0x00017fff, 0x0001, 0x0000, 0x37a7fff000000000),
        (0x00018000, 0x0002, 0x0000, 0x37a8000000000000),
        (0x00018001, 0x0002, 0x0000, 0x37a8001000000000),
        (0x00400000, 0x0040, 0x0000, 0x3800000000000000),
        (0x007fffff, 0x0080, 0x0000, 0x380fffffc0000000),
        (0x00800000, 0x0080, 0x0000, 0x3810000000000000),
        (0x017ad051, 0x017b, 0x0000, 0x382f5a0a20000000),
        (0x01eaf614, 0x01eb, 0x0000, 0x383d5ec280000000),
        (0x03be0e66, 0x03be, 0x0000, 0x3877c1ccc0000000),
        (0x040e1e30, 0x040e, 0x0000, 0x3881c3c600000000),
        (0x04762a22, 0x0476, 0x0000, 0x388ec54440000000),
        (0x04f0d0f2, 0x04f1, 0x0000, 0x389e1a1e40000000),
        (0x06f1e771, 0x06f2, 0x0000, 0x38de3cee20000000),
        (0x07e36d60, 0x07e3, 0x0000, 0x38fc6dac00000000),
        (0x08f0ebd4, 0x08f1, 0x0000, 0x391e1d7a80000000),
        (0x0a228ba8, 0x0a23, 0x0000, 0x3944517500000000),
        (0x0a4adb41, 0x0a4b, 0x0000, 0x39495b6820000000),
        (0x0a831788, 0x0a83, 0x0000, 0x395062f100000000),
        (0x0bc4621b, 0x0bc4, 0x0000, 0x39788c4360000000),
        (0x0dde6d08, 0x0dde, 0x0000, 0x39bbcda100000000),
        (0x1025dbe5, 0x1026, 0x0000, 0x3a04bb7ca0000000),
        (0x10872756, 0x1087, 0x0000, 0x3a10e4eac0000000),
        (0x118dc10e, 0x118e, 0x0000, 0x3a31b821c0000000),
        (0x121213ca, 0x1212, 0x0000, 0x3a42427940000000),
        (0x13484861, 0x1348, 0x0000, 0x3a69090c20000000),
        (0x138411eb, 0x1384, 0x0000, 0x3a70823d60000000),
        (0x157cf9c6, 0x157d, 0x0000, 0x3aaf9f38c0000000),
        (0x16c40a33, 0x16c4, 0x0000, 0x3ad8814660000000),
        (0x17346b45, 0x1734, 0x0000, 0x3ae68d68a0000000),
        (0x175e9941, 0x175f, 0x0000, 0x3aebd32820000000),
        (0x19322fed, 0x1932, 0x0000, 0x3b2645fda0000000),
        (0x1c63373a, 0x1c63, 0x0000, 0x3b8c66e740000000),
        (0x1d4a2b12, 0x1d4a, 0x0000, 0x3ba9456240000000),
        (0x1de9ea66, 0x1dea, 0x0000, 0x3bbd3d4cc0000000),
        (0x242780aa, 0x2428, 0x0000, 0x3c84f01540000000),
        (0x24ce01e1, 0x24ce, 0x0000, 0x3c99c03c20000000),
        (0x24ed49b1, 0x24ed, 0x0000, 0x3c9da93620000000),
        (0x2607ad5f, 0x2608, 0x0000, 0x3cc0f5abe0000000),
        (0x2790ae2c, 0x2791, 0x0000, 0x3cf215c580000000),
        (0x2791eef8, 0x2792, 0x0000, 0x3cf23ddf00000000),
        (0x29fc1d9d, 0x29fc, 0x0000, 0x3d3f83b3a0000000),
        (0x2ac7e1da, 0x2ac8, 0x0000, 0x3d58fc3b40000000),
        (0x2d665a7b, 0x2d66, 0x0000, 0x3daccb4f60000000),
        (0x2edf0743, 0x2edf, 0x0000, 0x3ddbe0e860000000),
        (0x32ffffff, 0x3300, 0x0000, 0x3e5fffffe0000000),
        (0x33000000, 0x3300, 0x0000, 0x3e60000000000000),
        (0x33000001, 0x3300, 0x0001, 0x3e60000020000000),
        (0x33354fc7, 0x3335, 0x0001, 0x3e66a9f8e0000000),
        (0x33400000, 0x3340, 0x0001, 0x3e68000000000000),
        (0x33800000, 0x3380, 0x0001, 0x3e70000000000000),
        (0x33a00000, 0x33a0, 0x0001, 0x3e74000000000000),
        (0x33c00000, 0x33c0, 0x0002, 0x3e78000000000000),
        (0x34000000, 0x3400, 0x0002, 0x3e80000000000000),
        (0x34200000, 0x3420, 0x0002, 0x3e84000000000000),
        (0x34400000, 0x3440, 0x0003, 0x3e88000000000000),
        (0x34600000, 0x3460, 0x0004, 0x3e8c000000000000),
        (0x37106d20, 0x3710, 0x0090, 0x3ee20da400000000),
        (0x37800000, 0x3780, 0x0100, 0x3ef0000000000000),
        (0x38000000, 0x3800, 0x0200, 0x3f00000000000000),
        (0x387fe000, 0x3880, 0x0400, 0x3f0ffc0000000000),
        (0x387fefff, 0x3880, 0x0400, 0x3f0ffdffe0000000),
        (0x387ff000, 0x3880, 0x0400, 0x3f0ffe0000000000),
        (0x387ff001, 0x3880, 0x0400, 0x3f0ffe0020000000),
        (0x387fffff, 0x3880, 0x0400, 0x3f0fffffe0000000),
        (0x38800000, 0x3880, 0x0400, 0x3f10000000000000),
        (0x38801000, 0x3880, 0x0400, 0x3f10020000000000),
        (0x38802000, 0x3880, 0x0401, 0x3f10040000000000),
        (0x38803000, 0x3880, 0x0402, 0x3f10060000000000),
        (0x38c00000, 0x38c0, 0x0600, 0x3f18000000000000),
        (0x3a800000, 0x3a80, 0x1400, 0x3f50000000000000),
        (0x3a801000, 0x3a80, 0x1400, 0x3f50020000000000),
        (0x3a802000, 0x3a80, 0x1401, 0x3f50040000000000),
        (0x3a803000, 0x3a80, 0x1402, 0x3f50060000000000),
        (0x3c9f90c9, 0x3ca0, 0x24fd, 0x3f93f21920000000),
        (0x3dcccccd, 0x3dcd, 0x2e66, 0x3fb99999a0000000),
        (0x3eaaaaab, 0x3eab, 0x3555, 0x3fd5555560000000),
        (0x3f800000, 0x3f80, 0x3c00, 0x3ff0000000000000),
        (0x3f800fff, 0x3f80, 0x3c00, 0x3ff001ffe0000000),
        (0x3f801000, 0x3f80, 0x3c00, 0x3ff0020000000000),
        (0x3f801001, 0x3f80, 0x3c01, 0x3ff0020020000000),
        (0x3f802fff, 0x3f80, 0x3c01, 0x3ff005ffe0000000),
        (0x3f803000, 0x3f80, 0x3c02, 0x3ff0060000000000),
        (0x3f807fff, 0x3f80, 0x3c04, 0x3ff00fffe0000000),
        (0x3f808000, 0x3f80, 0x3c04, 0x3ff0100000000000),
        (0x3f808001, 0x3f81, 0x3c04, 0x3ff0100020000000),
        (0x3f817fff, 0x3f81, 0x3c0c, 0x3ff02fffe0000000),
        (0x3f818000, 0x3f82, 0x3c0c, 0x3ff0300000000000),
        (0x3fc86ee6, 0x3fc8, 0x3e43, 0x3ff90ddcc0000000),
        (0x3ff4bb8c, 0x3ff5, 0x3fa6, 0x3ffe977180000000),
        (0x40490fdb, 0x4049, 0x4248, 0x400921fb60000000),
        (0x44365862, 0x4436, 0x61b3, 0x4086cb0c40000000),
        (0x45038e22, 0x4504, 0x681c, 0x40a071c440000000),
        (0x458c3cdb, 0x458c, 0x6c62, 0x40b1879b60000000),
        (0x46db4bc4, 0x46db, 0x76da, 0x40db697880000000),
        (0x477fd000, 0x4780, 0x7bfe, 0x40effa0000000000),
        (0x477fe000, 0x4780, 0x7bff, 0x40effc0000000000),
        (0x477fefff, 0x4780, 0x7bff, 0x40effdffe0000000),
        (0x477ff000, 0x4780, 0x7c00, 0x40effe0000000000),
        (0x477ff001, 0x4780, 0x7c00, 0x40effe0020000000),
        (0x477fffff, 0x4780, 0x7c00, 0x40efffffe0000000),
        (0x47800000, 0x4780, 0x7c00, 0x40f0000000000000),
        (0x4b7fffff, 0x4b80, 0x7c00, 0x416fffffe0000000),
        (0x4b800000, 0x4b80, 0x7c00, 0x4170000000000000),
        (0x4cdead2e, 0x4cdf, 0x7c00, 0x419bd5a5c0000000),
        (0x4d6bfd8f, 0x4d6c, 0x7c00, 0x41ad7fb1e0000000),
        (0x4e2e3761, 0x4e2e, 0x7c00, 0x41c5c6ec20000000),
        (0x5560eaba, 0x5561, 0x7c00, 0x42ac1d5740000000),
        (0x577a296e, 0x577a, 0x7c00, 0x42ef452dc0000000),
        (0x58994953, 0x5899, 0x7c00, 0x4313292a60000000),
        (0x58a295d4, 0x58a3, 0x7c00, 0x431452ba80000000),
        (0x597ee18b, 0x597f, 0x7c00, 0x432fdc3160000000),
        (0x5ac96628, 0x5ac9, 0x7c00, 0x43592cc500000000),
        (0x5af0f3e0, 0x5af1, 0x7c00, 0x435e1e7c00000000),
        (0x5f000000, 0x5f00, 0x7c00, 0x43e0000000000000),
        (0x6099d795, 0x609a, 0x7c00, 0x44133af2a0000000),
        (0x62dcec66, 0x62dd, 0x7c00, 0x445b9d8cc0000000),
        (0x6a8f6926, 0x6a8f, 0x7c00, 0x4551ed24c0000000),
        (0x70d3da1f, 0x70d4, 0x7c00, 0x461a7b43e0000000),
        (0x74113cb0, 0x7411, 0x7c00, 0x4682279600000000),
        (0x7442a124, 0x7443, 0x7c00, 0x4688542480000000),
        (0x76ab1475, 0x76ab, 0x7c00, 0x46d5628ea0000000),
        (0x76e99afd, 0x76ea, 0x7c00, 0x46dd335fa0000000),
        (0x774520d7, 0x7745, 0x7c00, 0x46e8a41ae0000000),
        (0x790b2f7c, 0x790b, 0x7c00, 0x472165ef80000000),
        (0x7b25331f, 0x7b25, 0x7c00, 0x4764a663e0000000),
        (0x7bf78a4d, 0x7bf8, 0x7c00, 0x477ef149a0000000),
        (0x7c9bbfae, 0x7c9c, 0x7c00, 0x479377f5c0000000),
        (0x7ef077e0, 0x7ef0, 0x7c00, 0x47de0efc00000000),
        (0x7f1ff9fe, 0x7f20, 0x7c00, 0x47e3ff3fc0000000),
        (0x7f7effff, 0x7f7f, 0x7c00, 0x47efdfffe0000000),
        (0x7f7f0000, 0x7f7f, 0x7c00, 0x47efe00000000000),
        (0x7f7f7fff, 0x7f7f, 0x7c00, 0x47efefffe0000000),
        (0x7f7f8000, 0x7f80, 0x7c00, 0x47eff00000000000),
        (0x7f7fffff, 0x7f80, 0x7c00, 0x47efffffe0000000),
        (0x7f800000, 0x7f80, 0x7c00, 0x7ff0000000000000),
        (0x7f800001, 0xffff, 0x7e00, 0x7ff8000020000000),
        (0x7f801fff, 0xffff, 0x7e00, 0x7ff803ffe0000000),
        (0x7f802000, 0xffff, 0x7e01, 0x7ff8040000000000),
        (0x7f808000, 0xffff, 0x7e04, 0x7ff8100000000000),
        (0x7f80ffff, 0xffff, 0x7e07, 0x7ff81fffe0000000),
        (0x7f812345, 0xffff, 0x7e09, 0x7ff82468a0000000),
        (0x7fa00000, 0xffff, 0x7f00, 0x7ffc000000000000),
        (0x7fbfffff, 0xffff, 0x7fff, 0x7fffffffe0000000),
        (0x7fc00000, 0xffff, 0x7e00, 0x7ff8000000000000),
        (0x7fc0ffff, 0xffff, 0x7e07, 0x7ff81fffe0000000),
        (0x7fc12345, 0xffff, 0x7e09, 0x7ff82468a0000000),
        (0x7fff0000, 0xffff, 0x7ff8, 0x7fffe00000000000),
        (0x7fffe000, 0xffff, 0x7fff, 0x7ffffc0000000000),
        (0x7fffffff, 0xffff, 0x7fff, 0x7fffffffe0000000),
        (0x80000000, 0x8000, 0x8000, 0x8000000000000000),
        (0x80000001, 0x8000, 0x8000, 0xb6a0000000000000),
        (0x80000002, 0x8000, 0x8000, 0xb6b0000000000000),
        (0x80000003, 0x8000, 0x8000, 0xb6b8000000000000),
        (0x80007fff, 0x8000, 0x8000, 0xb78fffc000000000),
        (0x80008000, 0x8000, 0x8000, 0xb790000000000000),
        (0x80008001, 0x8001, 0x8000, 0xb790002000000000),
        (0x8000ffff, 0x8001, 0x8000, 0xb79fffe000000000),
        (0x80012345, 0x8001, 0x8000, 0xb7a2345000000000),
        (0x80017fff, 0x8001, 0x8000, 0xb7a7fff000000000),
        (0x80018000, 0x8002, 0x8000, 0xb7a8000000000000),
        (0x80018001, 0x8002, 0x8000, 0xb7a8001000000000),
        (0x80400000, 0x8040, 0x8000, 0xb800000000000000),
        (0x807fffff, 0x8080, 0x8000, 0xb80fffffc0000000),
        (0x80800000, 0x8080, 0x8000, 0xb810000000000000),
        (0x80ca17b7, 0x80ca, 0x8000, 0xb81942f6e0000000),
        (0x8212f7c6, 0x8213, 0x8000, 0xb8425ef8c0000000),
        (0x83d9fca7, 0x83da, 0x8000, 0xb87b3f94e0000000),
        (0x879951ff, 0x8799, 0x8000, 0xb8f32a3fe0000000),
        (0x87b8a518, 0x87b9, 0x8000, 0xb8f714a300000000),
        (0x8a84c15c, 0x8a85, 0x8000, 0xb950982b80000000),
        (0x8e725d57, 0x8e72, 0x8000, 0xb9ce4baae0000000),
        (0x8ead31c8, 0x8ead, 0x8000, 0xb9d5a63900000000),
        (0x9027b9ad, 0x9028, 0x8000, 0xba04f735a0000000),
        (0x94398520, 0x943a, 0x8000, 0xba8730a400000000),
        (0x950cddd9, 0x950d, 0x8000, 0xbaa19bbb20000000),
        (0x95365d68, 0x9536, 0x8000, 0xbaa6cbad00000000),
        (0x966844aa, 0x9668, 0x8000, 0xbacd089540000000),
        (0x99f9823c, 0x99fa, 0x8000, 0xbb3f304780000000),
        (0x9da618fd, 0x9da6, 0x8000, 0xbbb4c31fa0000000),
        (0x9f8f5ffb, 0x9f8f, 0x8000, 0xbbf1ebff60000000),
        (0xa506bfc5, 0xa507, 0x8000, 0xbca0d7f8a0000000),
        (0xa5f80a0a, 0xa5f8, 0x8000, 0xbcbf014140000000),
        (0xa7cda6c2, 0xa7ce, 0x8000, 0xbcf9b4d840000000),
        (0xa8486261, 0xa848, 0x8000, 0xbd090c4c20000000),
        (0xa99226f4, 0xa992, 0x8000, 0xbd3244de80000000),
        (0xaa586951, 0xaa58, 0x8000, 0xbd4b0d2a20000000),
        (0xaad14268, 0xaad1, 0x8000, 0xbd5a284d00000000),
        (0xaba601ca, 0xaba6, 0x8000, 0xbd74c03940000000),
        (0xabeb9592, 0xabec, 0x8000, 0xbd7d72b240000000),
        (0xacd51e66, 0xacd5, 0x8000, 0xbd9aa3ccc0000000),
        (0xb16e2d5c, 0xb16e, 0x8000, 0xbe2dc5ab80000000),
        (0xb2ffffff, 0xb300, 0x8000, 0xbe5fffffe0000000),
        (0xb3000000, 0xb300, 0x8000, 0xbe60000000000000),
        (0xb3000001, 0xb300, 0x8001, 0xbe60000020000000),
        (0xb3400000, 0xb340, 0x8001, 0xbe68000000000000),
        (0xb3800000, 0xb380, 0x8001, 0xbe70000000000000),
        (0xb3a00000, 0xb3a0, 0x8001, 0xbe74000000000000),
        (0xb3c00000, 0xb3c0, 0x8002, 0xbe78000000000000),
        (0xb4000000, 0xb400, 0x8002, 0xbe80000000000000),
        (0xb4200000, 0xb420, 0x8002, 0xbe84000000000000),
        (0xb4400000, 0xb440, 0x8003, 0xbe88000000000000),
        (0xb4600000, 0xb460, 0x8004, 0xbe8c000000000000),
        (0xb5c36ec1, 0xb5c3, 0x8018, 0xbeb86dd820000000),
        (0xb6a20bb0, 0xb6a2, 0x8051, 0xbed4417600000000),
        (0xb7800000, 0xb780, 0x8100, 0xbef0000000000000),
        (0xb8000000, 0xb800, 0x8200, 0xbf00000000000000),
        (0xb87fe000, 0xb880, 0x8400, 0xbf0ffc0000000000),
        (0xb87fefff, 0xb880, 0x8400, 0xbf0ffdffe0000000),
        (0xb87ff000, 0xb880, 0x8400, 0xbf0ffe0000000000),
        (0xb87ff001, 0xb880, 0x8400, 0xbf0ffe0020000000),
        (0xb87fffff, 0xb880, 0x8400, 0xbf0fffffe0000000),
        (0xb8800000, 0xb880, 0x8400, 0xbf10000000000000),
        (0xb8801000, 0xb880, 0x8400, 0xbf10020000000000),
        (0xb8802000, 0xb880, 0x8401, 0xbf10040000000000),
        (0xb8803000, 0xb880, 0x8402, 0xbf10060000000000),
        (0xb8c00000, 0xb8c0, 0x8600, 0xbf18000000000000),
        (0xba800000, 0xba80, 0x9400, 0xbf50000000000000),
        (0xba801000, 0xba80, 0x9400, 0xbf50020000000000),
        (0xba802000, 0xba80, 0x9401, 0xbf50040000000000),
        (0xba803000, 0xba80, 0x9402, 0xbf50060000000000),
        (0xbdcccccd, 0xbdcd, 0xae66, 0xbfb99999a0000000),
        (0xbeaaaaab, 0xbeab, 0xb555, 0xbfd5555560000000),
        (0xbf800000, 0xbf80, 0xbc00, 0xbff0000000000000),
        (0xbf800fff, 0xbf80, 0xbc00, 0xbff001ffe0000000),
        (0xbf801000, 0xbf80, 0xbc00, 0xbff0020000000000),
        (0xbf801001, 0xbf80, 0xbc01, 0xbff0020020000000),
        (0xbf802fff, 0xbf80, 0xbc01, 0xbff005ffe0000000),
        (0xbf803000, 0xbf80, 0xbc02, 0xbff0060000000000),
        (0xbf807fff, 0xbf80, 0xbc04, 0xbff00fffe0000000),
        (0xbf808000, 0xbf80, 0xbc04, 0xbff0100000000000),
        (0xbf808001, 0xbf81, 0xbc04, 0xbff0100020000000),
        (0xbf817fff, 0xbf81, 0xbc0c, 0xbff02fffe0000000),
        (0xbf818000, 0xbf82, 0xbc0c, 0xbff0300000000000),
        (0xc0490fdb, 0xc049, 0xc248, 0xc00921fb60000000),
        (0xc3a671c4, 0xc3a6, 0xdd34, 0xc074ce3880000000),
        (0xc4381836, 0xc438, 0xe1c1, 0xc0870306c0000000),
        (0xc55ef186, 0xc55f, 0xeaf8, 0xc0abde30c0000000),
        (0xc735df5e, 0xc736, 0xf9af, 0xc0e6bbebc0000000),
        (0xc777b54b, 0xc778, 0xfbbe, 0xc0eef6a960000000),
        (0xc77fd000, 0xc780, 0xfbfe, 0xc0effa0000000000),
        (0xc77fe000, 0xc780, 0xfbff, 0xc0effc0000000000),
        (0xc77fefff, 0xc780, 0xfbff, 0xc0effdffe0000000),
        (0xc77ff000, 0xc780, 0xfc00, 0xc0effe0000000000),
        (0xc77ff001, 0xc780, 0xfc00, 0xc0effe0020000000),
        (0xc77fffff, 0xc780, 0xfc00, 0xc0efffffe0000000),
        (0xc7800000, 0xc780, 0xfc00, 0xc0f0000000000000),
        (0xc9ed0248, 0xc9ed, 0xfc00, 0xc13da04900000000),
        (0xcb7fffff, 0xcb80, 0xfc00, 0xc16fffffe0000000),
        (0xcb800000, 0xcb80, 0xfc00, 0xc170000000000000),
        (0xce779a93, 0xce78, 0xfc00, 0xc1cef35260000000),
        (0xce97b5bd, 0xce98, 0xfc00, 0xc1d2f6b7a0000000),
        (0xd30aad4b, 0xd30b, 0xfc00, 0xc26155a960000000),
        (0xd579c4c9, 0xd57a, 0xfc00, 0xc2af389920000000),
        (0xd868c2cf, 0xd869, 0xfc00, 0xc30d1859e0000000),
        (0xd8fba355, 0xd8fc, 0xfc00, 0xc31f746aa0000000),
        (0xd9a54a0d, 0xd9a5, 0xfc00, 0xc334a941a0000000),
        (0xdf000000, 0xdf00, 0xfc00, 0xc3e0000000000000),
        (0xe065e3eb, 0xe066, 0xfc00, 0xc40cbc7d60000000),
        (0xe1668271, 0xe167, 0xfc00, 0xc42cd04e20000000),
        (0xe935b870, 0xe936, 0xfc00, 0xc526b70e00000000),
        (0xe98d7c35, 0xe98d, 0xfc00, 0xc531af86a0000000),
        (0xeefadf23, 0xeefb, 0xfc00, 0xc5df5be460000000),
        (0xeff35b61, 0xeff3, 0xfc00, 0xc5fe6b6c20000000),
        (0xf073eed1, 0xf074, 0xfc00, 0xc60e7dda20000000),
        (0xf1048aa6, 0xf105, 0xfc00, 0xc6209154c0000000),
        (0xf149f542, 0xf14a, 0xfc00, 0xc6293ea840000000),
        (0xf4687101, 0xf468, 0xfc00, 0xc68d0e2020000000),
        (0xf4f991a8, 0xf4fa, 0xfc00, 0xc69f323500000000),
        (0xf703c9ff, 0xf704, 0xfc00, 0xc6e0793fe0000000),
        (0xf7697fb9, 0xf769, 0xfc00, 0xc6ed2ff720000000),
        (0xfc9799a7, 0xfc98, 0xfc00, 0xc792f334e0000000),
        (0xff7effff, 0xff7f, 0xfc00, 0xc7efdfffe0000000),
        (0xff7f0000, 0xff7f, 0xfc00, 0xc7efe00000000000),
        (0xff7f7fff, 0xff7f, 0xfc00, 0xc7efefffe0000000),
        (0xff7f8000, 0xff80, 0xfc00, 0xc7eff00000000000),
        (0xff7fffff, 0xff80, 0xfc00, 0xc7efffffe0000000),
        (0xff800000, 0xff80, 0xfc00, 0xfff0000000000000),
        (0xff800001, 0xffff, 0xfe00, 0xfff8000020000000),
        (0xff801fff, 0xffff, 0xfe00, 0xfff803ffe0000000),
        (0xff802000, 0xffff, 0xfe01, 0xfff8040000000000),
        (0xff808000, 0xffff, 0xfe04, 0xfff8100000000000),
        (0xff80ffff, 0xffff, 0xfe07, 0xfff81fffe0000000),
        (0xff812345, 0xffff, 0xfe09, 0xfff82468a0000000),
        (0xffa00000, 0xffff, 0xff00, 0xfffc000000000000),
        (0xffbfffff, 0xffff, 0xffff, 0xffffffffe0000000),
        (0xffc00000, 0xffff, 0xfe00, 0xfff8000000000000),
        (0xffc0ffff, 0xffff, 0xfe07, 0xfff81fffe0000000),
        (0xffc12345, 0xffff, 0xfe09, 0xfff82468a0000000),
        (0xffff0000, 0xffff, 0xfff8, 0xffffe00000000000),
        (0xffffe000, 0xffff, 0xffff, 0xfffffc0000000000),
        (0xffffffff, 0xffff, 0xffff, 0xffffffffe0000000),
    ];

    /// (f64 bits, f32 bits, bf16 bits, f16 bits)
    const F64_VECTORS: [(u64, u32, u16, u16); 400] = [
        (0x0000000000000000, 0x00000000, 0x0000, 0x0000),
        (0x0000000000000001, 0x00000000, 0x0000, 0x0000),
        (0x0000000000000002, 0x00000000, 0x0000, 0x0000),
        (0x000fffffffffffff, 0x00000000, 0x0000, 0x0000),
        (0x0010000000000000, 0x00000000, 0x0000, 0x0000),
        (0x00a074ef4ed3a8d1, 0x00000000, 0x0000, 0x0000),
        (0x01a56e1fc2f8f359, 0x00000000, 0x0000, 0x0000),
        (0x06e3acb31a8ccaf8, 0x00000000, 0x0000, 0x0000),
        (0x073e4d07a8eb7bd6, 0x00000000, 0x0000, 0x0000),
        (0x0a37a0db378f8529, 0x00000000, 0x0000, 0x0000),
        (0x0b9ab36679d6dedb, 0x00000000, 0x0000, 0x0000),
        (0x0c4e7af82184d0ea, 0x00000000, 0x0000, 0x0000),
        (0x0f7087574d4142f8, 0x00000000, 0x0000, 0x0000),
        (0x0f923425acb8f4af, 0x00000000, 0x0000, 0x0000),
        (0x128e58f7476ed0d1, 0x00000000, 0x0000, 0x0000),
        (0x14180ee8121e3cc4, 0x00000000, 0x0000, 0x0000),
        (0x166e4be7a3665363, 0x00000000, 0x0000, 0x0000),
        (0x19ee50c433af81d9, 0x00000000, 0x0000, 0x0000),
        (0x1a644d9287a0eabf, 0x00000000, 0x0000, 0x0000),
        (0x1bb039fa5868c99b, 0x00000000, 0x0000, 0x0000),
        (0x2383bc6655712a55, 0x00000000, 0x0000, 0x0000),
        (0x251a0926ece37d77, 0x00000000, 0x0000, 0x0000),
        (0x26c340cdd8cf04ae, 0x00000000, 0x0000, 0x0000),
        (0x272ef8a588ca8e3c, 0x00000000, 0x0000, 0x0000),
        (0x283da2c37a5bb776, 0x00000000, 0x0000, 0x0000),
        (0x2a42ab569fdf9fe2, 0x00000000, 0x0000, 0x0000),
        (0x2b42611a34c0df18, 0x00000000, 0x0000, 0x0000),
        (0x2b833e28e1ae6a00, 0x00000000, 0x0000, 0x0000),
        (0x2bc835ab5345e427, 0x00000000, 0x0000, 0x0000),
        (0x2f821d3c7ac6450d, 0x00000000, 0x0000, 0x0000),
        (0x31007342a41b657a, 0x00000000, 0x0000, 0x0000),
        (0x31d17176658aa25d, 0x00000000, 0x0000, 0x0000),
        (0x3408d67f95a290e3, 0x00000000, 0x0000, 0x0000),
        (0x343969949a2a05dc, 0x00000000, 0x0000, 0x0000),
        (0x3480251adbd2db62, 0x00000000, 0x0000, 0x0000),
        (0x35f0000000000000, 0x00000000, 0x0000, 0x0000),
        (0x3632100010000000, 0x00000000, 0x0000, 0x0000),
        (0x3680000000000000, 0x00000000, 0x0000, 0x0000),
        (0x3690000000000000, 0x00000000, 0x0000, 0x0000),
        (0x3690000000000004, 0x00000001, 0x0000, 0x0000),
        (0x3698000000000000, 0x00000001, 0x0000, 0x0000),
        (0x36a0000000000000, 0x00000001, 0x0000, 0x0000),
        (0x36d288d4652ea613, 0x00000009, 0x0000, 0x0000),
        (0x377db00000000001, 0x00003b60, 0x0000, 0x0000),
        (0x3800000000000000, 0x00400000, 0x0040, 0x0000),
        (0x3810000000000000, 0x00800000, 0x0080, 0x0000),
        (0x382a0c2d09ba039a, 0x01506168, 0x0150, 0x0000),
        (0x3938cffff0000000, 0x09c68000, 0x09c6, 0x0000),
        (0x39b60fffffffffff, 0x0db08000, 0x0db0, 0x0000),
        (0x3b84edf770c837ea, 0x1c276fbc, 0x1c27, 0x0000),
        (0x3bc906001fffffff, 0x1e483001, 0x1e48, 0x0000),
        (0x3bdb300010000001, 0x1ed98001, 0x1eda, 0x0000),
        (0x3bf392f970000001, 0x1f9c97cc, 0x1f9d, 0x0000),
        (0x3bf8d00010000000, 0x1fc68000, 0x1fc6, 0x0000),
        (0x3c2c860000000001, 0x21643000, 0x2164, 0x0000),
        (0x3c3fcffff0000001, 0x21fe8000, 0x21fe, 0x0000),
        (0x3c7ff71f8021ef32, 0x23ffb8fc, 0x2400, 0x0000),
        (0x3de286000fffffff, 0x2f143000, 0x2f14, 0x0000),
        (0x3e22faf52fffffff, 0x3117d7a9, 0x3118, 0x0000),
        (0x3e29860000000000, 0x314c3000, 0x314c, 0x0000),
        (0x3e2db00000000001, 0x316d8000, 0x316e, 0x0000),
        (0x3e304ffff0000001, 0x31828000, 0x3182, 0x0000),
        (0x3e50000000000000, 0x32800000, 0x3280, 0x0000),
        (0x3e5de50f0fffffff, 0x32ef2878, 0x32ef, 0x0000),
        (0x3e60000000000000, 0x33000000, 0x3300, 0x0000),
        (0x3e60000000020000, 0x33000000, 0x3300, 0x0000),
        (0x3e640d27f0000000, 0x33206940, 0x3320, 0x0001),
        (0x3e68000000000000, 0x33400000, 0x3340, 0x0001),
        (0x3e70000000000000, 0x33800000, 0x3380, 0x0001),
        (0x3e72cffff0000001, 0x33968000, 0x3396, 0x0001),
        (0x3e78000000000000, 0x33c00000, 0x33c0, 0x0002),
        (0x3ea1860010000001, 0x350c3001, 0x350c, 0x0009),
        (0x3eaa0fffffffffff, 0x35508000, 0x3550, 0x000d),
        (0x3eaab0001fffffff, 0x35558001, 0x3556, 0x000d),
        (0x3eb306000fffffff, 0x35983000, 0x3598, 0x0013),
        (0x3ed0300000000000, 0x36818000, 0x3682, 0x0041),
        (0x3ed4013150000001, 0x36a0098b, 0x36a0, 0x0050),
        (0x3ee6460000000001, 0x37323000, 0x3732, 0x00b2),
        (0x3eedf00010000001, 0x376f8001, 0x3770, 0x00f0),
        (0x3f10000000000000, 0x38800000, 0x3880, 0x0400),
        (0x3f694ffff0000000, 0x3b4a8000, 0x3b4a, 0x1a54),
        (0x3f7202001fffffff, 0x3b901001, 0x3b90, 0x1c81),
        (0x3f9a06001fffffff, 0x3cd03001, 0x3cd0, 0x2682),
        (0x3fb999999999999a, 0x3dcccccd, 0x3dcd, 0x2e66),
        (0x3fbfb50a7fffffff, 0x3dfda854, 0x3dfe, 0x2fed),
        (0x3fd5555555555555, 0x3eaaaaab, 0x3eab, 0x3555),
        (0x3fe5555555555555, 0x3f2aaaab, 0x3f2b, 0x3955),
        (0x3fe8f0001fffffff, 0x3f478001, 0x3f48, 0x3a3c),
        (0x3ff0000000000000, 0x3f800000, 0x3f80, 0x3c00),
        (0x3ff0000010000000, 0x3f800000, 0x3f80, 0x3c00),
        (0x3ff0000010000001, 0x3f800001, 0x3f80, 0x3c00),
        (0x3ff0000020000000, 0x3f800001, 0x3f80, 0x3c00),
        (0x3ff0000030000000, 0x3f800002, 0x3f80, 0x3c00),
        (0x3ff0020000000000, 0x3f801000, 0x3f80, 0x3c00),
        (0x3ff0020000000001, 0x3f801000, 0x3f80, 0x3c00),
        (0x3ff0020000400000, 0x3f801000, 0x3f80, 0x3c00),
        (0x3ff005ffffc00000, 0x3f803000, 0x3f80, 0x3c02),
        (0x3ff0060000000000, 0x3f803000, 0x3f80, 0x3c02),
        (0x3ff00ffffffff000, 0x3f808000, 0x3f80, 0x3c04),
        (0x3ff0100000000000, 0x3f808000, 0x3f80, 0x3c04),
        (0x3ff0100000000001, 0x3f808000, 0x3f80, 0x3c04),
        (0x3ff0100000400000, 0x3f808000, 0x3f80, 0x3c04),
        (0x4008cffff0000000, 0x40468000, 0x4046, 0x4234),
        (0x400921fb54442d18, 0x40490fdb, 0x4049, 0x4248),
        (0x402d8fffffffffff, 0x416c8000, 0x416c, 0x4b64),
        (0x407ecffff0000001, 0x43f68000, 0x43f6, 0x5fb4),
        (0x408cc6001fffffff, 0x44663001, 0x4466, 0x6332),
        (0x40a390001fffffff, 0x451c8001, 0x451d, 0x68e4),
        (0x40a542000fffffff, 0x452a1000, 0x452a, 0x6950),
        (0x40a6d0001fffffff, 0x45368001, 0x4537, 0x69b4),
        (0x40b3460010000001, 0x459a3001, 0x459a, 0x6cd2),
        (0x40cfeaade0000000, 0x467f556f, 0x467f, 0x73fb),
        (0x40effc0000000000, 0x477fe000, 0x4780, 0x7bff),
        (0x40effde000000000, 0x477fef00, 0x4780, 0x7bff),
        (0x40effdfffffde721, 0x477ff000, 0x4780, 0x7c00),
        (0x40effe0000000000, 0x477ff000, 0x4780, 0x7c00),
        (0x40effe00000218df, 0x477ff000, 0x4780, 0x7c00),
        (0x4119d00010000000, 0x48ce8000, 0x48ce, 0x7c00),
        (0x412246000fffffff, 0x49123000, 0x4912, 0x7c00),
        (0x4166c3fba8094805, 0x4b361fdd, 0x4b36, 0x7c00),
        (0x4169c20010000000, 0x4b4e1000, 0x4b4e, 0x7c00),
        (0x4187060010000000, 0x4c383000, 0x4c38, 0x7c00),
        (0x418f060010000000, 0x4c783000, 0x4c78, 0x7c00),
        (0x419d6f34547df3b6, 0x4ceb79a3, 0x4ceb, 0x7c00),
        (0x41b446001fffffff, 0x4da23001, 0x4da2, 0x7c00),
        (0x41bcc20010000001, 0x4de61001, 0x4de6, 0x7c00),
        (0x41bf8fffefffffff, 0x4dfc7fff, 0x4dfc, 0x7c00),
        (0x41c190000fffffff, 0x4e0c8000, 0x4e0c, 0x7c00),
        (0x420f100010000001, 0x50788001, 0x5079, 0x7c00),
        (0x42bac9e890000001, 0x55d64f45, 0x55d6, 0x7c00),
        (0x434970001fffffff, 0x5a4b8001, 0x5a4c, 0x7c00),
        (0x44decfffe0000000, 0x66f67fff, 0x66f6, 0x7c00),
        (0x4577460010000000, 0x6bba3000, 0x6bba, 0x7c00),
        (0x4633acc96016d60e, 0x719d664b, 0x719d, 0x7c00),
        (0x4669165f4bb19d02, 0x7348b2fa, 0x7349, 0x7c00),
        (0x4675460000000000, 0x73aa3000, 0x73aa, 0x7c00),
        (0x472c577042a40dc8, 0x7962bb82, 0x7963, 0x7c00),
        (0x47a3500010000000, 0x7d1a8000, 0x7d1a, 0x7c00),
        (0x47b133eef5c42d3e, 0x7d899f78, 0x7d8a, 0x7c00),
        (0x47efe00000000000, 0x7f7f0000, 0x7f7f, 0x7c00),
        (0x47efefffffffff7f, 0x7f7f8000, 0x7f80, 0x7c00),
        (0x47eff00000001f6e, 0x7f7f8000, 0x7f80, 0x7c00),
        (0x47efffffe0000000, 0x7f7fffff, 0x7f80, 0x7c00),
        (0x47efffffeffffff0, 0x7f7fffff, 0x7f80, 0x7c00),
        (0x47efffffefffffff, 0x7f7fffff, 0x7f80, 0x7c00),
        (0x47effffff0000000, 0x7f800000, 0x7f80, 0x7c00),
        (0x47effffff0000001, 0x7f800000, 0x7f80, 0x7c00),
        (0x47f0000000000000, 0x7f800000, 0x7f80, 0x7c00),
        (0x488bcfffffffffff, 0x7f800000, 0x7f80, 0x7c00),
        (0x48aac60000000000, 0x7f800000, 0x7f80, 0x7c00),
        (0x4a26acd1fee4c01f, 0x7f800000, 0x7f80, 0x7c00),
        (0x4c256abe36c138a4, 0x7f800000, 0x7f80, 0x7c00),
        (0x4c6552be651e1ca5, 0x7f800000, 0x7f80, 0x7c00),
        (0x4df5f4a8ebcb1200, 0x7f800000, 0x7f80, 0x7c00),
        (0x4e3d69675125ff0f, 0x7f800000, 0x7f80, 0x7c00),
        (0x51a6efbb6c0a9bba, 0x7f800000, 0x7f80, 0x7c00),
        (0x52d037e4b85a4eab, 0x7f800000, 0x7f80, 0x7c00),
        (0x530c999ebc9a0005, 0x7f800000, 0x7f80, 0x7c00),
        (0x54ef7f9596885018, 0x7f800000, 0x7f80, 0x7c00),
        (0x58b3098c99b9f557, 0x7f800000, 0x7f80, 0x7c00),
        (0x5950a263faec571d, 0x7f800000, 0x7f80, 0x7c00),
        (0x597a86640d709248, 0x7f800000, 0x7f80, 0x7c00),
        (0x5a3c8204d0170778, 0x7f800000, 0x7f80, 0x7c00),
        (0x607741867c362491, 0x7f800000, 0x7f80, 0x7c00),
        (0x616b2db62a527521, 0x7f800000, 0x7f80, 0x7c00),
        (0x64357c976eca2ba0, 0x7f800000, 0x7f80, 0x7c00),
        (0x65f982359667060c, 0x7f800000, 0x7f80, 0x7c00),
        (0x666ac88a6906ab68, 0x7f800000, 0x7f80, 0x7c00),
        (0x6a94427d2f84ea0f, 0x7f800000, 0x7f80, 0x7c00),
        (0x6bd20911b3d18022, 0x7f800000, 0x7f80, 0x7c00),
        (0x701861c0d092e07f, 0x7f800000, 0x7f80, 0x7c00),
        (0x75417bc5523110c4, 0x7f800000, 0x7f80, 0x7c00),
        (0x75a66c1ae32996b4, 0x7f800000, 0x7f80, 0x7c00),
        (0x75f93a5ff1eeddee, 0x7f800000, 0x7f80, 0x7c00),
        (0x77c7c9e9b9bdab68, 0x7f800000, 0x7f80, 0x7c00),
        (0x77d6a830d103b91f, 0x7f800000, 0x7f80, 0x7c00),
        (0x78f190db8c8d4630, 0x7f800000, 0x7f80, 0x7c00),
        (0x79740d27ab1665d7, 0x7f800000, 0x7f80, 0x7c00),
        (0x79cf0607cb478aac, 0x7f800000, 0x7f80, 0x7c00),
        (0x7aeed6af12c58309, 0x7f800000, 0x7f80, 0x7c00),
        (0x7d917f7bc6e211a0, 0x7f800000, 0x7f80, 0x7c00),
        (0x7e37e43c8800759c, 0x7f800000, 0x7f80, 0x7c00),
        (0x7fefffffffffffff, 0x7f800000, 0x7f80, 0x7c00),
        (0x7ff0000000000000, 0x7f800000, 0x7f80, 0x7c00),
        (0x7ff0000000000001, 0x7fc00000, 0xffff, 0x7e00),
        (0x7ff0000000001000, 0x7fc00000, 0xffff, 0x7e00),
        (0x7ff0000020000000, 0x7fc00001, 0xffff, 0x7e00),
        (0x7ff0123456789abc, 0x7fc091a2, 0xffff, 0x7e04),
        (0x7ff4000000000000, 0x7fe00000, 0xffff, 0x7f00),
        (0x7ff7ffffffffffff, 0x7fffffff, 0xffff, 0x7fff),
        (0x7ff8000000000000, 0x7fc00000, 0xffff, 0x7e00),
        (0x7ff800001fffffff, 0x7fc00000, 0xffff, 0x7e00),
        (0x7fffffffffffffff, 0x7fffffff, 0xffff, 0x7fff),
        (0x8000000000000000, 0x80000000, 0x8000, 0x8000),
        (0x8000000000000001, 0x80000000, 0x8000, 0x8000),
        (0x8000000000000002, 0x80000000, 0x8000, 0x8000),
        (0x800fffffffffffff, 0x80000000, 0x8000, 0x8000),
        (0x8010000000000000, 0x80000000, 0x8000, 0x8000),
        (0x81a56e1fc2f8f359, 0x80000000, 0x8000, 0x8000),
        (0x825867c731cf194d, 0x80000000, 0x8000, 0x8000),
        (0x82a1282e56f24510, 0x80000000, 0x8000, 0x8000),
        (0x84eb1e73c7f3c8a0, 0x80000000, 0x8000, 0x8000),
        (0x869adcef46d8992e, 0x80000000, 0x8000, 0x8000),
        (0x885b13d2d6b97c44, 0x80000000, 0x8000, 0x8000),
        (0x8bcae492d7a384ea, 0x80000000, 0x8000, 0x8000),
        (0x9001f9094b3540c8, 0x80000000, 0x8000, 0x8000),
        (0x901715a354a1552c, 0x80000000, 0x8000, 0x8000),
        (0x90a01965db9a6092, 0x80000000, 0x8000, 0x8000),
        (0x916a0b9aedff0776, 0x80000000, 0x8000, 0x8000),
        (0x93e7605daf6ddc59, 0x80000000, 0x8000, 0x8000),
        (0x949606b3283c4412, 0x80000000, 0x8000, 0x8000),
        (0x9543f3e3afa16656, 0x80000000, 0x8000, 0x8000),
        (0x95c13a7910f44ac0, 0x80000000, 0x8000, 0x8000),
        (0x976cb84e4800ae9e, 0x80000000, 0x8000, 0x8000),
        (0x984c6df8d13d74f3, 0x80000000, 0x8000, 0x8000),
        (0xa0df733e6687f211, 0x80000000, 0x8000, 0x8000),
        (0xa1c09da38998cb80, 0x80000000, 0x8000, 0x8000),
        (0xa7bcee9f5e993811, 0x80000000, 0x8000, 0x8000),
        (0xab11c60e006fd424, 0x80000000, 0x8000, 0x8000),
        (0xacb9cf9fd2a570de, 0x80000000, 0x8000, 0x8000),
        (0xae78c1bd4c7253d9, 0x80000000, 0x8000, 0x8000),
        (0xb0575eb712b01ad0, 0x80000000, 0x8000, 0x8000),
        (0xb18ed7e488b66e13, 0x80000000, 0x8000, 0x8000),
        (0xb33bfa31b3e174eb, 0x80000000, 0x8000, 0x8000),
        (0xb39fe58d1d1dfe49, 0x80000000, 0x8000, 0x8000),
        (0xb5f0000000000000, 0x80000000, 0x8000, 0x8000),
        (0xb5f9300000000000, 0x80000000, 0x8000, 0x8000),
        (0xb668aa1d60000001, 0x80000000, 0x8000, 0x8000),
        (0xb680000000000000, 0x80000000, 0x8000, 0x8000),
        (0xb690000000000000, 0x80000000, 0x8000, 0x8000),
        (0xb690000000000004, 0x80000001, 0x8000, 0x8000),
        (0xb698000000000000, 0x80000001, 0x8000, 0x8000),
        (0xb6a0000000000000, 0x80000001, 0x8000, 0x8000),
        (0xb6bac2001fffffff, 0x80000003, 0x8000, 0x8000),
        (0xb6bb83ff11db1f30, 0x80000003, 0x8000, 0x8000),
        (0xb738c60000000000, 0x80000319, 0x8000, 0x8000),
        (0xb78e020000000001, 0x80007808, 0x8000, 0x8000),
        (0xb800000000000000, 0x80400000, 0x8040, 0x8000),
        (0xb810000000000000, 0x80800000, 0x8080, 0x8000),
        (0xb8795dc6d0000001, 0x83caee37, 0x83cb, 0x8000),
        (0xb87ec0d17259023b, 0x83f6068c, 0x83f6, 0x8000),
        (0xb8b542000fffffff, 0x85aa1000, 0x85aa, 0x8000),
        (0xb8ef820010000000, 0x877c1000, 0x877c, 0x8000),
        (0xb90bc6000fffffff, 0x885e3000, 0x885e, 0x8000),
        (0xb97386000fffffff, 0x8b9c3000, 0x8b9c, 0x8000),
        (0xb977c2001fffffff, 0x8bbe1001, 0x8bbe, 0x8000),
        (0xb977d00010000000, 0x8bbe8000, 0x8bbe, 0x8000),
        (0xba1c46000fffffff, 0x90e23000, 0x90e2, 0x8000),
        (0xbb2b20b6efffffff, 0x995905b7, 0x9959, 0x8000),
        (0xbb42d0000fffffff, 0x9a168000, 0x9a16, 0x8000),
        (0xbbc9a6e0708963bb, 0x9e4d3704, 0x9e4d, 0x8000),
        (0xbbdea4febfffffff, 0x9ef527f6, 0x9ef5, 0x8000),
        (0xbd0d8fffe0000000, 0xa86c7fff, 0xa86c, 0x8000),
        (0xbd62c60000000001, 0xab163000, 0xab16, 0x8000),
        (0xbe2d02001fffffff, 0xb1681001, 0xb168, 0x8000),
        (0xbe2d420000000001, 0xb16a1000, 0xb16a, 0x8000),
        (0xbe391cfc90000000, 0xb1c8e7e4, 0xb1c9, 0x8000),
        (0xbe3a100010000001, 0xb1d08001, 0xb1d1, 0x8000),
        (0xbe50000000000000, 0xb2800000, 0xb280, 0x8000),
        (0xbe5ec6001fffffff, 0xb2f63001, 0xb2f6, 0x8000),
        (0xbe60000000000000, 0xb3000000, 0xb300, 0x8000),
        (0xbe60000000020000, 0xb3000000, 0xb300, 0x8000),
        (0xbe68000000000000, 0xb3400000, 0xb340, 0x8001),
        (0xbe6acfffe0000000, 0xb3567fff, 0xb356, 0x8001),
        (0xbe70000000000000, 0xb3800000, 0xb380, 0x8001),
        (0xbe78000000000000, 0xb3c00000, 0xb3c0, 0x8002),
        (0xbea9bd0f0fffffff, 0xb54de878, 0xb54e, 0x800d),
        (0xbedb0fffefffffff, 0xb6d87fff, 0xb6d8, 0x806c),
        (0xbf0a700010000001, 0xb8538001, 0xb854, 0x834e),
        (0xbf0b300000000001, 0xb8598000, 0xb85a, 0x8366),
        (0xbf10000000000000, 0xb8800000, 0xb880, 0x8400),
        (0xbf1146000fffffff, 0xb88a3000, 0xb88a, 0x8452),
        (0xbf1e46000fffffff, 0xb8f23000, 0xb8f2, 0x8792),
        (0xbf2346000fffffff, 0xb91a3000, 0xb91a, 0x88d2),
        (0xbf73f00010000001, 0xbb9f8001, 0xbba0, 0x9cfc),
        (0xbf8c49c730000001, 0xbc624e3a, 0xbc62, 0xa312),
        (0xbf9242000fffffff, 0xbc921000, 0xbc92, 0xa490),
        (0xbfa7500000000000, 0xbd3a8000, 0xbd3a, 0xa9d4),
        (0xbfb999999999999a, 0xbdcccccd, 0xbdcd, 0xae66),
        (0xbfd5555555555555, 0xbeaaaaab, 0xbeab, 0xb555),
        (0xbfe389a3d074f080, 0xbf1c4d1f, 0xbf1c, 0xb8e2),
        (0xbfe3cfffe0000000, 0xbf1e7fff, 0xbf1e, 0xb8f4),
        (0xbfe5555555555555, 0xbf2aaaab, 0xbf2b, 0xb955),
        (0xbff0000000000000, 0xbf800000, 0xbf80, 0xbc00),
        (0xbff0000010000000, 0xbf800000, 0xbf80, 0xbc00),
        (0xbff0000010000001, 0xbf800001, 0xbf80, 0xbc00),
        (0xbff0000020000000, 0xbf800001, 0xbf80, 0xbc00),
        (0xbff0000030000000, 0xbf800002, 0xbf80, 0xbc00),
        (0xbff0020000000000, 0xbf801000, 0xbf80, 0xbc00),
        (0xbff0020000000001, 0xbf801000, 0xbf80, 0xbc00),
        (0xbff0020000400000, 0xbf801000, 0xbf80, 0xbc00),
        (0xbff005ffffc00000, 0xbf803000, 0xbf80, 0xbc02),
        (0xbff0060000000000, 0xbf803000, 0xbf80, 0xbc02),
        (0xbff00ffffffff000, 0xbf808000, 0xbf80, 0xbc04),
        (0xbff0100000000000, 0xbf808000, 0xbf80, 0xbc04),
        (0xbff0100000000001, 0xbf808000, 0xbf80, 0xbc04),
        (0xbff0100000400000, 0xbf808000, 0xbf80, 0xbc04),
        (0xc00921fb54442d18, 0xc0490fdb, 0xc049, 0xc248),
        (0xc00db0001fffffff, 0xc06d8001, 0xc06e, 0xc36c),
        (0xc027c20010000001, 0xc13e1001, 0xc13e, 0xc9f1),
        (0xc08cf0000fffffff, 0xc4678000, 0xc468, 0xe33c),
        (0xc095420000000001, 0xc4aa1000, 0xc4aa, 0xe550),
        (0xc0a8f0d4cfffffff, 0xc54786a6, 0xc548, 0xea3c),
        (0xc0abc20010000000, 0xc55e1000, 0xc55e, 0xeaf0),
        (0xc0c16b36c0eaa2d1, 0xc60b59b6, 0xc60b, 0xf05b),
        (0xc0d2cfffe0000001, 0xc6967fff, 0xc696, 0xf4b4),
        (0xc0effc0000000000, 0xc77fe000, 0xc780, 0xfbff),
        (0xc0effde000000000, 0xc77fef00, 0xc780, 0xfbff),
        (0xc0effdfffffde721, 0xc77ff000, 0xc780, 0xfc00),
        (0xc0effe0000000000, 0xc77ff000, 0xc780, 0xfc00),
        (0xc0effe00000218df, 0xc77ff000, 0xc780, 0xfc00),
        (0xc0f4b00010000000, 0xc7a58000, 0xc7a6, 0xfc00),
        (0xc106b00000000001, 0xc8358000, 0xc836, 0xfc00),
        (0xc148c20000000001, 0xca461000, 0xca46, 0xfc00),
        (0xc155420010000001, 0xcaaa1001, 0xcaaa, 0xfc00),
        (0xc15b900000000001, 0xcadc8000, 0xcadc, 0xfc00),
        (0xc162700010000000, 0xcb138000, 0xcb14, 0xfc00),
        (0xc163300010000000, 0xcb198000, 0xcb1a, 0xfc00),
        (0xc163700010000000, 0xcb1b8000, 0xcb1c, 0xfc00),
        (0xc1830fffe0000000, 0xcc187fff, 0xcc18, 0xfc00),
        (0xc198900010000000, 0xccc48000, 0xccc4, 0xfc00),
        (0xc19d6f34547df3b6, 0xcceb79a3, 0xcceb, 0xfc00),
        (0xc20490000fffffff, 0xd0248000, 0xd024, 0xfc00),
        (0xc22b8fffefffffff, 0xd15c7fff, 0xd15c, 0xfc00),
        (0xc27fc60010000000, 0xd3fe3000, 0xd3fe, 0xfc00),
        (0xc3ac088d17c6405e, 0xdd604469, 0xdd60, 0xfc00),
        (0xc4057cf140000001, 0xe02be78a, 0xe02c, 0xfc00),
        (0xc4e145896fa19d46, 0xe70a2c4b, 0xe70a, 0xfc00),
        (0xc5d130000fffffff, 0xee898000, 0xee8a, 0xfc00),
        (0xc6a3900010000000, 0xf51c8000, 0xf51c, 0xfc00),
        (0xc6bdcffff0000000, 0xf5ee8000, 0xf5ee, 0xfc00),
        (0xc7154f271fb661b4, 0xf8aa7939, 0xf8aa, 0xfc00),
        (0xc7c7c2001fffffff, 0xfe3e1001, 0xfe3e, 0xfc00),
        (0xc7efe00000000000, 0xff7f0000, 0xff7f, 0xfc00),
        (0xc7efefffffffff7f, 0xff7f8000, 0xff80, 0xfc00),
        (0xc7eff00000001f6e, 0xff7f8000, 0xff80, 0xfc00),
        (0xc7efffffe0000000, 0xff7fffff, 0xff80, 0xfc00),
        (0xc7efffffeffffff0, 0xff7fffff, 0xff80, 0xfc00),
        (0xc7efffffefffffff, 0xff7fffff, 0xff80, 0xfc00),
        (0xc7effffff0000000, 0xff800000, 0xff80, 0xfc00),
        (0xc7effffff0000001, 0xff800000, 0xff80, 0xfc00),
        (0xc7f0000000000000, 0xff800000, 0xff80, 0xfc00),
        (0xc89d100010000001, 0xff800000, 0xff80, 0xfc00),
        (0xc9782a58cb26e7a5, 0xff800000, 0xff80, 0xfc00),
        (0xcac74fe0c2064f3e, 0xff800000, 0xff80, 0xfc00),
        (0xcaf4a2a116716583, 0xff800000, 0xff80, 0xfc00),
        (0xcbada6a0cd24f4ec, 0xff800000, 0xff80, 0xfc00),
        (0xcc2c6076d18b4894, 0xff800000, 0xff80, 0xfc00),
        (0xcca2da50a9241885, 0xff800000, 0xff80, 0xfc00),
        (0xcdabc3ea49400b81, 0xff800000, 0xff80, 0xfc00),
        (0xcdc4a66675194f64, 0xff800000, 0xff80, 0xfc00),
        (0xd11776a4d15703e0, 0xff800000, 0xff80, 0xfc00),
        (0xd3e0ed84aecbbccf, 0xff800000, 0xff80, 0xfc00),
        (0xd4621dc481b81040, 0xff800000, 0xff80, 0xfc00),
        (0xd5a272e5e09f46eb, 0xff800000, 0xff80, 0xfc00),
        (0xd64e5604b75b48a1, 0xff800000, 0xff80, 0xfc00),
        (0xd72f9ecdd454f1e8, 0xff800000, 0xff80, 0xfc00),
        (0xd7846e536dcd11cc, 0xff800000, 0xff80, 0xfc00),
        (0xd911b0dc27a40502, 0xff800000, 0xff80, 0xfc00),
        (0xdb44062d41e6dc09, 0xff800000, 0xff80, 0xfc00),
        (0xdec4ac467888fa7a, 0xff800000, 0xff80, 0xfc00),
        (0xe2ee229ab471b2e6, 0xff800000, 0xff80, 0xfc00),
        (0xe363bad923d83263, 0xff800000, 0xff80, 0xfc00),
        (0xe3c1bbce83d9479c, 0xff800000, 0xff80, 0xfc00),
        (0xe50008d80c386144, 0xff800000, 0xff80, 0xfc00),
        (0xe5357be9e7c5af18, 0xff800000, 0xff80, 0xfc00),
        (0xe80dcc197fe4f416, 0xff800000, 0xff80, 0xfc00),
        (0xe9f98fdc55906a7f, 0xff800000, 0xff80, 0xfc00),
        (0xea4bf216dfd13150, 0xff800000, 0xff80, 0xfc00),
        (0xea60312b25f547a0, 0xff800000, 0xff80, 0xfc00),
        (0xea84727e10b07891, 0xff800000, 0xff80, 0xfc00),
        (0xee57a9865c7b2cec, 0xff800000, 0xff80, 0xfc00),
        (0xeed66a5ac86b7f7f, 0xff800000, 0xff80, 0xfc00),
        (0xefb725cd619664f3, 0xff800000, 0xff80, 0xfc00),
        (0xf0604517eecda947, 0xff800000, 0xff80, 0xfc00),
        (0xf0689ae11e956a7d, 0xff800000, 0xff80, 0xfc00),
        (0xf1689e5fe87212b0, 0xff800000, 0xff80, 0xfc00),
        (0xf312c9346d22469d, 0xff800000, 0xff80, 0xfc00),
        (0xf36d31e8c5f8a3f2, 0xff800000, 0xff80, 0xfc00),
        (0xf399f3ddf22b18b0, 0xff800000, 0xff80, 0xfc00),
        (0xf3d9ff9f2cb87a7a, 0xff800000, 0xff80, 0xfc00),
        (0xf6a11b92cf58440c, 0xff800000, 0xff80, 0xfc00),
        (0xf81184f95ddbb589, 0xff800000, 0xff80, 0xfc00),
        (0xf8c1c3a53505c031, 0xff800000, 0xff80, 0xfc00),
        (0xf8d07ea044f2d5a4, 0xff800000, 0xff80, 0xfc00),
        (0xfbd67b31d729a460, 0xff800000, 0xff80, 0xfc00),
        (0xfe37e43c8800759c, 0xff800000, 0xff80, 0xfc00),
        (0xff074b2584d44ac4, 0xff800000, 0xff80, 0xfc00),
        (0xff977125b30b0b98, 0xff800000, 0xff80, 0xfc00),
        (0xffefffffffffffff, 0xff800000, 0xff80, 0xfc00),
        (0xfff0000000000000, 0xff800000, 0xff80, 0xfc00),
        (0xfff0000000000001, 0xffc00000, 0xffff, 0xfe00),
        (0xfff0000000001000, 0xffc00000, 0xffff, 0xfe00),
        (0xfff0000020000000, 0xffc00001, 0xffff, 0xfe00),
        (0xfff0123456789abc, 0xffc091a2, 0xffff, 0xfe04),
        (0xfff4000000000000, 0xffe00000, 0xffff, 0xff00),
        (0xfff7ffffffffffff, 0xffffffff, 0xffff, 0xffff),
        (0xfff8000000000000, 0xffc00000, 0xffff, 0xfe00),
        (0xfff800001fffffff, 0xffc00000, 0xffff, 0xfe00),
        (0xffffffffffffffff, 0xffffffff, 0xffff, 0xffff),
    ];

    const SHA_BF16_F32: &str = "9207d7eb28680a098c73dbe536d1ff7b94311dc417b9a385e0af6660683e93ca";
    const SHA_BF16_F64: &str = "3a1dfdeaf0f7c870697701d0811581c9877443a92a25c23f501fe47497ac197d";
    const SHA_F16_F32: &str = "b636c5716ff84d972782faf02d0194cb8951526bea4cc487082feb47b1860ddf";
    const SHA_F16_F64: &str = "0f233aaf46a3f923404343bb0ccecb1af96b0848aee43076da6999522b81e70d";
    const SHA_S32_BF16: &str = "d3054f5d1b58e809faf01f128eafac02ce48c85e6dd2ff93a131149c082bdd0b";
    const SHA_S32_F16: &str = "d151f6aa9713d82754defc15993e2be7d06da306605a97adff7ade4d88a5b3d4";
    const SHA_S32_F64: &str = "03e4c76147294187d44eb173245a32c5cd0e26e1dcee7fe15cd1699fc695e66a";
    const SHA_S64_F32: &str = "5893aad7db2472177a486fc5ee0207c86ee3a2f0e9dc38e85b7030922628fd33";
    const SHA_S64_BF16: &str = "26cf33434b345641614a70ec13ff49bb21c1aab462a9966a52e16d0048866be4";
    const SHA_S64_F16: &str = "935b26610fed2c72a399398faac767d2a78046c8a78484db811cdff5691cb8b0";
    const SHA_X32_BF16: &str = "edff55c9e832b70de65e36de3d8d57c19bc8e62b0cc625dfc046ee62ad721253";
    const SHA_X32_F16: &str = "ed9c66376a758730d1755a924db3e346afc53bb04a8679a9c1ebf69468fed69c";
    const SHA_X32_F64: &str = "93854f8a630ab60758d961342d8b4e3aa98aa95ea2ca38db97a2c7ef505a6ed5";
}
