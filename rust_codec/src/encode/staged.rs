//! The tiny-row reader's decisions, as plain arithmetic (no Python): whether one per-token row,
//! described by the numbers torch reports for it (dtype, shape, strides, data pointer, and its
//! untyped storage's base address and byte length), may be copied into the staging buffer,
//! where its bytes go there, and the rows of the staged field (`FieldInput::Jagged`, or
//! `FieldInput::Ranges` when some rows are too large to stage).
//!
//! `python/staged.rs` reads those numbers with direct C calls of torch's getters and calls
//! [`check_row`] and [`StagePlan`] on them; a refusal ([`NotStaged`]) is never an error there:
//! the whole field goes to the full reader, which accepts or refuses it with its own errors.
//! Every refusal that the full reader also makes is marked by
//! [`NotStaged::full_reader_refuses`] (the `staged_rows` fuzz target checks both claims:
//! what this module accepts the full reader accepts with the same bytes, and what it refuses
//! for those reasons the full reader refuses).

use std::sync::Arc;

use super::{RowItems, RowSpan, RowSpans};
use crate::schema::dtype::DType;
use crate::schema::spec::FieldSpec;
use crate::tensor::{checked_numel, is_c_contiguous, span_in_storage, Dims};

/// Rows up to this many bytes are copied into the staging buffer while their metadata is read
/// (GIL held). Copying 4 KiB costs about what reading a tensor's metadata does, so the GIL is
/// held at most about twice as long as reading alone would hold it; holding a larger row's
/// storage instead costs less than copying it twice.
pub const STAGE_MAX_ROW_BYTES: usize = 4096;

/// Rows read before the staging buffer is sized for the rest.
pub const ESTIMATE_ROWS: usize = 64;

/// Why a row (and so its field) is not staged. Not an error: the full reader then reads the
/// field and says what, if anything, is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStaged {
    /// A complex dtype: its lazy conjugate bit is the full reader's to check.
    Complex,
    /// The row's rank is not the field's (`1 +` its trailing dims), or over `MAX_RANK`.
    Rank,
    /// A rank-1 row whose byte count is not a multiple of its item size.
    Nbytes,
    /// The row's element or byte count overflows.
    Overflow,
    /// Not C-contiguous.
    NotContiguous,
    /// A null data pointer under a non-empty row.
    NullData,
    /// The storage's base address plus its length wraps the address space.
    StorageWraps,
    /// The row's bytes do not lie inside its storage.
    OutsideStorage,
    /// A trailing dim of the field is ragged (`"*"`), which only the full reader checks.
    RaggedTrailing,
    /// The row's dtype is neither the field's dtype nor its wire dtype.
    DtypeNotTaken,
    /// The row's dtype differs from an earlier row's.
    MixedDtypes,
    /// The row's trailing dims are not the field's static dims.
    TrailingDims,
    /// The row's bytes overlap the `encode(out=)` buffer.
    OverlapsOut,
    /// The field has no rows.
    NoRows,
    /// The staged rows do not add up (a bug of this module, caught before anything is built).
    Inconsistent,
}

impl NotStaged {
    /// Whether the full reader refuses a row for the same reason (with a `BatchError` that
    /// names the row): such a refusal is a verdict, the others only hand the field over.
    pub fn full_reader_refuses(self) -> bool {
        matches!(
            self,
            NotStaged::Rank
                | NotStaged::Overflow
                | NotStaged::OutsideStorage
                | NotStaged::DtypeNotTaken
                | NotStaged::TrailingDims
        )
    }
}

/// What torch reports about one row, as plain numbers.
#[derive(Clone, Copy, Debug)]
pub struct RowFacts<'a> {
    /// The row's dtype.
    pub dtype: DType,
    /// The row's shape.
    pub shape: &'a [u64],
    /// The row's strides, in elements (torch's `stride()`).
    pub strides: &'a [u64],
    /// The address of the row's first element (torch's `data_ptr()`).
    pub data_ptr: usize,
    /// The row's untyped storage: base address and byte length.
    pub storage_ptr: usize,
    /// The storage's length in bytes, from `storage_ptr`.
    pub storage_nbytes: usize,
}

/// A row that may be staged: contiguous, its `nbytes` bytes at `ptr` inside its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageRow {
    /// The row's dtype.
    pub dtype: DType,
    /// The row's shape.
    pub shape: Dims,
    /// The address of the row's first byte.
    pub ptr: usize,
    /// The row's byte count, checked against its storage.
    pub nbytes: usize,
}

