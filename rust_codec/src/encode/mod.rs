//! Batch → frame: validate every field against its spec, lay the frame out, copy each payload
//! byte once.
//!
//! `input` (what producers hand in, rows and lengths), `layout` (where each tensor goes),
//! `write` (the copies); this file plans a frame from them, each field by its tier
//! (`crate::tier`: its checks and what it stores).

#![forbid(unsafe_code)]

pub(crate) mod input;
pub(crate) mod layout;
pub mod staged;
pub mod windows;
mod write;

use std::collections::{BTreeMap, HashSet};

use crate::error::{Code, Result};
use crate::frame::header::{write_header, Entry, Header};
use crate::memory::buffer::AlignedBuf;
use crate::memory::copy::CopyJob;
use crate::schema::spec::{meta, names, FieldSpec};
use crate::tier::{self, Items, PlanBatch, Sequence};
use crate::{batch_err, schema_err};

use input::{row_count, SeqOffsets};
pub use input::{FieldData, FieldInput, RowItems, RowSpan, RowSpans};
use layout::Layout;
pub use write::{EncodeOptions, Part, Plan};

#[derive(Debug, Clone, Default)]
/// Everything a frame is encoded from: the fields and the frame-level facts around them.
pub struct EncodeRequest<'a> {
    /// The batch's fields, each with its spec and values.
    pub fields: Vec<FieldData<'a>>,
    /// The per-token field whose lengths define each row's sequence.
    pub sequence_field: Option<String>,
    /// A 0-d integer scalar field that must equal each row's sequence length.
    pub lengths_field: Option<String>,
    /// Extra `__metadata__` entries (the schema's JSON and fingerprint).
    pub metadata: BTreeMap<String, String>,
    /// Row count to record when the batch has no fields at all.
    pub num_rows_hint: Option<u64>,
    /// Store a checksum per field in the header (`frame::checksum`).
    pub checksum: bool,
}

/// Encodes `request` into a new 64-byte aligned frame: [`plan`] then [`Plan::write`].
pub fn encode(request: &EncodeRequest<'_>, options: EncodeOptions) -> Result<AlignedBuf> {
    plan(request)?.write(options)
}

/// Builds the frame's plan: validation, layout and the list of copies. O(fields + segments).
pub fn plan<'a>(request: &EncodeRequest<'a>) -> Result<Plan<'a>> {
    check_unique_fields(request)?;
    let num_rows = agreed_num_rows(request)?;
    let sequence = sequence_of(request)?;
    let mut layout = lay_out_fields(request, num_rows, sequence.as_ref())?;
    let mut metadata = frame_metadata(request, num_rows)?;
    // The data section's end must be covered: pad the final tensor out to alignment so the next
    // frame in a stream (or a file) starts aligned too.
    let data_len = layout.align()?;
    let mut entries = layout.entries;
    crate::frame::header::sort_entries(&mut entries);
    let checksum_fields = checksum_placeholder(request, &mut metadata, &entries)?;
    let header = write_header(&metadata, &entries)?;
    let data_start = header.len();
    let total_len = frame_len(data_len, data_start, num_rows)?;
    let written = Header {
        listed: crate::frame::header::lists_tensors(&metadata),
        metadata,
        entries,
        data_start,
        frame_len: total_len,
    };
    let (jobs, blobs) = after_header(layout.jobs, layout.blobs, data_start);
    Ok(Plan {
        header,
        written,
        checksum_fields,
        num_rows,
        blobs,
        jobs,
        total_len,
    })
}

/// Every field's spec is valid, and no field name appears twice.
fn check_unique_fields(request: &EncodeRequest<'_>) -> Result<()> {
    let mut seen = HashSet::new();
    for field in &request.fields {
        field.spec.validate()?;
        if !seen.insert(field.spec.name.as_str()) {
            return Err(schema_err!("field {:?} appears twice", field.spec.name));
        }
    }
    Ok(())
}

