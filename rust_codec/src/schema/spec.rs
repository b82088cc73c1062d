//! A field as the codec holds it: its tier, dtypes, segment shape and pack dim ([`FieldSpec`]),
//! and the field rules, owned here and nowhere else ([`FieldSpec::validate`],
//! [`FieldDecl::resolve`]) but what each tier asks of a shape and a pack dim, which is the
//! tier's own (`tier::rules`, chosen by `Tier::rules`). The whole schema (its keys, defaults and every other rule) is
//! `schema::model`'s, what each stage needs `schema::stages`'; Python's schema models are typed
//! views of what the codec returns, with no default or rule of their own.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Result;
use crate::schema::dtype::DType;
use crate::schema_err;

/// The schema's tiers and their rules are the tier folder's (`tier::rules`).
pub use crate::tier::rules::Tier;

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
    /// The field's name: the batch key and the name of its values tensor in the frame.
    pub name: String,
    /// How the field's values relate to rows.
    pub tier: Tier,
    /// The dtype producers hand in.
    pub dtype: DType,
    /// The dtype stored in the frame, when the schema declares a cast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_dtype: Option<DType>,
    /// The segment (packed), per-token (after the sequence dim) or per-row (scalar) shape; `None`
    /// is a ragged dim.
    pub shape: Vec<Option<u64>>,
    #[serde(default)]
    /// Packed only: the dim segments concatenate on, resolved to count from the front.
    pub pack_dim: usize,
}

impl FieldSpec {
    /// The dtype the frame stores: the wire dtype when the schema declares a cast, else the dtype.
    pub fn stored_dtype(&self) -> DType {
        self.wire_dtype.unwrap_or(self.dtype)
    }

    /// The field rules, owned here and nowhere else: the schema loader asks the codec (through
    /// [`FieldDecl::resolve`]) and a frame's field table is checked by the same function.
    pub fn validate(&self) -> Result<()> {
        let name = &self.name;
        if !is_field_name(name) {
            return Err(schema_err!(
                "field name {name:?} must start with an ASCII letter or '_', continue with ASCII \
                 letters, digits and '_', be at most {MAX_NAME_LEN} bytes long and not start \
                 with '__'"
            ));
        }
        let rules = self.tier.rules();
        let max_rank = rules.max_rank();
        if self.shape.len() > max_rank {
            return Err(schema_err!(
                "{} field {name:?}: shape {} has rank {}; at most {max_rank} is supported",
                self.tier.name(),
                pattern_string(&self.shape),
                self.shape.len()
            ));
        }
        if let Some(d) = self.shape.iter().flatten().find(|&&d| d > MAX_DIM) {
            return Err(schema_err!(
                "field {name:?}: static dim {d} in shape {} exceeds {MAX_DIM}",
                pattern_string(&self.shape)
            ));
        }
        rules.check_shape(self.tier, name, &self.shape, self.pack_dim)?;
        if let Some(wire) = self.wire_dtype {
            if wire != self.dtype && !crate::schema::cast::is_wire_cast(self.dtype, wire) {
                return Err(schema_err!(
                    "field {name:?}: no cast from {} to wire dtype {} (a wire dtype narrows a \
                     floating-point dtype: float32 to bfloat16 or float16, float64 to float32, \
                     bfloat16 or float16; integers are never cast)",
                    self.dtype.name(),
                    wire.name()
                ));
            }
        }
        Ok(())
    }

    /// Whether every row of this field costs the frame at least one byte: per-token and
    /// packed rows have offsets entries, a scalar row its value (unless a static dim is 0).
    pub fn stores_bytes_per_row(&self) -> bool {
        self.tier.rules().stores_bytes_per_row(&self.shape)
    }

    /// Whether the values tensor can carry a real N-d shape (`[Σ items, static...]`) rather
    /// than a flat one.
    pub fn values_are_stackable(&self) -> bool {
        self.pack_dim == 0 && self.shape[1..].iter().all(Option::is_some)
    }
}

