//! Placeholder-run scanning and feature-count contracts.
//!
//! A vision-language model's token sequence holds, for every image, one run of an image
//! placeholder token whose length is the number of features the vision tower produces for that
//! image (Qwen2.5-VL: `t*h*w / merge_size^2`; Gemma3: 256; Nemotron:
//! `int((H // P) * ratio) * int((W // P) * ratio)`). The contract: in each row, the i-th run of
//! the placeholder token is as long as the i-th image of that row has features. A mismatch
//! crashes the model's forward pass deep inside a trainer; checked here, it is refused at the
//! producer with the row, the image and both counts.

use crate::error::{Code, Error, Result};
use crate::{batch_err, contract_err, schema_err};

/// Placeholder runs found in each row: CSR over runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunTable {
    /// len = rows + 1; runs of row r are `run_starts[row_offsets[r]..row_offsets[r+1]]`.
    pub row_offsets: Vec<u64>,
    /// Start position of each run, relative to the start of its row.
    pub run_starts: Vec<u64>,
    /// Tokens in each run, in the order of `run_starts`.
    pub run_lengths: Vec<u64>,
}

/// Check CSR offsets: at least one entry, starting at 0, never decreasing, ending at `total`.
/// Returns the number of rows. Every entry is then at most `total`, a `usize`, so converting an
/// entry with `as usize` afterwards is exact.
fn check_offsets(offsets: &[u64], total: usize, what: &str, of: &str) -> Result<usize> {
    let Some((&first, _)) = offsets.split_first() else {
        return Err(batch_err!(
            "{what} is empty; it needs one entry per row plus one, starting at 0"
        ));
    };
    if first != 0 {
        return Err(batch_err!(
            "{what}[0] is {first}; the offsets of the first row must start at 0"
        ));
    }
    for (i, w) in offsets.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(batch_err!(
                "{what} decreases at row {i}: {what}[{}] = {} is less than {what}[{i}] = {}",
                i + 1,
                w[1],
                w[0]
            ));
        }
    }
    let last = offsets[offsets.len() - 1];
    if u64::try_from(total).ok() != Some(last) {
        return Err(batch_err!(
            "{what} ends at {last} but {of} has {total} entries"
        ));
    }
    Ok(offsets.len() - 1)
}

/// Index of the first token in `hay` that is `token_id` (`EQ`) or is not (`!EQ`). Blocks of 16
/// are tested with a branch-free reduction that LLVM vectorises; only the block holding the
/// answer is searched token by token.
#[inline(always)]
fn find<const EQ: bool>(hay: &[i64], token_id: i64) -> Option<usize> {
    const W: usize = 16;
    let (blocks, tail) = hay.as_chunks::<W>();
    for (b, block) in blocks.iter().enumerate() {
        if block
            .iter()
            .fold(false, |acc, &t| acc | ((t == token_id) == EQ))
        {
            return block
                .iter()
                .position(|&t| (t == token_id) == EQ)
                .map(|p| b * W + p);
        }
    }
    tail.iter()
        .position(|&t| (t == token_id) == EQ)
        .map(|p| blocks.len() * W + p)
}

/// Append the runs of `token_id` in one row.
fn scan_row(row: &[i64], token_id: i64, table: &mut RunTable) {
    let mut pos = 0usize;
    while let Some(skip) = row.get(pos..).and_then(|rest| find::<true>(rest, token_id)) {
        let start = pos + skip;
        let rest = row.get(start..).unwrap_or_default();
        let len = find::<false>(rest, token_id).unwrap_or(rest.len());
        table.run_starts.push(start as u64);
        table.run_lengths.push(len as u64);
        pos = start + len;
    }
}

/// One pass over the concatenated token ids of all rows (`tokens`), whose rows are delimited by
/// `token_row_offsets` (len rows+1, monotone, last == tokens.len(); else Err(Error::Batch)).
/// A run never crosses a row boundary.
///
/// `token_row_offsets[0]` must be 0 (the rows cover `tokens` exactly).
pub fn scan_runs(tokens: &[i64], token_row_offsets: &[u64], token_id: i64) -> Result<RunTable> {
    let rows = check_offsets(
        token_row_offsets,
        tokens.len(),
        "token_row_offsets",
        "the token buffer",
    )?;
    let mut table = RunTable {
        row_offsets: Vec::with_capacity(rows + 1),
        ..RunTable::default()
    };
    table.row_offsets.push(0);
    for w in token_row_offsets.windows(2) {
        // Checked above: 0 <= w[0] <= w[1] <= tokens.len().
        let row = tokens.get(w[0] as usize..w[1] as usize).unwrap_or_default();
        scan_row(row, token_id, &mut table);
        table.row_offsets.push(table.run_starts.len() as u64);
    }
    Ok(table)
}

