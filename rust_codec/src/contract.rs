//! Cross-field contracts, checked on an encoded frame: placeholder runs in the sequence field
//! against the features its media imply, and media payloads against their geometry.

use serde::Deserialize;

use crate::decode::{read_seq_offsets, DecodedField, FrameLayout, PackedTables};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placeholder::{
    check_alignment, features_from_grid_thw, features_from_image_sizes, PlaceholderRule,
};
use crate::spec::Tier;
use crate::{contract_err, frame_err, schema_err};

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

/// A packed field as contracts read it: its validated tables and where its values lie.
struct Packed<'b> {
    field: &'b DecodedField,
    buf: &'b [u8],
    tables: PackedTables,
}

impl<'b> Packed<'b> {
    fn new(buf: &'b [u8], field: &'b DecodedField, num_rows: u64) -> Result<Packed<'b>> {
        if field.spec.tier != Tier::Packed {
            return Err(schema_err!(
                "contracts read media and geometry from packed fields; {:?} is {}",
                field.spec.name,
                field.spec.tier.name()
            ));
        }
        Ok(Packed {
            field,
            buf,
            tables: PackedTables::read(buf, field, num_rows)?,
        })
    }

    /// Items of row `r` along the pack dim.
    fn items(&self, row: usize) -> Result<u64> {
        self.tables
            .items(row, self.field.spec.pack_dim)
            .ok_or_else(|| {
                frame_err!(
                    "field {:?}, row {row}: item counts overflow",
                    self.field.spec.name
                )
            })
    }

    /// The row's values, its segments concatenated, as i64 (integer geometry fields).
    fn row_values(&self, row: usize, out: &mut Vec<i64>) -> Result<()> {
        let dtype = self.field.values.dtype;
        if !matches!(dtype, DType::I64 | DType::I32) {
            return Err(schema_err!(
                "field {:?} counts features, so it must be int32 or int64, not {}",
                self.field.spec.name,
                dtype.name()
            ));
        }
        let es = dtype.size();
        let values = &self.field.values;
        for &s in self.tables.row(row) {
            let elements = self.tables.elements(s);
            let bytes = self
                .buf
                .get(values.offset..values.offset + values.nbytes)
                .and_then(|v| v.get(elements.start * es..elements.end * es))
                .ok_or_else(|| frame_err!("segment {s} lies outside its values"))?;
            let segment =
                crate::tensor::TensorRef::contiguous(dtype, &[elements.len() as u64], bytes)?;
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
    let tokens = buf
        .get(seq.values.offset..seq.values.offset + seq.values.nbytes)
        .ok_or_else(|| frame_err!("the sequence field's values lie outside the frame"))?
        .chunks_exact(8)
        .map(|c| {
            let mut le = [0u8; 8];
            le.copy_from_slice(c);
            i64::from_le_bytes(le)
        })
        .collect();
    let offsets = read_seq_offsets(buf, layout)?
        .filter(|o| o.len() as u64 == layout.num_rows + 1)
        .ok_or_else(|| frame_err!("the frame has per-token fields but no sequence offsets"))?;
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
            .map(|f| Packed::new(buf, f, layout.num_rows))
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
            .map(|f| Packed::new(buf, f, layout.num_rows))
            .transpose()?;
        if let (Some(m), None) = (&media, &source) {
            let mut with_media = None;
            for r in 0..rows {
                if m.items(r)? > 0 {
                    with_media = Some(r);
                    break;
                }
            }
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
                    let images = s.items(row)?;
                    // Each image is one run of at least one token: more images than the row has
                    // tokens cannot align, and must not size an allocation.
                    let row_tokens = token_offsets[row + 1] - token_offsets[row];
                    if per == 0 || images > row_tokens {
                        return Err(contract_err!(
                            "contract {:?}: row {row}: {} has {images} images of {per} tokens \
                             each but {} has {row_tokens} tokens in that row",
                            c.name,
                            c.media_field,
                            layout
                                .sequence_field
                                .as_deref()
                                .unwrap_or("the sequence field")
                        ));
                    }
                    expected.extend(std::iter::repeat_n(per, images as usize));
                }
                (Some(s), CountRule::GridThw) => {
                    values.clear();
                    s.row_values(row, &mut values)?;
                    let feats = features_from_grid_thw(&values, c.merge_size)
                        .map_err(|e| in_row(e, &c.name, source_name, row))?;
                    if let Some(m) = media.as_ref().filter(|m| m.field.spec.pack_dim == 0) {
                        // Every value is >= 0 and each product fits: features_from_grid_thw
                        // checked both.
                        let patches = values
                            .chunks_exact(3)
                            .map(|g| g.iter().map(|&v| v as u64).product::<u64>())
                            .try_fold(0u64, |acc, n| acc.checked_add(n))
                            .ok_or_else(|| {
                                contract_err!(
                                    "contract {:?}: row {row}: {source_name} implies more than \
                                     2^64 patches",
                                    c.name
                                )
                            })?;
                        let found = m.items(row)?;
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
                        let found = m.items(row)?;
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
