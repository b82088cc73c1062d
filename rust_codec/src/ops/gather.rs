//! A frame op as an encode request: the picked rows of each field as views of the sources'
//! values (packed rows as their segments, shared segments kept shared), planned and written by
//! the encoder. Every frame op can go this way; `ops::direct` writes the ones it takes faster.
//!
//! Everything read from a frame goes through the validated copies of its index tables
//! (`layout::PackedTables`, `layout::read_seq_offsets`), re-read at each call: a writable buffer
//! changed since it was wrapped gives a `FrameError`, never an out-of-bounds index. Each field's
//! rows are taken by its tier (`crate::tier`).

use std::sync::Arc;

use crate::encode::{EncodeRequest, FieldData, FieldInput};
use crate::error::Result;
use crate::frame::layout::read_seq_offsets;
use crate::frame::located::Source;
use crate::schema::spec::{meta, FieldSpec};
use crate::tensor::TensorRef;
use crate::tier::{self, Items, SharedSpans, SourceTables};
use crate::{argument_err, frame_err};

use super::selection::{output_metadata, picks, sections, Rows};

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
        .map(|&s| read_tables(s))
        .collect::<Result<Vec<_>>>()?;
    gather_read(&tables, rows, per_row)
}

/// Consecutive row ranges of one frame (`sizes` rows each, adding up to its row count) as
/// encode requests, reading the frame's tables once.
pub fn split<'a>(source: Source<'a>, sizes: &[u64]) -> Result<Vec<EncodeRequest<'a>>> {
    let sections = sections(source.layout.num_rows, sizes)?;
    let tables = [read_tables(source)?];
    sections
        .iter()
        .map(|rows| gather_read(&tables, rows, &[]))
        .collect()
}

/// A source's index tables, each field's read by its tier, copied and validated once per
/// operation.
fn read_tables(source: Source<'_>) -> Result<SourceTables<'_>> {
    let layout = source.layout;
    let tables = layout
        .fields
        .iter()
        .map(|f| tier::of(f.spec.tier).read_tables(source.bytes, f, layout.num_rows))
        .collect::<Result<_>>()?;
    Ok(SourceTables {
        source,
        seq: read_seq_offsets(source.bytes, layout)?.map(Arc::from),
        tables,
    })
}

fn gather_read<'a>(
    tables: &[SourceTables<'a>],
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
    let mut spans = SharedSpans::default();
    for spec in specs {
        if let Some((_, values)) = per_row.iter().find(|(s, _)| s.name == spec.name) {
            fields.push(FieldData {
                spec,
                input: FieldInput::Ranges {
                    sources: values.clone(),
                    spans: spans.of(Items::Rows, tables, &picks)?,
                },
            });
            continue;
        }
        fields.push(tier::of(spec.tier).gather(tables, &picks, spec, &mut spans)?);
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
fn field_union(tables: &[SourceTables<'_>]) -> Result<Vec<FieldSpec>> {
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