/// How each image's feature count is derived.
///
/// Qwen2.5-VL / Qwen3-VL: `grid` is `image_grid_thw`, n×3 row-major `(t, h, w)` in patch units;
/// each image has `t*h*w / merge_size²` features. Every value must be >= 0 and `t*h*w` divisible
/// by `merge_size²`, else `Error::Batch` naming the image and its values; `merge_size` 0 is an
/// `Error::Schema`.
pub fn features_from_grid_thw(grid: &[i64], merge_size: u64) -> Result<Vec<u64>> {
    let merge_sq = merge_size
        .checked_mul(merge_size)
        .filter(|&m| m > 0)
        .ok_or_else(|| {
            schema_err!(
                "merge_size {merge_size} is not usable: it must be at least 1 and its square must \
                 fit in 64 bits"
            )
        })?;
    let (images, rest) = grid.as_chunks::<3>();
    if !rest.is_empty() {
        return Err(batch_err!(
            "the image grid has {} values, which is not a whole number of (t, h, w) rows",
            grid.len()
        ));
    }
    images
        .iter()
        .enumerate()
        .map(|(i, &[t, h, w])| {
            let (Ok(tu), Ok(hu), Ok(wu)) = (u64::try_from(t), u64::try_from(h), u64::try_from(w))
            else {
                return Err(batch_err!(
                    "image {i}: grid (t, h, w) = ({t}, {h}, {w}) has a negative value"
                ));
            };
            let thw = tu
                .checked_mul(hu)
                .and_then(|x| x.checked_mul(wu))
                .ok_or_else(|| {
                    batch_err!("image {i}: grid (t, h, w) = ({t}, {h}, {w}) overflows t*h*w")
                })?;
            if !thw.is_multiple_of(merge_sq) {
                return Err(batch_err!(
                    "image {i}: grid (t, h, w) = ({t}, {h}, {w}) gives t*h*w = {thw} patches, \
                     which is not divisible by merge_size² = {merge_sq}"
                ));
            }
            Ok(thw / merge_sq)
        })
        .collect()
}

/// Nemotron (RADIO, dynamic resolution): `sizes` is `imgs_sizes`, n×2 row-major `(H, W)` in
/// pixels; each image has `int((H // P) * ratio) * int((W // P) * ratio)` features, computed as
/// Python computes it (`H // P` exactly, then a float64 product, truncated). Negative sizes are an
/// `Error::Batch`; `patch_size` 0 or a ratio that is not finite and positive an `Error::Schema`.
pub fn features_from_image_sizes(
    sizes: &[i64],
    patch_size: u64,
    downsample_ratio: f64,
) -> Result<Vec<u64>> {
    if patch_size == 0 {
        return Err(schema_err!("patch_size is 0; it must be at least 1"));
    }
    if !(downsample_ratio.is_finite() && downsample_ratio > 0.0) {
        return Err(schema_err!(
            "downsample_ratio {downsample_ratio} is not a finite positive number"
        ));
    }
    let (images, rest) = sizes.as_chunks::<2>();
    if !rest.is_empty() {
        return Err(batch_err!(
            "the image sizes have {} values, which is not a whole number of (H, W) rows",
            sizes.len()
        ));
    }
    // int(x) of a float64 is exact below 2^64; larger tokens-per-side are no real image.
    const LIMIT: f64 = 18_446_744_073_709_551_616.0;
    images
        .iter()
        .enumerate()
        .map(|(i, &[h, w])| {
            let (Ok(hu), Ok(wu)) = (u64::try_from(h), u64::try_from(w)) else {
                return Err(batch_err!(
                    "image {i}: size (H, W) = ({h}, {w}) has a negative value"
                ));
            };
            // Python: (H // P) * ratio is int * float: the int is rounded to float64 (as `as`
            // does), the product rounded once; int() truncates toward zero.
            let side = |v: u64| {
                let x = (v / patch_size) as f64 * downsample_ratio;
                (x < LIMIT).then_some(x as u64)
            };
            side(hu)
                .zip(side(wu))
                .and_then(|(a, b)| a.checked_mul(b))
                .ok_or_else(|| {
                    batch_err!("image {i}: size (H, W) = ({h}, {w}) overflows the feature count")
                })
        })
        .collect()
}

/// A placeholder contract between a sequence field and a media field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaceholderRule<'a> {
    /// The contract's name, for messages.
    pub contract: &'a str,
    /// The field the runs are found in, e.g. `"input_ids"`.
    pub sequence_field: &'a str,
    /// The field whose images the runs stand for, e.g. `"pixel_values"`.
    pub media_field: &'a str,
    /// The placeholder token, e.g. 151655.
    pub token_id: i64,
    /// If set, every run must be immediately preceded by it.
    pub begin_token_id: Option<i64>,
    /// If set, every run must be immediately followed by it.
    pub end_token_id: Option<i64>,
}

/// "1 run", "16 runs".
fn plural<N: std::fmt::Display + PartialEq + From<u8>>(n: N, word: &str) -> String {
    let s = if n == N::from(1) { "" } else { "s" };
    format!("{n} {word}{s}")
}

/// What a row holds, for the tail of every message.
struct RowSummary {
    row: usize,
    runs: usize,
    run_tokens: u128,
    images: usize,
    features: u128,
}

impl std::fmt::Display for RowSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "row {} has {} totalling {} for {} totalling {}",
            self.row,
            plural(self.runs, "run"),
            plural(self.run_tokens, "token"),
            plural(self.images, "image"),
            plural(self.features, "feature"),
        )
    }
}

