//! Cross-field contracts, checked on an encoded frame: placeholder runs in the sequence field
//! against the features its media imply, and media payloads against their geometry.

use serde::Deserialize;

use crate::decode::{read_i64s, DecodedField, FrameLayout};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placeholder::{
    check_alignment, features_from_grid_thw, features_from_image_sizes, PlaceholderRule,
};
use crate::spec::{FieldSpec, Tier};
use crate::{contract_err, schema_err};

/// How a contract counts each image's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountRule {
    /// `t*h*w / merge_size²` per image from a `[n, 3]` grid field (Qwen VL).
    GridThw,
    /// `tokens_per_image` per item of the media field along its pack dim (Gemma3).
    Fixed,
    /// `int((H // patch) * ratio) * int((W // patch) * ratio)` from a `[n, 2]` sizes field
    /// (Nemotron).
    ImageSize,
    /// Per image, the token count stored in a companion `[n]` integer field.
    Field,
}

/// A placeholder contract as the schema declares it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlaceholderContract {
    #[serde(default)]
    pub kind: Option<String>,
    pub name: String,
    pub media_field: String,
    pub token_id: i64,
    pub begin_token_id: Option<i64>,
    pub end_token_id: Option<i64>,
    pub count: CountRule,
    pub grid_field: Option<String>,
    pub merge_size: u64,
    pub tokens_per_image: Option<u64>,
    pub sizes_field: Option<String>,
    #[serde(default)]
    pub count_field: Option<String>,
    pub patch_size: u64,
    pub downsample_ratio: f64,
}

impl PlaceholderContract {
    /// The contract's own rules (no field needed): the kind, the counting parameters and the
    /// field its count rule reads. Checked at schema load and again before a check runs.
    pub fn validate(&self) -> Result<()> {
        let name = &self.name;
        if let Some(kind) = self.kind.as_deref().filter(|&k| k != "placeholder") {
            return Err(schema_err!(
                "contract {name:?}: kind {kind:?} is unknown; the only kind is \"placeholder\""
            ));
        }
        if name.is_empty() {
            return Err(schema_err!("a contract needs a non-empty name"));
        }
        for (what, id) in [
            ("begin_token_id", self.begin_token_id),
            ("end_token_id", self.end_token_id),
        ] {
            if id == Some(self.token_id) {
                return Err(schema_err!(
                    "contract {name:?}: {what} equals token_id {}; the wrapping tokens must \
                     differ from the placeholder",
                    self.token_id
                ));
            }
        }
        if self.merge_size == 0 || self.merge_size.checked_mul(self.merge_size).is_none() {
            return Err(schema_err!(
                "contract {name:?}: merge_size {} must be at least 1 and its square must fit in \
                 64 bits",
                self.merge_size
            ));
        }
        if self.patch_size == 0 {
            return Err(schema_err!(
                "contract {name:?}: patch_size 0 must be at least 1"
            ));
        }
        if !(self.downsample_ratio.is_finite() && self.downsample_ratio > 0.0) {
            return Err(schema_err!(
                "contract {name:?}: downsample_ratio {} must be a finite number above 0",
                self.downsample_ratio
            ));
        }
        let (needs, present) = match self.count {
            CountRule::GridThw => ("grid_field", self.grid_field.is_some()),
            CountRule::Fixed => ("tokens_per_image", self.tokens_per_image.is_some()),
            CountRule::ImageSize => ("sizes_field", self.sizes_field.is_some()),
            CountRule::Field => ("count_field", self.count_field.is_some()),
        };
        if !present {
            return Err(schema_err!(
                "contract {name:?}: count = {:?} needs {needs}",
                self.count.name()
            ));
        }
        Ok(())
    }

