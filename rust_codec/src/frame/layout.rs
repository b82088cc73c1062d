//! Frame → validated layout. Nothing here copies payload: it checks every offset, shape and
//! index the header and index tensors claim, so that the views the caller builds are in bounds
//! and consistent. Cost: O(fields + rows + segments), independent of payload bytes.

use crate::error::{Error, Result};
use crate::frame::compact;
use crate::frame::header::{parse_header, parse_prefix, Entry, Header};
use crate::memory::buffer::ALIGNMENT;
use crate::schema::dtype::DType;
use crate::schema::embedded;
use crate::schema::spec::{meta, names, FieldSpec, Tier};
use crate::tensor::checked_numel;
use crate::{frame_err, internal_err};

/// Where a tensor lies in the frame (absolute byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorLoc {
    /// The tensor's first byte, counted from the frame's first byte.
    pub offset: usize,
    /// The tensor's length in bytes: its element count times its dtype's size, checked.
    pub nbytes: usize,
    /// The dtype the header declares.
    pub dtype: DType,
    /// The shape the header declares.
    pub shape: Vec<u64>,
}

/// The CSR index of a packed field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedIndex {
    /// `[segments, rank]` int64.
    pub seg_shapes: TensorLoc,
    /// `[segments + 1]` int64 element offsets into the flat values.
    pub seg_offsets: TensorLoc,
    /// `[rows + 1]` int64 offsets into `row_segments`.
    pub row_offsets: TensorLoc,
    /// `[references]` int64 physical segment ids.
    pub row_segments: TensorLoc,
    /// How many physical segments the field stores (`seg_shapes`' first dim).
    pub num_segments: u64,
    /// How many segment references its rows make (`row_segments`' length).
    pub num_refs: u64,
    /// Every segment is referenced once, in storage order: the values are the rows'
    /// concatenation as they stand.
    pub in_order: bool,
}

/// One field of a parsed frame: its spec and where its tensors lie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedField {
    /// The field's layout facts, from the frame's schema (embedded or held; see
    /// [`schema_field_table`]). Shared: a frame op's
    /// output layout takes its sources' specs without copying them.
    pub spec: std::sync::Arc<FieldSpec>,
    /// Where the field's values tensor lies.
    pub values: TensorLoc,
    /// The CSR tables of a packed field (`None` for other tiers).
    pub packed: Option<PackedIndex>,
}

/// A frame as [`parse_frame`] validated it: header, row count and every field's tensors, each in
/// bounds, the one view of a frame every reader goes through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameLayout {
    /// The parsed safetensors header.
    pub header: Header,
    /// The batch's row count (`py_wire.num_rows`).
    pub num_rows: u64,
    /// The field whose rows define the per-token lengths, when the schema has one.
    pub sequence_field: Option<String>,
    /// `[rows + 1]` int64 token offsets shared by every per-token field.
    pub seq_offsets: Option<TensorLoc>,
    /// Tokens in the frame: the last sequence offset (0 without per-token fields).
    pub total_tokens: u64,
    /// The frame's fields, in field-table order (for a schema's table: data-section order).
    pub fields: Vec<DecodedField>,
    /// A compact frame's schema as it was read under it (None for an embedded frame, which
    /// carries its own): copies and operations of the frame read it again under this one.
    pub held: Option<compact::HeldRef>,
}

impl FrameLayout {
    /// The field called `name`, if the frame has it.
    pub fn field(&self, name: &str) -> Option<&DecodedField> {
        self.fields.iter().find(|f| f.spec.name == name)
    }
}

fn locate(header: &Header, entry: &Entry) -> Result<TensorLoc> {
    let offset = (header.data_start as u64)
        .checked_add(entry.begin)
        .ok_or_else(|| frame_err!("tensor {:?}: offset overflows", entry.name))?;
    if offset % ALIGNMENT as u64 != 0 {
        return Err(frame_err!(
            "tensor {:?} starts at byte {offset}, not 64-byte aligned",
            entry.name
        ));
    }
    Ok(TensorLoc {
        offset: offset as usize,
        nbytes: (entry.end - entry.begin) as usize,
        dtype: entry.dtype,
        shape: entry.shape.clone(),
    })
}

