//! A frame op as an encode request: the picked rows of each field as views of the sources'
//! values (packed rows as their segments, shared segments kept shared), planned and written by
//! the encoder. Every frame op can go this way; `ops::direct` writes the ones it takes faster.
//!
//! Everything read from a frame goes through the validated copies of its index tables
//! (`layout::PackedTables`, `layout::read_seq_offsets`), re-read at each call: a writable buffer
//! changed since it was wrapped gives a `FrameError`, never an out-of-bounds index.

use std::sync::Arc;

use crate::encode::{EncodeRequest, FieldData, FieldInput, RowItems, RowSpan, RowSpans};
use crate::error::Result;
use crate::frame::layout::{read_seq_offsets, DecodedField, PackedTables};
use crate::schema::spec::{meta, FieldSpec, Tier};
use crate::tensor::TensorRef;
use crate::{argument_err, frame_err, internal_err};

use super::selection::{output_metadata, picks, sections, Rows, Source};

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
    gather_with(sources, rows, &[])
}

/// As [`gather()`], with per-row fields whose values the caller gives per source (a concat's
/// per-frame facts, see [`super::facts`]): each is the field of that name in the output, in
/// place of the sources' own (which need not all store it).
pub fn gather_with<'a>(
    sources: &[Source<'a>],
    rows: &Rows,
    per_row: &[(FieldSpec, Vec<TensorRef<'a>>)],
) -> Result<EncodeRequest<'a>> {
    let tables = sources
        .iter()
        .map(|&s| Tables::read(s))
        .collect::<Result<Vec<_>>>()?;
    gather_read(&tables, rows, per_row)
}

/// Consecutive row ranges of one frame (`sizes` rows each, adding up to its row count) as
/// encode requests, reading the frame's tables once.
pub fn split<'a>(source: Source<'a>, sizes: &[u64]) -> Result<Vec<EncodeRequest<'a>>> {
    let sections = sections(source.layout.num_rows, sizes)?;
    let tables = [Tables::read(source)?];
    sections
        .iter()
        .map(|rows| gather_read(&tables, rows, &[]))
        .collect()
}

fn gather_read<'a>(
    tables: &[Tables<'a>],
    rows: &Rows,
    per_row: &[(FieldSpec, Vec<TensorRef<'a>>)],
) -> Result<EncodeRequest<'a>> {
    let first = tables
        .first()
        .ok_or_else(|| argument_err!("no frames to gather from"))?;
    let sources: Vec<Source<'a>> = tables.iter().map(|t| t.source).collect();
    same_schema(&sources)?;
    let picks = picks(&sources, rows)?;
    let num_rows = picks.iter().map(|p| p.end - p.start).sum::<u64>();
    let mut specs = field_union(tables)?;
    for (spec, _) in per_row {
        if !specs.iter().any(|s| s.name == spec.name) {
            specs.push(spec.clone());
        }
    }
    let mut fields = Vec::with_capacity(specs.len());
    // Every per-token field takes the same token ranges, every scalar the same row ranges.
    let (mut token_ranges, mut row_ranges) = (None, None);
    for spec in specs {
        if let Some((_, values)) = per_row.iter().find(|(s, _)| s.name == spec.name) {
            if row_ranges.is_none() {
                row_ranges = Some(row_spans(tables, &picks, Tier::Scalar)?);
            }
            let spans = row_ranges
                .clone()
                .ok_or_else(|| internal_err!("no row spans"))?;
            fields.push(FieldData {
                spec,
                input: FieldInput::Ranges {
                    sources: values.clone(),
                    spans,
                },
            });
            continue;
        }
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
    let mut metadata = output_metadata(first.source.layout);
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

/// The sources name one schema (its fingerprint, embedded or compact): the
/// output carries the first source's, so a field of another schema would be written under a
/// schema that does not declare it.
fn same_schema(sources: &[Source<'_>]) -> Result<()> {
    let identity = |s: &Source<'_>| {
        let md = &s.layout.header.metadata;
        md.get(meta::FINGERPRINT)
            .or_else(|| md.get(meta::SCHEMA_REF))
            .cloned()
    };
    let want = sources.first().map(identity).unwrap_or_default();
    for (i, s) in sources.iter().enumerate().skip(1) {
        let got = identity(s);
        if got != want {
            let shown = |v: &Option<String>| {
                v.as_deref()
                    .map_or("none".to_string(), |f| f.chars().take(80).collect())
            };
            return Err(frame_err!(
                "frame {i} is of schema {} but frame 0 of {}: frames gathered into one must \
                 share their schema",
                shown(&got),
                shown(&want)
            ));
        }
    }
    Ok(())
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
                Some(known) if *known != *f.spec => {
                    return Err(frame_err!(
                        "field {:?} is laid out differently in two frames",
                        f.spec.name
                    ))
                }
                Some(_) => {}
                None => specs.push(FieldSpec::clone(&f.spec)),
            }
        }
    }
    Ok(specs)
}