/// The most dims a segment or a value may have (the codec's fixed-size shapes).
pub use crate::tensor::MAX_RANK;
/// The largest static dim: shapes travel as int64 in a frame's index tensors.
pub const MAX_DIM: u64 = i64::MAX as u64;
/// The longest field name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// A field name: an ASCII identifier (`[A-Za-z_][A-Za-z0-9_]*`), not starting with `__` (the
/// prefix of the frame's own tensors), at most [`MAX_NAME_LEN`] bytes.
pub fn is_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with("__")
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A field as a schema file declares it, before the codec settles it: `pack_dim` may count from
/// the end (`-1`: the last dim), a wire dtype equal to the dtype means no cast, and `lossy`
/// says whether the schema accepts a narrowing wire cast. [`FieldDecl::resolve`] applies every
/// field rule and returns the [`FieldSpec`] a frame stores.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldDecl {
    /// The field's name, checked by [`FieldSpec::validate`] on resolve.
    pub name: String,
    /// How the field's values relate to rows.
    pub tier: Tier,
    /// The dtype producers hand in.
    pub dtype: DType,
    #[serde(default)]
    /// The dtype to store on the wire; `None` or the dtype itself means no cast.
    pub wire_dtype: Option<DType>,
    /// The shape pattern; `None` is a ragged dim (see [`FieldSpec`]).
    pub shape: Vec<Option<u64>>,
    #[serde(default)]
    /// Packed only: the dim segments concatenate on, negative counting from the last.
    pub pack_dim: i64,
    #[serde(default)]
    /// Whether the schema accepts a wire dtype that narrows the dtype (required when it does).
    pub lossy: bool,
}

