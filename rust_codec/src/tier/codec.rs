//! The seam every tier implements ([`TierCodec`]), and what its methods see: the batch a field
//! is planned in, the frame a field is located in, the source frames rows are gathered from.

use std::sync::Arc;

use crate::encode::input::{FieldData, FieldInput, RowItems, RowSpan, RowSpans, SeqOffsets};
use crate::encode::layout::Layout;
use crate::error::Result;
use crate::frame::header::Header;
use crate::frame::located::{
    expect_shape, DecodedField, PackedIndex, PackedTables, Source, TensorLoc, Trust,
};
use crate::schema::spec::{FieldSpec, Tier};
use crate::tensor::TensorRef;
use crate::{frame_err, internal_err};

pub(crate) use super::rules::Items;

/// The sequence field every per-token field is planned against: its name, its rows' token
/// offsets, and its row spans when it is a gather's.
pub(crate) struct Sequence<'r> {
    /// The sequence field's name.
    pub(crate) name: &'r str,
    /// Its rows' token offsets.
    pub(crate) offsets: SeqOffsets,
    /// Its row spans, when the batch is a gather's.
    pub(crate) spans: Option<&'r Arc<RowSpans>>,
}

/// What planning a field sees of the batch around it.
pub(crate) struct PlanBatch<'r> {
    /// The batch's row count, agreed by every field.
    pub(crate) num_rows: u64,
    /// The sequence, when the batch has per-token fields.
    pub(crate) sequence: Option<&'r Sequence<'r>>,
}

/// What locating a field sees of the frame being read.
pub(crate) struct FrameFacts<'b> {
    /// The frame's parsed header.
    pub(crate) header: &'b Header,
    /// The frame's bytes.
    pub(crate) buf: &'b [u8],
    /// Its row count.
    pub(crate) num_rows: u64,
    /// Its tokens (the last sequence offset; 0 without per-token fields).
    pub(crate) total_tokens: u64,
    /// How much of its index tables are read back.
    pub(crate) trust: Trust,
}

/// A source frame's index tables, copied and validated once per operation (`ops::gather`).
pub(crate) struct SourceTables<'a> {
    /// The frame.
    pub(crate) source: Source<'a>,
    /// Its sequence offsets, when it has per-token fields.
    pub(crate) seq: Option<Arc<Vec<u64>>>,
    /// Per field of its layout, the tables its tier reads ([`TierCodec::read_tables`]).
    pub(crate) tables: Vec<Option<PackedTables>>,
}

impl<'a> SourceTables<'a> {
    /// `field`'s values, as one contiguous view of the source.
    pub(crate) fn values(&self, field: &DecodedField) -> Result<TensorRef<'a>> {
        let loc = &field.values;
        let bytes = self
            .source
            .bytes
            .get(loc.offset..loc.offset.saturating_add(loc.nbytes))
            .ok_or_else(|| {
                frame_err!("field {:?}: values lie outside the frame", field.spec.name)
            })?;
        TensorRef::contiguous(loc.dtype, &loc.shape, bytes)
    }

    /// How this source's rows map to dim-0 items of a field whose items are `items`.
    fn row_items(&self, items: Items) -> Result<RowItems> {
        match items {
            Items::Rows => Ok(RowItems::One(self.source.layout.num_rows)),
            Items::Tokens => self
                .seq
                .clone()
                .map(RowItems::Offsets)
                .ok_or_else(|| internal_err!("per-token rows without sequence offsets")),
            Items::Segments => Err(internal_err!("segment rows have no row spans")),
        }
    }
}

/// The row spans of one gather, computed once per kind of items and shared by every field of
/// that kind (every per-token field of a gather shares the sequence field's spans).
#[derive(Default)]
pub(crate) struct SharedSpans {
    by_items: Vec<(Items, Arc<RowSpans>)>,
}

