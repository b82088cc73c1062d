//! The scalar tier: per row one value of static shape, stored as one `[rows, ...]` values
//! tensor; a gather copies spans of rows.

use crate::batch_err;
use crate::encode::input::{FieldData, FieldInput};
use crate::encode::layout::Layout;
use crate::error::Result;

use super::check::{check_dims, check_dtype, Where};
use super::codec::{span_views, PlanBatch, TierCodec};
use super::rules::Tier;

/// Per row one value of static shape.
pub(super) struct Scalar;

impl TierCodec for Scalar {
    fn tier(&self) -> Tier {
        Tier::Scalar
    }

    fn plan<'a>(
        &self,
        layout: &mut Layout<'a>,
        field: &FieldData<'a>,
        batch: &PlanBatch<'_>,
    ) -> Result<()> {
        plan_scalar(layout, field, batch.num_rows)
    }
}

fn plan_scalar<'a>(layout: &mut Layout<'a>, field: &FieldData<'a>, num_rows: u64) -> Result<()> {
    let spec = &field.spec;
    let sources = match &field.input {
        FieldInput::Dense(t) => {
            check_dtype(spec, t, Where::Field)?;
            check_dims(spec, &t.shape[1..], &spec.shape, Where::Field, "row shape")?;
            vec![t.clone()]
        }
        // One value per row, as frame operations gather them.
        FieldInput::Segments {
            segments,
            row_offsets,
            ..
        } => {
            for (row, w) in row_offsets.windows(2).enumerate() {
                let location = Where::Row(row);
                if w[1] - w[0] != 1 {
                    return Err(batch_err!(
                        "field {:?}{location}: a scalar field needs one value per row",
                        spec.name
                    ));
                }
                let t = &segments[w[0] as usize];
                check_dtype(spec, t, location)?;
                check_dims(spec, &t.shape, &spec.shape, location, "value shape")?;
            }
            segments.clone()
        }
        FieldInput::Ranges { sources, spans } => {
            for t in sources {
                check_dtype(spec, t, Where::Field)?;
                check_dims(spec, &t.shape[1..], &spec.shape, Where::Field, "row shape")?;
            }
            if let Some(row) = spans.row_not_one_item() {
                return Err(batch_err!(
                    "field {:?}, row {row}: a scalar field needs one value per row",
                    spec.name
                ));
            }
            span_views(sources, spans)?
        }
        _ => {
            return Err(batch_err!(
                "field {:?} is a scalar field: pass one [B, ...] tensor",
                spec.name
            ))
        }
    };
    let mut shape = vec![num_rows];
    shape.extend(spec.shape.iter().map(|d| d.unwrap_or(0)));
    layout.values(spec, shape, sources)
}
