//! Frame operations without decoding: pick rows out of one or more frames (select, split,
//! shard, concatenate) and lay them out as a new frame. Tier-aware by construction: per-token
//! rows are cut by the sequence offsets, packed rows keep their segments whole (shared segments
//! stay shared), scalars move one value per row.
//!
//! Everything read from a frame goes through the validated copies of its index tables
//! (`decode::PackedTables`, `decode::read_seq_offsets`), re-read at each call: a writable buffer
//! changed since it was wrapped gives a `FrameError`, never an out-of-bounds index.

pub mod batching;

use std::collections::BTreeMap;

use crate::frame::layout::{read_seq_offsets, DecodedField, FrameLayout, PackedTables};
use std::sync::Arc;

use crate::encode::{EncodeRequest, FieldData, FieldInput, RowItems, RowSpan, RowSpans};
use crate::error::Result;
use crate::schema::spec::{meta, FieldSpec, Tier};
use crate::tensor::TensorRef;
use crate::{argument_err, frame_err, internal_err};

/// One parsed frame: its bytes and validated layout.
#[derive(Clone, Copy)]
pub struct Source<'a> {
    /// The frame's bytes.
    pub bytes: &'a [u8],
    /// Its layout, parsed from `bytes`.
    pub layout: &'a FrameLayout,
}

/// Which rows of the sources' concatenation to take, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rows {
    /// Every row, in order.
    All,
    /// `start, start + step, ...` below `stop` (as Python's `range`; `step` is never 0).
    Range {
        /// The first row taken.
        start: i64,
        /// The bound the rows stop short of.
        stop: i64,
        /// The distance from one row taken to the next; negative walks backwards.
        step: i64,
    },
    /// Explicit row indices; negative ones count from the end, as in Python.
    List(Vec<i64>),
    /// Consecutive row spans `start..stop`, one after another (e.g. an interleaved shard).
    Spans(Vec<(u64, u64)>),
}

impl Rows {
    /// The selected global rows as spans `start..end` of consecutive rows, checked against
    /// `total` rows: O(spans) for ranges of step 1 and spans, O(selected rows) otherwise.
    fn spans(&self, total: u64) -> Result<Vec<(u64, u64)>> {
        let n = i64::try_from(total).map_err(|_| frame_err!("row count {total} overflows"))?;
        let out_of_range = |r: i64| argument_err!("row {r} is out of range for {total} rows");
        let mut spans = Spans::default();
        match self {
            Rows::All => spans.push(0, total),
            Rows::Range { start, stop, step } => {
                if *step == 0 {
                    return Err(argument_err!("a row range's step must not be 0"));
                }
                let (start, stop) = (*start as i128, *stop as i128);
                let step = *step as i128;
                let len = if step > 0 {
                    (stop - start + step - 1).max(0) / step
                } else {
                    (start - stop - step - 1).max(0) / -step
                };
                if len > 0 {
                    let last = start + (len - 1) * step;
                    for r in [start, last] {
                        if r < 0 || r >= n as i128 {
                            return Err(out_of_range(r as i64));
                        }
                    }
                    if step == 1 {
                        spans.push(start as u64, (last + 1) as u64);
                    } else {
                        for i in 0..len {
                            let row = (start + i * step) as u64;
                            spans.push(row, row + 1);
                        }
                    }
                }
            }
            Rows::Spans(given) => {
                for &(start, stop) in given {
                    if start > stop || stop > total {
                        return Err(argument_err!(
                            "row span {start}..{stop} is out of range for {total} rows"
                        ));
                    }
                    spans.push(start, stop);
                }
            }
            Rows::List(rows) => {
                for &r in rows {
                    let index = if r < 0 { r.checked_add(n) } else { Some(r) };
                    let row = index
                        .filter(|&i| (0..n).contains(&i))
                        .ok_or_else(|| out_of_range(r))? as u64;
                    spans.push(row, row + 1);
                }
            }
        }
        Ok(spans.0)
    }
}

/// Row spans that merge a span starting where the previous one ends.
#[derive(Default)]
struct Spans(Vec<(u64, u64)>);

impl Spans {
    fn push(&mut self, start: u64, end: u64) {
        if start == end {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => self.0.push((start, end)),
        }
    }
}

