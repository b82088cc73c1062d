//! Frame → validated layout. Nothing here copies payload: it checks every offset, shape and
//! index the header and index tensors claim, so that the views the caller builds are in bounds
//! and consistent. Cost: O(fields + rows + segments), independent of payload bytes.

use crate::error::{Error, Result};
use crate::frame::compact;
use crate::frame::header::{parse_header, parse_prefix, Header};
use crate::frame::located::{expect_shape, find, last_index, locate, read_offsets, Trust};
use crate::frame_err;
use crate::schema::dtype::DType;
use crate::schema::spec::{meta, names, FieldSpec};
use crate::tier::{self, FrameFacts, Items};

/// What a reader gets (`frame::located`), named here where it is made.
pub use crate::frame::located::{
    read_seq_offsets, DecodedField, FrameLayout, PackedIndex, PackedTables, TensorLoc,
};

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
    let Some(facts) = compact::embedded_facts(metadata)? else {
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
    let counts_tokens = specs
        .iter()
        .any(|s| tier::of(s.tier).items() == Items::Tokens);
    let (seq_offsets, total_tokens) = match counts_tokens {
        true => sequence_offsets(&header, buf, num_rows, trust)?,
        false => (None, 0),
    };
    if trust == Trust::Hostile {
        check_specs(&specs)?;
    }
    let facts = FrameFacts {
        header: &header,
        buf,
        num_rows,
        total_tokens,
        trust,
    };
    let fields = specs
        .into_iter()
        .map(|spec| located_field(&facts, spec))
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

/// A field of the table located in the frame: its values tensor of the stored dtype, and what
/// its tier locates from there (the values' shape checked, a packed field's index tables).
fn located_field(frame: &FrameFacts<'_>, spec: FieldSpec) -> Result<DecodedField> {
    let header = frame.header;
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
    let packed = tier::of(spec.tier).locate(frame, &spec, &values)?;
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
    let counts_tokens = |f: &&DecodedField| tier::of(f.spec.tier).items() == Items::Tokens;
    let Some(first) = fields.iter().find(counts_tokens) else {
        return Ok(());
    };
    let named = fields.iter().find(|f| Some(f.spec.name.as_str()) == seq);
    if seq.is_none() || named.is_some_and(|f| !counts_tokens(&f)) {
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
    let counts_tokens = |f: &DecodedField| tier::of(f.spec.tier).items() == Items::Tokens;
    if fields.iter().any(counts_tokens) {
        claimed.insert(names::SEQ_OFFSETS.to_string());
    }
    for f in fields {
        let name = &f.spec.name;
        claimed.insert(name.clone());
        claimed.extend(tier::of(f.spec.tier).tables(name));
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