/// Check, row by row and in order, that the runs of `rule.token_id` match `expected` features
/// per image. `expected` is flat over images; `expected_row_offsets` (len rows+1) says which
/// images belong to which row. Also errors on: a row with placeholder tokens but no images, a row
/// with images but no placeholder tokens, a different number of runs than images, a missing
/// begin/end token. Returns the RunTable on success.
///
/// Offsets that are not CSR over their buffer (see [`scan_runs`]), or `expected_row_offsets`
/// with another row count, are an `Error::Batch`; a rule whose begin or end token is the
/// placeholder token itself an `Error::Schema`. Within a row the first failing image is
/// reported; for one image a wrong run length comes before a missing begin or end token. An image
/// of 0 features matches no run (a run has at least one token) and so always fails.
pub fn check_alignment(
    rule: &PlaceholderRule,
    tokens: &[i64],
    token_row_offsets: &[u64],
    expected: &[u64],
    expected_row_offsets: &[u64],
) -> Result<RunTable> {
    check_wrapping_tokens(rule)?;
    let table = scan_runs(tokens, token_row_offsets, rule.token_id)?;
    let rows = token_row_offsets.len() - 1;
    check_image_rows(rule, rows, expected, expected_row_offsets)?;
    for r in 0..rows {
        // All offsets were checked to be CSR over their buffers: the slices below are in range.
        let runs = table.row_offsets[r] as usize..table.row_offsets[r + 1] as usize;
        let images = expected_row_offsets[r] as usize..expected_row_offsets[r + 1] as usize;
        if runs.is_empty() && images.is_empty() {
            continue;
        }
        RowRuns {
            rule: *rule,
            r,
            tokens: &tokens[token_row_offsets[r] as usize..token_row_offsets[r + 1] as usize],
            starts: &table.run_starts[runs.clone()],
            lengths: &table.run_lengths[runs],
            first_image: images.start,
            feats: &expected[images],
        }
        .check()?;
    }
    Ok(table)
}

/// A begin or end token equal to the placeholder token could never be told from a run.
fn check_wrapping_tokens(rule: &PlaceholderRule) -> Result<()> {
    let (c, id) = (rule.contract, rule.token_id);
    for (what, t) in [("begin", rule.begin_token_id), ("end", rule.end_token_id)] {
        if t == Some(id) {
            return Err(schema_err!(
                "contract {c:?}: the {what} token {id} is the placeholder token itself"
            ));
        }
    }
    Ok(())
}

/// The image row offsets are CSR over `expected` and count the sequence's `rows`.
fn check_image_rows(
    rule: &PlaceholderRule,
    rows: usize,
    expected: &[u64],
    expected_row_offsets: &[u64],
) -> Result<()> {
    let image_rows = check_offsets(
        expected_row_offsets,
        expected.len(),
        "the image row offsets",
        "the expected feature counts",
    )?;
    if image_rows != rows {
        return Err(batch_err!(
            "contract {:?}: {} has {} but {} has {}",
            rule.contract,
            rule.sequence_field,
            plural(rows, "row"),
            rule.media_field,
            plural(image_rows, "row"),
        ));
    }
    Ok(())
}

/// One row's placeholder runs and the feature counts of its images, matched in order.
struct RowRuns<'a> {
    rule: PlaceholderRule<'a>,
    r: usize,
    /// The row's tokens.
    tokens: &'a [i64],
    /// Each run's start within the row.
    starts: &'a [u64],
    lengths: &'a [u64],
    /// The row's first image, counted over the batch.
    first_image: usize,
    /// Each image's feature count.
    feats: &'a [u64],
}

