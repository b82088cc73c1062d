//! Batch → frame: validate every field against its spec, lay the frame out, copy each payload
//! byte once.
//!
//! `input` (what producers hand in, rows and lengths), `check` (dtype and dims of each tensor),
//! `layout` (where each tensor goes), `write` (the copies); this file plans a frame from them.

#![forbid(unsafe_code)]

mod check;
mod input;
pub(crate) mod layout;
pub mod staged;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::error::{Code, Error, Result};
use crate::frame::header::{write_header, Entry, Header};
use crate::memory::buffer::AlignedBuf;
use crate::memory::copy::CopyJob;
use crate::schema::dtype::DType;
use crate::schema::spec::{meta, names, FieldSpec, Tier};
use crate::tensor::{Dims, TensorRef};
use crate::{batch_err, internal_err, schema_err};

use check::{check_dims, check_dtype, Where};
use input::{prefix_sums, row_count, sequence_offsets, SeqOffsets};
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

/// The sequence field every per-token field is planned against: its name, its rows' token
/// offsets, and its row spans when it is a gather's.
struct Sequence<'r> {
    name: &'r str,
    offsets: SeqOffsets,
    spans: Option<&'r Arc<RowSpans>>,
}

/// The batch's [`Sequence`], or `None` when it has no per-token fields. Checks the lengths
/// field against it.
fn sequence_of<'r>(request: &'r EncodeRequest<'_>) -> Result<Option<Sequence<'r>>> {
    if !request.fields.iter().any(|f| f.spec.tier == Tier::PerToken) {
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
        .or_else(|| {
            request
                .fields
                .iter()
                .find(|f| f.spec.tier == Tier::PerToken)
        })
        .ok_or_else(|| {
            batch_err!("the batch has per-token fields but lacks the sequence field {seq_name:?}")
        })?;
    if seq_field.spec.tier != Tier::PerToken {
        return Err(schema_err!(
            "sequence field {seq_name:?} must be per-token, not {}",
            seq_field.spec.tier.name()
        ));
    }
    let offsets = sequence_offsets(seq_field)?;
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
    for field in &request.fields {
        match field.spec.tier {
            Tier::Scalar => plan_scalar(&mut layout, field, num_rows)?,
            Tier::PerToken => {
                let seq = sequence
                    .ok_or_else(|| internal_err!("per-token field without sequence lengths"))?;
                plan_per_token(&mut layout, field, seq)?
            }
            Tier::Packed => plan_packed(&mut layout, field)?,
        }
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

fn plan_scalar<'a>(layout: &mut Layout<'a>, field: &FieldData<'a>, num_rows: u64) -> Result<()> {
    let spec = &field.spec;
    let sources = match &field.input {
        FieldInput::Dense(t) => {
            check_dtype(spec, t, Where::Field)?;
            check_dims(spec, &t.shape[1..], &spec.shape, Where::Field, "row shape")?;
            vec![t.clone()]
        }
        // One value per row, as frame operations gather them.
        FieldInput::Segments {
            segments,
            row_offsets,
        } => {
            for (row, w) in row_offsets.windows(2).enumerate() {
                let location = Where::Row(row);
                if w[1] - w[0] != 1 {
                    return Err(batch_err!(
                        "field {:?}{location}: a scalar field needs one value per row",
                        spec.name
                    ));
                }
                let t = &segments[w[0] as usize];
                check_dtype(spec, t, location)?;
                check_dims(spec, &t.shape, &spec.shape, location, "value shape")?;
            }
            segments.clone()
        }
        FieldInput::Ranges { sources, spans } => {
            for t in sources {
                check_dtype(spec, t, Where::Field)?;
                check_dims(spec, &t.shape[1..], &spec.shape, Where::Field, "row shape")?;
            }
            if let Some(row) = spans.row_not_one_item() {
                return Err(batch_err!(
                    "field {:?}, row {row}: a scalar field needs one value per row",
                    spec.name
                ));
            }
            span_views(sources, spans)?
        }
        _ => {
            return Err(batch_err!(
                "field {:?} is a scalar field: pass one [B, ...] tensor",
                spec.name
            ))
        }
    };
    let mut shape = vec![num_rows];
    shape.extend(spec.shape.iter().map(|d| d.unwrap_or(0)));
    layout.values(spec, shape, sources)
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

/// The views to copy for row spans: one run per span.
fn span_views<'a>(sources: &[TensorRef<'a>], spans: &RowSpans) -> Result<Vec<TensorRef<'a>>> {
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

/// `t[index]`: drops dim 0.
fn select0<'a>(t: &TensorRef<'a>, index: u64) -> Result<TensorRef<'a>> {
    let row = t.narrow0(index, 1)?;
    TensorRef::strided(row.dtype, &row.shape[1..], &row.strides[1..], row.bytes)
}