/// A source's index tables, copied and validated once per operation.
struct Tables<'a> {
    source: Source<'a>,
    seq: Option<Arc<Vec<u64>>>,
    packed: Vec<Option<PackedTables>>,
}

impl<'a> Tables<'a> {
    fn read(source: Source<'a>) -> Result<Tables<'a>> {
        let layout = source.layout;
        let packed = layout
            .fields
            .iter()
            .map(|f| match f.spec.tier {
                Tier::Packed => PackedTables::read(source.bytes, f, layout.num_rows).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        Ok(Tables {
            source,
            seq: read_seq_offsets(source.bytes, layout)?.map(Arc::from),
            packed,
        })
    }

    fn values(&self, field: &DecodedField) -> Result<TensorRef<'a>> {
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
}

/// Rows `rows` of the sources' concatenation as an encode request. Fields absent from some
/// sources: packed rows there are empty (a text-only batch beside a multimodal one); other
/// tiers are an error.
pub fn gather<'a>(sources: &[Source<'a>], rows: &Rows) -> Result<EncodeRequest<'a>> {
    let tables = sources
        .iter()
        .map(|&s| Tables::read(s))
        .collect::<Result<Vec<_>>>()?;
    gather_read(&tables, rows)
}

/// Consecutive row ranges of one frame (`sizes` rows each, adding up to its row count) as
/// encode requests, reading the frame's tables once.
pub fn split<'a>(source: Source<'a>, sizes: &[u64]) -> Result<Vec<EncodeRequest<'a>>> {
    let rows = source.layout.num_rows;
    let total = sizes.iter().try_fold(0u64, |acc, &s| acc.checked_add(s));
    if total != Some(rows) {
        return Err(argument_err!(
            "sections: sizes {sizes:?} do not add up to the frame's {rows} rows"
        ));
    }
    let tables = [Tables::read(source)?];
    let mut start = 0i64;
    sizes
        .iter()
        .map(|&size| {
            let stop = start + size as i64;
            let rows = Rows::Range {
                start,
                stop,
                step: 1,
            };
            start = stop;
            gather_read(&tables, &rows)
        })
        .collect()
}

fn gather_read<'a>(tables: &[Tables<'a>], rows: &Rows) -> Result<EncodeRequest<'a>> {
    let first = tables
        .first()
        .ok_or_else(|| argument_err!("no frames to gather from"))?;
    let mut starts = Vec::with_capacity(tables.len());
    let mut total = 0u64;
    for t in tables {
        starts.push(total);
        total = total
            .checked_add(t.source.layout.num_rows)
            .ok_or_else(|| frame_err!("the frames' row counts add up past 2^64"))?;
    }
    // Cut the global spans at source boundaries into spans of each source's rows.
    let mut picks: Vec<RowSpan> = Vec::new();
    for (mut start, end) in rows.spans(total)? {
        while start < end {
            let s = starts.partition_point(|&st| st <= start) - 1;
            let source_end = starts.get(s + 1).copied().unwrap_or(total).min(end);
            picks.push(RowSpan {
                source: s as u32,
                start: start - starts[s],
                end: source_end - starts[s],
            });
            start = source_end;
        }
    }
    let num_rows = picks.iter().map(|p| p.end - p.start).sum::<u64>();
    let specs = field_union(tables)?;
    let mut fields = Vec::with_capacity(specs.len());
    // Every per-token field takes the same token ranges, every scalar the same row ranges.
    let (mut token_ranges, mut row_ranges) = (None, None);
    for spec in specs {
        fields.push(match spec.tier {
            Tier::Packed => packed_field(tables, &picks, spec)?,
            Tier::PerToken => {
                if token_ranges.is_none() {
                    token_ranges = Some(row_spans(tables, &picks, Tier::PerToken)?);
                }
                ranges_field(tables, token_ranges.clone(), spec)?
            }
            Tier::Scalar => {
                if row_ranges.is_none() {
                    row_ranges = Some(row_spans(tables, &picks, Tier::Scalar)?);
                }
                ranges_field(tables, row_ranges.clone(), spec)?
            }
        });
    }
    let mut metadata: BTreeMap<String, String> = first.source.layout.header.metadata.clone();
    for key in [
        meta::FORMAT,
        meta::NUM_ROWS,
        meta::FIELDS,
        meta::SEQUENCE_FIELD,
    ] {
        metadata.remove(key);
    }
    // A frame with checksums gives frames with checksums, of their own bytes.
    let checksum = metadata.remove(meta::CHECKSUM).is_some();
    Ok(EncodeRequest {
        fields,
        sequence_field: first.source.layout.sequence_field.clone(),
        lengths_field: None,
        metadata,
        num_rows_hint: Some(num_rows),
        checksum,
    })
}

