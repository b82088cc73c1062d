//! Frame → validated layout. Nothing here copies payload: it checks every offset, shape and
//! index the header and index tensors claim, so that the views the caller builds are in bounds
//! and consistent. Cost: O(fields + rows + segments), independent of payload bytes.

use crate::buffer::ALIGNMENT;
use crate::dtype::DType;
use crate::error::Result;
use crate::frame_err;
use crate::header::{parse_header, Entry, Header};
use crate::spec::{meta, names, FieldSpec, Tier};
use crate::tensor::checked_numel;

/// Where a tensor lies in the frame (absolute byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorLoc {
    pub offset: usize,
    pub nbytes: usize,
    pub dtype: DType,
    pub shape: Vec<u64>,
}

/// The CSR index of a packed field.
#[derive(Debug, Clone)]
pub struct PackedIndex {
    /// `[segments, rank]` int64.
    pub seg_shapes: TensorLoc,
    /// `[segments + 1]` int64 element offsets into the flat values.
    pub seg_offsets: TensorLoc,
    /// `[rows + 1]` int64 offsets into `row_segments`.
    pub row_offsets: TensorLoc,
    /// `[references]` int64 physical segment ids.
    pub row_segments: TensorLoc,
    pub num_segments: u64,
    pub num_refs: u64,
    /// Every segment is referenced once, in storage order: the values are the rows'
    /// concatenation as they stand.
    pub in_order: bool,
}

#[derive(Debug, Clone)]
pub struct DecodedField {
    pub spec: FieldSpec,
    pub values: TensorLoc,
    pub packed: Option<PackedIndex>,
}

#[derive(Debug, Clone)]
pub struct FrameLayout {
    pub header: Header,
    pub num_rows: u64,
    pub sequence_field: Option<String>,
    /// `[rows + 1]` int64 token offsets shared by every per-token field.
    pub seq_offsets: Option<TensorLoc>,
    pub fields: Vec<DecodedField>,
}

impl FrameLayout {
    pub fn field(&self, name: &str) -> Option<&DecodedField> {
        self.fields.iter().find(|f| f.spec.name == name)
    }
}

/// Little-endian int64s of a validated index tensor.
pub fn read_i64s<'b>(buf: &'b [u8], loc: &TensorLoc) -> impl Iterator<Item = i64> + 'b {
    buf[loc.offset..loc.offset + loc.nbytes]
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
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

/// Checks an offsets tensor: `len` entries, starting at 0, non-decreasing, ending at `last`.
fn check_offsets(buf: &[u8], loc: &TensorLoc, name: &str, len: u64, last: u64) -> Result<()> {
    if loc.shape[0] != len {
        return Err(frame_err!(
            "{name} has {} entries, expected {len}",
            loc.shape[0]
        ));
    }
    let mut prev = 0i64;
    for (i, v) in read_i64s(buf, loc).enumerate() {
        if (i == 0 && v != 0) || v < prev {
            return Err(frame_err!(
                "{name}[{i}] = {v} (offsets must start at 0 and never decrease)"
            ));
        }
        prev = v;
    }
    if prev as u64 != last {
        return Err(frame_err!("{name} ends at {prev}, expected {last}"));
    }
    Ok(())
}

/// Parses and validates a whole frame.
pub fn parse_frame(buf: &[u8]) -> Result<FrameLayout> {
    let header = parse_header(buf)?;
    let md = &header.metadata;
    match md.get(meta::FORMAT).map(String::as_str) {
        Some(meta::FORMAT_VERSION) => {}
        Some(other) => {
            return Err(frame_err!(
                "frame format version {other:?} is not supported (this build reads {:?})",
                meta::FORMAT_VERSION
            ))
        }
        None => {
            return Err(frame_err!(
                "not a py_wire frame: no {:?} in __metadata__",
                meta::FORMAT
            ))
        }
    }
    let num_rows: u64 = md
        .get(meta::NUM_ROWS)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| frame_err!("{:?} is missing or not a number", meta::NUM_ROWS))?;
    let specs: Vec<FieldSpec> = serde_json::from_str(
        md.get(meta::FIELDS)
            .ok_or_else(|| frame_err!("{:?} is missing", meta::FIELDS))?,
    )
    .map_err(|e| frame_err!("field table is malformed: {e}"))?;
    let sequence_field = md.get(meta::SEQUENCE_FIELD).cloned();

    let mut seq_offsets = None;
    if specs.iter().any(|s| s.tier == Tier::PerToken) {
        let loc = find(&header, names::SEQ_OFFSETS, DType::I64, 1)?;
        let rows_plus_one = num_rows
            .checked_add(1)
            .ok_or_else(|| frame_err!("row count overflows"))?;
        let last = read_i64s(buf, &loc).last().unwrap_or(0).max(0) as u64;
        check_offsets(buf, &loc, names::SEQ_OFFSETS, rows_plus_one, last)?;
        seq_offsets = Some(loc);
    }
    let total_tokens = seq_offsets
        .as_ref()
        .and_then(|l| read_i64s(buf, l).last())
        .unwrap_or(0) as u64;

    let mut fields = Vec::with_capacity(specs.len());
    let mut seen = std::collections::HashSet::new();
    for spec in specs {
        spec.validate()
            .map_err(|e| frame_err!("field table: {}", e.message()))?;
        if !seen.insert(spec.name.clone()) {
            return Err(frame_err!(
                "field {:?} appears twice in the field table",
                spec.name
            ));
        }
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
        let values = locate(&header, values_entry)?;
        let statics: Vec<u64> = spec.shape.iter().map(|d| d.unwrap_or(0)).collect();
        let packed = match spec.tier {
            Tier::Scalar => {
                let mut expected = vec![num_rows];
                expected.extend(&statics);
                expect_shape(&spec.name, &values.shape, &expected)?;
                None
            }
            Tier::PerToken => {
                let mut expected = vec![total_tokens];
                expected.extend(&statics);
                expect_shape(&spec.name, &values.shape, &expected)?;
                None
            }
            Tier::Packed => Some(check_packed(buf, &header, &spec, &values, num_rows)?),
        };
        fields.push(DecodedField {
            spec,
            values,
            packed,
        });
    }
    Ok(FrameLayout {
        header,
        num_rows,
        sequence_field,
        seq_offsets,
        fields,
    })
}