fn find(header: &Header, name: &str, dtype: DType, rank: usize) -> Result<TensorLoc> {
    let entry = header
        .entry(name)
        .ok_or_else(|| frame_err!("tensor {name:?} is missing"))?;
    if entry.dtype != dtype || entry.shape.len() != rank {
        return Err(frame_err!(
            "tensor {name:?} is {} of shape {:?}; expected {} of rank {rank}",
            entry.dtype.name(),
            entry.shape,
            dtype.name()
        ));
    }
    locate(header, entry)
}

/// A schema's field table for the frame whose header is `header`: the schema's fields (`specs`)
/// that have a values tensor in the frame, in the order their values lie in the data section
/// (the order the encoder wrote them in; empty tensors sharing an offset by name). An optional
/// field a batch did not carry is absent. The one way a field table is obtained from a schema,
/// embedded or compact: the order does not depend on where the schema came from (an embedded
/// schema's canonical JSON sorts its fields by name, a held one keeps its declaration order).
pub fn schema_field_table(specs: &[FieldSpec], header: &Header) -> Vec<FieldSpec> {
    // By name, so a hostile header of many tensors costs O(tensors + fields), not a product.
    let by_name: std::collections::HashMap<&str, &FieldSpec> =
        specs.iter().map(|s| (s.name.as_str(), s)).collect();
    header
        .entries
        .iter()
        .filter_map(|entry| by_name.get(entry.name.as_str()).map(|s| (*s).clone()))
        .collect()
}

/// The field table and sequence field of the frame whose header is `header` (format
/// [`meta::FORMAT_VERSION`], checked by the caller):
///
/// - compact (`py_wire.schema_ref`): from the held schema it names (see `frame::compact`; a
///   `FrameError` naming the fingerprint when this process holds no such schema);
/// - embedded (`py_wire.schema`, checked against `py_wire.fingerprint`, see
///   `schema::text`): from that schema; a header that also carries a field table or
///   sequence field mixes forms;
/// - neither: a `FrameError` (every writer embeds or names a schema).
///
/// `known`: the schema a compact frame was read under before, used when the header names it
/// (else the registry is asked).
fn field_table(header: &Header, known: Option<&compact::HeldRef>) -> Result<FieldTable> {
    let metadata = &header.metadata;
    let reference = compact::schema_ref(metadata)?;
    check_table_form(header.listed, reference.is_some())?;
    if let Some(reference) = reference {
        let held = match known {
            Some(k) if k.schema.fingerprint == reference => k.clone(),
            _ => compact::resolve_held(reference)?,
        };
        let specs = schema_field_table(&held.schema.specs, header);
        let sequence_field = held.schema.sequence_field.clone();
        return Ok((specs, sequence_field, Some(held)));
    }
    let Some(facts) = embedded::embedded_facts(metadata)? else {
        return Err(frame_err!(
            "the frame carries no schema: neither {:?} (embedded) nor {:?} (compact); a reader \
             of format {:?} reads no other form",
            meta::SCHEMA,
            meta::SCHEMA_REF,
            meta::FORMAT_VERSION
        ));
    };
    if let Some(key) = [meta::FIELDS, meta::SEQUENCE_FIELD]
        .into_iter()
        .find(|k| metadata.contains_key(*k))
    {
        return Err(frame_err!(
            "the header embeds its schema ({:?}) but also carries {key:?}, which an embedded \
             frame derives from the schema (damaged header?)",
            meta::SCHEMA
        ));
    }
    Ok((
        schema_field_table(&facts.specs, header),
        facts.sequence_field.clone(),
        None,
    ))
}

/// What [`field_table`] finds: the specs, the sequence field, a compact frame's schema.
type FieldTable = (Vec<FieldSpec>, Option<String>, Option<compact::HeldRef>);

/// One table form per header kind: a compact header lists its tensors (`py_wire.tensors`); an
/// embedded one has the safetensors table.
fn check_table_form(listed: bool, compact: bool) -> Result<()> {
    match (listed, compact) {
        (true, false) => Err(frame_err!(
            "the header lists its tensors ({:?}) but names no schema by {:?}: only compact \
             frames list their tensors",
            meta::TENSORS,
            meta::SCHEMA_REF
        )),
        (false, true) => Err(frame_err!(
            "a compact header lists its tensors in {:?}; this one has a safetensors table \
             instead (damaged header?)",
            meta::TENSORS
        )),
        _ => Ok(()),
    }
}

