//! Borrowed views of caller memory: a dtype, a shape and element strides over a byte slice.

#![forbid(unsafe_code)]

use crate::batch_err;
use crate::error::Result;
use crate::schema::dtype::DType;

/// The most dims a tensor may have (torch's own limit is 64; real batches use at most 5).
pub const MAX_RANK: usize = 8;

/// A shape or stride list stored inline: views are made per row, and allocating two vectors
/// per row is a measurable share of encoding many small rows.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Dims {
    len: u8,
    dims: [u64; MAX_RANK],
}

impl Dims {
    /// The dims, or a `BatchError` past [`MAX_RANK`].
    pub fn new(dims: &[u64]) -> Result<Dims> {
        if dims.len() > MAX_RANK {
            return Err(batch_err!(
                "tensor has {} dims; py_wire supports up to {MAX_RANK}",
                dims.len()
            ));
        }
        let mut out = Dims {
            len: dims.len() as u8,
            dims: [0; MAX_RANK],
        };
        out.dims[..dims.len()].copy_from_slice(dims);
        Ok(out)
    }
}

impl std::ops::Deref for Dims {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        &self.dims[..self.len as usize]
    }
}

impl std::ops::DerefMut for Dims {
    fn deref_mut(&mut self) -> &mut [u64] {
        &mut self.dims[..self.len as usize]
    }
}

impl<'d> IntoIterator for &'d Dims {
    type Item = &'d u64;
    type IntoIter = std::slice::Iter<'d, u64>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A strided tensor over borrowed bytes. `bytes` starts at the first element and covers the
/// tensor's whole extent; strides are in elements and never negative.
#[derive(Debug, Clone)]
pub struct TensorRef<'a> {
    /// The element type.
    pub dtype: DType,
    /// The size of each dim.
    pub shape: Dims,
    /// Each dim's stride, in elements.
    pub strides: Dims,
    /// The tensor's bytes, from its first element to the end of its extent.
    pub bytes: &'a [u8],
}

/// Row-major (C-order) strides for `shape`, in elements.
pub fn contiguous_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    let mut acc = 1u64;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        acc = acc.saturating_mul(dim.max(1));
    }
    strides
}

/// Whether elements lie in C order without gaps, as torch's `is_contiguous()` defines it:
/// dims of size 1 may have any stride, and a tensor with no elements is contiguous.
pub fn is_c_contiguous(shape: &[u64], strides: &[u64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1u64;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected = expected.saturating_mul(dim);
    }
    true
}

/// Number of elements, or `None` on overflow.
pub fn checked_numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// The offset from `base` of `extent` bytes at address `ptr`, when they lie inside the
/// allocation of `len` bytes at `base` (checked arithmetic: nothing wraps); `None` otherwise.
/// Both tensor readers check a row's bytes against its storage with this rule.
pub fn span_in_storage(ptr: usize, extent: u64, base: usize, len: usize) -> Option<usize> {
    let offset = ptr.checked_sub(base)?;
    let end = usize::try_from(extent).ok()?.checked_add(offset)?;
    (end <= len).then_some(offset)
}

/// Bytes spanned from the first to one past the last element, or `None` on overflow.
pub fn extent_bytes(shape: &[u64], strides: &[u64], elem_size: usize) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    let mut last = 0u64;
    for (&dim, &stride) in shape.iter().zip(strides) {
        last = last.checked_add((dim - 1).checked_mul(stride)?)?;
    }
    last.checked_add(1)?.checked_mul(elem_size as u64)
}