/// A packed field's picked rows: their segments, whole. A frame that lacks the field gives its
/// rows no segments (a text-only batch beside a multimodal one).
fn packed_field<'a>(
    tables: &[Tables<'a>],
    picks: &[RowSpan],
    spec: FieldSpec,
) -> Result<FieldData<'a>> {
    let mut per_source = Vec::with_capacity(tables.len());
    for t in tables {
        let layout = t.source.layout;
        per_source.push(
            match layout.fields.iter().position(|f| f.spec.name == spec.name) {
                Some(i) => {
                    let csr = t.packed[i].as_ref().ok_or_else(|| {
                        internal_err!("packed field {:?} without tables", spec.name)
                    })?;
                    Some((t.values(&layout.fields[i])?, csr))
                }
                None => None,
            },
        );
    }
    let mut segments = Vec::new();
    let mut row_offsets = vec![0u64];
    for pick in picks {
        for row in pick.start as usize..pick.end as usize {
            if let Some((values, csr)) = &per_source[pick.source as usize] {
                let es = values.dtype.size();
                for &id in csr.row(row) {
                    let elements = csr.elements(id);
                    let bytes = values
                        .bytes
                        .get(elements.start * es..elements.end * es)
                        .ok_or_else(|| frame_err!("segment {id} lies outside its values"))?;
                    segments.push(TensorRef::contiguous(values.dtype, csr.shape(id), bytes)?);
                }
            }
            row_offsets.push(segments.len() as u64);
        }
    }
    Ok(FieldData {
        spec,
        input: FieldInput::Segments {
            segments,
            row_offsets,
        },
    })
}

/// The picked spans over each source's rows: by the sequence offsets for per-token fields, one
/// item per row for scalars.
fn row_spans(tables: &[Tables<'_>], picks: &[RowSpan], tier: Tier) -> Result<Arc<RowSpans>> {
    let items = tables
        .iter()
        .map(|t| match tier {
            Tier::PerToken => t
                .seq
                .clone()
                .map(RowItems::Offsets)
                .ok_or_else(|| internal_err!("per-token rows without sequence offsets")),
            _ => Ok(RowItems::One(t.source.layout.num_rows)),
        })
        .collect::<Result<_>>()?;
    Ok(Arc::new(RowSpans::new(items, picks.to_vec())?))
}

/// A per-token or scalar field's picked rows as spans of each source's values (each span is
/// copied as one run).
fn ranges_field<'a>(
    tables: &[Tables<'a>],
    spans: Option<Arc<RowSpans>>,
    spec: FieldSpec,
) -> Result<FieldData<'a>> {
    let spans = spans.ok_or_else(|| internal_err!("no row spans for {:?}", spec.name))?;
    let mut sources = Vec::with_capacity(tables.len());
    for t in tables {
        let field =
            t.source.layout.field(&spec.name).ok_or_else(|| {
                frame_err!("field {:?} is missing from one of the frames", spec.name)
            })?;
        sources.push(t.values(field)?);
    }
    Ok(FieldData {
        spec,
        input: FieldInput::Ranges { sources, spans },
    })
}

/// Every field of every source, in first-seen order; a field must mean the same everywhere.
fn field_union(tables: &[Tables<'_>]) -> Result<Vec<FieldSpec>> {
    let mut specs: Vec<FieldSpec> = Vec::new();
    let sequence_field = &tables[0].source.layout.sequence_field;
    for t in tables {
        if t.source.layout.sequence_field != *sequence_field {
            return Err(frame_err!("frames disagree on their sequence field"));
        }
        for f in &t.source.layout.fields {
            match specs.iter().find(|x| x.name == f.spec.name) {
                Some(known) if *known != f.spec => {
                    return Err(frame_err!(
                        "field {:?} is laid out differently in two frames",
                        f.spec.name
                    ))
                }
                Some(_) => {}
                None => specs.push(f.spec.clone()),
            }
        }
    }
    Ok(specs)
}