    /// [`validate`](Self::validate), then the fields the contract names against the schema's
    /// field specs: the media field is packed; the grid, sizes or count field is a packed
    /// int32/int64 field of shape `["*", 3]`, `["*", 2]` or `["*"]`; the sequence field is a
    /// per-token int64 field of shape `[]`.
    pub fn validate_fields(
        &self,
        fields: &[FieldSpec],
        sequence_field: Option<&str>,
    ) -> Result<()> {
        self.validate()?;
        let name = &self.name;
        let find = |field: &str| fields.iter().find(|f| f.name == field);
        let seq = sequence_field.ok_or_else(|| {
            schema_err!("contract {name:?}: placeholder contracts need a sequence_field")
        })?;
        match find(seq) {
            Some(f)
                if f.tier == Tier::PerToken
                    && f.stored_dtype() == DType::I64
                    && f.shape.is_empty() => {}
            _ => {
                return Err(schema_err!(
                    "contract {name:?}: the sequence field {seq:?} must be a per_token int64 field \
                     of shape []"
                ))
            }
        }
        let media = find(&self.media_field).ok_or_else(|| {
            schema_err!(
                "contract {name:?} names unknown field {:?}",
                self.media_field
            )
        })?;
        if media.tier != Tier::Packed {
            return Err(schema_err!(
                "contract {name:?}: media_field {:?} must be a packed field, not {}",
                self.media_field,
                media.tier.name()
            ));
        }
        let (what, source, width) = match self.count {
            CountRule::GridThw => ("grid_field", self.grid_field.as_deref(), Some(3)),
            CountRule::ImageSize => ("sizes_field", self.sizes_field.as_deref(), Some(2)),
            CountRule::Field => ("count_field", self.count_field.as_deref(), None),
            CountRule::Fixed => return Ok(()),
        };
        let source = source.unwrap_or_default();
        let f = find(source)
            .ok_or_else(|| schema_err!("contract {name:?} names unknown field {source:?}"))?;
        let expected: Vec<Option<u64>> = std::iter::once(None).chain(width.map(Some)).collect();
        let int = matches!(f.stored_dtype(), DType::I64 | DType::I32);
        if f.tier != Tier::Packed || !int || f.shape != expected || f.pack_dim != 0 {
            return Err(schema_err!(
                "contract {name:?}: {what} {source:?} must be a packed int32 or int64 field of \
                 shape {} packed on dim 0; it is a {} {} field of shape {} packed on dim {}",
                crate::spec::pattern_string(&expected),
                f.tier.name(),
                f.stored_dtype().name(),
                crate::spec::pattern_string(&f.shape),
                f.pack_dim
            ));
        }
        Ok(())
    }
}

impl CountRule {
    pub fn name(self) -> &'static str {
        match self {
            CountRule::GridThw => "grid_thw",
            CountRule::Fixed => "fixed",
            CountRule::ImageSize => "image_size",
            CountRule::Field => "field",
        }
    }
}

/// The CSR tables of a packed field, read once.
struct Packed<'b> {
    field: &'b DecodedField,
    buf: &'b [u8],
    rank: usize,
    seg_shapes: Vec<i64>,
    seg_offsets: Vec<i64>,
    row_offsets: Vec<i64>,
    row_segments: Vec<i64>,
}

impl<'b> Packed<'b> {
    fn new(buf: &'b [u8], field: &'b DecodedField) -> Result<Packed<'b>> {
        let p = field
            .packed
            .as_ref()
            .ok_or_else(|| schema_err!("field {:?} is not packed", field.spec.name))?;
        Ok(Packed {
            field,
            buf,
            rank: field.spec.shape.len(),
            seg_shapes: read_i64s(buf, &p.seg_shapes).collect(),
            seg_offsets: read_i64s(buf, &p.seg_offsets).collect(),
            row_offsets: read_i64s(buf, &p.row_offsets).collect(),
            row_segments: read_i64s(buf, &p.row_segments).collect(),
        })
    }

    /// Physical segment ids of row `r` (validated by `parse_frame`).
    fn segments(&self, row: usize) -> &[i64] {
        &self.row_segments[self.row_offsets[row] as usize..self.row_offsets[row + 1] as usize]
    }

    fn dim(&self, seg: i64, d: usize) -> u64 {
        self.seg_shapes[seg as usize * self.rank + d] as u64
    }

    /// Items of row `r` along the pack dim.
    fn items(&self, row: usize) -> u64 {
        let d = self.field.spec.pack_dim;
        self.segments(row).iter().map(|&s| self.dim(s, d)).sum()
    }

    /// The row's values, its segments concatenated, as i64 (integer geometry fields).
    fn row_values(&self, row: usize, out: &mut Vec<i64>) -> Result<()> {
        let dtype = self.field.values.dtype;
        let es = dtype.size();
        for &s in self.segments(row) {
            let (a, b) = (
                self.seg_offsets[s as usize] as usize,
                self.seg_offsets[s as usize + 1] as usize,
            );
            let start = self.field.values.offset + a * es;
            let bytes = &self.buf[start..start + (b - a) * es];
            if !matches!(dtype, DType::I64 | DType::I32) {
                return Err(schema_err!(
                    "field {:?} counts features, so it must be int32 or int64, not {}",
                    self.field.spec.name,
                    dtype.name()
                ));
            }
            let segment = crate::tensor::TensorRef::contiguous(dtype, &[(b - a) as u64], bytes)?;
            out.extend(segment.to_i64_vec()?);
        }
        Ok(())
    }
}