/// The batch's row count: every field's must agree; a batch without fields takes the hint.
fn agreed_num_rows(request: &EncodeRequest<'_>) -> Result<u64> {
    let mut num_rows: Option<(u64, &str)> = None;
    for field in &request.fields {
        let rows = row_count(field)?;
        match num_rows {
            None => num_rows = Some((rows, &field.spec.name)),
            Some((n, first)) if n != rows => {
                return Err(batch_err!(
                    "fields disagree on the number of rows: {first:?} has {n}, {:?} has {rows}",
                    field.spec.name
                )
                .code(Code::Rows)
                .field(&field.spec.name)
                .expected(n)
                .found(rows))
            }
            Some(_) => {}
        }
    }
    Ok(num_rows
        .map(|(n, _)| n)
        .or(request.num_rows_hint)
        .unwrap_or(0))
}

/// The batch's [`Sequence`], or `None` when it has no per-token fields. Checks the lengths
/// field against it.
fn sequence_of<'r>(request: &'r EncodeRequest<'_>) -> Result<Option<Sequence<'r>>> {
    if !request.fields.iter().any(|f| counts_tokens(&f.spec)) {
        return Ok(None);
    }
    let seq_name = request.sequence_field.as_deref().ok_or_else(|| {
        schema_err!("the batch has per-token fields but the schema names no sequence field")
    })?;
    // Without the sequence field (per-token fields added to rows whose tokens are stored
    // elsewhere: a write-back), the first per-token field's lengths are the rows' sequence and
    // every other one is checked against it; the frame's `__seq_offsets` hold them.
    let seq_field = request
        .fields
        .iter()
        .find(|f| f.spec.name == seq_name)
        .or_else(|| request.fields.iter().find(|f| counts_tokens(&f.spec)))
        .ok_or_else(|| {
            batch_err!("the batch has per-token fields but lacks the sequence field {seq_name:?}")
        })?;
    let Some(offsets) = tier::of(seq_field.spec.tier).token_offsets(seq_field)? else {
        return Err(schema_err!(
            "sequence field {seq_name:?} must be per-token, not {}",
            seq_field.spec.tier.name()
        ));
    };
    check_lengths_field(request, seq_name, &offsets)?;
    let spans = match &seq_field.input {
        FieldInput::Ranges { spans, .. } => Some(spans),
        _ => None,
    };
    Ok(Some(Sequence {
        name: seq_name,
        offsets,
        spans,
    }))
}

/// Whether a field's rows are tokens (a per-token field's).
fn counts_tokens(spec: &FieldSpec) -> bool {
    tier::of(spec.tier).items() == Items::Tokens
}

/// Places the sequence offsets (when there are per-token fields), then every field in request
/// order, each by its tier.
fn lay_out_fields<'a>(
    request: &EncodeRequest<'a>,
    num_rows: u64,
    sequence: Option<&Sequence<'_>>,
) -> Result<Layout<'a>> {
    let mut layout = Layout::new();
    if let Some(seq) = sequence {
        let offsets = &seq.offsets.0;
        layout.blob_i64(
            names::SEQ_OFFSETS.to_string(),
            vec![offsets.len() as u64],
            offsets,
        )?;
    }
    let batch = PlanBatch { num_rows, sequence };
    for field in &request.fields {
        tier::of(field.spec.tier).plan(&mut layout, field, &batch)?;
    }
    Ok(layout)
}

/// The name of the schema a frame written by the codec alone embeds
/// ([`schema_of_specs`](crate::schema::model::schema_of_specs)).
pub const CODEC_SCHEMA_NAME: &str = "py_wire.codec";

