//! The staged tiny-row reader's decisions (`encode::staged`: `check_row`, `StagePlan`), driven
//! with arbitrary row descriptions over a simulated address space, as `python/staged.rs`
//! drives them with the numbers torch reports; and the full reader's checks (the storage rule
//! of `held_view`, `TensorRef::strided`, then `encode`'s per-row checks) on the same rows.
//!
//! Asserted: never a panic; a row is staged only when its bytes lie inside its storage (an
//! independent u128 oracle, before any byte is read); the staging offsets are consistent
//! (`at` is the bytes staged so far, each row's items its dim 0, none for a large row, the
//! values' dim 0 their total); no accepted row overlaps `out`; and differentially: rows the
//! staged reader accepts encode exactly as the full reader's views of them do (the same frame
//! bytes, or both refused by `encode`), and a refusal the staged reader marks
//! `full_reader_refuses` is a refusal of the full reader too.
//!
//! Input (missing bytes read as 0):
//!   [spec dtype, flags, trailing dims (flags & 3, mod 3, each u8 % 5), wire dtype,
//!    max_row_bytes u16, out addr u16 + len u16, arena len u16, rows u8 (% 72)]
//!   then per row: [mode, (dtype), (rank), dims, (strides), storage start u16 + len u16,
//!    (base u64), pointer delta i16 or (pointer u64)]
//!   flags: bit 2 wire dtype, bit 3 a ragged trailing dim, bit 4 max_row_bytes = 4096,
//!   bit 5 `out` set. mode: bit 0 own dtype, bit 1 own rank, bit 2 own strides, bit 3 own
//!   storage base address, bit 4 own data pointer. A dim byte 0xff reads a u64 instead.
#![no_main]

use libfuzzer_sys::fuzz_target;
use py_wire_codec::encode::staged::{
    check_row, Placement, RowFacts, StageLimits, StagePlan, STAGE_MAX_ROW_BYTES,
};
use py_wire_codec::encode::{encode, EncodeOptions, EncodeRequest, FieldData, FieldInput};
use py_wire_codec::tensor::{contiguous_strides, extent_bytes, span_in_storage, TensorRef};
use py_wire_codec::{DType, FieldSpec, Tier};

mod common;

use common::Bytes;

/// A dim: a byte % 16, or after 0xff a u64.
fn dim(input: &mut Bytes<'_>) -> u64 {
    match input.u8() {
        0xff => input.u64(),
        b => u64::from(b % 16),
    }
}

const ARENA_MAX: usize = 8192;
/// The largest total of logical row bytes the full reader is asked to encode.
const FULL_MAX_BYTES: u128 = 1 << 20;
/// Fake address of the arena's first byte (a storage's default base is this plus its start).
const ARENA_ADDR: usize = 0x7f00_0000_0000;

/// One row: what torch would report, and where its storage's bytes are in the arena.
struct Row {
    dtype: DType,
    shape: Vec<u64>,
    strides: Vec<u64>,
    data_ptr: usize,
    storage_ptr: usize,
    /// The storage's bytes: `arena[start..start + len]`.
    start: usize,
    len: usize,
}

impl Row {
    fn facts(&self) -> RowFacts<'_> {
        RowFacts {
            dtype: self.dtype,
            shape: &self.shape,
            strides: &self.strides,
            data_ptr: self.data_ptr,
            storage_ptr: self.storage_ptr,
            storage_nbytes: self.len,
        }
    }

    /// The full reader's view (`held_view`): extent from shape and strides, inside the
    /// storage by `span_in_storage`, then `TensorRef::strided`.
    fn full_view<'a>(&self, arena: &'a [u8], strides: &[u64]) -> Option<TensorRef<'a>> {
        let extent = extent_bytes(&self.shape, strides, self.dtype.size())?;
        let bytes: &'a [u8] = if extent == 0 {
            &[]
        } else {
            let off = span_in_storage(self.data_ptr, extent, self.storage_ptr, self.len)?;
            let storage = &arena[self.start..self.start + self.len];
            &storage[off..off + extent as usize]
        };
        TensorRef::strided(self.dtype, &self.shape, strides, bytes).ok()
    }
}

/// The oracle: `[ptr, ptr + nbytes)` inside `[base, base + len)`, in u128.
fn inside(ptr: usize, nbytes: usize, base: usize, len: usize) -> bool {
    let (p, n, b, l) = (ptr as u128, nbytes as u128, base as u128, len as u128);
    p >= b && p + n <= b + l
}

