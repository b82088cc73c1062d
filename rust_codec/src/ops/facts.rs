//! Per-frame facts across a concatenation: the caller's `__metadata__` entries (every key not
//! starting `py_wire.`, e.g. the policy version that generated a streamed GRPO group).
//!
//! A concat never drops one silently: frames that disagree on a key (a different value, or the
//! key in some frames only) are refused naming the key, the frames and both values, unless the
//! caller turns that key into a per-row field ([`PerRow`]): then each frame's value becomes the
//! value of every row it contributes, and the output's header no longer carries the key.

use std::collections::BTreeSet;

use crate::argument_err;
use crate::error::Result;
use crate::frame::located::Source;
use crate::schema::dtype::DType;
use crate::schema::spec::FieldSpec;
use crate::tensor::TensorRef;
use crate::tier::rules::Items;

/// The prefix of py_wire's own header keys; every other key is the caller's.
const OWN_PREFIX: &str = "py_wire.";

/// A header key whose value, per frame, becomes a per-row field of a concatenation.
#[derive(Debug, Clone)]
pub struct PerRow {
    /// The `__metadata__` key each frame carries (e.g. `policy_version`).
    pub key: String,
    /// The field its value fills: a 0-d scalar of an integer or float dtype, without a wire
    /// cast (the schema's spec, as the frames store it).
    pub spec: FieldSpec,
}

/// Refuses sources whose caller keys disagree, except the keys of `per_row`.
pub fn check_agree(sources: &[Source<'_>], per_row: &[PerRow]) -> Result<()> {
    let turned: BTreeSet<&str> = per_row.iter().map(|p| p.key.as_str()).collect();
    let keys: BTreeSet<&str> = sources
        .iter()
        .flat_map(|s| s.layout.header.metadata.keys())
        .map(String::as_str)
        .filter(|k| !k.starts_with(OWN_PREFIX) && !turned.contains(k))
        .collect();
    for key in keys {
        let value = |i: usize| sources[i].layout.header.metadata.get(key);
        let first = value(0);
        if let Some(i) = (1..sources.len()).find(|&i| value(i) != first) {
            let shown = |v: Option<&String>| match v {
                Some(v) => format!("{v:?}"),
                None => "no such entry".to_string(),
            };
            return Err(argument_err!(
                "cannot concatenate frames that disagree on metadata key {key:?}: frame 0 has \
                 {}, frame {i} has {}; keep it per row (concat(..., per_row={{{key:?}: \
                 <a scalar field>}})) or make the frames agree",
                shown(first),
                shown(value(i))
            )
            .field(key)
            .item(i)
            .expected(first.map_or(serde_json::Value::Null, |v| v.clone().into()))
            .found(value(i).map_or(serde_json::Value::Null, |v| v.clone().into())));
        }
    }
    Ok(())
}

/// One per-row field's values, per source: the source's own values where it stores the field
/// (checked against its header entry when it has one too), else its header value repeated
/// once per row, in `filled` (which the returned references borrow).
pub fn per_row_values<'a>(
    sources: &[Source<'a>],
    per_row: &PerRow,
    filled: &'a [Vec<u8>],
) -> Result<Vec<TensorRef<'a>>> {
    let mut out = Vec::with_capacity(sources.len());
    for (i, source) in sources.iter().enumerate() {
        let rows = source.layout.num_rows;
        let fill = &filled[i];
        let own = match source.layout.field(&per_row.spec.name) {
            None => None,
            Some(field) if *field.spec != per_row.spec => {
                return Err(argument_err!(
                    "per_row: frame {i} stores field {:?} laid out differently from the schema's",
                    per_row.spec.name
                ))
            }
            Some(field) => {
                let loc = &field.values;
                let bytes = source
                    .bytes
                    .get(loc.offset..loc.offset.saturating_add(loc.nbytes))
                    .ok_or_else(|| {
                        crate::frame_err!(
                            "field {:?}: values lie outside the frame",
                            field.spec.name
                        )
                    })?;
                Some(TensorRef::contiguous(loc.dtype, &loc.shape, bytes)?)
            }
        };
        match (own, fill.is_empty() && rows > 0) {
            (Some(own), false) => {
                // The frame carries both: its rows must say what its header says.
                if let Some(row) = (0..rows as usize).find(|&r| {
                    let size = fill.len() / rows as usize;
                    own.bytes.get(r * size..(r + 1) * size) != fill.get(r * size..(r + 1) * size)
                }) {
                    return Err(argument_err!(
                        "per_row: frame {i} has metadata {:?} = {:?} but its field {:?} holds \
                         another value in row {row}",
                        per_row.key,
                        source.layout.header.metadata.get(&per_row.key),
                        per_row.spec.name
                    )
                    .field(&per_row.spec.name)
                    .row(row));
                }
                out.push(own);
            }
            (Some(own), true) => out.push(own),
            (None, false) => out.push(TensorRef::contiguous(
                per_row.spec.dtype,
                &[rows],
                fill.as_slice(),
            )?),
            (None, true) => {
                return Err(argument_err!(
                    "per_row: frame {i} has neither metadata key {:?} nor field {:?}: its rows \
                     would have no {:?}",
                    per_row.key,
                    per_row.spec.name,
                    per_row.key
                )
                .field(&per_row.spec.name)
                .item(i))
            }
        }
    }
    Ok(out)
}