/// The header's `__metadata__`: the request's entries, the format and row count. A request
/// that neither embeds its schema (`py_wire.schema`) nor names it (`py_wire.schema_ref`), one
/// the codec is handed alone, embeds the schema its fields declare: every frame carries a
/// schema, and readers read one form.
fn frame_metadata(request: &EncodeRequest<'_>, num_rows: u64) -> Result<BTreeMap<String, String>> {
    let mut metadata = request.metadata.clone();
    metadata.insert(meta::FORMAT.into(), meta::FORMAT_VERSION.into());
    metadata.insert(meta::NUM_ROWS.into(), num_rows.to_string());
    let names_a_schema = [meta::SCHEMA_REF, meta::SCHEMA, meta::FINGERPRINT]
        .iter()
        .any(|k| metadata.contains_key(*k));
    if !names_a_schema {
        let specs: Vec<FieldSpec> = request.fields.iter().map(|f| f.spec.clone()).collect();
        let schema = crate::schema::model::schema_of_specs(
            CODEC_SCHEMA_NAME,
            &specs,
            request.sequence_field.as_deref(),
        )
        .map_err(|e| batch_err!("the request's fields as a schema: {}", e.message()))?;
        metadata.insert(meta::SCHEMA.into(), schema.canonical);
        metadata.insert(meta::FINGERPRINT.into(), schema.fingerprint);
    }
    Ok(metadata)
}

/// With `request.checksum`: puts the header's digest in `metadata` now, zeros for the
/// payload's until it is written, and returns the fields the checksum covers.
fn checksum_placeholder(
    request: &EncodeRequest<'_>,
    metadata: &mut BTreeMap<String, String>,
    entries: &[Entry],
) -> Result<Option<Vec<String>>> {
    if !request.checksum {
        return Ok(None);
    }
    let fields: Vec<String> = request.fields.iter().map(|f| f.spec.name.clone()).collect();
    metadata.remove(meta::CHECKSUM);
    let entry = crate::frame::checksum::placeholder(metadata, entries, &fields)?;
    metadata.insert(meta::CHECKSUM.into(), entry);
    Ok(Some(fields))
}

/// The whole frame's length: header then data section. Refuses a frame too large for memory,
/// or one whose bytes do not back its row count.
pub(crate) fn frame_len(data_len: u64, data_start: usize, num_rows: u64) -> Result<usize> {
    let total_len = usize::try_from(data_len)
        .ok()
        .and_then(|d| d.checked_add(data_start))
        .ok_or_else(|| batch_err!("frame of {data_len} bytes does not fit in memory"))?;
    if num_rows > total_len as u64 {
        // Readers refuse row counts the bytes do not back (a hostile header's favourite lie).
        return Err(batch_err!(
            "{num_rows} rows with no per-row data would make a frame of {total_len} bytes that \
             no reader accepts; add a per-row field"
        )
        .code(Code::RowsUnbacked));
    }
    Ok(total_len)
}

/// The layout's copies and blobs moved from data-section offsets to frame offsets.
fn after_header<'a>(
    mut jobs: Vec<CopyJob<'a>>,
    blobs: Vec<(u64, Vec<u8>)>,
    data_start: usize,
) -> (Vec<CopyJob<'a>>, Vec<(usize, Vec<u8>)>) {
    for job in &mut jobs {
        job.dst_offset += data_start;
    }
    let blobs = blobs
        .into_iter()
        .map(|(o, b)| (o as usize + data_start, b))
        .collect();
    (jobs, blobs)
}

/// The declared lengths field, when present, must equal every row's sequence length.
fn check_lengths_field(
    request: &EncodeRequest<'_>,
    seq_name: &str,
    seq: &SeqOffsets,
) -> Result<()> {
    let Some(name) = request.lengths_field.as_deref() else {
        return Ok(());
    };
    let Some(field) = request.fields.iter().find(|f| f.spec.name == name) else {
        return Ok(());
    };
    let FieldInput::Dense(t) = &field.input else {
        return Ok(()); // plan_scalar reports the wrong input kind
    };
    let declared = t
        .to_i64_vec()
        .map_err(|e| batch_err!("field {name:?}: {}", e.message()))?;
    let bad: Vec<usize> = (0..seq.num_rows().min(declared.len()))
        .filter(|&r| declared[r] != seq.len(r) as i64)
        .collect();
    if let Some(&row) = bad.first() {
        return Err(batch_err!(
            "field {name:?}, row {row}: {} but {seq_name:?} has {} tokens in that row ({} rows \
             disagree)",
            declared[row],
            seq.len(row),
            bad.len()
        )
        .code(Code::LengthsField)
        .field(name)
        .row(row)
        .expected(seq.len(row))
        .found(declared[row]));
    }
    Ok(())
}
