//! How a producer hands a field to the codec, and what every input kind tells about rows:
//! row counts and per-row sequence lengths, checked once.

use crate::error::Result;
use crate::frame::identity::SegId;
use crate::schema::spec::FieldSpec;
use crate::tensor::TensorRef;
use crate::{batch_err, internal_err};

/// How a producer hands one field to the codec.
#[derive(Debug, Clone)]
pub enum FieldInput<'a> {
    /// CSR rows of segments: row `r` owns `segments[row_offsets[r]..row_offsets[r + 1]]`.
    /// Packed fields take 0..k segments per row; per-token fields exactly one.
    Segments {
        /// The segments, all rows' back to back.
        segments: Vec<TensorRef<'a>>,
        /// `[B+1]` offsets into `segments`, one run per row.
        row_offsets: Vec<u64>,
        /// Packed fields: each segment's identity (`frame::identity`), one per entry of
        /// `segments`; references with one id are one segment. `None`: none has one.
        ids: Option<Vec<SegId>>,
    },
    /// A per-token field already packed: rows are `values[offsets[r]..offsets[r + 1]]`.
    Jagged {
        /// All rows' tokens as one `[T, ...]` tensor.
        values: TensorRef<'a>,
        /// `[B+1]` token offsets into `values`.
        offsets: Vec<u64>,
    },
    /// A per-token field padded to `[B, L, ...]`; row `r` is `padded[r, ..lengths[r]]`.
    Padded {
        /// The `[B, L, ...]` tensor, each row padded to the longest.
        padded: TensorRef<'a>,
        /// `[B]` valid tokens per row (each at most `L`).
        lengths: Vec<u64>,
    },
    /// A scalar field as one `[B, ...]` tensor.
    Dense(TensorRef<'a>),
    /// Rows as spans of consecutive rows of a few source tensors, as frame operations gather
    /// per-token and scalar rows: bytes per span, not per row, and each span is copied as one
    /// run. Every per-token field of one gather shares one `RowSpans`.
    Ranges {
        /// The tensors the spans read rows from.
        sources: Vec<TensorRef<'a>>,
        /// Which rows of which source, in output order (shared by every per-token field of the
        /// gather).
        spans: std::sync::Arc<RowSpans>,
    },
    /// A packed field already in CSR form (a decoded `PackedTensor`): contiguous `values` whose
    /// segment `s` holds elements `seg_offsets[s]..seg_offsets[s + 1]` in shape
    /// `seg_shapes[s * rank..]`; row `r` references `row_segments[row_offsets[r]..]`.
    Csr {
        /// All segments' elements, back to back.
        values: TensorRef<'a>,
        /// `[S * rank]`: each segment's shape.
        seg_shapes: Vec<u64>,
        /// `[S+1]`: element offsets of each segment in `values`.
        seg_offsets: Vec<u64>,
        /// `[B+1]`: offsets into `row_segments`.
        row_offsets: Vec<u64>,
        /// `[R]`: the segment each of a row's items refers to, row after row.
        row_segments: Vec<u64>,
        /// `[S]`: each segment's identity, when the value carries them.
        seg_ids: Option<Vec<SegId>>,
    },
}

/// Consecutive rows `start..end` of source `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpan {
    /// The index of the source in [`RowSpans`]' items and the input's sources.
    pub source: u32,
    /// The span's first row in the source.
    pub start: u64,
    /// The row after the span's last.
    pub end: u64,
}

/// How a source's rows map to dim-0 items of its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowItems {
    /// Row `r` is item `r` (scalar fields); the source has this many rows.
    One(u64),
    /// Row `r` is items `offsets[r]..offsets[r + 1]` (per-token fields: the sequence offsets).
    Offsets(std::sync::Arc<Vec<u64>>),
}

impl RowItems {
    fn num_rows(&self) -> u64 {
        match self {
            RowItems::One(rows) => *rows,
            RowItems::Offsets(offsets) => offsets.len().saturating_sub(1) as u64,
        }
    }

    fn item(&self, row: u64) -> u64 {
        match self {
            RowItems::One(_) => row,
            RowItems::Offsets(offsets) => offsets[row as usize],
        }
    }
}

/// The rows of a `FieldInput::Ranges`: spans of rows of each source, in output order.
/// Validated at construction: every span lies within its source's rows and the offsets under
/// every span are non-decreasing (O(selected rows)), so the item arithmetic cannot underflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSpans {
    items: Vec<RowItems>,
    spans: Vec<RowSpan>,
    num_rows: u64,
}

