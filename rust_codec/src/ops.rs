//! Frame operations without decoding: pick rows out of one or more frames (select, split,
//! shard, concatenate) and lay them out as a new frame. Tier-aware by construction: per-token
//! rows are cut by the sequence offsets, packed rows keep their segments whole (shared segments
//! stay shared), scalars move one value per row.

use std::collections::BTreeMap;

use crate::decode::{read_i64s, DecodedField, FrameLayout};
use crate::encode::{EncodeRequest, FieldData, FieldInput};
use crate::error::Result;
use crate::frame_err;
use crate::spec::{meta, FieldSpec, Tier};
use crate::tensor::{checked_numel, TensorRef};

/// One parsed frame: its bytes and validated layout.
pub struct Source<'a> {
    pub bytes: &'a [u8],
    pub layout: &'a FrameLayout,
}

impl<'a> Source<'a> {
    fn values(&self, field: &DecodedField) -> Result<TensorRef<'a>> {
        let loc = &field.values;
        TensorRef::contiguous(
            loc.dtype,
            &loc.shape,
            &self.bytes[loc.offset..loc.offset + loc.nbytes],
        )
    }
}

/// The rows `rows` (indices into the concatenation of every source's rows; `None`: all of
/// them, in order) as an encode request. Fields absent from some sources: packed rows there
/// are empty (a text-only batch beside a multimodal one); other tiers are an error.
pub fn gather<'a>(sources: &[Source<'a>], rows: Option<&[u64]>) -> Result<EncodeRequest<'a>> {
    let first = sources
        .first()
        .ok_or_else(|| frame_err!("no frames to gather from"))?;
    let mut starts = Vec::with_capacity(sources.len() + 1);
    let mut total = 0u64;
    for s in sources {
        starts.push(total);
        total += s.layout.num_rows;
    }
    let all: Vec<u64>;
    let rows = match rows {
        Some(r) => r,
        None => {
            all = (0..total).collect();
            &all
        }
    };
    // Resolve each global row to (source, local row).
    let mut picks = Vec::with_capacity(rows.len());
    for &g in rows {
        if g >= total {
            return Err(frame_err!("row {g} is out of range for {total} rows"));
        }
        let s = starts.partition_point(|&st| st <= g) - 1;
        picks.push((s, g - starts[s]));
    }
    let specs = field_union(sources)?;
    let seq: Vec<Vec<u64>> = sources
        .iter()
        .map(|s| {
            s.layout
                .seq_offsets
                .as_ref()
                .map(|l| read_i64s(s.bytes, l).map(|v| v as u64).collect())
                .unwrap_or_default()
        })
        .collect();
    let mut fields = Vec::with_capacity(specs.len());
    for spec in specs {
        let mut segments = Vec::new();
        let mut row_offsets = Vec::with_capacity(picks.len() + 1);
        row_offsets.push(0u64);
        // Per source: the field, its values, and for packed fields its CSR tables.
        let mut per_source = Vec::with_capacity(sources.len());
        for s in sources {
            per_source.push(match s.layout.field(&spec.name) {
                Some(f) => Some((f, s.values(f)?, csr(s.bytes, f))),
                None if spec.tier == Tier::Packed => None,
                None => {
                    return Err(frame_err!(
                        "field {:?} is missing from one of the frames",
                        spec.name
                    ))
                }
            });
        }
        for &(s, row) in &picks {
            let Some((field, values, tables)) = &per_source[s] else {
                row_offsets.push(segments.len() as u64);
                continue;
            };
            match spec.tier {
                Tier::Scalar => {
                    let one = values.narrow0(row, 1)?;
                    segments.push(TensorRef::strided(
                        one.dtype,
                        &one.shape[1..],
                        &one.strides[1..],
                        one.bytes,
                    )?);
                }
                Tier::PerToken => {
                    let (a, b) = (seq[s][row as usize], seq[s][row as usize + 1]);
                    segments.push(values.narrow0(a, b - a)?);
                }
                Tier::Packed => {
                    let (shapes, offsets, row_offs, refs) = tables;
                    let rank = field.spec.shape.len();
                    let flat_bytes = values.bytes;
                    let es = values.dtype.size();
                    for &id in
                        &refs[row_offs[row as usize] as usize..row_offs[row as usize + 1] as usize]
                    {
                        let id = id as usize;
                        let shape: Vec<u64> = shapes[id * rank..(id + 1) * rank]
                            .iter()
                            .map(|&d| d as u64)
                            .collect();
                        let (a, b) = (offsets[id] as usize, offsets[id + 1] as usize);
                        debug_assert_eq!(checked_numel(&shape), Some((b - a) as u64));
                        segments.push(TensorRef::contiguous(
                            values.dtype,
                            &shape,
                            &flat_bytes[a * es..b * es],
                        )?);
                    }
                }
            }
            row_offsets.push(segments.len() as u64);
        }
        fields.push(FieldData {
            spec,
            input: FieldInput::Segments {
                segments,
                row_offsets,
            },
        });
    }
    let mut metadata: BTreeMap<String, String> = first.layout.header.metadata.clone();
    for key in [
        meta::FORMAT,
        meta::NUM_ROWS,
        meta::FIELDS,
        meta::SEQUENCE_FIELD,
    ] {
        metadata.remove(key);
    }
    Ok(EncodeRequest {
        fields,
        sequence_field: first.layout.sequence_field.clone(),
        lengths_field: None,
        metadata,
        num_rows_hint: Some(picks.len() as u64),
    })
}

type Tables = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);

fn csr(bytes: &[u8], field: &DecodedField) -> Tables {
    match &field.packed {
        Some(p) => (
            read_i64s(bytes, &p.seg_shapes).collect(),
            read_i64s(bytes, &p.seg_offsets).collect(),
            read_i64s(bytes, &p.row_offsets).collect(),
            read_i64s(bytes, &p.row_segments).collect(),
        ),
        None => Default::default(),
    }
}

/// Every field of every source, in first-seen order; a field must mean the same everywhere.
fn field_union(sources: &[Source<'_>]) -> Result<Vec<FieldSpec>> {
    let mut specs: Vec<FieldSpec> = Vec::new();
    for s in sources {
        if s.layout.sequence_field != sources[0].layout.sequence_field {
            return Err(frame_err!("frames disagree on their sequence field"));
        }
        for f in &s.layout.fields {
            match specs.iter().find(|x| x.name == f.spec.name) {
                Some(known) if *known != f.spec => {
                    return Err(frame_err!(
                        "field {:?} is laid out differently in two frames",
                        f.spec.name
                    ))
                }
                Some(_) => {}
                None => specs.push(f.spec.clone()),
            }
        }
    }
    Ok(specs)
}
