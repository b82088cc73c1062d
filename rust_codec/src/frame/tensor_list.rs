//! The compact form's tensor list (format 3): a compact header lists its tensors in one
//! metadata string instead of safetensors' table, and covers the data section with one `U8`
//! tensor (`__data`), so stock safetensors still opens the file.
//!
//! A safetensors table entry costs about 60 bytes a tensor, and 64-byte alignment adds a
//! `__pad.K` entry of about 55 bytes for most tensors: most of a small frame's header once the
//! schema is named rather than embedded. The list keeps only what the placement rule cannot
//! derive, each tensor as `name:DTYPE:d0,d1,...` (no dims for a rank-0 tensor), `;` between
//! tensors, in data-section order, padding omitted:
//!
//! ```text
//! __seq_offsets:I64:2;input_ids:I64:16;advantages:F32:16;reward:F32:1
//! ```
//!
//! Offsets follow from the rule every py_wire encoder places tensors by: each tensor starts at
//! the first multiple of 64 at or after the previous tensor's end, the gap (if any) is the
//! `U8` tensor `__pad.K` (`K` counting gaps from 0), and the section ends 64-aligned. A reader
//! rebuilds exactly the entries the embedded form lists; every later check is the embedded
//! form's. Names are field names (ASCII identifiers) and their table suffixes, so they never
//! hold `:`, `;` or `,`; dims are decimal without leading zeros.

use crate::error::Result;
use crate::frame::entry::Entry;
use crate::memory::buffer::ALIGNMENT;
use crate::schema::dtype::DType;
use crate::schema::spec::names;
use crate::{frame_err, internal_err};

/// The single tensor that covers a listed header's data section.
pub fn data_entry(data_len: u64) -> Entry {
    Entry {
        name: names::DATA.to_string(),
        dtype: DType::U8,
        shape: vec![data_len],
        begin: 0,
        end: data_len,
    }
}

fn aligned(cursor: u64) -> Option<u64> {
    cursor.checked_next_multiple_of(ALIGNMENT as u64)
}

/// The list of `entries` (in data order, as an encoder placed them) and the data section's
/// length. The entries must be what the placement rule gives for their non-padding tensors:
/// anything else could not be rebuilt by a reader, so it is an internal error here.
pub fn write(entries: &[Entry]) -> Result<(String, u64)> {
    use std::fmt::Write;
    let mut list = String::with_capacity(24 * entries.len());
    let mut cursor = 0u64;
    let mut pads = 0usize;
    for entry in entries {
        if let Some(k) = entry.name.strip_prefix(names::PAD_PREFIX) {
            let start = cursor;
            cursor = aligned(cursor).ok_or_else(|| internal_err!("frame size overflows"))?;
            if k.parse::<usize>() != Ok(pads) || entry.begin != start || entry.end != cursor {
                return Err(internal_err!(
                    "padding {:?} at [{}, {}] is not the placement rule's",
                    entry.name,
                    entry.begin,
                    entry.end
                ));
            }
            pads += 1;
            continue;
        }
        if entry.name.contains([':', ';', ',']) || entry.name == names::DATA {
            return Err(internal_err!(
                "tensor name {:?} cannot be listed",
                entry.name
            ));
        }
        if entry.begin != cursor || entry.begin % ALIGNMENT as u64 != 0 {
            return Err(internal_err!(
                "tensor {:?} at {} is not where the placement rule puts it ({cursor})",
                entry.name,
                entry.begin
            ));
        }
        if !list.is_empty() {
            list.push(';');
        }
        list.push_str(&entry.name);
        list.push(':');
        list.push_str(entry.dtype.safetensors_code());
        list.push(':');
        for (i, dim) in entry.shape.iter().enumerate() {
            if i > 0 {
                list.push(',');
            }
            let _ = write!(list, "{dim}");
        }
        cursor = entry.end;
    }
    let end = aligned(cursor).ok_or_else(|| internal_err!("frame size overflows"))?;
    if end != cursor {
        return Err(internal_err!(
            "the data section ends at {cursor}, not 64-aligned"
        ));
    }
    Ok((list, end))
}

