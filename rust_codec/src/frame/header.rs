//! The safetensors header: 8-byte little-endian length, JSON, space padding.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::Result;
use crate::frame::tensor_list;
use crate::memory::buffer::ALIGNMENT;
use crate::schema::dtype::DType;
use crate::schema::spec::meta;
use crate::{frame_err, internal_err};

/// The largest header a reader accepts (as safetensors): the header is O(fields), so a real
/// one is kilobytes; this bounds the JSON parse of a hostile one.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

pub use crate::frame::entry::Entry;

/// Serialises the header, padded with spaces so the data section starts 64-byte aligned.
///
/// Written straight into the output, keys in byte order (as a JSON object built in a
/// `BTreeMap` would list them): `__metadata__` and one entry per tensor, each entry's keys
/// `data_offsets`, `dtype`, `shape`. A frame op writes a header per output frame, so building
/// a JSON value tree first (a map, a copy of every metadata string) showed in its cost.
///
/// A compact header (its metadata names the schema, `py_wire.schema_ref`) lists the tensors in
/// `py_wire.tensors` and covers the data section with the one `__data` tensor instead (see
/// `frame::tensor_list`); `entries` must then be placed by the encoder's rule.
pub fn write_header(metadata: &BTreeMap<String, String>, entries: &[Entry]) -> Result<Vec<u8>> {
    let internal = |e: &dyn std::fmt::Display| internal_err!("header: {e}");
    if metadata.contains_key(meta::TENSORS) {
        return Err(internal(&format!(
            "{:?} is written here only",
            meta::TENSORS
        )));
    }
    let mut pairs: Vec<(&str, &str)> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let listed;
    let table: &[Entry] = if lists_tensors(metadata) {
        let (list, data_len) = tensor_list::write(entries)?;
        listed = (list, [tensor_list::data_entry(data_len)]);
        pairs.push((meta::TENSORS, &listed.0));
        pairs.sort_unstable_by_key(|(k, _)| *k);
        &listed.1
    } else {
        entries
    };
    write_table(&pairs, table)
}

/// Whether a header of `metadata` lists its tensors (`py_wire.tensors`): a compact one does.
pub fn lists_tensors(metadata: &BTreeMap<String, String>) -> bool {
    metadata.contains_key(meta::SCHEMA_REF)
}

/// Writes `{"__metadata__": {pairs}, name: entry, ...}` with keys in byte order (`pairs` are
/// in key order already), prefixed by its length and padded to alignment.
fn write_table(pairs: &[(&str, &str)], entries: &[Entry]) -> Result<Vec<u8>> {
    use std::io::Write;
    let internal = |e: &dyn std::fmt::Display| internal_err!("header: {e}");
    // Keys in byte order; `None` is the metadata.
    let mut keys: Vec<(&str, Option<&Entry>)> = Vec::with_capacity(entries.len() + 1);
    keys.push(("__metadata__", None));
    keys.extend(entries.iter().map(|e| (e.name.as_str(), Some(e))));
    keys.sort_unstable_by_key(|(name, _)| *name);
    if let Some(twice) = keys.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(internal(&format!(
            "tensor name {:?} appears twice",
            twice[0].0
        )));
    }
    let metadata_len: usize = pairs.iter().map(|(k, v)| k.len() + v.len() + 8).sum();
    let mut out = Vec::with_capacity(8 + 64 + metadata_len + 96 * entries.len());
    out.extend_from_slice(&[0u8; 8]);
    let string = |out: &mut Vec<u8>, s: &str| {
        // Names, numbers and fingerprints need no escaping: written as they are.
        if s.bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
            Ok(())
        } else {
            serde_json::to_writer(out, s).map_err(|e| internal(&e))
        }
    };
    out.push(b'{');
    for (i, (name, entry)) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(&mut out, name)?;
        out.push(b':');
        match entry {
            None => {
                out.push(b'{');
                for (j, (key, value)) in pairs.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    string(&mut out, key)?;
                    out.push(b':');
                    string(&mut out, value)?;
                }
                out.push(b'}');
            }
            Some(entry) => {
                write!(
                    out,
                    "{{\"data_offsets\":[{},{}],\"dtype\":\"{}\",\"shape\":[",
                    entry.begin,
                    entry.end,
                    entry.dtype.safetensors_code()
                )
                .map_err(|e| internal(&e))?;
                for (k, dim) in entry.shape.iter().enumerate() {
                    let sep = if k > 0 { "," } else { "" };
                    write!(out, "{sep}{dim}").map_err(|e| internal(&e))?;
                }
                out.extend_from_slice(b"]}");
            }
        }
    }
    out.push(b'}');
    let json_len = out.len() - 8;
    let padded_len = (8 + json_len).next_multiple_of(ALIGNMENT) - 8;
    out[..8].copy_from_slice(&(padded_len as u64).to_le_bytes());
    out.resize(8 + padded_len, b' ');
    Ok(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// A parsed, bounds-checked header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's `__metadata__`: py_wire's keys and any the caller added, all strings.
    pub metadata: BTreeMap<String, String>,
    /// Sorted by `begin`; together they cover the data section exactly. For a header that
    /// lists its tensors (`py_wire.tensors`, see `frame::tensor_list`): the entries the list
    /// stands for, padding included, not the one `__data` tensor of its table.
    pub entries: Vec<Entry>,
    /// The header listed its tensors in `py_wire.tensors` (a format-3 compact frame) rather
    /// than in the safetensors table; the key itself is not kept in `metadata`.
    pub listed: bool,
    /// Absolute offset of the data section.
    pub data_start: usize,
    /// The frame's own length: `data_start` plus the end of the last tensor. A buffer may hold
    /// more bytes after it (a reused shared-memory segment); readers ignore them.
    pub frame_len: usize,
}

