//! The packed tier: per row 0..k segments of any rank, rows sharing segments. A frame stores the
//! physical segments once, back to back (the values), and the CSR tables that cut them: each
//! segment's shape and element offsets, each row's references to them. A gather takes a row's
//! segments whole.

use std::collections::HashMap;

use crate::encode::input::prefix_sums;
use crate::encode::input::ResolvedRows;
use crate::encode::input::{FieldData, FieldInput, RowSpan};
use crate::encode::layout::Layout;
use crate::error::Result;
use crate::frame::identity::{hex, table_bytes, SegId, ID_LEN, NO_ID};
use crate::frame::located::{
    check_ids_len, copy_indices, find, locate_ids, DecodedField, PackedIndex, PackedTables,
    TensorLoc, Trust,
};
use crate::schema::dtype::DType;
use crate::schema::spec::{names, FieldSpec};
use crate::tensor::{Dims, TensorRef};
use crate::{batch_err, frame_err, internal_err};

use super::check::{check_dims, check_dtype, Where};
use super::codec::{FrameFacts, PlanBatch, SharedSpans, SourceTables, TierCodec};
use super::rules::Tier;

/// Per row 0..k segments of any rank; rows may share segments.
pub(super) struct Packed;

impl TierCodec for Packed {
    fn tier(&self) -> Tier {
        Tier::Packed
    }

    fn plan<'a>(
        &self,
        layout: &mut Layout<'a>,
        field: &FieldData<'a>,
        _batch: &PlanBatch<'_>,
    ) -> Result<()> {
        plan_packed(layout, field)
    }

    fn tables(&self, name: &str) -> Vec<String> {
        let mut tables: Vec<String> = names::tables(name).into();
        tables.push(names::seg_ids(name));
        tables
    }

    fn locate(
        &self,
        frame: &FrameFacts<'_>,
        spec: &FieldSpec,
        values: &TensorLoc,
    ) -> Result<Option<PackedIndex>> {
        packed_index(frame, spec, values).map(Some)
    }

    fn read_tables(
        &self,
        buf: &[u8],
        field: &DecodedField,
        num_rows: u64,
    ) -> Result<Option<PackedTables>> {
        PackedTables::read(buf, field, num_rows).map(Some)
    }

    fn gather<'a>(
        &self,
        tables: &[SourceTables<'a>],
        picks: &[RowSpan],
        spec: FieldSpec,
        _spans: &mut SharedSpans,
    ) -> Result<FieldData<'a>> {
        packed_field(tables, picks, spec)
    }
}

fn plan_packed<'a>(layout: &mut Layout<'a>, field: &FieldData<'a>) -> Result<()> {
    let spec = &field.spec;
    let resolved = field.input.csr_segments(spec)?;
    let (segments, row_offsets, ids) = packed_rows(spec, &resolved, &field.input)?;
    let (physical, row_segments, physical_ids) =
        physical_segments(spec, segments, row_offsets, ids)?;
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
    )?;
    // Only a field whose segments carry identity gets the table: frames of values without it
    // are byte for byte what they were before identity existed.
    if let Some(bytes) = table_bytes(&physical_ids) {
        layout.blob_u8(names::seg_ids(name), vec![n_phys, ID_LEN as u64], bytes)?;
    }
    Ok(())
}

/// A packed field's segment references, row offsets and (when it has them) references' ids.
type RowsOf<'r, 'a> = (&'r [TensorRef<'a>], &'r [u64], Option<&'r [SegId]>);

/// A packed field's rows of segments, from its CSR form (`resolved`) or its segment lists, with
/// each reference's identity when the input has them; the row offsets must run from 0 to the
/// segment count.
fn packed_rows<'r, 'a>(
    spec: &FieldSpec,
    resolved: &'r Option<ResolvedRows<'a>>,
    input: &'r FieldInput<'a>,
) -> Result<RowsOf<'r, 'a>> {
    let (segments, row_offsets, ids) = match (resolved, input) {
        (Some((segments, row_offsets, ids)), _) => (segments, row_offsets, ids),
        (
            None,
            FieldInput::Segments {
                segments,
                row_offsets,
                ids,
            },
        ) => (segments, row_offsets, ids),
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
    if let Some(ids) = ids.as_ref().filter(|ids| ids.len() != segments.len()) {
        return Err(batch_err!(
            "field {:?}: {} segment ids for {} segment references",
            spec.name,
            ids.len(),
            segments.len()
        ));
    }
    Ok((segments, row_offsets, ids.as_deref()))
}

/// What makes two segment references one physical segment: the same identity, or (without
/// one) the same bytes, as address, dtype, shape and strides (a float32 segment and a bfloat16
/// view of the same memory are different segments).
#[derive(PartialEq, Eq, Hash)]
enum SegmentKey {
    Identity(SegId),
    Address(usize, DType, Dims, Dims),
}

/// The physical segments a field stores and, per reference, the index of the one it names.
type Physical<'a> = (Vec<TensorRef<'a>>, Vec<u64>, Vec<SegId>);