/// Parses and validates a whole frame. `buf` may hold bytes after the frame's end (a frame in a
/// larger buffer): the frame is its first `header.frame_len` bytes and the rest is never read.
pub fn parse_frame(buf: &[u8]) -> Result<FrameLayout> {
    layout_from_header(parse_header(buf)?, buf)
}

/// [`parse_frame`] of a frame read before under `known` (its layout's [`FrameLayout::held`]):
/// a compact frame naming that schema is read under it, whether or not the registry still
/// holds it (a copy of a frame its user holds, its contracts checked again).
pub fn parse_frame_known(buf: &[u8], known: Option<&compact::HeldRef>) -> Result<FrameLayout> {
    layout_with(parse_header(buf)?, buf, Trust::Hostile, known)
}

/// The layout of the frame in `buf` whose header is `header` (from [`parse_header`], or what
/// an encoder wrote there): every check of [`parse_frame`] but the JSON parse. A compact
/// frame's errors name the schema fingerprint it was read against.
pub fn layout_from_header(header: Header, buf: &[u8]) -> Result<FrameLayout> {
    layout_with(header, buf, Trust::Hostile, None)
}

/// The layout of a frame this process's encoder just wrote into `buf` from `header`: every
/// O(fields) check of [`layout_from_header`], but the O(rows) index tables are not read
/// back. They hold what the encoder computed from validated input, so reading them again
/// can find nothing (the fuzz targets parse every written frame with [`parse_frame`] to
/// keep that true).
pub fn layout_of_written(header: Header, buf: &[u8]) -> Result<FrameLayout> {
    layout_with(header, buf, Trust::Written, None)
}

/// [`layout_of_written`] of a frame written from frames read under `known` (see
/// [`parse_frame_known`]).
pub fn layout_of_written_known(
    header: Header,
    buf: &[u8],
    known: Option<&compact::HeldRef>,
) -> Result<FrameLayout> {
    layout_with(header, buf, Trust::Written, known)
}

/// How much of a frame's index tables a reader checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trust {
    /// Bytes from anywhere: every table entry is checked.
    Hostile,
    /// Bytes this process's encoder wrote: tables are located and sized, not re-read.
    Written,
}

fn layout_with(
    header: Header,
    buf: &[u8],
    trust: Trust,
    known: Option<&compact::HeldRef>,
) -> Result<FrameLayout> {
    let compact = header.metadata.get(meta::SCHEMA_REF).cloned();
    checked_layout(header, buf, trust, known).map_err(|e| match compact {
        Some(fp) if matches!(e, Error::Frame(_)) && e.kind() != "unknown_schema" => {
            let shown: String = fp.chars().take(80).collect();
            e.context(&format!("compact frame of schema {shown}"))
        }
        _ => e,
    })
}

/// The header's format version must be [`meta::FORMAT_VERSION`] (0.1 had no users: the
/// formats before it are not read), else a `FrameError` naming the version found.
fn check_format_version(md: &std::collections::BTreeMap<String, String>) -> Result<()> {
    match md.get(meta::FORMAT).map(String::as_str) {
        Some(meta::FORMAT_VERSION) => Ok(()),
        Some(other) => {
            let shown: String = other.chars().take(20).collect();
            Err(frame_err!(
                "frame format version {shown:?} is not supported (this build reads format {:?} \
                 only)",
                meta::FORMAT_VERSION
            )
            .expected(meta::FORMAT_VERSION)
            .found(shown))
        }
        None => Err(frame_err!(
            "not a py_wire frame: no {:?} in __metadata__",
            meta::FORMAT
        )),
    }
}