impl<'a> TensorRef<'a> {
    /// A view with explicit strides; fails if the extent does not fit in `bytes`.
    pub fn strided(dtype: DType, shape: &[u64], strides: &[u64], bytes: &'a [u8]) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(batch_err!(
                "tensor has {} dims but {} strides",
                shape.len(),
                strides.len()
            ));
        }
        checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size() as u64))
            .ok_or_else(|| batch_err!("tensor shape {shape:?} overflows"))?;
        let extent = extent_bytes(shape, strides, dtype.size())
            .ok_or_else(|| batch_err!("tensor shape {shape:?} overflows"))?;
        if extent > bytes.len() as u64 {
            return Err(batch_err!(
                "tensor of shape {shape:?} and strides {strides:?} spans {extent} bytes but \
                 only {} are available",
                bytes.len()
            ));
        }
        Ok(TensorRef {
            dtype,
            shape: Dims::new(shape)?,
            strides: Dims::new(strides)?,
            bytes: &bytes[..extent as usize],
        })
    }

    /// A C-contiguous view.
    pub fn contiguous(dtype: DType, shape: &[u64], bytes: &'a [u8]) -> Result<Self> {
        let strides = contiguous_strides(shape);
        Self::strided(dtype, shape, &strides, bytes)
    }

    /// The element count (its product was checked at construction).
    pub fn numel(&self) -> u64 {
        // Checked at construction.
        self.shape.iter().product()
    }

    /// The bytes the elements take when packed contiguously (not the extent of `bytes`).
    pub fn nbytes(&self) -> u64 {
        self.numel() * self.dtype.size() as u64
    }

    /// Whether the elements are laid out in C order without gaps (size-1 dims may have any
    /// stride, as in torch).
    pub fn is_contiguous(&self) -> bool {
        is_c_contiguous(&self.shape, &self.strides)
    }

    /// The values of a 1-D integer tensor, widened to i64.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        let mut out = Vec::new();
        self.append_i64(&mut out)?;
        Ok(out)
    }

    /// Appends the values of a 1-D integer tensor to `out`, widened to i64: one loop per
    /// dtype (a token scan reads every token of a batch through here).
    pub fn append_i64(&self, out: &mut Vec<i64>) -> Result<()> {
        if self.shape.len() != 1 {
            return Err(batch_err!(
                "expected a 1-D integer tensor, got shape {:?}",
                self.shape
            ));
        }
        let (n, stride) = (self.shape[0] as usize, self.strides[0] as usize);
        let bytes = self.bytes;
        match self.dtype {
            DType::I64 | DType::U64 => widen(bytes, n, stride, out, i64::from_le_bytes),
            DType::I32 => widen(bytes, n, stride, out, |b| i32::from_le_bytes(b) as i64),
            DType::U32 => widen(bytes, n, stride, out, |b| u32::from_le_bytes(b) as i64),
            DType::I16 => widen(bytes, n, stride, out, |b| i16::from_le_bytes(b) as i64),
            DType::U16 => widen(bytes, n, stride, out, |b| u16::from_le_bytes(b) as i64),
            DType::I8 => widen(bytes, n, stride, out, |b: [u8; 1]| b[0] as i8 as i64),
            DType::U8 => widen(bytes, n, stride, out, |b: [u8; 1]| b[0] as i64),
            other => Err(batch_err!(
                "expected an integer tensor, got {}",
                other.name()
            )),
        }
    }

    /// The sub-tensor `self[start .. start + len]` along dim 0.
    pub fn narrow0(&self, start: u64, len: u64) -> Result<TensorRef<'a>> {
        let dim0 = self.shape.first().copied().unwrap_or(0);
        let end = start
            .checked_add(len)
            .filter(|&e| e <= dim0)
            .ok_or_else(|| {
                batch_err!("range {start}..{start}+{len} is outside dim 0 of size {dim0}")
            })?;
        let mut shape = self.shape;
        shape[0] = end - start;
        if shape.contains(&0) {
            return TensorRef::strided(self.dtype, &shape, &self.strides, &[]);
        }
        let begin = start
            .checked_mul(self.strides[0])
            .and_then(|e| e.checked_mul(self.dtype.size() as u64))
            .filter(|&b| b <= self.bytes.len() as u64)
            .ok_or_else(|| batch_err!("narrowed view overflows"))?;
        TensorRef::strided(
            self.dtype,
            &shape,
            &self.strides,
            &self.bytes[begin as usize..],
        )
    }
}