impl RowSpans {
    /// The spans, checked against their sources' rows and offsets; an `InternalError` if a span is
    /// out of range (callers build them from validated frames).
    pub fn new(items: Vec<RowItems>, spans: Vec<RowSpan>) -> Result<RowSpans> {
        let mut num_rows = 0u64;
        for span in &spans {
            let source = items.get(span.source as usize).ok_or_else(|| {
                internal_err!("row span {span:?} names a source that does not exist")
            })?;
            if span.start > span.end || span.end > source.num_rows() {
                return Err(internal_err!(
                    "row span {span:?} lies outside its source's {} rows",
                    source.num_rows()
                ));
            }
            if let RowItems::Offsets(offsets) = source {
                let under = offsets
                    .get(span.start as usize..=span.end as usize)
                    .ok_or_else(|| internal_err!("row span {span:?} has no offsets"))?;
                // Branch-free, so it vectorises: this runs over every selected row.
                if !under.windows(2).fold(true, |ok, w| ok & (w[1] >= w[0])) {
                    return Err(internal_err!("row span {span:?}: its offsets decrease"));
                }
            }
            num_rows = num_rows
                .checked_add(span.end - span.start)
                .ok_or_else(|| batch_err!("row spans add up past 2^64 rows"))?;
        }
        Ok(RowSpans {
            items,
            spans,
            num_rows,
        })
    }

    /// The number of rows the spans add up to.
    pub fn num_rows(&self) -> u64 {
        self.num_rows
    }

    /// Each span as `(source, first item, end item)`: what it copies.
    pub fn item_runs(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        self.spans.iter().map(|span| {
            let items = &self.items[span.source as usize];
            (
                span.source as usize,
                items.item(span.start),
                items.item(span.end),
            )
        })
    }

    /// The first output row that does not hold exactly one item (`None`: every row does).
    /// O(spans) over scalar sources, whose rows are one item each by construction.
    pub fn row_not_one_item(&self) -> Option<usize> {
        if self
            .spans
            .iter()
            .all(|span| matches!(self.items.get(span.source as usize), Some(RowItems::One(_))))
        {
            return None;
        }
        self.rows().position(|(_, start, end)| end - start != 1)
    }

    /// Each row as `(source, first item, end item)`, in output order.
    pub fn rows(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        self.spans.iter().flat_map(move |span| {
            let items = &self.items[span.source as usize];
            (span.start..span.end)
                .map(move |r| (span.source as usize, items.item(r), items.item(r + 1)))
        })
    }

    /// The output's item offsets (`rows + 1` entries from 0): each span's source offsets,
    /// rebased. O(rows), one pass.
    pub fn offsets(&self) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(self.num_rows as usize + 1);
        out.push(0u64);
        let mut base = 0u64;
        for span in &self.spans {
            match &self.items[span.source as usize] {
                RowItems::One(_) => {
                    out.extend((span.start..span.end).map(|r| base + r - span.start + 1))
                }
                RowItems::Offsets(offsets) => {
                    let under = &offsets[span.start as usize..=span.end as usize];
                    let first = under[0];
                    base.checked_add(under[under.len() - 1] - first)
                        .ok_or_else(|| batch_err!("row spans hold more than 2^64 items"))?;
                    out.extend(under[1..].iter().map(|&o| base + (o - first)));
                }
            }
            base = out[out.len() - 1];
        }
        Ok(out)
    }
}

