//! Frame operations without decoding: pick rows out of one or more frames (select, split,
//! shard, concatenate) and lay them out as a new frame. Tier-aware by construction: per-token
//! rows are cut by the sequence offsets, packed rows keep their segments whole (shared segments
//! stay shared), scalars move one value per row.
//!
//! `selection` (sources and the rows picked), `direct` (written straight from the sources'
//! layouts), `gather` (as an encode request, for every frame); this file chooses between them.

#![forbid(unsafe_code)]

pub mod batching;
pub mod direct;
pub mod facts;
pub mod gather;
pub mod selection;

use std::collections::BTreeMap;

use crate::argument_err;
use crate::encode::{EncodeOptions, EncodeRequest};
use crate::error::Result;
use crate::frame::compact::HeldRef;
use crate::frame::layout::layout_of_written_known;
use crate::schema::spec::meta;

pub use crate::frame::located::Source;
pub use facts::PerRow;
pub use gather::{gather, gather_with, split};
use selection::sections;
pub use selection::{output_metadata, Output, Rows};

/// Rows `rows` of the sources' concatenation as a new frame: written straight from the
/// sources' layouts where [`direct`] takes them, else through an encode plan. The output takes
/// the first source's header entries, its schema entries replaced by `schema_entries` when
/// given (an embedded form's `py_wire.schema` and `py_wire.fingerprint`, or a compact form's
/// `py_wire.schema_ref`).
pub fn take(
    sources: &[Source<'_>],
    rows: &Rows,
    schema_entries: Option<&BTreeMap<String, String>>,
    options: EncodeOptions,
) -> Result<Output> {
    take_with(sources, rows, schema_entries, &[], options)
}

/// As [`take`], holding the sources to one value of each caller metadata key, except the keys
/// of `per_row`, which become per-row fields of the output (see [`facts`]).
pub fn take_with(
    sources: &[Source<'_>],
    rows: &Rows,
    schema_entries: Option<&BTreeMap<String, String>>,
    per_row: &[PerRow],
    options: EncodeOptions,
) -> Result<Output> {
    let first = sources
        .first()
        .ok_or_else(|| argument_err!("no frames to gather from"))?;
    facts::check_agree(sources, per_row)?;
    if !per_row.is_empty() {
        let filled = per_row
            .iter()
            .map(|p| facts::fill_values(sources, p))
            .collect::<Result<Vec<_>>>()?;
        let values = per_row
            .iter()
            .zip(&filled)
            .map(|(p, f)| Ok((p.spec.clone(), facts::per_row_values(sources, p, f)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut request = gather_with(sources, rows, &values)?;
        for p in per_row {
            request.metadata.remove(&p.key);
        }
        if let Some(entries) = schema_entries {
            replace_schema_entries(&mut request.metadata, entries);
        }
        return planned(&request, first.layout.held.as_ref(), options);
    }
    let mut metadata = output_metadata(first.layout);
    if let Some(entries) = schema_entries {
        replace_schema_entries(&mut metadata, entries);
    }
    if direct::takes(sources, &metadata) {
        return direct::take(sources, rows, metadata, options);
    }
    let mut request = gather(sources, rows)?;
    if let Some(entries) = schema_entries {
        replace_schema_entries(&mut request.metadata, entries);
    }
    planned(&request, first.layout.held.as_ref(), options)
}

/// Consecutive sections of one frame, `sizes` rows each (adding up to its row count), as new
/// frames (see [`take`]).
pub fn split_frames(
    source: Source<'_>,
    sizes: &[u64],
    options: EncodeOptions,
) -> Result<Vec<Output>> {
    let options = EncodeOptions {
        operation_bytes: options.operation_bytes.max(source.bytes.len()),
        ..options
    };
    if direct::takes(&[source], &output_metadata(source.layout)) {
        return sections(source.layout.num_rows, sizes)?
            .iter()
            .map(|rows| take(&[source], rows, None, options))
            .collect();
    }
    split(source, sizes)?
        .iter()
        .map(|request| planned(request, source.layout.held.as_ref(), options))
        .collect()
}

/// `request` planned and written; its layout from the header the encoder wrote (a compact
/// header naming `known`, the sources' schema, is read under it).
fn planned(
    request: &EncodeRequest<'_>,
    known: Option<&HeldRef>,
    options: EncodeOptions,
) -> Result<Output> {
    let mut plan = crate::encode::plan(request)?;
    let buf = plan.write(options)?;
    let layout = layout_of_written_known(plan.written, buf.as_slice(), known)?;
    Ok((buf, layout))
}

/// `metadata` with its schema entries (embedded or compact) replaced by `entries`.
fn replace_schema_entries(
    metadata: &mut BTreeMap<String, String>,
    entries: &BTreeMap<String, String>,
) {
    for key in [meta::SCHEMA, meta::FINGERPRINT, meta::SCHEMA_REF] {
        metadata.remove(key);
    }
    metadata.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
}
