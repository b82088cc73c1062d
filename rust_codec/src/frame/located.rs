//! Where a frame's tensors lie, as the reader located them: the whole frame ([`FrameLayout`]),
//! each tensor's place ([`TensorLoc`]), a field's values and a packed field's CSR index ([`DecodedField`],
//! [`PackedIndex`]), and the checked readers of int64 index tensors, down to a packed field's
//! tables copied out and validated ([`PackedTables`]). Every reader gets indices from here,
//! copied once, never from the frame's bytes again.

use crate::error::{Error, Result};
use crate::frame::compact;
use crate::frame::header::{Entry, Header};
use crate::frame::identity::{parse_ids, SegId, ID_LEN, NO_ID};
use crate::memory::buffer::ALIGNMENT;
use crate::schema::dtype::DType;
use crate::schema::spec::{names, FieldSpec};
use crate::tensor::checked_numel;
use crate::{frame_err, internal_err};

/// A frame as [`parse_frame`](crate::frame::layout::parse_frame) validated it: header, row count and every field's tensors, each in
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

/// One parsed frame: its bytes and validated layout.
#[derive(Clone, Copy)]
pub struct Source<'a> {
    /// The frame's bytes.
    pub bytes: &'a [u8],
    /// Its layout, parsed from `bytes`.
    pub layout: &'a FrameLayout,
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
    /// `U8 [segments, 16]`: each segment's identity (`frame::identity`), when the frame has it.
    pub seg_ids: Option<TensorLoc>,
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
    /// [`schema_field_table`](crate::frame::layout::schema_field_table)). Shared: a frame op's
    /// output layout takes its sources' specs without copying them.
    pub spec: std::sync::Arc<FieldSpec>,
    /// Where the field's values tensor lies.
    pub values: TensorLoc,
    /// The CSR tables of a packed field (`None` for other tiers).
    pub packed: Option<PackedIndex>,
}

pub(crate) fn locate(header: &Header, entry: &Entry) -> Result<TensorLoc> {
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

pub(crate) fn find(header: &Header, name: &str, dtype: DType, rank: usize) -> Result<TensorLoc> {
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

/// How much of a frame's index tables a reader checks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trust {
    /// Bytes from anywhere: every table entry is checked.
    Hostile,
    /// Bytes this process's encoder wrote: tables are located and sized, not re-read.
    Written,
}

pub(crate) fn expect_shape(name: &str, found: &[u64], expected: &[u64]) -> Result<()> {
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
pub(crate) fn last_index(buf: &[u8], loc: &TensorLoc, what: &dyn Fn() -> String) -> Result<u64> {
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
pub(crate) fn copy_indices(
    buf: &[u8],
    loc: &TensorLoc,
    what: &dyn Fn() -> String,
) -> Result<Vec<u64>> {
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
pub(crate) fn read_offsets(
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
pub(crate) fn check_csr(
    offsets: &[u64],
    len: u64,
    last: u64,
    what: &dyn Fn() -> String,
) -> Result<()> {
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
    /// `[segments]`: each segment's identity, when the frame has the table.
    pub seg_ids: Option<Vec<SegId>>,
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

    /// Identity of physical segment `seg` ([`NO_ID`] in a frame without the table).
    pub fn id(&self, seg: u64) -> SegId {
        self.seg_ids
            .as_ref()
            .and_then(|ids| ids.get(seg as usize).copied())
            .unwrap_or(NO_ID)
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

    pub(crate) fn read_index(
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
        let seg_ids = index
            .seg_ids
            .as_ref()
            .map(|loc| read_ids(buf, loc, num_segments as u64, name))
            .transpose()?;
        Ok(PackedTables {
            rank,
            seg_shapes,
            seg_offsets,
            row_offsets,
            row_segments,
            seg_ids,
        })
    }
}

/// Where field `name`'s id table lies, if the frame has one: `U8 [segments, 16]` (the segment
/// count is checked against the field's by [`read_ids`]).
pub(crate) fn locate_ids(header: &Header, name: &str) -> Result<Option<TensorLoc>> {
    let table = names::seg_ids(name);
    let Some(entry) = header.entry(&table) else {
        return Ok(None);
    };
    if entry.dtype != DType::U8 || entry.shape.len() != 2 || entry.shape[1] != ID_LEN as u64 {
        return Err(frame_err!(
            "tensor {table:?} is {} of shape {:?}; expected U8 of shape [segments, {ID_LEN}]",
            entry.dtype.name(),
            entry.shape
        )
        .field(name));
    }
    locate(header, entry).map(Some)
}

/// Checks that field `name`'s id table at `loc` has one id per segment (`num_segments`).
pub(crate) fn check_ids_len(loc: &TensorLoc, num_segments: u64, name: &str) -> Result<()> {
    let rows = loc.shape.first().copied().unwrap_or(0);
    if rows != num_segments {
        return Err(frame_err!(
            "field {name:?}: {} has {rows} ids for {num_segments} segments",
            names::seg_ids(name)
        )
        .field(name));
    }
    Ok(())
}

/// Copies field `name`'s id table out of `buf`, checked: one id per segment, in bounds, and no
/// id on two segments ([`parse_ids`]).
pub(crate) fn read_ids(
    buf: &[u8],
    loc: &TensorLoc,
    num_segments: u64,
    name: &str,
) -> Result<Vec<SegId>> {
    check_ids_len(loc, num_segments, name)?;
    let len = usize::try_from(num_segments)
        .ok()
        .and_then(|n| n.checked_mul(ID_LEN))
        .filter(|&n| n == loc.nbytes)
        .ok_or_else(|| frame_err!("field {name:?}: id table size overflows").field(name))?;
    let bytes = buf
        .get(loc.offset..loc.offset.saturating_add(len))
        .filter(|b| b.len() == len)
        .ok_or_else(|| frame_err!("{} lies outside the frame", names::seg_ids(name)).field(name))?;
    parse_ids(bytes, name)
}
