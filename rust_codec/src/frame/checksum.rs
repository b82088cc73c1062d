//! Optional payload checksums: one xxh3-64 digest per field, one for everything else in the
//! data section (the shared sequence offsets and padding), and one for the header's content,
//! stored in `__metadata__` under `py_wire.checksum` as JSON:
//! `{"algorithm":"xxh3-64","fields":{"input_ids":"<16 hex>",...},"header":"<16 hex>","shared":"<16 hex>"}`.
//!
//! Per field rather than one digest per frame, so that a mismatch names the field whose bytes
//! changed; every byte of the data section belongs to exactly one digest. A field's digest
//! covers its tensors (values, and a packed field's index tables) in data order. The header
//! digest covers the parsed header (every metadata entry but this one, every tensor entry), so
//! it does not depend on how the JSON is spaced, and a frame whose header changed in a way that
//! still parses fails too.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::error::{Code, Result};
use crate::frame::header::{Entry, Header};
use crate::schema::spec::{meta, names};
use crate::{frame_err, internal_err};

/// The hash every checksum in this build is: XXH3, 64 bits, written as 16 hex digits.
pub const ALGORITHM: &str = "xxh3-64";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    algorithm: String,
    fields: BTreeMap<String, String>,
    header: String,
    shared: String,
}

fn hex(digest: u64) -> String {
    format!("{digest:016x}")
}

