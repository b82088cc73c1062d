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
    copy_rows(values, token_bytes, offsets, width, pad, false, out)
}

/// [`pad_rows`], and with `first_token` each row with tokens padded with copies of its first
/// token instead of `pad` (NeMo-RL's `advantages` broadcast; a row without tokens takes `pad`).
fn copy_rows(
    values: &[u8],
    token_bytes: usize,
    offsets: &[u64],
    width: usize,
    pad: &[u8],
    first_token: bool,
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
    let bad = |r: usize, a: u64, b: u64| {
        frame_err!(
            "padded decode, row {r}: tokens {a}..{b} of {} do not fit width {width} \
             (did the frame change while it was decoded?)",
            values.len() / token_bytes.max(1)
        )
    };
    let source = |a: u64, b: u64| {
        let (a, b) = (usize::try_from(a).ok()?, usize::try_from(b).ok()?);
        values.get(a.checked_mul(token_bytes)?..b.checked_mul(token_bytes)?)
    };
    let mut r = 0;
    while r < rows {
        // A run of rows without padding (each exactly `width` tokens) is one copy: they lie
        // end to end in `values` as in `out`.
        let mut end = r;
        while end < rows && offsets[end + 1].checked_sub(offsets[end]) == Some(width as u64) {
            end += 1;
        }
        if end > r {
            let src =
                source(offsets[r], offsets[end]).ok_or_else(|| bad(r, offsets[r], offsets[end]))?;
            out[r * out_row..end * out_row].copy_from_slice(src);
            r = end;
            continue;
        }
        let dst = &mut out[r * out_row..(r + 1) * out_row];
        let src = source(offsets[r], offsets[r + 1])
            .filter(|s| s.len() <= dst.len())
            .ok_or_else(|| bad(r, offsets[r], offsets[r + 1]))?;
        dst[..src.len()].copy_from_slice(src);
        match src.get(..token_bytes) {
            Some(first) if first_token && token_bytes > 0 => {
                fill_repeated(&mut dst[src.len()..], first)
            }
            _ => fill_repeated(&mut dst[src.len()..], pad),
        }
        r += 1;
    }
    Ok(())
}

/// One per-token field for [`pad_fields`]: its values' bytes (`offsets.last()` tokens of
/// `token_bytes` bytes each) and the pad element's bytes.
pub struct PadField<'a> {
    /// The field's values, every row's tokens end to end.
    pub values: &'a [u8],
    /// Bytes per token (the element size times the trailing dims).
    pub token_bytes: usize,
    /// One element's bytes, repeated over the padding.
    pub pad: &'a [u8],
    /// Pad each row that has tokens with copies of its first token instead of `pad`.
    pub first_token: bool,
}

/// Where [`pad_fields`] writes: the padded width, each block's first byte in the output (the
/// int64 row lengths first, then each field's block, then the attention mask's, every block
/// 64-byte aligned) and the output's size. A field's block holds each row group's
/// `[group rows, group width, ...]` one after another, without gaps: with one group of every
/// row (or groups that cover the rows in order at one width) it is the batch's `[rows, width,
/// ...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddedPlan {
    /// Tokens per padded row of the batch (its longest row, rounded up).
    pub width: usize,
    /// The first byte of the `[rows]` int64 lengths.
    pub lengths_at: usize,
    /// The first byte of each field's block, in the fields' order.
    pub blocks: Vec<usize>,
    /// The row groups (`start..stop`), each padded at its own width.
    pub groups: Vec<(usize, usize)>,
    /// Each group's width (tokens a row).
    pub widths: Vec<usize>,
    /// The first byte of the attention mask's block (one bool a cell), when asked for.
    pub mask_at: Option<usize>,
    /// The output's size.
    pub nbytes: usize,
}

/// The padded layout of fields whose tokens take `token_bytes` each, over the rows of
/// `offsets`: the width is the longest row rounded up to `multiple` (none: the longest row).
/// Every size is checked arithmetic: a width or a row count the output cannot address is a
/// `FrameError`, never a wrapped size.
pub fn padded_plan(
    offsets: &[u64],
    token_bytes: &[usize],
    multiple: Option<u64>,
) -> Result<PaddedPlan> {
    let rows = offsets.len().saturating_sub(1);
    grouped_plan(offsets, token_bytes, multiple, &[(0, rows)], None, false)
}