impl Header {
    /// The tensor called `name`, if the header lists it.
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// How much of a frame its first bytes tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSize {
    /// The frame's total length in bytes (header length, header, data section).
    Known(u64),
    /// The prefix is too short to tell: at least this many bytes are needed in all.
    NeedAtLeast(u64),
}

/// Reads a frame's total size from a prefix of it: the 8-byte length and the JSON header are
/// enough (`8 + header_len` bytes); the data section is not read. The header is validated as
/// `parse_header` does, except that the data section may be absent.
pub fn frame_size(prefix: &[u8]) -> Result<FrameSize> {
    let Some(header_len) = read_header_len(prefix)? else {
        return Ok(FrameSize::NeedAtLeast(8));
    };
    let data_start = 8 + header_len;
    if (prefix.len() as u64) < data_start {
        return Ok(FrameSize::NeedAtLeast(data_start));
    }
    let Parsed { entries, .. } = parse_json(&prefix[8..data_start as usize])?;
    let data_len = tiled_len(&entries)?;
    let total = data_start
        .checked_add(data_len)
        .ok_or_else(|| frame_err!("frame length overflows"))?;
    Ok(FrameSize::Known(total))
}

/// A frame's header read from a prefix of it (`8 + header_len` bytes; the data section is not
/// needed), validated as `parse_header` does except for the data section's presence.
pub fn parse_prefix(prefix: &[u8]) -> Result<Header> {
    let header_len = read_header_len(prefix)?.ok_or_else(|| {
        frame_err!(
            "a {}-byte prefix lacks the 8-byte header length",
            prefix.len()
        )
    })?;
    let data_start = 8 + header_len;
    if (prefix.len() as u64) < data_start {
        return Err(frame_err!(
            "a {}-byte prefix is too short: the header needs {data_start} bytes",
            prefix.len()
        ));
    }
    let parsed = parse_json(&prefix[8..data_start as usize])?;
    let frame_len = data_start
        .checked_add(tiled_len(&parsed.entries)?)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| frame_err!("frame length overflows"))?;
    Ok(Header {
        metadata: parsed.metadata,
        entries: parsed.entries,
        listed: parsed.listed,
        data_start: data_start as usize,
        frame_len,
    })
}

/// The header length of `buf`, `None` if it holds fewer than 8 bytes; refused above the cap.
fn read_header_len(buf: &[u8]) -> Result<Option<u64>> {
    let Some(len_bytes) = buf.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return Ok(None);
    };
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES {
        return Err(frame_err!(
            "header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit"
        ));
    }
    Ok(Some(header_len))
}

/// A parsed header's metadata, entries (sorted by `begin`) and whether they were listed.
struct Parsed {
    metadata: BTreeMap<String, String>,
    entries: Vec<Entry>,
    listed: bool,
}

/// Parses the JSON header; entries come back sorted by `begin`, a tensor list expanded.
fn parse_json(json: &[u8]) -> Result<Parsed> {
    let (mut metadata, entries) = parse_table(json)?;
    Ok(match metadata.remove(meta::TENSORS) {
        Some(list) => {
            // Empty tensors sharing an offset in name order, as a table's are.
            let mut entries = tensor_list::expand(&list, &entries)?;
            sort_entries(&mut entries);
            Parsed {
                entries,
                metadata,
                listed: true,
            }
        }
        None => Parsed {
            metadata,
            entries,
            listed: false,
        },
    })
}

