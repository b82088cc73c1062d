//! Row selection over a frame: `ops::gather` with every `Rows` kind (lists with negative and
//! out-of-range indices, ranges of any step including 0 and negative, spans), `ops::split`
//! with arbitrary sizes, and concatenation of the frame with itself. Checked against an
//! independent model of the selection (Python's index and `range` rules, as `Rows` documents
//! them): never a panic; a selection the model refuses (a row out of range, step 0, a span
//! past the end, sizes that do not add up) is an `Err` (an argument error where it is the
//! selection's fault); an `Ok` request encodes, parses, passes the consumer walk, and holds
//! exactly the picked rows: row for row, every field's bytes (per-token tokens by the
//! sequence offsets, scalar values, packed segments with their shapes) equal the source row's.
//!
//! Input: a frame (its own length, as `parse_frame` reads it) ++ a selection program, so
//! `seeds/frames` are inputs as they are (an empty program runs a fixed set of selections).
//! Program bytes (missing ones read as 0), up to 4 ops: `[op, ...]`, op % 5:
//!   0 `Rows::List`: k = byte % 32 indices, each an i16 (flag bit 7 of op: an i64);
//!   1 `Rows::Range`: start, stop, step as i16 (bit 7: i64);
//!   2 `Rows::Spans`: k = byte % 16 spans of two u16;
//!   3 `ops::split`: k = byte % 8 sizes, each a u16 (bit 7: the last size is what is left);
//!   4 concat: `Rows::All` over the frame twice, then `Rows::List` over both of k i16 rows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use py_wire_codec::encode::{EncodeOptions, EncodeRequest};
use py_wire_codec::frame::layout::{read_seq_offsets, PackedTables};
use py_wire_codec::ops::{gather, split, Rows, Source};
use py_wire_codec::{parse_frame, Error, FrameLayout, Tier};

mod common;

use common::Bytes;

const MAX_OPS: usize = 4;

/// An index: an i16, or (`wide`) an i64.
fn int(p: &mut Bytes<'_>, wide: bool) -> i64 {
    if wide {
        p.u64() as i64
    } else {
        p.u16() as i16 as i64
    }
}

/// Every row's bytes, per field (by name): per-token tokens, a scalar's value, a packed row's
/// segments (shape, then bytes, each).
type RowBytes = Vec<(String, Vec<Vec<u8>>)>;

/// `Err` where the frame's index tables do not validate when read (`parse_frame` checks
/// their locations, the ops read and check their values).
fn row_bytes(buf: &[u8], layout: &FrameLayout) -> Result<RowBytes, Error> {
    let rows = layout.num_rows as usize;
    let seq = read_seq_offsets(buf, layout)?;
    let mut out = Vec::with_capacity(layout.fields.len());
    for f in &layout.fields {
        let loc = &f.values;
        let values = &buf[loc.offset..loc.offset + loc.nbytes];
        let es = loc.dtype.size();
        let item = |shape: &[u64]| shape[1..].iter().product::<u64>() as usize * es;
        let per_row: Vec<Vec<u8>> = match f.spec.tier {
            Tier::PerToken => {
                let seq = seq
                    .as_ref()
                    .expect("per-token fields with sequence offsets");
                let item = item(&loc.shape);
                (0..rows)
                    .map(|r| values[seq[r] as usize * item..seq[r + 1] as usize * item].to_vec())
                    .collect()
            }
            Tier::Scalar => {
                let item = item(&loc.shape);
                (0..rows)
                    .map(|r| values[r * item..(r + 1) * item].to_vec())
                    .collect()
            }
            Tier::Packed => {
                let t = PackedTables::read(buf, f, layout.num_rows)?;
                (0..rows)
                    .map(|r| {
                        let mut v = Vec::new();
                        for &id in t.row(r) {
                            for d in t.shape(id) {
                                v.extend_from_slice(&d.to_le_bytes());
                            }
                            let e = t.elements(id);
                            v.extend_from_slice(&values[e.start * es..e.end * es]);
                        }
                        v
                    })
                    .collect()
            }
        };
        out.push((f.spec.name.clone(), per_row));
    }
    Ok(out)
}

