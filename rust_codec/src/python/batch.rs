//! A batch as the Python layer hands it over (one `RawField` per field), read into an encode
//! request whose views borrow an [`Owners`] arena: what `encode`, `encode_parts` and
//! `encoded_nbytes` share.

use pyo3::prelude::*;

use super::codec::Codec;
use super::errors::{BatchError, SchemaError};
use super::extract::{index_values, rows, segment_ids, shared_rows, tensor_ref};
use super::owners::Owners;
use super::staged::{per_token_rows, StageLimits};
use crate::contract::PlaceholderContract;
use crate::encode::windows::{row_windows, Windows};
use crate::encode::{EncodeOptions, EncodeRequest, FieldData, FieldInput, Plan};
use crate::schema::spec::FieldSpec;
use crate::tier::{self, Items};

/// One field as the Python layer hands it over: (name, kind, first, second).
pub type RawField<'py> = (String, String, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

fn field_input<'a>(
    spec: &FieldSpec,
    kind: &str,
    first: &Bound<'_, PyAny>,
    second: Option<&Bound<'_, PyAny>>,
    keep: &'a Owners,
    limits: StageLimits,
) -> PyResult<FieldInput<'a>> {
    let name = spec.name.as_str();
    let here = || format!("field {name:?}");
    let need_second = || {
        second.ok_or_else(|| {
            BatchError::new_err(format!("field {name:?}: {kind} input needs two parts"))
        })
    };
    Ok(match kind {
        "rows" if tier::of(spec.tier).items() == Items::Tokens => {
            per_token_rows(spec, first, keep, limits)?
        }
        "rows" => {
            let (segments, row_offsets) = rows(name, first, keep)?;
            FieldInput::Segments {
                segments,
                row_offsets,
                ids: None,
            }
        }
        "shared" => {
            // A PackedTensor's CSR tables: (row_offsets, row_segments, len()[, segment ids]).
            let parts = tuple_parts(need_second()?, 3);
            let shape_error = || {
                BatchError::new_err(format!(
                    "field {name:?}: shared input needs (row offsets, row segments, rows[, \
                     segment ids])"
                ))
            };
            let [offsets, indices, rows, rest @ ..] = &parts[..] else {
                return Err(shape_error());
            };
            let expected_rows: u64 = rows.extract().map_err(|_| shape_error())?;
            let ids = rest.first();
            let (segments, row_offsets, ids) =
                shared_rows(name, first, offsets, indices, expected_rows, ids, keep)?;
            FieldInput::Segments {
                segments,
                row_offsets,
                ids,
            }
        }
        "jagged" => FieldInput::Jagged {
            values: tensor_ref(first, keep, &here)?,
            offsets: index_values(need_second()?, keep, &|| format!("field {name:?} offsets"))?,
        },
        "padded" => FieldInput::Padded {
            padded: tensor_ref(first, keep, &here)?,
            lengths: index_values(need_second()?, keep, &|| format!("field {name:?} lengths"))?,
        },
        "dense" => FieldInput::Dense(tensor_ref(first, keep, &here)?),
        "windows" => {
            // (starts, lengths, dim): row r is first[r] narrowed along dim - 1 to its window,
            // a view (one segment a row, for either tier).
            let parts = tuple_parts(need_second()?, 3);
            let shape_error = || {
                BatchError::new_err(format!(
                    "field {name:?}: windows input needs (starts, lengths, dim)"
                ))
            };
            let [starts, lengths, dim] = &parts[..] else {
                return Err(shape_error());
            };
            let windows = Windows {
                starts: starts.extract().map_err(|_| shape_error())?,
                lengths: lengths.extract().map_err(|_| shape_error())?,
            };
            let dim: usize = dim.extract().map_err(|_| shape_error())?;
            let t = tensor_ref(first, keep, &here)?;
            let segments = row_windows(&t, &windows, dim)
                .map_err(|e| BatchError::new_err(format!("{}: {}", here(), e.message())))?;
            FieldInput::Segments {
                row_offsets: (0..=segments.len() as u64).collect(),
                segments,
                ids: None,
            }
        }
        "csr" => {
            // (segment shapes, segment offsets, row offsets, row segments[, segment ids])
            let parts = tuple_parts(need_second()?, 4);
            let [shapes, seg_offsets, row_offsets, row_segments, rest @ ..] = &parts[..] else {
                return Err(BatchError::new_err(format!(
                    "field {name:?}: csr input needs four tables[ and segment ids]"
                )));
            };
            let ids = rest.first();
            let at = |what: &'static str| move || format!("field {name:?} {what}");
            let seg_offsets = index_values(seg_offsets, keep, &at("segment offsets"))?;
            let count = seg_offsets.len().saturating_sub(1);
            FieldInput::Csr {
                values: tensor_ref(first, keep, &here)?,
                seg_shapes: index_values(shapes, keep, &at("segment shapes"))?,
                seg_offsets,
                row_offsets: index_values(row_offsets, keep, &at("row offsets"))?,
                row_segments: index_values(row_segments, keep, &at("row segments"))?,
                seg_ids: segment_ids(name, ids, count)?,
            }
        }
        other => {
            return Err(SchemaError::new_err(format!(
                "unknown input kind {other:?}"
            )))
        }
    })
}

/// The items of a tuple of `min` or `min + 1` items (an input's tables, then optional segment
/// ids); anything else gives no items, refused by the caller by name.
fn tuple_parts<'py>(value: &Bound<'py, PyAny>, min: usize) -> Vec<Bound<'py, PyAny>> {
    value
        .cast::<pyo3::types::PyTuple>()
        .ok()
        .filter(|t| t.len() == min || t.len() == min + 1)
        .map(|t| t.iter().collect())
        .unwrap_or_default()
}

/// A batch as the codec sees it; its views borrow the arena `prepare` was given.
pub struct Prepared<'a> {
    pub request: EncodeRequest<'a>,
    pub contracts: Vec<PlaceholderContract>,
    pub options: EncodeOptions,
}

/// Reads `fields` into views whose owners `keep` holds.
pub fn prepare<'a>(
    codec: &Codec,
    fields: Vec<RawField<'_>>,
    threads: Option<usize>,
    parallel_threshold: Option<usize>,
    limits: StageLimits,
    keep: &'a Owners,
) -> PyResult<Prepared<'a>> {
    let mut request = EncodeRequest {
        fields: Vec::with_capacity(fields.len()),
        sequence_field: codec.sequence_field.clone(),
        lengths_field: codec.lengths_field.clone(),
        metadata: codec.metadata.clone(),
        num_rows_hint: None,
        checksum: false,
    };
    for (name, kind, first, second) in &fields {
        let spec = codec.spec(name)?.clone();
        let input = field_input(&spec, kind, first, second.as_ref(), keep, limits)?;
        request.fields.push(FieldData { spec, input });
    }
    let mut options = EncodeOptions::default();
    if let Some(t) = threads {
        options.threads = t.max(1);
    }
    if let Some(t) = parallel_threshold {
        options.parallel_threshold = t;
    }
    Ok(Prepared {
        request,
        contracts: codec.contracts.clone(),
        options,
    })
}

/// Validates and lays out the batch, then checks its contracts: all before any payload copy.
pub fn checked_plan<'a>(p: &Prepared<'a>) -> crate::Result<Plan<'a>> {
    let plan = crate::encode::plan(&p.request)?;
    crate::contract::check_request_contracts(&p.request, &p.contracts)?;
    Ok(plan)
}
