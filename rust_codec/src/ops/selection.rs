//! What a frame op reads and picks: its sources, the rows it selects, and those rows cut into
//! spans of each source's rows. Shared by the two ways an op writes its output
//! ([`super::direct`] and [`mod@super::gather`]).

use std::collections::BTreeMap;

use crate::encode::input::RowSpan;
use crate::error::{Code, Result};
use crate::frame::layout::FrameLayout;
use crate::frame::located::Source;
use crate::memory::buffer::AlignedBuf;
use crate::schema::spec::meta;
use crate::{argument_err, frame_err};

/// Which rows of the sources' concatenation to take, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rows {
    /// Every row, in order.
    All,
    /// `start, start + step, ...` below `stop` (as Python's `range`; `step` is never 0).
    Range {
        /// The first row taken.
        start: i64,
        /// The bound the rows stop short of.
        stop: i64,
        /// The distance from one row taken to the next; negative walks backwards.
        step: i64,
    },
    /// Explicit row indices; negative ones count from the end, as in Python.
    List(Vec<i64>),
    /// Consecutive row spans `start..stop`, one after another (e.g. an interleaved shard).
    Spans(Vec<(u64, u64)>),
}

impl Rows {
    /// The selected global rows as spans `start..end` of consecutive rows, checked against
    /// `total` rows: O(spans) for ranges of step 1 and spans, O(selected rows) otherwise.
    fn spans(&self, total: u64) -> Result<Vec<(u64, u64)>> {
        let n = i64::try_from(total).map_err(|_| frame_err!("row count {total} overflows"))?;
        let out_of_range = |r: i64| {
            argument_err!("rows: row {r} is out of range for {total} rows").code(Code::RowIndex)
        };
        let mut spans = Spans::default();
        match self {
            Rows::All => spans.push(0, total),
            Rows::Range { start, stop, step } => {
                if *step == 0 {
                    return Err(argument_err!("a row range's step must not be 0"));
                }
                let (start, stop) = (*start as i128, *stop as i128);
                let step = *step as i128;
                let len = if step > 0 {
                    (stop - start + step - 1).max(0) / step
                } else {
                    (start - stop - step - 1).max(0) / -step
                };
                if len > 0 {
                    let last = start + (len - 1) * step;
                    for r in [start, last] {
                        if r < 0 || r >= n as i128 {
                            return Err(out_of_range(r as i64));
                        }
                    }
                    if step == 1 {
                        spans.push(start as u64, (last + 1) as u64);
                    } else {
                        for i in 0..len {
                            let row = (start + i * step) as u64;
                            spans.push(row, row + 1);
                        }
                    }
                }
            }
            Rows::Spans(given) => {
                for &(start, stop) in given {
                    if start > stop || stop > total {
                        return Err(argument_err!(
                            "rows: row span {start}..{stop} is out of range for {total} rows"
                        )
                        .code(Code::RowIndex));
                    }
                    spans.push(start, stop);
                }
            }
            Rows::List(rows) => {
                for &r in rows {
                    let index = if r < 0 { r.checked_add(n) } else { Some(r) };
                    let row = index
                        .filter(|&i| (0..n).contains(&i))
                        .ok_or_else(|| out_of_range(r))? as u64;
                    spans.push(row, row + 1);
                }
            }
        }
        Ok(spans.0)
    }
}

/// Row spans that merge a span starting where the previous one ends.
#[derive(Default)]
struct Spans(Vec<(u64, u64)>);

impl Spans {
    fn push(&mut self, start: u64, end: u64) {
        if start == end {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => self.0.push((start, end)),
        }
    }
}

/// A frame op's output: its bytes and their validated layout.
pub type Output = (AlignedBuf, FrameLayout);

/// `sizes` rows each, one section after another: the ranges of a frame of `num_rows` rows.
pub(super) fn sections(num_rows: u64, sizes: &[u64]) -> Result<Vec<Rows>> {
    let total = sizes.iter().try_fold(0u64, |acc, &s| acc.checked_add(s));
    if total != Some(num_rows) {
        return Err(argument_err!(
            "sections: sizes {sizes:?} do not add up to the frame's {num_rows} rows"
        ));
    }
    let mut start = 0i64;
    Ok(sizes
        .iter()
        .map(|&size| {
            let stop = start + size as i64;
            let rows = Rows::Range {
                start,
                stop,
                step: 1,
            };
            start = stop;
            rows
        })
        .collect())
}

/// The selected rows of the sources' concatenation, cut at source boundaries into spans of each
/// source's rows, in output order.
pub(super) fn picks(sources: &[Source<'_>], rows: &Rows) -> Result<Vec<RowSpan>> {
    let mut starts = Vec::with_capacity(sources.len());
    let mut total = 0u64;
    for s in sources {
        starts.push(total);
        total = total
            .checked_add(s.layout.num_rows)
            .ok_or_else(|| frame_err!("the frames' row counts add up past 2^64"))?;
    }
    let mut picks: Vec<RowSpan> = Vec::new();
    for (mut start, end) in rows.spans(total)? {
        while start < end {
            let s = starts.partition_point(|&st| st <= start) - 1;
            let source_end = starts.get(s + 1).copied().unwrap_or(total).min(end);
            picks.push(RowSpan {
                source: s as u32,
                start: start - starts[s],
                end: source_end - starts[s],
            });
            start = source_end;
        }
    }
    Ok(picks)
}

/// The header entries a frame op's output takes from its first source: all of them but the
/// ones the writer sets (format, row count) and the pre-1.0 field table and sequence field.
pub fn output_metadata(first: &FrameLayout) -> BTreeMap<String, String> {
    let mut metadata = first.header.metadata.clone();
    for key in [
        meta::FORMAT,
        meta::NUM_ROWS,
        meta::FIELDS,
        meta::SEQUENCE_FIELD,
    ] {
        metadata.remove(key);
    }
    metadata
}
