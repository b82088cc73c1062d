//! The per-token tier: per row one tensor whose first dim is the row's sequence length, stored
//! as one `[tokens, ...]` values tensor cut by the sequence offsets; a gather copies spans of
//! tokens.

use std::sync::Arc;

use crate::encode::input::{FieldData, FieldInput, RowSpans, SeqOffsets};
use crate::encode::layout::Layout;
use crate::error::{Code, Error, Result};
use crate::schema::spec::FieldSpec;
use crate::tensor::TensorRef;
use crate::{batch_err, internal_err, schema_err};

use super::check::{check_dims, check_dtype, Where};
use super::codec::{span_views, PlanBatch, Sequence, TierCodec};
use super::rules::Tier;

/// Per row one tensor whose first dim is the row's sequence length.
pub(super) struct PerToken;

impl TierCodec for PerToken {
    fn tier(&self) -> Tier {
        Tier::PerToken
    }

    fn plan<'a>(
        &self,
        layout: &mut Layout<'a>,
        field: &FieldData<'a>,
        batch: &PlanBatch<'_>,
    ) -> Result<()> {
        let seq = batch
            .sequence
            .ok_or_else(|| internal_err!("per-token field without sequence lengths"))?;
        plan_per_token(layout, field, seq)
    }

    fn token_offsets(&self, field: &FieldData<'_>) -> Result<Option<SeqOffsets>> {
        sequence_offsets(field).map(Some)
    }
}

/// The sequence field's offsets, after `row_count` checked its input's own tables.
fn sequence_offsets(field: &FieldData<'_>) -> Result<SeqOffsets> {
    let name = &field.spec.name;
    match &field.input {
        FieldInput::Segments {
            segments,
            row_offsets,
            ..
        } => {
            let mut lengths = Vec::with_capacity(row_offsets.len() - 1);
            for (row, w) in row_offsets.windows(2).enumerate() {
                if w[1] - w[0] != 1 {
                    return Err(batch_err!(
                        "field {name:?}, row {row}: a per-token field needs exactly one tensor \
                         per row, found {}",
                        w[1] - w[0]
                    ));
                }
                let seg = &segments[w[0] as usize];
                lengths.push(*seg.shape.first().ok_or_else(|| {
                    batch_err!(
                        "field {name:?}, row {row}: a per-token row needs a sequence dim, got a \
                         0-d tensor"
                    )
                })?);
            }
            SeqOffsets::from_lengths(name, lengths)
        }
        FieldInput::Jagged { offsets, .. } => {
            let first = offsets.first().copied().unwrap_or(0);
            Ok(SeqOffsets(offsets.iter().map(|&o| o - first).collect()))
        }
        FieldInput::Padded { lengths, .. } => {
            SeqOffsets::from_lengths(name, lengths.iter().copied())
        }
        FieldInput::Ranges { spans, .. } => Ok(SeqOffsets(spans.offsets()?)),
        FieldInput::Dense(_) | FieldInput::Csr { .. } => {
            Err(schema_err!("sequence field {name:?} must be per-token"))
        }
    }
}

fn plan_per_token<'a>(
    layout: &mut Layout<'a>,
    field: &FieldData<'a>,
    seq: &Sequence<'_>,
) -> Result<()> {
    let spec = &field.spec;
    let mut values_shape = vec![seq.offsets.total()];
    values_shape.extend(spec.shape.iter().map(|d| d.unwrap_or(0)));
    let sources = match &field.input {
        FieldInput::Segments {
            segments,
            row_offsets,
            ..
        } => token_rows_of_segments(spec, seq, segments, row_offsets)?,
        FieldInput::Jagged { values, offsets } => {
            vec![token_rows_of_jagged(spec, seq, values, offsets)?]
        }
        FieldInput::Padded { padded, lengths } => token_rows_of_padded(spec, seq, padded, lengths)?,
        FieldInput::Ranges { sources, spans } => token_rows_of_ranges(spec, seq, sources, spans)?,
        FieldInput::Dense(_) | FieldInput::Csr { .. } => {
            return Err(batch_err!(
                "field {:?} is per-token: pass a list of per-row tensors, a jagged nested \
                 tensor, or a padded tensor with lengths",
                spec.name
            ))
        }
    };
    layout.values(spec, values_shape, sources)
}

