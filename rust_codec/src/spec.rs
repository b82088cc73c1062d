//! What the codec knows of a schema: per field its tier, dtypes, segment shape and pack dim.
//! Python owns the schema's meaning; it hands the codec these layout facts only.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dtype::DType;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Per row 0..k segments of any rank; rows may share segments.
    Packed,
    /// Per row one tensor whose first dim is the row's sequence length.
    PerToken,
    /// Per row one value of static shape.
    Scalar,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Packed => "packed",
            Tier::PerToken => "per_token",
            Tier::Scalar => "scalar",
        }
    }
}

impl Serialize for DType {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for DType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        DType::from_name(&name).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

/// The layout facts of one field. `shape` holds `Some(n)` for a static dim and `None` for a
/// ragged one: for packed fields the whole segment shape, for per-token fields the dims after
/// the sequence dim, for scalars the static dims of one row's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    pub name: String,
    pub tier: Tier,
    /// The dtype producers hand in.
    pub dtype: DType,
    /// The dtype stored in the frame, when the schema declares a cast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_dtype: Option<DType>,
    pub shape: Vec<Option<u64>>,
    #[serde(default)]
    pub pack_dim: usize,
}

impl FieldSpec {
    pub fn stored_dtype(&self) -> DType {
        self.wire_dtype.unwrap_or(self.dtype)
    }

    pub fn validate(&self) -> Result<()> {
        let name = &self.name;
        let valid_name = !name.is_empty()
            && !name.starts_with("__")
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(Error::Schema(format!(
                "field name {name:?} must be ASCII letters, digits and '_' and must not start with '__'"
            )));
        }
        match self.tier {
            Tier::Packed => {
                if self.shape.is_empty() {
                    return Err(Error::Schema(format!(
                        "packed field {name:?} needs a segment shape of rank >= 1"
                    )));
                }
                if self.pack_dim >= self.shape.len() {
                    return Err(Error::Schema(format!(
                        "packed field {name:?}: pack_dim {} is out of range for rank {}",
                        self.pack_dim,
                        self.shape.len()
                    )));
                }
            }
            Tier::PerToken | Tier::Scalar => {
                if self.shape.iter().any(Option::is_none) {
                    return Err(Error::Schema(format!(
                        "{} field {name:?} cannot have ragged dims (\"*\"); make it packed",
                        self.tier.name()
                    )));
                }
                if self.pack_dim != 0 {
                    return Err(Error::Schema(format!(
                        "pack_dim applies to packed fields only (field {name:?})"
                    )));
                }
            }
        }
        if let Some(wire) = self.wire_dtype {
            if !crate::cast::is_supported(self.dtype, wire) {
                return Err(Error::Schema(format!(
                    "field {name:?}: no cast from {} to wire dtype {}",
                    self.dtype.name(),
                    wire.name()
                )));
            }
        }
        Ok(())
    }

    /// Whether the values tensor can carry a real N-d shape (`[Σ items, static...]`) rather
    /// than a flat one.
    pub fn values_are_stackable(&self) -> bool {
        self.pack_dim == 0 && self.shape[1..].iter().all(Option::is_some)
    }
}

/// Renders a shape pattern like the schema does: `["*", 1176]`.
pub fn pattern_string(shape: &[Option<u64>]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| d.map_or_else(|| "\"*\"".to_string(), |n| n.to_string()))
        .collect();
    format!("[{}]", dims.join(", "))
}

/// Names of the tensors a field stores in a frame.
pub mod names {
    pub const SEQ_OFFSETS: &str = "__seq_offsets";
    pub const PAD_PREFIX: &str = "__pad.";
    pub fn seg_shapes(field: &str) -> String {
        format!("{field}.seg_shapes")
    }
    pub fn seg_offsets(field: &str) -> String {
        format!("{field}.seg_offsets")
    }
    pub fn row_offsets(field: &str) -> String {
        format!("{field}.row_offsets")
    }
    pub fn row_segments(field: &str) -> String {
        format!("{field}.row_segments")
    }
}

/// Keys of `__metadata__`.
pub mod meta {
    pub const FORMAT: &str = "py_wire.format";
    pub const FORMAT_VERSION: &str = "1";
    pub const NUM_ROWS: &str = "py_wire.num_rows";
    pub const FIELDS: &str = "py_wire.fields";
    pub const SEQUENCE_FIELD: &str = "py_wire.sequence_field";
}
