//! Frame ops written straight from their sources' layouts: the output's entries are placed
//! from the sources' shapes, its sequence offsets are read, checked and rebased in one pass
//! into the output, and its payload is copied as one byte run per field and picked span. No
//! encode request, no plan, no index tables copied out of the sources first.
//!
//! The bytes are those [`super::gather()`] then `encode::plan` would write, and the layout the one
//! `parse_frame` reads from them (the tests compare both for every case this path takes). It takes frames without packed fields and without
//! checksums whose sources share one field table and carry a schema ([`takes`]); the others go
//! through the encode plan (`ops::take` chooses).

use std::collections::BTreeMap;

use crate::encode::input::RowSpan;
use crate::encode::layout::Layout;
use crate::encode::EncodeOptions;
use crate::error::Result;
use crate::frame::header::{lists_tensors, sort_entries, write_header, Entry, Header};
use crate::frame::layout::{DecodedField, FrameLayout, TensorLoc};
use crate::frame::located::Source;
use crate::memory::buffer::AlignedBuf;
use crate::memory::copy::{copy_threads, on_threads, share_by_bytes, CHUNK};
use crate::memory::monotone::never_decrease;
use crate::memory::stream::Stores;
use crate::schema::dtype::DType;
use crate::schema::spec::{meta, names};
use crate::tier::{self, Items};
use crate::{batch_err, frame_err, internal_err};

use super::selection::{picks, Output, Rows};

/// Rows `rows` of the sources' concatenation written as a new frame, with `metadata` as its
/// header entries besides the format and row count (see [`super::selection::output_metadata`]); the
/// sources must be ones this path [`takes`]. `options`: the most threads the payload copies use,
/// and the bytes each thread must have before another is started.
pub fn take(
    sources: &[Source<'_>],
    rows: &Rows,
    metadata: BTreeMap<String, String>,
    options: EncodeOptions,
) -> Result<Output> {
    if !takes(sources, &metadata) {
        return Err(internal_err!("a direct take of frames it does not take"));
    }
    let picks = picks(sources, rows)?;
    let first = sources[0].layout;
    let has_tokens = first.seq_offsets.is_some();
    let tables = offset_tables(sources, has_tokens)?;
    let tokens = token_spans(sources, &tables, &picks)?;
    let num_rows = picks.iter().map(|p| p.end - p.start).sum::<u64>();
    let num_tokens = tokens
        .iter()
        .try_fold(0u64, |sum, t| sum.checked_add(t.end - t.start))
        .ok_or_else(|| frame_err!("the picked rows hold more than 2^64 tokens"))?;

    let mut layout = Layout::new();
    // The values, the sequence offsets and a padding entry after each.
    layout.entries.reserve(2 * first.fields.len() + 2);
    let seq_at = match has_tokens {
        true => {
            let len = num_rows + 1;
            Some(layout.place(names::SEQ_OFFSETS.into(), DType::I64, vec![len], len * 8)?)
        }
        false => None,
    };
    let mut runs = Vec::with_capacity(first.fields.len());
    for field in &first.fields {
        let spec = &field.spec;
        let (count, spans) = match tier::of(spec.tier).items() {
            Items::Tokens => (num_tokens, &tokens),
            Items::Rows => (num_rows, &picks),
            Items::Segments => return Err(internal_err!("packed field {:?} taken", spec.name)),
        };
        let mut shape = vec![count];
        shape.extend(spec.shape.iter().map(|d| d.unwrap_or(0)));
        let item_bytes = item_bytes(field)?;
        let nbytes = count
            .checked_mul(item_bytes)
            .ok_or_else(|| batch_err!("field {:?}: payload size overflows", spec.name))?;
        let at = layout.place(spec.name.clone(), spec.stored_dtype(), shape, nbytes)?;
        runs.push(FieldRuns {
            at,
            item_bytes,
            nbytes,
            spans,
        });
    }
    let data_len = layout.align()?;
    let mut entries = layout.entries;
    sort_entries(&mut entries);

    let mut metadata = metadata;
    metadata.insert(meta::FORMAT.into(), meta::FORMAT_VERSION.into());
    metadata.insert(meta::NUM_ROWS.into(), num_rows.to_string());
    let header_bytes = write_header(&metadata, &entries)?;
    let data_start = header_bytes.len();
    let total_len = crate::encode::frame_len(data_len, data_start, num_rows)?;

    let mut buf = AlignedBuf::recycled(total_len)
        .ok_or_else(|| batch_err!("could not allocate a frame of {total_len} bytes"))?;
    let out = buf.as_mut_slice();
    out[..data_start].copy_from_slice(&header_bytes);
    for pad in entries
        .iter()
        .filter(|e| e.name.starts_with(names::PAD_PREFIX))
    {
        out[data_start + pad.begin as usize..data_start + pad.end as usize].fill(0);
    }
    if let Some(at) = seq_at {
        let start = data_start + at as usize;
        let end = start + (num_rows as usize + 1) * 8;
        write_offsets(&tables, &picks, &tokens, &mut out[start..end])?;
    }
    copy_fields(sources, first, &runs, &mut out[data_start..], options)?;
    let header = Header {
        listed: lists_tensors(&metadata),
        metadata,
        entries,
        data_start,
        frame_len: total_len,
    };
    let layout = layout_of(header, first, num_rows, num_tokens);
    Ok((buf, layout))
}

/// Where one field's values go in the output and what fills them: its spans (token or row
/// ranges of the sources), `item_bytes` each, `nbytes` in all from data-section offset `at`.
struct FieldRuns<'p> {
    at: u64,
    item_bytes: u64,
    nbytes: u64,
    spans: &'p [RowSpan],
}