/// A per-token field's row `row` has `found` tokens, not the sequence field's count.
fn length_mismatch(spec: &FieldSpec, seq: &Sequence<'_>, row: usize, found: u64) -> Error {
    batch_err!(
        "field {:?}, row {row}: sequence length {found} but {:?} has {} tokens in that row",
        spec.name,
        seq.name,
        seq.offsets.len(row)
    )
    .code(Code::Length)
    .field(&spec.name)
    .row(row)
    .expected(seq.offsets.len(row))
    .found(found)
}

/// A per-token tensor's dtype, its sequence dim (`no_seq_dim` when it has none) and its
/// trailing dims.
fn check_token_tensor(
    spec: &FieldSpec,
    t: &TensorRef<'_>,
    location: Where,
    no_seq_dim: &str,
) -> Result<()> {
    check_dtype(spec, t, location)?;
    if t.shape.is_empty() {
        return Err(batch_err!("field {:?}{location}: {no_seq_dim}", spec.name));
    }
    check_dims(spec, &t.shape[1..], &spec.shape, location, "trailing dims")
}

/// Per-row tensors: exactly one a row, each as long as the sequence field's row.
fn token_rows_of_segments<'a>(
    spec: &FieldSpec,
    seq: &Sequence<'_>,
    segments: &[TensorRef<'a>],
    row_offsets: &[u64],
) -> Result<Vec<TensorRef<'a>>> {
    let mut sources = Vec::with_capacity(segments.len());
    for (row, w) in row_offsets.windows(2).enumerate() {
        if w[1] - w[0] != 1 {
            return Err(batch_err!(
                "field {:?}, row {row}: a per-token field needs exactly one tensor per row, \
                 found {}",
                spec.name,
                w[1] - w[0]
            ));
        }
        let t = &segments[w[0] as usize];
        let no_seq_dim = "a per-token row needs a sequence dim, got a 0-d tensor";
        check_token_tensor(spec, t, Where::Row(row), no_seq_dim)?;
        if t.shape[0] != seq.offsets.len(row) {
            return Err(length_mismatch(spec, seq, row, t.shape[0]));
        }
        sources.push(t.clone());
    }
    Ok(sources)
}

/// A jagged tensor: its rows' lengths must be the sequence field's; one view of the tokens
/// its offsets cover.
fn token_rows_of_jagged<'a>(
    spec: &FieldSpec,
    seq: &Sequence<'_>,
    values: &TensorRef<'a>,
    offsets: &[u64],
) -> Result<TensorRef<'a>> {
    check_token_tensor(
        spec,
        values,
        Where::Field,
        "jagged values need a sequence dim",
    )?;
    for (row, w) in offsets.windows(2).enumerate() {
        if w[1] - w[0] != seq.offsets.len(row) {
            return Err(length_mismatch(spec, seq, row, w[1] - w[0]));
        }
    }
    let first = offsets[0];
    let last = offsets[offsets.len() - 1];
    values.narrow0(first, last - first)
}

/// A padded `[B, L, ...]` tensor with lengths: one view a row, of its first `lengths[r]`
/// tokens.
fn token_rows_of_padded<'a>(
    spec: &FieldSpec,
    seq: &Sequence<'_>,
    padded: &TensorRef<'a>,
    lengths: &[u64],
) -> Result<Vec<TensorRef<'a>>> {
    check_dtype(spec, padded, Where::Field)?;
    check_dims(
        spec,
        &padded.shape[2..],
        &spec.shape,
        Where::Field,
        "trailing dims",
    )?;
    let max_len = padded.shape[1];
    let mut sources = Vec::with_capacity(lengths.len());
    for (row, &len) in lengths.iter().enumerate() {
        if len != seq.offsets.len(row) {
            return Err(length_mismatch(spec, seq, row, len));
        }
        if len > max_len {
            return Err(batch_err!(
                "field {:?}, row {row}: length {len} exceeds the padded width {max_len}",
                spec.name
            ));
        }
        let row_view = select0(padded, row as u64)?;
        sources.push(row_view.narrow0(0, len)?);
    }
    Ok(sources)
}