/// [`padded_plan`] for micro-batches: each row group of `groups` (`start..stop`, any order)
/// padded at its own width in one block per field. `narrow`: a group's width is its longest
/// row rounded up to that multiple (never past the batch's width); none: the batch's width.
/// `mask`: a block of bools, True on real tokens, in the same cells. A group past the rows is
/// a `BatchError` naming it.
pub fn grouped_plan(
    offsets: &[u64],
    token_bytes: &[usize],
    multiple: Option<u64>,
    groups: &[(usize, usize)],
    narrow: Option<u64>,
    mask: bool,
) -> Result<PaddedPlan> {
    let rows = offsets.len().saturating_sub(1);
    let longest_of = |a: usize, b: usize| {
        offsets[a..=b]
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .max()
            .unwrap_or(0)
    };
    let rounded = |longest: u64, multiple: Option<u64>| {
        match multiple {
            Some(0) => return Err(frame_err!("padded decode: pad_to_multiple_of must be >= 1")),
            Some(m) => longest.div_ceil(m).checked_mul(m),
            None => Some(longest),
        }
        .and_then(|w| usize::try_from(w).ok())
        .ok_or_else(|| {
            frame_err!("padded decode: a width of {longest} tokens rounded up overflows")
        })
    };
    let width = rounded(longest_of(0, rows), multiple)?;
    let mut widths = Vec::with_capacity(groups.len());
    let mut cells = 0usize;
    for (i, &(a, b)) in groups.iter().enumerate() {
        if a > b || b > rows {
            return Err(crate::batch_err!(
                "micro-batch {i}: rows {a}..{b} are not a range of the frame's {rows} rows"
            ));
        }
        let w = match narrow {
            Some(m) => rounded(longest_of(a, b), Some(m))?.min(width),
            None => width,
        };
        widths.push(w);
        cells = (b - a)
            .checked_mul(w)
            .and_then(|c| cells.checked_add(c))
            .ok_or_else(|| frame_err!("padded decode: {rows} rows of {width} tokens overflow"))?;
    }
    let overflow = || frame_err!("padded decode: {rows} rows of {width} tokens overflow");
    let aligned = |n: usize| n.checked_next_multiple_of(crate::memory::buffer::ALIGNMENT);
    let mut at = rows.checked_mul(8).and_then(aligned).ok_or_else(overflow)?;
    let mut blocks = Vec::with_capacity(token_bytes.len());
    for &bytes in token_bytes.iter().chain(mask.then_some(&1)) {
        blocks.push(at);
        at = cells
            .checked_mul(bytes)
            .and_then(|n| at.checked_add(n))
            .and_then(aligned)
            .ok_or_else(overflow)?;
    }
    let mask_at = if mask { blocks.pop() } else { None };
    Ok(PaddedPlan {
        width,
        lengths_at: 0,
        blocks,
        groups: groups.to_vec(),
        widths,
        mask_at,
        nbytes: at,
    })
}