impl FieldDecl {
    /// Applies every field rule and settles `pack_dim` and `wire_dtype`: the spec a frame stores,
    /// or a `SchemaError`.
    pub fn resolve(&self) -> Result<FieldSpec> {
        let name = &self.name;
        let rank = self.shape.len() as i64;
        let pack_dim = self.tier.rules().resolve_pack_dim(self.pack_dim, rank);
        let pack_dim = usize::try_from(pack_dim).map_err(|_| {
            schema_err!(
                "{} field {name:?}: pack_dim {} is out of range for rank {rank}",
                self.tier.name(),
                self.pack_dim
            )
        })?;
        let spec = FieldSpec {
            name: name.clone(),
            tier: self.tier,
            dtype: self.dtype,
            wire_dtype: self.wire_dtype.filter(|&w| w != self.dtype),
            shape: self.shape.clone(),
            pack_dim,
        };
        spec.validate()?;
        if let Some(wire) = spec.wire_dtype {
            if crate::schema::cast::is_lossy(spec.dtype, wire) && !self.lossy {
                return Err(schema_err!(
                    "field {name:?}: wire dtype {} narrows {}: declare lossy = true",
                    wire.name(),
                    spec.dtype.name()
                ));
            }
        }
        Ok(spec)
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
    /// The per-frame `[B+1]` I64 row offsets into the per-token fields' tokens.
    pub const SEQ_OFFSETS: &str = "__seq_offsets";
    /// The prefix of the `__pad.K` U8 tensors that fill alignment gaps.
    pub const PAD_PREFIX: &str = "__pad.";
    /// The one U8 tensor covering the data section of a header that lists its tensors in
    /// [`meta::TENSORS`](super::meta::TENSORS) (compact frames, format 3).
    pub const DATA: &str = "__data";
    /// A packed field's `[S, rank]` table of each segment's shape.
    pub fn seg_shapes(field: &str) -> String {
        format!("{field}.seg_shapes")
    }
    /// A packed field's `[S+1]` table of where each segment starts in its values, in elements.
    pub fn seg_offsets(field: &str) -> String {
        format!("{field}.seg_offsets")
    }
    /// A packed field's `[B+1]` table of where each row's run starts in its `row_segments`.
    pub fn row_offsets(field: &str) -> String {
        format!("{field}.row_offsets")
    }
    /// A packed field's `[R]` table of the segment each of a row's items refers to (rows may share
    /// one).
    pub fn row_segments(field: &str) -> String {
        format!("{field}.row_segments")
    }

    /// A packed field's optional `U8 [S, 16]` table of each segment's identity
    /// (`frame::identity`): written after `row_segments`, only when a segment has one.
    pub fn seg_ids(field: &str) -> String {
        format!("{field}.seg_ids")
    }

    /// A packed field's index tables, in the order a frame writes them (`seg_ids`, optional,
    /// comes after them).
    pub fn tables(field: &str) -> [String; 4] {
        [
            seg_shapes(field),
            seg_offsets(field),
            row_offsets(field),
            row_segments(field),
        ]
    }
}

/// Keys of `__metadata__`.
pub mod meta {
    /// The frame format's version key.
    pub const FORMAT: &str = "py_wire.format";
    /// The format version this build writes and the only one it reads: a frame that carries a schema (embedded or
    /// compact) carries no field table; its reader derives the table from the schema. A
    /// compact frame lists its tensors in [`TENSORS`] (see `frame::tensor_list`).
    pub const FORMAT_VERSION: &str = "3";
    /// The number of rows in the batch, as a decimal string.
    pub const NUM_ROWS: &str = "py_wire.num_rows";
    /// The field table of the pre-1.0 forms (a frame without a schema, a format-1 embedded
    /// frame): no frame a reader of format 3 reads carries it; a header that does is refused.
    pub const FIELDS: &str = "py_wire.fields";
    /// The name of the field whose rows define the per-token lengths, beside [`FIELDS`] (the
    /// same frames carry it, when they have one).
    pub const SEQUENCE_FIELD: &str = "py_wire.sequence_field";
    /// The schema as canonical JSON (written by Python).
    pub const SCHEMA: &str = "py_wire.schema";
    /// The schema's fingerprint, `sha256:` + the hex digest of [`SCHEMA`]'s JSON (written by
    /// Python).
    pub const FINGERPRINT: &str = "py_wire.fingerprint";
    /// A compact frame's only schema entry: the fingerprint of a schema the reader holds (see
    /// `frame::compact`). Compact headers carry no schema, field table or sequence field.
    pub const SCHEMA_REF: &str = "py_wire.schema_ref";
    /// Optional payload checksums (see `frame::checksum`).
    pub const CHECKSUM: &str = "py_wire.checksum";
    /// A compact frame's tensor list (format 3), which stands for the safetensors table (see
    /// `frame::tensor_list`); a reader rebuilds the table from it and drops the key.
    pub const TENSORS: &str = "py_wire.tensors";
    /// Every key, by short name, for the Python layer (one declaration of each).
    pub const ALL: [(&str, &str); 8] = [
        ("format", FORMAT),
        ("num_rows", NUM_ROWS),
        ("fields", FIELDS),
        ("sequence_field", SEQUENCE_FIELD),
        ("schema", SCHEMA),
        ("fingerprint", FINGERPRINT),
        ("schema_ref", SCHEMA_REF),
        ("tensors", TENSORS),
    ];
    /// The TransferQueue column a frame was encoded for (written and checked by
    /// `py_wire/interop/transfer_queue/`: `columns.py` writes it, `get.py` checks it).
    pub const TQ_COLUMN: &str = "py_wire.transfer_queue.column";
    /// The identity of the TransferQueue group a frame was stored for (one per group at put,
    /// carried by its text, media and write-back frames and its keys' tags; compared on get).
    pub const TQ_GROUP: &str = "py_wire.transfer_queue.group";
    /// What every reserved key starts with: a frame's `__metadata__` holds no key of this
    /// prefix but [`ALL`]'s and [`CHECKSUM`], and no caller key a bit away from it.
    pub const PREFIX: &str = "py_wire.";