/// Per source, its header value of `per_row.key` repeated once per row as little-endian values
/// of the field's dtype (empty where the source lacks the key, or has no rows).
pub fn fill_values(sources: &[Source<'_>], per_row: &PerRow) -> Result<Vec<Vec<u8>>> {
    let spec = &per_row.spec;
    if spec.tier.items() != Items::Rows || !spec.shape.is_empty() || spec.wire_dtype.is_some() {
        return Err(argument_err!(
            "per_row: field {:?} must be a 0-d scalar without a wire dtype to hold metadata \
             {:?} per row",
            spec.name,
            per_row.key
        )
        .field(&spec.name));
    }
    sources
        .iter()
        .enumerate()
        .map(|(i, s)| match s.layout.header.metadata.get(&per_row.key) {
            None => Ok(Vec::new()),
            Some(text) => {
                let one = value_bytes(spec.dtype, text).map_err(|why| {
                    argument_err!(
                        "per_row: frame {i}'s metadata {:?} = {text:?} is not a {} value ({why})",
                        per_row.key,
                        spec.dtype.name()
                    )
                    .field(&spec.name)
                    .item(i)
                })?;
                let rows = usize::try_from(s.layout.num_rows)
                    .ok()
                    .and_then(|r| r.checked_mul(one.len()))
                    .ok_or_else(|| argument_err!("per_row: frame {i} has too many rows"))?;
                Ok(one.iter().copied().cycle().take(rows).collect())
            }
        })
        .collect()
}

/// One value of `dtype` written from its decimal text, little-endian.
fn value_bytes(dtype: DType, text: &str) -> std::result::Result<Vec<u8>, String> {
    let text = text.trim();
    let int = || text.parse::<i128>().map_err(|e| e.to_string());
    macro_rules! int_as {
        ($t:ty) => {{
            let v = int()?;
            <$t>::try_from(v)
                .map_err(|_| format!("{v} is out of range"))?
                .to_le_bytes()
                .to_vec()
        }};
    }
    Ok(match dtype {
        DType::I8 => int_as!(i8),
        DType::I16 => int_as!(i16),
        DType::I32 => int_as!(i32),
        DType::I64 => int_as!(i64),
        DType::U8 => int_as!(u8),
        DType::U16 => int_as!(u16),
        DType::U32 => int_as!(u32),
        DType::U64 => int_as!(u64),
        DType::F32 => text
            .parse::<f32>()
            .map_err(|e| e.to_string())?
            .to_le_bytes()
            .to_vec(),
        DType::F64 => text
            .parse::<f64>()
            .map_err(|e| e.to_string())?
            .to_le_bytes()
            .to_vec(),
        other => return Err(format!("dtype {} cannot hold a per-row fact", other.name())),
    })
}