/// Appends `n` elements of `N` bytes each, `stride` elements apart in `bytes`, converted by
/// `value`; a contiguous run is read in one pass the compiler vectorises.
fn widen<const N: usize>(
    bytes: &[u8],
    n: usize,
    stride: usize,
    out: &mut Vec<i64>,
    value: impl Fn([u8; N]) -> i64,
) -> Result<()> {
    let outside = || {
        batch_err!(
            "a tensor of {n} elements lies outside its {} bytes",
            bytes.len()
        )
    };
    let element = |chunk: &[u8]| <[u8; N]>::try_from(chunk).map_or(0, &value);
    if stride == 1 || n <= 1 {
        let len = n.checked_mul(N).ok_or_else(outside)?;
        let run = bytes.get(..len).ok_or_else(outside)?;
        out.extend(run.chunks_exact(N).map(element));
        return Ok(());
    }
    let step = stride.checked_mul(N).ok_or_else(outside)?;
    let last = (n - 1).checked_mul(step).ok_or_else(outside)?;
    bytes.get(last..last + N).ok_or_else(outside)?;
    out.extend((0..n).map(|i| element(&bytes[i * step..i * step + N])));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_extent() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(extent_bytes(&[2, 3], &[3, 1], 4), Some(24));
        assert_eq!(extent_bytes(&[2, 3], &[1, 2], 4), Some(24));
        assert_eq!(extent_bytes(&[0, 3], &[3, 1], 4), Some(0));
        assert_eq!(extent_bytes(&[u64::MAX, 2], &[2, 1], 8), None);
    }

    #[test]
    fn rejects_short_bytes() {
        let bytes = [0u8; 20];
        assert!(TensorRef::contiguous(DType::F32, &[2, 3], &bytes).is_err());
        assert!(TensorRef::contiguous(DType::F32, &[5], &bytes).is_ok());
    }

    #[test]
    fn contiguity() {
        let bytes = [0u8; 96];
        let t = TensorRef::strided(DType::F32, &[3, 2], &[1, 3], &bytes).unwrap();
        assert!(!t.is_contiguous());
        let t = TensorRef::strided(DType::F32, &[1, 6], &[99, 1], &bytes).unwrap();
        assert!(t.is_contiguous());
    }

    /// Every integer dtype, contiguous and strided (stride 1-3, zero and one elements),
    /// against each element read on its own; floats are refused.
    #[test]
    fn append_i64_widens_every_integer_dtype() {
        let bytes: Vec<u8> = (0u8..=255).map(|b| b.wrapping_mul(37)).collect();
        let ints = [
            DType::I64,
            DType::U64,
            DType::I32,
            DType::U32,
            DType::I16,
            DType::U16,
            DType::I8,
            DType::U8,
        ];
        for dtype in ints {
            let es = dtype.size();
            for stride in 1..=3u64 {
                for n in [0u64, 1, 2, 7] {
                    let t = TensorRef::strided(dtype, &[n], &[stride], &bytes).unwrap();
                    let mut got = vec![-1];
                    t.append_i64(&mut got).unwrap();
                    let expected: Vec<i64> = std::iter::once(-1)
                        .chain((0..n as usize).map(|i| {
                            let at = i * stride as usize * es;
                            let mut le = [0u8; 8];
                            le[..es].copy_from_slice(&bytes[at..at + es]);
                            let raw = u64::from_le_bytes(le);
                            let shift = 64 - 8 * es as u32;
                            match dtype {
                                DType::U8 | DType::U16 | DType::U32 | DType::U64 => raw as i64,
                                _ => ((raw << shift) as i64) >> shift,
                            }
                        }))
                        .collect();
                    assert_eq!(got, expected, "{dtype:?} n={n} stride={stride}");
                }
            }
        }
        let t = TensorRef::contiguous(DType::F32, &[2], &bytes).unwrap();
        assert!(t.append_i64(&mut Vec::new()).is_err());
        let t = TensorRef::contiguous(DType::I32, &[2, 2], &bytes).unwrap();
        assert!(t.to_i64_vec().is_err());
    }
}