/// A piece of one field's output: its bytes `lo..lo + dst.len()`, which begin inside span
/// `span` (the span's bytes begin at `span_at` of the field's output).
struct Piece<'o> {
    field: usize,
    span: usize,
    span_at: u64,
    lo: u64,
    dst: &'o mut [u8],
}

/// Copies every field's spans into `data` (the output's data section): straight from the
/// sources, with no list of copies per row. Past `options.parallel_threshold` bytes per thread
/// the fields are cut into pieces (of at most `CHUNK`) shared between up to `options.threads`
/// threads; streaming stores when the frame is larger than the cache.
fn copy_fields(
    sources: &[Source<'_>],
    first: &FrameLayout,
    runs: &[FieldRuns<'_>],
    data: &mut [u8],
    options: EncodeOptions,
) -> Result<()> {
    // values[field * sources + source]: each source's values of each field, located once.
    let mut values: Vec<&[u8]> = Vec::with_capacity(runs.len() * sources.len());
    for (i, field) in first.fields.iter().enumerate().take(runs.len()) {
        for source in sources {
            let loc = &source.layout.fields[i].values;
            let bytes = source
                .bytes
                .get(loc.offset..loc.offset.saturating_add(loc.nbytes));
            values.push(bytes.ok_or_else(|| outside(field))?);
        }
    }
    let total = runs.iter().map(|r| r.nbytes).sum::<u64>() as usize;
    let threshold = options.parallel_threshold.max(1);
    let threads = copy_threads(total, options.threads, threshold);
    let piece_max = if threads > 1 {
        (threshold as u64 / 2).clamp(1, CHUNK as u64)
    } else {
        u64::MAX
    };
    let streaming = options.streams(data.len());
    let mut pieces = cut_pieces(runs, data, piece_max)?;
    let copy = |pieces: &mut [Piece<'_>]| -> Result<()> {
        let mut stores = Stores::new(streaming);
        for piece in pieces.iter_mut() {
            let field = &first.fields[piece.field];
            let from = &values[piece.field * sources.len()..(piece.field + 1) * sources.len()];
            copy_piece(piece, &runs[piece.field], from, field, &mut stores)?;
        }
        Ok(())
    };
    if threads == 1 {
        return copy(&mut pieces);
    }
    on_threads(share_by_bytes(&mut pieces, threads, |p| p.dst.len()), copy)
}

/// Each field's output region of `data`, cut at every multiple of `piece_max` bytes into
/// pieces, each knowing the span it begins in.
fn cut_pieces<'o>(
    runs: &[FieldRuns<'_>],
    data: &'o mut [u8],
    piece_max: u64,
) -> Result<Vec<Piece<'o>>> {
    let mut pieces = Vec::with_capacity(runs.len());
    let mut rest: &'o mut [u8] = data;
    let mut consumed = 0u64;
    for (field, run) in runs.iter().enumerate() {
        let gap = run
            .at
            .checked_sub(consumed)
            .filter(|gap| gap + run.nbytes <= rest.len() as u64)
            .ok_or_else(|| internal_err!("fields placed out of order"))?;
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(gap as usize);
        let (mut region, tail) = tail.split_at_mut(run.nbytes as usize);
        rest = tail;
        consumed = run.at + run.nbytes;
        let (mut lo, mut span, mut span_at) = (0u64, 0usize, 0u64);
        while lo < run.nbytes {
            let n = piece_max.min(run.nbytes - lo);
            let (dst, after) = std::mem::take(&mut region).split_at_mut(n as usize);
            pieces.push(Piece {
                field,
                span,
                span_at,
                lo,
                dst,
            });
            region = after;
            lo += n;
            // The span the next piece begins in.
            while let Some(s) = run.spans.get(span) {
                let len = (s.end - s.start) * run.item_bytes;
                if span_at + len > lo {
                    break;
                }
                span_at += len;
                span += 1;
            }
        }
    }
    Ok(pieces)
}

/// Copies one piece of `field` from its spans (`values`: the field's values in each source).
fn copy_piece(
    piece: &mut Piece<'_>,
    run: &FieldRuns<'_>,
    values: &[&[u8]],
    field: &DecodedField,
    stores: &mut Stores,
) -> Result<()> {
    let hi = piece.lo + piece.dst.len() as u64;
    let (mut k, mut at, mut written) = (piece.span, piece.span_at, 0usize);
    while at < hi {
        let span = run
            .spans
            .get(k)
            .ok_or_else(|| internal_err!("a piece runs past its field's spans"))?;
        let len = (span.end - span.start) * run.item_bytes;
        let (from, to) = (piece.lo.max(at), hi.min(at + len));
        if from < to {
            let a = (span.start * run.item_bytes + (from - at)) as usize;
            let n = (to - from) as usize;
            let src = values
                .get(span.source as usize)
                .and_then(|v| v.get(a..a.checked_add(n)?))
                .ok_or_else(|| outside(field))?;
            let dst = piece
                .dst
                .get_mut(written..written + n)
                .ok_or_else(|| internal_err!("a piece's spans overrun it"))?;
            stores.copy(dst, src);
            written += n;
        }
        at += len;
        k += 1;
    }
    if written != piece.dst.len() {
        return Err(internal_err!("a piece's spans fall short of it"));
    }
    Ok(())
}

fn outside(field: &DecodedField) -> crate::error::Error {
    frame_err!("field {:?}: rows lie outside its values", field.spec.name)
}

/// The written frame's layout, from the entries placed for it: each field's values where its
/// entry lies, in data-section order (as `layout::schema_field_table` orders a reader's).
fn layout_of(header: Header, first: &FrameLayout, num_rows: u64, num_tokens: u64) -> FrameLayout {
    let located = |e: &Entry| TensorLoc {
        offset: header.data_start + e.begin as usize,
        nbytes: (e.end - e.begin) as usize,
        dtype: e.dtype,
        shape: e.shape.clone(),
    };
    let mut seq_offsets = None;
    let mut fields = Vec::with_capacity(first.fields.len());
    for entry in &header.entries {
        if entry.name == names::SEQ_OFFSETS {
            seq_offsets = Some(located(entry));
        } else if let Some(f) = first.fields.iter().find(|f| f.spec.name == entry.name) {
            fields.push(DecodedField {
                spec: f.spec.clone(),
                values: located(entry),
                packed: None,
            });
        }
    }
    let held = first
        .held
        .clone()
        .filter(|h| header_names(&header, &h.schema.fingerprint));
    FrameLayout {
        header,
        num_rows,
        sequence_field: first.sequence_field.clone(),
        seq_offsets,
        total_tokens: num_tokens,
        fields,
        held,
    }
}

/// Whether `header` is a compact frame's naming `fingerprint`.
fn header_names(header: &Header, fingerprint: &str) -> bool {
    header.metadata.get(meta::SCHEMA_REF).map(String::as_str) == Some(fingerprint)
}

/// Whether this path writes the sources into a frame of header entries `metadata`: they carry
/// a schema (embedded or named), hold no packed field and no checksums, and share one field
/// table and sequence field.
pub fn takes(sources: &[Source<'_>], metadata: &BTreeMap<String, String>) -> bool {
    let Some(first) = sources.first().map(|s| s.layout) else {
        return false;
    };
    let has_schema = metadata.contains_key(meta::SCHEMA) || metadata.contains_key(meta::SCHEMA_REF);
    has_schema
        && !metadata.contains_key(meta::CHECKSUM)
        && first
            .fields
            .iter()
            .all(|f| tier::of(f.spec.tier).items() != Items::Segments)
        && sources.iter().all(|s| {
            let layout = s.layout;
            if std::ptr::eq(layout, first) {
                return true; // the first source, or the same frame again
            }
            !layout.header.metadata.contains_key(meta::CHECKSUM)
                && layout.sequence_field == first.sequence_field
                && layout.fields.len() == first.fields.len()
                && layout
                    .fields
                    .iter()
                    .zip(&first.fields)
                    .all(|(a, b)| a.spec == b.spec)
        })
}

/// The bytes of one dim-0 item of a field's values (a token of a per-token field, a row of a
/// scalar one): the product of its inner dims times the stored dtype's size.
fn item_bytes(field: &DecodedField) -> Result<u64> {
    field.values.shape[1..]
        .iter()
        .try_fold(field.values.dtype.size() as u64, |acc, &d| {
            acc.checked_mul(d)
        })
        .ok_or_else(|| frame_err!("field {:?}: row size overflows", field.spec.name))
}

/// Each source's `__seq_offsets` bytes (where its layout located them), or none for frames
/// without per-token fields.
fn offset_tables<'s>(sources: &[Source<'s>], has_tokens: bool) -> Result<Vec<&'s [u8]>> {
    if !has_tokens {
        return Ok(Vec::new());
    }
    sources
        .iter()
        .map(|source| {
            let loc = source
                .layout
                .seq_offsets
                .as_ref()
                .ok_or_else(|| internal_err!("per-token rows without sequence offsets"))?;
            source
                .bytes
                .get(loc.offset..loc.offset.saturating_add(loc.nbytes))
                .ok_or_else(|| internal_err!("{} lies outside the frame", names::SEQ_OFFSETS))
        })
        .collect()
}