fn expect_shape(name: &str, found: &[u64], expected: &[u64]) -> Result<()> {
    if found != expected {
        return Err(frame_err!(
            "field {name:?}: values have shape {found:?}, expected {expected:?}"
        ));
    }
    Ok(())
}

fn check_packed(
    buf: &[u8],
    header: &Header,
    spec: &FieldSpec,
    values: &TensorLoc,
    num_rows: u64,
) -> Result<PackedIndex> {
    let name = &spec.name;
    let rank = spec.shape.len();
    let seg_shapes = find(header, &names::seg_shapes(name), DType::I64, 2)?;
    let seg_offsets = find(header, &names::seg_offsets(name), DType::I64, 1)?;
    let row_offsets = find(header, &names::row_offsets(name), DType::I64, 1)?;
    let row_segments = find(header, &names::row_segments(name), DType::I64, 1)?;
    let num_segments = seg_shapes.shape[0];
    if seg_shapes.shape[1] != rank as u64 {
        return Err(frame_err!(
            "field {name:?}: segment shapes have rank {}, the field has rank {rank}",
            seg_shapes.shape[1]
        ));
    }
    let values_numel = checked_numel(&values.shape)
        .ok_or_else(|| frame_err!("field {name:?}: values shape overflows"))?;
    // Each segment's size must be what its offsets claim, and its static dims the schema's.
    let dims: Vec<i64> = read_i64s(buf, &seg_shapes).collect();
    let offsets: Vec<i64> = read_i64s(buf, &seg_offsets).collect();
    if offsets.len() as u64 != num_segments + 1 {
        return Err(frame_err!(
            "field {name:?}: {} segment offsets for {num_segments} segments",
            offsets.len()
        ));
    }
    if offsets.first() != Some(&0) {
        return Err(frame_err!(
            "field {name:?}: segment offsets must start at 0"
        ));
    }
    let mut stacked = 0u64;
    for (s, shape) in dims.chunks_exact(rank.max(1)).enumerate() {
        let mut numel = 1u64;
        for (d, (&dim, expected)) in shape.iter().zip(&spec.shape).enumerate() {
            let dim = u64::try_from(dim)
                .map_err(|_| frame_err!("field {name:?}: segment {s} dim {d} is {dim}"))?;
            if let Some(e) = expected {
                if dim != *e {
                    return Err(frame_err!(
                        "field {name:?}: segment {s} dim {d} is {dim}, the schema says {e}"
                    ));
                }
            }
            numel = numel
                .checked_mul(dim)
                .ok_or_else(|| frame_err!("field {name:?}: segment {s} size overflows"))?;
        }
        stacked = stacked
            .checked_add(shape[0].max(0) as u64)
            .ok_or_else(|| frame_err!("field {name:?}: segment sizes overflow"))?;
        let span = offsets[s + 1].checked_sub(offsets[s]);
        if span.map(|v| v as u64) != Some(numel) || offsets[s + 1] < offsets[s] {
            return Err(frame_err!(
                "field {name:?}: segment {s} has {numel} elements but its offsets span {}..{}",
                offsets[s],
                offsets[s + 1]
            ));
        }
    }
    let last = *offsets.last().unwrap_or(&0) as u64;
    if last != values_numel {
        return Err(frame_err!(
            "field {name:?}: segments hold {last} elements, values hold {values_numel}"
        ));
    }
    let expected_values_shape = if spec.values_are_stackable() {
        let mut s = vec![stacked];
        s.extend(spec.shape[1..].iter().map(|d| d.unwrap_or(0)));
        s
    } else {
        vec![values_numel]
    };
    expect_shape(name, &values.shape, &expected_values_shape)?;
    let num_refs = row_segments.shape[0];
    check_offsets(
        buf,
        &row_offsets,
        &names::row_offsets(name),
        num_rows
            .checked_add(1)
            .ok_or_else(|| frame_err!("row count overflows"))?,
        num_refs,
    )?;
    let mut in_order = num_refs == num_segments;
    for (i, id) in read_i64s(buf, &row_segments).enumerate() {
        if id < 0 || id as u64 >= num_segments {
            return Err(frame_err!(
                "field {name:?}: row_segments[{i}] = {id} is not a segment id (0..{num_segments})"
            ));
        }
        in_order &= id as usize == i;
    }
    Ok(PackedIndex {
        seg_shapes,
        seg_offsets,
        row_offsets,
        row_segments,
        num_segments,
        num_refs,
        in_order,
    })
}