impl<'a> FieldInput<'a> {
    /// Resolves a CSR input into rows of segment views, with each reference's identity when
    /// the input carries them (O(references), no payload work).
    pub(crate) fn csr_segments(&self, spec: &FieldSpec) -> Result<Option<ResolvedRows<'a>>> {
        let FieldInput::Csr {
            values,
            seg_shapes,
            seg_offsets,
            row_offsets,
            row_segments,
            seg_ids,
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
        if let Some(ids) = seg_ids.as_ref().filter(|ids| ids.len() != n_seg) {
            return Err(batch_err!(
                "field {name:?}: {} segment ids for {n_seg} segments",
                ids.len()
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
        let ids = seg_ids
            .as_ref()
            .map(|ids| row_segments.iter().map(|&s| ids[s as usize]).collect());
        Ok(Some((segments, row_offsets.clone(), ids)))
    }
}

/// A packed input's rows of segments: the references back to back, `[B+1]` row offsets into
/// them, and each reference's identity when the input carries them.
pub(crate) type ResolvedRows<'a> = (Vec<TensorRef<'a>>, Vec<u64>, Option<Vec<SegId>>);

#[derive(Debug, Clone)]
/// One field of an encode request: its spec and how its values are handed in.
pub struct FieldData<'a> {
    /// The field's layout facts (tier, dtypes, shape).
    pub spec: FieldSpec,
    /// The field's values in one of the input kinds.
    pub input: FieldInput<'a>,
}

pub(super) fn row_count(field: &FieldData<'_>) -> Result<u64> {
    let name = &field.spec.name;
    Ok(match &field.input {
        FieldInput::Segments {
            segments,
            row_offsets,
            ..
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
        FieldInput::Ranges { sources, spans } => {
            if let Some((source, start, end)) = spans.item_runs().find(|&(s, _, end)| {
                sources
                    .get(s)
                    .is_none_or(|t| t.shape.first().is_none_or(|&n| end > n))
            }) {
                return Err(batch_err!(
                    "field {name:?}: items {start}..{end} of source {source} are out of bounds"
                ));
            }
            spans.num_rows()
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

/// The batch's sequence offsets: `rows + 1` entries from 0; row `r` holds tokens
/// `offsets[r]..offsets[r + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeqOffsets(pub Vec<u64>);

/// `[0, v0, v0 + v1, ...]`, refusing a sum past 2^64 as "`what()` add up past 2^64".
pub(crate) fn prefix_sums(
    values: impl IntoIterator<Item = u64>,
    what: &dyn Fn() -> String,
) -> Result<Vec<u64>> {
    let values = values.into_iter();
    let mut out = Vec::with_capacity(values.size_hint().0 + 1);
    let mut acc = 0u64;
    out.push(0);
    for v in values {
        acc = acc
            .checked_add(v)
            .ok_or_else(|| batch_err!("{} add up past 2^64", what()))?;
        out.push(acc);
    }
    Ok(out)
}

impl SeqOffsets {
    pub(crate) fn from_lengths(
        name: &str,
        lengths: impl IntoIterator<Item = u64>,
    ) -> Result<SeqOffsets> {
        let what = || format!("field {name:?}: sequence lengths");
        Ok(SeqOffsets(prefix_sums(lengths, &what)?))
    }

    pub(crate) fn num_rows(&self) -> usize {
        self.0.len() - 1
    }

    /// Tokens in row `row` (< `num_rows()`).
    pub(crate) fn len(&self, row: usize) -> u64 {
        self.0[row + 1] - self.0[row]
    }

    pub(crate) fn total(&self) -> u64 {
        self.0[self.0.len() - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::dtype::DType;
    use crate::schema::spec::Tier;

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
            ids: None,
        };
        assert_eq!(row_count(&data(Tier::PerToken, rows)), Ok(3));
        let jagged = FieldInput::Jagged {
            values: t(&[5]),
            offsets: vec![0, 2, 5],
        };
        assert_eq!(row_count(&data(Tier::PerToken, jagged)), Ok(2));
        let padded = FieldInput::Padded {
            padded: t(&[2, 6]),
            lengths: vec![6, 1],
        };
        assert_eq!(row_count(&data(Tier::PerToken, padded)), Ok(2));
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
        let zero_d = FieldInput::Dense(TensorRef::contiguous(DType::I64, &[], &bytes).unwrap());
        assert!(row_count(&data(Tier::Scalar, zero_d)).is_err());
    }

    #[test]
    fn row_spans_rebase_their_sources_offsets() {
        use std::sync::Arc;
        let a = RowItems::Offsets(Arc::new(vec![0, 2, 5, 5, 9]));
        let b = RowItems::Offsets(Arc::new(vec![0, 1, 4]));
        let span = |source, start, end| RowSpan { source, start, end };
        let spans = RowSpans::new(
            vec![a, b],
            vec![span(0, 1, 4), span(1, 0, 2), span(0, 0, 1)],
        )
        .unwrap();
        assert_eq!(spans.num_rows(), 6);
        assert_eq!(spans.offsets().unwrap(), vec![0, 3, 3, 7, 8, 11, 13]);
        let runs: Vec<_> = spans.item_runs().collect();
        assert_eq!(runs, vec![(0, 2, 9), (1, 0, 4), (0, 0, 2)]);
        let rows: Vec<_> = spans.rows().map(|(s, a, b)| (s, b - a)).collect();
        assert_eq!(rows, vec![(0, 3), (0, 0), (0, 4), (1, 1), (1, 3), (0, 2)]);
        let scalars = RowSpans::new(vec![RowItems::One(3)], vec![span(0, 1, 3)]).unwrap();
        assert_eq!(scalars.offsets().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn row_spans_outside_their_source_or_over_decreasing_offsets_are_refused() {
        use std::sync::Arc;
        let span = |start, end| RowSpan {
            source: 0,
            start,
            end,
        };
        let items = || vec![RowItems::Offsets(Arc::new(vec![0, 4, 2, 6]))];
        assert!(RowSpans::new(items(), vec![span(0, 4)]).is_err());
        assert!(RowSpans::new(items(), vec![span(2, 1)]).is_err());
        assert!(RowSpans::new(items(), vec![span(0, 2)]).is_err());
        assert!(RowSpans::new(items(), vec![span(2, 3)]).is_ok());
        let missing = RowSpan {
            source: 1,
            start: 0,
            end: 0,
        };
        assert!(RowSpans::new(items(), vec![missing]).is_err());
        assert!(
            RowSpans::new(vec![RowItems::Offsets(Arc::new(vec![]))], vec![span(0, 0)]).is_err()
        );
    }
}