/// Row spans of a gather's sources: one view a span.
fn token_rows_of_ranges<'a>(
    spec: &FieldSpec,
    seq: &Sequence<'_>,
    sources: &[TensorRef<'a>],
    spans: &Arc<RowSpans>,
) -> Result<Vec<TensorRef<'a>>> {
    for t in sources {
        check_token_tensor(spec, t, Where::Field, "rows need a sequence dim")?;
    }
    // Every per-token field of a gather shares the sequence field's spans.
    let shared = seq
        .spans
        .is_some_and(|seq_spans| Arc::ptr_eq(seq_spans, spans));
    if !shared {
        for (row, (_, start, end)) in spans.rows().enumerate() {
            if row >= seq.offsets.num_rows() || seq.offsets.len(row) != end - start {
                return Err(length_mismatch(spec, seq, row, end - start));
            }
        }
    }
    span_views(sources, spans)
}

/// `t[index]`: drops dim 0.
fn select0<'a>(t: &TensorRef<'a>, index: u64) -> Result<TensorRef<'a>> {
    let row = t.narrow0(index, 1)?;
    TensorRef::strided(row.dtype, &row.shape[1..], &row.strides[1..], row.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::dtype::DType;
    use crate::schema::spec::Tier;
    use crate::tier::codec::TierCodec;
    use crate::tier::packed::Packed;
    use crate::tier::scalar::Scalar;

    fn data<'a>(tier: Tier, input: FieldInput<'a>) -> FieldData<'a> {
        let spec = FieldSpec {
            name: "x".into(),
            tier,
            dtype: DType::I64,
            wire_dtype: None,
            shape: vec![],
            pack_dim: 0,
        };
        FieldData { spec, input }
    }

    #[test]
    fn the_rows_token_offsets_come_from_each_input_kind() {
        let bytes = [0u8; 96];
        let t = |shape: &[u64]| TensorRef::contiguous(DType::I64, shape, &bytes).unwrap();
        let offsets = |tier, input| PerToken.token_offsets(&data(tier, input));
        let rows = FieldInput::Segments {
            segments: vec![t(&[2]), t(&[0]), t(&[3])],
            row_offsets: vec![0, 1, 2, 3],
            ids: None,
        };
        assert_eq!(
            offsets(Tier::PerToken, rows),
            Ok(Some(SeqOffsets(vec![0, 2, 2, 5])))
        );
        let padded = FieldInput::Padded {
            padded: t(&[2, 6]),
            lengths: vec![6, 1],
        };
        assert_eq!(
            offsets(Tier::PerToken, padded),
            Ok(Some(SeqOffsets(vec![0, 6, 7])))
        );
        let jagged = FieldInput::Jagged {
            values: t(&[5]),
            offsets: vec![1, 3, 5],
        };
        assert_eq!(
            offsets(Tier::PerToken, jagged),
            Ok(Some(SeqOffsets(vec![0, 2, 4])))
        );
        // Rows that are not tokens have none.
        let dense = || data(Tier::Scalar, FieldInput::Dense(t(&[4])));
        assert_eq!(Scalar.token_offsets(&dense()), Ok(None));
        assert_eq!(Packed.token_offsets(&dense()), Ok(None));
    }

    #[test]
    fn rows_of_other_than_one_tensor_or_a_dense_input_are_refused() {
        let bytes = [0u8; 16];
        let t = TensorRef::contiguous(DType::I64, &[2], &bytes).unwrap();
        let two_per_row = FieldInput::Segments {
            segments: vec![t.clone(), t.clone()],
            row_offsets: vec![0, 2],
            ids: None,
        };
        let err = PerToken
            .token_offsets(&data(Tier::PerToken, two_per_row))
            .unwrap_err();
        assert!(
            err.message().contains("exactly one tensor per row"),
            "{err}"
        );
        let err = PerToken
            .token_offsets(&data(Tier::PerToken, FieldInput::Dense(t)))
            .unwrap_err();
        assert_eq!(err.kind(), "schema");
    }
}
