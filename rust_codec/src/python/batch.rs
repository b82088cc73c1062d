//! A batch as the Python layer hands it over (one `RawField` per field), read into an encode
//! request whose views borrow an [`Owners`] arena: what `encode`, `encode_parts` and
//! `encoded_nbytes` share.

use pyo3::prelude::*;

use super::codec::Codec;
use super::errors::{BatchError, SchemaError};
use super::extract::{index_values, rows, shared_rows, tensor_ref};
use super::owners::Owners;
use super::staged::{per_token_rows, StageLimits};
use crate::contract::PlaceholderContract;
use crate::encode::{EncodeOptions, EncodeRequest, FieldData, FieldInput, Plan};
use crate::schema::spec::FieldSpec;

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
        "rows" if spec.tier == crate::Tier::PerToken => per_token_rows(spec, first, keep, limits)?,
        "rows" => {
            let (segments, row_offsets) = rows(name, first, keep)?;
            FieldInput::Segments {
                segments,
                row_offsets,
            }
        }
        "shared" => {
            // A PackedTensor's CSR tables: (row_offsets, row_segments, len()).
            let (offsets, indices, expected_rows): (Bound<'_, PyAny>, Bound<'_, PyAny>, u64) =
                need_second()?.extract().map_err(|_| {
                    BatchError::new_err(format!(
                        "field {name:?}: shared input needs (row offsets, row segments, rows)"
                    ))
                })?;
            let (segments, row_offsets) =
                shared_rows(name, first, &offsets, &indices, expected_rows, keep)?;
            FieldInput::Segments {
                segments,
                row_offsets,
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
        "csr" => {
            let tables = need_second()?;
            let (shapes, seg_offsets, row_offsets, row_segments): (
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
            ) = tables.extract()?;
            let at = |what: &'static str| move || format!("field {name:?} {what}");
            FieldInput::Csr {
                values: tensor_ref(first, keep, &here)?,
                seg_shapes: index_values(&shapes, keep, &at("segment shapes"))?,
                seg_offsets: index_values(&seg_offsets, keep, &at("segment offsets"))?,
                row_offsets: index_values(&row_offsets, keep, &at("row offsets"))?,
                row_segments: index_values(&row_segments, keep, &at("row segments"))?,
            }
        }
        other => {
            return Err(SchemaError::new_err(format!(
                "unknown input kind {other:?}"
            )))
        }
    })
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
