//! The schema's tiers: their names ([`Tier`]) and what a schema's rules ask of each, one
//! implementation per tier behind [`TierRules`] (what a values item is, the shape rules, how a
//! pack dim is read), chosen in one place ([`Tier::rules`]). This file names nothing else of the
//! crate's but the error type: the schema model, the contracts and the field specs read it, and
//! the codecs beside it (`tier::of`) read frames those describe, so they cannot be its choice.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::schema_err;
use crate::tensor::MAX_RANK;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How a field's values relate to a batch's rows, which decides how the frame stores them.
pub enum Tier {
    /// Per row 0..k segments of any rank; rows may share segments.
    Packed,
    /// Per row one tensor whose first dim is the row's sequence length.
    PerToken,
    /// Per row one value of static shape.
    Scalar,
}

impl Tier {
    /// Every tier, in the order a schema's error messages list them.
    pub const ALL: [Tier; 3] = [Tier::Packed, Tier::PerToken, Tier::Scalar];

    /// The tier's name in schema files and frame headers (`"packed"`, `"per_token"`, `"scalar"`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Packed => "packed",
            Tier::PerToken => "per_token",
            Tier::Scalar => "scalar",
        }
    }

    /// The tier named `name`, if one is.
    pub fn from_name(name: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The rules of this tier: the one place a tier's rules are chosen.
    pub(crate) fn rules(self) -> &'static dyn TierRules {
        match self {
            Tier::Packed => &PackedRules,
            Tier::PerToken => &PerTokenRules,
            Tier::Scalar => &ScalarRules,
        }
    }

    /// What one item along this tier's values dim 0 is (its row fact).
    pub(crate) fn items(self) -> Items {
        self.rules().items()
    }
}

/// What one item along a field's values dim 0 is, for every row of the field: a row fact of
/// the tier, from which the values' length and a gather's spans follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Items {
    /// One item a row: the values are `[rows, ...]`.
    Rows,
    /// The row's tokens: the values are `[tokens, ...]`, rows cut by the sequence offsets.
    Tokens,
    /// The row's segments, through the field's own index tables.
    Segments,
}

impl Items {
    /// The values' dim 0 in a frame of `num_rows` rows and `total_tokens` tokens; `None` where
    /// the field's own tables say.
    pub(crate) fn dim0(self, num_rows: u64, total_tokens: u64) -> Option<u64> {
        match self {
            Items::Rows => Some(num_rows),
            Items::Tokens => Some(total_tokens),
            Items::Segments => None,
        }
    }
}

/// What a schema's rules ask of a tier, one implementation per tier ([`Tier::rules`]). By
/// default a tier's values carry one dim of their own (rows or tokens) before the field's
/// static shape, with no ragged dims and no pack dim.
pub(crate) trait TierRules: Sync {
    /// What one item along the values' dim 0 is.
    fn items(&self) -> Items;

    /// The most dims a field's declared shape may have.
    fn max_rank(&self) -> usize {
        MAX_RANK - 1
    }

    /// Field `name`'s declared `shape` (`None`: a ragged dim) and resolved `pack_dim`, checked.
    fn check_shape(
        &self,
        tier: Tier,
        name: &str,
        shape: &[Option<u64>],
        pack_dim: usize,
    ) -> Result<()> {
        if shape.iter().any(Option::is_none) {
            return Err(schema_err!(
                "{} field {name:?} cannot have ragged dims (\"*\"); make it packed",
                tier.name()
            ));
        }
        if pack_dim != 0 {
            return Err(schema_err!(
                "pack_dim applies to packed fields only (field {name:?})"
            ));
        }
        Ok(())
    }

    /// A declared `pack_dim` of a shape of `rank` dims, before it is checked.
    fn resolve_pack_dim(&self, pack_dim: i64, _rank: i64) -> i64 {
        pack_dim
    }

    /// Whether every row of a field of static `shape` costs the frame at least one byte.
    fn stores_bytes_per_row(&self, _shape: &[Option<u64>]) -> bool {
        true
    }
}

/// Per row 0..k segments, cut along a pack dim, of a shape that may be ragged.
struct PackedRules;

impl TierRules for PackedRules {
    fn items(&self) -> Items {
        Items::Segments
    }

    /// Segments are the values' whole shape: no dim of their own.
    fn max_rank(&self) -> usize {
        MAX_RANK
    }

    fn check_shape(
        &self,
        _tier: Tier,
        name: &str,
        shape: &[Option<u64>],
        pack_dim: usize,
    ) -> Result<()> {
        if shape.is_empty() {
            return Err(schema_err!(
                "packed field {name:?} needs a segment shape of rank >= 1"
            ));
        }
        if pack_dim >= shape.len() {
            return Err(schema_err!(
                "packed field {name:?}: pack_dim {pack_dim} is out of range for rank {}",
                shape.len()
            ));
        }
        Ok(())
    }

    /// A negative pack dim counts from the last dim.
    fn resolve_pack_dim(&self, pack_dim: i64, rank: i64) -> i64 {
        if pack_dim < 0 {
            pack_dim.saturating_add(rank)
        } else {
            pack_dim
        }
    }
}

/// Per row one tensor whose first dim is the row's sequence length (its offsets entry is its
/// byte, whatever the shape).
struct PerTokenRules;

impl TierRules for PerTokenRules {
    fn items(&self) -> Items {
        Items::Tokens
    }
}

/// Per row one value of static shape.
struct ScalarRules;

impl TierRules for ScalarRules {
    fn items(&self) -> Items {
        Items::Rows
    }

    /// A row's value is its only byte: none where a static dim is 0.
    fn stores_bytes_per_row(&self, shape: &[Option<u64>]) -> bool {
        shape.iter().all(|d| d.is_some_and(|n| n > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tier_is_found_by_its_name() {
        for tier in Tier::ALL {
            assert_eq!(Tier::from_name(tier.name()), Some(tier));
        }
        assert_eq!(Tier::from_name("ragged"), None);
    }
}
