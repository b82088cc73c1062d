//! Micro-batching and sequence packing over a frame's sequence lengths: pure functions of the
//! per-row token counts (the differences of `__seq_offsets`), O(rows log rows) or
//! O(rows × bins), never O(tokens). They return row indices; the caller cuts the frame (or
//! its views) by them.

use crate::argument_err;
use crate::error::Result;

/// `len` rounded up to a multiple of `multiple` (>= 1), checked.
fn round_up(len: u64, multiple: u64) -> Result<u64> {
    len.checked_next_multiple_of(multiple)
        .ok_or_else(|| argument_err!("sequence length {len} overflows when rounded to {multiple}"))
}

fn check_args(max_tokens: u64, multiple: u64) -> Result<()> {
    if max_tokens == 0 {
        return Err(argument_err!("max_tokens must be at least 1"));
    }
    if multiple == 0 {
        return Err(argument_err!("the rounding multiple must be at least 1"));
    }
    Ok(())
}

/// Row order for micro-batching: as given, or stably sorted by length, shortest first (as
/// NeMo-RL's dynamic batching sorts a chunk before cutting it).
fn order(lengths: &[u64], sort: bool) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..lengths.len()).collect();
    if sort {
        rows.sort_by_key(|&r| lengths[r]);
    }
    rows
}

/// How a micro-batch's tokens are counted against the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Rows × the longest row (rounded up to `multiple`): the tokens of the padded `[B, L]`
    /// batch, as NeMo-RL's dynamic batching counts them.
    Padded,
    /// The sum of the rows' lengths (each rounded up to `multiple`): a packed / varlen batch.
    Tokens,
}

/// Greedy token-budget micro-batches: rows are taken in order (or sorted by length, shortest
/// first), and a row that would push the current micro-batch over `max_tokens` starts the
/// next one. A row that alone exceeds the budget is an error naming it.
pub fn micro_batches(
    lengths: &[u64],
    max_tokens: u64,
    sort: bool,
    budget: Budget,
    multiple: u64,
) -> Result<Vec<Vec<usize>>> {
    check_args(max_tokens, multiple)?;
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let (mut sum, mut longest) = (0u64, 0u64);
    for row in order(lengths, sort) {
        let len = round_up(lengths[row], multiple)?;
        if len > max_tokens {
            return Err(argument_err!(
                "the frame's row {row} has {} tokens ({len} rounded to pad_to_multiple_of = {multiple}), more than \
                 max_tokens = {max_tokens}",
                lengths[row]
            ));
        }
        let cost = match budget {
            Budget::Tokens => sum.checked_add(len),
            Budget::Padded => (current.len() as u64 + 1).checked_mul(longest.max(len)),
        };
        if cost.is_none_or(|c| c > max_tokens) && !current.is_empty() {
            out.push(std::mem::take(&mut current));
            sum = 0;
            longest = 0;
        }
        current.push(row);
        sum += len; // <= max_tokens per micro-batch, so it cannot overflow
        longest = longest.max(len);
    }
    if !current.is_empty() {
        out.push(current);
    }
    Ok(out)
}

/// First-fit decreasing: rows sorted by length, longest first (ties by row index), each into
/// the first bin with room, each bin holding at most `max_tokens` tokens (lengths rounded up
/// to `multiple`). Bins are returned in the order they were opened; rows within a bin in the
/// order they were placed. A row that alone exceeds the budget is an error naming it.
pub fn pack_first_fit_decreasing(
    lengths: &[u64],
    max_tokens: u64,
    multiple: u64,
) -> Result<Vec<Vec<usize>>> {
    check_args(max_tokens, multiple)?;
    let mut rounded = Vec::with_capacity(lengths.len());
    for (row, &len) in lengths.iter().enumerate() {
        let r = round_up(len, multiple)?;
        if r > max_tokens {
            return Err(argument_err!(
                "the frame's row {row} has {len} tokens ({r} rounded to pad_to_multiple_of = {multiple}), more than \
                 max_tokens = {max_tokens}"
            ));
        }
        rounded.push(r);
    }
    let mut rows: Vec<usize> = (0..lengths.len()).collect();
    rows.sort_by(|&a, &b| rounded[b].cmp(&rounded[a]).then(a.cmp(&b)));
    let mut bins: Vec<Vec<usize>> = Vec::new();
    let mut room: Vec<u64> = Vec::new();
    for row in rows {
        let len = rounded[row];
        match room.iter().position(|&r| r >= len) {
            Some(b) => {
                bins[b].push(row);
                room[b] -= len;
            }
            None => {
                bins.push(vec![row]);
                room.push(max_tokens - len);
            }
        }
    }
    Ok(bins)
}

