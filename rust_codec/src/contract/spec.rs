//! A placeholder contract as a schema declares it, and its rules: its own parameters, and the
//! fields it names against the schema's field specs. What a schema loader needs of contracts,
//! apart from checking batches (`contract`'s other modules).

#![forbid(unsafe_code)]

use serde::Deserialize;

use crate::error::Result;
use crate::schema::dtype::DType;
use crate::schema::spec::FieldSpec;
use crate::schema_err;
use crate::tier::rules::Items;

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
    /// The contract's kind: `None` or `"placeholder"`, the only kind so far.
    pub kind: Option<String>,
    /// The contract's name, used in every error it raises.
    pub name: String,
    /// The packed field holding the media (images) whose features the placeholder runs stand for.
    pub media_field: String,
    /// The placeholder token: each image is one run of it in the sequence field.
    pub token_id: i64,
    /// A token that must come right before each run, when the model wraps images.
    pub begin_token_id: Option<i64>,
    /// A token that must come right after each run, when the model wraps images.
    pub end_token_id: Option<i64>,
    /// How each image's feature count, and so its run's length, is computed.
    pub count: CountRule,
    /// `grid_thw` only: the `[n, 3]` packed field of each image's (t, h, w) grid.
    pub grid_field: Option<String>,
    /// `grid_thw` only: the spatial merge size; an image makes `t*h*w / merge_size²` features.
    pub merge_size: u64,
    /// `fixed` only: the features every image makes.
    pub tokens_per_image: Option<u64>,
    /// `image_size` only: the `[n, 2]` packed field of each image's (H, W) in pixels.
    pub sizes_field: Option<String>,
    #[serde(default)]
    /// `field` only: the `[n]` packed field of each image's feature count.
    pub count_field: Option<String>,
    /// `image_size` only: the patch edge in pixels.
    pub patch_size: u64,
    /// `image_size` only: the factor each side's patch count is scaled by (e.g. 0.5 for a pixel
    /// shuffle).
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
                if f.tier.items() == Items::Tokens
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
        if media.tier.items() != Items::Segments {
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
        if f.tier.items() != Items::Segments || !int || f.shape != expected || f.pack_dim != 0 {
            return Err(schema_err!(
                "contract {name:?}: {what} {source:?} must be a packed int32 or int64 field of \
                 shape {} packed on dim 0; it is a {} {} field of shape {} packed on dim {}",
                crate::schema::spec::pattern_string(&expected),
                f.tier.name(),
                f.stored_dtype().name(),
                crate::schema::spec::pattern_string(&f.shape),
                f.pack_dim
            ));
        }
        Ok(())
    }
}

impl CountRule {
    /// The rule's name in schema files (`"grid_thw"`, `"fixed"`, `"image_size"`, `"field"`).
    pub fn name(self) -> &'static str {
        match self {
            CountRule::GridThw => "grid_thw",
            CountRule::Fixed => "fixed",
            CountRule::ImageSize => "image_size",
            CountRule::Field => "field",
        }
    }
}