fn checked_layout(
    header: Header,
    buf: &[u8],
    trust: Trust,
    known: Option<&compact::HeldRef>,
) -> Result<FrameLayout> {
    let buf = buf
        .get(..header.frame_len)
        .ok_or_else(|| frame_err!("frame length {} exceeds the buffer", header.frame_len))?;
    check_format_version(&header.metadata)?;
    if let Some(key) = header.metadata.keys().find(|k| meta::reserved_unknown(k)) {
        let shown: String = key.chars().take(80).collect();
        return Err(frame_err!(
            "__metadata__ key {shown:?} is reserved ({:?}) but not one this build reads: a \
             damaged header, or a frame of a newer format",
            meta::PREFIX
        )
        .found(shown));
    }
    let num_rows = row_count(&header.metadata, buf.len())?;
    let (specs, sequence_field, held) = match trust {
        Trust::Hostile => field_table(&header, known)?,
        Trust::Written => written_field_table(&header, known)?,
    };
    let (seq_offsets, total_tokens) = match specs.iter().any(|s| s.tier == Tier::PerToken) {
        true => sequence_offsets(&header, buf, num_rows, trust)?,
        false => (None, 0),
    };
    if trust == Trust::Hostile {
        check_specs(&specs)?;
    }
    let fields = specs
        .into_iter()
        .map(|spec| located_field(&header, buf, spec, num_rows, total_tokens, trust))
        .collect::<Result<Vec<_>>>()?;
    check_sequence_field(&fields, sequence_field.as_deref())?;
    if trust == Trust::Hostile {
        check_every_entry_claimed(&header, &fields)?;
    }
    Ok(FrameLayout {
        header,
        num_rows,
        sequence_field,
        seq_offsets,
        total_tokens,
        fields,
        held,
    })
}

/// `py_wire.num_rows`, refused when the frame's `frame_len` bytes could not back it.
fn row_count(md: &std::collections::BTreeMap<String, String>, frame_len: usize) -> Result<u64> {
    let num_rows: u64 = md
        .get(meta::NUM_ROWS)
        .filter(|s| s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| frame_err!("{:?} is missing or not a row count", meta::NUM_ROWS))?;
    // No loop or allocation may be sized by a number the bytes do not back: every real frame
    // spends at least one byte per row (its sequence and row offsets alone spend 8).
    if num_rows > frame_len as u64 {
        return Err(frame_err!(
            "{:?} claims {num_rows} rows but the frame holds only {frame_len} bytes",
            meta::NUM_ROWS
        ));
    }
    Ok(num_rows)
}

/// The field table of a header this process's encoder wrote. Its embedded schema was checked
/// where it came from (a parsed frame, or the Python layer), so a schema this process holds
/// under the header's fingerprint stands for it; only a schema not held is parsed again.
fn written_field_table(header: &Header, known: Option<&compact::HeldRef>) -> Result<FieldTable> {
    let md = &header.metadata;
    if md.contains_key(meta::SCHEMA) {
        if let Some(schema) = md.get(meta::FINGERPRINT).and_then(|fp| compact::held(fp)) {
            let specs = schema_field_table(&schema.specs, header);
            return Ok((specs, schema.sequence_field.clone(), None));
        }
    }
    field_table(header, known)
}

/// Every spec passes the codec's field rules, each name once.
fn check_specs(specs: &[FieldSpec]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(specs.len());
    for spec in specs {
        spec.validate()
            .map_err(|e| frame_err!("field table: {}", e.message()))?;
        if !seen.insert(spec.name.as_str()) {
            return Err(frame_err!(
                "field {:?} appears twice in the field table",
                spec.name
            ));
        }
    }
    Ok(())
}

/// `__seq_offsets` and the token count it ends at: every offset read and checked from hostile
/// bytes, only the shape and the last offset from written ones.
fn sequence_offsets(
    header: &Header,
    buf: &[u8],
    num_rows: u64,
    trust: Trust,
) -> Result<(Option<TensorLoc>, u64)> {
    let loc = find(header, names::SEQ_OFFSETS, DType::I64, 1)?;
    let what = || names::SEQ_OFFSETS.to_string();
    let total_tokens = match trust {
        Trust::Hostile => {
            let total = last_index(buf, &loc, &what)?;
            read_offsets(buf, &loc, num_rows + 1, total, &what)?;
            total
        }
        Trust::Written => {
            expect_shape(&what(), &loc.shape, &[num_rows + 1])?;
            last_index(buf, &loc, &what)?
        }
    };
    Ok((Some(loc), total_tokens))
}

