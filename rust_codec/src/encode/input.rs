//! How a producer hands a field to the codec, and what every input kind tells about rows:
//! row counts and per-row sequence lengths, checked once.

use crate::error::Result;
use crate::spec::FieldSpec;
use crate::tensor::TensorRef;
use crate::{batch_err, schema_err};

/// How a producer hands one field to the codec.
#[derive(Debug, Clone)]
pub enum FieldInput<'a> {
    /// CSR rows of segments: row `r` owns `segments[row_offsets[r]..row_offsets[r + 1]]`.
    /// Packed fields take 0..k segments per row; per-token fields exactly one.
    Segments {
        segments: Vec<TensorRef<'a>>,
        row_offsets: Vec<u64>,
    },
    /// A per-token field already packed: rows are `values[offsets[r]..offsets[r + 1]]`.
    Jagged {
        values: TensorRef<'a>,
        offsets: Vec<u64>,
    },
    /// A per-token field padded to `[B, L, ...]`; row `r` is `padded[r, ..lengths[r]]`.
    Padded {
        padded: TensorRef<'a>,
        lengths: Vec<u64>,
    },
    /// A scalar field as one `[B, ...]` tensor.
    Dense(TensorRef<'a>),
    /// Rows as dim-0 ranges of a few source tensors, as frame operations gather per-token and
    /// scalar rows: 24 bytes per row instead of a view per row, and consecutive ranges of one
    /// source are copied as one run. Per-token rows are `sources[s][start..end]`; scalar rows
    /// are one item each (`end == start + 1`).
    Ranges {
        sources: Vec<TensorRef<'a>>,
        /// Shared by every field whose rows are the same ranges (all per-token fields).
        ranges: std::sync::Arc<[RowRange]>,
    },
    /// A packed field already in CSR form (a decoded `PackedTensor`): contiguous `values` whose
    /// segment `s` holds elements `seg_offsets[s]..seg_offsets[s + 1]` in shape
    /// `seg_shapes[s * rank..]`; row `r` references `row_segments[row_offsets[r]..]`.
    Csr {
        values: TensorRef<'a>,
        seg_shapes: Vec<u64>,
        seg_offsets: Vec<u64>,
        row_offsets: Vec<u64>,
        row_segments: Vec<u64>,
    },
}

/// One row of a `FieldInput::Ranges`: dim-0 items `start..end` of source `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRange {
    pub source: u32,
    pub start: u64,
    pub end: u64,
}

impl<'a> FieldInput<'a> {
    /// Resolves a CSR input into rows of segment views (O(references), no payload work).
    pub(crate) fn csr_segments(
        &self,
        spec: &FieldSpec,
    ) -> Result<Option<(Vec<TensorRef<'a>>, Vec<u64>)>> {
        let FieldInput::Csr {
            values,
            seg_shapes,
            seg_offsets,
            row_offsets,
            row_segments,
        } = self
        else {
            return Ok(None);
        };
        let name = &spec.name;
        let rank = spec.shape.len();
        if !values.is_contiguous() || values.dtype != spec.dtype {
            return Err(batch_err!(
                "field {name:?}: packed values must be contiguous {}",
                spec.dtype.name()
            ));
        }
        let n_seg = seg_offsets.len().saturating_sub(1);
        if seg_shapes.len() != n_seg * rank {
            return Err(batch_err!(
                "field {name:?}: {} segment dims for {n_seg} segments of rank {rank}",
                seg_shapes.len()
            ));
        }
        let es = values.dtype.size() as u64;
        let numel = values.numel();
        let mut physical = Vec::with_capacity(n_seg);
        for (s, shape) in seg_shapes.chunks_exact(rank.max(1)).enumerate().take(n_seg) {
            let (a, b) = (seg_offsets[s], seg_offsets[s + 1]);
            let count = crate::tensor::checked_numel(shape);
            if b < a || b > numel || count != Some(b - a) {
                return Err(batch_err!(
                    "field {name:?}: segment {s} of shape {shape:?} does not fit elements \
                     {a}..{b} of {numel}"
                ));
            }
            let bytes = &values.bytes[(a * es) as usize..(b * es) as usize];
            physical.push(TensorRef::contiguous(values.dtype, shape, bytes)?);
        }
        let mut segments = Vec::with_capacity(row_segments.len());
        for (i, &id) in row_segments.iter().enumerate() {
            let seg = physical.get(id as usize).ok_or_else(|| {
                batch_err!("field {name:?}: row_segments[{i}] = {id} is not a segment id")
            })?;
            segments.push(seg.clone());
        }
        Ok(Some((segments, row_offsets.clone())))
    }
}

#[derive(Debug, Clone)]
pub struct FieldData<'a> {
    pub spec: FieldSpec,
    pub input: FieldInput<'a>,
}