/// Offset `row` of a source's `__seq_offsets` table.
fn offset_at(table: &[u8], row: u64) -> Result<u64> {
    (row as usize)
        .checked_mul(8)
        .and_then(|at| table.get(at..at.checked_add(8)?))
        .map(read_u64)
        .ok_or_else(|| internal_err!("sequence offset {row} lies outside its tensor"))
}

/// Each pick's token range in its source (`start..end` of the per-token values): the offsets
/// at its first row and past its last, checked against the source's token count.
fn token_spans(
    sources: &[Source<'_>],
    tables: &[&[u8]],
    picks: &[RowSpan],
) -> Result<Vec<RowSpan>> {
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    picks
        .iter()
        .map(|pick| {
            let (source, table) = (&sources[pick.source as usize], tables[pick.source as usize]);
            let (start, end) = (offset_at(table, pick.start)?, offset_at(table, pick.end)?);
            if start > end || end > source.layout.total_tokens {
                return Err(frame_err!(
                    "{}[{}..={}] run {start}..{end}, outside the frame's {} tokens (changed \
                     since it was read?)",
                    names::SEQ_OFFSETS,
                    pick.start,
                    pick.end,
                    source.layout.total_tokens
                ));
            }
            Ok(RowSpan {
                source: pick.source,
                start,
                end,
            })
        })
        .collect()
}

/// Writes the output's `__seq_offsets` (`out`: `rows + 1` int64) in one pass over the picked
/// rows' source offsets, rebased; each is checked never to decrease and each pick to run
/// between the token range [`token_spans`] read, so the sizes already laid out hold.
fn write_offsets(
    tables: &[&[u8]],
    picks: &[RowSpan],
    tokens: &[RowSpan],
    out: &mut [u8],
) -> Result<()> {
    let (first, mut rest) = out.split_at_mut(8);
    first.copy_from_slice(&0u64.to_le_bytes());
    let mut base = 0u64;
    for (pick, range) in picks.iter().zip(tokens) {
        let rows = (pick.end - pick.start) as usize;
        let under = tables
            .get(pick.source as usize)
            .and_then(|t| t.get(pick.start as usize * 8..(pick.end as usize + 1) * 8))
            .ok_or_else(|| internal_err!("picked rows lie outside {}", names::SEQ_OFFSETS))?;
        let (slots, after) = std::mem::take(&mut rest).split_at_mut(rows * 8);
        rest = after;
        // Two passes that vectorise: the rebase, then the order. Offsets that start at the
        // range's start, end at its end and never decrease (as int64s) all lie within it.
        let shift = base.wrapping_sub(range.start);
        for (value, slot) in under[8..].chunks_exact(8).zip(slots.chunks_exact_mut(8)) {
            slot.copy_from_slice(&shift.wrapping_add(read_u64(value)).to_le_bytes());
        }
        let ordered = read_u64(&under[..8]) == range.start && never_decrease(under);
        if !ordered || read_u64(&under[under.len() - 8..]) != range.end {
            return Err(frame_err!(
                "{} of rows {}..{} changed since the frame was read, or decrease",
                names::SEQ_OFFSETS,
                pick.start,
                pick.end
            ));
        }
        base += range.end - range.start;
    }
    Ok(())
}

/// The little-endian u64 of an 8-byte chunk (0 for any other length, which callers never pass).
fn read_u64(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}
