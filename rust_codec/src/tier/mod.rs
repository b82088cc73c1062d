//! One implementation per tier of what a tier decides, behind one trait ([`TierCodec`]): how a
//! field's input is checked and planned into a frame (its values and index tables), what the
//! values' dim 0 counts, where a frame keeps the field's tables and how they are read back, and
//! how picked rows of frames are gathered. [`of`] chooses the implementation: the one place a
//! tier's behaviour is chosen. The rules a schema states about tiers (ranks, ragged dims,
//! pack dims) stay with the schema model (`schema::spec`).

#![forbid(unsafe_code)]

mod check;
mod codec;
mod packed;
mod per_token;
mod scalar;

pub(crate) use codec::{
    FrameFacts, Items, PlanBatch, Sequence, SharedSpans, SourceTables, TierCodec,
};

use crate::schema::spec::Tier;

/// The implementation of `tier`.
pub(crate) fn of(tier: Tier) -> &'static dyn TierCodec {
    match tier {
        Tier::Packed => &packed::Packed,
        Tier::PerToken => &per_token::PerToken,
        Tier::Scalar => &scalar::Scalar,
    }
}