/// The header's JSON as it stands: `__metadata__` and the safetensors table, sorted by `begin`.
fn parse_table(json: &[u8]) -> Result<(BTreeMap<String, String>, Vec<Entry>)> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| frame_err!("header is not valid JSON: {e}"))?;
    let serde_json::Value::Object(root) = value else {
        return Err(frame_err!("header is not a JSON object"));
    };
    let mut metadata = BTreeMap::new();
    let mut entries = Vec::with_capacity(root.len());
    for (name, value) in root {
        if name == "__metadata__" {
            metadata = serde_json::from_value(value)
                .map_err(|e| frame_err!("__metadata__ is not a map of strings: {e}"))?;
            continue;
        }
        let raw: RawEntry = serde_json::from_value(value)
            .map_err(|e| frame_err!("tensor {name:?}: bad header entry: {e}"))?;
        let dtype = DType::from_safetensors_code(&raw.dtype)
            .ok_or_else(|| frame_err!("tensor {name:?}: unknown dtype {:?}", raw.dtype))?;
        let (begin, end) = raw.data_offsets;
        let nbytes = raw
            .shape
            .iter()
            .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| frame_err!("tensor {name:?}: shape {:?} overflows", raw.shape))?;
        if end < begin || end - begin != nbytes {
            return Err(frame_err!(
                "tensor {name:?}: data_offsets [{begin}, {end}] do not hold shape {:?} of {}",
                raw.shape,
                dtype.name()
            ));
        }
        entries.push(Entry {
            name,
            dtype,
            shape: raw.shape,
            begin,
            end,
        });
    }
    sort_entries(&mut entries);
    Ok((metadata, entries))
}

/// Entries in data order; empty tensors sharing an offset by name (a header's key order), so
/// the header an encoder writes and the one a reader parses list them alike.
pub fn sort_entries(entries: &mut [Entry]) {
    entries.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
}

/// The data section's length: the end of the last tensor, after checking that the (sorted)
/// tensors tile it from 0 with no gap or overlap.
fn tiled_len(entries: &[Entry]) -> Result<u64> {
    let mut cursor = 0u64;
    for entry in entries {
        if entry.begin != cursor {
            return Err(frame_err!(
                "tensor {:?} starts at {} but the previous tensor ends at {cursor} (gap or \
                 overlap)",
                entry.name,
                entry.begin
            ));
        }
        cursor = entry.end;
    }
    Ok(cursor)
}

