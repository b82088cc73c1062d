//! Rows of padded `[B, W, ...]` tensors as windows: the one run of cells a `[B, W]` mask marks
//! in each row (verl's left-padded prompt then right-padded response), the views those
//! windows cut (handed to encode with no copy of their own), and the one value the cells
//! outside them hold (a tensor's padding), found in one pass over the bytes.

#![forbid(unsafe_code)]

use crate::batch_err;
use crate::error::Result;
use crate::schema::dtype::DType;
use crate::tensor::TensorRef;

/// Each row's window: `starts[r]..starts[r] + lengths[r]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    /// The first column of each row's window.
    pub starts: Vec<u64>,
    /// Each row's window length (0: an empty row, start 0).
    pub lengths: Vec<u64>,
}

/// The element at `index` (in elements from the start of `t.bytes`) as its raw bytes.
fn element<'a>(t: &TensorRef<'a>, index: u64) -> Result<&'a [u8]> {
    let size = t.dtype.size() as u64;
    let begin = index
        .checked_mul(size)
        .ok_or_else(|| batch_err!("tensor element {index} overflows"))?;
    t.bytes
        .get(begin as usize..(begin + size) as usize)
        .ok_or_else(|| batch_err!("tensor element {index} lies outside its bytes"))
}

/// Per row, the one run of marked (nonzero) cells of `mask` (`[B, W]`, an integer or bool
/// tensor, any strides), clipped to each `skips` entry's columns `skip..W` and counted from
/// `skip`: one [`Windows`] per skip. `None` when a row's marked cells are not one run (a mask
/// with holes) or the mask is not an integer or bool tensor: the caller cuts it otherwise.
pub fn mask_windows(mask: &TensorRef<'_>, skips: &[u64]) -> Result<Option<Vec<Windows>>> {
    if !matches!(
        mask.dtype,
        DType::Bool
            | DType::U8
            | DType::I8
            | DType::I16
            | DType::U16
            | DType::I32
            | DType::U32
            | DType::I64
            | DType::U64
    ) {
        return Ok(None);
    }
    if mask.shape.len() != 2 {
        return Err(batch_err!(
            "mask must be [B, W], not shape {:?}",
            &mask.shape[..]
        ));
    }
    let (rows, width) = (mask.shape[0], mask.shape[1]);
    if let Some(&skip) = skips.iter().find(|&&s| s > width) {
        return Err(batch_err!(
            "skips: column {skip} is past the mask's {width} columns"
        ));
    }
    let (s0, s1) = (mask.strides[0], mask.strides[1]);
    let mut runs = Vec::with_capacity(rows as usize);
    for r in 0..rows {
        let marked = |c: u64| -> Result<bool> {
            let at = r
                .checked_mul(s0)
                .and_then(|a| c.checked_mul(s1).and_then(|b| a.checked_add(b)))
                .ok_or_else(|| batch_err!("mask cell ({r}, {c}) overflows"))?;
            Ok(element(mask, at)?.iter().any(|&b| b != 0))
        };
        let mut c = 0;
        while c < width && !marked(c)? {
            c += 1;
        }
        let start = c;
        while c < width && marked(c)? {
            c += 1;
        }
        let end = c;
        while c < width {
            if marked(c)? {
                return Ok(None);
            }
            c += 1;
        }
        runs.push(if end > start { (start, end) } else { (0, 0) });
    }
    Ok(Some(
        skips
            .iter()
            .map(|&skip| {
                let (starts, lengths) = runs
                    .iter()
                    .map(|&(a, b)| {
                        let (a, b) = (a.max(skip), b.max(skip));
                        if b > a {
                            (a - skip, b - a)
                        } else {
                            (0, 0)
                        }
                    })
                    .unzip();
                Windows { starts, lengths }
            })
            .collect(),
    ))
}

