//! select / concat over one or two fuzzed frames: `ops::gather` → `encode` (1 thread) →
//! `parse_frame`. An `Ok` gather must encode, and its output must be a valid frame holding
//! exactly the picked rows; where `ops::direct` takes the frames, it must write the same bytes
//! (or refuse them too).
//!
//! Input: `[flags, split_lo, split_hi, k] ++ frames ++ k * 2 row bytes`.
//!   flags bit 0: two frames, split at `split` bytes of the frames part;
//!   flags bit 1: also gather the first frame with itself (concat of a frame and itself);
//!   k (mod 16): row picks, each a little-endian u16 reduced mod (total rows + 1), so that
//!   one value past the end is reachable too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use py_wire_codec::encode::EncodeOptions;
use py_wire_codec::ops::{direct, gather, output_metadata, split as split_rows, Rows, Source};
use py_wire_codec::{parse_frame, FrameLayout};

mod common;

/// The direct path (`ops::direct`), where it takes the sources, against the plan's result:
/// the same bytes and layout, or a refusal by both.
fn direct_agrees(sources: &[Source<'_>], selection: &Rows, planned: Option<&[u8]>) {
    let metadata = output_metadata(sources[0].layout);
    if !direct::takes(sources, &metadata) {
        return;
    }
    // Two threads from 48 bytes each: the fields are cut into pieces of 24 bytes, shared.
    let options = EncodeOptions {
        threads: 2,
        parallel_threshold: 48,
        operation_bytes: 0,
    };
    match (direct::take(sources, selection, metadata, options), planned) {
        (Ok((buf, layout)), Some(bytes)) => {
            assert_eq!(buf.as_slice(), bytes, "the direct path wrote other bytes");
            assert_eq!(layout, parse_frame(bytes).expect("planned frame parses"));
        }
        (Err(_), None) => {}
        (Ok(_), None) => panic!("the direct path wrote a frame the plan refused"),
        (Err(e), Some(_)) => panic!("the direct path refused a frame the plan wrote: {e:?}"),
    }
}

fn run(sources: &[Source<'_>], rows: Option<&[u64]>) {
    let selection = match rows {
        Some(r) => Rows::List(r.iter().map(|&v| v as i64).collect()),
        None => Rows::All,
    };
    let Ok(request) = gather(sources, &selection) else {
        direct_agrees(sources, &selection, None);
        return;
    };
    let options = EncodeOptions {
        threads: 1,
        ..Default::default()
    };
    let (out, layout) = match common::encode_and_parse(&request, options) {
        Ok(done) => done,
        Err(e) if common::rows_unbacked(&request, &e) => {
            direct_agrees(sources, &selection, None);
            return;
        }
        Err(e) => panic!("gather Ok but encode failed: {e:?}"),
    };
    direct_agrees(sources, &selection, Some(out.as_slice()));
    let total = sources
        .iter()
        .try_fold(0u64, |a, s| a.checked_add(s.layout.num_rows))
        .expect("gather accepted frames whose row counts overflow u64 when summed");
    let want = rows.map_or(total, |r| r.len() as u64);
    assert_eq!(
        layout.num_rows, want,
        "gathered frame has the wrong row count"
    );
    common::walk(out.as_slice(), &layout);
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (flags, split, k) = (
        data[0],
        u16::from_le_bytes([data[1], data[2]]) as usize,
        (data[3] % 16) as usize,
    );
    let body = &data[4..];
    let Some(frames_len) = body.len().checked_sub(2 * k) else {
        return;
    };
    let (frames, row_bytes) = body.split_at(frames_len);
    let parts: Vec<&[u8]> = if flags & 1 != 0 {
        let at = split.min(frames.len());
        vec![&frames[..at], &frames[at..]]
    } else {
        vec![frames]
    };
    let mut layouts: Vec<FrameLayout> = Vec::new();
    for p in &parts {
        match parse_frame(p) {
            Ok(l) => layouts.push(l),
            Err(_) => return,
        }
    }
    let sources: Vec<Source<'_>> = parts
        .iter()
        .zip(&layouts)
        .map(|(bytes, layout)| Source { bytes, layout })
        .collect();
    // Concatenate (rows = None).
    run(&sources, None);
    if flags & 2 != 0 {
        run(&[sources[0], sources[0]], None);
        // Split the first frame in two at a row derived from the input.
        let rows = sources[0].layout.num_rows;
        let cut = (split as u64).min(rows);
        if let Ok(requests) = split_rows(sources[0], &[cut, rows - cut]) {
            for request in requests {
                let options = EncodeOptions {
                    threads: 1,
                    ..Default::default()
                };
                let (out, layout) = match common::encode_and_parse(&request, options) {
                    Ok(done) => done,
                    Err(e) if common::rows_unbacked(&request, &e) => continue,
                    Err(e) => panic!("split Ok but encode failed: {e:?}"),
                };
                common::walk(out.as_slice(), &layout);
            }
        }
    }
    // Select rows derived from the input.
    let total = sources
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.layout.num_rows));
    let rows: Vec<u64> = row_bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as u64 % total.saturating_add(1).max(1))
        .collect();
    run(&sources, Some(&rows));
});