/// A field of the table located in the frame: its values tensor of the stored dtype and the
/// shape its tier implies, and a packed field's index tables.
fn located_field(
    header: &Header,
    buf: &[u8],
    spec: FieldSpec,
    num_rows: u64,
    total_tokens: u64,
    trust: Trust,
) -> Result<DecodedField> {
    let stored = spec.stored_dtype();
    let values_entry = header
        .entry(&spec.name)
        .ok_or_else(|| frame_err!("values of field {:?} are missing", spec.name))?;
    if values_entry.dtype != stored {
        return Err(frame_err!(
            "field {:?} is stored as {} but the field table says {}",
            spec.name,
            values_entry.dtype.name(),
            stored.name()
        ));
    }
    let values = locate(header, values_entry)?;
    let rows = match spec.tier {
        Tier::Scalar => Some(num_rows),
        Tier::PerToken => Some(total_tokens),
        Tier::Packed => None,
    };
    let packed = match rows {
        Some(rows) => {
            let mut expected = vec![rows];
            expected.extend(spec.shape.iter().map(|d| d.unwrap_or(0)));
            expect_shape(&spec.name, &values.shape, &expected)?;
            None
        }
        None => Some(packed_index(buf, header, &spec, &values, num_rows, trust)?),
    };
    Ok(DecodedField {
        spec: std::sync::Arc::new(spec),
        values,
        packed,
    })
}

/// A frame with per-token fields has a schema that names a sequence field. The sequence field's
/// own values may be absent (a write-back frame of per-token fields added to rows stored
/// elsewhere): `__seq_offsets` hold the rows' token counts and every per-token field is checked
/// against them.
fn check_sequence_field(fields: &[DecodedField], seq: Option<&str>) -> Result<()> {
    let Some(first) = fields.iter().find(|f| f.spec.tier == Tier::PerToken) else {
        return Ok(());
    };
    let named = fields.iter().find(|f| Some(f.spec.name.as_str()) == seq);
    if seq.is_none() || named.is_some_and(|f| f.spec.tier != Tier::PerToken) {
        return Err(frame_err!(
            "the frame has per-token fields ({:?}, ...) but its sequence field {seq:?} is \
             not one of them",
            first.spec.name
        ));
    }
    Ok(())
}

/// Every tensor of the header belongs to a field of the field table (its values, its CSR
/// tables, the sequence offsets of per-token fields) or is alignment padding (`__pad.K`, bytes).
/// A frame whose field table lost fields while their tensors remain is damaged: it would
/// otherwise read as a frame of fewer fields, and frame ops would meet tensors they cannot place.
fn check_every_entry_claimed(header: &Header, fields: &[DecodedField]) -> Result<()> {
    let mut claimed: std::collections::HashSet<String> = std::collections::HashSet::new();
    if fields.iter().any(|f| f.spec.tier == Tier::PerToken) {
        claimed.insert(names::SEQ_OFFSETS.to_string());
    }
    for f in fields {
        let name = &f.spec.name;
        claimed.insert(name.clone());
        if f.spec.tier == Tier::Packed {
            claimed.extend(names::tables(name));
        }
    }
    for entry in &header.entries {
        if claimed.contains(&entry.name) {
            continue;
        }
        let padding = entry
            .name
            .strip_prefix(names::PAD_PREFIX)
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
            && entry.dtype == DType::U8
            && entry.shape.len() == 1;
        if !padding {
            return Err(frame_err!(
                "tensor {:?} belongs to no field of the frame's field table (and is not \
                 `{}K` padding): the field table and the tensors disagree (damaged header?)",
                entry.name,
                names::PAD_PREFIX
            ));
        }
    }
    Ok(())
}

/// What a reader must see of a frame to validate it (`parse_frame`), read from a prefix of it
/// (`8 + header_len` bytes): the frame's length and the absolute byte ranges `(start, len)` of
/// its header and of every tensor that is not a field's values (sequence offsets, CSR tables,
/// padding). A frame that lies where reading is costly (device memory) is validated from a
/// buffer holding only these bytes; the payload is never read by `parse_frame`.
pub fn validation_ranges(prefix: &[u8]) -> Result<(usize, Vec<(usize, usize)>)> {
    let header = parse_prefix(prefix)?;
    check_format_version(&header.metadata)?;
    let (specs, _, _) = field_table(&header, None)?;
    let mut ranges = vec![(0, header.data_start)];
    for entry in &header.entries {
        if !specs.iter().any(|s| s.name == entry.name) {
            let start = usize::try_from(entry.begin)
                .ok()
                .and_then(|b| b.checked_add(header.data_start));
            let len = usize::try_from(entry.end - entry.begin).ok();
            match (start, len) {
                (Some(start), Some(len)) => ranges.push((start, len)),
                _ => return Err(frame_err!("tensor {:?} lies past 2^64", entry.name)),
            }
        }
    }
    Ok((header.frame_len, ranges))
}