fn plan_packed<'a>(layout: &mut Layout<'a>, field: &FieldData<'a>) -> Result<()> {
    let spec = &field.spec;
    let resolved = field.input.csr_segments(spec)?;
    let (segments, row_offsets) = packed_rows(spec, &resolved, &field.input)?;
    let (physical, row_segments) = physical_segments(spec, segments, row_offsets)?;
    let tables = SegmentTables::of(spec, &physical)?;
    let values_shape = if spec.values_are_stackable() {
        let mut s = vec![tables.stacked];
        s.extend(spec.shape[1..].iter().map(|d| d.unwrap_or(0)));
        s
    } else {
        vec![*tables.offsets.last().unwrap_or(&0)]
    };
    let n_phys = physical.len() as u64;
    layout.values(spec, values_shape, physical)?;
    let name = &spec.name;
    layout.blob_i64(
        names::seg_shapes(name),
        vec![n_phys, spec.shape.len() as u64],
        &tables.shapes,
    )?;
    layout.blob_i64(names::seg_offsets(name), vec![n_phys + 1], &tables.offsets)?;
    layout.blob_i64(
        names::row_offsets(name),
        vec![row_offsets.len() as u64],
        row_offsets,
    )?;
    layout.blob_i64(
        names::row_segments(name),
        vec![row_segments.len() as u64],
        &row_segments,
    )
}

/// A packed field's rows of segments, from its CSR form (`resolved`) or its segment lists; the
/// row offsets must run from 0 to the segment count.
fn packed_rows<'r, 'a>(
    spec: &FieldSpec,
    resolved: &'r Option<(Vec<TensorRef<'a>>, Vec<u64>)>,
    input: &'r FieldInput<'a>,
) -> Result<(&'r [TensorRef<'a>], &'r [u64])> {
    let (segments, row_offsets) = match (resolved, input) {
        (Some((segments, row_offsets)), _) => (segments, row_offsets),
        (
            None,
            FieldInput::Segments {
                segments,
                row_offsets,
            },
        ) => (segments, row_offsets),
        _ => {
            return Err(batch_err!(
                "field {:?} is packed: pass rows of segments (a PackedTensor or a list of \
                 tensors / None / lists of tensors)",
                spec.name
            ))
        }
    };
    let last = row_offsets.last().copied().unwrap_or(0);
    if row_offsets.first() != Some(&0) || last != segments.len() as u64 {
        return Err(batch_err!(
            "field {:?}: row offsets end at {last} but there are {} segment references",
            spec.name,
            segments.len()
        ));
    }
    Ok((segments, row_offsets))
}

/// Checks every segment reference and stores each physical segment once: returns the
/// segments to write and, per reference, the index of the segment it names.
fn physical_segments<'a>(
    spec: &FieldSpec,
    segments: &[TensorRef<'a>],
    row_offsets: &[u64],
) -> Result<(Vec<TensorRef<'a>>, Vec<u64>)> {
    // Physical segments: a segment that two rows reference is stored once. The key holds
    // everything that determines the bytes written: address, dtype, shape and strides (a
    // float32 segment and a bfloat16 view of the same memory are different segments).
    type Key = (usize, DType, Dims, Dims);
    let mut interned: HashMap<Key, u64> = HashMap::new();
    let mut physical: Vec<TensorRef<'a>> = Vec::new();
    let mut row_segments = Vec::with_capacity(segments.len());
    let mut row = 0usize;
    for (index, seg) in segments.iter().enumerate() {
        while row_offsets[row + 1] as usize <= index {
            row += 1;
        }
        let seg_in_row = index - row_offsets[row] as usize;
        let location = Where::Segment(row, seg_in_row);
        check_dtype(spec, seg, location)?;
        check_dims(spec, &seg.shape, &spec.shape, location, "shape")?;
        let id = if seg.numel() > 0 {
            let key = (
                seg.bytes.as_ptr() as usize,
                seg.dtype,
                seg.shape,
                seg.strides,
            );
            *interned.entry(key).or_insert_with(|| {
                physical.push(seg.clone());
                physical.len() as u64 - 1
            })
        } else {
            physical.push(seg.clone());
            physical.len() as u64 - 1
        };
        row_segments.push(id);
    }
    Ok((physical, row_segments))
}

/// A packed field's segment index tables, from its physical segments.
struct SegmentTables {
    /// `[S * rank]`: each segment's shape.
    shapes: Vec<u64>,
    /// `[S+1]`: element offsets of each segment in the values.
    offsets: Vec<u64>,
    /// The segments' dim 0 sizes, summed: the values' dim 0 when they stack.
    stacked: u64,
}

impl SegmentTables {
    fn of(spec: &FieldSpec, physical: &[TensorRef<'_>]) -> Result<SegmentTables> {
        let mut shapes = Vec::with_capacity(physical.len() * spec.shape.len());
        let mut numels = Vec::with_capacity(physical.len());
        let mut stacked = 0u64;
        for seg in physical {
            shapes.extend(&seg.shape);
            numels.push(seg.numel());
            stacked = stacked.checked_add(seg.shape[0]).ok_or_else(|| {
                batch_err!(
                    "field {:?}: the segments' dim 0 sizes add up past 2^64",
                    spec.name
                )
            })?;
        }
        let offsets = prefix_sums(numels, &|| format!("field {:?}: segment sizes", spec.name))?;
        Ok(SegmentTables {
            shapes,
            offsets,
            stacked,
        })
    }
}