impl RowRuns<'_> {
    /// The first image or run without a match, as a `ContractError`.
    fn check(&self) -> Result<()> {
        for i in 0..self.lengths.len().max(self.feats.len()) {
            match (self.starts.get(i), self.lengths.get(i), self.feats.get(i)) {
                (Some(&start), Some(&len), Some(&want)) => self.check_run(i, start, len, want)?,
                (Some(&start), Some(&len), None) => return Err(self.extra_run(i, start, len)),
                (_, _, Some(&want)) => return Err(self.missing_run(i, want)),
                // starts and lengths have equal lengths, so this arm is unreachable.
                _ => {}
            }
        }
        Ok(())
    }

    /// The contract, placeholder token, sequence field and media field, as messages name them.
    fn names(&self) -> (&str, i64, &str, &str) {
        let rule = &self.rule;
        (
            rule.contract,
            rule.token_id,
            rule.sequence_field,
            rule.media_field,
        )
    }

    fn summary(&self) -> RowSummary {
        RowSummary {
            row: self.r,
            runs: self.lengths.len(),
            run_tokens: self.lengths.iter().map(|&l| u128::from(l)).sum(),
            images: self.feats.len(),
            features: self.feats.iter().map(|&f| u128::from(f)).sum(),
        }
    }

    fn image(&self, i: usize) -> String {
        format!("image {i} (image {} of the batch)", self.first_image + i)
    }

    /// Image `i`'s run: its length first, then the begin and end tokens around it.
    fn check_run(&self, i: usize, start: u64, len: u64, want: u64) -> Result<()> {
        let (c, id, seq, media) = self.names();
        let r = self.r;
        if len != want {
            return Err(contract_err!(
                "contract {c:?}: row {r}, {}: the run of token {id} at position {start} in {seq} \
                 has {} but {media} implies {}; {}",
                self.image(i),
                plural(u128::from(len), "token"),
                plural(u128::from(want), "feature"),
                self.summary()
            )
            .code(Code::PlaceholderCount)
            .field(media)
            .row(r)
            .item(i)
            .expected(want)
            .found(len));
        }
        let start = start as usize;
        let end = start + len as usize;
        if let Some(b) = self.rule.begin_token_id {
            let before = start.checked_sub(1).and_then(|p| self.tokens.get(p));
            self.check_wrapper(i, start, before, b, Code::PlaceholderBegin)?;
        }
        if let Some(e) = self.rule.end_token_id {
            self.check_wrapper(i, start, self.tokens.get(end), e, Code::PlaceholderEnd)?;
        }
        Ok(())
    }

    /// The token next to image `i`'s run (`found`, `None` past the row's edge) is `want`, the
    /// begin token (`code` [`Code::PlaceholderBegin`]) or the end token.
    fn check_wrapper(
        &self,
        i: usize,
        start: usize,
        found: Option<&i64>,
        want: i64,
        code: Code,
    ) -> Result<()> {
        if found == Some(&want) {
            return Ok(());
        }
        let (c, id, seq, _) = self.names();
        let r = self.r;
        let (relation, which, edge) = if code == Code::PlaceholderBegin {
            ("preceded", "begin", "the start of the row")
        } else {
            ("followed", "end", "the end of the row")
        };
        let found_text = match found {
            Some(t) => format!("token {t}"),
            None => edge.to_string(),
        };
        Err(contract_err!(
            "contract {c:?}: row {r}, {}: the run of token {id} at position {start} in {seq} is \
             not {relation} by the {which} token {want} (found {found_text}); {}",
            self.image(i),
            self.summary()
        )
        .code(code)
        .field(seq)
        .row(r)
        .item(i)
        .expected(want)
        .found(found.copied()))
    }

    /// Run `i` has no image to stand for.
    fn extra_run(&self, i: usize, start: u64, len: u64) -> Error {
        let (c, id, seq, media) = self.names();
        let (r, feats) = (self.r, self.feats);
        let why = if feats.is_empty() {
            format!("{media} has no image for this row")
        } else {
            format!(
                "{media} has only {} for this row (no image {i})",
                plural(feats.len(), "image")
            )
        };
        contract_err!(
            "contract {c:?}: row {r}, run {i}: {seq} has a run of {} of token {id} at position \
             {start} but {why}; {}",
            plural(u128::from(len), "token"),
            self.summary()
        )
        .code(Code::PlaceholderExtraRun)
        .field(seq)
        .row(r)
        .item(i)
        .expected(feats.len())
        .found(self.lengths.len())
    }

    /// Image `i` has no run standing for it.
    fn missing_run(&self, i: usize, want: u64) -> Error {
        let (c, id, seq, media) = self.names();
        let (r, lengths) = (self.r, self.lengths);
        let why = if lengths.is_empty() {
            format!("{seq} has no token {id} in this row")
        } else {
            format!(
                "{seq} has only {} of token {id} in this row",
                plural(lengths.len(), "run")
            )
        };
        contract_err!(
            "contract {c:?}: row {r}, {}: {media} implies {} but {why}; {}",
            self.image(i),
            plural(u128::from(want), "feature"),
            self.summary()
        )
        .code(Code::PlaceholderMissingRun)
        .field(media)
        .row(r)
        .item(i)
        .expected(self.feats.len())
        .found(lengths.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const QWEN_PAD: i64 = 151_655;
    const QWEN_START: i64 = 151_652;
    const QWEN_END: i64 = 151_653;
    const GEMMA_SOFT: i64 = 262_144;
    const GEMMA_BOI: i64 = 255_999;
    const GEMMA_EOI: i64 = 256_000;
    // Nemotron's ids come from the checkpoint's tokenizer; these stand for declared values.
    const NEMO_IMG: i64 = 18;
    const NEMO_IMAGE: i64 = 19;
    const NEMO_END_IMG: i64 = 20;

    fn rule(token_id: i64, begin: Option<i64>, end: Option<i64>) -> PlaceholderRule<'static> {
        PlaceholderRule {
            contract: "image_placeholders",
            sequence_field: "input_ids",
            media_field: "pixel_values",
            token_id,
            begin_token_id: begin,
            end_token_id: end,
        }
    }
    fn qwen() -> PlaceholderRule<'static> {
        rule(QWEN_PAD, Some(QWEN_START), Some(QWEN_END))
    }
    fn gemma() -> PlaceholderRule<'static> {
        rule(GEMMA_SOFT, Some(GEMMA_BOI), Some(GEMMA_EOI))
    }

    /// A batch: tokens and their row offsets, feature counts and their row offsets.
    #[derive(Debug, Clone, Default)]
    struct Batch {
        tokens: Vec<i64>,
        offs: Vec<u64>,
        expected: Vec<u64>,
        eoffs: Vec<u64>,
    }

    impl Batch {
        fn new() -> Batch {
            Batch {
                offs: vec![0],
                eoffs: vec![0],
                ..Batch::default()
            }
        }
        /// Append a row: `gap` text tokens, then per image [begin] token×f [end] and `gap` text
        /// tokens. Text ids count up from 100 and never collide with the special ids.
        fn row(&mut self, rule: &PlaceholderRule, features: &[u64], gap: usize) -> &mut Batch {
            let mut text = 100i64;
            let mut push_text = |tokens: &mut Vec<i64>| {
                for _ in 0..gap {
                    tokens.push(text);
                    text += 1;
                }
            };
            push_text(&mut self.tokens);
            for &f in features {
                self.tokens.extend(rule.begin_token_id);
                self.tokens
                    .extend(std::iter::repeat_n(rule.token_id, f as usize));
                self.tokens.extend(rule.end_token_id);
                push_text(&mut self.tokens);
            }
            self.offs.push(self.tokens.len() as u64);
            self.expected.extend_from_slice(features);
            self.eoffs.push(self.expected.len() as u64);
            self
        }
        fn check(&self, rule: &PlaceholderRule) -> Result<RunTable> {
            check_alignment(rule, &self.tokens, &self.offs, &self.expected, &self.eoffs)
        }
        fn contract_err(&self, rule: &PlaceholderRule) -> String {
            match self.check(rule) {
                Err(Error::Contract(m)) => m.message,
                other => panic!("expected a contract error, got {other:?}"),
            }
        }
        /// Row r's token range.
        fn row_range(&self, r: usize) -> std::ops::Range<usize> {
            self.offs[r] as usize..self.offs[r + 1] as usize
        }
    }

    /// Token-by-token reference scanner.
    fn naive_scan(tokens: &[i64], offs: &[u64], id: i64) -> RunTable {
        let mut t = RunTable {
            row_offsets: vec![0],
            ..RunTable::default()
        };
        for w in offs.windows(2) {
            let row = &tokens[w[0] as usize..w[1] as usize];
            let mut i = 0;
            while i < row.len() {
                if row[i] == id {
                    let s = i;
                    while i < row.len() && row[i] == id {
                        i += 1;
                    }
                    t.run_starts.push(s as u64);
                    t.run_lengths.push((i - s) as u64);
                } else {
                    i += 1;
                }
            }
            t.row_offsets.push(t.run_starts.len() as u64);
        }
        t
    }

    // ---- scan_runs ---------------------------------------------------------------------

    #[test]
    fn scan_empty_batch_and_empty_rows() {
        let t = scan_runs(&[], &[0], 7).expect("empty batch");
        assert_eq!(t.row_offsets, vec![0]);
        assert!(t.run_starts.is_empty() && t.run_lengths.is_empty());
        let t = scan_runs(&[], &[0, 0, 0], 7).expect("rows without tokens");
        assert_eq!(t.row_offsets, vec![0, 0, 0]);
        let t = scan_runs(&[1, 2, 3], &[0, 0, 3, 3], 7).expect("no runs");
        assert_eq!(t.row_offsets, vec![0, 0, 0, 0]);
    }

    #[test]
    fn scan_runs_at_row_edges_never_merge_across_rows() {
        let t = 7;
        // row 0: [T T 1 T] ; row 1: [T 1 1 T T] ; row 2: [] ; row 3: [T]
        let tokens = [t, t, 1, t, t, 1, 1, t, t, t];
        let t = scan_runs(&tokens, &[0, 4, 9, 9, 10], 7).expect("scan");
        assert_eq!(t.row_offsets, vec![0, 2, 4, 4, 5]);
        assert_eq!(t.run_starts, vec![0, 3, 0, 3, 0]);
        assert_eq!(t.run_lengths, vec![2, 1, 1, 2, 1]);
    }

    #[test]
    fn scan_long_runs_across_blocks() {
        let mut tokens = vec![1i64; 5];
        tokens.extend(std::iter::repeat_n(9i64, 40));
        tokens.extend([2, 9, 3]);
        tokens.extend(std::iter::repeat_n(9i64, 16));
        let n = tokens.len() as u64;
        let t = scan_runs(&tokens, &[0, n], 9).expect("scan");
        assert_eq!(t.run_starts, vec![5, 46, 48]);
        assert_eq!(t.run_lengths, vec![40, 1, 16]);
        assert_eq!(t, naive_scan(&tokens, &[0, n], 9));
    }

    #[test]
    fn scan_refuses_bad_offsets() {
        let tokens = [1i64, 2, 3, 4];
        for offs in [
            &[][..],
            &[1, 4],
            &[0, 3, 2, 4],
            &[0, 3],
            &[0, 5],
            &[0, 2, 5],
        ] {
            match scan_runs(&tokens, offs, 1) {
                Err(Error::Batch(m)) => assert!(m.contains("token_row_offsets"), "{m}"),
                other => panic!("{offs:?}: {other:?}"),
            }
        }
    }

    // ---- feature counts ----------------------------------------------------------------

    #[test]
    fn grid_thw_features() {
        let grid = [1, 34, 50, 2, 4, 4, 1, 2, 2, 0, 4, 4];
        assert_eq!(
            features_from_grid_thw(&grid, 2).expect("grid"),
            vec![425, 8, 1, 0]
        );
        assert_eq!(
            features_from_grid_thw(&[], 2).expect("empty"),
            Vec::<u64>::new()
        );
        let err = features_from_grid_thw(&[1, 4, 4, 1, 3, 3], 2).unwrap_err();
        assert!(
            matches!(&err, Error::Batch(m) if m.contains("image 1") && m.contains("(1, 3, 3)") && m.contains("9")),
            "{err:?}"
        );
        let err = features_from_grid_thw(&[1, 4, 4, 1, -4, 4], 2).unwrap_err();
        assert!(
            matches!(&err, Error::Batch(m) if m.contains("image 1") && m.contains("(1, -4, 4)")),
            "{err:?}"
        );
        assert!(matches!(
            features_from_grid_thw(&[1, 4, 4, 1], 2),
            Err(Error::Batch(_))
        ));
        assert!(matches!(
            features_from_grid_thw(&[i64::MAX, i64::MAX, 2], 2),
            Err(Error::Batch(_))
        ));
        assert!(matches!(
            features_from_grid_thw(&[1, 4, 4], 0),
            Err(Error::Schema(_))
        ));
        assert!(matches!(
            features_from_grid_thw(&[1, 4, 4], u64::MAX),
            Err(Error::Schema(_))
        ));
        assert_eq!(
            features_from_grid_thw(&[1, 3, 3], 1).expect("merge 1"),
            vec![9]
        );
    }

    #[test]
    fn image_size_features_match_python() {
        // Expected values computed in Python: int((H // P) * r) * int((W // P) * r).
        let cases: [(i64, i64, u64, f64, u64); 10] = [
            (512, 512, 16, 0.5, 256),
            (500, 333, 16, 0.5, 150),
            (15, 1000, 16, 0.5, 0),
            (0, 0, 16, 0.5, 0),
            (448, 448, 14, 0.5, 256),
            (1000, 700, 14, 1.0 / 3.0, 368),
            (3000, 2000, 16, 0.3, 2072),
            (999, 777, 16, 0.7, 1419),
            (1024, 768, 16, 1.0, 3072),
            (4096, 4096, 16, 0.1, 625),
        ];
        for (h, w, p, r, want) in cases {
            assert_eq!(
                features_from_image_sizes(&[h, w], p, r).expect("sizes"),
                vec![want],
                "{h}x{w} P={p} r={r}"
            );
        }
        assert_eq!(
            features_from_image_sizes(&[512, 512, 500, 333], 16, 0.5).expect("two"),
            vec![256, 150]
        );
        let err = features_from_image_sizes(&[512, 512, -1, 333], 16, 0.5).unwrap_err();
        assert!(
            matches!(&err, Error::Batch(m) if m.contains("image 1") && m.contains("(-1, 333)")),
            "{err:?}"
        );
        assert!(matches!(
            features_from_image_sizes(&[512], 16, 0.5),
            Err(Error::Batch(_))
        ));
        assert!(matches!(
            features_from_image_sizes(&[i64::MAX, i64::MAX], 1, 1e10),
            Err(Error::Batch(_))
        ));
        for (p, r) in [
            (0, 0.5),
            (16, 0.0),
            (16, -0.5),
            (16, f64::NAN),
            (16, f64::INFINITY),
        ] {
            assert!(
                matches!(
                    features_from_image_sizes(&[1, 1], p, r),
                    Err(Error::Schema(_))
                ),
                "P={p} r={r}"
            );
        }
    }

    // ---- check_alignment: passing batches ------------------------------------------------

    #[test]
    fn aligned_qwen_rows_pass() {
        let grid = [1, 34, 50, 1, 16, 16, 1, 8, 12];
        let feats = features_from_grid_thw(&grid, 2).expect("grid");
        assert_eq!(feats, vec![425, 64, 24]);
        let q = qwen();
        let mut b = Batch::new();
        b.row(&q, &feats[..2], 5)
            .row(&q, &[], 7)
            .row(&q, &feats[2..], 3);
        let t = b.check(&q).expect("aligned");
        assert_eq!(t.row_offsets, vec![0, 2, 2, 3]);
        assert_eq!(t.run_lengths, vec![425, 64, 24]);
        assert_eq!(t.run_starts, vec![6, 6 + 425 + 1 + 5 + 1, 4]);
        assert_eq!(t, scan_runs(&b.tokens, &b.offs, QWEN_PAD).expect("scan"));
    }

    #[test]
    fn aligned_gemma_rows_pass() {
        let g = gemma();
        let mut b = Batch::new();
        b.row(&g, &[256, 256], 2).row(&g, &[256], 2).row(&g, &[], 0);
        b.check(&g).expect("aligned");
        // Without begin/end tokens declared, the same rows pass too.
        b.check(&rule(GEMMA_SOFT, None, None)).expect("aligned");
    }

    #[test]
    fn aligned_nemotron_rows_pass() {
        let n = rule(NEMO_IMAGE, Some(NEMO_IMG), Some(NEMO_END_IMG));
        let feats =
            features_from_image_sizes(&[512, 512, 500, 333, 1024, 768], 16, 0.5).expect("sizes");
        assert_eq!(feats, vec![256, 150, 768]);
        let mut b = Batch::new();
        b.row(&n, &feats[..1], 4).row(&n, &feats[1..], 4);
        b.check(&n).expect("aligned");
    }

    #[test]
    fn empty_batches_and_rows_pass() {
        let q = qwen();
        let t = check_alignment(&q, &[], &[0], &[], &[0]).expect("empty batch");
        assert_eq!(t.row_offsets, vec![0]);
        let t = check_alignment(&q, &[], &[0, 0, 0], &[], &[0, 0, 0]).expect("empty rows");
        assert_eq!(t.row_offsets, vec![0, 0, 0]);
    }

    #[test]
    fn runs_at_row_edges_and_adjacent_rows_do_not_merge() {
        // Row 0 ends with a run, row 1 starts with one: two runs, not one of 5.
        let p = rule(9, None, None);
        let tokens = [1, 9, 9, 9, 9, 9, 2];
        check_alignment(&p, &tokens, &[0, 3, 7], &[2, 3], &[0, 1, 2]).expect("aligned");
        let m = match check_alignment(&p, &tokens, &[0, 3, 7], &[5], &[0, 1, 1]) {
            Err(Error::Contract(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(m.contains("row 0, image 0 (image 0 of the batch): the run of token 9 at position 1 in input_ids has 2 tokens but pixel_values implies 5 features"), "{m}");
        // A row that is one whole run.
        check_alignment(&p, &[9, 9, 9], &[0, 3], &[3], &[0, 1]).expect("whole row");
    }

    // ---- check_alignment: every kind of mismatch ---------------------------------------

    #[test]
    fn the_reported_crash_reads_well() {
        // Rows 0-6 hold one image each; row 7 holds 16 images whose runs were shrunk by the
        // generation engine (2010 tokens each) while the trainer's processor implies 2550.
        let q = qwen();
        let mut b = Batch::new();
        for _ in 0..7 {
            b.row(&q, &[64], 3);
        }
        b.row(&q, &[2010; 16], 1);
        b.expected[7..].fill(2550);
        let m = b.contract_err(&q);
        assert_eq!(
            m,
            "contract \"image_placeholders\": row 7, image 0 (image 7 of the batch): the run of \
             token 151655 at position 2 in input_ids has 2010 tokens but pixel_values implies \
             2550 features; row 7 has 16 runs totalling 32160 tokens for 16 images totalling \
             40800 features"
        );
    }

    #[test]
    fn a_wrong_run_length_names_row_and_image() {
        let g = gemma();
        let mut b = Batch::new();
        b.row(&g, &[256, 256], 2).row(&g, &[256, 256], 2);
        // Grow row 1's second run by one token.
        let r1 = b.row_range(1);
        let pos = r1.start + 2 + 1 + 256 + 1 + 2 + 1;
        b.tokens.insert(pos, GEMMA_SOFT);
        *b.offs.last_mut().expect("offs") += 1;
        let m = b.contract_err(&g);
        assert!(m.starts_with("contract \"image_placeholders\": row 1, image 1 (image 3 of the batch): the run of token 262144 at position 263 in input_ids has 257 tokens but pixel_values implies 256 features; row 1 has 2 runs totalling 513 tokens for 2 images totalling 512 features"), "{m}");
    }

    #[test]
    fn more_runs_than_images() {
        let g = gemma();
        let mut b = Batch::new();
        b.row(&g, &[256, 256], 2);
        b.expected.pop();
        *b.eoffs.last_mut().expect("eoffs") -= 1;
        let m = b.contract_err(&g);
        assert!(m.contains(": row 0, run 1: input_ids has a run of 256 tokens of token 262144 at position 263 but pixel_values has only 1 image for this row (no image 1); row 0 has 2 runs totalling 512 tokens for 1 image totalling 256 features"), "{m}");
    }

    #[test]
    fn fewer_runs_than_images() {
        let g = gemma();
        let mut b = Batch::new();
        b.row(&g, &[256], 2);
        b.expected.push(256);
        *b.eoffs.last_mut().expect("eoffs") += 1;
        let m = b.contract_err(&g);
        assert!(m.contains(": row 0, image 1 (image 1 of the batch): pixel_values implies 256 features but input_ids has only 1 run of token 262144 in this row; row 0 has 1 run totalling 256 tokens for 2 images totalling 512 features"), "{m}");
    }

    #[test]
    fn placeholder_tokens_without_images() {
        let q = qwen();
        let mut b = Batch::new();
        b.row(&q, &[4], 1).row(&q, &[4, 1], 1);
        b.expected.truncate(1);
        b.eoffs[2] = 1;
        let m = b.contract_err(&q);
        assert!(m.contains(": row 1, run 0: input_ids has a run of 4 tokens of token 151655 at position 2 but pixel_values has no image for this row; row 1 has 2 runs totalling 5 tokens for 0 images totalling 0 features"), "{m}");
    }

    #[test]
    fn images_without_placeholder_tokens() {
        let q = qwen();
        let mut b = Batch::new();
        b.row(&q, &[], 5).row(&q, &[4], 1);
        b.expected.insert(0, 9);
        b.eoffs = vec![0, 1, 2];
        let m = b.contract_err(&q);
        assert!(m.contains(": row 0, image 0 (image 0 of the batch): pixel_values implies 9 features but input_ids has no token 151655 in this row; row 0 has 0 runs totalling 0 tokens for 1 image totalling 9 features"), "{m}");
    }

    #[test]
    fn missing_begin_token() {
        let g = gemma();
        let mut b = Batch::new();
        b.row(&g, &[3, 3], 2).row(&g, &[3, 3], 2);
        // Row 1, image 1: the boi before the second run becomes a text token.
        let pos = b.row_range(1).start + 2 + 1 + 3 + 1 + 2;
        assert_eq!(b.tokens[pos], GEMMA_BOI);
        b.tokens[pos] = 5;
        let m = b.contract_err(&g);
        assert!(m.contains(": row 1, image 1 (image 3 of the batch): the run of token 262144 at position 10 in input_ids is not preceded by the begin token 255999 (found token 5); row 1 has 2 runs"), "{m}");
        // A run at the very start of a row has no begin token.
        let p = rule(9, Some(8), None);
        let err = check_alignment(&p, &[8, 9, 1, 9, 9], &[0, 3, 5], &[1, 2], &[0, 1, 2]);
        let m = err.unwrap_err().to_string();
        assert!(m.contains(": row 1, image 0 (image 1 of the batch): the run of token 9 at position 0 in input_ids is not preceded by the begin token 8 (found the start of the row)"), "{m}");
    }

    #[test]
    fn missing_end_token() {
        let q = qwen();
        let mut b = Batch::new();
        b.row(&q, &[3], 2).row(&q, &[3, 3], 2);
        let pos = b.row_range(1).start + 2 + 1 + 3;
        assert_eq!(b.tokens[pos], QWEN_END);
        b.tokens[pos] = 6;
        let m = b.contract_err(&q);
        assert!(m.contains(": row 1, image 0 (image 1 of the batch): the run of token 151655 at position 3 in input_ids is not followed by the end token 151653 (found token 6)"), "{m}");
        // A run at the very end of a row has no end token.
        let p = rule(9, None, Some(8));
        let m = check_alignment(&p, &[9, 8, 1, 9], &[0, 2, 4], &[1, 1], &[0, 1, 2])
            .unwrap_err()
            .to_string();
        assert!(m.contains(": row 1, image 0 (image 1 of the batch): the run of token 9 at position 1 in input_ids is not followed by the end token 8 (found the end of the row)"), "{m}");
    }

    #[test]
    fn malformed_inputs() {
        let q = qwen();
        let mut b = Batch::new();
        b.row(&q, &[4], 1).row(&q, &[4], 1);
        // expected_row_offsets for another row count
        let err = check_alignment(&q, &b.tokens, &b.offs, &b.expected, &[0, 2]).unwrap_err();
        assert!(
            matches!(&err, Error::Batch(m) if m.contains("2 rows") && m.contains("1 row")),
            "{err:?}"
        );
        // expected_row_offsets not ending at expected.len()
        let err = check_alignment(&q, &b.tokens, &b.offs, &b.expected, &[0, 1, 3]).unwrap_err();
        assert!(matches!(err, Error::Batch(_)), "{err:?}");
        let err = check_alignment(&q, &b.tokens, &b.offs, &b.expected, &[]).unwrap_err();
        assert!(matches!(err, Error::Batch(_)), "{err:?}");
        // token offsets not covering the tokens
        let err = check_alignment(&q, &b.tokens, &[0, 1], &b.expected, &b.eoffs).unwrap_err();
        assert!(matches!(err, Error::Batch(_)), "{err:?}");
        // a begin or end token equal to the placeholder
        for r in [rule(9, Some(9), None), rule(9, None, Some(9))] {
            let err = check_alignment(&r, &[], &[0], &[], &[0]).unwrap_err();
            assert!(matches!(err, Error::Schema(_)), "{err:?}");
        }
    }

    // ---- properties --------------------------------------------------------------------

    fn batch_strategy() -> impl Strategy<Value = (Vec<Vec<u64>>, usize, bool)> {
        (
            prop::collection::vec(prop::collection::vec(1u64..40, 0..5), 0..6),
            1usize..4,
            any::<bool>(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn scan_matches_a_naive_scan(
            tokens in prop::collection::vec(prop_oneof![3 => Just(7i64), 1 => 0i64..3], 0..200),
            cuts in prop::collection::vec(0usize..200, 0..6),
        ) {
            let mut cuts: Vec<u64> = cuts.into_iter().map(|c| c.min(tokens.len()) as u64).collect();
            cuts.push(0);
            cuts.push(tokens.len() as u64);
            cuts.sort_unstable();
            let t = scan_runs(&tokens, &cuts, 7).expect("scan");
            prop_assert_eq!(t, naive_scan(&tokens, &cuts, 7));
        }

        #[test]
        fn perturbed_runs_fail_naming_row_and_image(
            (rows, gap, delimited) in batch_strategy(),
            pick in any::<prop::sample::Index>(),
            grow in any::<bool>(),
        ) {
            let r = if delimited { qwen() } else { rule(QWEN_PAD, None, None) };
            let mut b = Batch::new();
            for feats in &rows {
                b.row(&r, feats, gap);
            }
            let t = b.check(&r).expect("aligned");
            prop_assert_eq!(&t.run_lengths, &b.expected);
            prop_assert_eq!(&t.row_offsets, &b.eoffs);
            if b.expected.is_empty() {
                return Ok(());
            }
            // Perturb image g (row `row`, image `i` within it) by one token.
            let g = pick.index(b.expected.len());
            let row = b.eoffs.partition_point(|&o| o <= g as u64) - 1;
            let i = g - b.eoffs[row] as usize;
            let pos = b.offs[row] as usize + t.run_starts[g] as usize;
            let shrink = !grow && b.expected[g] >= 2;
            if shrink {
                b.tokens.remove(pos);
            } else {
                b.tokens.insert(pos, QWEN_PAD);
            }
            for o in &mut b.offs[row + 1..] {
                if shrink { *o -= 1 } else { *o += 1 }
            }
            let m = b.contract_err(&r);
            let found = if shrink { b.expected[g] - 1 } else { b.expected[g] + 1 };
            let needle = format!(": row {row}, image {i} (image {g} of the batch): ");
            prop_assert!(m.contains(&needle), "{} not in {}", needle, m);
            let counts = format!("has {} but pixel_values implies {} feature", plural(found, "token"), b.expected[g]);
            prop_assert!(m.contains(&counts), "{} not in {}", counts, m);
        }
    }
}