/// Every field of `fields` padded into `out` (laid out by `plan`, from [`padded_plan`] or
/// [`grouped_plan`] over the same `offsets`), in one pass, with the rows' lengths as
/// native-endian int64 in front, the attention mask where planned, and the alignment gaps
/// zeroed: nothing of `out`'s earlier contents survives.
pub fn pad_fields(
    offsets: &[u64],
    fields: &[PadField<'_>],
    plan: &PaddedPlan,
    out: &mut [u8],
) -> Result<()> {
    if out.len() != plan.nbytes
        || fields.len() != plan.blocks.len()
        || plan.groups.len() != plan.widths.len()
    {
        return Err(frame_err!(
            "padded decode: an output of {} bytes for {} fields does not match its plan",
            out.len(),
            fields.len()
        ));
    }
    let rows = offsets.len().saturating_sub(1);
    let mut end = plan.lengths_at + rows * 8;
    for (dst, w) in out[..end].chunks_exact_mut(8).zip(offsets.windows(2)) {
        dst.copy_from_slice(&(w[1].saturating_sub(w[0]) as i64).to_ne_bytes());
    }
    let misfit = || frame_err!("padded decode: a field's block does not fit its plan");
    let blocks = fields
        .iter()
        .map(|f| (Some(f), f.token_bytes))
        .zip(&plan.blocks)
        .chain(plan.mask_at.as_ref().map(|at| ((None, 1), at)));
    for ((field, token_bytes), &at) in blocks {
        if at < end || at > out.len() {
            return Err(misfit());
        }
        out[end..at].fill(0);
        end = at;
        for (&(a, b), &width) in plan.groups.iter().zip(&plan.widths) {
            let size = (b.saturating_sub(a))
                .checked_mul(width)
                .and_then(|c| c.checked_mul(token_bytes))
                .and_then(|n| end.checked_add(n))
                .filter(|&e| e <= out.len())
                .ok_or_else(misfit)?;
            let group = offsets.get(a..=b).ok_or_else(misfit)?;
            let dst = &mut out[end..size];
            match field {
                Some(f) => copy_rows(
                    f.values,
                    token_bytes,
                    group,
                    width,
                    f.pad,
                    f.first_token,
                    dst,
                )?,
                None => mask_rows(group, width, dst)?,
            }
            end = size;
        }
    }
    out[end..].fill(0);
    Ok(())
}

/// Each row of `offsets` as `width` bools (one byte each) in `out`: 1 on its tokens, 0 after.
fn mask_rows(offsets: &[u64], width: usize, out: &mut [u8]) -> Result<()> {
    for (r, (dst, w)) in out
        .chunks_exact_mut(width.max(1))
        .zip(offsets.windows(2))
        .enumerate()
    {
        let n = usize::try_from(w[1].saturating_sub(w[0]))
            .ok()
            .filter(|&n| n <= dst.len())
            .ok_or_else(|| frame_err!("attention mask, row {r}: longer than width {width}"))?;
        dst[..n].fill(1);
        dst[n..].fill(0);
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
    fn pads_every_field_into_one_aligned_output() {
        let offsets = [0u64, 2, 2, 3];
        let ids = [1u8, 2, 3];
        let floats = [1u8, 0, 2, 0, 3, 0];
        let plan = padded_plan(&offsets, &[1, 2], Some(4)).unwrap();
        assert_eq!(plan.width, 4);
        assert_eq!(plan.blocks, vec![64, 128]);
        assert_eq!(plan.nbytes, 192);
        let fields = [
            PadField {
                values: &ids,
                token_bytes: 1,
                pad: &[9],
                first_token: false,
            },
            PadField {
                values: &floats,
                token_bytes: 2,
                pad: &[7, 0],
                first_token: false,
            },
        ];
        let mut out = vec![0xAAu8; plan.nbytes];
        pad_fields(&offsets, &fields, &plan, &mut out).unwrap();
        let lengths: Vec<i64> = out[..24]
            .chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(lengths, [2, 0, 1]);
        assert!(out[24..64].iter().all(|&b| b == 0), "gaps are zeroed");
        assert_eq!(&out[64..76], &[1, 2, 9, 9, 9, 9, 9, 9, 3, 9, 9, 9]);
        assert!(out[76..128].iter().all(|&b| b == 0));
        let mut second = [0u8; 24];
        for (r, (a, b)) in [(0usize, 2usize), (2, 2), (2, 3)].into_iter().enumerate() {
            for t in 0..4 {
                let cell = if a + t < b {
                    [floats[2 * (a + t)], 0]
                } else {
                    [7, 0]
                };
                second[r * 8 + 2 * t..r * 8 + 2 * t + 2].copy_from_slice(&cell);
            }
        }
        assert_eq!(&out[128..152], &second);
        assert!(out[152..].iter().all(|&b| b == 0));
        let err = padded_plan(&[0, u64::MAX / 2 + 2], &[1], Some(u64::MAX / 2 + 1)).unwrap_err();
        assert!(matches!(err, crate::error::Error::Frame(_)), "{err:?}");
        let err = padded_plan(&[0, 1 << 40, 1 << 41], &[1 << 30], None).unwrap_err();
        assert!(err.to_string().contains("overflow"), "{err}");
    }

    #[test]
    fn pads_each_row() {
        let values = [1u8, 2, 3, 4, 5, 6];
        let mut out = [0u8; 3 * 4];
        pad_rows(&values, 1, &[0, 2, 2, 6], 4, &[9], &mut out).unwrap();
        assert_eq!(out, [1, 2, 9, 9, 9, 9, 9, 9, 3, 4, 5, 6]);
        // Rows without padding copied as one run, between padded ones.
        let mut out = [0u8; 4 * 2];
        pad_rows(&values, 1, &[0, 2, 4, 5, 5], 2, &[9], &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 9, 9, 9]);
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

    #[test]
    fn pads_each_group_at_its_own_width_with_its_mask() {
        // Rows of 1, 3, 0 and 2 one-byte tokens; groups 0..2 and 2..4, widths rounded to 2.
        let offsets = [0u64, 1, 4, 4, 6];
        let ids = [1u8, 2, 3, 4, 5, 6];
        let plan = grouped_plan(&offsets, &[1], None, &[(0, 2), (2, 4)], Some(2), true).unwrap();
        assert_eq!((plan.width, plan.widths.clone()), (3, vec![3, 2]));
        let field = PadField {
            values: &ids,
            token_bytes: 1,
            pad: &[9],
            first_token: true,
        };
        let mut out = vec![0xAAu8; plan.nbytes];
        pad_fields(&offsets, &[field], &plan, &mut out).unwrap();
        let at = plan.blocks[0];
        // first_token: row 0's padding is its first token; row 2 (no tokens) takes the pad.
        assert_eq!(&out[at..at + 10], &[1, 1, 1, 2, 3, 4, 9, 9, 5, 6]);
        let mask = plan.mask_at.unwrap();
        assert_eq!(&out[mask..mask + 10], &[1, 0, 0, 1, 1, 1, 0, 0, 1, 1]);
        assert!(out[mask + 10..].iter().all(|&b| b == 0));
        // The batch's width when not narrowed, capped at it when a multiple overshoots.
        let wide = grouped_plan(&offsets, &[1], None, &[(2, 4), (0, 1)], None, false).unwrap();
        assert_eq!(wide.widths, vec![3, 3]);
        let capped = grouped_plan(&offsets, &[1], None, &[(0, 4)], Some(4), false).unwrap();
        assert_eq!(capped.widths, vec![3]);
        let err = grouped_plan(&offsets, &[1], None, &[(3, 5)], None, false).unwrap_err();
        assert!(matches!(err, crate::error::Error::Batch(_)), "{err:?}");
        assert!(
            err.to_string().contains("micro-batch 0: rows 3..5"),
            "{err}"
        );
    }
}