/// The digest of a header's content: every metadata entry but the checksum itself (in key
/// order), then every tensor entry (in data order), each length-prefixed.
pub fn header_digest(metadata: &BTreeMap<String, String>, entries: &[Entry]) -> u64 {
    let mut h = Xxh3::new();
    let text = |h: &mut Xxh3, s: &str| {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    for (key, value) in metadata
        .iter()
        .filter(|(k, _)| k.as_str() != meta::CHECKSUM)
    {
        text(&mut h, key);
        text(&mut h, value);
    }
    for entry in entries {
        text(&mut h, &entry.name);
        text(&mut h, entry.dtype.safetensors_code());
        h.update(&(entry.shape.len() as u64).to_le_bytes());
        for dim in entry.shape.iter().chain([&entry.begin, &entry.end]) {
            h.update(&dim.to_le_bytes());
        }
    }
    h.digest()
}

/// The absolute byte ranges each digest covers: one list per field (in `fields` order), then
/// the shared rest. A tensor belongs to the field it is named after (its values, or one of its
/// index tables); every other tensor to the rest.
fn groups(header: &Header, fields: &[String]) -> Vec<Vec<(usize, usize)>> {
    let mut owner: HashMap<String, usize> = HashMap::with_capacity(fields.len() * 5);
    for (i, f) in fields.iter().enumerate() {
        for name in names::tables(f) {
            owner.insert(name, i);
        }
        owner.insert(names::seg_ids(f), i);
    }
    for (i, f) in fields.iter().enumerate() {
        owner.insert(f.clone(), i);
    }
    let mut ranges = vec![Vec::new(); fields.len() + 1];
    for entry in header.entries.iter().filter(|e| e.end > e.begin) {
        let group = owner.get(&entry.name).copied().unwrap_or(fields.len());
        // Offsets were checked against the frame's length when the header was parsed or written.
        let start = header.data_start + entry.begin as usize;
        ranges[group].push((start, header.data_start + entry.end as usize));
    }
    ranges
}

/// The digest of `ranges` of a frame given as `chunks`: `(absolute offset, bytes)`, in order,
/// back to back (one chunk for a frame in one buffer; the parts of a scatter/gather encode).
fn digest_ranges(ranges: &[(usize, usize)], chunks: &[(usize, &[u8])]) -> Result<u64> {
    let mut h = Xxh3::new();
    for &(start, end) in ranges {
        let mut at = start;
        let mut i = chunks.partition_point(|(o, _)| *o <= at).saturating_sub(1);
        while at < end {
            let (offset, bytes) = chunks
                .get(i)
                .filter(|(o, b)| *o <= at && at < o + b.len())
                .ok_or_else(|| internal_err!("checksum: byte {at} lies in no chunk"))?;
            let stop = end.min(offset + bytes.len());
            h.update(&bytes[at - offset..stop - offset]);
            at = stop;
            i += 1;
        }
    }
    Ok(h.digest())
}

fn compute(header: &Header, fields: &[String], chunks: &[(usize, &[u8])]) -> Result<Vec<u64>> {
    groups(header, fields)
        .iter()
        .map(|ranges| digest_ranges(ranges, chunks))
        .collect()
}

fn serialise(stored: &Stored) -> Result<String> {
    serde_json::to_string(stored).map_err(|e| internal_err!("checksum: {e}"))
}

/// The checksum entry an encoder puts in the metadata before the payload is written: the
/// header's digest, and a zero digest per field (every digest has the same width, so
/// [`sealed`] swaps them without moving a byte of the frame).
pub fn placeholder(
    metadata: &BTreeMap<String, String>,
    entries: &[Entry],
    fields: &[String],
) -> Result<String> {
    serialise(&Stored {
        algorithm: ALGORITHM.into(),
        fields: fields.iter().map(|f| (f.clone(), hex(0))).collect(),
        header: hex(header_digest(metadata, entries)),
        shared: hex(0),
    })
}

/// The checksum entry of the frame written as `chunks`, whose header (with a [`placeholder`])
/// is `header`.
pub fn sealed(header: &Header, fields: &[String], chunks: &[(usize, &[u8])]) -> Result<String> {
    let digests = compute(header, fields, chunks)?;
    serialise(&Stored {
        algorithm: ALGORITHM.into(),
        fields: fields
            .iter()
            .cloned()
            .zip(digests.iter().map(|&d| hex(d)))
            .collect(),
        header: hex(header_digest(&header.metadata, &header.entries)),
        shared: hex(digests[fields.len()]),
    })
}

/// The content of `fields` in a frame, as one XXH3-128 digest (32 hex digits): per field, in the
/// order given, its name, then each of its tensors (values and a packed field's index tables,
/// in data order) as entry name, dtype, shape and bytes, each length-prefixed. Two frames whose
/// named fields hold the same rows, segments and bytes give one digest wherever the fields lie
/// and whatever else the frames hold (a streamed sample's images, whatever its tokens).
/// `Err` names a field the frame does not have.
pub fn content_digest(header: &Header, fields: &[String], frame: &[u8]) -> Result<String> {
    let mut h = Xxh3::new();
    let text = |h: &mut Xxh3, s: &str| {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    for field in fields {
        let tables = names::tables(field);
        let mut found = false;
        text(&mut h, field);
        for entry in header
            .entries
            .iter()
            .filter(|e| e.name == *field || tables.contains(&e.name))
        {
            found |= entry.name == *field;
            text(&mut h, &entry.name);
            text(&mut h, entry.dtype.safetensors_code());
            h.update(&(entry.shape.len() as u64).to_le_bytes());
            for dim in &entry.shape {
                h.update(&dim.to_le_bytes());
            }
            let at = |offset: u64| {
                usize::try_from(offset)
                    .ok()
                    .and_then(|o| header.data_start.checked_add(o))
            };
            let bytes = at(entry.begin)
                .zip(at(entry.end))
                .and_then(|(a, b)| frame.get(a..b))
                .ok_or_else(|| internal_err!("tensor {:?} lies outside the frame", entry.name))?;
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        if !found {
            return Err(frame_err!("the frame has no field {field:?}").field(field));
        }
    }
    Ok(format!("xxh3-128:{:032x}", h.digest128()))
}

/// Whether a frame's metadata carries checksums.
pub fn present(metadata: &BTreeMap<String, String>) -> bool {
    metadata.contains_key(meta::CHECKSUM)
}

/// Checks a frame's bytes against its stored checksums; `fields` are the frame's field names.
/// A mismatch is a `FrameError` naming the field (or the header, or the shared tables).
pub fn verify(header: &Header, fields: &[String], frame: &[u8]) -> Result<()> {
    let json = header.metadata.get(meta::CHECKSUM).ok_or_else(|| {
        frame_err!("the frame carries no checksums (encode it with checksum=True)")
            .code(Code::Checksum)
    })?;
    let stored: Stored = serde_json::from_str(json)
        .map_err(|e| frame_err!("{:?} is malformed: {e}", meta::CHECKSUM).code(Code::Checksum))?;
    if stored.algorithm != ALGORITHM {
        return Err(frame_err!(
            "checksum algorithm {:?} is not supported (this build reads {ALGORITHM:?})",
            stored.algorithm
        )
        .code(Code::Checksum));
    }
    let mismatch = |what: String, stored: &str, computed: u64| {
        frame_err!(
            "checksum mismatch in {what}: stored {stored}, computed {}: the frame's bytes changed \
             after it was encoded (in transit, in a reused buffer or on disk)",
            hex(computed)
        )
        .code(Code::Checksum)
    };
    let digest = header_digest(&header.metadata, &header.entries);
    if stored.header != hex(digest) {
        return Err(mismatch("the header".into(), &stored.header, digest));
    }
    if let Some(f) = fields.iter().find(|f| !stored.fields.contains_key(*f)) {
        return Err(frame_err!("the checksums lack field {f:?}")
            .code(Code::Checksum)
            .field(f));
    }
    if stored.fields.len() != fields.len() {
        return Err(
            frame_err!("the checksums name fields the frame does not have").code(Code::Checksum),
        );
    }
    let digests = compute(header, fields, &[(0, frame)])?;
    for (f, &d) in fields.iter().zip(&digests) {
        if stored.fields[f] != hex(d) {
            return Err(mismatch(format!("field {f:?}"), &stored.fields[f], d).field(f));
        }
    }
    let shared = digests[fields.len()];
    if stored.shared != hex(shared) {
        return Err(mismatch(
            "the shared tables (sequence offsets, padding)".into(),
            &stored.shared,
            shared,
        ));
    }
    Ok(())
}