    /// Whether `key` is reserved and not one this build reads: a `py_wire.*` key it does not
    /// know, or a key whose first bytes are one bit away from [`PREFIX`] (a damaged reserved
    /// key: `py_wire.checksum` with one bit flipped must not pass as a caller's key, which
    /// would turn the verification off). A reader refuses such a key; so does `encode`.
    pub fn reserved_unknown(key: &str) -> bool {
        if let Some(rest) = key.strip_prefix(PREFIX) {
            let known = ALL
                .iter()
                .any(|(_, k)| k.strip_prefix(PREFIX) == Some(rest));
            let other = [CHECKSUM, TQ_COLUMN, TQ_GROUP].map(|k| k.strip_prefix(PREFIX));
            return !(known || other.contains(&Some(rest)));
        }
        let bits = |head: &[u8]| -> u32 {
            head.iter()
                .zip(PREFIX.as_bytes())
                .map(|(a, b)| (a ^ b).count_ones())
                .sum()
        };
        key.as_bytes()
            .get(..PREFIX.len())
            .is_some_and(|head| bits(head) == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(json: &str) -> Result<FieldSpec> {
        serde_json::from_str::<FieldDecl>(json).unwrap().resolve()
    }

    #[test]
    fn reserved_keys() {
        for key in [
            meta::CHECKSUM,
            meta::TQ_GROUP,
            meta::FORMAT,
            meta::SCHEMA,
            "verl.prompt_length",
            "py_wir",
        ] {
            assert!(!meta::reserved_unknown(key), "{key}");
        }
        // Unknown names under the prefix, and keys one bit from it (the flipped checksum key).
        for key in [
            "py_wire.checksun",
            "py_wire.",
            "py_wird.checksum",
            "py_wirE.x",
            "qy_wire.",
        ] {
            assert!(meta::reserved_unknown(key), "{key}");
        }
        // Two bits away is a caller's key.
        assert!(!meta::reserved_unknown("py_wirf.checksum"));
    }

    #[test]
    fn field_names() {
        for ok in ["x", "_x", "X9", "_", &"a".repeat(MAX_NAME_LEN)] {
            assert!(is_field_name(ok), "{ok:?}");
        }
        for bad in [
            "",
            "1x",
            "__x",
            "x-y",
            "x.y",
            "abc\n",
            "é",
            &"a".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(!is_field_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn ranks_pack_dims_and_casts() {
        let packed = |shape: &str, pack: i64| {
            decl(&format!(
                r#"{{"name":"f","tier":"packed","dtype":"float32","shape":{shape},"pack_dim":{pack}}}"#
            ))
        };
        assert_eq!(packed("[null,3]", -1).unwrap().pack_dim, 1);
        assert!(packed("[null,3]", -3).is_err());
        assert!(packed("[null,3]", 2).is_err());
        assert!(packed("[null,1,1,1,1,1,1,1]", 0).is_ok());
        assert!(packed("[null,1,1,1,1,1,1,1,1]", 0).is_err());
        assert!(packed("[9223372036854775808]", 0).is_err());
        let scalar = |shape: &str| {
            decl(&format!(
                r#"{{"name":"f","tier":"scalar","dtype":"float32","shape":{shape}}}"#
            ))
        };
        assert!(scalar("[1,1,1,1,1,1,1]").is_ok());
        assert!(scalar("[1,1,1,1,1,1,1,1]").is_err());
        let cast = |from: &str, to: &str, lossy: bool| {
            decl(&format!(
                r#"{{"name":"f","tier":"scalar","dtype":"{from}","wire_dtype":"{to}","shape":[],"lossy":{lossy}}}"#
            ))
        };
        assert_eq!(
            cast("float32", "bfloat16", true).unwrap().wire_dtype,
            Some(DType::BF16)
        );
        assert!(cast("float32", "bfloat16", false).is_err());
        assert!(cast("bfloat16", "float32", true).is_err());
        assert!(cast("int64", "int32", true).is_err());
        assert_eq!(cast("float32", "float32", false).unwrap().wire_dtype, None);
    }
}