/// Locates a packed field's index tensors and validates their contents.
fn packed_index(
    buf: &[u8],
    header: &Header,
    spec: &FieldSpec,
    values: &TensorLoc,
    num_rows: u64,
    trust: Trust,
) -> Result<PackedIndex> {
    let name = &spec.name;
    let seg_shapes = find(header, &names::seg_shapes(name), DType::I64, 2)?;
    let rank = spec.shape.len() as u64;
    if seg_shapes.shape[1] != rank {
        return Err(frame_err!(
            "field {name:?}: segment shapes have rank {}, the field has rank {rank}",
            seg_shapes.shape[1]
        ));
    }
    let mut index = PackedIndex {
        seg_shapes,
        seg_offsets: find(header, &names::seg_offsets(name), DType::I64, 1)?,
        row_offsets: find(header, &names::row_offsets(name), DType::I64, 1)?,
        row_segments: find(header, &names::row_segments(name), DType::I64, 1)?,
        num_segments: 0,
        num_refs: 0,
        in_order: false,
    };
    let (num_segments, row_segments) = match trust {
        Trust::Hostile => {
            let tables = PackedTables::read_index(buf, spec, values, &index, num_rows)?;
            (tables.num_segments() as u64, tables.row_segments)
        }
        Trust::Written => {
            let what = || names::row_segments(name);
            let segments = index.seg_offsets.shape[0].saturating_sub(1);
            (segments, copy_indices(buf, &index.row_segments, &what)?)
        }
    };
    index.num_segments = num_segments;
    index.num_refs = row_segments.len() as u64;
    index.in_order = row_segments.len() as u64 == num_segments
        && row_segments
            .iter()
            .enumerate()
            .all(|(i, &id)| id == i as u64);
    Ok(index)
}

fn expect_shape(name: &str, found: &[u64], expected: &[u64]) -> Result<()> {
    if found != expected {
        return Err(frame_err!(
            "field {name:?}: values have shape {found:?}, expected {expected:?}"
        ));
    }
    Ok(())
}

/// The bytes of an int64 index tensor, bounds-checked against the frame.
fn index_bytes<'b>(buf: &'b [u8], loc: &TensorLoc, what: &dyn Fn() -> String) -> Result<&'b [u8]> {
    buf.get(loc.offset..loc.offset.saturating_add(loc.nbytes))
        .filter(|b| b.len() % 8 == 0)
        .ok_or_else(|| frame_err!("{} lies outside the frame", what()))
}

fn le_i64(chunk: &[u8]) -> i64 {
    let mut le = [0u8; 8];
    le.copy_from_slice(chunk);
    i64::from_le_bytes(le)
}

/// The last entry of an int64 index tensor (0 when it is empty), which must not be negative.
fn last_index(buf: &[u8], loc: &TensorLoc, what: &dyn Fn() -> String) -> Result<u64> {
    let bytes = index_bytes(buf, loc, what)?;
    let Some(last) = bytes.len().checked_sub(8).map(|at| le_i64(&bytes[at..])) else {
        return Ok(0);
    };
    u64::try_from(last)
        .map_err(|_| frame_err!("{}[{}] = {last} is negative", what(), bytes.len() / 8 - 1))
}

/// Copies an int64 index tensor out of the frame as u64s; a negative entry is a `FrameError`.
/// Readers validate and then use the copy, never the frame's bytes again, so a buffer written
/// after (or while) it is read can give wrong rows but never an out-of-bounds index.
fn copy_indices(buf: &[u8], loc: &TensorLoc, what: &dyn Fn() -> String) -> Result<Vec<u64>> {
    let bytes = index_bytes(buf, loc, what)?;
    let mut out = Vec::with_capacity(bytes.len() / 8);
    let mut sign = 0i64;
    for chunk in bytes.chunks_exact(8) {
        let v = le_i64(chunk);
        sign |= v;
        out.push(v as u64);
    }
    if sign < 0 {
        return Err(negative_entry(&out, what));
    }
    Ok(out)
}

/// The error for a table that holds a negative entry (its raw bits in `entries`).
fn negative_entry(entries: &[u64], what: &dyn Fn() -> String) -> Error {
    match entries.iter().position(|&v| (v as i64) < 0) {
        Some(i) => frame_err!("{}[{i}] = {} is negative", what(), entries[i] as i64),
        None => frame_err!("{} holds a negative entry", what()),
    }
}