/// The rows a selection picks of `n` rows (indices into the concatenation), or `None` where
/// the selection is refused. Python's rules, computed directly.
fn model(rows: &Rows, n: u64) -> Option<Vec<u64>> {
    let n = i128::from(n);
    match rows {
        Rows::All => Some((0..n as u64).collect()),
        Rows::List(list) => list
            .iter()
            .map(|&r| {
                let r = i128::from(r);
                let i = if r < 0 { r + n } else { r };
                (0..n).contains(&i).then_some(i as u64)
            })
            .collect(),
        Rows::Range { start, stop, step } => {
            let (mut r, stop, step) = (i128::from(*start), i128::from(*stop), i128::from(*step));
            if step == 0 {
                return None;
            }
            let mut out = Vec::new();
            while (step > 0 && r < stop) || (step < 0 && r > stop) {
                // Distinct rows: more than n of them, and one is out of range.
                if !(0..n).contains(&r) || out.len() as i128 >= n {
                    return None;
                }
                out.push(r as u64);
                r += step;
            }
            Some(out)
        }
        Rows::Spans(spans) => {
            let mut out = Vec::new();
            for &(a, b) in spans {
                if a > b || i128::from(b) > n {
                    return None;
                }
                out.extend(a..b);
            }
            Some(out)
        }
    }
}

fn options() -> EncodeOptions {
    EncodeOptions {
        threads: 1,
        ..Default::default()
    }
}

/// An `Ok` request: encodes, parses, passes the walk, and its rows are `want`'s rows of the
/// sources (`sources[i / n]`, row `i % n`, all of one frame `src` of `n` rows).
fn check_output(request: &EncodeRequest<'_>, src: &RowBytes, n: u64, want: &[u64], what: &str) {
    let (out, layout) = match common::encode_and_parse(request, options()) {
        Ok(done) => done,
        Err(e) if common::rows_unbacked(request, &e) => return,
        Err(e) => panic!("{what}: selected, but did not encode: {e:?}"),
    };
    let buf = out.as_slice();
    common::walk(buf, &layout);
    assert_eq!(layout.num_rows, want.len() as u64, "{what}: row count");
    let got = row_bytes(buf, &layout).expect("an encoded frame's tables");
    assert_eq!(got.len(), src.len(), "{what}: fields");
    // Matched by name: fields are in data-section order, and empty values tensors share an
    // offset, which a reader orders by name (`layout::schema_field_table`), so an output with
    // no rows may list them in another order than its source.
    for (name, rows) in &got {
        let src_rows = src
            .iter()
            .find(|(src_name, _)| src_name == name)
            .map(|(_, rows)| rows)
            .unwrap_or_else(|| panic!("{what}: field {name:?} is not the source's"));
        for (i, (row, &pick)) in rows.iter().zip(want).enumerate() {
            let from = &src_rows[(pick % n.max(1)) as usize];
            assert!(
                row == from,
                "{what}: field {name:?}, row {i} is not source row {pick}"
            );
        }
    }
}