/// A decimal dim as the list writes it: digits, no sign, no leading zero (bar `0` itself).
fn dim(text: &str, tensor: &str) -> Result<u64> {
    let canonical = !text.is_empty()
        && text.len() <= 20
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical
        .then(|| text.parse().ok())
        .flatten()
        .ok_or_else(|| {
            let shown: String = text.chars().take(24).collect();
            frame_err!("tensor {tensor:?} in the tensor list: {shown:?} is not a dim")
        })
}

/// Rebuilds the entries (padding included, in data order) a listed header's `list` stands for.
/// `data` is the header's own table, which must be the one `__data` tensor; the rebuilt
/// tensors must tile it exactly. Names must be distinct and not padding or `__data`.
pub fn expand(list: &str, data: &[Entry]) -> Result<Vec<Entry>> {
    let data_len = match data {
        [only]
            if only.name == names::DATA
                && only.dtype == DType::U8
                && only.shape.len() == 1
                && only.begin == 0 =>
        {
            only.end
        }
        _ => {
            let found: Vec<&str> = data.iter().take(4).map(|e| e.name.as_str()).collect();
            return Err(frame_err!(
                "a header that lists its tensors must hold exactly one tensor, {:?} (U8, rank 1, \
                 from 0); it holds {} ({found:?}...)",
                names::DATA,
                data.len()
            ));
        }
    };
    let mut entries = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut cursor = 0u64;
    let mut pads = 0usize;
    let overflow = |name: &str| frame_err!("tensor {name:?} in the tensor list: offsets overflow");
    for item in list.split(';').filter(|_| !list.is_empty()) {
        let mut parts = item.splitn(3, ':');
        let (Some(name), Some(code), Some(dims)) = (parts.next(), parts.next(), parts.next())
        else {
            let shown: String = item.chars().take(80).collect();
            return Err(frame_err!(
                "tensor list item {shown:?} is not name:DTYPE:dims"
            ));
        };
        if name.is_empty() || name.starts_with(names::PAD_PREFIX) || name == names::DATA {
            let shown: String = name.chars().take(80).collect();
            return Err(frame_err!(
                "tensor list names {shown:?}: a listed tensor is named, and is neither padding \
                 nor {:?}",
                names::DATA
            ));
        }
        if !seen.insert(name) {
            return Err(frame_err!("tensor {name:?} is listed twice"));
        }
        let dtype = DType::from_safetensors_code(code).ok_or_else(|| {
            let shown: String = code.chars().take(12).collect();
            frame_err!("tensor {name:?} in the tensor list: unknown dtype {shown:?}")
        })?;
        let shape = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split(',')
                .map(|d| dim(d, name))
                .collect::<Result<Vec<u64>>>()?
        };
        let nbytes = shape
            .iter()
            .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| frame_err!("tensor {name:?}: shape {shape:?} overflows"))?;
        let begin = aligned(cursor).ok_or_else(|| overflow(name))?;
        let end = begin.checked_add(nbytes).ok_or_else(|| overflow(name))?;
        if end > data_len {
            return Err(frame_err!(
                "tensor {name:?} in the tensor list ends at {end}, past the {data_len}-byte \
                 data section"
            ));
        }
        pad(&mut entries, &mut pads, cursor, begin);
        entries.push(Entry {
            name: name.to_string(),
            dtype,
            shape,
            begin,
            end,
        });
        cursor = end;
    }
    let end = aligned(cursor).ok_or_else(|| frame_err!("the tensor list overflows"))?;
    if end != data_len {
        return Err(frame_err!(
            "the tensor list covers {end} bytes but {:?} holds {data_len}",
            names::DATA
        ));
    }
    pad(&mut entries, &mut pads, cursor, end);
    Ok(entries)
}

