//! Cross-field contracts: placeholder runs in the sequence field against the features its
//! media imply, and media payloads against their geometry. One check reads both an encode
//! request (before any payload is copied) and a parsed frame (one received from elsewhere),
//! through `ContractInput`.

#![forbid(unsafe_code)]

pub mod placeholder;
pub mod spec;

pub use spec::{CountRule, PlaceholderContract};

use crate::contract::placeholder::{
    check_alignment, features_from_grid_thw, features_from_image_sizes, PlaceholderRule,
};
use crate::encode::{EncodeRequest, FieldInput};
use crate::error::{Code, Error, Result};
use crate::frame::layout::{read_seq_offsets, DecodedField, FrameLayout, PackedTables};
use crate::schema::dtype::DType;
use crate::schema::spec::FieldSpec;
use crate::tensor::TensorRef;
use crate::tier::rules::Items;
use crate::{batch_err, contract_err, frame_err, internal_err, schema_err};

/// What a contract reads of a packed field, row by row.
trait MediaRows {
    fn field(&self) -> &FieldSpec;
    /// Items of `row` along the pack dim.
    fn items(&self, row: usize) -> Result<u64>;
    /// The row's values, its segments concatenated, as i64 (integer geometry fields).
    fn row_values(&self, row: usize, out: &mut Vec<i64>) -> Result<()>;
}

/// What contracts read of a batch: its tokens and its packed fields.
struct ContractInput<'i> {
    num_rows: usize,
    sequence_field: &'i str,
    tokens: Vec<i64>,
    token_offsets: Vec<u64>,
    packed: Vec<Box<dyn MediaRows + 'i>>,
}

impl ContractInput<'_> {
    fn packed(&self, name: &str) -> Option<&dyn MediaRows> {
        self.packed
            .iter()
            .find(|m| m.field().name == name)
            .map(|m| m.as_ref())
    }
}

fn not_int_geometry(spec: &FieldSpec, dtype: DType) -> Error {
    schema_err!(
        "field {:?} counts features, so it must be int32 or int64, not {}",
        spec.name,
        dtype.name()
    )
}

fn check_token_dtype(spec: &FieldSpec, stored: DType) -> Result<()> {
    if spec.tier.items() != Items::Tokens || stored != DType::I64 || !spec.shape.is_empty() {
        return Err(schema_err!(
            "placeholder contracts need an int64 per-token sequence field of shape []; {:?} is \
             {} {} of shape {}",
            spec.name,
            stored.name(),
            spec.tier.name(),
            crate::schema::spec::pattern_string(&spec.shape)
        ));
    }
    Ok(())
}

/// A packed field of a frame: its validated tables and where its values lie.
struct Packed<'b> {
    field: &'b DecodedField,
    buf: &'b [u8],
    tables: PackedTables,
}

impl<'b> Packed<'b> {
    fn new(buf: &'b [u8], field: &'b DecodedField, num_rows: u64) -> Result<Packed<'b>> {
        Ok(Packed {
            field,
            buf,
            tables: PackedTables::read(buf, field, num_rows)?,
        })
    }
}

impl MediaRows for Packed<'_> {
    fn field(&self) -> &FieldSpec {
        &self.field.spec
    }

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

    fn row_values(&self, row: usize, out: &mut Vec<i64>) -> Result<()> {
        let dtype = self.field.values.dtype;
        if !matches!(dtype, DType::I64 | DType::I32) {
            return Err(not_int_geometry(&self.field.spec, dtype));
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
            segment.append_i64(out)?;
        }
        Ok(())
    }
}

/// A parsed frame as contracts read it.
fn frame_input<'b>(buf: &'b [u8], layout: &'b FrameLayout) -> Result<ContractInput<'b>> {
    let seq_name = layout
        .sequence_field
        .as_deref()
        .ok_or_else(|| schema_err!("placeholder contracts need a sequence field"))?;
    let seq = layout
        .field(seq_name)
        .ok_or_else(|| contract_err!("the sequence field {seq_name:?} is missing"))?;
    check_token_dtype(&seq.spec, seq.values.dtype)?;
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
    let token_offsets = read_seq_offsets(buf, layout)?
        .filter(|o| o.len() as u64 == layout.num_rows + 1)
        .ok_or_else(|| frame_err!("the frame has per-token fields but no sequence offsets"))?;
    let mut packed: Vec<Box<dyn MediaRows + 'b>> = Vec::new();
    for f in layout
        .fields
        .iter()
        .filter(|f| f.spec.tier.items() == Items::Segments)
    {
        packed.push(Box::new(Packed::new(buf, f, layout.num_rows)?));
    }
    Ok(ContractInput {
        num_rows: layout.num_rows as usize,
        sequence_field: seq_name,
        tokens,
        token_offsets,
        packed,
    })
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
    check_input(&frame_input(buf, layout)?, contracts)
}