/// `gather` of `rows` over `sources` (each the same frame), against the model.
fn select(sources: &[Source<'_>], src: &RowBytes, rows: &Rows, what: &str) {
    let n = sources[0].layout.num_rows;
    let total = n * sources.len() as u64;
    let want = model(rows, total);
    match (gather(sources, rows), want) {
        (Ok(request), Some(want)) => check_output(&request, src, n, &want, what),
        (Ok(_), None) => panic!("{what}: {rows:?} of {total} rows accepted, the model refuses"),
        (Err(e), Some(_)) => panic!("{what}: {rows:?} of {total} rows refused: {e:?}"),
        (Err(e), None) => assert!(
            matches!(e, Error::Argument(_)),
            "{what}: {rows:?} refused, but not as an argument error: {e:?}"
        ),
    }
}

fn split_check(source: Source<'_>, src: &RowBytes, sizes: &[u64]) {
    let n = source.layout.num_rows;
    let adds_up = sizes.iter().try_fold(0u64, |a, &s| a.checked_add(s)) == Some(n);
    match split(source, sizes) {
        Ok(requests) => {
            assert!(adds_up, "split: sizes {sizes:?} of {n} rows accepted");
            assert_eq!(requests.len(), sizes.len());
            let mut start = 0u64;
            for (request, &size) in requests.iter().zip(sizes) {
                let want: Vec<u64> = (start..start + size).collect();
                check_output(request, src, n, &want, "split");
                start += size;
            }
        }
        Err(e) => assert!(
            !adds_up && matches!(e, Error::Argument(_)),
            "split: sizes {sizes:?} of {n} rows refused: {e:?}"
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(layout) = parse_frame(data) else {
        return;
    };
    let frame_len = layout.header.frame_len;
    let (frame, program) = data.split_at(frame_len.min(data.len()));
    let source = Source {
        bytes: frame,
        layout: &layout,
    };
    // The frame's index tables may still be refused when read (parse_frame checks where
    // they lie, not every value); then the ops refuse the frame too.
    let src = match row_bytes(frame, &layout) {
        Ok(src) => src,
        Err(_) => {
            assert!(
                gather(&[source], &Rows::All).is_err(),
                "unreadable tables gathered"
            );
            return;
        }
    };
    let n = layout.num_rows;
    let ni = n as i64;
    if program.is_empty() {
        select(&[source], &src, &Rows::All, "all");
        let reversed = Rows::List((0..ni).rev().chain([-1, ni / 2]).collect());
        select(&[source], &src, &reversed, "reversed list");
        for (start, stop, step) in [(ni - 1, -1, -1), (0, ni, 2), (ni, 0, -2)] {
            let range = Rows::Range { start, stop, step };
            select(&[source], &src, &range, "range");
        }
        let spans = Rows::Spans(vec![(n / 2, n), (0, n / 2), (0, n)]);
        select(&[source], &src, &spans, "spans");
        select(&[source], &src, &Rows::List(vec![ni]), "one past the end");
        split_check(source, &src, &[n / 2, n - n / 2]);
        select(&[source, source], &src, &Rows::All, "concat");
        return;
    }
    // At most MAX_OPS selections per input (each one encodes and parses a frame): the rest of
    // a long tail is ignored.
    let mut p = Bytes(program);
    for _ in 0..MAX_OPS {
        if p.0.is_empty() {
            break;
        }
        let op = p.u8();
        let wide = op & 0x80 != 0;
        match op % 5 {
            0 => {
                let k = p.u8() % 32;
                let list = (0..k).map(|_| int(&mut p, wide)).collect();
                select(&[source], &src, &Rows::List(list), "list");
            }
            1 => {
                let (start, stop, step) = (int(&mut p, wide), int(&mut p, wide), int(&mut p, wide));
                select(&[source], &src, &Rows::Range { start, stop, step }, "range");
            }
            2 => {
                let k = p.u8() % 16;
                let spans = (0..k)
                    .map(|_| (u64::from(p.u16()), u64::from(p.u16())))
                    .collect();
                select(&[source], &src, &Rows::Spans(spans), "spans");
            }
            3 => {
                let k = p.u8() % 8;
                let mut sizes: Vec<u64> = (0..k).map(|_| u64::from(p.u16())).collect();
                if wide {
                    let used = sizes.iter().sum::<u64>();
                    sizes.push(n.saturating_sub(used));
                }
                split_check(source, &src, &sizes);
            }
            _ => {
                select(&[source, source], &src, &Rows::All, "concat");
                let k = p.u8() % 32;
                let list = (0..k).map(|_| int(&mut p, false)).collect();
                select(&[source, source], &src, &Rows::List(list), "concat list");
            }
        }
    }
});