/// Parses and validates the header of `buf`. Everything is treated as hostile: lengths are
/// checked before use and every tensor must lie inside the buffer. The tensors must tile the
/// data section from its start with no gap; the frame ends where the last tensor ends
/// (`Header::frame_len`), and any bytes of `buf` after that are not part of it.
pub fn parse_header(buf: &[u8]) -> Result<Header> {
    let header_len = read_header_len(buf)?.ok_or_else(|| {
        frame_err!(
            "frame is {} bytes, shorter than the 8-byte header length",
            buf.len()
        )
    })?;
    let available = buf.len() as u64 - 8;
    if header_len > available {
        return Err(frame_err!(
            "header length {header_len} exceeds the {available} bytes after it (truncated frame?)"
        ));
    }
    let data_start = 8 + header_len as usize;
    let Parsed {
        metadata,
        entries,
        listed,
    } = parse_json(&buf[8..data_start])?;
    let data_len = (buf.len() - data_start) as u64;
    let cursor = tiled_len(&entries)?;
    if cursor > data_len {
        return Err(frame_err!(
            "tensors cover {cursor} bytes but only {data_len} follow the header (truncated frame?)"
        ));
    }
    Ok(Header {
        metadata,
        entries,
        listed,
        data_start,
        // cursor <= data_len, so this is within buf.len().
        frame_len: data_start + cursor as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn header_round_trip_and_alignment() {
        let mut meta = BTreeMap::new();
        meta.insert("k".to_string(), "v".to_string());
        let entries = vec![Entry {
            name: "x".into(),
            dtype: DType::F32,
            shape: vec![2],
            begin: 0,
            end: 8,
        }];
        let mut frame = write_header(&meta, &entries).unwrap();
        assert_eq!(frame.len() % ALIGNMENT, 0);
        frame.extend_from_slice(&[0u8; 8]);
        let h = parse_header(&frame).unwrap();
        assert_eq!(h.entries, entries);
        assert_eq!(h.metadata, meta);
        assert_eq!(h.data_start % ALIGNMENT, 0);
    }

    /// The header as a JSON value tree would serialise it: what `write_header` wrote before it
    /// streamed its output, and the bytes it must still produce.
    fn value_tree_header(metadata: &BTreeMap<String, String>, entries: &[Entry]) -> Vec<u8> {
        let mut root = serde_json::Map::new();
        root.insert(
            "__metadata__".into(),
            serde_json::to_value(metadata).unwrap(),
        );
        for entry in entries {
            root.insert(
                entry.name.clone(),
                serde_json::json!({
                    "dtype": entry.dtype.safetensors_code(),
                    "shape": entry.shape,
                    "data_offsets": [entry.begin, entry.end],
                }),
            );
        }
        let json = serde_json::to_vec(&serde_json::Value::Object(root)).unwrap();
        let padded_len = (8 + json.len()).next_multiple_of(ALIGNMENT) - 8;
        let mut out = (padded_len as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&json);
        out.resize(8 + padded_len, b' ');
        out
    }

    #[test]
    fn streamed_header_is_the_value_tree_header() {
        let mut meta = BTreeMap::new();
        meta.insert(
            "py_wire.schema".to_string(),
            "{\"a\": \"q\\\"\\n\u{e9}\u{1}\"}".to_string(),
        );
        meta.insert("Z".to_string(), String::new());
        let entry = |name: &str, dtype, shape: Vec<u64>, begin, end| Entry {
            name: name.into(),
            dtype,
            shape,
            begin,
            end,
        };
        let cases = [
            vec![],
            vec![entry("x", DType::F32, vec![2], 0, 8)],
            vec![
                entry("input_ids", DType::I64, vec![3], 0, 24),
                entry("A\"b\u{e9}", DType::Bool, vec![0, 5], 24, 24),
                entry("__pad.0", DType::U8, vec![40], 24, 64),
                entry("_", DType::BF16, vec![], 64, 66),
                entry("~z", DType::F64, vec![1, 1, 1], 66, 74),
            ],
        ];
        for entries in &cases {
            for meta in [&meta, &BTreeMap::new()] {
                assert_eq!(
                    write_header(meta, entries).unwrap(),
                    value_tree_header(meta, entries)
                );
            }
        }
        let twice = vec![entry("x", DType::F32, vec![0], 0, 0); 2];
        assert!(write_header(&meta, &twice).is_err());
    }

    #[test]
    fn hostile_lengths_are_frame_errors() {
        assert!(matches!(parse_header(&[1, 2, 3]), Err(Error::Frame(_))));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(parse_header(&huge), Err(Error::Frame(_))));
        assert!(matches!(frame_size(&huge), Err(Error::Frame(_))));
    }

    fn one_tensor_frame() -> Vec<u8> {
        let entries = vec![Entry {
            name: "x".into(),
            dtype: DType::F32,
            shape: vec![16],
            begin: 0,
            end: 64,
        }];
        let mut frame = write_header(&BTreeMap::new(), &entries).unwrap();
        frame.extend_from_slice(&[7u8; 64]);
        frame
    }

    #[test]
    fn trailing_bytes_are_not_part_of_the_frame() {
        let frame = one_tensor_frame();
        let mut longer = frame.clone();
        longer.extend_from_slice(&[0xAB; 100]);
        let h = parse_header(&longer).unwrap();
        assert_eq!(h.frame_len, frame.len());
        assert_eq!(parse_header(&frame).unwrap().frame_len, frame.len());
        // One byte short of the last tensor is still a truncated frame.
        let err = parse_header(&frame[..frame.len() - 1]).unwrap_err();
        assert!(err.message().contains("truncated"), "{}", err.message());
    }

    #[test]
    fn frame_size_from_a_prefix() {
        let frame = one_tensor_frame();
        let data_start = frame.len() - 64;
        assert_eq!(frame_size(&frame[..3]).unwrap(), FrameSize::NeedAtLeast(8));
        assert_eq!(
            frame_size(&frame[..8]).unwrap(),
            FrameSize::NeedAtLeast(data_start as u64)
        );
        assert_eq!(
            frame_size(&frame[..data_start]).unwrap(),
            FrameSize::Known(frame.len() as u64)
        );
        assert_eq!(
            frame_size(&frame).unwrap(),
            FrameSize::Known(frame.len() as u64)
        );
    }
}