/// Copies CSR offsets out of the frame in one pass that also checks them: `len` entries,
/// starting at 0, never decreasing, ending at `last` (so none is negative either).
fn read_offsets(
    buf: &[u8],
    loc: &TensorLoc,
    len: u64,
    last: u64,
    what: &dyn Fn() -> String,
) -> Result<Vec<u64>> {
    let bytes = index_bytes(buf, loc, what)?;
    if (bytes.len() / 8) as u64 != len {
        return Err(frame_err!(
            "{} has {} entries, expected {len}",
            what(),
            bytes.len() / 8
        ));
    }
    let mut out = Vec::with_capacity(bytes.len() / 8);
    out.extend(bytes.chunks_exact(8).map(|c| le_i64(c) as u64));
    // Starting at 0 and never decreasing (as i64s), no entry is negative.
    let ordered = crate::memory::monotone::never_decrease(bytes);
    let valid =
        ordered && out.first().is_none_or(|&f| f == 0) && out.last().copied().unwrap_or(0) == last;
    if !valid {
        if out.iter().any(|&v| (v as i64) < 0) {
            return Err(negative_entry(&out, what));
        }
        check_csr(&out, len, last, what)?;
        return Err(internal_err!("{}: rejected table passed check_csr", what()));
    }
    Ok(out)
}

/// Checks CSR offsets: `len` entries, starting at 0, never decreasing, ending at `last`; the
/// error names the first entry that breaks the rule.
fn check_csr(offsets: &[u64], len: u64, last: u64, what: &dyn Fn() -> String) -> Result<()> {
    if offsets.len() as u64 != len {
        return Err(frame_err!(
            "{} has {} entries, expected {len}",
            what(),
            offsets.len()
        ));
    }
    if let Some(&first) = offsets.first() {
        if first != 0 {
            return Err(frame_err!(
                "{}[0] = {first}, offsets must start at 0",
                what()
            ));
        }
    }
    if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(frame_err!(
            "{}[{}] = {} after {} (offsets must never decrease)",
            what(),
            i + 1,
            offsets[i + 1],
            offsets[i]
        ));
    }
    let end = offsets.last().copied().unwrap_or(0);
    if end != last {
        return Err(frame_err!("{} ends at {end}, expected {last}", what()));
    }
    Ok(())
}

/// The sequence offsets (`[rows + 1]`, token offsets of each row), copied and validated.
pub fn read_seq_offsets(buf: &[u8], layout: &FrameLayout) -> Result<Option<Vec<u64>>> {
    let Some(loc) = &layout.seq_offsets else {
        return Ok(None);
    };
    let what = || names::SEQ_OFFSETS.to_string();
    let rows_plus_one = layout
        .num_rows
        .checked_add(1)
        .ok_or_else(|| frame_err!("row count overflows"))?;
    read_offsets(buf, loc, rows_plus_one, layout.total_tokens, &what).map(Some)
}

/// A packed field's CSR tables, copied out of the frame and validated against the field's spec
/// and values: every segment id, shape and element range is in bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTables {
    /// The dims per segment, the same for every segment of the field.
    pub rank: usize,
    /// `[segments * rank]`: each physical segment's shape.
    pub seg_shapes: Vec<u64>,
    /// `[segments + 1]`: element offsets of each segment in the values.
    pub seg_offsets: Vec<u64>,
    /// `[rows + 1]`: offsets into `row_segments`.
    pub row_offsets: Vec<u64>,
    /// `[references]`: physical segment ids, row after row.
    pub row_segments: Vec<u64>,
}

impl PackedTables {
    /// How many physical segments the field stores.
    pub fn num_segments(&self) -> usize {
        self.seg_offsets.len() - 1
    }

    /// Physical segment ids of `row` (< num_rows).
    pub fn row(&self, row: usize) -> &[u64] {
        &self.row_segments[self.row_offsets[row] as usize..self.row_offsets[row + 1] as usize]
    }

    /// Shape of physical segment `seg`.
    pub fn shape(&self, seg: u64) -> &[u64] {
        let s = seg as usize * self.rank;
        &self.seg_shapes[s..s + self.rank]
    }

    /// Element range of physical segment `seg` in the values.
    pub fn elements(&self, seg: u64) -> std::ops::Range<usize> {
        self.seg_offsets[seg as usize] as usize..self.seg_offsets[seg as usize + 1] as usize
    }