fn encode_one(spec: &FieldSpec, input: FieldInput<'_>) -> Result<Vec<u8>, String> {
    let request = EncodeRequest {
        fields: vec![FieldData {
            spec: spec.clone(),
            input,
        }],
        sequence_field: Some(spec.name.clone()),
        ..Default::default()
    };
    let options = EncodeOptions {
        threads: 1,
        parallel_threshold: usize::MAX,
        operation_bytes: 0,
    };
    encode(&request, options)
        .map(|buf| buf.as_slice().to_vec())
        .map_err(|e| format!("{e:?}"))
}

fuzz_target!(|data: &[u8]| {
    let dtypes: Vec<DType> = DType::all().collect();
    let pick = |b: u8| dtypes[b as usize % dtypes.len()];
    let mut input = Bytes(data);
    let dtype = pick(input.u8());
    let flags = input.u8();
    let trailing_rank = (flags & 3) % 3;
    let mut shape: Vec<Option<u64>> = (0..trailing_rank)
        .map(|_| Some(u64::from(input.u8() % 5)))
        .collect();
    if flags & 8 != 0 && !shape.is_empty() {
        shape[0] = None;
    }
    let wire = pick(input.u8());
    let spec = FieldSpec {
        name: "input_ids".into(),
        tier: Tier::PerToken,
        dtype,
        wire_dtype: (flags & 4 != 0).then_some(wire),
        shape,
        pack_dim: 0,
    };
    if spec.validate().is_err() {
        return;
    }
    let max_row_bytes = input.u16() as usize;
    let out = (input.u16() as usize, input.u16() as usize);
    let limits = StageLimits {
        max_row_bytes: if flags & 16 != 0 {
            STAGE_MAX_ROW_BYTES
        } else {
            max_row_bytes
        },
        out: (flags & 32 != 0).then_some((ARENA_ADDR + out.0, out.1)),
    };
    let arena_len = input.u16() as usize % (ARENA_MAX + 1);
    let arena: Vec<u8> = (0..arena_len)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 8)) as u8)
        .collect();
    let n_rows = input.u8() as usize % 72;
    let rank = 1 + spec.shape.len();
    let mut rows = Vec::with_capacity(n_rows);
    for _ in 0..n_rows {
        let mode = input.u8();
        let dtype = if mode & 1 != 0 {
            pick(input.u8())
        } else {
            dtype
        };
        let rank = if mode & 2 != 0 {
            (input.u8() % 4) as usize
        } else {
            rank
        };
        let shape: Vec<u64> = (0..rank).map(|_| dim(&mut input)).collect();
        let strides = if mode & 4 != 0 {
            (0..rank).map(|_| dim(&mut input)).collect()
        } else {
            contiguous_strides(&shape)
        };
        let start = input.u16() as usize % (arena_len + 1);
        let len = (input.u16() as usize).min(arena_len - start);
        let storage_ptr = if mode & 8 != 0 {
            input.u64() as usize
        } else {
            ARENA_ADDR + start
        };
        let data_ptr = if mode & 16 != 0 {
            input.u64() as usize
        } else {
            let delta = input.u16() as i16 as isize;
            storage_ptr.wrapping_add_signed(delta)
        };
        rows.push(Row {
            dtype,
            shape,
            strides,
            data_ptr,
            storage_ptr,
            start,
            len,
        });
    }

    // The full reader: every row's view, then encode's checks. It copies a strided row
    // element by element, so a broadcast row (stride 0: `expand()`) of a few bytes can mean
    // gigabytes of frame; inputs whose rows hold over FULL_MAX_BYTES are not encoded (`None`).
    // The staged reader never accepts those: its rows are contiguous, inside the arena.
    let logical: u128 = rows
        .iter()
        .map(|r| {
            r.shape
                .iter()
                .fold(r.dtype.size() as u128, |a, &d| a.saturating_mul(d as u128))
        })
        .fold(0u128, |a, b| a.saturating_add(b));
    let full: Option<Result<Vec<u8>, String>> = (logical <= FULL_MAX_BYTES).then(|| {
        rows.iter()
            .map(|r| {
                r.full_view(&arena, &r.strides)
                    .ok_or_else(|| "view".to_string())
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(|segments| {
                let row_offsets = (0..=segments.len() as u64).collect();
                encode_one(
                    &spec,
                    FieldInput::Segments {
                        segments,
                        row_offsets,
                    },
                )
            })
    });

    // The staged reader, as python/staged.rs drives it.
    let mut staging: Vec<u8> = Vec::new();
    let mut large: Vec<TensorRef<'_>> = Vec::new();
    let staged = (|| {
        let mut plan = StagePlan::new(&spec, limits, rows.len())?;
        assert_eq!(plan.rank(), rank);
        for (i, r) in rows.iter().enumerate() {
            let row = check_row(&r.facts(), plan.rank())?;
            assert_eq!(
                (row.ptr, row.dtype, &row.shape[..]),
                (r.data_ptr, r.dtype, &r.shape[..])
            );
            if row.nbytes > 0 {
                assert!(
                    inside(row.ptr, row.nbytes, r.storage_ptr, r.len),
                    "row {i} accepted outside its storage: {} bytes at {:#x}, storage {} at {:#x}",
                    row.nbytes,
                    row.ptr,
                    r.len,
                    r.storage_ptr
                );
            }
            let reserve = plan.reserve_hint(rows.len());
            match plan.push(&row)? {
                Placement::Stage { at, len } => {
                    assert_eq!((at, len), (staging.len(), row.nbytes), "row {i}: placement");
                    assert!(len <= limits.max_row_bytes);
                    staging.reserve(reserve.min(1 << 20));
                    if len > 0 {
                        let off = r.start + (row.ptr - r.storage_ptr);
                        staging.extend_from_slice(&arena[off..off + len]);
                    }
                }
                Placement::Large { index } => {
                    assert_eq!(index, large.len());
                    assert!(row.nbytes > limits.max_row_bytes);
                    // python: held_view with contiguous strides, refused → the full reader.
                    let strides = contiguous_strides(&row.shape);
                    let Some(view) = r.full_view(&arena, &strides) else {
                        return Err(None);
                    };
                    large.push(view);
                }
            }
            if let Some((start, len)) = limits.out {
                let (p, n, s, l) = (
                    row.ptr as u128,
                    row.nbytes as u128,
                    start as u128,
                    len as u128,
                );
                assert!(n == 0 || p >= s + l || s >= p + n, "row {i} overlaps out");
            }
        }
        let field = plan.finish(staging.len())?;
        Ok(field)
    })();

    match staged {
        Ok(field) => {
            // Offsets: from 0, one per row plus one, each row's items its dim 0 (none for a
            // large row), the staging buffer exactly the staged items.
            assert_eq!(field.offsets.len(), rows.len() + 1);
            assert_eq!(field.offsets[0], 0);
            let mut n_large = 0;
            for (i, (w, r)) in field.offsets.windows(2).zip(&rows).enumerate() {
                let nbytes = r.shape.iter().product::<u64>() as usize * r.dtype.size();
                let want = if nbytes <= limits.max_row_bytes {
                    r.shape[0]
                } else {
                    n_large += 1;
                    0
                };
                assert_eq!(w[1].checked_sub(w[0]), Some(want), "row {i}: offsets");
            }
            assert_eq!(n_large, large.len());
            assert_eq!(field.values_shape[0], field.offsets[rows.len()]);
            assert_eq!(field.values_shape[1..], rows[0].shape[1..]);
            assert_eq!(field.spans.is_some(), n_large > 0);
            let values = TensorRef::contiguous(field.dtype, &field.values_shape, &staging)
                .expect("the staging buffer holds the staged values");
            let input = match field.spans {
                None => FieldInput::Jagged {
                    values,
                    offsets: field.offsets,
                },
                Some(spans) => {
                    assert_eq!(spans.num_rows(), rows.len() as u64);
                    let mut sources = vec![values];
                    sources.extend(large);
                    FieldInput::Ranges { sources, spans }
                }
            };
            // What encode makes of each reader's rows: the same frame, or both refused (a
            // staged field goes to the same `encode`, which may still refuse it: sequence
            // lengths past i64, say).
            let fast = encode_one(&spec, input);
            let full = full.expect("staged rows are few bytes");
            match (fast, full) {
                (Ok(fast), Ok(full)) => {
                    assert!(
                        fast == full,
                        "staged and full readers encode different frames"
                    )
                }
                (Err(_), Err(_)) => {}
                (Ok(_), Err(e)) => {
                    panic!("staged reader accepted rows the full reader refuses: {e}")
                }
                (Err(e), Ok(_)) => {
                    panic!("staged rows did not encode, the full reader's did: {e}")
                }
            }
        }
        Err(Some(reason)) => {
            assert_ne!(
                reason,
                py_wire_codec::encode::staged::NotStaged::Inconsistent,
                "the plan disagreed with its own staging"
            );
            if let (true, Some(full)) = (reason.full_reader_refuses(), full) {
                assert!(
                    full.is_err(),
                    "staged reader refused ({reason:?}) rows the full reader accepts"
                );
            }
        }
        Err(None) => {}
    }
});
