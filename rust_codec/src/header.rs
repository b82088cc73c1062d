//! The safetensors header: 8-byte little-endian length, JSON, space padding.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::buffer::ALIGNMENT;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::frame_err;

/// The largest header a reader accepts (as safetensors): the header is O(fields), so a real
/// one is kilobytes; this bounds the JSON parse of a hostile one.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor of the data section; offsets are relative to the data section's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub begin: u64,
    pub end: u64,
}

/// Serialises the header, padded with spaces so the data section starts 64-byte aligned.
pub fn write_header(metadata: &BTreeMap<String, String>, entries: &[Entry]) -> Result<Vec<u8>> {
    let mut root = serde_json::Map::new();
    root.insert(
        "__metadata__".into(),
        serde_json::to_value(metadata).map_err(|e| Error::internal(format!("metadata: {e}")))?,
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
    let json = serde_json::to_vec(&serde_json::Value::Object(root))
        .map_err(|e| Error::internal(format!("header: {e}")))?;
    let padded_len = (8 + json.len()).next_multiple_of(ALIGNMENT) - 8;
    let mut out = Vec::with_capacity(8 + padded_len);
    out.extend_from_slice(&(padded_len as u64).to_le_bytes());
    out.extend_from_slice(&json);
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
#[derive(Debug, Clone)]
pub struct Header {
    pub metadata: BTreeMap<String, String>,
    /// Sorted by `begin`; together they cover the data section exactly.
    pub entries: Vec<Entry>,
    /// Absolute offset of the data section.
    pub data_start: usize,
}

impl Header {
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// Parses and validates the header of `buf`. Everything is treated as hostile: lengths are
/// checked before use and every tensor must lie inside the buffer.
pub fn parse_header(buf: &[u8]) -> Result<Header> {
    let len_bytes: [u8; 8] = buf
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            frame_err!(
                "frame is {} bytes, shorter than the 8-byte header length",
                buf.len()
            )
        })?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES {
        return Err(frame_err!(
            "header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit"
        ));
    }
    let available = buf.len() as u64 - 8;
    if header_len > available {
        return Err(frame_err!(
            "header length {header_len} exceeds the {available} bytes after it (truncated frame?)"
        ));
    }
    let data_start = 8 + header_len as usize;
    let json = &buf[8..data_start];
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
    entries.sort_by_key(|e| (e.begin, e.end));
    let data_len = (buf.len() - data_start) as u64;
    let mut cursor = 0u64;
    for entry in &entries {
        if entry.begin != cursor {
            return Err(frame_err!(
                "tensor {:?} starts at {} but the previous tensor ends at {cursor} (gap or overlap)",
                entry.name,
                entry.begin
            ));
        }
        cursor = entry.end;
    }
    if cursor != data_len {
        return Err(frame_err!(
            "tensors cover {cursor} bytes but the data section holds {data_len}"
        ));
    }
    Ok(Header {
        metadata,
        entries,
        data_start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn hostile_lengths_are_frame_errors() {
        assert!(matches!(parse_header(&[1, 2, 3]), Err(Error::Frame(_))));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(parse_header(&huge), Err(Error::Frame(_))));
    }
}
