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
        fill_repeated(&mut dst[src.len()..], pad);
    }
    Ok(())
}

/// Sets each row's padding (tokens `lengths[r]..width` of row `r` of `out`, `[B, width]` tokens
/// of `token_bytes` bytes) to a copy of that row's first token; a row without tokens is left as
/// it is. NeMo-RL's ``advantages.expand(mask.shape)`` leaves such padding; a padded decode fills
/// it here, in place, touching only the padding cells. A length past `width` or an output of
/// another size is a `FrameError` naming the row: the lengths come from the frame that sized
/// `out`.
pub fn fill_padding_with_first_token(
    out: &mut [u8],
    token_bytes: usize,
    width: usize,
    lengths: &[u64],
) -> Result<()> {
    let out_row = width.checked_mul(token_bytes).ok_or_else(|| {
        frame_err!("padding fill: a row of {width} tokens of {token_bytes} bytes overflows")
    })?;
    let expected = lengths.len().checked_mul(out_row);
    if expected != Some(out.len()) || token_bytes == 0 {
        return Err(frame_err!(
            "padding fill: an output of {} bytes does not hold {} rows of {width} tokens of \
             {token_bytes} bytes",
            out.len(),
            lengths.len()
        ));
    }
    // Every length checked before any cell is written: an error leaves `out` as it was.
    if let Some((r, length)) = lengths.iter().enumerate().find(|&(_, &n)| n > width as u64) {
        return Err(frame_err!(
            "padding fill, row {r}: {length} tokens do not fit width {width}"
        ));
    }
    if out_row == 0 {
        return Ok(());
    }
    for (row, &length) in out.chunks_exact_mut(out_row).zip(lengths) {
        // At most `width` (checked above), so the product fits: `out_row` did.
        let valid = length as usize * token_bytes;
        if valid > 0 {
            let (head, tail) = row.split_at_mut(valid);
            fill_repeated(tail, &head[..token_bytes]);
        }
    }
    Ok(())
}

/// `dst` filled with copies of `element` (`dst.len()` a multiple of its length): zeroes by
/// `fill`, others by doubling copies, not one short copy per element.
fn fill_repeated(dst: &mut [u8], element: &[u8]) {
    if element.iter().all(|&b| b == 0) {
        dst.fill(0);
        return;
    }
    let first = element.len().min(dst.len());
    dst[..first].copy_from_slice(&element[..first]);
    let mut filled = first;
    while filled < dst.len() {
        let step = filled.min(dst.len() - filled);
        dst.copy_within(..step, filled);
        filled += step;
    }
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
    fn fills_padding_with_each_rows_first_token() {
        // Rows of 2-byte tokens, width 3: lengths 1, 0 (left as is) and 3 (no padding).
        let mut out = [1u8, 2, 0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 3, 4, 5, 6, 8, 9];
        fill_padding_with_first_token(&mut out, 2, 3, &[1, 0, 3]).unwrap();
        assert_eq!(out, [1, 2, 1, 2, 1, 2, 7, 7, 7, 7, 7, 7, 3, 4, 5, 6, 8, 9]);
        let before = out;
        let err = fill_padding_with_first_token(&mut out, 2, 3, &[1, 4, 0]).unwrap_err();
        assert!(err.to_string().contains("row 1: 4 tokens"), "{err}");
        assert_eq!(out, before, "an error writes nothing");
        let err = fill_padding_with_first_token(&mut out, 2, 3, &[1, 1]).unwrap_err();
        assert!(matches!(err, crate::error::Error::Frame(_)), "{err:?}");
    }

    #[test]
    fn a_non_zero_pad_fills_every_cell_of_long_padding() {
        let values = [5u8, 0, 0, 0];
        let mut out = vec![0u8; 2 * 37 * 4];
        pad_rows(
            &values,
            4,
            &[0, 1, 1],
            37,
            &[0x1b, 0x50, 0x02, 0x00],
            &mut out,
        )
        .unwrap();
        let expected: Vec<u8> = [5u8, 0, 0, 0]
            .into_iter()
            .chain((0..73).flat_map(|_| [0x1b, 0x50, 0x02, 0x00]))
            .collect();
        assert_eq!(out, expected);
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