/// A rank-1 row's shape from its byte count (torch's `nbytes`, one getter call instead of
/// reading the shape tuple).
pub fn rank1_shape(nbytes: usize, dtype: DType) -> Result<Dims, NotStaged> {
    let es = dtype.size();
    if es == 0 || !nbytes.is_multiple_of(es) {
        return Err(NotStaged::Nbytes);
    }
    Dims::new(&[(nbytes / es) as u64]).map_err(|_| NotStaged::Rank)
}

/// Checks one row: a non-complex dtype, the field's `rank`, C-contiguity, a byte count without
/// overflow, a non-null data pointer and the row's bytes inside its storage (checked
/// arithmetic throughout).
pub fn check_row(row: &RowFacts<'_>, rank: usize) -> Result<StageRow, NotStaged> {
    if matches!(row.dtype, DType::C64 | DType::C128) {
        return Err(NotStaged::Complex);
    }
    if row.shape.len() != rank || row.strides.len() != rank {
        return Err(NotStaged::Rank);
    }
    let shape = Dims::new(row.shape).map_err(|_| NotStaged::Rank)?;
    let nbytes = checked_numel(row.shape)
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| n.checked_mul(row.dtype.size()))
        .ok_or(NotStaged::Overflow)?;
    if !is_c_contiguous(row.shape, row.strides) {
        return Err(NotStaged::NotContiguous);
    }
    row.storage_ptr
        .checked_add(row.storage_nbytes)
        .ok_or(NotStaged::StorageWraps)?;
    if row.data_ptr == 0 && nbytes > 0 {
        return Err(NotStaged::NullData);
    }
    if nbytes > 0
        && span_in_storage(
            row.data_ptr,
            nbytes as u64,
            row.storage_ptr,
            row.storage_nbytes,
        )
        .is_none()
    {
        return Err(NotStaged::OutsideStorage);
    }
    Ok(StageRow {
        dtype: row.dtype,
        shape,
        ptr: row.data_ptr,
        nbytes,
    })
}

/// Where staging may happen: the largest row to stage, and the byte range of `encode(out=)`
/// (a row inside it is left to the full reader, which refuses it by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageLimits {
    /// Rows of at most this many bytes are copied into the staging buffer; larger rows stay sources
    /// of their own.
    pub max_row_bytes: usize,
    /// The `(start, len)` byte range of `encode(out=)`, when there is one.
    pub out: Option<(usize, usize)>,
}

impl StageLimits {
    /// No staging worth the name: only empty rows are staged, every other row is a source of its
    /// own.
    pub const NONE: StageLimits = StageLimits {
        max_row_bytes: 0,
        out: None,
    };
}

/// Where a row's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Copy the row's `len` bytes to `staging[at..at + len]` (`at` is the staged bytes so far:
    /// rows are appended in order).
    Stage {
        /// Where the row starts in the staging buffer.
        at: usize,
        /// The row's byte count.
        len: usize,
    },
    /// Too large to stage: the row is a source of its own (its storage held), the `index`-th
    /// large row.
    Large {
        /// The row's position among the field's large rows (its source is `index + 1`, after
        /// the staging buffer).
        index: usize,
    },
}

/// The staged field's layout: the staging buffer's shape and the rows over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedField {
    /// The rows' dtype (every row of a staged field has the same).
    pub dtype: DType,
    /// The staging buffer as a tensor: `[staged items, trailing...]`.
    pub values_shape: Vec<u64>,
    /// Row `r` holds staged items `offsets[r]..offsets[r + 1]` (none for a large row).
    pub offsets: Vec<u64>,
    /// With large rows: rows as spans of `[staging, large rows...]` (`FieldInput::Ranges`);
    /// without: `None` (`FieldInput::Jagged` over `offsets`).
    pub spans: Option<Arc<RowSpans>>,
}

/// The plan of one per-token field's staging, fed one row at a time.
#[derive(Clone, Debug)]
pub struct StagePlan {
    dtype: DType,
    wire_dtype: Option<DType>,
    trailing: Vec<u64>,
    limits: StageLimits,
    row_dtype: Option<DType>,
    offsets: Vec<u64>,
    staged_items: u64,
    staged_bytes: usize,
    /// Each large row: its row index and its item count.
    large: Vec<(usize, u64)>,
}

