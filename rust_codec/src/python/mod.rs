//! The PyO3 layer: convert Python objects to views, call the core with the GIL released, map
//! errors. Nothing here decides meaning.

mod errors;
mod extract;
mod frame;

use std::collections::BTreeMap;

use pyo3::prelude::*;

use crate::encode::{EncodeOptions, EncodeRequest, FieldData, FieldInput};
use crate::spec::FieldSpec;
use errors::{to_py, BatchError, SchemaError};
use extract::{index_values, rows, tensor_ref, KeepAlive};
use frame::Frame;

/// One field as the Python layer hands it over: (spec JSON, kind, first, second).
type RawField<'py> = (String, String, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

fn field_input(
    spec: &FieldSpec,
    kind: &str,
    first: &Bound<'_, PyAny>,
    second: Option<&Bound<'_, PyAny>>,
    keep: &mut KeepAlive,
) -> PyResult<FieldInput<'static>> {
    let name = spec.name.as_str();
    let here = || format!("field {name:?}");
    let need_second = || {
        second.ok_or_else(|| {
            BatchError::new_err(format!("field {name:?}: {kind} input needs two parts"))
        })
    };
    Ok(match kind {
        "rows" => {
            let (segments, row_offsets) = rows(name, first, keep)?;
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
        other => {
            return Err(SchemaError::new_err(format!(
                "unknown input kind {other:?}"
            )))
        }
    })
}

/// Encodes a batch. `fields` come from the Python layer, which matched them to the schema.
#[pyfunction]
#[pyo3(signature = (fields, sequence_field, metadata, num_rows_hint=None, threads=None, parallel_threshold=None))]
fn encode(
    py: Python<'_>,
    fields: Vec<RawField<'_>>,
    sequence_field: Option<String>,
    metadata: BTreeMap<String, String>,
    num_rows_hint: Option<u64>,
    threads: Option<usize>,
    parallel_threshold: Option<usize>,
) -> PyResult<Frame> {
    let mut keep = KeepAlive::default();
    let mut request = EncodeRequest {
        fields: Vec::with_capacity(fields.len()),
        sequence_field,
        metadata,
        num_rows_hint,
    };
    for (spec_json, kind, first, second) in &fields {
        let spec: FieldSpec = serde_json::from_str(spec_json)
            .map_err(|e| SchemaError::new_err(format!("field spec {spec_json}: {e}")))?;
        let input = field_input(&spec, kind, first, second.as_ref(), &mut keep)?;
        request.fields.push(FieldData { spec, input });
    }
    let mut options = EncodeOptions::default();
    if let Some(t) = threads {
        options.threads = t.max(1);
    }
    if let Some(t) = parallel_threshold {
        options.parallel_threshold = t;
    }
    let (buf, layout) = py
        .detach(|| {
            let buf = crate::encode::encode(&request, options)?;
            let layout = crate::decode::parse_frame(buf.as_slice())?;
            Ok((buf, layout))
        })
        .map_err(to_py)?;
    drop(keep);
    Ok(Frame::from_owned(buf, layout))
}

#[pymodule]
mod _native {
    #[pymodule_export]
    use super::encode;
    #[pymodule_export]
    use super::errors::{BatchError, ContractError, FrameError, SchemaError, WireError};
    #[pymodule_export]
    use super::extract::register_torch;
    #[pymodule_export]
    use super::frame::Frame;
}