/// The views `t[r]` narrowed along `dim - 1` to `starts[r]..starts[r] + lengths[r]`, one per
/// row of `t` (`[B, ...]`, `dim` >= 1): no copy, each view borrows `t`'s bytes.
pub fn row_windows<'a>(
    t: &TensorRef<'a>,
    windows: &Windows,
    dim: usize,
) -> Result<Vec<TensorRef<'a>>> {
    let rows = t.shape.first().copied().unwrap_or(0);
    if dim == 0 || dim >= t.shape.len() {
        return Err(batch_err!(
            "windows along dim {dim} of a tensor of shape {:?} (dim 1 or more, below its rank)",
            &t.shape[..]
        ));
    }
    if windows.starts.len() as u64 != rows || windows.lengths.len() as u64 != rows {
        return Err(batch_err!(
            "{} window starts and {} lengths for a tensor of {rows} rows",
            windows.starts.len(),
            windows.lengths.len()
        ));
    }
    let size = t.dtype.size() as u64;
    let mut out = Vec::with_capacity(rows as usize);
    for (r, (&start, &len)) in windows.starts.iter().zip(&windows.lengths).enumerate() {
        let extent = t.shape[dim];
        if start.checked_add(len).is_none_or(|end| end > extent) {
            return Err(batch_err!(
                "row {r}: window {start}..{start}+{len} is outside dim {dim} of size {extent}"
            ));
        }
        let mut shape = t.shape;
        shape[dim] = len;
        let shape = &shape[1..];
        let strides = &t.strides[1..];
        if shape.contains(&0) {
            out.push(TensorRef::strided(t.dtype, shape, strides, &[])?);
            continue;
        }
        let begin = (r as u64)
            .checked_mul(t.strides[0])
            .and_then(|a| {
                start
                    .checked_mul(t.strides[dim])
                    .and_then(|b| a.checked_add(b))
            })
            .and_then(|e| e.checked_mul(size))
            .filter(|&b| b <= t.bytes.len() as u64)
            .ok_or_else(|| batch_err!("row {r}: its window lies outside the tensor's bytes"))?;
        out.push(TensorRef::strided(
            t.dtype,
            shape,
            strides,
            &t.bytes[begin as usize..],
        )?);
    }
    Ok(out)
}

/// How two elements of a dtype compare under torch's `==`: floats by value (`-0.0 == 0.0`,
/// NaN equal to nothing), everything else by its bits.
fn equal(dtype: DType, a: &[u8], b: &[u8]) -> bool {
    // (sign, exponent, mantissa) masks of an IEEE float's bits.
    let float = |a: u64, b: u64, sign: u64, exp: u64, mant: u64| {
        let nan = |x: u64| x & exp == exp && x & mant != 0;
        !nan(a) && !nan(b) && (a == b || (a & !sign == 0 && b & !sign == 0))
    };
    let bits = |x: &[u8]| {
        x.iter()
            .rev()
            .fold(0u64, |acc, &byte| (acc << 8) | byte as u64)
    };
    let (x, y) = (bits(a), bits(b));
    match dtype {
        DType::F16 => float(x, y, 0x8000, 0x7C00, 0x03FF),
        DType::BF16 => float(x, y, 0x8000, 0x7F80, 0x007F),
        DType::F32 => float(x, y, 0x8000_0000, 0x7F80_0000, 0x007F_FFFF),
        DType::F64 => float(
            x,
            y,
            0x8000_0000_0000_0000,
            0x7FF0_0000_0000_0000,
            0x000F_FFFF_FFFF_FFFF,
        ),
        // No infinities: its one NaN pattern is every exponent and mantissa bit set.
        DType::F8E4M3 => x & 0x7F != 0x7F && y & 0x7F != 0x7F && (x == y || (x | y) & 0x7F == 0),
        DType::F8E5M2 => float(x, y, 0x80, 0x7C, 0x03),
        DType::C64 => equal(DType::F32, &a[..4], &b[..4]) && equal(DType::F32, &a[4..], &b[4..]),
        DType::C128 => equal(DType::F64, &a[..8], &b[..8]) && equal(DType::F64, &a[8..], &b[8..]),
        _ => a == b,
    }
}

