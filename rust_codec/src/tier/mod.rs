//! One implementation per tier of what a tier decides, behind one trait ([`TierCodec`]): how a
//! field's input is checked and planned into a frame (its values and index tables), what the
//! values' dim 0 counts, where a frame keeps the field's tables and how they are read back, and
//! how picked rows of frames are gathered. [`of`] chooses the implementation: the one place a
//! tier's codec is chosen. The schema's tiers, their names and the rules a schema states of
//! each (row items, ranks, ragged dims, pack dims) are [`rules`]'s, chosen there by
//! `Tier::rules`: the schema model below the codecs reads them, so a tier is its codec here and
//! its rules there, both in this folder.

#![forbid(unsafe_code)]

mod check;
mod codec;
mod packed;
mod per_token;
pub(crate) mod rules;
mod scalar;

pub(crate) use codec::{FrameFacts, PlanBatch, Sequence, SharedSpans, SourceTables, TierCodec};
pub(crate) use rules::Items;

use rules::Tier;

/// The implementation of `tier`.
pub(crate) fn of(tier: Tier) -> &'static dyn TierCodec {
    match tier {
        Tier::Packed => &packed::Packed,
        Tier::PerToken => &per_token::PerToken,
        Tier::Scalar => &scalar::Scalar,
    }
}