fn check_input(input: &ContractInput<'_>, contracts: &[PlaceholderContract]) -> Result<()> {
    for c in contracts {
        let source_name = count_source(c)?;
        let media = input.packed(&c.media_field);
        let source = input.packed(source_name);
        if let (Some(m), None) = (media, source) {
            check_geometry_kept(c, m, source_name, input.num_rows)?;
        }
        let (expected, expected_rows) = match source {
            Some(s) => expected_features(input, c, media, s, source_name)?,
            None => (Vec::new(), vec![0u64; input.num_rows + 1]),
        };
        let rule = PlaceholderRule {
            contract: &c.name,
            sequence_field: input.sequence_field,
            media_field: &c.media_field,
            token_id: c.token_id,
            begin_token_id: c.begin_token_id,
            end_token_id: c.end_token_id,
        };
        check_alignment(
            &rule,
            &input.tokens,
            &input.token_offsets,
            &expected,
            &expected_rows,
        )?;
    }
    Ok(())
}

/// The field contract `c`'s count rule reads (the media field itself for `fixed`).
fn count_source(c: &PlaceholderContract) -> Result<&str> {
    match c.count {
        CountRule::GridThw => c.grid_field.as_deref(),
        CountRule::ImageSize => c.sizes_field.as_deref(),
        CountRule::Field => c.count_field.as_deref(),
        CountRule::Fixed => Some(c.media_field.as_str()),
    }
    .ok_or_else(|| schema_err!("contract {:?} names no field to count features", c.name))
}

/// A frame without the count rule's field may hold no media: images whose feature counts are
/// lost are an error, never checked as if they had none.
fn check_geometry_kept(
    c: &PlaceholderContract,
    media: &dyn MediaRows,
    source_name: &str,
    rows: usize,
) -> Result<()> {
    for row in 0..rows {
        if media.items(row)? > 0 {
            return Err(contract_err!(
                "contract {:?}: row {row} has {} but the frame lacks {source_name:?}, which says \
                 how many features each image makes (geometry lost)",
                c.name,
                c.media_field
            )
            .code(Code::GeometryMissing)
            .field(source_name)
            .row(row));
        }
    }
    Ok(())
}

/// Each image's feature count, flat over the batch, and the `[rows + 1]` offsets of each row's
/// images in it, as `source` (the count rule's field) says.
fn expected_features(
    input: &ContractInput<'_>,
    c: &PlaceholderContract,
    media: Option<&dyn MediaRows>,
    source: &dyn MediaRows,
    source_name: &str,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let mut expected = Vec::new();
    let mut expected_rows = Vec::with_capacity(input.num_rows + 1);
    expected_rows.push(0u64);
    let mut values = Vec::new();
    for row in 0..input.num_rows {
        match c.count {
            CountRule::Fixed => expected.extend(fixed_features(input, c, source, row)?),
            CountRule::GridThw => {
                values.clear();
                source.row_values(row, &mut values)?;
                expected.extend(grid_features(c, media, source_name, row, &values)?);
            }
            rule @ (CountRule::ImageSize | CountRule::Field) => {
                values.clear();
                source.row_values(row, &mut values)?;
                let feats = if rule == CountRule::Field {
                    counts_from_field(&values, &c.name, source_name, row)?
                } else {
                    features_from_image_sizes(&values, c.patch_size, c.downsample_ratio)
                        .map_err(|e| in_row(e, &c.name, source_name, row))?
                };
                check_media_items(c, media, source_name, row, feats.len())?;
                expected.extend(feats);
            }
        }
        expected_rows.push(expected.len() as u64);
    }
    Ok((expected, expected_rows))
}