/// Appends the padding entry that covers `[from, to)`, if the gap is not empty.
fn pad(entries: &mut Vec<Entry>, pads: &mut usize, from: u64, to: u64) {
    if to > from {
        entries.push(Entry::padding(*pads, from, to));
        *pads += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(name: &str, dtype: DType, shape: &[u64], begin: u64) -> Entry {
        let n = shape.iter().product::<u64>() * dtype.size() as u64;
        Entry {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            begin,
            end: begin + n,
        }
    }

    fn placed() -> Vec<Entry> {
        let mut out = vec![entry("__seq_offsets", DType::I64, &[2], 0)];
        out.push(entry("__pad.0", DType::U8, &[48], 16));
        out.push(entry("empty", DType::F32, &[0, 3], 64));
        out.push(entry("ids", DType::I64, &[16], 64));
        out.push(entry("scalar", DType::F32, &[], 192));
        out.push(entry("__pad.1", DType::U8, &[60], 196));
        out
    }

    #[test]
    fn round_trip() {
        let entries = placed();
        let (list, len) = write(&entries).unwrap();
        assert_eq!(
            list,
            "__seq_offsets:I64:2;empty:F32:0,3;ids:I64:16;scalar:F32:"
        );
        assert_eq!(len, 256);
        assert_eq!(expand(&list, &[data_entry(len)]).unwrap(), entries);
        assert_eq!(write(&[]).unwrap(), (String::new(), 0));
        assert_eq!(expand("", &[data_entry(0)]).unwrap(), vec![]);
    }

    #[test]
    fn the_writer_refuses_what_a_reader_could_not_rebuild() {
        let mut moved = placed();
        moved.remove(1);
        moved[0].end = 64;
        moved[0].shape = vec![8];
        assert!(write(&moved[..1]).is_ok());
        let mut gap = placed();
        gap[3].begin = 128;
        assert!(write(&gap).is_err());
        let mut named = placed();
        named[2].name = "a;b".into();
        assert!(write(&named).is_err());
    }

    #[test]
    fn hostile_lists_are_frame_errors() {
        let data = [data_entry(256)];
        for (list, needle) in [
            ("ids:I64", "name:DTYPE:dims"),
            ("ids:I64:16;ids:I64:1", "listed twice"),
            ("__pad.0:U8:3", "padding"),
            ("__data:U8:3", "padding"),
            ("ids:X9:1", "unknown dtype"),
            ("ids:I64:016", "not a dim"),
            ("ids:I64:+1", "not a dim"),
            ("ids:I64:1,,2", "not a dim"),
            ("ids:I64:99999999999999999999", "not a dim"),
            ("ids:I64:4294967296,4294967296", "overflows"),
            ("ids:I64:33", "past the 256-byte"),
            ("ids:I64:1", "covers 64 bytes"),
        ] {
            let err = expand(list, &data).unwrap_err();
            assert!(err.message().contains(needle), "{list}: {err}");
        }
        let two = [data_entry(64), entry("x", DType::U8, &[0], 64)];
        assert!(expand("", &two).is_err());
        assert!(expand("", &[entry("x", DType::U8, &[64], 0)]).is_err());
    }

    /// Tensors placed as the encoder places them (`encode::layout`): each at the next multiple
    /// of 64, gaps as numbered padding, the section ending aligned.
    fn placed_by_rule(tensors: &[(DType, Vec<u64>)]) -> Vec<Entry> {
        let mut out = Vec::new();
        let (mut cursor, mut pads) = (0u64, 0usize);
        let mut gap = |out: &mut Vec<Entry>, cursor: &mut u64| {
            let next = cursor.next_multiple_of(64);
            if next > *cursor {
                out.push(entry(
                    &format!("__pad.{pads}"),
                    DType::U8,
                    &[next - *cursor],
                    *cursor,
                ));
                pads += 1;
                *cursor = next;
            }
        };
        for (i, (dtype, shape)) in tensors.iter().enumerate() {
            gap(&mut out, &mut cursor);
            let e = entry(&format!("t{i}"), *dtype, shape, cursor);
            cursor = e.end;
            out.push(e);
        }
        gap(&mut out, &mut cursor);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn any_placed_table_round_trips(
            tensors in proptest::collection::vec(
                (
                    proptest::sample::select(vec![DType::U8, DType::Bool, DType::I32, DType::I64, DType::F16, DType::F64]),
                    proptest::collection::vec(0u64..5, 0..4),
                ),
                0..12,
            ),
        ) {
            let entries = placed_by_rule(&tensors);
            let (list, len) = write(&entries).unwrap();
            prop_assert_eq!(len, entries.last().map_or(0, |e| e.end));
            prop_assert_eq!(expand(&list, &[data_entry(len)]).unwrap(), entries);
            // One byte more or less in `__data` is refused, never read differently.
            prop_assert!(expand(&list, &[data_entry(len + 64)]).is_err());
            if len > 0 {
                prop_assert!(expand(&list, &[data_entry(len - 1)]).is_err());
            }
        }
    }
}