/// The sequence field's tokens and row offsets.
fn tokens(buf: &[u8], layout: &FrameLayout) -> Result<(Vec<i64>, Vec<u64>)> {
    let seq_name = layout
        .sequence_field
        .as_deref()
        .ok_or_else(|| schema_err!("placeholder contracts need a sequence field"))?;
    let seq = layout
        .field(seq_name)
        .ok_or_else(|| contract_err!("the sequence field {seq_name:?} is missing"))?;
    if seq.spec.tier != Tier::PerToken
        || seq.values.dtype != DType::I64
        || seq.values.shape.len() != 1
    {
        return Err(schema_err!(
            "placeholder contracts need an int64 per-token sequence field of shape []; {seq_name:?} is {} {}",
            seq.values.dtype.name(),
            seq.spec.tier.name()
        ));
    }
    let tokens = read_i64s(buf, &seq.values).collect();
    let offsets = layout
        .seq_offsets
        .as_ref()
        .map(|l| read_i64s(buf, l).map(|v| v as u64).collect())
        .unwrap_or_default();
    Ok((tokens, offsets))
}

/// Checks every contract against a parsed frame. Fields a contract names but the frame lacks
/// mean "no media"; geometry missing beside present media is an error (never image-blind).
pub fn check_contracts(
    buf: &[u8],
    layout: &FrameLayout,
    contracts: &[PlaceholderContract],
) -> Result<()> {
    if contracts.is_empty() {
        return Ok(());
    }
    let (tokens, token_offsets) = tokens(buf, layout)?;
    let rows = layout.num_rows as usize;
    for c in contracts {
        let media = layout
            .field(&c.media_field)
            .map(|f| Packed::new(buf, f))
            .transpose()?;
        let source_name = match c.count {
            CountRule::GridThw => c.grid_field.as_deref(),
            CountRule::ImageSize => c.sizes_field.as_deref(),
            CountRule::Field => c.count_field.as_deref(),
            CountRule::Fixed => Some(c.media_field.as_str()),
        }
        .ok_or_else(|| schema_err!("contract {:?} names no field to count features", c.name))?;
        let source = layout
            .field(source_name)
            .map(|f| Packed::new(buf, f))
            .transpose()?;
        if let (Some(m), None) = (&media, &source) {
            let with_media = (0..rows).find(|&r| m.items(r) > 0);
            if let Some(row) = with_media {
                return Err(contract_err!(
                    "contract {:?}: row {row} has {} but the frame lacks {source_name:?}, \
                     which says how many features each image makes (geometry lost)",
                    c.name,
                    c.media_field
                ));
            }
        }
        let mut expected = Vec::new();
        let mut expected_rows = Vec::with_capacity(rows + 1);
        expected_rows.push(0u64);
        let mut values = Vec::new();
        for row in 0..rows {
            match (&source, c.count) {
                (None, _) => {}
                (Some(s), CountRule::Fixed) => {
                    let per = c.tokens_per_image.unwrap_or(0);
                    expected.extend(std::iter::repeat_n(per, s.items(row) as usize));
                }
                (Some(s), CountRule::GridThw) => {
                    values.clear();
                    s.row_values(row, &mut values)?;
                    let feats = features_from_grid_thw(&values, c.merge_size)
                        .map_err(|e| in_row(e, &c.name, source_name, row))?;
                    if let Some(m) = media.as_ref().filter(|m| m.field.spec.pack_dim == 0) {
                        let patches: u64 = values
                            .chunks_exact(3)
                            .map(|g| g.iter().map(|&v| v.max(0) as u64).product::<u64>())
                            .sum();
                        let found = m.items(row);
                        if patches != found {
                            return Err(contract_err!(
                                "contract {:?}: row {row}: {source_name} implies {patches} patches \
                                 but {} has {found}",
                                c.name,
                                c.media_field
                            ));
                        }
                    }
                    expected.extend(feats);
                }
                (Some(s), rule @ (CountRule::ImageSize | CountRule::Field)) => {
                    values.clear();
                    s.row_values(row, &mut values)?;
                    let feats = if rule == CountRule::Field {
                        counts_from_field(&values, &c.name, source_name, row)?
                    } else {
                        features_from_image_sizes(&values, c.patch_size, c.downsample_ratio)
                            .map_err(|e| in_row(e, &c.name, source_name, row))?
                    };
                    if let Some(m) = &media {
                        let found = m.items(row);
                        if feats.len() as u64 != found {
                            return Err(contract_err!(
                                "contract {:?}: row {row}: {source_name} lists {} images but {} \
                                 has {found}",
                                c.name,
                                feats.len(),
                                c.media_field
                            ));
                        }
                    }
                    expected.extend(feats);
                }
            }
            expected_rows.push(expected.len() as u64);
        }
        let rule = PlaceholderRule {
            contract: &c.name,
            sequence_field: layout.sequence_field.as_deref().unwrap_or(""),
            media_field: &c.media_field,
            token_id: c.token_id,
            begin_token_id: c.begin_token_id,
            end_token_id: c.end_token_id,
        };
        check_alignment(&rule, &tokens, &token_offsets, &expected, &expected_rows)?;
    }
    Ok(())
}