impl StagePlan {
    /// A plan for `spec`'s rows; refused when a trailing dim is ragged.
    pub fn new(spec: &FieldSpec, limits: StageLimits, rows: usize) -> Result<Self, NotStaged> {
        let trailing = spec
            .shape
            .iter()
            .map(|d| d.ok_or(NotStaged::RaggedTrailing))
            .collect::<Result<Vec<u64>, _>>()?;
        let mut offsets = Vec::with_capacity(rows.saturating_add(1).min(1 << 20));
        offsets.push(0);
        Ok(StagePlan {
            dtype: spec.dtype,
            wire_dtype: spec.wire_dtype,
            trailing,
            limits,
            row_dtype: None,
            offsets,
            staged_items: 0,
            staged_bytes: 0,
            large: Vec::new(),
        })
    }

    /// The rank every row must have.
    pub fn rank(&self) -> usize {
        1 + self.trailing.len()
    }

    /// Rows planned so far.
    pub fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Bytes to reserve in the staging buffer before staging the next row, of `total_rows`:
    /// once, at row [`ESTIMATE_ROWS`], from the rows seen so far (rather than doubling the
    /// buffer, and copying what it holds, a dozen times).
    pub fn reserve_hint(&self, total_rows: usize) -> usize {
        let row = self.rows();
        if row != ESTIMATE_ROWS {
            return 0;
        }
        let rest = total_rows.saturating_sub(row);
        (self.staged_bytes / ESTIMATE_ROWS).saturating_mul(rest) / 8 * 9
    }

    /// The next row, checked by [`check_row`]: one dtype for every row, one the field takes,
    /// the field's static trailing dims, no overlap with `out`; then where its bytes go.
    pub fn push(&mut self, row: &StageRow) -> Result<Placement, NotStaged> {
        if row.shape.len() != self.rank() {
            return Err(NotStaged::Rank);
        }
        if !row.shape[1..].iter().eq(&self.trailing) {
            return Err(NotStaged::TrailingDims);
        }
        // A dtype the field does not take is the full reader's to refuse, naming the row.
        if row.dtype != self.dtype && Some(row.dtype) != self.wire_dtype {
            return Err(NotStaged::DtypeNotTaken);
        }
        if *self.row_dtype.get_or_insert(row.dtype) != row.dtype {
            return Err(NotStaged::MixedDtypes);
        }
        if let Some((start, len)) = self.limits.out {
            if row.nbytes > 0
                && row.ptr < start.saturating_add(len)
                && start < row.ptr.saturating_add(row.nbytes)
            {
                return Err(NotStaged::OverlapsOut);
            }
        }
        let placement = if row.nbytes <= self.limits.max_row_bytes {
            let at = self.staged_bytes;
            self.staged_bytes = at.checked_add(row.nbytes).ok_or(NotStaged::Overflow)?;
            self.staged_items = self
                .staged_items
                .checked_add(row.shape[0])
                .ok_or(NotStaged::Overflow)?;
            Placement::Stage {
                at,
                len: row.nbytes,
            }
        } else {
            self.large.push((self.rows(), row.shape[0]));
            Placement::Large {
                index: self.large.len() - 1,
            }
        };
        self.offsets.push(self.staged_items);
        Ok(placement)
    }