impl SharedSpans {
    /// The picked spans over each source's rows, for fields whose items are `items`.
    pub(crate) fn of(
        &mut self,
        items: Items,
        tables: &[SourceTables<'_>],
        picks: &[RowSpan],
    ) -> Result<Arc<RowSpans>> {
        if let Some((_, spans)) = self.by_items.iter().find(|(i, _)| *i == items) {
            return Ok(spans.clone());
        }
        let per_source = tables
            .iter()
            .map(|t| t.row_items(items))
            .collect::<Result<_>>()?;
        let spans = Arc::new(RowSpans::new(per_source, picks.to_vec())?);
        self.by_items.push((items, spans.clone()));
        Ok(spans)
    }
}

/// Everything a tier decides, one implementation per tier (`tier::of` chooses it). A tier
/// whose rows are the values' dim-0 items (rows or tokens) needs only [`tier`](Self::tier)
/// and [`plan`](Self::plan): the values tensor is then all it stores, and the rest follows.
pub(crate) trait TierCodec: Sync {
    /// The tier this implements (its name and schema rules: [`Tier::rules`]).
    fn tier(&self) -> Tier;

    /// What one item along the values' dim 0 is (the tier's row fact, as its rules say).
    fn items(&self) -> Items {
        self.tier().items()
    }

    /// Checks `field`'s input against its spec and the batch (dtype, dims, rows, lengths) and
    /// places what the frame stores of it in `layout`: its values, queued as copies of the
    /// input's own tensors, and its index tables.
    fn plan<'a>(
        &self,
        layout: &mut Layout<'a>,
        field: &FieldData<'a>,
        batch: &PlanBatch<'_>,
    ) -> Result<()>;

    /// The rows' token offsets, read from the input of `field`, the batch's sequence (its row
    /// count checked first): `None` for a tier whose rows are not tokens.
    fn token_offsets(&self, _field: &FieldData<'_>) -> Result<Option<SeqOffsets>> {
        Ok(None)
    }

    /// The names of the index tensors a frame stores for field `name` besides its values.
    fn tables(&self, _name: &str) -> Vec<String> {
        Vec::new()
    }

    /// Locates what a frame stores of `spec` besides its values at `values`, checking the
    /// values' shape against it: by default `[dim0, static dims...]` and no tables.
    fn locate(
        &self,
        frame: &FrameFacts<'_>,
        spec: &FieldSpec,
        values: &TensorLoc,
    ) -> Result<Option<PackedIndex>> {
        let dim0 = self
            .items()
            .dim0(frame.num_rows, frame.total_tokens)
            .ok_or_else(|| internal_err!("field {:?} has no dim 0 of its own", spec.name))?;
        let mut expected = vec![dim0];
        expected.extend(spec.shape.iter().map(|d| d.unwrap_or(0)));
        expect_shape(&spec.name, &values.shape, &expected)?;
        Ok(None)
    }

    /// Copies the located field's index tables out of the frame `buf`, validated, for a frame
    /// operation to read rows through; `None` for a tier without tables.
    fn read_tables(
        &self,
        _buf: &[u8],
        _field: &DecodedField,
        _num_rows: u64,
    ) -> Result<Option<PackedTables>> {
        Ok(None)
    }

    /// The picked rows (`picks`, over the sources' concatenation) of field `spec` as an encode
    /// input: by default, spans of each source's values that the whole gather shares.
    fn gather<'a>(
        &self,
        tables: &[SourceTables<'a>],
        picks: &[RowSpan],
        spec: FieldSpec,
        spans: &mut SharedSpans,
    ) -> Result<FieldData<'a>> {
        let spans = spans.of(self.items(), tables, picks)?;
        let mut sources = Vec::with_capacity(tables.len());
        for t in tables {
            let field = t.source.layout.field(&spec.name).ok_or_else(|| {
                frame_err!("field {:?} is missing from one of the frames", spec.name)
            })?;
            sources.push(t.values(field)?);
        }
        Ok(FieldData {
            spec,
            input: FieldInput::Ranges { sources, spans },
        })
    }
}

/// The views to copy for row spans: one run per span.
pub(super) fn span_views<'a>(
    sources: &[TensorRef<'a>],
    spans: &RowSpans,
) -> Result<Vec<TensorRef<'a>>> {
    spans
        .item_runs()
        .map(|(source, start, end)| {
            let t = sources
                .get(source)
                .ok_or_else(|| internal_err!("row span names source {source}"))?;
            t.narrow0(start, end - start)
        })
        .collect()
}
