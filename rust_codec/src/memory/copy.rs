//! The one payload copy: strided gathers, fused dtype casts and multi-threaded bulk copies.

use crate::error::Result;
use crate::memory::stream::Stores;
use crate::schema::cast;
use crate::schema::dtype::DType;
use crate::tensor::TensorRef;
use crate::{argument_err, internal_err};

/// Copies below this many bytes per thread are not worth a thread.
pub const DEFAULT_PARALLEL_THRESHOLD: usize = 8 << 20;
/// The most bytes one thread's piece of a shared copy holds.
pub(crate) const CHUNK: usize = 4 << 20;

/// One copy: all of `src`, in C order, cast to `dst_dtype`, into `dst_offset..` of the output.
#[derive(Debug, Clone)]
pub struct CopyJob<'a> {
    /// The tensor to copy, in C order.
    pub src: TensorRef<'a>,
    /// The dtype the output holds (a cast when it differs from the source's).
    pub dst_dtype: DType,
    /// Where the copy starts in the output, in bytes.
    pub dst_offset: usize,
}

impl CopyJob<'_> {
    /// The bytes the copy writes: the source's element count times the destination dtype's size.
    pub fn dst_len(&self) -> usize {
        (self.src.numel() as usize) * self.dst_dtype.size()
    }
}

/// Calls `run(src_run)` for each maximal contiguous run of `src` in C order.
fn for_each_run(src: &TensorRef<'_>, mut run: impl FnMut(&[u8])) {
    let es = src.dtype.size();
    if src.numel() == 0 {
        return;
    }
    if src.is_contiguous() {
        run(&src.bytes[..src.nbytes() as usize]);
        return;
    }
    // Collapse the innermost dims that are contiguous into one run.
    let rank = src.shape.len();
    let mut inner = 1u64;
    let mut outer_rank = rank;
    while outer_rank > 0 {
        let d = outer_rank - 1;
        if src.shape[d] == 1 || src.strides[d] == inner {
            inner *= src.shape[d];
            outer_rank -= 1;
        } else {
            break;
        }
    }
    let run_bytes = inner as usize * es;
    let shape = &src.shape[..outer_rank];
    let strides = &src.strides[..outer_rank];
    let mut index = vec![0u64; outer_rank];
    let mut offset = 0u64;
    loop {
        let start = offset as usize * es;
        run(&src.bytes[start..start + run_bytes]);
        // Odometer increment over the outer dims.
        let mut d = outer_rank;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            offset += strides[d];
            if index[d] < shape[d] {
                break;
            }
            offset -= strides[d] * shape[d];
            index[d] = 0;
        }
    }
}

/// Copies (and casts) all of `src` into `dst`, which must be exactly `numel * dst_dtype.size()`,
/// with ordinary stores.
pub fn copy_tensor(src: &TensorRef<'_>, dst_dtype: DType, dst: &mut [u8]) -> Result<()> {
    copy_tensor_with(src, dst_dtype, dst, &mut Stores::new(false))
}

/// Cast output of a streamed copy is staged in pieces this large (L1-resident), then streamed.
const CAST_STAGE: usize = 4096;

/// [`copy_tensor`] through `stores` (ordinary or streaming). A cast stays fused into the one
/// pass: with streaming stores each run is cast into a small buffer that stays in L1 and
/// streamed out from there.
pub fn copy_tensor_with(
    src: &TensorRef<'_>,
    dst_dtype: DType,
    dst: &mut [u8],
    stores: &mut Stores,
) -> Result<()> {
    let expected = src.numel() as usize * dst_dtype.size();
    if dst.len() != expected {
        return Err(internal_err!(
            "copy destination is {} bytes, expected {expected}",
            dst.len()
        ));
    }
    let mut pos = 0usize;
    let ratio_num = dst_dtype.size();
    let ratio_den = src.dtype.size();
    let mut result = Ok(());
    // Zeroed only when a streamed cast needs it: most copies (same dtype) never do, and a
    // frame op makes one call per field and span.
    let mut stage: Option<[u8; CAST_STAGE]> = None;
    for_each_run(src, |run| {
        if result.is_err() {
            return;
        }
        let out_len = run.len() / ratio_den * ratio_num;
        let out = &mut dst[pos..pos + out_len];
        pos += out_len;
        if src.dtype == dst_dtype {
            stores.copy(out, run);
        } else if !stores.streaming() || out_len < crate::memory::stream::MIN_STREAMED_RUN {
            if let Err(e) = cast::cast_run(src.dtype, dst_dtype, run, out) {
                result = Err(e);
            }
        } else {
            // Whole elements per piece: CAST_STAGE is a multiple of every dtype size.
            let out_piece = CAST_STAGE / ratio_num.max(ratio_den) * ratio_num;
            let in_piece = out_piece / ratio_num * ratio_den;
            let stage = stage.get_or_insert([0u8; CAST_STAGE]);
            for (s, d) in run.chunks(in_piece).zip(out.chunks_mut(out_piece)) {
                let staged = &mut stage[..d.len()];
                if let Err(e) = cast::cast_run(src.dtype, dst_dtype, s, staged) {
                    result = Err(e);
                    return;
                }
                stores.copy(d, staged);
            }
        }
    });
    result
}