pub(super) fn row_count(field: &FieldData<'_>) -> Result<u64> {
    let name = &field.spec.name;
    Ok(match &field.input {
        FieldInput::Segments {
            segments,
            row_offsets,
        } => {
            check_offsets(name, "row offsets", row_offsets)?;
            let (first, last) = (row_offsets[0], row_offsets[row_offsets.len() - 1]);
            if first != 0 || last != segments.len() as u64 {
                return Err(batch_err!(
                    "field {name:?}: row offsets span {first}..{last} but there are {} segments",
                    segments.len()
                ));
            }
            row_offsets.len() as u64 - 1
        }
        FieldInput::Jagged { offsets, .. } => {
            check_offsets(name, "jagged offsets", offsets)?;
            offsets.len() as u64 - 1
        }
        FieldInput::Padded { padded, lengths } => {
            let rows = padded.shape.first().copied().unwrap_or(0);
            if padded.shape.len() < 2 || lengths.len() as u64 != rows {
                return Err(batch_err!(
                    "field {name:?}: a padded tensor must be [B, L, ...] with B lengths; got \
                     shape {:?} and {} lengths",
                    padded.shape,
                    lengths.len()
                ));
            }
            rows
        }
        FieldInput::Csr { row_offsets, .. } => {
            check_offsets(name, "row offsets", row_offsets)?;
            row_offsets.len() as u64 - 1
        }
        FieldInput::Ranges { sources, ranges } => {
            if let Some((row, r)) = ranges.iter().enumerate().find(|(_, r)| {
                r.end < r.start
                    || sources
                        .get(r.source as usize)
                        .is_none_or(|t| t.shape.first().is_none_or(|&n| r.end > n))
            }) {
                return Err(batch_err!(
                    "field {name:?}, row {row}: range {}..{} of source {} is out of bounds",
                    r.start,
                    r.end,
                    r.source
                ));
            }
            ranges.len() as u64
        }
        FieldInput::Dense(t) => *t.shape.first().ok_or_else(|| {
            batch_err!("field {name:?}: a scalar field needs a [B, ...] tensor, got a 0-d tensor")
        })?,
    })
}

fn check_offsets(name: &str, what: &str, offsets: &[u64]) -> Result<()> {
    if offsets.is_empty() {
        return Err(batch_err!(
            "field {name:?}: {what} are empty (need rows + 1)"
        ));
    }
    if let Some(r) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(batch_err!(
            "field {name:?}: {what} decrease at row {r}: {} then {}",
            offsets[r],
            offsets[r + 1]
        ));
    }
    Ok(())
}

/// Per-row sequence lengths of the sequence field.
pub(super) fn sequence_lengths(field: &FieldData<'_>) -> Result<Vec<u64>> {
    Ok(match &field.input {
        FieldInput::Segments {
            segments,
            row_offsets,
        } => {
            let mut lengths = Vec::with_capacity(row_offsets.len() - 1);
            for (row, w) in row_offsets.windows(2).enumerate() {
                if w[1] - w[0] != 1 {
                    return Err(batch_err!(
                        "field {:?}, row {row}: a per-token field needs exactly one tensor per \
                         row, found {}",
                        field.spec.name,
                        w[1] - w[0]
                    ));
                }
                let seg = &segments[w[0] as usize];
                lengths.push(*seg.shape.first().ok_or_else(|| {
                    batch_err!(
                        "field {:?}, row {row}: a per-token row needs a sequence dim, got a \
                         0-d tensor",
                        field.spec.name
                    )
                })?);
            }
            lengths
        }
        FieldInput::Jagged { offsets, .. } => offsets.windows(2).map(|w| w[1] - w[0]).collect(),
        FieldInput::Padded { lengths, .. } => lengths.clone(),
        FieldInput::Ranges { ranges, .. } => ranges.iter().map(|r| r.end - r.start).collect(),
        FieldInput::Dense(_) | FieldInput::Csr { .. } => {
            return Err(schema_err!(
                "sequence field {:?} must be per-token",
                field.spec.name
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::spec::Tier;

    fn data<'a>(tier: Tier, input: FieldInput<'a>) -> FieldData<'a> {
        FieldData {
            spec: FieldSpec {
                name: "x".into(),
                tier,
                dtype: DType::I64,
                wire_dtype: None,
                shape: vec![],
                pack_dim: 0,
            },
            input,
        }
    }

    #[test]
    fn each_input_kind_counts_its_rows() {
        let bytes = [0u8; 96];
        let t = |shape: &[u64]| TensorRef::contiguous(DType::I64, shape, &bytes).unwrap();
        let rows = FieldInput::Segments {
            segments: vec![t(&[2]), t(&[0]), t(&[3])],
            row_offsets: vec![0, 1, 2, 3],
        };
        assert_eq!(row_count(&data(Tier::PerToken, rows.clone())), Ok(3));
        assert_eq!(
            sequence_lengths(&data(Tier::PerToken, rows)),
            Ok(vec![2, 0, 3])
        );
        let jagged = FieldInput::Jagged {
            values: t(&[5]),
            offsets: vec![0, 2, 5],
        };
        assert_eq!(row_count(&data(Tier::PerToken, jagged)), Ok(2));
        let padded = FieldInput::Padded {
            padded: t(&[2, 6]),
            lengths: vec![6, 1],
        };
        assert_eq!(
            sequence_lengths(&data(Tier::PerToken, padded)),
            Ok(vec![6, 1])
        );
        assert_eq!(
            row_count(&data(Tier::Scalar, FieldInput::Dense(t(&[4])))),
            Ok(4)
        );
    }

    #[test]
    fn bad_offsets_and_rows_are_refused() {
        let bytes = [0u8; 16];
        let t = TensorRef::contiguous(DType::I64, &[2], &bytes).unwrap();
        let decreasing = FieldInput::Jagged {
            values: t.clone(),
            offsets: vec![0, 2, 1],
        };
        assert!(row_count(&data(Tier::PerToken, decreasing)).is_err());
        let two_per_row = FieldInput::Segments {
            segments: vec![t.clone(), t],
            row_offsets: vec![0, 2],
        };
        let err = sequence_lengths(&data(Tier::PerToken, two_per_row)).unwrap_err();
        assert!(
            err.message().contains("exactly one tensor per row"),
            "{err}"
        );
        let zero_d = FieldInput::Dense(TensorRef::contiguous(DType::I64, &[], &bytes).unwrap());
        assert!(row_count(&data(Tier::Scalar, zero_d)).is_err());
    }
}
