//! `Codec`: a schema compiled once (as pydantic-core compiles a `SchemaValidator`). It owns the
//! parsed and validated field specs and contracts, so an encode looks fields up by name instead
//! of re-parsing JSON on every call.

use std::collections::{BTreeMap, HashMap};

use pyo3::prelude::*;

use super::errors::{to_py, SchemaError};
use crate::contract::PlaceholderContract;
use crate::schema::spec::FieldSpec;

/// A schema compiled for the codec: field specs, contracts, the sequence and lengths fields,
/// and the metadata every frame of this schema carries.
#[pyclass(module = "py_wire", frozen)]
pub struct Codec {
    specs: Vec<FieldSpec>,
    index: HashMap<String, usize>,
    pub contracts: Vec<PlaceholderContract>,
    pub sequence_field: Option<String>,
    pub lengths_field: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl Codec {
    /// The spec of field `name`.
    pub fn spec(&self, name: &str) -> PyResult<&FieldSpec> {
        self.index
            .get(name)
            .map(|&i| &self.specs[i])
            .ok_or_else(|| SchemaError::new_err(format!("the codec has no field {name:?}")))
    }
}

#[pymethods]
impl Codec {
    /// Compiles the field specs (JSON, as `validate_field_spec` returns them) and contracts
    /// (JSON); every rule is checked here, once.
    #[new]
    #[pyo3(signature = (specs, contracts, sequence_field, lengths_field, metadata))]
    fn new(
        specs: Vec<String>,
        contracts: Vec<String>,
        sequence_field: Option<String>,
        lengths_field: Option<String>,
        metadata: BTreeMap<String, String>,
    ) -> PyResult<Codec> {
        let specs = specs
            .iter()
            .map(|json| {
                let spec: FieldSpec = serde_json::from_str(json)
                    .map_err(|e| SchemaError::new_err(format!("field spec {json}: {e}")))?;
                spec.validate().map_err(to_py)?;
                Ok(spec)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let mut index = HashMap::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            if index.insert(spec.name.clone(), i).is_some() {
                return Err(SchemaError::new_err(format!(
                    "field {:?} appears twice",
                    spec.name
                )));
            }
        }
        let contracts = parse_contracts(&contracts)?;
        for c in &contracts {
            c.validate_fields(&specs, sequence_field.as_deref())
                .map_err(to_py)?;
        }
        Ok(Codec {
            specs,
            index,
            contracts,
            sequence_field,
            lengths_field,
            metadata,
        })
    }

    /// Field names, in schema order.
    #[getter]
    fn field_names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// The bytes this codec keeps (its block, specs, index, contracts and metadata), as the
    /// schema memory budget charges a typed view that caches it (`frame::compact`).
    #[getter]
    fn nbytes(&self) -> usize {
        use crate::frame::compact::{specs_bytes, string_bytes};
        let index: usize = self
            .index
            .keys()
            .map(|k| string_bytes(k.capacity()) + std::mem::size_of::<(String, usize)>() + 1)
            .sum();
        let contracts =
            string_bytes(self.contracts.capacity() * std::mem::size_of::<PlaceholderContract>())
                + self
                    .contracts
                    .iter()
                    .map(|c| {
                        string_bytes(c.name.capacity()) + string_bytes(c.media_field.capacity())
                    })
                    .sum::<usize>();
        let metadata: usize = self
            .metadata
            .iter()
            .map(|(k, v)| {
                string_bytes(k.capacity())
                    + string_bytes(v.capacity())
                    + std::mem::size_of::<(String, String)>()
            })
            .sum();
        std::mem::size_of::<Self>() + specs_bytes(&self.specs) + index + contracts + metadata
    }

    fn __repr__(&self) -> String {
        format!(
            "Codec(fields={}, contracts={})",
            self.specs.len(),
            self.contracts.len()
        )
    }
}

/// Parses and validates placeholder contracts (JSON).
pub fn parse_contracts(json: &[String]) -> PyResult<Vec<PlaceholderContract>> {
    json.iter()
        .map(|c| {
            let contract: PlaceholderContract = serde_json::from_str(c)
                .map_err(|e| SchemaError::new_err(format!("contract {c}: {e}")))?;
            contract.validate().map_err(to_py)?;
            Ok(contract)
        })
        .collect()
}