    /// The field's layout, once every row is planned; `staged_len` is the staging buffer's
    /// length, which must be what the plan placed (and the staged items' bytes).
    pub fn finish(self, staged_len: usize) -> Result<StagedField, NotStaged> {
        let dtype = self.row_dtype.ok_or(NotStaged::NoRows)?;
        let item_bytes = self
            .trailing
            .iter()
            .try_fold(dtype.size() as u64, |a, &d| a.checked_mul(d))
            .ok_or(NotStaged::Overflow)?;
        if staged_len != self.staged_bytes
            || self.staged_items.checked_mul(item_bytes) != Some(staged_len as u64)
        {
            return Err(NotStaged::Inconsistent);
        }
        let mut values_shape = vec![self.staged_items];
        values_shape.extend(&self.trailing);
        if self.large.is_empty() {
            return Ok(StagedField {
                dtype,
                values_shape,
                offsets: self.offsets,
                spans: None,
            });
        }
        // Some rows are sources of their own: rows as spans of [staging, large rows...]; a
        // large row has no items in the staging offsets.
        let rows = self.rows() as u64;
        let mut items = Vec::with_capacity(self.large.len() + 1);
        items.push(RowItems::Offsets(Arc::new(self.offsets.clone())));
        let mut spans = Vec::with_capacity(2 * self.large.len() + 1);
        let mut staged_from = 0u64;
        for (i, &(row, len)) in self.large.iter().enumerate() {
            let row = row as u64;
            if row > staged_from {
                spans.push(RowSpan {
                    source: 0,
                    start: staged_from,
                    end: row,
                });
            }
            items.push(RowItems::Offsets(Arc::new(vec![0, len])));
            spans.push(RowSpan {
                source: u32::try_from(i + 1).map_err(|_| NotStaged::Overflow)?,
                start: 0,
                end: 1,
            });
            staged_from = row + 1;
        }
        if rows > staged_from {
            spans.push(RowSpan {
                source: 0,
                start: staged_from,
                end: rows,
            });
        }
        let spans = RowSpans::new(items, spans).map_err(|_| NotStaged::Inconsistent)?;
        Ok(StagedField {
            dtype,
            values_shape,
            offsets: self.offsets,
            spans: Some(Arc::new(spans)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::spec::Tier;

    fn spec(trailing: Vec<Option<u64>>) -> FieldSpec {
        FieldSpec {
            name: "input_ids".into(),
            tier: Tier::PerToken,
            dtype: DType::I64,
            wire_dtype: Some(DType::I32),
            shape: trailing,
            pack_dim: 0,
        }
    }

    const BASE: usize = 0x1000;

    fn facts<'a>(shape: &'a [u64], strides: &'a [u64], ptr: usize, len: usize) -> RowFacts<'a> {
        RowFacts {
            dtype: DType::I64,
            shape,
            strides,
            data_ptr: ptr,
            storage_ptr: BASE,
            storage_nbytes: len,
        }
    }

    #[test]
    fn a_row_is_staged_only_inside_its_storage() {
        // 4 int64 = 32 bytes.
        let ok = check_row(&facts(&[4], &[1], BASE, 32), 1).unwrap();
        assert_eq!((ok.ptr, ok.nbytes), (BASE, 32));
        assert!(check_row(&facts(&[4], &[1], BASE + 8, 40), 1).is_ok());
        // Shrunk storage (`resize_(16)`), a pointer past or before the storage.
        for (ptr, len) in [(BASE, 16), (BASE + 8, 32), (BASE - 8, 64), (BASE + 33, 64)] {
            assert_eq!(
                check_row(&facts(&[4], &[1], ptr, len), 1),
                Err(NotStaged::OutsideStorage),
                "{ptr:#x} {len}"
            );
        }
        // An empty row lies anywhere, even at a null pointer.
        assert!(check_row(&facts(&[0], &[1], 0, 0), 1).is_ok());
        assert_eq!(
            check_row(&facts(&[1], &[1], 0, 8), 1),
            Err(NotStaged::NullData)
        );
    }

    #[test]
    fn overflowing_arithmetic_is_a_refusal() {
        let huge = [u64::MAX / 4, 8];
        assert_eq!(
            check_row(&facts(&huge, &[8, 1], BASE, 64), 2),
            Err(NotStaged::Overflow)
        );
        let end = facts(&[4], &[1], usize::MAX - 8, 32);
        let wraps = RowFacts {
            storage_ptr: usize::MAX - 16,
            ..end
        };
        assert_eq!(check_row(&wraps, 1), Err(NotStaged::StorageWraps));
        let high = RowFacts {
            storage_ptr: usize::MAX - 64,
            storage_nbytes: 64,
            data_ptr: usize::MAX - 16,
            ..end
        };
        assert_eq!(check_row(&high, 1), Err(NotStaged::OutsideStorage));
    }

    #[test]
    fn rank_contiguity_and_dtype() {
        assert_eq!(
            check_row(&facts(&[2, 3], &[1, 2], BASE, 48), 2),
            Err(NotStaged::NotContiguous)
        );
        // Size-1 dims take any stride, as torch's is_contiguous() says.
        assert!(check_row(&facts(&[1, 3], &[99, 1], BASE, 24), 2).is_ok());
        assert_eq!(
            check_row(&facts(&[3], &[1], BASE, 24), 2),
            Err(NotStaged::Rank)
        );
        let complex = RowFacts {
            dtype: DType::C64,
            ..facts(&[1], &[1], BASE, 8)
        };
        assert_eq!(check_row(&complex, 1), Err(NotStaged::Complex));
        assert_eq!(rank1_shape(24, DType::I64).unwrap()[0], 3);
        assert_eq!(rank1_shape(20, DType::I64), Err(NotStaged::Nbytes));
    }

    fn row(dtype: DType, shape: &[u64], ptr: usize) -> StageRow {
        StageRow {
            dtype,
            shape: Dims::new(shape).unwrap(),
            ptr,
            nbytes: (shape.iter().product::<u64>() as usize) * dtype.size(),
        }
    }

    #[test]
    fn small_rows_are_staged_back_to_back() {
        let limits = StageLimits {
            max_row_bytes: 64,
            out: None,
        };
        let mut plan = StagePlan::new(&spec(vec![Some(2)]), limits, 3).unwrap();
        let p = [
            plan.push(&row(DType::I64, &[3, 2], BASE)).unwrap(),
            plan.push(&row(DType::I64, &[0, 2], 0)).unwrap(),
            plan.push(&row(DType::I64, &[1, 2], BASE)).unwrap(),
        ];
        assert_eq!(
            p,
            [
                Placement::Stage { at: 0, len: 48 },
                Placement::Stage { at: 48, len: 0 },
                Placement::Stage { at: 48, len: 16 },
            ]
        );
        assert_eq!(plan.clone().finish(63), Err(NotStaged::Inconsistent));
        let field = plan.finish(64).unwrap();
        assert_eq!(field.values_shape, vec![4, 2]);
        assert_eq!(field.offsets, vec![0, 3, 3, 4]);
        assert!(field.spans.is_none());
    }

    #[test]
    fn large_rows_become_sources_of_their_own() {
        let limits = StageLimits {
            max_row_bytes: 16,
            out: None,
        };
        let mut plan = StagePlan::new(&spec(vec![]), limits, 4).unwrap();
        let p = [
            plan.push(&row(DType::I64, &[1], BASE)).unwrap(),
            plan.push(&row(DType::I64, &[5], BASE)).unwrap(),
            plan.push(&row(DType::I64, &[2], BASE)).unwrap(),
            plan.push(&row(DType::I64, &[3], BASE)).unwrap(),
        ];
        assert_eq!(p[1], Placement::Large { index: 0 });
        assert_eq!(p[3], Placement::Large { index: 1 });
        let field = plan.finish(24).unwrap();
        assert_eq!(field.offsets, vec![0, 1, 1, 3, 3]);
        let spans = field.spans.unwrap();
        assert_eq!(spans.num_rows(), 4);
        assert_eq!(spans.offsets().unwrap(), vec![0, 1, 6, 8, 11]);
        let rows: Vec<_> = spans.rows().collect();
        assert_eq!(rows, vec![(0, 0, 1), (1, 0, 5), (0, 1, 3), (2, 0, 3)]);
    }

    #[test]
    fn the_plan_refuses_what_the_field_does_not_take() {
        let limits = StageLimits {
            max_row_bytes: 4096,
            out: Some((BASE, 16)),
        };
        let mut plan = StagePlan::new(&spec(vec![Some(2)]), limits, 4).unwrap();
        assert_eq!(
            plan.push(&row(DType::F32, &[1, 2], 0x9000)),
            Err(NotStaged::DtypeNotTaken)
        );
        assert_eq!(
            plan.push(&row(DType::I64, &[1, 3], 0x9000)),
            Err(NotStaged::TrailingDims)
        );
        assert_eq!(
            plan.push(&row(DType::I64, &[1, 2], BASE + 8)),
            Err(NotStaged::OverlapsOut)
        );
        plan.push(&row(DType::I64, &[1, 2], 0x9000)).unwrap();
        // The wire dtype is taken, but not mixed with the declared one.
        assert_eq!(
            plan.push(&row(DType::I32, &[1, 2], 0x9000)),
            Err(NotStaged::MixedDtypes)
        );
        assert_eq!(
            StagePlan::new(&spec(vec![None]), limits, 1).unwrap_err(),
            NotStaged::RaggedTrailing
        );
        let empty = StagePlan::new(&spec(vec![]), limits, 0).unwrap();
        assert_eq!(empty.finish(0), Err(NotStaged::NoRows));
    }

    #[test]
    fn the_staging_buffer_is_reserved_once() {
        let limits = StageLimits {
            max_row_bytes: 4096,
            out: None,
        };
        let mut plan = StagePlan::new(&spec(vec![]), limits, 1000).unwrap();
        for _ in 0..ESTIMATE_ROWS {
            assert_eq!(plan.reserve_hint(1000), 0);
            plan.push(&row(DType::I64, &[2], BASE)).unwrap();
        }
        assert_eq!(plan.reserve_hint(1000), 16 * 936 / 8 * 9);
        plan.push(&row(DType::I64, &[2], BASE)).unwrap();
        assert_eq!(plan.reserve_hint(1000), 0);
    }
}