/// Checks every segment reference and stores each physical segment once: returns the
/// segments to write, per reference the index of the segment it names, and each segment's id.
fn physical_segments<'a>(
    spec: &FieldSpec,
    segments: &[TensorRef<'a>],
    row_offsets: &[u64],
    ids: Option<&[SegId]>,
) -> Result<Physical<'a>> {
    let mut interned: HashMap<SegmentKey, u64> = HashMap::new();
    let mut physical: Vec<TensorRef<'a>> = Vec::new();
    let mut physical_ids: Vec<SegId> = Vec::new();
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
        let id = ids.map_or(NO_ID, |ids| ids[index]);
        let key = if id != NO_ID {
            Some(SegmentKey::Identity(id))
        } else if seg.numel() > 0 {
            Some(SegmentKey::Address(
                seg.bytes.as_ptr() as usize,
                seg.dtype,
                seg.shape,
                seg.strides,
            ))
        } else {
            None
        };
        let known = key.as_ref().and_then(|k| interned.get(k).copied());
        let at = match known {
            Some(at) => {
                let first = &physical[at as usize];
                if first.shape != seg.shape || first.dtype != seg.dtype {
                    return Err(batch_err!(
                        "field {:?}: row {row} segment {seg_in_row} ({} {:?}) has the identity \
                         {} of an earlier segment of another shape or dtype ({} {:?}): one id \
                         names one segment",
                        spec.name,
                        seg.dtype.name(),
                        &seg.shape[..],
                        hex(&id),
                        first.dtype.name(),
                        &first.shape[..]
                    )
                    .field(&spec.name)
                    .row(row)
                    .segment(seg_in_row));
                }
                at
            }
            None => {
                physical.push(seg.clone());
                physical_ids.push(id);
                let at = physical.len() as u64 - 1;
                if let Some(k) = key {
                    interned.insert(k, at);
                }
                at
            }
        };
        row_segments.push(at);
    }
    Ok((physical, row_segments, physical_ids))
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

/// Locates a packed field's index tensors and validates their contents.
fn packed_index(
    frame: &FrameFacts<'_>,
    spec: &FieldSpec,
    values: &TensorLoc,
) -> Result<PackedIndex> {
    let (buf, header, num_rows) = (frame.buf, frame.header, frame.num_rows);
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
        seg_ids: locate_ids(header, name)?,
        num_segments: 0,
        num_refs: 0,
        in_order: false,
    };
    let (num_segments, row_segments) = match frame.trust {
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
    if let Some(ids) = &index.seg_ids {
        check_ids_len(ids, num_segments, name)?;
    }
    index.num_segments = num_segments;
    index.num_refs = row_segments.len() as u64;
    index.in_order = row_segments.len() as u64 == num_segments
        && row_segments
            .iter()
            .enumerate()
            .all(|(i, &id)| id == i as u64);
    Ok(index)
}

/// A packed field's picked rows: their segments, whole. A frame that lacks the field gives its
/// rows no segments (a text-only batch beside a multimodal one).
fn packed_field<'a>(
    tables: &[SourceTables<'a>],
    picks: &[RowSpan],
    spec: FieldSpec,
) -> Result<FieldData<'a>> {
    let mut per_source = Vec::with_capacity(tables.len());
    for t in tables {
        let layout = t.source.layout;
        per_source.push(
            match layout.fields.iter().position(|f| f.spec.name == spec.name) {
                Some(i) => {
                    let csr = t.tables[i].as_ref().ok_or_else(|| {
                        internal_err!("packed field {:?} without tables", spec.name)
                    })?;
                    Some((t.values(&layout.fields[i])?, csr))
                }
                None => None,
            },
        );
    }
    let identified = per_source
        .iter()
        .flatten()
        .any(|(_, csr)| csr.seg_ids.is_some());
    let mut segments = Vec::new();
    let mut ids = Vec::new();
    let mut row_offsets = vec![0u64];
    for pick in picks {
        for row in pick.start as usize..pick.end as usize {
            if let Some((values, csr)) = &per_source[pick.source as usize] {
                let es = values.dtype.size();
                for &id in csr.row(row) {
                    if identified {
                        ids.push(csr.id(id));
                    }
                    let elements = csr.elements(id);
                    let bytes = values
                        .bytes
                        .get(elements.start * es..elements.end * es)
                        .ok_or_else(|| frame_err!("segment {id} lies outside its values"))?;
                    segments.push(TensorRef::contiguous(values.dtype, csr.shape(id), bytes)?);
                }
            }
            row_offsets.push(segments.len() as u64);
        }
    }
    Ok(FieldData {
        spec,
        input: FieldInput::Segments {
            segments,
            row_offsets,
            ids: identified.then_some(ids),
        },
    })
}