/// Whether every element of `t` (`[B, W, ...]`, any strides) outside the row windows (along
/// dim 1) equals the first such element under torch's `==`: that element's row and column,
/// or `None` when they differ or no cell lies outside (no padding to record).
pub fn uniform_outside(t: &TensorRef<'_>, windows: &Windows) -> Result<Option<(u64, u64)>> {
    if t.shape.len() < 2 {
        return Err(batch_err!(
            "padding of a tensor of shape {:?} (needs [B, W, ...])",
            &t.shape[..]
        ));
    }
    let (rows, width) = (t.shape[0], t.shape[1]);
    if windows.starts.len() as u64 != rows || windows.lengths.len() as u64 != rows {
        return Err(batch_err!(
            "{} window starts and {} lengths for a tensor of {rows} rows",
            windows.starts.len(),
            windows.lengths.len()
        ));
    }
    let tail = &t.shape[2..];
    if tail.contains(&0) {
        return Ok(None);
    }
    let per_cell: u64 = tail.iter().product();
    let mut first: Option<(&[u8], (u64, u64))> = None;
    for r in 0..rows {
        let (start, len) = (windows.starts[r as usize], windows.lengths[r as usize]);
        let end = start
            .checked_add(len)
            .filter(|&e| e <= width)
            .ok_or_else(|| batch_err!("row {r}: window {start}+{len} is past width {width}"))?;
        for c in (0..start).chain(end..width) {
            let overflow = || batch_err!("cell ({r}, {c}) overflows");
            let cell = r
                .checked_mul(t.strides[0])
                .and_then(|a| c.checked_mul(t.strides[1]).and_then(|b| a.checked_add(b)))
                .ok_or_else(overflow)?;
            // Every element of the cell's trailing dims (C order).
            for k in 0..per_cell {
                let (mut rest, mut at) = (k, cell);
                for (&dim, &stride) in tail.iter().zip(&t.strides[2..]).rev() {
                    at = (rest % dim)
                        .checked_mul(stride)
                        .and_then(|o| at.checked_add(o))
                        .ok_or_else(overflow)?;
                    rest /= dim;
                }
                let value = element(t, at)?;
                match first {
                    None => first = Some((value, (r, c))),
                    Some((want, _)) if !equal(t.dtype, want, value) => return Ok(None),
                    Some(_) => {}
                }
            }
        }
    }
    // A lone NaN equals nothing, itself included (torch: `(cells == first).all()` is False).
    Ok(first
        .filter(|(want, _)| equal(t.dtype, want, want))
        .map(|(_, at)| at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i64s(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn windows_of_a_left_and_right_padded_mask() {
        // Row 0: prompt cols 1..3, response 3..4; row 1: response only; row 2: empty.
        let bytes = i64s(&[0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
        let mask = TensorRef::contiguous(DType::I64, &[3, 5], &bytes).unwrap();
        let got = mask_windows(&mask, &[0, 3]).unwrap().unwrap();
        assert_eq!(got[0].starts, vec![1, 3, 0]);
        assert_eq!(got[0].lengths, vec![3, 2, 0]);
        assert_eq!(got[1].starts, vec![0, 0, 0]);
        assert_eq!(got[1].lengths, vec![1, 2, 0]);
    }

    #[test]
    fn a_mask_with_holes_has_no_windows() {
        let bytes = i64s(&[1, 0, 1]);
        let mask = TensorRef::contiguous(DType::I64, &[1, 3], &bytes).unwrap();
        assert_eq!(mask_windows(&mask, &[0]).unwrap(), None);
        let floats: Vec<u8> = [1f32, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let float_mask = TensorRef::contiguous(DType::F32, &[1, 2], &floats).unwrap();
        assert_eq!(mask_windows(&float_mask, &[0]).unwrap(), None);
    }

    #[test]
    fn row_windows_are_views_and_refuse_what_lies_outside() {
        let bytes = i64s(&(0..12).collect::<Vec<_>>());
        let t = TensorRef::contiguous(DType::I64, &[2, 6], &bytes).unwrap();
        let w = Windows {
            starts: vec![1, 4],
            lengths: vec![2, 2],
        };
        let views = row_windows(&t, &w, 1).unwrap();
        assert_eq!(views[0].to_i64_vec().unwrap(), vec![1, 2]);
        assert_eq!(views[1].to_i64_vec().unwrap(), vec![10, 11]);
        let past = Windows {
            starts: vec![1, 5],
            lengths: vec![2, 2],
        };
        let err = row_windows(&t, &past, 1).unwrap_err();
        assert!(err.message().contains("row 1"), "{}", err.message());
    }

    #[test]
    fn padding_is_uniform_by_torch_equality() {
        let w = Windows {
            starts: vec![1],
            lengths: vec![1],
        };
        let floats = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let zeros = floats(&[-0.0, 5.0, 0.0]);
        let t = TensorRef::contiguous(DType::F32, &[1, 3], &zeros).unwrap();
        assert_eq!(uniform_outside(&t, &w).unwrap(), Some((0, 0)));
        let nan = floats(&[f32::NAN, 5.0, f32::NAN]);
        let t = TensorRef::contiguous(DType::F32, &[1, 3], &nan).unwrap();
        assert_eq!(uniform_outside(&t, &w).unwrap(), None);
        let mixed = i64s(&[7, 1, 8]);
        let t = TensorRef::contiguous(DType::I64, &[1, 3], &mixed).unwrap();
        assert_eq!(uniform_outside(&t, &w).unwrap(), None);
        let full = Windows {
            starts: vec![0],
            lengths: vec![3],
        };
        assert_eq!(uniform_outside(&t, &full).unwrap(), None);
    }
}