    /// Items of `row` along `dim` (checked: shapes come from the wire).
    pub fn items(&self, row: usize, dim: usize) -> Option<u64> {
        self.row(row)
            .iter()
            .try_fold(0u64, |acc, &s| acc.checked_add(self.shape(s)[dim]))
    }

    /// Reads and validates the tables of `field` (packed) in `buf`.
    pub fn read(buf: &[u8], field: &DecodedField, num_rows: u64) -> Result<PackedTables> {
        let index = field
            .packed
            .as_ref()
            .ok_or_else(|| frame_err!("field {:?} has no segment tables", field.spec.name))?;
        Self::read_index(buf, &field.spec, &field.values, index, num_rows)
    }

    fn read_index(
        buf: &[u8],
        spec: &FieldSpec,
        values: &TensorLoc,
        index: &PackedIndex,
        num_rows: u64,
    ) -> Result<PackedTables> {
        let name = spec.name.as_str();
        let rank = spec.shape.len();
        if rank == 0 {
            return Err(frame_err!("packed field {name:?} has rank 0"));
        }
        let seg_shapes = copy_indices(buf, &index.seg_shapes, &|| names::seg_shapes(name))?;
        let seg_offsets = copy_indices(buf, &index.seg_offsets, &|| names::seg_offsets(name))?;
        let row_offsets = copy_indices(buf, &index.row_offsets, &|| names::row_offsets(name))?;
        let row_segments = copy_indices(buf, &index.row_segments, &|| names::row_segments(name))?;
        let num_segments = seg_offsets.len().saturating_sub(1);
        if seg_offsets.is_empty() || seg_shapes.len() != num_segments.saturating_mul(rank) {
            return Err(frame_err!(
                "field {name:?}: {} segment offsets and {} shape values do not describe the \
                 same segments of rank {rank}",
                seg_offsets.len(),
                seg_shapes.len()
            ));
        }
        let values_numel = checked_numel(&values.shape)
            .ok_or_else(|| frame_err!("field {name:?}: values shape overflows"))?;
        check_csr(
            &seg_offsets,
            seg_offsets.len() as u64,
            values_numel,
            &|| names::seg_offsets(name),
        )?;
        let mut stacked = 0u64;
        for s in 0..num_segments {
            let shape = &seg_shapes[s * rank..(s + 1) * rank];
            for (d, (&dim, expected)) in shape.iter().zip(&spec.shape).enumerate() {
                if let Some(e) = expected {
                    if dim != *e {
                        return Err(frame_err!(
                            "field {name:?}: segment {s} dim {d} is {dim}, the schema says {e}"
                        ));
                    }
                }
            }
            let numel = checked_numel(shape).ok_or_else(|| {
                frame_err!("field {name:?}: segment {s} shape {shape:?} overflows")
            })?;
            if seg_offsets[s + 1] - seg_offsets[s] != numel {
                return Err(frame_err!(
                    "field {name:?}: segment {s} of shape {shape:?} has {numel} elements but \
                     its offsets span {}..{}",
                    seg_offsets[s],
                    seg_offsets[s + 1]
                ));
            }
            stacked = stacked
                .checked_add(shape[0])
                .ok_or_else(|| frame_err!("field {name:?}: segment sizes overflow"))?;
        }
        let expected_values_shape = if spec.values_are_stackable() {
            let mut s = vec![stacked];
            s.extend(spec.shape[1..].iter().map(|d| d.unwrap_or(0)));
            s
        } else {
            vec![values_numel]
        };
        expect_shape(name, &values.shape, &expected_values_shape)?;
        let rows_plus_one = num_rows
            .checked_add(1)
            .ok_or_else(|| frame_err!("row count overflows"))?;
        check_csr(
            &row_offsets,
            rows_plus_one,
            row_segments.len() as u64,
            &|| names::row_offsets(name),
        )?;
        if let Some((i, &id)) = row_segments
            .iter()
            .enumerate()
            .find(|(_, &id)| id >= num_segments as u64)
        {
            return Err(frame_err!(
                "field {name:?}: row_segments[{i}] = {id} is not a segment id (0..{num_segments})"
            ));
        }
        Ok(PackedTables {
            rank,
            seg_shapes,
            seg_offsets,
            row_offsets,
            row_segments,
        })
    }
}
