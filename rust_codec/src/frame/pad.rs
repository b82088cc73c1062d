//! Ragged rows → a padded `[B, W, ...]` block: the one copy `layout="padded"` needs.

use crate::error::Result;
use crate::frame_err;

/// Copies row `r` (token range `offsets[r]..offsets[r + 1]` of `values`, `row_bytes` bytes per
/// token) to the start of `out`'s row `r` (`width` tokens) and fills the rest with `pad`, one
/// element's bytes repeated.
///
/// `offsets` come from a validated frame and `out` was sized from them, so a failure here means
/// the frame's bytes changed underneath (a writer through a view of a writable source): a
/// `FrameError`, never a `BatchError` (there is no batch at decode).
pub fn pad_rows(
    values: &[u8],
    token_bytes: usize,
    offsets: &[u64],
    width: usize,
    pad: &[u8],
    out: &mut [u8],
) -> Result<()> {
    let rows = offsets.len().saturating_sub(1);
    let out_row = width.checked_mul(token_bytes).ok_or_else(|| {
        frame_err!("padded decode: a row of {width} tokens of {token_bytes} bytes overflows")
    })?;
    if out.len() != rows * out_row || pad.is_empty() || !token_bytes.is_multiple_of(pad.len()) {
        return Err(frame_err!(
            "padded decode: an output of {} bytes does not hold {rows} rows of {width} tokens of \
             {token_bytes} bytes (did the frame change while it was decoded?)",
            out.len()
        ));
    }
    for (r, dst) in out.chunks_exact_mut(out_row.max(1)).take(rows).enumerate() {
        let (a, b) = (offsets[r] as usize, offsets[r + 1] as usize);
        let src = values
            .get(a * token_bytes..b * token_bytes)
            .filter(|s| s.len() <= dst.len())
            .ok_or_else(|| {
                frame_err!(
                    "padded decode, row {r}: tokens {a}..{b} of {} do not fit width {width} \
                     (did the frame change while it was decoded?)",
                    values.len() / token_bytes.max(1)
                )
            })?;
        dst[..src.len()].copy_from_slice(src);
        let tail = &mut dst[src.len()..];
        if pad.iter().all(|&b| b == 0) {
            tail.fill(0);
        } else {
            for chunk in tail.chunks_exact_mut(pad.len()) {
                chunk.copy_from_slice(pad);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_each_row() {
        let values = [1u8, 2, 3, 4, 5, 6];
        let mut out = [0u8; 3 * 4];
        pad_rows(&values, 1, &[0, 2, 2, 6], 4, &[9], &mut out).unwrap();
        assert_eq!(out, [1, 2, 9, 9, 9, 9, 9, 9, 3, 4, 5, 6]);
    }

    #[test]
    fn multi_byte_pad_and_bad_sizes() {
        let values = [1u8, 0, 2, 0];
        let mut out = [0u8; 2 * 3 * 2];
        pad_rows(&values, 2, &[0, 1, 2], 3, &[7, 0], &mut out).unwrap();
        assert_eq!(out, [1, 0, 7, 0, 7, 0, 2, 0, 7, 0, 7, 0]);
        let err = pad_rows(&values, 2, &[0, 2, 2], 1, &[0, 0], &mut [0u8; 4]).unwrap_err();
        assert!(matches!(err, crate::error::Error::Frame(_)), "{err:?}");
        let err = pad_rows(&values, 2, &[0, 1, 2], 3, &[0, 0], &mut [0u8; 5]).unwrap_err();
        assert!(matches!(err, crate::error::Error::Frame(_)), "{err:?}");
    }
}