/// Row lengths from CSR offsets (`[rows + 1]`, validated non-decreasing by the reader).
pub fn lengths_from_offsets(offsets: &[u64]) -> Vec<u64> {
    offsets
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect()
}

/// The rows data-parallel rank `rank` of `world_size` gets under NeMo-RL's
/// `shard_by_batch_size`: the rows are cut into chunks of `batch_size`, each chunk into
/// `world_size` equal parts, and a rank takes its part of every chunk, in chunk order.
/// Returns half-open row ranges. `batch_size` must divide the rows and `world_size` must
/// divide `batch_size`, unless `allow_uneven` (then `batch_size` is the whole batch and
/// shards are `ceil(rows / world_size)` rows, the last ones shorter or empty).
pub fn interleaved_shard(
    num_rows: u64,
    rank: u64,
    world_size: u64,
    batch_size: Option<u64>,
    allow_uneven: bool,
) -> Result<Vec<(u64, u64)>> {
    if world_size == 0 || rank >= world_size {
        return Err(argument_err!("rank {rank} is not in 0..{world_size}"));
    }
    if allow_uneven && batch_size.is_some() {
        return Err(argument_err!(
            "batch_size must be None when allow_uneven is set"
        ));
    }
    let batch = batch_size.unwrap_or(num_rows);
    if batch == 0 {
        return Ok(Vec::new());
    }
    if !num_rows.is_multiple_of(batch) {
        return Err(argument_err!(
            "the {num_rows} rows are not a multiple of batch_size {batch}"
        ));
    }
    if !allow_uneven && !batch.is_multiple_of(world_size) {
        let what = match batch_size {
            Some(_) => "batch_size",
            None => "num_rows (the batch_size when none is given)",
        };
        return Err(argument_err!(
            "{what} {batch} is not a multiple of world_size {world_size}"
        ));
    }
    let shard = if allow_uneven {
        batch.div_ceil(world_size)
    } else {
        batch / world_size
    };
    let mut ranges = Vec::new();
    for chunk in 0..num_rows / batch {
        let base = chunk * batch;
        let start = (base + rank * shard).min(num_rows);
        let end = (base + (rank + 1) * shard).min(num_rows);
        if start < end {
            ranges.push((start, end));
        }
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_budget_in_order_and_sorted() {
        let lens = [5, 3, 8, 2, 2];
        let mb = micro_batches(&lens, 10, false, Budget::Tokens, 1).unwrap();
        assert_eq!(mb, vec![vec![0, 1], vec![2, 3], vec![4]]);
        let mb = micro_batches(&lens, 10, true, Budget::Tokens, 1).unwrap();
        assert_eq!(mb, vec![vec![3, 4, 1], vec![0], vec![2]]);
        // Padded: rows x longest. [5, 3] costs 10; adding 8 would cost 24.
        let mb = micro_batches(&lens, 10, false, Budget::Padded, 1).unwrap();
        assert_eq!(mb, vec![vec![0, 1], vec![2], vec![3, 4]]);
        // Rounded to 4: lengths 8, 4, 8, 4, 4.
        let mb = micro_batches(&lens, 12, false, Budget::Tokens, 4).unwrap();
        assert_eq!(mb, vec![vec![0, 1], vec![2, 3], vec![4]]);
    }

    #[test]
    fn every_row_once_and_budget_kept() {
        let lens: Vec<u64> = (0..200).map(|i| (i * 37 % 61) + 1).collect();
        for budget in [Budget::Tokens, Budget::Padded] {
            for sort in [false, true] {
                let mb = micro_batches(&lens, 100, sort, budget, 1).unwrap();
                let mut seen: Vec<usize> = mb.iter().flatten().copied().collect();
                seen.sort();
                assert_eq!(seen, (0..200).collect::<Vec<_>>());
                for b in &mb {
                    let cost = match budget {
                        Budget::Tokens => b.iter().map(|&r| lens[r]).sum::<u64>(),
                        Budget::Padded => {
                            b.len() as u64 * b.iter().map(|&r| lens[r]).max().unwrap()
                        }
                    };
                    assert!(cost <= 100);
                }
            }
        }
    }

    #[test]
    fn too_long_a_row_is_named() {
        let err = micro_batches(&[3, 11], 10, false, Budget::Tokens, 1).unwrap_err();
        assert!(err.message().contains("row 1 has 11 tokens"), "{err}");
        let err = pack_first_fit_decreasing(&[3, 9], 10, 4).unwrap_err();
        assert!(err.message().contains("row 1"), "{err}");
        assert!(micro_batches(&[1], 0, false, Budget::Tokens, 1).is_err());
        assert!(pack_first_fit_decreasing(&[1], 10, 0).is_err());
        assert!(micro_batches(&[u64::MAX], 10, false, Budget::Tokens, 3).is_err());
    }

    #[test]
    fn first_fit_decreasing() {
        let bins = pack_first_fit_decreasing(&[4, 8, 1, 4, 2, 1], 10, 1).unwrap();
        // Sorted: 8(1), 4(0), 4(3), 2(4), 1(2), 1(5).
        assert_eq!(bins, vec![vec![1, 4], vec![0, 3, 2, 5]]);
        assert!(pack_first_fit_decreasing(&[], 10, 1).unwrap().is_empty());
        let lens: Vec<u64> = (0..500).map(|i| (i * 53 % 97) + 1).collect();
        let bins = pack_first_fit_decreasing(&lens, 256, 1).unwrap();
        let mut seen: Vec<usize> = bins.iter().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..500).collect::<Vec<_>>());
        let total: u64 = lens.iter().sum();
        for b in &bins {
            assert!(b.iter().map(|&r| lens[r]).sum::<u64>() <= 256);
        }
        // FFD uses at most 11/9 OPT + 1 bins; OPT >= total / capacity.
        assert!((bins.len() as u64) * 9 <= 11 * total.div_ceil(256) + 9);
    }

    #[test]
    fn interleaved_shards_match_nemo_rl() {
        // [A A B B C C D D], batch_size 4, 2 shards: rank 0 gets A A C C, rank 1 B B D D.
        assert_eq!(
            interleaved_shard(8, 0, 2, Some(4), false).unwrap(),
            vec![(0, 2), (4, 6)]
        );
        assert_eq!(
            interleaved_shard(8, 1, 2, Some(4), false).unwrap(),
            vec![(2, 4), (6, 8)]
        );
        assert_eq!(
            interleaved_shard(8, 1, 2, None, false).unwrap(),
            vec![(4, 8)]
        );
        // Uneven: 5 rows over 2 ranks: [0, 3) and [3, 5).
        assert_eq!(
            interleaved_shard(5, 0, 2, None, true).unwrap(),
            vec![(0, 3)]
        );
        assert_eq!(
            interleaved_shard(5, 1, 2, None, true).unwrap(),
            vec![(3, 5)]
        );
        assert!(interleaved_shard(8, 0, 3, Some(4), false).is_err());
        assert!(interleaved_shard(8, 0, 2, Some(3), false).is_err());
        assert!(interleaved_shard(8, 2, 2, None, false).is_err());
        assert!(interleaved_shard(5, 0, 2, Some(5), true).is_err());
    }

    #[test]
    fn lengths() {
        assert_eq!(lengths_from_offsets(&[0, 3, 3, 7]), vec![3, 0, 4]);
    }
}