/// `fixed`: `tokens_per_image` features for each of the row's images.
fn fixed_features(
    input: &ContractInput<'_>,
    c: &PlaceholderContract,
    media: &dyn MediaRows,
    row: usize,
) -> Result<std::iter::RepeatN<u64>> {
    let per = c.tokens_per_image.unwrap_or(0);
    let images = media.items(row)?;
    // Each image is one run of at least one token: more images than the row has tokens cannot
    // align, and must not size an allocation.
    let row_tokens = input.token_offsets[row + 1] - input.token_offsets[row];
    if per == 0 || images > row_tokens {
        return Err(contract_err!(
            "contract {:?}: row {row}: {} has {images} images of {per} tokens each but {} has \
             {row_tokens} tokens in that row",
            c.name,
            c.media_field,
            input.sequence_field
        )
        .code(Code::PlaceholderCount)
        .field(&c.media_field)
        .row(row)
        .expected(images)
        .found(row_tokens));
    }
    Ok(std::iter::repeat_n(per, images as usize))
}

/// `grid_thw`: each image's features from its `(t, h, w)` grid, whose patches the media field
/// must hold (when it is packed on dim 0, where its items are patches).
fn grid_features(
    c: &PlaceholderContract,
    media: Option<&dyn MediaRows>,
    source_name: &str,
    row: usize,
    grid: &[i64],
) -> Result<Vec<u64>> {
    let feats = features_from_grid_thw(grid, c.merge_size)
        .map_err(|e| in_row(e, &c.name, source_name, row))?;
    if let Some(m) = media.filter(|m| m.field().pack_dim == 0) {
        // Every value is >= 0 and each product fits: features_from_grid_thw checked both.
        let patches = grid
            .chunks_exact(3)
            .map(|g| g.iter().map(|&v| v as u64).product::<u64>())
            .try_fold(0u64, |acc, n| acc.checked_add(n))
            .ok_or_else(|| {
                contract_err!(
                    "contract {:?}: row {row}: {source_name} implies more than 2^64 patches",
                    c.name
                )
            })?;
        let found = m.items(row)?;
        if patches != found {
            let claim = format!("{source_name} implies {patches} patches");
            return Err(media_items_mismatch(c, row, &claim, patches, found));
        }
    }
    Ok(feats)
}

/// `image_size` and `field`: the media field holds one item per image the source lists.
fn check_media_items(
    c: &PlaceholderContract,
    media: Option<&dyn MediaRows>,
    source_name: &str,
    row: usize,
    images: usize,
) -> Result<()> {
    let Some(m) = media else {
        return Ok(());
    };
    let found = m.items(row)?;
    if images as u64 != found {
        let claim = format!("{source_name} lists {images} images");
        return Err(media_items_mismatch(c, row, &claim, images as u64, found));
    }
    Ok(())
}

/// The media field holds `found` items in `row` where the count rule's field says `expected`
/// (`claim`, e.g. "image_grid_thw implies 16 patches").
fn media_items_mismatch(
    c: &PlaceholderContract,
    row: usize,
    claim: &str,
    expected: u64,
    found: u64,
) -> Error {
    contract_err!(
        "contract {:?}: row {row}: {claim} but {} has {found}",
        c.name,
        c.media_field
    )
    .code(Code::MediaItems)
    .field(&c.media_field)
    .row(row)
    .expected(expected)
    .found(found)
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

/// A packed field of an encode request: rows of segment views.
struct RequestPacked<'r> {
    spec: &'r FieldSpec,
    segments: std::borrow::Cow<'r, [TensorRef<'r>]>,
    row_offsets: &'r [u64],
}

impl MediaRows for RequestPacked<'_> {
    fn field(&self) -> &FieldSpec {
        self.spec
    }

    fn items(&self, row: usize) -> Result<u64> {
        let dim = self.spec.pack_dim;
        self.row(row)?.iter().try_fold(0u64, |acc, seg| {
            acc.checked_add(seg.shape.get(dim).copied().unwrap_or(0))
                .ok_or_else(|| {
                    batch_err!(
                        "field {:?}, row {row}: item counts overflow",
                        self.spec.name
                    )
                })
        })
    }

    fn row_values(&self, row: usize, out: &mut Vec<i64>) -> Result<()> {
        for seg in self.row(row)? {
            out.extend(int_values(self.spec, seg)?);
        }
        Ok(())
    }
}

impl RequestPacked<'_> {
    fn row(&self, row: usize) -> Result<&[TensorRef<'_>]> {
        let (a, b) = (
            self.row_offsets[row] as usize,
            self.row_offsets[row + 1] as usize,
        );
        self.segments.get(a..b).ok_or_else(|| {
            internal_err!("field {:?}: row offsets past its segments", self.spec.name)
        })
    }
}