fn counts_from_field(values: &[i64], contract: &str, field: &str, row: usize) -> Result<Vec<u64>> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u64::try_from(v).map_err(|_| {
                contract_err!(
                    "contract {contract:?}: {field}, row {row}, image {i}: count {v} is negative"
                )
            })
        })
        .collect()
}

fn in_row(e: Error, contract: &str, field: &str, row: usize) -> Error {
    match e {
        Error::Batch(m) => contract_err!("contract {contract:?}: {field}, row {row}: {m}"),
        other => other,
    }
}

/// Checks contracts on a batch before it is encoded, so a broken batch costs no payload copy.
/// Only what the contracts read is materialised: the sequence field's tokens, the geometry
/// fields, and the media fields' shapes (as zero-byte views that keep their pack-dim sizes).
pub fn check_request_contracts(
    request: &crate::encode::EncodeRequest<'_>,
    contracts: &[PlaceholderContract],
) -> Result<()> {
    use crate::encode::{encode, EncodeOptions, EncodeRequest, FieldData, FieldInput};
    use crate::tensor::TensorRef;

    if contracts.is_empty() {
        return Ok(());
    }
    let mut needed: Vec<&str> = request.sequence_field.iter().map(String::as_str).collect();
    for c in contracts {
        needed.extend(c.grid_field.as_deref());
        needed.extend(c.sizes_field.as_deref());
        needed.extend(c.count_field.as_deref());
    }
    let media: Vec<&str> = contracts.iter().map(|c| c.media_field.as_str()).collect();
    let mut fields = Vec::new();
    for field in &request.fields {
        let name = field.spec.name.as_str();
        if needed.contains(&name) {
            fields.push(field.clone());
        } else if media.contains(&name) {
            fields.push(shapes_only(field)?);
        }
    }
    let probe = EncodeRequest {
        fields,
        sequence_field: request.sequence_field.clone(),
        lengths_field: None,
        metadata: Default::default(),
        num_rows_hint: None,
    };
    let options = EncodeOptions {
        threads: 1,
        ..Default::default()
    };
    let buf = encode(&probe, options)?;
    let layout = crate::decode::parse_frame(buf.as_slice())?;
    return check_contracts(buf.as_slice(), &layout, contracts);

    /// The field with every segment replaced by a zero-byte view of the same pack-dim size.
    fn shapes_only<'a>(field: &FieldData<'a>) -> Result<FieldData<'a>> {
        let mut spec = field.spec.clone();
        let pack = spec.pack_dim;
        let Some(zero_dim) = (0..spec.shape.len()).find(|&d| d != pack) else {
            // Rank-1 media: nothing to strip, and nothing large to copy either.
            return Ok(field.clone());
        };
        spec.shape[zero_dim] = None;
        let strip = |t: &TensorRef<'a>| -> Result<TensorRef<'a>> {
            let mut shape = t.shape;
            if zero_dim < shape.len() {
                shape[zero_dim] = 0;
            }
            TensorRef::contiguous(t.dtype, &shape, &[])
        };
        let input = match &field.input {
            FieldInput::Segments {
                segments,
                row_offsets,
            } => FieldInput::Segments {
                segments: segments.iter().map(strip).collect::<Result<_>>()?,
                row_offsets: row_offsets.clone(),
            },
            FieldInput::Csr {
                values,
                seg_shapes,
                seg_offsets,
                row_offsets,
                row_segments,
            } => {
                let rank = field.spec.shape.len().max(1);
                let mut shapes = seg_shapes.clone();
                shapes.chunks_exact_mut(rank).for_each(|s| s[zero_dim] = 0);
                FieldInput::Csr {
                    values: TensorRef::contiguous(values.dtype, &[0], &[])?,
                    seg_offsets: vec![0; seg_offsets.len()],
                    seg_shapes: shapes,
                    row_offsets: row_offsets.clone(),
                    row_segments: row_segments.clone(),
                }
            }
            other => other.clone(),
        };
        Ok(FieldData { spec, input })
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    fn contract(extra: &str) -> PlaceholderContract {
        serde_json::from_str(&format!(
            r#"{{"name":"c","media_field":"pv","token_id":7,"begin_token_id":null,
                "end_token_id":null,"count":"grid_thw","grid_field":"grid","merge_size":2,
                "tokens_per_image":null,"sizes_field":null,"patch_size":16,
                "downsample_ratio":0.5{extra}}}"#
        ))
        .unwrap()
    }

    fn spec(json: &str) -> FieldSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn parameters_and_fields() {
        assert!(contract("").validate().is_ok());
        let mut c = contract("");
        c.merge_size = 0;
        assert!(c.validate().is_err());
        c.merge_size = 1 << 32;
        assert!(c.validate().is_err());
        let mut c = contract("");
        c.downsample_ratio = f64::NAN;
        assert!(c.validate().is_err());
        let mut c = contract("");
        c.patch_size = 0;
        assert!(c.validate().is_err());
        let mut c = contract("");
        c.begin_token_id = Some(7);
        assert!(c.validate().is_err());
        let mut c = contract("");
        c.grid_field = None;
        assert!(c.validate().is_err());

        let ids = spec(r#"{"name":"ids","tier":"per_token","dtype":"int64","shape":[]}"#);
        let pv = spec(r#"{"name":"pv","tier":"packed","dtype":"float32","shape":[null,4]}"#);
        let grid = spec(r#"{"name":"grid","tier":"packed","dtype":"int64","shape":[null,3]}"#);
        let fgrid = spec(r#"{"name":"grid","tier":"packed","dtype":"float32","shape":[null,3]}"#);
        let c = contract("");
        assert!(c
            .validate_fields(&[ids.clone(), pv.clone(), grid.clone()], Some("ids"))
            .is_ok());
        assert!(c
            .validate_fields(&[ids.clone(), pv.clone(), grid.clone()], None)
            .is_err());
        assert!(c
            .validate_fields(&[ids.clone(), pv.clone(), fgrid], Some("ids"))
            .is_err());
        assert!(c.validate_fields(&[ids.clone(), pv], Some("ids")).is_err());
        let mut c = contract("");
        c.media_field = "ids".into();
        assert!(c.validate_fields(&[ids, grid], Some("ids")).is_err());
    }
}