/// A piece of work for one thread: a job, or a byte range of a contiguous same-dtype job.
struct Task<'j, 'a> {
    job: &'j CopyJob<'a>,
    /// Byte range within the job's output (and, for split tasks, its source).
    range: std::ops::Range<usize>,
    whole: bool,
}

/// Runs every job into `out`. Jobs must write disjoint ranges, sorted by `dst_offset`.
/// Uses up to `threads` threads when the total exceeds `threshold` bytes per thread, and
/// streaming stores if `streaming` (see [`crate::memory::stream::streams`]); each thread fences
/// its own stores before it finishes (the `Stores` it drops).
pub fn run_jobs(
    jobs: &[CopyJob<'_>],
    out: &mut [u8],
    threads: usize,
    threshold: usize,
    streaming: bool,
) -> Result<()> {
    let total: usize = jobs.iter().map(|j| j.dst_len()).sum();
    let threads = copy_threads(total, threads, threshold);
    let mut tasks = Vec::with_capacity(jobs.len());
    for job in jobs {
        let len = job.dst_len();
        let splittable = threads > 1 && job.src.dtype == job.dst_dtype && job.src.is_contiguous();
        if splittable && len > CHUNK {
            let mut start = 0;
            while start < len {
                let end = (start + CHUNK).min(len);
                tasks.push(Task {
                    job,
                    range: start..end,
                    whole: false,
                });
                start = end;
            }
        } else {
            tasks.push(Task {
                job,
                range: 0..len,
                whole: true,
            });
        }
    }
    // Carve `out` into one disjoint slice per task, in order.
    let mut slices: Vec<(&Task, &mut [u8])> = Vec::with_capacity(tasks.len());
    let mut rest: &mut [u8] = out;
    let mut consumed = 0usize;
    for task in &tasks {
        let begin = task.job.dst_offset + task.range.start;
        let end = task.job.dst_offset + task.range.end;
        if begin < consumed || end > consumed + rest.len() {
            return Err(internal_err!("overlapping copy jobs"));
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(begin - consumed);
        let (mine, tail) = tail.split_at_mut(end - begin);
        slices.push((task, mine));
        rest = tail;
        consumed = end;
    }
    let run_one = |task: &Task, dst: &mut [u8], stores: &mut Stores| -> Result<()> {
        if task.whole {
            copy_tensor_with(&task.job.src, task.job.dst_dtype, dst, stores)
        } else {
            stores.copy(dst, &task.job.src.bytes[task.range.clone()]);
            Ok(())
        }
    };
    let run_all = |items: &mut [(&Task, &mut [u8])]| -> Result<()> {
        let mut stores = Stores::new(streaming);
        items
            .iter_mut()
            .try_for_each(|(t, d)| run_one(t, d, &mut stores))
    };
    if threads == 1 {
        return run_all(&mut slices);
    }
    on_threads(
        share_by_bytes(&mut slices, threads, |item| item.1.len()),
        run_all,
    )
}

/// Packs each of `srcs`, in C order and its own dtype, into `out` at the matching byte offset
/// of `offsets` (ascending, each piece inside `out`, no two overlapping), on up to `threads`
/// threads. The bytes of `out` between pieces are left as they are. This is a micro-batch's
/// host staging buffer filled before one transfer to a device.
pub fn pack(
    srcs: &[TensorRef<'_>],
    offsets: &[usize],
    out: &mut [u8],
    threads: usize,
    threshold: usize,
) -> Result<()> {
    if srcs.len() != offsets.len() {
        return Err(argument_err!(
            "pack: {} tensors but {} offsets",
            srcs.len(),
            offsets.len()
        ));
    }
    let mut end_of_previous = 0usize;
    let mut jobs = Vec::with_capacity(srcs.len());
    for (i, (src, &offset)) in srcs.iter().zip(offsets).enumerate() {
        let len = usize::try_from(src.nbytes()).map_err(|_| {
            argument_err!(
                "pack: tensor {i} holds {} bytes, past this machine's address space",
                src.nbytes()
            )
        })?;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= out.len())
            .ok_or_else(|| {
                argument_err!(
                "pack: tensor {i} ({len} bytes at offset {offset}) does not fit the {}-byte buffer",
                out.len()
            )
            })?;
        if offset < end_of_previous {
            return Err(argument_err!(
                "pack: tensor {i} starts at offset {offset}, inside the piece before it (which \
                 ends at {end_of_previous}): offsets must ascend and pieces not overlap"
            ));
        }
        end_of_previous = end;
        jobs.push(CopyJob {
            src: src.clone(),
            dst_dtype: src.dtype,
            dst_offset: offset,
        });
    }
    let streaming = crate::memory::stream::streams(out.len());
    run_jobs(&jobs, out, threads, threshold, streaming)
}

/// How many threads copy `total` bytes: at most `threads`, each with at least `threshold`.
pub(crate) fn copy_threads(total: usize, threads: usize, threshold: usize) -> usize {
    threads.max(1).min(total / threshold.max(1)).max(1)
}

/// `items` cut into at most `threads` runs of consecutive items, one per thread, each about an
/// equal share of the bytes (`len` of each item); the last takes what is left.
pub(crate) fn share_by_bytes<T>(
    items: &mut [T],
    threads: usize,
    len: impl Fn(&T) -> usize,
) -> Vec<&mut [T]> {
    let share = items
        .iter()
        .map(&len)
        .sum::<usize>()
        .div_ceil(threads.max(1));
    let mut groups = Vec::with_capacity(threads);
    let mut remaining = items;
    while !remaining.is_empty() {
        let (mut filled, mut take) = (0, 0);
        while take < remaining.len() && (filled < share || groups.len() + 1 >= threads) {
            filled += len(&remaining[take]);
            take += 1;
        }
        let (group, after) = std::mem::take(&mut remaining).split_at_mut(take);
        groups.push(group);
        remaining = after;
    }
    groups
}

/// Runs `work` on each group, one scoped thread per group; the first error (or a panic, as an
/// `InternalError`) is the result.
pub(crate) fn on_threads<G: Send>(
    groups: Vec<G>,
    work: impl Fn(G) -> Result<()> + Sync,
) -> Result<()> {
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|g| scope.spawn(move || work(g)))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(internal_err!("a copy thread panicked")))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gather_reference(src: &TensorRef<'_>) -> Vec<u8> {
        let es = src.dtype.size();
        let n = src.numel() as usize;
        let mut out = Vec::with_capacity(n * es);
        for flat in 0..n {
            let mut rem = flat as u64;
            let mut off = 0u64;
            for d in (0..src.shape.len()).rev() {
                off += (rem % src.shape[d]) * src.strides[d];
                rem /= src.shape[d];
            }
            let b = off as usize * es;
            out.extend_from_slice(&src.bytes[b..b + es]);
        }
        out
    }

    #[test]
    fn pack_places_each_tensor_at_its_offset_and_leaves_the_gaps() {
        let a: Vec<u8> = (0..40u8).collect();
        let b: Vec<u8> = (100..112u8).collect();
        let ta = TensorRef::contiguous(DType::F32, &[10], &a).unwrap();
        // Every other row of a 3x2 i16 tensor: a strided source, gathered in C order.
        let tb = TensorRef::strided(DType::I16, &[2, 2], &[4, 1], &b).unwrap();
        let mut out = vec![0xAAu8; 64 + 8];
        pack(&[ta, tb], &[0, 64], &mut out, 4, 1).unwrap();
        assert_eq!(&out[..40], &a[..]);
        assert!(out[40..64].iter().all(|&x| x == 0xAA));
        assert_eq!(&out[64..72], &[100, 101, 102, 103, 108, 109, 110, 111]);
    }

    #[test]
    fn pack_refuses_pieces_that_overlap_or_do_not_fit() {
        let a = [0u8; 16];
        let t = TensorRef::contiguous(DType::U8, &[16], &a).unwrap();
        let mut out = [0u8; 32];
        let err = |offsets: &[usize], n: usize| {
            let srcs = vec![t.clone(); n];
            let mut out = out;
            pack(&srcs, offsets, &mut out, 1, 1)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[0, 8], 2).contains("inside the piece before it"));
        assert!(err(&[20], 1).contains("does not fit the 32-byte buffer"));
        assert!(err(&[usize::MAX], 1).contains("does not fit"));
        assert!(err(&[0, 16], 1).contains("1 tensors but 2 offsets"));
        pack(&[t.clone(), t], &[0, 16], &mut out, 2, 1).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn strided_copy_matches_reference(
            shape in proptest::collection::vec(0u64..5, 0..4),
            perm_seed in any::<u64>(),
            pad in 0u64..3,
        ) {
            // Build strides from a permuted, padded layout.
            let rank = shape.len();
            let mut order: Vec<usize> = (0..rank).collect();
            let mut seed = perm_seed;
            for i in (1..rank).rev() {
                let j = (seed % (i as u64 + 1)) as usize;
                seed /= i as u64 + 1;
                order.swap(i, j);
            }
            let mut strides = vec![0u64; rank];
            let mut acc = 1u64;
            for &d in order.iter().rev() {
                strides[d] = acc;
                acc *= shape[d].max(1) + pad;
            }
            let bytes: Vec<u8> = (0..(acc as usize * 4 + 8)).map(|i| i as u8).collect();
            let t = TensorRef::strided(DType::F32, &shape, &strides, &bytes).unwrap();
            let mut out = vec![0u8; t.nbytes() as usize];
            copy_tensor(&t, DType::F32, &mut out).unwrap();
            prop_assert_eq!(out, gather_reference(&t));
        }
    }

    #[test]
    fn streamed_copies_and_casts_match_ordinary_ones() {
        let bytes: Vec<u8> = (0..40_100u32).map(|i| (i * 7 % 251) as u8).collect();
        for numel in [0usize, 1, 127, 128, 129, 1025, 4096, 9_999] {
            for offset in [0usize, 4, 36] {
                let src = &bytes[offset..offset + numel * 4];
                let t = TensorRef::contiguous(DType::F32, &[numel as u64], src).unwrap();
                for dst_dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
                    let len = numel * dst_dtype.size();
                    let mut plain = vec![0u8; len + 3];
                    let mut streamed = vec![0u8; len + 3];
                    copy_tensor(&t, dst_dtype, &mut plain[3..]).unwrap();
                    let mut stores = Stores::new(true);
                    copy_tensor_with(&t, dst_dtype, &mut streamed[3..], &mut stores).unwrap();
                    drop(stores);
                    assert_eq!(plain, streamed, "{numel} f32 -> {dst_dtype:?} at {offset}");
                }
            }
        }
    }

    #[test]
    fn parallel_jobs_fill_disjoint_ranges() {
        let a: Vec<u8> = (0..10_000_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..3_000u32).map(|i| (i % 13) as u8).collect();
        let ta = TensorRef::contiguous(DType::U8, &[a.len() as u64], &a).unwrap();
        let tb = TensorRef::contiguous(DType::U8, &[b.len() as u64], &b).unwrap();
        let jobs = vec![
            CopyJob {
                src: ta,
                dst_dtype: DType::U8,
                dst_offset: 64,
            },
            CopyJob {
                src: tb,
                dst_dtype: DType::U8,
                dst_offset: 64 + a.len() + 64,
            },
        ];
        let mut out = vec![0u8; 64 + a.len() + 64 + b.len()];
        run_jobs(&jobs, &mut out, 4, 1 << 20, false).unwrap();
        assert_eq!(&out[64..64 + a.len()], &a[..]);
        assert_eq!(&out[128 + a.len()..], &b[..]);
        assert!(out[..64].iter().all(|&x| x == 0));
    }
}