/// Every element of an integer tensor of any rank and strides, in C order, as i64.
fn int_values(spec: &FieldSpec, t: &TensorRef<'_>) -> Result<Vec<i64>> {
    let es = t.dtype.size();
    let mut bytes = vec![0u8; t.numel() as usize * es];
    crate::memory::copy::copy_tensor(t, t.dtype, &mut bytes)?;
    let read = |c: &[u8]| -> i64 {
        let mut le = [0u8; 8];
        le[..c.len()].copy_from_slice(c);
        if c.len() == 4 {
            i32::from_le_bytes([le[0], le[1], le[2], le[3]]) as i64
        } else {
            i64::from_le_bytes(le)
        }
    };
    match t.dtype {
        DType::I64 | DType::I32 => Ok(bytes.chunks_exact(es).map(read).collect()),
        other => Err(not_int_geometry(spec, other)),
    }
}

/// An encode request as contracts read it (after `encode::plan` validated it): the sequence
/// field's tokens gathered once, packed fields as rows of views. No payload is copied.
fn request_input<'r>(request: &'r EncodeRequest<'r>) -> Result<ContractInput<'r>> {
    let seq_name = request
        .sequence_field
        .as_deref()
        .ok_or_else(|| schema_err!("placeholder contracts need a sequence field"))?;
    let seq = request
        .fields
        .iter()
        .find(|f| f.spec.name == seq_name)
        .ok_or_else(|| contract_err!("the sequence field {seq_name:?} is missing"))?;
    let mut tokens = Vec::new();
    let mut token_offsets = vec![0u64];
    let mut push_row = |row: &TensorRef<'_>| -> Result<()> {
        check_token_dtype(&seq.spec, row.dtype)?;
        row.append_i64(&mut tokens)?;
        token_offsets.push(tokens.len() as u64);
        Ok(())
    };
    match &seq.input {
        FieldInput::Segments { segments, .. } => segments.iter().try_for_each(&mut push_row)?,
        FieldInput::Jagged { values, offsets } => {
            for w in offsets.windows(2) {
                push_row(&values.narrow0(w[0], w[1] - w[0])?)?;
            }
        }
        FieldInput::Padded { padded, lengths } => {
            for (r, &len) in lengths.iter().enumerate() {
                let row = padded.narrow0(r as u64, 1)?;
                let row =
                    TensorRef::strided(row.dtype, &row.shape[1..], &row.strides[1..], row.bytes)?;
                push_row(&row.narrow0(0, len)?)?;
            }
        }
        FieldInput::Ranges { sources, spans } => {
            for (s, start, end) in spans.rows() {
                let source = sources
                    .get(s)
                    .ok_or_else(|| internal_err!("row span names source {s}"))?;
                push_row(&source.narrow0(start, end - start)?)?;
            }
        }
        FieldInput::Dense(_) | FieldInput::Csr { .. } => {
            return Err(schema_err!("sequence field {seq_name:?} must be per-token"))
        }
    }
    let num_rows = token_offsets.len() - 1;
    let mut packed: Vec<Box<dyn MediaRows + 'r>> = Vec::new();
    for field in request
        .fields
        .iter()
        .filter(|f| f.spec.tier.items() == Items::Segments)
    {
        let (segments, row_offsets) = match (&field.input, field.input.csr_segments(&field.spec)?) {
            (
                FieldInput::Segments {
                    segments,
                    row_offsets,
                    ..
                },
                _,
            ) => (std::borrow::Cow::Borrowed(&segments[..]), &row_offsets[..]),
            (FieldInput::Csr { row_offsets, .. }, Some((segments, _, _))) => {
                (std::borrow::Cow::Owned(segments), &row_offsets[..])
            }
            _ => {
                return Err(batch_err!(
                    "field {:?} is packed: pass rows of segments",
                    field.spec.name
                ))
            }
        };
        if row_offsets.len() != num_rows + 1 {
            return Err(internal_err!(
                "field {:?} has {} row offsets for {num_rows} rows",
                field.spec.name,
                row_offsets.len()
            ));
        }
        packed.push(Box::new(RequestPacked {
            spec: &field.spec,
            segments,
            row_offsets,
        }));
    }
    Ok(ContractInput {
        num_rows,
        sequence_field: seq_name,
        tokens,
        token_offsets,
        packed,
    })
}

/// Checks contracts on a batch before it is encoded, so a broken batch costs no payload copy.
/// Call after `encode::plan`, which validates the request's shapes, dtypes and row counts.
pub fn check_request_contracts(
    request: &EncodeRequest<'_>,
    contracts: &[PlaceholderContract],
) -> Result<()> {
    if contracts.is_empty() {
        return Ok(());
    }
    check_input(&request_input(request)?, contracts)
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
